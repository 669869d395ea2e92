package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/dop251/goja"
)

// The web platform's JavaScript half (DESIGN §9), compiled once: every VM
// evaluates the same Programs, so a new VM pays only for defining the
// classes, never for parsing them.
var (
	//go:embed js/web.js
	webSource  string
	webProgram = goja.MustCompile("svc:web.js", webSource, false)
	//go:embed js/web_fetch.js
	webFetchSource  string
	webFetchProgram = goja.MustCompile("svc:web_fetch.js", webFetchSource, false)
)

// jsStreamChunk is the most a native stream (jsReadableStream) reads at once.
const jsStreamChunk = 64 << 10

// installWebPrelude evaluates js/web.js and js/web_fetch.js in vm with
// natives (Go functions the classes call) and returns the internals web.js
// hands back to the runtime.
func installWebPrelude(vm *goja.Runtime, natives *goja.Object) (*goja.Object, error) {
	installAsyncIterator(vm) // the platform's streams are async iterables
	web, err := runWebProgram(vm, webProgram, natives)
	if err != nil {
		return nil, err
	}
	if _, err := runWebProgram(vm, webFetchProgram, natives, web); err != nil {
		return nil, err
	}
	return web, nil
}

// runWebProgram evaluates a web prelude program (a function expression)
// and calls it with args; it returns the object the function returns.
func runWebProgram(vm *goja.Runtime, p *goja.Program, args ...goja.Value) (*goja.Object, error) {
	fv, err := vm.RunProgram(p)
	if err != nil {
		return nil, fmt.Errorf("run web platform: %w", err)
	}
	f, ok := goja.AssertFunction(fv)
	if !ok {
		return nil, errors.New("run web platform: the prelude is not a function")
	}
	out, err := f(goja.Undefined(), args...)
	if err != nil {
		return nil, fmt.Errorf("run web platform: %w", err)
	}
	o, _ := out.(*goja.Object)
	return o, nil
}

// jsUint8Array returns a new Uint8Array holding b; the array owns b (the
// caller must not change it afterwards).
func jsUint8Array(vm *goja.Runtime, b []byte) goja.Value {
	o, err := vm.New(vm.Get("Uint8Array"), vm.ToValue(vm.NewArrayBuffer(b)))
	if err != nil {
		panic(err)
	}
	return o
}

// jsArrayBuffer returns a new ArrayBuffer holding b; it owns b afterwards.
func jsArrayBuffer(vm *goja.Runtime, b []byte) goja.Value {
	return vm.ToValue(vm.NewArrayBuffer(b))
}

// typeArrayBuffer is what an ArrayBuffer exports as.
var typeArrayBuffer = reflect.TypeOf(goja.ArrayBuffer{})

// jsBytesView returns the bytes of v when it is an ArrayBuffer, a typed
// array or a DataView, without copying: the slice aliases the VM's memory
// and is valid only until JavaScript runs again on the VM. ok is false for
// any other value.
func jsBytesView(v goja.Value) (b []byte, ok bool) {
	o, isObj := v.(*goja.Object)
	if !isObj {
		return nil, false
	}
	t := o.ExportType()
	switch {
	case t == typeArrayBuffer:
		return o.Export().(goja.ArrayBuffer).Bytes(), true
	case t == nil:
		return nil, false
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		if b, ok := o.Export().([]byte); ok {
			return b, true
		}
	}
	// Other typed arrays and DataView (which exports as an object): the
	// bytes they view in their buffer.
	buf, isObj := o.Get("buffer").(*goja.Object)
	if !isObj || buf.ExportType() != typeArrayBuffer {
		return nil, false
	}
	all := buf.Export().(goja.ArrayBuffer).Bytes()
	off, n := o.Get("byteOffset").ToInteger(), o.Get("byteLength").ToInteger()
	if off < 0 || n < 0 || off+n > int64(len(all)) {
		return nil, false
	}
	return all[off : off+n], true
}

// jsBytes returns a copy of the bytes of v when it is an ArrayBuffer, a
// typed array or a DataView; ok is false for any other value.
func jsBytes(v goja.Value) ([]byte, bool) {
	b, ok := jsBytesView(v)
	if !ok {
		return nil, false
	}
	return bytes.Clone(b), true
}

