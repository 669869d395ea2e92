package main

// js_storage.go: `storage` of the ambient "svc" module (DESIGN §9): the project's bucket for
// steps, agent tools and agent code, through the S3 client of storage_client.go. Every call
// validates its arguments on the VM's loop, does its I/O on a goroutine, and settles its
// promise back on the loop (jsLoop.begin/post). Workflow VMs get a storage whose members
// throw: workflow code is replayed and must not do I/O.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
)

// Limits of the storage API of user code.
const (
	// storageMaxReadAll bounds what text(), json(), bytes() and arrayBuffer() read into
	// memory; a larger object is read through body or in ranges.
	storageMaxReadAll = 64 << 20
	// storageEagerBody is how much of a GetObject body is read before get() resolves: a body
	// that fits is held and its connection released at once, so an object that is never read
	// holds no connection.
	storageEagerBody = 64 << 10
	// storageMaxContentType bounds a content type given to put.
	storageMaxContentType = 256
)

// storageErrNotConfigured is the error of every call while the runtime has no object storage.
var storageErrNotConfigured = &storageError{Code: "NotConfigured", Message: "object storage is not configured: svc dev sets it up at boot (the built-in endpoint, or SVC_S3_ENDPOINT with the S3_* keys of .env)"}

// storageWorkflowMessage is what storage members throw in workflow code, worded as
// js/workflow_prelude.js words fetch's.
const storageWorkflowMessage = `storage cannot be used in workflow code (it is replayed and must be deterministic): move it into a step (a function whose body starts with "use step")`

// storageMembers are the members of storage, in the order the d.ts documents them.
var storageMembers = []string{"put", "get", "head", "list", "delete", "presign"}

// storageArgError is an invalid argument of user code; it becomes a TypeError.
type storageArgError struct{ msg string }

// Error returns the message.
func (e *storageArgError) Error() string { return e.msg }

// storageArgf returns a storageArgError for member.
func storageArgf(member, format string, args ...any) error {
	return &storageArgError{"storage." + member + ": " + fmt.Sprintf(format, args...)}
}

// jsStorage is the storage object of one step or tool VM. Its fields are touched only on
// the VM's loop goroutine, but for target, which boot may set at any time.
type jsStorage struct {
	l      *jsLoop
	vm     *goja.Runtime
	target *atomic.Pointer[storageClient]
}

// storageInstall sets ambient.storage for the VM of l, reaching the bucket target holds
// when a call is made (nil: not configured).
func storageInstall(l *jsLoop, ambient *goja.Object, target *atomic.Pointer[storageClient]) {
	s := &jsStorage{l: l, vm: l.vm, target: target}
	o := s.vm.NewObject()
	o.Set("put", s.put)
	o.Set("get", s.get)
	o.Set("head", s.head)
	o.Set("list", s.list)
	o.Set("delete", s.delete)
	o.Set("presign", s.presign)
	ambient.Set("storage", o)
}

// storageInstallWorkflow sets ambient.storage of a workflow VM: every member throws saying
// to move the call into a step.
func storageInstallWorkflow(vm *goja.Runtime, ambient *goja.Object) {
	o := vm.NewObject()
	// One function for every member: each workflow VM makes these.
	throw := vm.ToValue(func(goja.FunctionCall) goja.Value {
		e, _ := vm.New(vm.Get("Error"), vm.ToValue(storageWorkflowMessage))
		panic(e)
	})
	for _, m := range storageMembers {
		o.Set(m, throw)
	}
	ambient.Set("storage", o)
}

