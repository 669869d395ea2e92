package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// stepVMPoolSize bounds the idle step VMs kept per module.
const stepVMPoolSize = 64

// stepTimeout bounds one step attempt.
const stepTimeout = 10 * time.Minute

// stepVM is a VM in which a module's "use step" functions run with the real
// clock, timers and fetch. VMs are pooled per module and reused.
type stepVM struct {
	vm    *goja.Runtime
	loop  *jsLoop
	steps map[string]goja.Value
}

// stepRunner runs step functions outside the deterministic workflow VM.
type stepRunner struct {
	env    func() map[string]string
	log    *slog.Logger
	client *http.Client

	mu    sync.Mutex
	pools map[*jsModule]chan *stepVM
}

// newStepRunner returns a runner whose VMs see env as process.env.
func newStepRunner(env func() map[string]string, log *slog.Logger) *stepRunner {
	return &stepRunner{env: env, log: log, client: &http.Client{Timeout: 5 * time.Minute}, pools: map[*jsModule]chan *stepVM{}}
}

// pool returns the idle-VM pool of m.
func (s *stepRunner) pool(m *jsModule) chan *stepVM {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pools[m]
	if !ok {
		p = make(chan *stepVM, stepVMPoolSize)
		s.pools[m] = p
	}
	return p
}

// newVM evaluates m in a fresh step VM, collecting its step implementations.
func (s *stepRunner) newVM(m *jsModule) (*stepVM, error) {
	sv := &stepVM{steps: map[string]goja.Value{}}
	_, _, err := newModuleVM(m, vmOptions{
		Env:   s.env(),
		Setup: func(vm *goja.Runtime) { sv.vm, sv.loop = vm, newJSLoop(vm) },
		Log:   s.log.With("module", m.File),
		Globals: map[string]any{"__svc_step": func(name string, impl goja.Value) goja.Value {
			sv.steps[name] = impl
			return impl
		}},
	})
	if err != nil {
		return nil, err
	}
	installTimersAndFetch(sv.loop, s.client)
	return sv, nil
}

// run calls step name of m with the JSON array args and returns its JSON
// result. A thrown error is returned as *jsThrown.
func (s *stepRunner) run(m *jsModule, name string, args json.RawMessage) (json.RawMessage, error) {
	pool := s.pool(m)
	var sv *stepVM
	select {
	case sv = <-pool:
	default:
		var err error
		if sv, err = s.newVM(m); err != nil {
			return nil, err
		}
	}
	impl, ok := sv.steps[name]
	if !ok {
		return nil, fmt.Errorf("step %q not found in %s", name, m.File)
	}
	argv, err := jsonParse(sv.vm, args)
	if err != nil {
		return nil, err
	}
	arr := argv.ToObject(sv.vm)
	var list []goja.Value
	for i := 0; i < int(arr.Get("length").ToInteger()); i++ {
		list = append(list, arr.Get(fmt.Sprint(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	v, err := sv.loop.await(ctx, callAsync(sv.vm, impl, list...))
	if err == errLoopIdle {
		return nil, fmt.Errorf("step %s returned a promise that never settles", name)
	}
	if err != nil {
		if sv.loop.pending == 0 {
			s.put(pool, sv)
		}
		return nil, err
	}
	out, err := jsonStringify(sv.vm, v)
	if sv.loop.pending == 0 {
		s.put(pool, sv)
	}
	return out, err
}

// put returns an idle VM to its pool, dropping it when the pool is full.
func (s *stepRunner) put(pool chan *stepVM, sv *stepVM) {
	select {
	case pool <- sv:
	default:
	}
}

// close drops every pooled VM.
func (s *stepRunner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools = map[*jsModule]chan *stepVM{}
}