// jsReadableStream returns a ReadableStream of Uint8Array chunks read from
// rc on another goroutine, one read per chunk user code waits for (a read
// in flight counts as pending work of l, nothing else does). The stream
// closes rc at its end, on error, when cancelled, and when the invocation
// that opened it settles unread (jsLoop.release). A read that fails
// because its context was cancelled rejects with an AbortError.
func jsReadableStream(l *jsLoop, rc io.ReadCloser) goja.Value {
	vm := l.vm
	buf := make([]byte, jsStreamChunk) // reads never overlap: the stream pulls one at a time
	l.hold(rc)
	end := func() { l.unhold(rc); rc.Close() }
	read := func() goja.Value {
		p, resolve, reject := vm.NewPromise()
		l.begin()
		go func() {
			n, err := rc.Read(buf)
			chunk := bytes.Clone(buf[:n])
			l.post(func() {
				switch {
				case n > 0 || err == nil:
					resolve(jsUint8Array(vm, chunk))
				case errors.Is(err, io.EOF):
					end()
					resolve(goja.Null())
				default:
					end()
					reject(jsReadError(l, err))
				}
			})
		}()
		return vm.ToValue(p)
	}
	cancel := end
	ns, _ := goja.AssertFunction(l.web().Get("nativeStream"))
	s, err := ns(goja.Undefined(), vm.ToValue(read), vm.ToValue(cancel))
	if err != nil {
		panic(err)
	}
	return s
}

// jsReadError is the JavaScript error of a failed native read: an
// AbortError when its context was cancelled, else a TypeError.
func jsReadError(l *jsLoop, err error) goja.Value {
	if errors.Is(err, context.Canceled) {
		return jsDOMException(l, "The operation was aborted.", "AbortError")
	}
	return l.vm.NewTypeError("read body: " + err.Error())
}

// jsDOMException returns a new DOMException of the platform in l's VM.
func jsDOMException(l *jsLoop, message, name string) goja.Value {
	f, _ := goja.AssertFunction(l.web().Get("domError"))
	v, err := f(goja.Undefined(), l.vm.ToValue(message), l.vm.ToValue(name))
	if err != nil {
		panic(err)
	}
	return v
}

// jsReadStream reads the ReadableStream of byte chunks v to its end and
// returns a promise of one Uint8Array; it rejects with a RangeError past
// limit bytes and with a TypeError when v is not a ReadableStream.
func jsReadStream(l *jsLoop, v goja.Value, limit int64) *goja.Promise {
	f, _ := goja.AssertFunction(l.web().Get("streamBytes"))
	p, err := f(goja.Undefined(), v, l.vm.ToValue(limit)) // an async function: it rejects, never throws
	if err != nil {
		panic(err)
	}
	return p.Export().(*goja.Promise)
}

// webGlobals are the globals the platform defines; a VM installs them on
// first use (see installWebLazily). fetch is added in step and tool VMs.
var webGlobals = []string{
	"DOMException", "Event", "EventTarget", "AbortController", "AbortSignal", "ReadableStream",
	"ReadableStreamDefaultReader", "ReadableStreamDefaultController", "WritableStream",
	"WritableStreamDefaultWriter", "WritableStreamDefaultController", "reportError", "TextEncoder",
	"TextDecoder", "atob", "btoa", "structuredClone", "queueMicrotask", "CryptoKey", "crypto", "performance",
	"URL", "URLSearchParams", "Headers", "Blob", "File", "FormData", "Request", "Response",
}

// installWebLazily makes the platform's globals appear on their first
// touch: the global object's prototype becomes a webLazyGlobals, which
// ordinary name resolution consults only for names the global object
// lacks; touching one of names evaluates the platform (natives builds its
// Go half), which defines them all on the global object, where later
// lookups find them directly. A VM whose code uses none of the web
// platform pays one small object for it (VM creation stays close to what
// it was before the platform). It returns the function that installs the
// platform (once) and returns its internals.
func installWebLazily(vm *goja.Runtime, names []string, natives func() *goja.Object) func() *goja.Object {
	lz := &webLazyGlobals{vm: vm, names: names}
	lz.ensure = func() *goja.Object {
		if lz.web == nil && !lz.installing {
			lz.installing = true // the preludes' own lookups must not re-enter
			lz.web = mustRunWeb(vm, natives())
			lz.installing = false
		}
		return lz.web
	}
	proto := vm.NewDynamicObject(lz)
	proto.SetPrototype(vm.GlobalObject().Prototype())
	vm.GlobalObject().SetPrototype(proto)
	return lz.ensure
}