// async runs work (arguments already validated) on a goroutine with the configured client
// and settles the returned promise on the loop with the value done builds there (done runs
// on the loop, so it may touch the VM); an unset target rejects at once.
func (s *jsStorage) async(work func(ctx context.Context, c *storageClient) (done func() (goja.Value, error), err error)) goja.Value {
	p, resolve, reject := s.vm.NewPromise()
	c := s.target.Load()
	if c == nil {
		reject(s.error(storageErrNotConfigured))
		return s.vm.ToValue(p)
	}
	s.l.begin()
	go func() {
		done, err := work(s.l.trace.withContext(context.Background()), c)
		s.l.post(func() {
			var v goja.Value
			if err == nil {
				v, err = done()
			}
			if err != nil {
				reject(s.error(err))
				return
			}
			resolve(v)
		})
	}()
	return s.vm.ToValue(p)
}

// rejected returns a promise rejected with err.
func (s *jsStorage) rejected(err error) goja.Value {
	p, _, reject := s.vm.NewPromise()
	reject(s.error(err))
	return s.vm.ToValue(p)
}

// error converts err into the JS value user code catches: a TypeError for an invalid
// argument, a StorageError (name "StorageError", code, status) for what the endpoint
// answered or a failure to reach it, the exception itself for an error thrown by JS.
func (s *jsStorage) error(err error) goja.Value {
	var arg *storageArgError
	var se *storageError
	var ex *goja.Exception
	var thrown *jsThrown
	switch {
	case errors.As(err, &thrown):
		return thrown.Value
	case errors.As(err, &arg):
		return s.vm.NewTypeError(arg.msg)
	case errors.As(err, &se):
		o, _ := s.vm.New(s.vm.Get("Error"), s.vm.ToValue(se.Error()))
		o.Set("name", "StorageError")
		o.Set("code", se.Code)
		o.Set("status", se.Status)
		return o
	case errors.As(err, &ex):
		return ex.Value()
	}
	return s.vm.NewGoError(err)
}

// storageKey validates an object key: a string of 1 to s3MaxKeyLength bytes of UTF-8 (a
// lone UTF-16 surrogate has none).
func storageKey(member string, v goja.Value) (string, error) {
	str, ok := v.(goja.String)
	if !ok {
		return "", storageArgf(member, "the key must be a string, not %s", storageTypeOf(v))
	}
	key := v.String()
	switch {
	case key == "":
		return "", storageArgf(member, "the key must not be empty")
	case len(key) > s3MaxKeyLength:
		return "", storageArgf(member, "the key is %d bytes of UTF-8; at most %d are allowed", len(key), s3MaxKeyLength)
	case !storageWellFormed(str):
		return "", storageArgf(member, "the key holds a lone UTF-16 surrogate, which has no UTF-8 form")
	}
	return key, nil
}

// storageWellFormed reports whether s is well-formed UTF-16 (every surrogate paired).
func storageWellFormed(s goja.String) bool {
	n := s.Length()
	for i := 0; i < n; i++ {
		c := s.CharAt(i)
		switch {
		case c >= 0xD800 && c <= 0xDBFF:
			if i+1 == n || s.CharAt(i+1) < 0xDC00 || s.CharAt(i+1) > 0xDFFF {
				return false
			}
			i++
		case c >= 0xDC00 && c <= 0xDFFF:
			return false
		}
	}
	return true
}

// storageTypeOf names the type of a JS value for error messages.
func storageTypeOf(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	}
	if o, ok := v.(*goja.Object); ok {
		if _, ok := goja.AssertFunction(o); ok {
			return "a function"
		}
		if o.ClassName() == "Array" {
			return "an array"
		}
		return "an object"
	}
	if _, ok := v.(goja.String); ok {
		return "a string"
	}
	switch v.Export().(type) {
	case int64, float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "a " + v.ExportType().String()
}

// storageOptions reads the options object of member: undefined, null or an object whose
// keys are all in allowed.
func storageOptions(vm *goja.Runtime, member string, v goja.Value, allowed ...string) (*goja.Object, error) {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return vm.NewObject(), nil
	}
	o, ok := v.(*goja.Object)
	if !ok || storageTypeOf(v) != "an object" {
		return nil, storageArgf(member, "options must be an object, not %s", storageTypeOf(v))
	}
	for _, k := range o.Keys() {
		if !slices.Contains(allowed, k) {
			return nil, storageArgf(member, "unknown option %q; the options are %s", k, strings.Join(allowed, ", "))
		}
	}
	return o, nil
}

