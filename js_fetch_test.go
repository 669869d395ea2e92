package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// fetchServer answers the fetch tests on loopback: /echo returns the
// request, /sse streams three events and then holds the connection until
// the client goes (it reports that on gone).
func fetchServer(t *testing.T) (url string, gone chan struct{}) {
	gone = make(chan struct{}, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		fmt.Fprintf(w, `{"method":%q,"type":%q,"x":%q,"body":%q}`, r.Method, r.Header.Get("Content-Type"), r.Header.Get("X-Test"), b)
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"n\":%d,\"s\":\"é€\"}\n\n", i)
			f.Flush()
		}
		if r.URL.Query().Get("hold") == "" {
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/echo", http.StatusFound) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, gone
}

func TestWebFetch(t *testing.T) {
	base, gone := fetchServer(t)
	cases := []struct{ name, src, want string }{
		{"json and headers", `
			const r = await fetch(BASE + "/echo", { method: "post", headers: new Headers([["X-Test", "1"]]), body: "hi" });
			const j = await r.json();
			return [r.status, r.ok, r.statusText, r instanceof Response, r.headers.get("content-type"), r.headers.getSetCookie(), j.method, j.type, j.x, j.body, r.bodyUsed];`,
			`[200,true,"OK",true,"application/json",["a=1","b=2"],"POST","text/plain;charset=UTF-8","1","hi",true]`},
		{"header iteration is sorted and lower case", `
			const r = await fetch(BASE + "/echo");
			return [...r.headers].map(([k]) => k).filter((k) => k !== "date");`, `["content-length","content-type","set-cookie","set-cookie"]`},
		{"body types", `
			const send = async (body) => (await (await fetch(BASE + "/echo", { method: "POST", body })).json());
			const a = await send(new URLSearchParams({ q: "a b" }));
			const b = await send(new Uint8Array([104, 105]));
			const c = await send(new Blob(["x"], { type: "text/x" }));
			const f = new FormData(); f.append("k", "v"); f.append("file", new Blob(["data"]), "d.txt");
			const d = await send(f);
			const e = await send(new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode("streamed")); c.close(); } }));
			return [a.type, a.body, b.body, c.type, /^multipart\/form-data; boundary=/.test(d.type), d.body.includes('name="file"; filename="d.txt"'), e.body];`,
			`["application/x-www-form-urlencoded;charset=UTF-8","q=a+b","hi","text/x",true,true,"streamed"]`},
		{"arrayBuffer and text", `
			const r = await fetch(new Request(BASE + "/echo"));
			const c = r.clone();
			return [(await r.arrayBuffer()).byteLength > 0, (await c.text()).startsWith("{")];`, `[true,true]`},
		{"redirects", `
			const r = await fetch(BASE + "/redirect");
			const m = await fetch(BASE + "/redirect", { redirect: "manual" });
			return [r.redirected, r.url.endsWith("/echo"), m.status];`, `[true,true,302]`},
		{"SSE through getReader with TextDecoder stream", `
			const r = await fetch(BASE + "/sse");
			const reader = r.body.getReader(); const dec = new TextDecoder(); let text = "";
			for (;;) { const { value, done } = await reader.read(); if (done) break; text += dec.decode(value, { stream: true }); }
			text += dec.decode();
			return text.split("\n\n").filter(Boolean).map((e) => e.slice(6)).slice(0, 4);`,
			`["{\"n\":0,\"s\":\"é€\"}","{\"n\":1,\"s\":\"é€\"}","{\"n\":2,\"s\":\"é€\"}","[DONE]"]`},
		{"SSE through for await, aborted mid-stream", `
			const ac = new AbortController();
			const r = await fetch(BASE + "/sse?hold=1", { signal: ac.signal });
			const events = []; let buf = ""; const dec = new TextDecoder();
			try {
				for await (const chunk of r.body) {
					buf += dec.decode(chunk, { stream: true });
					let i; while ((i = buf.indexOf("\n\n")) >= 0) { events.push(JSON.parse(buf.slice(6, i)).n); buf = buf.slice(i + 2); }
					if (events.length === 3) ac.abort();
				}
			} catch (e) { return [events, e.name, e instanceof DOMException]; }
			return "not aborted";`, `[[0,1,2],"AbortError",true]`},
		{"AbortSignal.timeout rejects with TimeoutError", `
			try { await fetch(BASE + "/slow", { signal: AbortSignal.timeout(50) }); } catch (e) { return e.name; }`, `"TimeoutError"`},
		{"already aborted", `
			try { await fetch(BASE + "/echo", { signal: AbortSignal.abort() }); } catch (e) { return e.name; }`, `"AbortError"`},
		{"network errors are TypeErrors", `
			try { await fetch("http://127.0.0.1:1/"); } catch (e) { return e.name; }`, `"TypeError"`},
		{"unsupported scheme", `try { await fetch("file:///etc/passwd"); } catch (e) { return e.name; }`, `"TypeError"`},
		{"a GET with a body is refused", `try { await fetch(BASE, { body: "x" }); } catch (e) { return e.name; }`, `"TypeError"`},
		{"Response constructed", `const r = Response.json({ a: 1 }, { status: 201 }); return [r.status, r.headers.get("content-type"), await r.json()];`, `[201,"application/json",{"a":1}]`},
		{"body read twice", `const r = new Response("x"); await r.text(); try { await r.text(); } catch (e) { return e.name; }`, `"TypeError"`},
	}
	webCases(t, cases, func(l *jsLoop) { l.vm.Set("BASE", base) })
	// The aborted stream and the timed-out request closed their connections.
	for range 2 {
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatal("an aborted fetch did not close its connection")
		}
	}
}
