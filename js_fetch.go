package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/dop251/goja"
)

// fetchBodyLimit bounds what Response.text(), json(), arrayBuffer(),
// bytes(), blob() and formData() read of one body (a RangeError past it);
// a body read as a stream (response.body) has no limit.
const fetchBodyLimit = 64 << 20

// installTimers gives the VM of l setTimeout, setInterval and their clears.
// A live timer is pending work of l; a cleared one no longer is.
func installTimers(l *jsLoop) {
	vm := l.vm
	timers := map[int64]*time.Timer{}
	var nextID int64
	schedule := func(call goja.FunctionCall, repeat bool) goja.Value {
		fn, ok := goja.AssertFunction(call.Argument(0))
		if !ok {
			panic(vm.NewTypeError("setTimeout/setInterval: callback is not a function"))
		}
		d := time.Duration(max(call.Argument(1).ToInteger(), 0)) * time.Millisecond
		if repeat {
			d = max(d, time.Millisecond) // an interval of 0 must not spin
		}
		args := call.Arguments[min(2, len(call.Arguments)):]
		nextID++
		id := nextID
		var fire func()
		fire = func() {
			l.post(func() {
				if _, live := timers[id]; !live {
					return
				}
				if repeat {
					l.begin()
					timers[id] = time.AfterFunc(d, fire)
				} else {
					delete(timers, id)
				}
				if _, err := fn(goja.Undefined(), args...); err != nil {
					reportJSError(vm, err)
				}
			})
		}
		l.begin()
		timers[id] = time.AfterFunc(d, fire)
		return vm.ToValue(id)
	}
	clear := func(id goja.Value) {
		n := id.ToInteger()
		if t, ok := timers[n]; ok {
			delete(timers, n)
			if t.Stop() {
				l.pending-- // its post will never come
			}
		}
	}
	vm.Set("setTimeout", func(call goja.FunctionCall) goja.Value { return schedule(call, false) })
	vm.Set("setInterval", func(call goja.FunctionCall) goja.Value { return schedule(call, true) })
	vm.Set("clearTimeout", clear)
	vm.Set("clearInterval", clear)
}

// reportJSError passes an error thrown by a callback the platform called
// to the global reportError (which logs it), as browsers do.
func reportJSError(vm *goja.Runtime, err error) {
	var ex *goja.Exception
	if !errors.As(err, &ex) {
		return
	}
	if f, ok := goja.AssertFunction(vm.Get("reportError")); ok {
		f(goja.Undefined(), ex.Value())
	}
}

// fetchNatives adds the Go half of fetch() (js/web_fetch.js builds the
// Request and the Response around it): fetch(method, url, headers, body,
// redirect) sends the request on client and returns [promise, abort]. The
// promise resolves, once the response's headers are in, to {status,
// statusText, url, redirected, headers: [[name, value]...], body: a
// ReadableStream}; abort cancels the request, closing its connection.
func fetchNatives(l *jsLoop, n *goja.Object, client *http.Client) {
	vm := l.vm
	n.Set("fetch", func(method, url string, headers goja.Value, body goja.Value, redirect string) goja.Value {
		ctx, cancel := context.WithCancel(context.Background())
		var rd io.Reader
		if b, ok := jsBytes(body); ok {
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			cancel()
			panic(vm.NewTypeError("fetch: %v", err))
		}
		var pairs [][]string
		if err := vm.ExportTo(headers, &pairs); err != nil {
			cancel()
			panic(vm.NewTypeError("fetch: headers: %v", err))
		}
		for _, kv := range pairs {
			if len(kv) == 2 {
				req.Header.Add(kv[0], kv[1])
			}
		}
		traced := l.trace.fetch(req)
		c := client
		if redirect != "follow" {
			cc := *client
			cc.CheckRedirect = func(*http.Request, []*http.Request) error {
				if redirect == "manual" {
					return http.ErrUseLastResponse
				}
				return errors.New("redirect mode is \"error\"")
			}
			c = &cc
		}
		p, resolve, reject := vm.NewPromise()
		l.begin()
		go func() {
			resp, err := c.Do(req)
			traced(resp, err)
			l.post(func() {
				if err != nil {
					cancel()
					if errors.Is(err, context.Canceled) {
						reject(jsDOMException(l, "This operation was aborted", "AbortError"))
					} else {
						reject(vm.NewTypeError("fetch failed: %v", err))
					}
					return
				}
				resolve(fetchResponseInit(l, resp))
			})
		}()
		abort := func() { cancel() }
		return vm.ToValue([]any{p, abort})
	})
}

// fetchResponseInit is what the Go half of fetch resolves with.
func fetchResponseInit(l *jsLoop, resp *http.Response) goja.Value {
	vm := l.vm
	var headers [][2]string
	for k, vs := range resp.Header {
		k = strings.ToLower(k)
		for _, v := range vs {
			headers = append(headers, [2]string{k, v})
		}
	}
	o := vm.NewObject()
	o.Set("status", resp.StatusCode)
	o.Set("statusText", strings.TrimSpace(strings.TrimPrefix(resp.Status, fmt.Sprint(resp.StatusCode))))
	o.Set("url", resp.Request.URL.String())
	o.Set("redirected", resp.Request.Response != nil) // the response that redirected here
	o.Set("headers", headers)
	o.Set("body", jsReadableStream(l, resp.Body))
	return o
}
