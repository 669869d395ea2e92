package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// stepCounter is a loopback HTTP server that steps call with fetch: it
// counts executions per key and can fail the first N calls of a key.
type stepCounter struct {
	*httptest.Server
	mu     sync.Mutex
	counts map[string]int
	failN  map[string]int
	tokens chan string
	held   chan string   // a call of a "hold-" key reports its key here…
	unhold chan struct{} // …and answers once this is closed (or after 20 s)
}

// newStepCounter starts the counter server.
func newStepCounter(t *testing.T) *stepCounter {
	c := &stepCounter{counts: map[string]int{}, failN: map[string]int{}, tokens: make(chan string, 16),
		held: make(chan string, 16), unhold: make(chan struct{})}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("k")
		if strings.HasPrefix(key, "hold-") {
			c.held <- key
			select {
			case <-c.unhold:
			case <-time.After(20 * time.Second):
			}
		}
		if tok := r.URL.Query().Get("token"); tok != "" {
			c.tokens <- tok
		}
		c.mu.Lock()
		c.counts[key]++
		n := c.counts[key]
		fail := n <= c.failN[key]
		c.mu.Unlock()
		if fail {
			http.Error(w, "boom", 500)
			return
		}
		fmt.Fprintf(w, `{"n":%d}`, n)
	}))
	t.Cleanup(c.Close)
	return c
}

