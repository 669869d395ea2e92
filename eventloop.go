package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

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
	// web returns the internals of the web platform (js/web.js) that Go
	// helpers such as jsReadableStream call, installing the platform on
	// first use; nil in a VM without it.
	web func() *goja.Object
	// held are the open native streams of the current invocation (a fetch
	// body user code has not read to its end nor cancelled), closed by
	// release when the invocation settles; only the loop goroutine, or the
	// one that ran it after it stopped, touches it.
	held map[io.Closer]struct{}
	// trace is what the outbound calls of the current invocation are traced
	// under (otel_user.go): a step attempt's span, or nothing.
	trace otelUserTrace
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

// hold registers c, an open native stream, as the current invocation's.
func (l *jsLoop) hold(c io.Closer) {
	if l.held == nil {
		l.held = map[io.Closer]struct{}{}
	}
	l.held[c] = struct{}{}
}

// unhold forgets c: it was read to its end, failed, or was cancelled.
func (l *jsLoop) unhold(c io.Closer) { delete(l.held, c) }

// release closes the streams the invocation left open (a step that
// returned a fetch's status without reading its body): the connection
// goes back at once instead of at the client's timeout. Called when a
// step or tool call settles, on the goroutine that ran the loop.
func (l *jsLoop) release() {
	for c := range l.held {
		c.Close()
	}
	clear(l.held)
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

// jsonParse parses JSON text into a VM value, as the VM's JSON.parse
// does. goja's JSON.parse reads encoding/json's tokens one interface value
// at a time (8 % of W2's CPU went to the run's input, step arguments and
// step results); jsonDecoder builds the same values directly, and text it
// does not take (malformed, or nested past jsonParseDepth) goes to the VM's
// JSON.parse, whose SyntaxError user code sees as before.
func jsonParse(vm *goja.Runtime, text []byte) (goja.Value, error) {
	d := jsonDecoder{vm: vm, s: text}
	if v, ok := d.value(0); ok && d.end() {
		return v, nil
	}
	parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
	return parse(goja.Undefined(), vm.ToValue(string(text)))
}

// jsonParseDepth is the deepest nesting jsonDecoder takes itself.
const jsonParseDepth = 512

// jsonDecoder builds VM values from JSON text s, from position i: objects
// with their keys as own data properties in text order (a later duplicate
// replaces the value), numbers as goja makes them from float64, strings
// decoded by encoding/json when they hold escapes or invalid UTF-8 (as
// goja's JSON.parse decodes them).
type jsonDecoder struct {
	vm *goja.Runtime
	s  []byte
	i  int
}

// ws skips JSON whitespace.
func (d *jsonDecoder) ws() {
	for d.i < len(d.s) && (d.s[d.i] == ' ' || d.s[d.i] == '\t' || d.s[d.i] == '\n' || d.s[d.i] == '\r') {
		d.i++
	}
}

// end reports whether only whitespace is left.
func (d *jsonDecoder) end() bool {
	d.ws()
	return d.i == len(d.s)
}

// value decodes the value at d.i; false when the text is not JSON there.
func (d *jsonDecoder) value(depth int) (goja.Value, bool) {
	d.ws()
	if d.i >= len(d.s) || depth > jsonParseDepth {
		return nil, false
	}
	switch c := d.s[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, ok := d.str()
		if !ok {
			return nil, false
		}
		return d.vm.ToValue(s), true
	case c == 't':
		return d.literal("true", d.vm.ToValue(true))
	case c == 'f':
		return d.literal("false", d.vm.ToValue(false))
	case c == 'n':
		return d.literal("null", goja.Null())
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, false
}

// literal consumes word, whose value is v.
func (d *jsonDecoder) literal(word string, v goja.Value) (goja.Value, bool) {
	if !bytes.HasPrefix(d.s[d.i:], []byte(word)) {
		return nil, false
	}
	d.i += len(word)
	return v, true
}

// number consumes a number in JSON's grammar.
func (d *jsonDecoder) number() (goja.Value, bool) {
	start := d.i
	if d.s[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	intStart := d.i
	if n := digits(); n == 0 || (n > 1 && d.s[intStart] == '0') {
		return nil, false
	}
	if d.i < len(d.s) && d.s[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.s) && (d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		d.i++
		if d.i < len(d.s) && (d.s[d.i] == '+' || d.s[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	f, err := strconv.ParseFloat(string(d.s[start:d.i]), 64)
	if err != nil {
		return nil, false
	}
	return d.vm.ToValue(f), true
}

// str consumes a string and returns its value.
func (d *jsonDecoder) str() (string, bool) {
	start := d.i
	d.i++
	plain := true
	for d.i < len(d.s) {
		switch c := d.s[d.i]; {
		case c == '"':
			d.i++
			raw := d.s[start:d.i]
			if plain && utf8.Valid(raw) {
				return string(raw[1 : len(raw)-1]), true
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plain = false
			d.i += 2
		case c < 0x20:
			return "", false
		default:
			d.i++
		}
	}
	return "", false
}

// object consumes an object.
func (d *jsonDecoder) object(depth int) (goja.Value, bool) {
	o := d.vm.NewObject()
	d.i++
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return o, true
	}
	for {
		d.ws()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.ws()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, false
		}
		d.i++
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		// Defined, not set: "__proto__" is an own property, as JSON.parse makes it.
		if o.DefineDataProperty(k, v, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE) != nil {
			return nil, false
		}
		if end, ok := d.separator('}'); !ok || end {
			return o, ok
		}
	}
}

// array consumes an array.
func (d *jsonDecoder) array(depth int) (goja.Value, bool) {
	d.i++
	d.ws()
	var items []any
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return d.vm.NewArray(), true
	}
	for {
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		items = append(items, v)
		if end, ok := d.separator(']'); !ok || end {
			return d.vm.NewArray(items...), ok
		}
	}
}

// separator consumes what follows a member: a comma (end false) or the
// closing byte (end true); ok is false for anything else.
func (d *jsonDecoder) separator(closing byte) (end, ok bool) {
	d.ws()
	if d.i >= len(d.s) {
		return false, false
	}
	switch d.s[d.i] {
	case ',':
		d.i++
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
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