// storageIsSet reports whether v is neither undefined nor null (an option that is given).
func storageIsSet(v goja.Value) bool {
	return v != nil && !goja.IsUndefined(v) && !goja.IsNull(v)
}

// storageString reads an optional string option of at most max bytes ("" when unset).
func storageString(member, name string, v goja.Value, max int) (string, error) {
	if !storageIsSet(v) {
		return "", nil
	}
	str, ok := v.(goja.String)
	if !ok {
		return "", storageArgf(member, "%s must be a string, not %s", name, storageTypeOf(v))
	}
	s := v.String()
	if len(s) > max {
		return "", storageArgf(member, "%s is %d bytes; at most %d are allowed", name, len(s), max)
	}
	if !storageWellFormed(str) {
		return "", storageArgf(member, "%s holds a lone UTF-16 surrogate, which has no UTF-8 form", name)
	}
	return s, nil
}

// storageInt reads an integer option within [lo, hi].
func storageInt(member, name string, v goja.Value, lo, hi int64) (int64, error) {
	f, ok := v.Export().(float64)
	if i, isInt := v.Export().(int64); isInt {
		f, ok = float64(i), true
	}
	if !ok || f != float64(int64(f)) || int64(f) < lo || int64(f) > hi {
		return 0, storageArgf(member, "%s must be an integer from %d to %d, not %s", name, lo, hi, v.String())
	}
	return int64(f), nil
}

// storageBytes returns a copy of the bytes of a string (UTF-8), ArrayBuffer or
// ArrayBufferView (Uint8Array and the other typed arrays, DataView); ok is false for any
// other value.
func storageBytes(v goja.Value) (data []byte, ok bool) {
	if _, isStr := v.(goja.String); isStr {
		return []byte(v.String()), true
	}
	return jsBytes(v)
}

// storageDate returns a JS Date of t.
func storageDate(vm *goja.Runtime, t time.Time) goja.Value {
	d, err := vm.New(vm.Get("Date"), vm.ToValue(t.UnixMilli()))
	if err != nil {
		panic(err)
	}
	return d
}

// put is storage.put(key, body, { contentType? }) → { key, etag, size }.
func (s *jsStorage) put(key, body, options goja.Value) goja.Value {
	k, err := storageKey("put", key)
	if err != nil {
		return s.rejected(err)
	}
	o, err := storageOptions(s.vm, "put", options, "contentType")
	if err != nil {
		return s.rejected(err)
	}
	contentType, err := storageString("put", "contentType", o.Get("contentType"), storageMaxContentType)
	if err == nil && strings.ContainsFunc(contentType, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		err = storageArgf("put", "contentType must not hold control characters")
	}
	if err != nil {
		return s.rejected(err)
	}
	if stream, ok := s.streamOf(body); ok {
		return s.putStream(k, stream, contentType)
	}
	data, ok := storageBytes(body)
	if !ok {
		return s.rejected(storageArgf("put", `the body must be a string, Uint8Array, ArrayBuffer or ReadableStream, not %s (for JSON pass JSON.stringify(value) with contentType "application/json")`, storageTypeOf(body)))
	}
	if contentType == "" {
		contentType = "application/octet-stream"
		if _, isStr := body.(goja.String); isStr {
			contentType = "text/plain; charset=utf-8"
		}
	}
	return s.async(func(ctx context.Context, c *storageClient) (func() (goja.Value, error), error) {
		etag, err := c.put(ctx, k, data, contentType)
		return func() (goja.Value, error) { return s.putResult(k, etag, int64(len(data))), nil }, err
	})
}

// streamOf returns v as a ReadableStream object, if it is one.
func (s *jsStorage) streamOf(v goja.Value) (*goja.Object, bool) {
	o, isObj := v.(*goja.Object)
	ctor, hasCtor := s.vm.Get("ReadableStream").(*goja.Object)
	return o, isObj && hasCtor && s.vm.InstanceOf(o, ctor)
}