// count returns how often key was called.
func (c *stepCounter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// engineWorkflows are the workflows the engine tests run.
var engineWorkflows = map[string]string{
	"workflows/three.workflow.ts": `
async function hit(key: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key); if (!r.ok) throw new Error("status " + r.status); return (await r.json()).n; }
export default async function three(input: { id: string }) {
  "use workflow";
  const a = await hit(input.id + "-a");
  const b = await hit(input.id + "-b");
  const c = await hit(input.id + "-c");
  return { sum: a + b + c };
}`,
	"workflows/retry.workflow.ts": `
import { FatalError } from "svc";
async function flaky(key: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key); if (!r.ok) throw new Error("status " + r.status); return (await r.json()).n; }
async function fatal() { "use step"; throw new FatalError("no retry"); }
export default async function retry(input: { key: string; fatal?: boolean }) {
  "use workflow";
  if (input.fatal) return await fatal();
  return { n: await flaky(input.key) };
}`,
	"workflows/hostile.workflow.ts": `
import { FatalError } from "svc";
const evil = "a\u0000b\ud800c";
async function echo() { "use step"; console.log("step", evil); return { s: evil }; }
async function refuse() { "use step"; throw new FatalError("refused " + evil); }
export default async function hostile(input: { fail?: boolean }) {
  "use workflow";
  const r = await echo();
  console.log("workflow", r.s);
  if (input.fail) await refuse();
  return { out: r.s };
}`,
	"workflows/sleepy.workflow.ts": `
import { sleep } from "svc";
async function echo(v: any) { "use step"; return v; }
export default async function sleepy(input: { ms: number }) {
  "use workflow";
  const before = { now: Date.now(), r: Math.random(), u: crypto.randomUUID(), d: new Date().getTime() };
  const recorded = await echo(before);
  await sleep(input.ms);
  const again = { now: before.now, r: before.r, u: before.u, d: before.d };
  return { same: JSON.stringify(recorded) === JSON.stringify(again), slept: Date.now() - before.now >= input.ms };
}`,
	"workflows/streamy.workflow.ts": `
import { getWritable } from "svc";
async function talk(key: string) {
  "use step";
  const w = getWritable().getWriter();
  await w.write("start " + key);
  await w.write({ key, n: 1 });
  const r = await fetch(process.env.COUNTER + "?k=" + key);
  if (!r.ok) throw new Error("status " + r.status);
  await w.write("done");
  w.releaseLock();
  return (await r.json()).n;
}
async function flood(size: number, times: number) {
  "use step";
  const w = getWritable().getWriter();
  let n = 0;
  try { for (; n < times; n++) await w.write("x".repeat(size)); } catch (e: any) { return { n, error: e.name + ": " + e.message }; }
  return { n };
}
export default async function streamy(input: { key: string; size?: number; times?: number }) {
  "use workflow";
  let inWorkflow = "";
  try { getWritable(); } catch (e: any) { inWorkflow = e.message; }
  if (input.size) return await flood(input.size, input.times ?? 1);
  return { n: await talk(input.key), inWorkflow };
}`,
	"workflows/hooked.workflow.ts": `
import { createHook } from "svc";
async function announce(token: string) { "use step"; await fetch(process.env.COUNTER + "?k=hook&token=" + token); return true; }
export default async function hooked() {
  "use workflow";
  const hook = createHook();
  await announce(hook.token);
  const payload: any = await hook;
  return { approved: payload.approved };
}`,
	"workflows/parent.workflow.ts": `
import { workflows } from "svc";
export default async function parent(input: { id: string }) {
  "use workflow";
  const receipt: any = await workflows.start("three", { id: input.id + "-fire" });
  const out: any = await workflows.startAndWait("three", { id: input.id + "-wait" });
  return { started: receipt.status, child: out.sum };
}`,
	"workflows/lonely.workflow.ts": `
import { sleep } from "svc";
export const serial = true;
export const inputSchema = { type: "object", properties: { i: { type: "integer" } }, required: ["i"] };
async function mark(i: number) { "use step"; await fetch(process.env.COUNTER + "?k=serial-" + i); return Date.now(); }
export default async function lonely(input: { i: number }) {
  "use workflow";
  const started = await mark(input.i);
  await sleep(20);
  return { i: input.i, started };
}`,
	"workflows/echo.workflow.ts": `
import { createHook } from "svc";
async function keep(v: any) { "use step"; return v; }
export default async function echo(input: any) {
  "use workflow";
  const kept = await keep(input);
  if (input.wait) return await createHook();
  return kept;
}`,
	"workflows/abandon.workflow.ts": `
import { createHook, sleep } from "svc";
export default async function abandon(input: { fail?: boolean }) {
  "use workflow";
  createHook();
  sleep("1h");
  if (input.fail) throw new Error("boom");
  return 1;
}`,
	"workflows/turnstile.workflow.ts": `
import { createHook } from "svc";
export const serial = true;
export default async function turnstile() { "use workflow"; return await createHook(); }`,
	"workflows/queuer.workflow.ts": `
import { workflows } from "svc";
export default async function queuer() { "use workflow"; return await workflows.startAndWait("turnstile", {}); }`,
	"workflows/chatty.workflow.ts": `
import { sleep } from "svc";
async function talk(n: number) { "use step"; console.log("step says", n, { n }); return n; }
export default async function chatty() {
  "use workflow";
  console.log("before");
  await talk(1);
  console.warn("between");
  const nap = sleep(30);
  console.info("napping"); // printed after the sleep began, before the run suspends on it
  await nap;
  console.error("after");
  return 1;
}`,
	"workflows/waiter.workflow.ts": `
import { workflows } from "svc";
export default async function waiter() { "use workflow"; return await workflows.startAndWait("forever", {}); }`,
	"workflows/forever.workflow.ts": `
import { sleep } from "svc";
export default async function forever() { "use workflow"; await sleep("1h"); return 1; }`,
}

// testEngine compiles the engine workflows and opens an engine on dir.
type testEngine struct {
	*engine
	compactBytes  int64         // 0: the default
	history       runHistory    // nil: ended runs stay in memory
	retention     time.Duration // with history: 0 keeps ended runs
	busyLimit     time.Duration // 0: the default
	idemRetention time.Duration // 0: the default
	logger        *slog.Logger  // nil: discarded
	dir           string
	cat           *catalog
	counter       *stepCounter
	store         string        // engineKindFile (also "") or engineKindPostgres (engine_store_test.go)
	pool          *pgxpool.Pool // the PostgreSQL store's database
	stale         *atomic.Bool  // set: the log says its lease is not surely held (engineStaleStore)
}

// newTestEngine writes the workflows into a project and opens the engine
// on the file journal.
func newTestEngine(t *testing.T) *testEngine { return newTestEngineOn(t, engineKindFile) }

// newTestEngineOn writes the workflows into a project and opens the engine
// on store, after setup changed what it opens with.
func newTestEngineOn(t *testing.T, store string, setup ...func(*testEngine)) *testEngine {
	dir := t.TempDir()
	for f, src := range engineWorkflows {
		writeFile(t, dir, f, src)
	}
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", cerr, cat.Failed)
	}
	te := &testEngine{dir: dir, cat: cat, counter: newStepCounter(t), store: store}
	for _, f := range setup {
		f(te)
	}
	te.open(t)
	return te
}