// webLazyGlobals is the goja.DynamicObject behind the global object's
// prototype (installWebLazily): it answers for the platform's names by
// installing the platform, and for nothing else.
type webLazyGlobals struct {
	vm         *goja.Runtime
	names      []string
	web        *goja.Object // the platform's internals once installed
	installing bool
	ensure     func() *goja.Object
}

// has reports whether key is one of the platform's names still to install.
func (lz *webLazyGlobals) has(key string) bool {
	return lz.web == nil && !lz.installing && slices.Contains(lz.names, key)
}

// Get installs the platform on the first lookup of one of its names.
func (lz *webLazyGlobals) Get(key string) goja.Value {
	if !lz.has(key) {
		return nil
	}
	lz.ensure()
	return lz.vm.GlobalObject().Get(key)
}

// Set lets code replace a platform global before its first use (the
// platform is installed first, so the replacement is what stays).
func (lz *webLazyGlobals) Set(key string, v goja.Value) bool {
	if !lz.has(key) {
		return false
	}
	lz.ensure()
	return lz.vm.GlobalObject().Set(key, v) == nil
}

// Has reports the platform's names as present before they are installed.
func (lz *webLazyGlobals) Has(key string) bool { return lz.has(key) }

// Delete refuses: the platform's names are deleted from the global object.
func (lz *webLazyGlobals) Delete(string) bool { return false }

// Keys is empty: the platform's globals are not enumerable.
func (lz *webLazyGlobals) Keys() []string { return nil }

// installWeb gives the VM of l the web platform of steps and agent tools
// (installed on first use) and sets l.web.
func installWeb(l *jsLoop, client *http.Client) {
	start := time.Now()
	l.web = installWebLazily(l.vm, append(webGlobals, "fetch"), func() *goja.Object {
		n := webNatives(l.vm, true)
		fetchNatives(l, n, client)
		n.Set("now", func() float64 { return float64(time.Since(start).Microseconds()) / 1000 })
		n.Set("timeOrigin", float64(start.UnixMicro())/1000)
		n.Set("unrefTimeout", func(fn goja.Callable, ms int64) {
			time.AfterFunc(time.Duration(max(ms, 0))*time.Millisecond, func() {
				l.postDetached(func() { fn(goja.Undefined()) })
			})
		})
		return n
	})
}

// installWebWorkflow gives a workflow VM the deterministic part of the
// web platform: no fetch, timers or clock, and crypto's randomness from
// the run's seeded generator (__svc_random and __svc_uuid, which
// js/workflow_prelude.js relies on too).
func installWebWorkflow(vm *goja.Runtime) {
	installWebLazily(vm, webGlobals, func() *goja.Object {
		n := webNatives(vm, false)
		n.Set("randomUUID", func(goja.FunctionCall) goja.Value {
			f, _ := goja.AssertFunction(vm.Get("__svc_uuid"))
			v, err := f(goja.Undefined())
			if err != nil {
				panic(err)
			}
			return v
		})
		return n
	})
}

// webNatives returns the Go functions the platform's classes call; random
// adds the system's random generator.
func webNatives(vm *goja.Runtime, random bool) *goja.Object {
	n := vm.NewObject()
	encodingNatives(vm, n)
	cryptoNatives(vm, n, random)
	urlNatives(vm, n)
	n.Set("bodyLimit", fetchBodyLimit)
	return n
}

// mustRunWeb evaluates the platform's programs with natives n.
func mustRunWeb(vm *goja.Runtime, n *goja.Object) *goja.Object {
	web, err := installWebPrelude(vm, n)
	if err != nil {
		panic(err) // the runtime's own programs: a bug, not user input
	}
	return web
}
