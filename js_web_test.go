package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
	"github.com/evanw/esbuild/pkg/api"
)

// webVM returns a VM with the platform of step VMs and its loop.
func webVM(t testing.TB) *jsLoop {
	t.Helper()
	vm := goja.New()
	l := newJSLoop(vm)
	newJSPlatform().install(l, vm.NewObject())
	installConsole(vm, discardLogger(), nil)
	return l
}

// webRun evaluates src as the body of an async function in l's VM and
// returns its result after the loop has settled it (bounded by 10 s).
func webRun(t testing.TB, l *jsLoop, src string) (goja.Value, error) {
	t.Helper()
	// goja lacks for-await and async generators: lower them as the bundler
	// does for user code.
	res := api.Transform("(async () => {\n"+src+"\n})()", api.TransformOptions{Target: api.ES2017})
	if len(res.Errors) > 0 {
		t.Fatalf("transform %q: %s", src, res.Errors[0].Text)
	}
	v, err := l.vm.RunString(string(res.Code))
	if err != nil {
		t.Fatalf("run %q: %v", src, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.await(ctx, v.Export().(*goja.Promise))
}

// webCases runs each case's script in a fresh step VM and compares the
// JSON of its result (or the message of what it threw).
func webCases(t *testing.T, cases []struct{ name, src, want string }) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			l := webVM(t)
			v, err := webRun(t, l, tt.src)
			got := ""
			if err != nil {
				got = "throws " + err.Error()
			} else if b, err := jsonStringify(l.vm, v); err != nil {
				got = "stringify: " + err.Error()
			} else {
				got = string(b)
			}
			if got != tt.want {
				t.Errorf("%s\n = %s\nwant %s", tt.src, got, tt.want)
			}
		})
	}
}

func TestWebReadableStream(t *testing.T) {
	webCases(t, []struct{ name, src, want string }{
		{"reader reads start's chunks then done", `
			const s = new ReadableStream({ start(c) { c.enqueue(1); c.enqueue(2); c.close(); } });
			const r = s.getReader(); const out = [];
			for (;;) { const { value, done } = await r.read(); if (done) break; out.push(value); }
			return [out, s.locked];`, `[[1,2],true]`},
		{"pull on demand and for await", `
			let n = 0;
			const s = new ReadableStream({ pull(c) { if (++n > 3) c.close(); else c.enqueue(n); } }, { highWaterMark: 0 });
			const out = [];
			for await (const v of s) out.push(v);
			return [out, s.locked];`, `[[1,2,3],false]`},
		{"async pull", `
			let n = 0;
			const s = new ReadableStream({ async pull(c) { await null; if (n === 2) c.close(); else c.enqueue("x" + n++); } });
			const out = []; const r = s.getReader();
			let x; while (!(x = await r.read()).done) out.push(x.value);
			return out;`, `["x0","x1"]`},
		{"error rejects reads", `
			const s = new ReadableStream({ start(c) { c.error(new TypeError("boom")); } });
			try { await s.getReader().read(); } catch (e) { return e.name + ": " + e.message; }`, `"TypeError: boom"`},
		{"cancel tells the source", `
			let why;
			const s = new ReadableStream({ cancel(r) { why = r; } });
			await s.cancel("enough");
			return why;`, `"enough"`},
		{"break in for await cancels", `
			let cancelled = false, n = 0;
			const s = new ReadableStream({ pull(c) { c.enqueue(n++); }, cancel() { cancelled = true; } });
			for await (const v of s) if (v === 2) break;
			return cancelled;`, `true`},
		{"second reader is refused", `
			const s = new ReadableStream(); s.getReader();
			try { s.getReader(); } catch (e) { return e.name; }`, `"TypeError"`},
		{"released reader unlocks", `
			const s = new ReadableStream({ start(c) { c.enqueue("a"); c.close(); } });
			s.getReader().releaseLock();
			return (await s.getReader().read()).value;`, `"a"`},
		{"tee", `
			const [a, b] = new ReadableStream({ start(c) { c.enqueue(1); c.enqueue(2); c.close(); } }).tee();
			const all = async (s) => { const o = []; for await (const v of s) o.push(v); return o; };
			return [await all(a), await all(b)];`, `[[1,2],[1,2]]`},
		{"from an iterable", `
			const o = []; for await (const v of ReadableStream.from(["a", "b"])) o.push(v); return o;`, `["a","b"]`},
		{"async generator over a reader", `
			async function* lines(s) { for await (const c of s) yield c.toUpperCase(); }
			const s = new ReadableStream({ start(c) { c.enqueue("a"); c.enqueue("b"); c.close(); } });
			const o = []; for await (const l of lines(s)) o.push(l); return o;`, `["A","B"]`},
	})
}

func TestWebByteHelpers(t *testing.T) {
	l := webVM(t)
	vm := l.vm
	vm.Set("fromGo", func() goja.Value { return jsUint8Array(vm, []byte("héllo")) })
	var got [][]byte
	vm.Set("toGo", func(v goja.Value) bool {
		b, ok := jsBytes(v)
		got = append(got, b)
		return ok
	})
	v, err := webRun(t, l, `
		const u = fromGo();
		const ok = [u instanceof Uint8Array, u.length];
		const ab = new Uint8Array([1, 2, 3, 4]).buffer;
		ok.push(toGo(u), toGo(ab), toGo(new Uint8Array(ab, 1, 2)), toGo(new DataView(ab, 2)), toGo(new Uint16Array(ab, 2, 1)), toGo("no"), toGo({}));
		return ok;`)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := jsonStringify(vm, v); string(b) != `[true,6,true,true,true,true,true,false,false]` {
		t.Errorf("checks = %s", b)
	}
	want := [][]byte{[]byte("héllo"), {1, 2, 3, 4}, {2, 3}, {3, 4}, {3, 4}, nil, nil}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("jsBytes #%d = %v; want %v", i, got[i], want[i])
		}
	}
}

// TestWebNativeStream reads a Go io.Reader through jsReadableStream in
// chunks, and back to Go bytes through jsReadStream.
func TestWebNativeStream(t *testing.T) {
	l := webVM(t)
	vm := l.vm
	big := strings.Repeat("0123456789", 20_000) // 200 kB: several chunks
	vm.Set("goStream", func() goja.Value { return jsReadableStream(l, io.NopCloser(strings.NewReader(big))) })
	var back []byte
	vm.Set("readBack", func(s goja.Value) goja.Value {
		p := jsReadStream(l, s, 1<<20)
		return vm.ToValue(p)
	})
	vm.Set("keep", func(v goja.Value) { back, _ = jsBytes(v) })
	v, err := webRun(t, l, `
		let chunks = 0, n = 0;
		for await (const c of goStream()) { chunks++; n += c.length; }
		keep(await readBack(goStream()));
		let tooBig;
		try { await readBack(new ReadableStream({ pull(c) { c.enqueue(new Uint8Array(1 << 19)); } })); } catch (e) { tooBig = e.name; }
		return [chunks > 1, n, tooBig];`)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := jsonStringify(vm, v); string(b) != `[true,200000,"RangeError"]` {
		t.Errorf("result = %s", b)
	}
	if string(back) != big {
		t.Errorf("jsReadStream returned %d bytes; want %d", len(back), len(big))
	}
	if l.pending != 0 {
		t.Errorf("pending = %d after the streams ended; want 0", l.pending)
	}
}