// open (re)opens the engine on the same journal.
func (te *testEngine) open(t *testing.T) {
	t.Helper()
	store := te.storeFor(t)
	if te.stale != nil {
		store = engineStaleStore{engineStore: store, stale: te.stale}
	}
	e, err := openEngine(engineOptions{
		Store: store, Catalog: func() *catalog { return te.cat },
		Env: func() map[string]string { return map[string]string{"COUNTER": te.counter.URL} },
		Log: cmp.Or(te.logger, discardLogger()), RetryBase: 10 * time.Millisecond, CompactBytes: te.compactBytes,
		History: te.history, Retention: te.retention, BusyLimit: te.busyLimit, IdemRetention: te.idemRetention,
	})
	if err != nil {
		t.Fatal(err)
	}
	te.engine = e
	t.Cleanup(func() { e.close() })
}

// reopenFromSnapshot closes te, compacts its log into a snapshot (the
// records of one more run trigger it) and reopens the engine from that
// snapshot; it returns the snapshot.
func (te *testEngine) reopenFromSnapshot(t *testing.T) []byte {
	t.Helper()
	te.close()
	te.compactBytes = 1
	te.open(t)
	te.startWait(t, "three", `{"id":"after"}`) // its records trigger a compaction
	te.close()
	snap := te.lastSnapshot(t)
	if snap == nil {
		t.Fatal("no snapshot was written")
	}
	te.compactBytes = 0
	te.open(t)
	return snap
}

// startWait starts a workflow and waits (bounded) for it to end.
func (te *testEngine) startWait(t *testing.T, name, input string) runRecord {
	t.Helper()
	rc, err := te.start(startRequest{Workflow: name, Input: json.RawMessage(input), Trigger: triggerHTTP})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return te.await(t, rc.RunID)
}

// await waits (bounded) for the run to end and returns it.
func (te *testEngine) await(t *testing.T, id string) runRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := te.wait(ctx, id); err != nil {
		r, _ := te.get(id)
		t.Fatalf("run %s did not end: %v (status %s)", id, err, r.Status)
	}
	// An ended run may already have left memory for the run history.
	r, ok, err := te.find(ctx, id)
	if err != nil || !ok {
		t.Fatalf("run %s ended but cannot be read: %v", id, err)
	}
	return r
}

func TestEngineStepsRunOnceAndReplay(t *testing.T) {
	eachEngineStore(t, testEngineStepsRunOnceAndReplay)
}

// testEngineStepsRunOnceAndReplay is TestEngineStepsRunOnceAndReplay on one store.
func testEngineStepsRunOnceAndReplay(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	r := te.startWait(t, "three", `{"id":"x"}`)
	if r.Status != runCompleted || string(r.Output) != `{"sum":3}` || len(r.Steps) != 3 {
		t.Fatalf("run = %s %s %d steps; want completed {\"sum\":3} 3 steps", r.Status, r.Output, len(r.Steps))
	}
	if r.TraceID == "" || !strings.HasPrefix(r.TraceID, "wrun_") || len(r.TraceID) != 31 || r.Trigger != triggerHTTP {
		t.Errorf("ids = %q trigger %q", r.TraceID, r.Trigger)
	}
	for _, s := range r.Steps {
		if s.Kind != callStep || s.Status != runCompleted || len(s.Attempts) != 1 || s.DurationMs == nil {
			t.Errorf("step = %+v", s)
		}
	}
	// Reopen: the state is rebuilt from the journal, no step runs again.
	te.close()
	te.open(t)
	again, ok := te.get(r.RunID)
	if !ok || again.Status != runCompleted || string(again.Output) != `{"sum":3}` || len(again.Steps) != 3 {
		t.Fatalf("after reopen = %+v", again)
	}
	for _, k := range []string{"x-a", "x-b", "x-c"} {
		if n := te.counter.count(k); n != 1 {
			t.Errorf("step %s ran %d times; want 1", k, n)
		}
	}
}

