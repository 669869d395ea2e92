package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/dop251/goja"
)

// jsLoop is the event loop of one VM. The VM is only ever touched on the
// goroutine that calls run; asynchronous work (timers, fetch, steps) runs
// elsewhere and hands its completion back through post.
type jsLoop struct {
	vm      *goja.Runtime
	jobs    chan func()
	pending int // outstanding async operations; only touched on the loop goroutine
	// watch, when set, is called before each job runs and returns the
	// function that ends its watch (the workflow's runaway watchdog).
	watch func() (done func())
	// web holds the internals of the web platform (js/web.js) that Go
	// helpers such as jsReadableStream call; nil in a VM without it.
	web *goja.Object
}

// newJSLoop returns a loop for vm.
func newJSLoop(vm *goja.Runtime) *jsLoop {
	return &jsLoop{vm: vm, jobs: make(chan func(), 64)}
}

// begin registers an outstanding operation; its completion must be passed
// to post exactly once.
func (l *jsLoop) begin() { l.pending++ }

// post hands a completion back to the loop goroutine (safe from any goroutine).
func (l *jsLoop) post(fn func()) { l.jobs <- func() { l.pending--; fn() } }

// postDetached hands fn to the loop goroutine without it being pending work
// (an unreferenced timer such as AbortSignal.timeout's): it is dropped when
// the loop is not being run and its queue is full.
func (l *jsLoop) postDetached(fn func()) {
	select {
	case l.jobs <- fn:
	default:
	}
}

// errLoopIdle reports that a promise is still pending but nothing is left
// that could settle it (for a workflow: it must suspend).
var errLoopIdle = errors.New("event loop idle with the promise pending")

