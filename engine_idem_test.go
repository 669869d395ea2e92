package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEngineIdempotentStart: on both stores, many concurrent starts with
// one key create one run and all answer its receipt; a resent start (its
// JSON formatted otherwise) answers it too, before and after a restart;
// the key with another input or workflow is refused idempotency_key_reused;
// a queued start's key answers its queue id. Keys outlive a compaction.
func TestEngineIdempotentStart(t *testing.T) { eachEngineStore(t, testEngineIdempotentStart) }

// idemTestSame is rc without its Existing mark, to compare the receipts of
// a start and of its repeats.
func idemTestSame(rc startReceipt) startReceipt {
	rc.Existing = false
	return rc
}

// testEngineIdempotentStart is TestEngineIdempotentStart on one store.
func testEngineIdempotentStart(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	const clients = 32
	receipts := make([]startReceipt, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			receipts[i], errs[i] = te.start(startRequest{Workflow: "three", Input: json.RawMessage(`{"id":"idem-1"}`), Trigger: triggerHTTP, IdemKey: "order-1"})
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range clients {
		if !receipts[i].Existing {
			fresh++
		}
		if errs[i] != nil || receipts[i].RunID == "" || idemTestSame(receipts[i]) != idemTestSame(receipts[0]) {
			t.Fatalf("start %d = %+v %v; want the receipt of start 0 %+v", i, receipts[i], errs[i], receipts[0])
		}
	}
	if fresh != 1 {
		t.Fatalf("%d of %d receipts say they started the run; want one, the others existing", fresh, clients)
	}
	first := idemTestSame(receipts[0])
	countRuns := func() int {
		runs, _ := te.list()
		n := 0
		for _, r := range runs {
			if r.WorkflowName == "three" && strings.Contains(string(r.Input), "idem-") {
				n++
			}
		}
		return n
	}
	if n := countRuns(); n != 1 {
		t.Fatalf("%d runs of three after %d starts with one key; want 1", n, clients)
	}
	te.await(t, first.RunID)
	// A serial workflow busy with a run: the keyed start is queued.
	busy, err := te.start(startRequest{Workflow: "turnstile", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	if err != nil || busy.Status != "started" {
		t.Fatalf("turnstile = %+v %v", busy, err)
	}
	queued, err := te.start(startRequest{Workflow: "turnstile", Input: json.RawMessage(`{}`), Trigger: triggerHTTP, IdemKey: "q-1"})
	if err != nil || queued.QueueID == "" {
		t.Fatalf("queued turnstile = %+v %v", queued, err)
	}
	check := func(when string) {
		t.Helper()
		again, err := te.start(startRequest{Workflow: "three", Input: json.RawMessage(" { \"id\" : \"idem-1\" } "), Trigger: triggerHTTP, IdemKey: "order-1"})
		if err != nil || !again.Existing || idemTestSame(again) != first {
			t.Errorf("%s: resent start = %+v %v; want %+v, existing", when, again, err, first)
		}
		q, err := te.start(startRequest{Workflow: "turnstile", Input: json.RawMessage(`{}`), Trigger: triggerHTTP, IdemKey: "q-1"})
		if err != nil || !q.Existing || idemTestSame(q) != idemTestSame(queued) {
			t.Errorf("%s: resent queued start = %+v %v; want %+v", when, q, err, queued)
		}
		for _, req := range []startRequest{
			{Workflow: "three", Input: json.RawMessage(`{"id":"idem-2"}`), IdemKey: "order-1"},
			{Workflow: "echo", Input: json.RawMessage(`{"id":"idem-1"}`), IdemKey: "order-1"},
		} {
			var se *startError
			if _, err := te.start(req); !errors.As(err, &se) || se.Code != "idempotency_key_reused" {
				t.Errorf("%s: key with %s %s = %v; want idempotency_key_reused", when, req.Workflow, req.Input, err)
			}
		}
		if n := countRuns(); n != 1 {
			t.Errorf("%s: %d runs of three; want 1", when, n)
		}
		if _, queue := te.list(); len(queue) != 1 {
			t.Errorf("%s: %d queued entries; want 1", when, len(queue))
		}
	}
	check("live")
	te.close()
	te.open(t)
	check("after a restart")
	if snap := te.reopenFromSnapshot(t); !strings.Contains(string(snap), `"order-1"`) {
		t.Fatalf("the snapshot keeps no key: %.300s", snap)
	}
	check("from a snapshot")
}

// TestEngineIdempotencyKeysExpire: a key older than the retention starts
// anew, and leaves memory and the snapshot.
func TestEngineIdempotencyKeysExpire(t *testing.T) {
	te := newTestEngine(t)
	te.close()
	te.idemRetention = time.Millisecond
	te.open(t)
	req := startRequest{Workflow: "three", Input: json.RawMessage(`{"id":"x"}`), Trigger: triggerHTTP, IdemKey: "k"}
	a, err := te.start(req)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // past the 1 ms retention
	b, err := te.start(req)
	if err != nil || b.RunID == a.RunID {
		t.Fatalf("start after the retention = %+v %v; want a new run (first %s)", b, err, a.RunID)
	}
	time.Sleep(10 * time.Millisecond)
	te.mu.Lock()
	st := te.copyStateLocked()
	left := len(te.st.Idem)
	te.mu.Unlock()
	if len(st.Idem) != 0 || left != 0 {
		t.Errorf("expired keys kept: %d in the snapshot, %d in memory; want 0", len(st.Idem), left)
	}
}

// TestStartRouteIdempotencyKey: the start route reads Idempotency-Key:
// the resent request answers the first receipt; another input is 422
// idempotency_key_reused; a malformed key is 400 and starts nothing.
func TestStartRouteIdempotencyKey(t *testing.T) {
	te := newTestEngine(t)
	srv := httptest.NewServer(te.server(t))
	t.Cleanup(srv.Close)
	post := func(key, body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/workflows/three/start", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, first := post("req-7", `{"id":"h"}`)
	if code != http.StatusAccepted || first["runId"] == nil {
		t.Fatalf("first = %d %v", code, first)
	}
	if code, again := post("req-7", `{"id":"h"}`); code != http.StatusAccepted || again["runId"] != first["runId"] {
		t.Errorf("resent = %d %v; want 202 with runId %v", code, again, first["runId"])
	}
	if code, got := post("req-7", `{"id":"other"}`); code != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(got), "idempotency_key_reused") {
		t.Errorf("other input = %d %v; want 422 idempotency_key_reused", code, got)
	}
	for _, bad := range []string{"has space", strings.Repeat("k", idemKeyMax+1), "é"} {
		if code, got := post(bad, `{"id":"bad"}`); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(got), "invalid_idempotency_key") {
			t.Errorf("key %.20q = %d %v; want 400 invalid_idempotency_key", bad, code, got)
		}
	}
	runs, _ := te.list()
	if len(runs) != 1 {
		t.Errorf("%d runs; want 1", len(runs))
	}
}

// TestMCPStartWorkflowIdempotencyKey: MCP start_workflow takes
// idempotencyKey: the resent call answers the first receipt, another input
// under the key is an error naming idempotency_key_reused, and a key
// outside the charset is refused by the tool's schema.
func TestMCPStartWorkflowIdempotencyKey(t *testing.T) {
	te := newTestEngine(t)
	tools := &mcpTools{rt: &runtimeCore{log: discardLogger(), engine: soloFleet(te.engine), proj: &project{Dir: te.dir}}}
	call := func(args string) (map[string]any, string) {
		res := tools.call(t.Context(), mcpFindTool("start_workflow"), json.RawMessage(args))
		b, _ := json.Marshal(res)
		return res, string(b)
	}
	_, first := call(`{"name":"three","input":{"id":"m"},"idempotencyKey":"mcp-1"}`)
	_, again := call(`{"name":"three","input":{"id":"m"},"idempotencyKey":"mcp-1"}`)
	runs, _ := te.list()
	if !strings.Contains(first, `runId`) || strings.Contains(first, `existing`) || strings.NewReplacer(`,\"existing\":true`, "", `,"existing":true`, "").Replace(again) != first ||
		!strings.Contains(again, `"existing":true`) || len(runs) != 1 {
		t.Errorf("resent start_workflow = %s, first %s, %d runs; want the same receipt marked existing, and 1 run", again, first, len(runs))
	}
	if res, b := call(`{"name":"three","input":{"id":"other"},"idempotencyKey":"mcp-1"}`); res["isError"] != true || !strings.Contains(b, "idempotency_key_reused") {
		t.Errorf("another input = %s; want isError naming idempotency_key_reused", b)
	}
	if res, b := call(`{"name":"three","idempotencyKey":"a b"}`); res["isError"] != true || !strings.Contains(b, "/idempotencyKey") {
		t.Errorf("key with a space = %s; want isError naming /idempotencyKey", b)
	}
}

// TestEngineWorkflowStartIdempotencyKey: on both stores, workflows.start
// with an idempotencyKey inside a workflow starts its child once: a second
// call with the key in the same run, and the same call of a second run,
// resolve with the first receipt, also once the engine restarted.
func TestEngineWorkflowStartIdempotencyKey(t *testing.T) {
	eachEngineStore(t, testEngineWorkflowStartIdempotencyKey)
}

// testEngineWorkflowStartIdempotencyKey is
// TestEngineWorkflowStartIdempotencyKey on one store.
func testEngineWorkflowStartIdempotencyKey(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	writeFile(t, te.dir, "workflows/keyed.workflow.ts", `import { workflows } from "svc";
export default async function keyed(input: { key: string }) {
  "use workflow";
  const a: any = await workflows.start("three", { id: "keyed" }, { idempotencyKey: input.key });
  const b: any = await workflows.start("three", { id: "keyed" }, { idempotencyKey: input.key });
  let refused = "";
  try { await workflows.start("three", { id: "other" }, { idempotencyKey: input.key }); } catch (e: any) { refused = String(e.message); }
  return { a: a.runId, b: b.runId, refused };
}`)
	cat, err := compileCatalog(te.dir, discardLogger())
	if err != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", err, cat.Failed)
	}
	te.cat = cat
	type out struct{ A, B, Refused string }
	outOf := func(r runRecord) out {
		var o out
		if r.Status != runCompleted || json.Unmarshal(r.Output, &o) != nil {
			t.Fatalf("keyed = %s %s %+v", r.Status, r.Output, r.Error)
		}
		return o
	}
	first := outOf(te.startWait(t, "keyed", `{"key":"child-1"}`))
	if first.A == "" || first.B != first.A || !strings.Contains(first.Refused, "idempotency_key_reused") && !strings.Contains(first.Refused, "already started") {
		t.Fatalf("keyed = %+v; want one child run for both calls and the other input refused", first)
	}
	te.close()
	te.open(t)
	second := outOf(te.startWait(t, "keyed", `{"key":"child-1"}`))
	if second.A != first.A || second.B != first.A {
		t.Errorf("second run after a restart = %+v; want child %s", second, first.A)
	}
	runs, _ := te.list()
	n := 0
	for _, r := range runs {
		if r.WorkflowName == "three" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d runs of three; want 1", n)
	}
}