func TestEngineRetriesAndFatal(t *testing.T) { eachEngineStore(t, testEngineRetriesAndFatal) }

// testEngineRetriesAndFatal is TestEngineRetriesAndFatal on one store.
func testEngineRetriesAndFatal(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	te.counter.failN["flaky"] = 2
	r := te.startWait(t, "retry", `{"key":"flaky"}`)
	if r.Status != runCompleted || string(r.Output) != `{"n":3}` || len(r.Steps[0].Attempts) != 3 {
		t.Fatalf("retry run = %s %s attempts %d; want completed after 3 attempts", r.Status, r.Output, len(r.Steps[0].Attempts))
	}
	if r.Steps[0].Attempts[0].Error == nil || r.Steps[0].Attempts[2].Error != nil {
		t.Errorf("attempts = %+v; want two errors then success", r.Steps[0].Attempts)
	}
	te.counter.failN["dead"] = 100
	r = te.startWait(t, "retry", `{"key":"dead"}`)
	if r.Status != runFailed || len(r.Steps[0].Attempts) != defaultMaxAttempts || !strings.Contains(r.Error.Message, "status 500") {
		t.Fatalf("exhausted run = %s attempts %d err %+v", r.Status, len(r.Steps[0].Attempts), r.Error)
	}
	r = te.startWait(t, "retry", `{"key":"f","fatal":true}`)
	if r.Status != runFailed || len(r.Steps[0].Attempts) != 1 || r.Error.Name != "FatalError" {
		t.Fatalf("fatal run = %s attempts %d err %+v; want failed at once with FatalError", r.Status, len(r.Steps[0].Attempts), r.Error)
	}
}

func TestEngineSleepIsDurableAndDeterministic(t *testing.T) {
	eachEngineStore(t, testEngineSleepIsDurableAndDeterministic)
}