// putStream is put of a ReadableStream: its chunks (Uint8Array, any ArrayBuffer view, or
// string as UTF-8) are read as the upload needs them, so at most one part (storagePartSize)
// is in memory (storageClient.putStream). The stream is locked at once and cancelled when
// the upload fails.
func (s *jsStorage) putStream(key string, stream *goja.Object, contentType string) goja.Value {
	getReader, _ := goja.AssertFunction(stream.Get("getReader"))
	rv, err := getReader(stream)
	if err != nil {
		return s.rejected(err)
	}
	reader := rv.ToObject(s.vm)
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	return s.async(func(ctx context.Context, c *storageClient) (func() (goja.Value, error), error) {
		etag, size, err := c.putStream(ctx, key, s.streamChunks(reader), contentType)
		if err != nil {
			s.onLoop(func() { storageCallMethod(s.vm, reader, "cancel") })
		}
		return func() (goja.Value, error) { return s.putResult(key, etag, size), nil }, err
	})
}

// onLoop runs fn on the loop goroutine; it is called from the goroutine of an async call,
// whose completion keeps the loop's pending count (begin here pairs post's decrement).
func (s *jsStorage) onLoop(fn func()) {
	s.l.post(func() {
		s.l.begin()
		fn()
	})
}

// storageCallMethod calls o[name]() and returns its result (undefined on a throw, which
// only cleanup calls ignore).
func storageCallMethod(vm *goja.Runtime, o *goja.Object, name string, args ...goja.Value) (goja.Value, error) {
	f, ok := goja.AssertFunction(o.Get(name))
	if !ok {
		return goja.Undefined(), fmt.Errorf("%s is not a function", name)
	}
	return f(o, args...)
}

// streamChunks returns the chunk source of storageClient.putStream for a locked stream
// reader: each call, on the upload's goroutine, has the loop read one chunk and waits for
// it (at most storageRequestTimeout: a stream that stalls fails the put).
func (s *jsStorage) streamChunks(reader *goja.Object) func() ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	return func() ([]byte, error) {
		s.onLoop(func() {
			p, err := storageCallMethod(s.vm, reader, "read")
			if err == nil {
				_, err = storageCallMethod(s.vm, p.ToObject(s.vm), "then",
					s.vm.ToValue(func(r *goja.Object) {
						if r.Get("done").ToBoolean() {
							ch <- result{err: io.EOF}
							return
						}
						v := r.Get("value")
						b, ok := storageBytes(v)
						if !ok {
							ch <- result{err: storageArgf("put", "the body stream gave %s; its chunks must be Uint8Array (or another ArrayBuffer view) or string", storageTypeOf(v))}
							return
						}
						ch <- result{b: b}
					}),
					s.vm.ToValue(func(e goja.Value) { ch <- result{err: &jsThrown{Value: e}} }))
			}
			if err != nil {
				ch <- result{err: err}
			}
		})
		t := time.NewTimer(storageRequestTimeout)
		defer t.Stop()
		select {
		case r := <-ch:
			return r.b, r.err
		case <-t.C:
			return nil, storageArgf("put", "the body stream gave no chunk for %v", storageRequestTimeout)
		}
	}
}

// putResult is the value put resolves with.
func (s *jsStorage) putResult(key, etag string, size int64) goja.Value {
	o := s.vm.NewObject()
	o.Set("key", key)
	o.Set("etag", etag)
	o.Set("size", size)
	return o
}

