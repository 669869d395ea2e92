package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func init() {
	// Workflows of the web platform tests, compiled with the engine's.
	engineWorkflows["workflows/webdet.workflow.ts"] = `
import { sleep } from "svc";
async function record(s: string) { "use step"; return s; }
export default async function webdet() {
  "use workflow";
  const u = new URL("https://h/p?a=1");
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  const id = crypto.randomUUID();
  const digest = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(id))));
  const first = JSON.stringify([Array.from(bytes), id, digest, u.searchParams.get("a"), btoa("x"), structuredClone({ a: 1 }), new Headers({ A: "1" }).get("a")]);
  const journaled = await record(first);
  await sleep(30);
  const fails = (f: () => unknown) => { try { f(); return ""; } catch (e) { return String((e as Error).message); } };
  return {
    same: journaled === first,
    fetch: fails(() => fetch("http://x")).includes("step"),
    setInterval: fails(() => setInterval(() => {}, 1)).includes("sleep"),
    perf: fails(() => performance.now()).includes("workflow code"),
    timeout: fails(() => AbortSignal.timeout(5)).includes("step"),
  };
}`
	// Top-level code that draws time and randomness, as packages do when
	// they are imported, and calls a step before any run is bound.
	engineWorkflows["workflows/toplevel.workflow.ts"] = `
async function record(s: string) { "use step"; return s; }
let early = "";
try { record("x"); } catch (e) { early = (e as Error).message; }
const drawn = JSON.stringify([Date.now(), new Date().getTime(), Math.random(), crypto.randomUUID()]);
export default async function toplevel() {
  "use workflow";
  return { drawn, early, journaled: (await record(drawn)) === drawn };
}`
	// A step with the API surface the openai package uses for a streamed
	// chat completion: URL, Headers iteration, AbortController, fetch with
	// the body read by getReader and by for await, TextDecoder streaming.
	engineWorkflows["workflows/webstep.workflow.ts"] = `
async function chat(base: string) {
  "use step";
  const url = new URL("/v1/chat/completions", base);
  url.searchParams.set("stream", "true");
  const headers = new Headers({ "Content-Type": "application/json", Authorization: "Bearer k" });
  const sent = [...headers.entries()].map(([k]) => k);
  const ac = new AbortController();
  const res = await fetch(url, { method: "POST", headers, body: JSON.stringify({ stream: true }), signal: ac.signal });
  const dec = new TextDecoder();
  let buf = "", text = "";
  const reader = res.body!.getReader();
  const first = await reader.read();
  buf += dec.decode(first.value, { stream: true });
  reader.releaseLock();
  for await (const chunk of res.body as any) buf += dec.decode(chunk as Uint8Array, { stream: true });
  buf += dec.decode();
  for (const ev of buf.split("\n\n")) {
    const data = ev.replace(/^data: /, "");
    if (!data || data === "[DONE]") continue;
    text += JSON.parse(data).choices[0].delta.content;
  }
  ac.abort();
  return { status: res.status, type: res.headers.get("content-type"), sent, text };
}
export default async function webstep(input: { base: string }) {
  "use workflow";
  return await chat(input.base);
}`
	// A step that looks at a response's status and never reads its body.
	engineWorkflows["workflows/webunread.workflow.ts"] = `
async function peek(url: string) { "use step"; return (await fetch(url)).status; }
export default async function webunread(input: { url: string }) { "use workflow"; return await peek(input.url); }`
}

// TestWebUnreadBodyClosedAtStepEnd: a body the step never reads is closed
// when the step settles, so its connection does not stay open until the
// client's timeout.
func TestWebUnreadBodyClosedAtStepEnd(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first chunk of an endless body"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(30 * time.Second):
		}
	}))
	defer srv.Close()
	te := newTestEngine(t)
	r := te.startWait(t, "webunread", fmt.Sprintf(`{"url":%q}`, srv.URL))
	if r.Status != runCompleted || string(r.Output) != "200" {
		t.Fatalf("webunread = %s %s %+v", r.Status, r.Output, r.Error)
	}
	select {
	case <-gone:
	case <-time.After(20 * time.Second):
		t.Fatal("the unread body's connection is still open after the step settled")
	}
}

func TestWebWorkflowDeterministic(t *testing.T) {
	te := newTestEngine(t)
	r := te.startWait(t, "webdet", `{}`)
	if r.Status != runCompleted || string(r.Output) != `{"same":true,"fetch":true,"setInterval":true,"perf":true,"timeout":true}` {
		t.Fatalf("webdet = %s %s %+v", r.Status, r.Output, r.Error)
	}
}

// TestWorkflowTopLevelDeterministic: a workflow file whose top-level code
// reads the clock and randomness (it used to crash the process: nothing was
// bound to the VM yet) sees the same values in every evaluation, and a
// step called at top level throws saying where to call it.
func TestWorkflowTopLevelDeterministic(t *testing.T) {
	te := newTestEngine(t)
	var first string
	for i := range 2 {
		r := te.startWait(t, "toplevel", `{}`)
		var out struct {
			Drawn, Early string
			Journaled    bool
		}
		if r.Status != runCompleted || json.Unmarshal(r.Output, &out) != nil {
			t.Fatalf("toplevel = %s %s %+v", r.Status, r.Output, r.Error)
		}
		if !out.Journaled || !strings.HasPrefix(out.Drawn, "[0,0,") || !strings.Contains(out.Early, "call it from the workflow function") {
			t.Errorf("toplevel = %s; want the epoch, the step guidance and the values journaled", r.Output)
		}
		if i == 0 {
			first = out.Drawn
		} else if out.Drawn != first {
			t.Errorf("top-level values differ between evaluations: %s then %s", first, out.Drawn)
		}
	}
}

func TestWebStepStreamsLikeOpenAI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.URL.Query().Get("stream") != "true" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request "+r.URL.String(), 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, word := range []string{"Hé", "llo", " wörld"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", word)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	te := newTestEngine(t)
	r := te.startWait(t, "webstep", fmt.Sprintf(`{"base":%q}`, srv.URL))
	want := `{"status":200,"type":"text/event-stream","sent":["authorization","content-type"],"text":"Héllo wörld"}`
	if r.Status != runCompleted || string(r.Output) != want {
		t.Fatalf("webstep = %s %s %+v; want %s", r.Status, r.Output, r.Error, want)
	}
}
