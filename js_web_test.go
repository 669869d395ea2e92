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
func webCases(t *testing.T, cases []struct{ name, src, want string }, setup ...func(*jsLoop)) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			l := webVM(t)
			for _, f := range setup {
				f(l)
			}
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

func TestWebEncoding(t *testing.T) {
	webCases(t, []struct{ name, src, want string }{
		{"encode", `return Array.from(new TextEncoder().encode("é€😀"));`, `[195,169,226,130,172,240,159,152,128]`},
		{"lone surrogate encodes as U+FFFD", `return Array.from(new TextEncoder().encode("a\uD800b"));`, `[97,239,191,189,98]`},
		{"encodeInto stops before a split character", `
			const d = new Uint8Array(5); const r = new TextEncoder().encodeInto("a😀é", d);
			return [r.read, r.written, Array.from(d)];`, `[3,5,[97,240,159,152,128]]`},
		{"decode drops the BOM", `return new TextDecoder().decode(new Uint8Array([0xEF,0xBB,0xBF,0x68,0x69]));`, `"hi"`},
		{"ignoreBOM keeps it", `return new TextDecoder("utf8", { ignoreBOM: true }).decode(new Uint8Array([0xEF,0xBB,0xBF,0x68])).length;`, `2`},
		{"maximal subparts", `return new TextDecoder().decode(new Uint8Array([0xF0,0x90,0x80,0x41,0xE0,0x80,0xFF]));`, "\"\ufffdA\ufffd\ufffd\ufffd\""},
		{"stream across chunks", `
			const d = new TextDecoder(); const b = new TextEncoder().encode("€😀");
			let s = ""; for (const c of b) s += d.decode(new Uint8Array([c]), { stream: true });
			return s + d.decode();`, `"€😀"`},
		{"incomplete at the end", `return new TextDecoder().decode(new Uint8Array([0x61, 0xE2, 0x82]));`, "\"a\ufffd\""},
		{"fatal throws TypeError", `
			try { new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array([0xC0])); } catch (e) { return e.name; }`, `"TypeError"`},
		{"other labels are RangeErrors", `try { new TextDecoder("latin1"); } catch (e) { return e.name; }`, `"RangeError"`},
		{"label trimmed and case-folded", `return new TextDecoder(" UTF-8\n").encoding;`, `"utf-8"`},
		{"atob and btoa", `return [btoa("hi\xff"), atob(" aGk= "), atob("aGk"), atob("YQ")];`, `["aGn/","hi","hi","a"]`},
		{"atob rejects", `try { atob("a"); } catch (e) { return [e.name, e.code, e instanceof DOMException]; }`, `["InvalidCharacterError",5,true]`},
		{"btoa rejects non-latin1", `try { btoa("€"); } catch (e) { return e.name; }`, `"InvalidCharacterError"`},
	})
}

func TestWebCloneMicrotaskCrypto(t *testing.T) {
	webCases(t, []struct{ name, src, want string }{
		{"structuredClone", `
			const a = { d: new Date(5), m: new Map([[1, { x: 1 }]]), s: new Set([1]), r: /a/g, u: new Uint8Array([1, 2]), n: null, list: [1, "a"] };
			a.self = a;
			const c = structuredClone(a);
			return [c !== a, c.self === c, c.d instanceof Date && c.d.getTime(), c.m.get(1).x, c.m.get(1) !== a.m.get(1), c.s.has(1), c.r.flags, Array.from(c.u), c.u.buffer !== a.u.buffer, c.list, c.n];`,
			`[true,true,5,1,true,true,"g",[1,2],true,[1,"a"],null]`},
		{"structuredClone of errors", `const e = structuredClone(new RangeError("x")); return [e instanceof RangeError, e.message];`, `[true,"x"]`},
		{"structuredClone refuses functions", `try { structuredClone({ f() {} }); } catch (e) { return [e.name, e.code]; }`, `["DataCloneError",25]`},
		{"queueMicrotask runs before timers", `
			const o = []; setTimeout(() => o.push("timer"), 0); queueMicrotask(() => o.push("micro")); o.push("sync");
			await new Promise((r) => setTimeout(r, 5)); return o;`, `["sync","micro","timer"]`},
		{"getRandomValues and randomUUID", `
			const a = crypto.getRandomValues(new Uint32Array(8));
			return [a.some((x) => x !== 0), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID())];`, `[true,true]`},
		{"getRandomValues quota", `try { crypto.getRandomValues(new Uint8Array(65537)); } catch (e) { return e.name; }`, `"QuotaExceededError"`},
		{"getRandomValues floats", `try { crypto.getRandomValues(new Float64Array(1)); } catch (e) { return e.name; }`, `"TypeMismatchError"`},
		{"digest", `
			const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");
			const d = new TextEncoder().encode("abc");
			return [hex(await crypto.subtle.digest("SHA-256", d)), hex(await crypto.subtle.digest({ name: "SHA-1" }, d)).slice(0, 8), (await crypto.subtle.digest("SHA-384", d)).byteLength, (await crypto.subtle.digest("SHA-512", d.buffer)).byteLength];`,
			`["ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","a9993e36",48,64]`},
		{"HMAC sign and verify (RFC 4231 case 2)", `
			const enc = new TextEncoder();
			const key = await crypto.subtle.importKey("raw", enc.encode("Jefe"), { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
			const sig = await crypto.subtle.sign("HMAC", key, enc.encode("what do ya want for nothing?"));
			const hex = Array.from(new Uint8Array(sig), (x) => x.toString(16).padStart(2, "0")).join("");
			const ok = await crypto.subtle.verify("HMAC", key, sig, enc.encode("what do ya want for nothing?"));
			const bad = await crypto.subtle.verify({ name: "HMAC" }, key, sig, enc.encode("x"));
			return [hex, ok, bad, key.algorithm.hash.name, key.type];`,
			`["5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",true,false,"SHA-256","secret"]`},
		{"unknown hash rejects", `try { await crypto.subtle.digest("MD5", new Uint8Array()); } catch (e) { return e.name; }`, `"TypeError"`},
		{"performance.now", `const a = performance.now(); await new Promise((r) => setTimeout(r, 2)); return performance.now() > a && a >= 0;`, `true`},
	})
}

// TestWebLazyGlobals: the platform's globals resolve on first touch, by
// name, typeof, `in` and globalThis; code may replace one before its first
// use; an unknown name is still a ReferenceError.
func TestWebLazyGlobals(t *testing.T) {
	l := webVM(t)
	v, err := l.vm.RunString(`
		const mine = () => "mine";
		globalThis.fetch = mine;
		const out = [fetch === mine, typeof URL, "TextEncoder" in globalThis, typeof globalThis.Headers,
			new URL("https://a.example/b?c=1").searchParams.get("c")];
		try { NotAGlobal; out.push("no error"); } catch (e) { out.push(e.name); }
		out.push(Object.keys(globalThis).includes("URL"));
		JSON.stringify(out);`)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.String(); got != `[true,"function",true,"function","1","ReferenceError",false]` {
		t.Errorf("lazy globals = %s", got)
	}
}