// testEngineSleepIsDurableAndDeterministic is TestEngineSleepIsDurableAndDeterministic on one store.
func testEngineSleepIsDurableAndDeterministic(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	rc, err := te.start(startRequest{Workflow: "sleepy", Input: json.RawMessage(`{"ms":300}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	// Waiting, the run lets its execution go (its goroutine ends an
	// instant after the status is set).
	eventually(t, 5*time.Second, "the run to wait, holding no execution", func() bool {
		te.mu.Lock()
		defer te.mu.Unlock()
		r := te.st.Runs[rc.RunID]
		return r.Status == runWaiting && !r.executing
	})
	// Restart while it sleeps: it wakes up after the restart.
	te.close()
	te.open(t)
	r := te.await(t, rc.RunID)
	if r.Status != runCompleted || string(r.Output) != `{"same":true,"slept":true}` {
		t.Fatalf("sleepy = %s %s; want Date.now/Math.random/randomUUID identical across replay", r.Status, r.Output)
	}
}

func TestEngineHookResume(t *testing.T) { eachEngineStore(t, testEngineHookResume) }

// testEngineHookResume is TestEngineHookResume on one store.
func testEngineHookResume(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	rc, err := te.start(startRequest{Workflow: "hooked", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	var token string
	select {
	case token = <-te.counter.tokens:
	case <-time.After(10 * time.Second):
		t.Fatal("the workflow never announced its hook token")
	}
	eventually(t, 5*time.Second, "the run to wait on its hook", func() bool { r, _ := te.get(rc.RunID); return r.Status == runWaiting })
	if _, err := te.resumeHook("hook_nope", json.RawMessage(`{}`)); err != errHookNotFound {
		t.Errorf("unknown token = %v; want errHookNotFound", err)
	}
	te.close()
	te.open(t)
	if _, err := te.resumeHook(token, json.RawMessage(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	r := te.await(t, rc.RunID)
	if r.Status != runCompleted || string(r.Output) != `{"approved":true}` {
		t.Fatalf("hooked = %s %s", r.Status, r.Output)
	}
	if _, err := te.resumeHook(token, json.RawMessage(`{}`)); err != errHookUsed {
		t.Errorf("a used hook token = %v; want errHookUsed (409)", err)
	}
	if _, err := te.resumeHook(hookTokenPrefix+rc.RunID+"_00", json.RawMessage(`{}`)); err != errHookNotFound {
		t.Errorf("a made-up token naming a real run = %v; want errHookNotFound", err)
	}
	if n := te.counter.count("hook"); n != 1 {
		t.Errorf("announce step ran %d times; want 1", n)
	}
}

func TestEngineChildWorkflows(t *testing.T) { eachEngineStore(t, testEngineChildWorkflows) }

// testEngineChildWorkflows is TestEngineChildWorkflows on one store.
func testEngineChildWorkflows(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	r := te.startWait(t, "parent", `{"id":"p"}`)
	if r.Status != runCompleted || string(r.Output) != `{"started":"started","child":3}` {
		t.Fatalf("parent = %s %s %+v", r.Status, r.Output, r.Error)
	}
	runs, _ := te.list()
	children := 0
	for _, c := range runs {
		if c.ParentRunID == r.RunID {
			children++
			if c.Trigger != triggerWorkflow {
				t.Errorf("child trigger = %q; want workflow", c.Trigger)
			}
		}
	}
	if children != 2 {
		t.Errorf("children = %d; want 2", children)
	}
}

func TestEngineCancel(t *testing.T) { eachEngineStore(t, testEngineCancel) }

// testEngineCancel is TestEngineCancel on one store.
func testEngineCancel(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	rc, _ := te.start(startRequest{Workflow: "forever", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	eventually(t, 5*time.Second, "the run to wait", func() bool { r, _ := te.get(rc.RunID); return r.Status == runWaiting })
	r, err := te.cancelRun(rc.RunID)
	if err != nil || r.Status != runCancelled {
		t.Fatalf("cancel = %+v %v", r.Status, err)
	}
	te.close()
	te.open(t)
	if r, _ := te.get(rc.RunID); r.Status != runCancelled {
		t.Errorf("after reopen status = %s; want cancelled", r.Status)
	}
	if _, err := te.cancelRun("nope"); err != errRunNotFound {
		t.Errorf("cancel unknown = %v", err)
	}
	// Cancelling a parent cancels the child it waits on.
	parent, _ := te.start(startRequest{Workflow: "waiter", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	var childID string
	eventually(t, 5*time.Second, "the child to wait", func() bool {
		p, _ := te.get(parent.RunID)
		if len(p.Steps) == 0 || p.Steps[0].ChildRunID == "" {
			return false
		}
		childID = p.Steps[0].ChildRunID
		c, _ := te.get(childID)
		return c.Status == runWaiting
	})
	te.cancelRun(parent.RunID)
	if c, _ := te.get(childID); c.Status != runCancelled {
		t.Errorf("child of a cancelled parent = %s; want cancelled", c.Status)
	}
}

func TestEngineStartValidation(t *testing.T) { eachEngineStore(t, testEngineStartValidation) }

// testEngineStartValidation is TestEngineStartValidation on one store.
func testEngineStartValidation(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	for _, tt := range []struct{ name, input, code string }{
		{"nope", `{}`, "workflow_not_found"},
		{"lonely", `{"i":"x"}`, "schema_validation"},
		{"lonely", `{}`, "schema_validation"},
		{"lonely", `{bad`, "invalid_json"},
	} {
		_, err := te.start(startRequest{Workflow: tt.name, Input: json.RawMessage(tt.input)})
		se, ok := err.(*startError)
		if !ok || se.Code != tt.code {
			t.Errorf("start(%s, %s) = %v; want %s", tt.name, tt.input, err, tt.code)
		}
	}
	if runs, q := te.list(); len(runs) != 0 || len(q) != 0 {
		t.Errorf("rejected starts left %d runs, %d queued", len(runs), len(q))
	}
}

func TestEngineSerialQueue(t *testing.T) { eachEngineStore(t, testEngineSerialQueue) }

// testEngineSerialQueue is TestEngineSerialQueue on one store.
func testEngineSerialQueue(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	const n = 8
	var wg sync.WaitGroup
	receipts := make([]startReceipt, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := te.start(startRequest{Workflow: "lonely", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Trigger: triggerHTTP})
			if err != nil {
				t.Error(err)
			}
			receipts[i] = rc
		}()
	}
	wg.Wait()
	started := 0
	for _, rc := range receipts {
		switch rc.Status {
		case "started":
			started++
			if rc.RunID == "" || rc.WorldRunID == "" {
				t.Errorf("started receipt without ids: %+v", rc)
			}
		case "queued":
			if rc.RunID != "" || rc.WorldRunID != "" {
				t.Errorf("queued receipt carries ids: %+v", rc)
			}
		}
	}
	if started != 1 {
		t.Fatalf("%d of %d concurrent serial starts started; want exactly 1", started, n)
	}
	_, queued := te.list()
	// Restart while the queue is full: order and the invariant survive.
	te.close()
	te.open(t)
	var order []string
	for _, q := range queued {
		order = append(order, string(q.Input))
	}
	eventually(t, 20*time.Second, "every serial run to complete", func() bool {
		runs, q := te.list()
		done := 0
		for _, r := range runs {
			if r.Status == runCompleted {
				done++
			}
		}
		return done == n && len(q) == 0
	})
	runs, _ := te.list()
	// runs are newest first; walk oldest first.
	var got []string
	var prevEnd time.Time
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.QueueID != "" {
			got = append(got, string(r.Input))
		}
		if !prevEnd.IsZero() && r.Steps[0].StartedAt.Before(prevEnd) {
			t.Errorf("serial run %s started a step before the previous run ended", r.RunID)
		}
		prevEnd = *r.EndedAt
	}
	if strings.Join(got, " ") != strings.Join(order, " ") {
		t.Errorf("queued runs started in order %v; want FIFO %v", got, order)
	}
}

func TestCatalogConfigOverrides(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "workflows/a.workflow.ts", `export default async function a() { "use workflow"; return 1; }`)
	writeFile(t, dir, "flows/b.ts", `export const inputSchema = { type: "object" }; export async function b() { "use workflow"; return 2; }`)
	writeFile(t, dir, "svc.config.ts", `import { defineConfig } from "svc";
export default defineConfig({ workflows: { a: { serial: true }, custom: { file: "flows/b.ts" } } });`)
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", cerr, cat.Failed)
	}
	if got := strings.Join(cat.workflowNames(), ","); got != "a,custom" {
		t.Fatalf("workflows = %s; want a,custom", got)
	}
	if !cat.Workflows["a"].Concurrency.serial() || cat.Workflows["custom"].Export != "b" || cat.Workflows["custom"].InputSchema == nil {
		t.Errorf("overrides not applied: a %+v custom %+v", cat.Workflows["a"], cat.Workflows["custom"])
	}
	writeFile(t, dir, "svc.config.ts", `export default { workflows: { a: { serial: "yes" } } };`)
	if _, cerr := compileCatalog(dir, discardLogger()); cerr == nil || !strings.Contains(cerr.Error(), "svc.config.ts") {
		t.Errorf("a bad svc.config.ts = %v; want an error naming the file", cerr)
	}
}

func TestEngineParallelCallsReplay(t *testing.T) { eachEngineStore(t, testEngineParallelCallsReplay) }

// testEngineParallelCallsReplay is TestEngineParallelCallsReplay on one store.
func testEngineParallelCallsReplay(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	dir := te.dir
	writeFile(t, dir, "workflows/fan.workflow.ts", `
import { sleep, workflows } from "svc";
async function slow(key: string) { "use step"; await new Promise((r) => setTimeout(r, 50)); const r = await fetch(process.env.COUNTER + "?k=" + key); return (await r.json()).n; }
export default async function fan() {
  "use workflow";
  const [a, child, b] = await Promise.all([slow("par-a"), workflows.startAndWait("three", { id: "fan" }), slow("par-b")]);
  await sleep(30);
  return { a, b, child: (child as any).sum };
}`)
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", cerr, cat.Failed)
	}
	te.cat = cat
	r := te.startWait(t, "fan", `{}`)
	if r.Status != runCompleted || string(r.Output) != `{"a":1,"b":1,"child":3}` {
		b, _ := json.MarshalIndent(r.Steps, "", " ")
		t.Fatalf("fan = %s %s %+v\n%s", r.Status, r.Output, r.Error, b)
	}
	kinds := []string{}
	for _, s := range r.Steps {
		kinds = append(kinds, s.Kind)
	}
	if strings.Join(kinds, ",") != "step,startAndWait,step,sleep" {
		t.Errorf("timeline kinds = %v", kinds)
	}
}

func TestEngineCompactionKeepsState(t *testing.T) { eachEngineStore(t, testEngineCompactionKeepsState) }

// testEngineCompactionKeepsState is TestEngineCompactionKeepsState on one store.
func testEngineCompactionKeepsState(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	te.close()
	te.compactBytes = 2048 // compact every few runs
	te.open(t)
	var done []runRecord
	for i := range 20 {
		done = append(done, te.startWait(t, "three", fmt.Sprintf(`{"id":"c%d"}`, i)))
	}
	// Leave a run waiting on a hook, and a serial run with a queued start.
	hooked, _ := te.start(startRequest{Workflow: "hooked", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	token := <-te.counter.tokens
	te.start(startRequest{Workflow: "forever", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	eventually(t, 10*time.Second, "a snapshot after 20 runs with CompactBytes 2048", func() bool { return te.lastSnapshot(t) != nil })
	te.close()
	te.open(t)
	for _, r := range done {
		got, ok := te.get(r.RunID)
		if !ok || got.Status != runCompleted || string(got.Output) != string(r.Output) || len(got.Steps) != 3 {
			t.Fatalf("run %s after compaction and reopen = %+v", r.RunID, got)
		}
	}
	if _, err := te.resumeHook(token, json.RawMessage(`{"approved":false}`)); err != nil {
		t.Fatalf("hook lost in the snapshot: %v", err)
	}
	if r := te.await(t, hooked.RunID); string(r.Output) != `{"approved":false}` {
		t.Errorf("hooked after reopen = %s", r.Output)
	}
	for i := range 20 {
		if n := te.counter.count(fmt.Sprintf("c%d-a", i)); n != 1 {
			t.Errorf("step c%d-a ran %d times", i, n)
		}
	}
}

// list returns every run record in memory, newest first, plus the queued
// triggers (the tests' view: their engines keep ended runs in memory).
func (e *engine) list() ([]runRecord, []queuedTrigger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	runs := make([]runRecord, 0, len(e.st.Runs))
	for _, r := range e.st.Runs {
		runs = append(runs, snapshotRun(r))
	}
	sort.Slice(runs, func(i, k int) bool { return runs[i].CreatedAt.After(runs[k].CreatedAt) })
	var queued []queuedTrigger
	for _, wf := range sortedKeys(e.st.Queues) {
		for _, q := range e.st.Queues[wf] {
			queued = append(queued, *q)
		}
	}
	return runs, queued
}