// await runs jobs until p settles, ctx ends, or the loop goes idle.
func (l *jsLoop) await(ctx context.Context, p *goja.Promise) (goja.Value, error) {
	for {
		if v, err := settledResult(p); !errors.Is(err, errLoopIdle) || l.pending == 0 {
			return v, err
		}
		select {
		case fn := <-l.jobs:
			if l.watch != nil {
				done := l.watch()
				fn()
				done()
			} else {
				fn()
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// jsThrown is a JavaScript value thrown or rejected by user code.
type jsThrown struct{ Value goja.Value }

func (e *jsThrown) Error() string {
	if o, ok := e.Value.(*goja.Object); ok {
		if m := o.Get("message"); m != nil && !goja.IsUndefined(m) {
			return m.String()
		}
	}
	return e.Value.String()
}

// name returns the thrown error's name property ("FatalError", "TypeError"…).
func (e *jsThrown) name() string {
	if o, ok := e.Value.(*goja.Object); ok {
		if n := o.Get("name"); n != nil && !goja.IsUndefined(n) {
			return n.String()
		}
	}
	return ""
}

// stack returns the thrown error's stack (frames of user code are
// TypeScript file:line:column through the bundle's source map), bounded by
// runErrorMaxStack; "" when it has none.
func (e *jsThrown) stack() string {
	o, ok := e.Value.(*goja.Object)
	if !ok {
		return ""
	}
	s := o.Get("stack")
	if s == nil || goja.IsUndefined(s) || goja.IsNull(s) {
		return ""
	}
	// Show the user's names and positions: markSteps's renaming and goja's
	// bytecode offsets ("file.ts:3:19(7)") are the runtime's business.
	st := strings.ReplaceAll(s.String(), "__svc_step_", "")
	st = stackOffset.ReplaceAllString(st, "$1")
	if len(st) > runErrorMaxStack {
		st = st[:runErrorMaxStack]
	}
	return st
}

// stackOffset matches goja's bytecode offset after a frame's position.
var stackOffset = regexp.MustCompile(`(:\d+:\d+)\(\d+\)`)

// callAsync calls fn with args and returns its result as a promise (a
// synchronous return value or throw is wrapped).
func callAsync(vm *goja.Runtime, fn goja.Value, args ...goja.Value) *goja.Promise {
	f, ok := goja.AssertFunction(fn)
	p, resolve, reject := vm.NewPromise()
	if !ok {
		reject(vm.NewTypeError("not a function"))
		return p
	}
	v, err := f(goja.Undefined(), args...)
	if err != nil {
		var ex *goja.Exception
		if errors.As(err, &ex) {
			reject(ex.Value())
		} else {
			reject(vm.NewGoError(err))
		}
		return p
	}
	if o, ok := v.(*goja.Object); ok {
		if pr, ok := o.Export().(*goja.Promise); ok {
			return pr
		}
	}
	resolve(v)
	return p
}

// installTimersAndFetch gives a step VM setTimeout/clearTimeout and a
// fetch() returning a Response with status, ok, headers.get, text() and json().
func installTimersAndFetch(l *jsLoop, client *http.Client) {
	vm := l.vm
	timers := map[int64]*time.Timer{}
	var nextID int64
	vm.Set("setTimeout", func(call goja.FunctionCall) goja.Value {
		fn, ok := goja.AssertFunction(call.Argument(0))
		if !ok {
			panic(vm.NewTypeError("setTimeout: callback is not a function"))
		}
		ms := call.Argument(1).ToInteger()
		args := call.Arguments[min(2, len(call.Arguments)):]
		nextID++
		id := nextID
		l.begin()
		timers[id] = time.AfterFunc(time.Duration(ms)*time.Millisecond, func() {
			l.post(func() {
				if _, live := timers[id]; !live {
					return
				}
				delete(timers, id)
				fn(goja.Undefined(), args...)
			})
		})
		return vm.ToValue(id)
	})
	vm.Set("clearTimeout", func(id int64) {
		if t, ok := timers[id]; ok && t.Stop() {
			delete(timers, id)
			l.pending--
		}
	})
	vm.Set("fetch", func(call goja.FunctionCall) goja.Value {
		p, resolve, reject := vm.NewPromise()
		req, err := fetchRequest(vm, call.Argument(0), call.Argument(1))
		if err != nil {
			reject(vm.NewTypeError(err.Error()))
			return vm.ToValue(p)
		}
		l.begin()
		go func() {
			resp, err := client.Do(req)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
				resp.Body.Close()
			}
			l.post(func() {
				if err != nil {
					reject(vm.NewTypeError("fetch failed: " + err.Error()))
					return
				}
				resolve(fetchResponse(vm, resp, body))
			})
		}()
		return vm.ToValue(p)
	})
}

// fetchRequest builds the HTTP request of fetch(input, init).
func fetchRequest(vm *goja.Runtime, input, init goja.Value) (*http.Request, error) {
	method, body := "GET", ""
	headers := map[string]string{}
	if o, ok := init.(*goja.Object); ok {
		if m := o.Get("method"); m != nil && !goja.IsUndefined(m) {
			method = strings.ToUpper(m.String())
		}
		if b := o.Get("body"); b != nil && !goja.IsUndefined(b) && !goja.IsNull(b) {
			body = b.String()
		}
		if h, ok := o.Get("headers").(*goja.Object); ok {
			for _, k := range h.Keys() {
				headers[k] = h.Get(k).String()
			}
		}
	}
	req, err := http.NewRequest(method, input.String(), strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// fetchResponse builds the Response object handed to JavaScript.
func fetchResponse(vm *goja.Runtime, resp *http.Response, body []byte) goja.Value {
	r := vm.NewObject()
	r.Set("status", resp.StatusCode)
	r.Set("statusText", http.StatusText(resp.StatusCode))
	r.Set("ok", resp.StatusCode >= 200 && resp.StatusCode < 300)
	r.Set("url", resp.Request.URL.String())
	h := vm.NewObject()
	h.Set("get", func(name string) goja.Value {
		if v := resp.Header.Get(name); v != "" {
			return vm.ToValue(v)
		}
		return goja.Null()
	})
	r.Set("headers", h)
	settled := func(v goja.Value, err error) goja.Value {
		p, resolve, reject := vm.NewPromise()
		if err != nil {
			reject(vm.NewTypeError(err.Error()))
		} else {
			resolve(v)
		}
		return vm.ToValue(p)
	}
	r.Set("text", func() goja.Value { return settled(vm.ToValue(string(body)), nil) })
	r.Set("json", func() goja.Value { return settled(jsonParse(vm, body)) })
	return r
}

// jsonParse parses JSON text into a VM value with the VM's own JSON.parse.
func jsonParse(vm *goja.Runtime, text []byte) (goja.Value, error) {
	parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
	return parse(goja.Undefined(), vm.ToValue(string(text)))
}

// jsonStringify serialises a VM value with the VM's own JSON.stringify;
// undefined becomes null.
func jsonStringify(vm *goja.Runtime, v goja.Value) (json.RawMessage, error) {
	stringify, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	out, err := stringify(goja.Undefined(), v)
	if err != nil {
		return nil, err
	}
	if goja.IsUndefined(out) {
		return json.RawMessage("null"), nil
	}
	return json.RawMessage(out.String()), nil
}
