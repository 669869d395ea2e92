package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
)

// vmPoolSize bounds the idle VMs kept per workflow (step VMs) and the
// pre-warmed workflow VMs.
const vmPoolSize = 32

// defaultStepTimeout bounds one step attempt unless svc.config.ts sets the
// workflow's stepTimeout. An attempt past it fails (and is retried), even
// one that never yields (its VM is interrupted and discarded).
const defaultStepTimeout = 10 * time.Minute

// stepVM is a VM in which a module's "use step" functions run with the real
// clock, timers and fetch. Step VMs are pooled per workflow and reused.
type stepVM struct {
	vm    *goja.Runtime
	loop  *jsLoop
	steps map[string]goja.Value
	// out receives the console lines and stream chunks of the attempt
	// using the VM (set by start, ended and cleared when it settles); only
	// the goroutine running the VM touches it.
	out *stepOutputs
}

// stepOutputs is where one step attempt's console lines and stream chunks
// (getWritable(), engine_stream.go) go; either may be nil.
type stepOutputs struct {
	keep  func(slog.Level, string)
	write func(streamChunk) error
	ended bool // the attempt has settled: its streams refuse writes
}

// stepRunner runs step functions outside the deterministic workflow VM.
type stepRunner struct {
	env      func() map[string]string
	log      *slog.Logger
	platform *jsPlatform
}

// newStepRunner returns a runner whose VMs see env as process.env and get
// platform's globals and data.
func newStepRunner(env func() map[string]string, platform *jsPlatform, log *slog.Logger) *stepRunner {
	return &stepRunner{env: env, log: log, platform: platform}
}

// newVM evaluates m in a fresh step VM, collecting its step implementations.
func (s *stepRunner) newVM(m *jsModule) (*stepVM, error) {
	sv := &stepVM{steps: map[string]goja.Value{}}
	_, _, err := newModuleVM(m, vmOptions{
		Env:   s.env(),
		Setup: func(vm *goja.Runtime) { sv.vm, sv.loop = vm, newJSLoop(vm) },
		Install: func(ambient *goja.Object) {
			s.platform.install(sv.loop, ambient)
			ambient.Set("getWritable", sv.getWritable)
		},
		Log: s.log.With("module", m.File),
		Console: func(level slog.Level, msg string) {
			if sv.out != nil && sv.out.keep != nil {
				sv.out.keep(level, msg)
			}
		},
		Globals: map[string]any{"__svc_step": func(name string, impl goja.Value) goja.Value {
			sv.steps[name] = impl
			return impl
		}},
	})
	if err != nil {
		return nil, err
	}
	return sv, nil
}

// start calls step name of def with the JSON array args. When the step
// settles without waiting on I/O or timers (the common case for CPU-only
// steps) the result is returned at once and finish is nil; otherwise finish
// must be called, on another goroutine, to wait for the result (it gives up
// when ctx ends). A thrown error is a *jsThrown. out (nil: nowhere)
// receives the attempt's console lines and stream chunks; its fetch, sql
// and storage calls are traced under trace.
func (s *stepRunner) start(def *workflowDef, name string, args json.RawMessage, out *stepOutputs, trace otelUserTrace) (result json.RawMessage, finish func(context.Context) (json.RawMessage, error), err error) {
	var sv *stepVM
	select {
	case sv = <-def.stepVMs:
	default:
		if sv, err = s.newVM(def.Module); err != nil {
			return nil, nil, err
		}
	}
	impl, ok := sv.steps[name]
	if !ok {
		return nil, nil, fmt.Errorf("step %q not found in %s", name, def.File)
	}
	argv, err := jsonParse(sv.vm, args)
	if err != nil {
		return nil, nil, err
	}
	arr := argv.ToObject(sv.vm)
	list := make([]goja.Value, arr.Get("length").ToInteger())
	for i := range list {
		list[i] = arr.Get(strconv.Itoa(i))
	}
	sv.out, sv.loop.trace = out, trace
	limit := def.StepTimeout
	deadline := time.Now().Add(limit)
	var timedOut atomic.Bool
	watchdog := time.AfterFunc(limit, func() { timedOut.Store(true); sv.vm.Interrupt(errStepTimedOut) })
	p := callAsync(sv.vm, impl, list...)
	if p.State() != goja.PromiseStatePending || sv.loop.pending == 0 {
		watchdog.Stop()
		result, err = s.settle(def, sv, p, name, nil, &timedOut)
		return result, nil, err
	}
	return nil, func(ctx context.Context) (json.RawMessage, error) {
		defer watchdog.Stop()
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		return s.settle(def, sv, p, name, ctx, &timedOut)
	}, nil
}

// errStepTimedOut interrupts a step VM whose attempt ran past its timeout.
var errStepTimedOut = errors.New("step timed out")

// settle waits (with ctx, or not at all when ctx is nil) for the step's
// promise, returns the VM to the pool when it is idle, and encodes the
// result. timedOut reports whether the watchdog interrupted the VM.
func (s *stepRunner) settle(def *workflowDef, sv *stepVM, p *goja.Promise, name string, ctx context.Context, timedOut *atomic.Bool) (json.RawMessage, error) {
	var v goja.Value
	var err error
	if ctx == nil {
		v, err = settledResult(p)
	} else {
		v, err = sv.loop.await(ctx, p)
	}
	sv.loop.release() // before the VM can go back to the pool
	if sv.out != nil {
		sv.out.ended = true // a stream the attempt opened writes no more
	}
	if timedOut.Load() || errors.Is(err, context.DeadlineExceeded) {
		// The VM may have been interrupted mid-code: it is not reused.
		s.platform.abandon(sv.loop)
		return nil, fmt.Errorf("step %s timed out after %v (set workflows.%s.stepTimeout in svc.config.ts to change it)", name, def.StepTimeout, def.Name)
	}
	if errors.Is(err, errLoopIdle) {
		return nil, fmt.Errorf("step %s returned a promise that never settles", name)
	}
	var out json.RawMessage
	if err == nil {
		out, err = jsonStringify(sv.vm, v)
	}
	sv.out, sv.loop.trace = nil, otelUserTrace{}
	if sv.loop.pending == 0 {
		select {
		case def.stepVMs <- sv:
		default:
		}
	} else {
		s.platform.abandon(sv.loop)
	}
	return out, err
}

// settledResult returns the outcome of a promise that is no longer pending
// (errLoopIdle when it is).
func settledResult(p *goja.Promise) (goja.Value, error) {
	switch p.State() {
	case goja.PromiseStateFulfilled:
		return p.Result(), nil
	case goja.PromiseStateRejected:
		return nil, &jsThrown{Value: p.Result()}
	}
	return nil, errLoopIdle
}