// storageGetRange reads get's range option: { offset, length? } or { suffix }.
func storageGetRange(vm *goja.Runtime, v goja.Value) (*storageRange, error) {
	if !storageIsSet(v) {
		return nil, nil
	}
	o, err := storageOptions(vm, "get", v, "offset", "length", "suffix")
	if err != nil {
		return nil, storageArgf("get", "range must be { offset, length? } or { suffix }, not %s", storageTypeOf(v))
	}
	const max = 1 << 53
	var r storageRange
	if sfx := o.Get("suffix"); storageIsSet(sfx) {
		if storageIsSet(o.Get("offset")) || storageIsSet(o.Get("length")) {
			return nil, storageArgf("get", "range takes { offset, length? } or { suffix }, not both")
		}
		r.Suffix, err = storageInt("get", "range.suffix", sfx, 1, max)
		return &r, err
	}
	if r.Offset, err = storageInt("get", "range.offset", o.Get("offset"), 0, max); err != nil {
		return nil, err
	}
	if l := o.Get("length"); storageIsSet(l) {
		if r.Length, err = storageInt("get", "range.length", l, 1, max); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// get is storage.get(key, { range? }) → the object (metadata and body readers) or null.
func (s *jsStorage) get(key, options goja.Value) goja.Value {
	k, err := storageKey("get", key)
	if err != nil {
		return s.rejected(err)
	}
	o, err := storageOptions(s.vm, "get", options, "range")
	if err != nil {
		return s.rejected(err)
	}
	rng, err := storageGetRange(s.vm, o.Get("range"))
	if err != nil {
		return s.rejected(err)
	}
	return s.async(func(ctx context.Context, c *storageClient) (func() (goja.Value, error), error) {
		b, err := c.get(ctx, k, rng)
		if storageIsNotFound(err) {
			return func() (goja.Value, error) { return goja.Null(), nil }, nil
		}
		if err != nil {
			return nil, err
		}
		// Read the start of the body now: most objects are small, and one read whole
		// releases its connection whether or not user code reads it.
		head, err := io.ReadAll(io.LimitReader(b.Body, storageEagerBody+1))
		if err != nil {
			b.Body.Close()
			return nil, &storageError{Op: "get", Key: k, Code: "NetworkError", Message: err.Error(), Err: err}
		}
		rest := b.Body
		if len(head) <= storageEagerBody {
			b.Body.Close()
			rest = nil
		}
		return func() (goja.Value, error) { return s.getResult(b, head, rest), nil }, nil
	})
}

// metadata returns the metadata object of head() and of get()'s result.
func (s *jsStorage) metadata(m storageObject) *goja.Object {
	o := s.vm.NewObject()
	o.Set("key", m.Key)
	o.Set("size", m.Size)
	o.Set("etag", m.ETag)
	o.Set("contentType", m.ContentType)
	o.Set("lastModified", storageDate(s.vm, m.LastModified))
	return o
}

// getResult builds the object get() resolves with: the metadata, range when partial, and
// the body readers; head is the start of the body and rest (nil when head is all of it)
// the remainder, still on the connection.
func (s *jsStorage) getResult(b *storageBody, head []byte, rest io.ReadCloser) goja.Value {
	o := s.metadata(b.storageObject)
	if b.Range != nil {
		r := s.vm.NewObject()
		r.Set("offset", b.Range[0])
		r.Set("length", b.Range[1])
		o.Set("range", r)
	}
	used := false
	// readAll settles with the whole body converted by conv, once.
	readAll := func(conv func([]byte) (goja.Value, error)) goja.Value {
		if used {
			return s.rejected(storageArgf("get", "the body of %q was already read (read it once: text(), json(), bytes(), arrayBuffer() or body)", b.Key))
		}
		used = true
		if rest == nil {
			p, resolve, reject := s.vm.NewPromise()
			if v, err := conv(head); err != nil {
				reject(s.error(err))
			} else {
				resolve(v)
			}
			return s.vm.ToValue(p)
		}
		return s.async(func(context.Context, *storageClient) (func() (goja.Value, error), error) {
			defer rest.Close()
			tail, err := io.ReadAll(io.LimitReader(rest, storageMaxReadAll-int64(len(head))+1))
			data := append(head, tail...)
			switch {
			case err != nil:
				return nil, &storageError{Op: "get", Key: b.Key, Code: "NetworkError", Message: err.Error(), Err: err}
			case len(data) > storageMaxReadAll:
				return nil, &storageError{Op: "get", Key: b.Key, Code: "TooLarge", Message: fmt.Sprintf("the object is larger than %d MiB: read it through body or in ranges", storageMaxReadAll>>20)}
			}
			return func() (goja.Value, error) { return conv(data) }, nil
		})
	}
	// body is a getter, not enumerable: JSON.stringify and console.log of the object
	// leave the stream unmade and the body unread.
	var stream goja.Value
	o.DefineAccessorProperty("body", s.vm.ToValue(func() goja.Value {
		if stream == nil {
			var rc io.ReadCloser = io.NopCloser(bytes.NewReader(head))
			switch {
			case used:
				rc = io.NopCloser(storageFailedReader{errors.New("the body was already read by text(), json(), bytes() or arrayBuffer()")})
			case rest != nil:
				rc = struct {
					io.Reader
					io.Closer
				}{io.MultiReader(bytes.NewReader(head), rest), rest}
			}
			used = true
			stream = jsReadableStream(s.l, rc)
		}
		return stream
	}), nil, goja.FLAG_TRUE, goja.FLAG_FALSE)
	o.Set("text", func() goja.Value {
		return readAll(func(b []byte) (goja.Value, error) { return s.vm.ToValue(string(b)), nil })
	})
	o.Set("json", func() goja.Value {
		return readAll(func(b []byte) (goja.Value, error) { return jsonParse(s.vm, b) })
	})
	o.Set("bytes", func() goja.Value {
		return readAll(func(b []byte) (goja.Value, error) { return jsUint8Array(s.vm, b), nil })
	})
	o.Set("arrayBuffer", func() goja.Value {
		return readAll(func(b []byte) (goja.Value, error) { return jsArrayBuffer(s.vm, b), nil })
	})
	return o
}

// storageFailedReader is a reader whose every read fails with err.
type storageFailedReader struct{ err error }

// Read returns the error.
func (r storageFailedReader) Read([]byte) (int, error) { return 0, r.err }

// head is storage.head(key) → the metadata or null.
func (s *jsStorage) head(key goja.Value) goja.Value {
	k, err := storageKey("head", key)
	if err != nil {
		return s.rejected(err)
	}
	return s.async(func(ctx context.Context, c *storageClient) (func() (goja.Value, error), error) {
		m, err := c.head(ctx, k)
		if storageIsNotFound(err) {
			return func() (goja.Value, error) { return goja.Null(), nil }, nil
		}
		return func() (goja.Value, error) { return s.metadata(m), nil }, err
	})
}

// list is storage.list({ prefix?, delimiter?, cursor?, limit? }) →
// { objects, prefixes, cursor?, truncated }.
func (s *jsStorage) list(options goja.Value) goja.Value {
	o, err := storageOptions(s.vm, "list", options, "prefix", "delimiter", "cursor", "limit")
	if err != nil {
		return s.rejected(err)
	}
	var lo storageListOptions
	if lo.Prefix, err = storageString("list", "prefix", o.Get("prefix"), s3MaxKeyLength); err != nil {
		return s.rejected(err)
	}
	if lo.Delimiter, err = storageString("list", "delimiter", o.Get("delimiter"), s3MaxKeyLength); err != nil {
		return s.rejected(err)
	}
	if lo.Cursor, err = storageString("list", "cursor", o.Get("cursor"), 4<<10); err != nil {
		return s.rejected(err)
	}
	if l := o.Get("limit"); storageIsSet(l) {
		n, err := storageInt("list", "limit", l, 1, s3MaxListKeys)
		if err != nil {
			return s.rejected(err)
		}
		lo.Limit = int(n)
	}
	return s.async(func(ctx context.Context, c *storageClient) (func() (goja.Value, error), error) {
		page, err := c.list(ctx, lo)
		return func() (goja.Value, error) {
			objects := make([]any, len(page.Objects))
			for i, m := range page.Objects {
				e := s.vm.NewObject()
				e.Set("key", m.Key)
				e.Set("size", m.Size)
				e.Set("etag", m.ETag)
				e.Set("lastModified", storageDate(s.vm, m.LastModified))
				objects[i] = e
			}
			prefixes := make([]any, len(page.Prefixes))
			for i, p := range page.Prefixes {
				prefixes[i] = p
			}
			r := s.vm.NewObject()
			r.Set("objects", s.vm.NewArray(objects...))
			r.Set("prefixes", s.vm.NewArray(prefixes...))
			r.Set("truncated", page.Cursor != "")
			if page.Cursor != "" {
				r.Set("cursor", page.Cursor)
			}
			return r, nil
		}, err
	})
}

// delete is storage.delete(key | key[]) → undefined; missing keys are no error.
func (s *jsStorage) delete(keys goja.Value) goja.Value {
	var list []string
	if o, ok := keys.(*goja.Object); ok && o.ClassName() == "Array" {
		n := int(o.Get("length").ToInteger())
		if n > 100_000 {
			return s.rejected(storageArgf("delete", "at most 100000 keys per call, not %d", n))
		}
		for i := range n {
			k, err := storageKey("delete", o.Get(fmt.Sprint(i)))
			if err != nil {
				return s.rejected(storageArgf("delete", "keys[%d]: %v", i, strings.TrimPrefix(err.Error(), "storage.delete: ")))
			}
			list = append(list, k)
		}
	} else {
		k, err := storageKey("delete", keys)
		if err != nil {
			return s.rejected(storageArgf("delete", "the argument must be a key or an array of keys: %v", strings.TrimPrefix(err.Error(), "storage.delete: ")))
		}
		list = []string{k}
	}
	return s.async(func(ctx context.Context, c *storageClient) (func() (goja.Value, error), error) {
		var err error
		switch len(list) {
		case 0:
		case 1:
			err = c.delete(ctx, list[0])
		default:
			err = c.deleteMany(ctx, list)
		}
		return func() (goja.Value, error) { return goja.Undefined(), nil }, err
	})
}

// presign is storage.presign(key, { method?, expiresIn? }) → a URL string, synchronously
// (signing needs no request).
func (s *jsStorage) presign(key, options goja.Value) string {
	fail := func(err error) { panic(s.error(err)) }
	k, err := storageKey("presign", key)
	if err != nil {
		fail(err)
	}
	o, err := storageOptions(s.vm, "presign", options, "method", "expiresIn")
	if err != nil {
		fail(err)
	}
	method := http.MethodGet
	if m := o.Get("method"); storageIsSet(m) {
		if method = m.String(); method != http.MethodGet && method != http.MethodPut {
			fail(storageArgf("presign", `method must be "GET" or "PUT", not %q`, method))
		}
	}
	expires := storageDefaultPresignExpiry
	if e := o.Get("expiresIn"); storageIsSet(e) {
		n, err := storageInt("presign", "expiresIn", e, 1, int64(s3MaxPresignExpiry/time.Second))
		if err != nil {
			fail(err)
		}
		expires = time.Duration(n) * time.Second
	}
	c := s.target.Load()
	if c == nil {
		fail(storageErrNotConfigured)
	}
	u, err := c.presign(method, k, expires)
	if err != nil {
		fail(err)
	}
	return u
}

// storageConfigure points the storage of p's VMs at t, from then on (VMs already made
// included).
func storageConfigure(p *jsPlatform, t storageTarget) error {
	c, err := newStorageClient(t)
	if err != nil {
		return err
	}
	p.storage.Store(c)
	return nil
}

// storageDTS declares storage in the ambient module; typegen appends it to connect.d.ts.
// The stream types are structural, so they hold with or without a DOM lib.
const storageDTS = `
declare module "svc" {
  /** A ReadableStream of steps and tools (the web platform's), as storage gives it. */
  export interface StorageReadableStream<R = Uint8Array> {
    readonly locked: boolean;
    getReader(): {
      read(): Promise<{ done: false; value: R } | { done: true; value?: undefined }>;
      releaseLock(): void;
      cancel(reason?: unknown): Promise<void>;
    };
    cancel(reason?: unknown): Promise<void>;
    [Symbol.asyncIterator](): AsyncIterator<R>;
  }
  /** Any ReadableStream of Uint8Array (or other ArrayBuffer view, or string) chunks. */
  export interface StorageStreamSource {
    readonly locked: boolean;
    getReader(): unknown;
  }
  /** An object's metadata: head(), get() and list() give it. */
  export interface StorageObjectInfo {
    key: string;
    /** Bytes of the whole object (also when get() read a range). */
    size: number;
    /** The S3 ETag without quotes: the MD5 hex of a single-part object; "<hex>-<parts>" for a streamed one past 8 MiB. */
    etag: string;
    lastModified: Date;
  }
  /** head() and get(): the metadata with the content type. */
  export interface StorageObjectHead extends StorageObjectInfo {
    /** As put gave it; "text/plain; charset=utf-8" for a string, "application/octet-stream" otherwise. */
    contentType: string;
  }
  /** get(): the metadata and the body, to be read once (at most 64 MiB through text/json/bytes/arrayBuffer). */
  export interface StorageObject extends StorageObjectHead {
    /** The bytes read when get() asked a range. */
    range?: { offset: number; length: number };
    /** The body as a stream, read as it arrives. */
    readonly body: StorageReadableStream<Uint8Array>;
    text(): Promise<string>;
    json<T = unknown>(): Promise<T>;
    bytes(): Promise<Uint8Array>;
    arrayBuffer(): Promise<ArrayBuffer>;
  }
  /** A byte range: length bytes from offset (to the end without length), or the last suffix bytes. */
  export type StorageRange = { offset: number; length?: number } | { suffix: number };
  /** One page of list(). */
  export interface StorageList {
    objects: StorageObjectInfo[];
    /** With a delimiter: the distinct key prefixes up to and including it ("folders"). */
    prefixes: string[];
    /** Pass it to list() for the next page; present only when truncated. */
    cursor?: string;
    truncated: boolean;
  }
  /** Thrown by storage when the endpoint refuses or cannot be reached. */
  export interface StorageError extends Error {
    name: "StorageError";
    /** The S3 error code (AccessDenied, NoSuchBucket, InvalidRange...), NetworkError, or NotConfigured. */
    code: string;
    /** The HTTP status; 0 when no answer came. */
    status: number;
  }
  /**
   * The project's bucket (svc dev: the built-in object storage, or SVC_S3_ENDPOINT; svc env
   * prints its address and keys). For steps and tools: workflow code that calls it throws.
   * Keys are 1 to 1024 bytes of UTF-8; invalid arguments throw TypeError.
   */
  export const storage: {
    /** Store body under key, replacing any object there. A stream is uploaded as it is read. */
    put(key: string, body: string | ArrayBuffer | ArrayBufferView | StorageStreamSource, options?: { contentType?: string }): Promise<{ key: string; etag: string; size: number }>;
    /** The object, or null when there is none. */
    get(key: string, options?: { range?: StorageRange }): Promise<StorageObject | null>;
    /** The object's metadata, or null when there is none. */
    head(key: string): Promise<StorageObjectHead | null>;
    /** A page of keys in order (limit 1-1000, default 1000). */
    list(options?: { prefix?: string; delimiter?: string; cursor?: string; limit?: number }): Promise<StorageList>;
    /** Remove the object(s); missing keys are no error. */
    delete(keys: string | string[]): Promise<void>;
    /** A URL that lets anyone GET (default) or PUT the key, for expiresIn seconds (default 3600, at most 604800). */
    presign(key: string, options?: { method?: "GET" | "PUT"; expiresIn?: number }): string;
  };
}
`
