package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// journalEndCounts reads te's log (the engine must be closed) and
// returns how many end records each run has. A record of a run after its
// end fails the test.
func (te *testEngine) journalEndCounts(t *testing.T) map[string]int {
	t.Helper()
	ends := map[string]int{}
	te.records(t, func(b []byte) {
		var ev journalEvent
		if json.Unmarshal(b, &ev) != nil {
			return // an undecodable record (TestUndecodableRecordCostsOneRun)
		}
		if ends[ev.Run] > 0 && runScoped(ev.Type) && ev.Type != evEnd {
			t.Errorf("journal: %s record of run %s after its end", ev.Type, ev.Run)
		}
		if ev.Type == evEnd {
			ends[ev.Run]++
		}
	})
	return ends
}

// checkReplayMatches closes the engine, checks that every run in the
// journal (in dir) ended at most once and nothing followed an end, reopens
// it and checks that the replayed runs are the ones memory held, ended the
// same way or still active.
func (te *testEngine) checkReplayMatches(t *testing.T) {
	t.Helper()
	runs, _ := te.list()
	before := map[string]string{}
	for _, r := range runs {
		before[r.RunID] = r.Status
	}
	te.close()
	for id, n := range te.journalEndCounts(t) {
		if n > 1 || (n == 0) != !terminal(before[id]) {
			t.Errorf("run %s (%s) has %d end records", id, before[id], n)
		}
	}
	te.open(t)
	after, _ := te.list()
	if len(after) != len(before) {
		t.Fatalf("replayed %d runs; want %d", len(after), len(before))
	}
	for _, r := range after {
		// Running and waiting are not journaled: an active run replays as
		// pending until it executes again.
		if was := before[r.RunID]; was != r.Status && (terminal(was) || terminal(r.Status)) {
			t.Errorf("run %s replayed as %s; was %q in memory", r.RunID, r.Status, was)
		}
	}
}

// TestEngineCancelRace starts and at once cancels runs from 8 clients, some
// of them parents of children, then recompiles (an edit) and restarts: no
// run executes after its cancel, every run ends exactly once, and the state
// in memory equals the state replayed from the journal.
func TestEngineCancelRace(t *testing.T) { eachEngineStore(t, testEngineCancelRace) }

// testEngineCancelRace is TestEngineCancelRace on one store.
func testEngineCancelRace(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	const clients, pairs = 8, 150
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range pairs {
				wf, input := "three", fmt.Sprintf(`{"id":"race-%d-%d"}`, c, i)
				if i%4 == 0 {
					wf = "parent"
				}
				rc, err := te.start(startRequest{Workflow: wf, Input: json.RawMessage(input), Trigger: triggerHTTP})
				if err != nil {
					errs <- err
					return
				}
				if _, err := te.cancelRun(rc.RunID); err != nil {
					errs <- err
					return
				}
				// A second cancel of the same run says it has ended.
				if r, err := te.cancelRun(rc.RunID); !errors.Is(err, errRunEnded) || r.Status != runCancelled {
					errs <- fmt.Errorf("second cancel = %s %v; want cancelled, errRunEnded", r.Status, err)
					return
				}
				mu.Lock()
				ids = append(ids, rc.RunID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// An edit reschedules every unfinished run; cancelled ones must stay put.
	te.resumeAll()
	eventually(t, 20*time.Second, "every run ended", func() bool {
		runs, _ := te.list()
		for _, r := range runs {
			if !terminal(r.Status) {
				return false
			}
		}
		return true
	})
	before := map[string]string{}
	runs, _ := te.list()
	for _, r := range runs {
		before[r.RunID] = r.Status
	}
	for _, id := range ids {
		if before[id] != runCancelled {
			t.Errorf("run %s is %s; want cancelled", id, before[id])
		}
	}
	te.checkReplayMatches(t)
	// A cancelled run never ran a step after its cancel: a step of a
	// cancelled run ran at most once (the one in flight when it landed).
	for c := range clients {
		for i := range pairs {
			for _, s := range []string{"a", "b", "c"} {
				if n := te.counter.count(fmt.Sprintf("race-%d-%d-%s", c, i, s)); n > 1 {
					t.Errorf("step race-%d-%d-%s ran %d times", c, i, s, n)
				}
			}
		}
	}
}

// post sends body to path on h and returns the status and the decoded reply.
func post(t *testing.T, h http.Handler, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+path, strings.NewReader(body)))
	var out map[string]any
	json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// testServer serves te's engine through the real route table.
func (te *testEngine) server(t testing.TB) http.Handler {
	t.Helper()
	s, err := newTestServer(&runtimeCore{log: discardLogger(), engine: soloFleet(te.engine), proj: &project{Dir: te.dir}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// worstJSON returns the worst value the edge accepts at depth levels: the
// deepest nesting, the largest floats, every width of UTF-8, escapes and
// control characters, padded with 4-byte characters to about size bytes.
func worstJSON(depth, size int) string {
	leaf := `{"max":1.7976931348623157e308,"min":-1.7976931348623157e308,"tiny":5e-324,"big":123456789012345678901234567890,` +
		`"s":"é€😀\t\n\"\\\u0001\ud83d\ude00","lone":"\ud800","t":true,"f":false,"n":null}`
	inner := strings.Repeat("[", depth-1) + leaf + strings.Repeat("]", depth-1)
	pad := strings.Repeat("😀", max(0, (size-len(inner)-16)/4))
	return `[` + inner[1:len(inner)-1] + `,"` + pad + `"]`
}

// sameJSON reports whether a and b hold the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestEdgeRejectsWhatCannotReplay sends the probes that bricked a project:
// each is answered 400 and nothing is journaled, on the start route and on
// hook resumes.
func TestEdgeRejectsWhatCannotReplay(t *testing.T) {
	eachEngineStore(t, testEdgeRejectsWhatCannotReplay)
}

// testEdgeRejectsWhatCannotReplay is TestEdgeRejectsWhatCannotReplay on one store.
func testEdgeRejectsWhatCannotReplay(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	h := te.server(t)
	bad := map[string]string{
		"10,000 deep":        `{"a":` + nestedJSON(10000) + `}`,
		"9,998 deep":         `{"a":` + nestedJSON(9997) + `}`,
		"one past the limit": `{"a":` + nestedJSON(jsonMaxDepth) + `}`,
		"invalid UTF-8":      "{\"n\":\"\xff\xfe\"}",
		"overflowing number": `{"name":1e999999}`,
		"NUL in a string":    `{"s":"\u0000"}`,
		"two values":         `{} {}`,
		"not JSON":           `{"a":`,
	}
	for name, body := range bad {
		for _, path := range []string{"/api/workflows/echo/start", "/api/workflows/three/start"} {
			if code, out := post(t, h, path, body); code != http.StatusBadRequest || out["error"].(map[string]any)["code"] != "invalid_json" {
				t.Errorf("%s: POST %s = %d %v; want 400 invalid_json", name, path, code, out)
			}
		}
	}
	for _, body := range []string{`[1,2]`, `"x"`, `3`, `null`} { // SPEC: the input is a JSON object
		if code, out := post(t, h, "/api/workflows/echo/start", body); code != http.StatusBadRequest {
			t.Errorf("start with %s = %d %v; want 400", body, code, out)
		}
	}
	if runs, queued := te.list(); len(runs) != 0 || len(queued) != 0 {
		t.Fatalf("rejected starts left %d runs and %d queued triggers", len(runs), len(queued))
	}
	code, out := post(t, h, "/api/workflows/echo/start", `{"wait":true}`)
	if code != http.StatusAccepted {
		t.Fatalf("start = %d %v", code, out)
	}
	token := waitHookToken(t, te, out["runId"].(string))
	for name, body := range bad {
		if code, out := post(t, h, "/api/hooks/"+token, body); code != http.StatusBadRequest {
			t.Errorf("%s: hook resume = %d %v; want 400", name, code, out)
		}
	}
	if r, _ := te.get(out["runId"].(string)); r.Status != runWaiting {
		t.Errorf("run after rejected resumes = %s; want waiting", r.Status)
	}
	te.close()
	te.open(t)
	if r, _ := te.get(out["runId"].(string)); terminal(r.Status) {
		t.Errorf("replayed run = %s; want still waiting", r.Status)
	}
}

// waitHookToken waits (bounded) until run id waits on a hook and returns
// its token.
func waitHookToken(t *testing.T, te *testEngine, id string) string {
	t.Helper()
	var token string
	eventually(t, 10*time.Second, "the run waits on its hook", func() bool {
		r, _ := te.get(id)
		for _, c := range r.Steps {
			if c.Kind == callHook && c.Status == runWaiting {
				token = c.Token
			}
		}
		return token != "" && r.Status == runWaiting
	})
	return token
}

// TestWorstAcceptedValueReplays journals the worst values the edge accepts
// (a start input and a hook payload at the depth limit, near the size
// limit, with extreme numbers and every kind of character) and replays them
// from the segments and then from a snapshot.
func TestWorstAcceptedValueReplays(t *testing.T) { eachEngineStore(t, testWorstAcceptedValueReplays) }

// testWorstAcceptedValueReplays is TestWorstAcceptedValueReplays on one store.
func testWorstAcceptedValueReplays(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	h := te.server(t)
	input := `{"wait":true,"v":` + worstJSON(jsonMaxDepth-1, maxRequestBody-64) + `}`
	payload := worstJSON(jsonMaxDepth, maxRequestBody-16)
	if len(input) > maxRequestBody || len(payload) > maxRequestBody {
		t.Fatalf("test values exceed the body limit: %d %d", len(input), len(payload))
	}
	code, out := post(t, h, "/api/workflows/echo/start", input)
	if code != http.StatusAccepted {
		t.Fatalf("start = %d %v", code, out)
	}
	id := out["runId"].(string)
	token := waitHookToken(t, te, id)
	if code, out := post(t, h, "/api/hooks/"+token, payload); code != http.StatusAccepted {
		t.Fatalf("resume = %d %v", code, out)
	}
	r := te.await(t, id)
	if r.Status != runCompleted || !sameJSON(r.Output, []byte(payload)) || !sameJSON(r.Input, []byte(input)) {
		t.Fatalf("run = %s %v; want completed with the payload as output", r.Status, r.Error)
	}
	check := func(from string) {
		t.Helper()
		got, ok := te.get(id)
		if !ok || got.Status != runCompleted || !sameJSON(got.Output, r.Output) || !sameJSON(got.Input, r.Input) || !sameJSON(got.Steps[0].Result, r.Input) {
			t.Fatalf("replayed from %s: %s; want the same completed run", from, got.Status)
		}
	}
	te.close()
	te.open(t)
	check("segments")
	te.reopenFromSnapshot(t)
	check("a snapshot")
}

// TestUndecodableRecordCostsOneRun replays a journal holding records that
// cannot be decoded (written past the limits by hand): boot fails the runs
// they belong to, with the reason, and brings up the rest.
func TestUndecodableRecordCostsOneRun(t *testing.T) {
	eachEngineStore(t, testUndecodableRecordCostsOneRun)
}

// testUndecodableRecordCostsOneRun is TestUndecodableRecordCostsOneRun on one store.
func testUndecodableRecordCostsOneRun(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	te.close()
	now := time.Now().UnixMicro()
	deep := nestedJSON(10000)
	te.appendRaw(t, []string{
		fmt.Sprintf(`{"t":"start","at":%d,"r":"run-a","w":"wrun_a","wf":"three","in":{"id":%s},"tr":"http"}`, now, deep),
		fmt.Sprintf(`{"t":"start","at":%d,"r":"run-b","w":"wrun_b","wf":"three","in":{"id":"poison-b"},"tr":"http"}`, now),
		fmt.Sprintf(`{"t":"start","at":%d,"r":"run-c","w":"wrun_c","wf":"three","in":{"id":"poison-c"},"tr":"http"}`, now),
		fmt.Sprintf(`{"t":"step","at":%d,"r":"run-c","s":1,"n":"hit","a":1,"sa":%d,"f":true,"res":%s}`, now, now, deep),
		fmt.Sprintf(`{"t":"start","at":%d,"r":"run-d","w":"wrun_d","wf":"three","in":{"n":1e999999},"tr":"http"}`, now),
	}...)
	for boot := 1; boot <= 2; boot++ {
		te.open(t)
		for _, id := range []string{"run-a", "run-c", "run-d"} {
			r, ok := te.get(id)
			if !ok || r.Status != runFailed || r.Error == nil || r.Error.Name != "JournalError" || r.WorkflowName != "three" {
				t.Fatalf("boot %d: %s = %+v; want failed with a JournalError", boot, id, r)
			}
		}
		if r := te.await(t, "run-b"); r.Status != runCompleted {
			t.Fatalf("boot %d: run-b = %s; want completed", boot, r.Status)
		}
		te.close()
	}
	for id, n := range te.journalEndCounts(t) {
		if n != 1 {
			t.Errorf("run %s has %d end records; want 1", id, n)
		}
	}
	if n := te.counter.count("poison-c-a"); n != 0 {
		t.Errorf("the failed run's step ran %d times", n)
	}
}

// TestWiresAndSettingsRejectWhatCannotReplay sends the same probes to the
// three chat wires and the settings route: each is a 400 in the route's
// own shape, and no turn is recorded.
func TestWiresAndSettingsRejectWhatCannotReplay(t *testing.T) {
	env := newWiresEnv(t, "")
	auth := map[string]string{"Authorization": "Bearer k"}
	for name, bad := range map[string]string{
		"deep":     nestedJSON(10000),
		"utf8":     "\"\xff\xfe\"",
		"infinite": "1e999999",
		"nul":      `"\u0000"`,
	} {
		for path, body := range map[string]string{
			"/openai/v1/chat/completions": `{"model":"helper","messages":[{"role":"user","content":"hi"}],"metadata":` + bad + `}`,
			"/anthropic/v1/messages":      `{"model":"helper","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"metadata":` + bad + `}`,
			"/agui/helper":                `{"threadId":"","runId":"r","messages":[{"id":"1","role":"user","content":"hi"}],"state":` + bad + `}`,
		} {
			if rep := env.post(t, path, auth, body); rep.Status != http.StatusBadRequest {
				t.Errorf("%s: POST %s = %d %s; want 400", name, path, rep.Status, rep.Body)
			}
		}
		rec := httptest.NewRecorder()
		srv, err := newTestServer(env.rt)
		if err != nil {
			t.Fatal(err)
		}
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "http://127.0.0.1/api/settings/model-provider",
			strings.NewReader(`{"provider":"openai","apiKey":"k","model":`+bad+`}`)))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: PUT /api/settings/model-provider = %d %s; want 400", name, rec.Code, rec.Body)
		}
	}
	if runs, _ := env.rt.engine.list(); len(runs) != 0 {
		t.Errorf("%d turns recorded for rejected requests", len(runs))
	}
}

// TestJournalFullDisk runs the engine on a small tmpfs the test fills: a
// change is refused with 503 journal_unavailable and Retry-After, health
// says the journal failed, nothing that was refused shows in the API, a run
// whose step and end could not be written is not reported ended, and once
// space returns the journal recovers by itself and that run ends exactly
// once.
func TestJournalFullDisk(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	te := newTestEngine(t)
	te.close()
	mnt := te.dir + "/.svc/journal"
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	te.open(t)
	h := te.server(t)
	health := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/health", nil))
		var out map[string]any
		json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	if r := te.startWait(t, "three", `{"id":"before"}`); r.Status != runCompleted {
		t.Fatalf("run before the disk filled = %s", r.Status)
	}
	// A run whose first step is in flight while the disk fills.
	code, out := post(t, h, "/api/workflows/three/start", `{"id":"hold-x"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start = %d %v", code, out)
	}
	held := out["runId"].(string)
	select {
	case <-te.counter.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the held step never ran")
	}
	filler, err := os.Create(mnt + "/filler")
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for range 64 { // 4 MiB at most: the tmpfs holds 1 MiB
		if _, err := filler.Write(chunk); err != nil {
			break
		}
	}
	filler.Close()
	// The refused start: 503 with Retry-After, and no trace of it.
	var refused map[string]any
	refusedInput := ""
	for i := range 50 {
		refusedInput = fmt.Sprintf(`{"id":"attempt-%d"}`, i)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/api/workflows/three/start", strings.NewReader(refusedInput)))
		if rec.Code == http.StatusServiceUnavailable {
			json.Unmarshal(rec.Body.Bytes(), &refused)
			if rec.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			break
		}
		if rec.Code != http.StatusAccepted {
			t.Fatalf("start on a full disk = %d %s", rec.Code, rec.Body)
		}
		time.Sleep(20 * time.Millisecond) // the first appends may still fit
	}
	if refused == nil || refused["error"].(map[string]any)["code"] != "journal_unavailable" {
		t.Fatalf("start on a full disk was never refused: %v", refused)
	}
	close(te.counter.unhold) // the held step finishes: its result and the end cannot be written
	eventually(t, 10*time.Second, "health reports the failed journal", func() bool {
		code, out := health()
		return code == http.StatusServiceUnavailable && out["journal"].(map[string]any)["state"] == "failed"
	})
	eventually(t, 10*time.Second, "only durable runs show", func() bool {
		runs, _ := te.list()
		for _, r := range runs {
			if string(r.Input) == refusedInput || (r.RunID == held && terminal(r.Status)) {
				return false
			}
		}
		return true
	})
	if code, _ := post(t, h, "/api/runs/"+held+"/cancel", ``); code != http.StatusServiceUnavailable {
		t.Errorf("cancel on a full disk = %d; want 503", code)
	}
	// Space returns: the journal recovers without a restart.
	if err := os.Remove(mnt + "/filler"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the journal recovers", func() bool {
		code, _ := health()
		return code == http.StatusOK
	})
	if r := te.await(t, held); r.Status != runCompleted || string(r.Output) == "" {
		t.Fatalf("held run after recovery = %s %v; want completed", r.Status, r.Error)
	}
	if r := te.startWait(t, "three", `{"id":"after"}`); r.Status != runCompleted {
		t.Fatalf("run after recovery = %s", r.Status)
	}
	te.checkReplayMatches(t)
}

// TestEngineTimelinesAreHonest checks that a run's timeline never says a
// call goes on once the run has ended, and that a step attempt cut short
// by a shutdown is recorded as interrupted.
func TestEngineTimelinesAreHonest(t *testing.T) { eachEngineStore(t, testEngineTimelinesAreHonest) }

// testEngineTimelinesAreHonest is TestEngineTimelinesAreHonest on one store.
func testEngineTimelinesAreHonest(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	open := func(r runRecord) []string {
		var calls []string
		for _, c := range r.Steps {
			if c.Status == runRunning || c.Status == runWaiting || c.EndedAt == nil || c.Inflight != nil {
				calls = append(calls, fmt.Sprintf("%d %s %s", c.Seq, c.Kind, c.Status))
			}
		}
		return calls
	}
	for _, input := range []string{`{}`, `{"fail":true}`} {
		r := te.startWait(t, "abandon", input)
		if len(r.Steps) != 2 || len(open(r)) != 0 {
			t.Errorf("abandon %s = %s with calls still open: %v", input, r.Status, open(r))
		}
		for _, c := range r.Steps {
			if c.Status != runCancelled || c.Error == nil {
				t.Errorf("abandon %s: %s call = %s %v; want cancelled with the reason", input, c.Kind, c.Status, c.Error)
			}
		}
	}
	p := te.startWait(t, "parent", `{"id":"honest"}`)
	if p.Status != runCompleted || len(open(p)) != 0 {
		t.Errorf("parent = %s with calls still open: %v", p.Status, open(p))
	}
	rc, err := te.start(startRequest{Workflow: "sleepy", Input: json.RawMessage(`{"ms":3600000}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the run sleeps", func() bool { r, _ := te.get(rc.RunID); return r.Status == runWaiting })
	if r, err := te.cancelRun(rc.RunID); err != nil || len(open(r)) != 0 {
		t.Errorf("cancelled sleeper: %v, calls still open: %v", err, open(r))
	}
	if code, out := post(t, te.server(t), "/api/runs/"+rc.RunID+"/cancel", ""); code != http.StatusConflict || out["error"].(map[string]any)["code"] != "run_ended" {
		t.Errorf("cancel of an ended run = %d %v; want 409 run_ended", code, out)
	}
	// A step in flight during a shutdown: interrupted, then retried.
	rc, err = te.start(startRequest{Workflow: "three", Input: json.RawMessage(`{"id":"hold-i"}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-te.counter.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the held step never ran")
	}
	// The request reaches the server a moment before the engine journals
	// that the attempt began (it learns that a step waits on I/O only once
	// the step's code has run): shut down once it has.
	eventually(t, 10*time.Second, "the attempt is journaled as begun", func() bool {
		r, _ := te.get(rc.RunID)
		return len(r.Steps) > 0 && r.Steps[0].Inflight != nil
	})
	te.close()
	close(te.counter.unhold)
	te.open(t)
	r := te.await(t, rc.RunID)
	first := r.Steps[0]
	if r.Status != runCompleted || len(first.Attempts) != 2 || first.Attempts[0].Error == nil || first.Attempts[0].Error.Name != "Interrupted" || first.Attempts[1].Error != nil {
		t.Fatalf("run = %s, first step attempts %+v; want an interrupted attempt then a good one", r.Status, first.Attempts)
	}
}

// TestEngineQueueEntriesAreFirstClass reads and cancels serial queue
// entries by their q_ id, across a restart, and checks that a parent
// waiting on a cancelled entry fails with the reason.
func TestEngineQueueEntriesAreFirstClass(t *testing.T) {
	eachEngineStore(t, testEngineQueueEntriesAreFirstClass)
}

// testEngineQueueEntriesAreFirstClass is TestEngineQueueEntriesAreFirstClass on one store.
func testEngineQueueEntriesAreFirstClass(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	start := func(wf string) startReceipt {
		t.Helper()
		rc, err := te.start(startRequest{Workflow: wf, Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	first := start("turnstile")
	token := waitHookToken(t, te, first.RunID)
	second := start("turnstile")
	if second.Status != "queued" || !isQueueID(second.QueueID) || second.RunID != "" {
		t.Fatalf("second start = %+v; want queued with a queue id", second)
	}
	h := te.server(t)
	get := func(id string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/runs/"+id, nil))
		var out map[string]any
		json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	if code, out := get(second.QueueID); code != http.StatusOK || out["run"].(map[string]any)["status"] != runQueued {
		t.Fatalf("GET queued entry = %d %v", code, out)
	}
	if code, out := post(t, h, "/api/runs/"+second.QueueID+"/cancel", ""); code != http.StatusOK || out["run"].(map[string]any)["status"] != runCancelled {
		t.Fatalf("cancel queued entry = %d %v", code, out)
	}
	if code, _ := get(second.QueueID); code != http.StatusNotFound {
		t.Errorf("GET a cancelled queue entry = %d; want 404", code)
	}
	// A parent waiting on a queued child: cancelling the entry fails it.
	parent := start("queuer")
	var childQueue string
	eventually(t, 10*time.Second, "the parent's child is queued", func() bool {
		r, _ := te.get(parent.RunID)
		if len(r.Steps) == 1 && r.Steps[0].QueueID != "" {
			childQueue = r.Steps[0].QueueID
		}
		return childQueue != "" && r.Status == runWaiting
	})
	third := start("turnstile")
	te.close()
	te.open(t)
	h = te.server(t)
	if _, err := te.cancelRun(childQueue); err != nil {
		t.Fatal(err)
	}
	if r := te.await(t, parent.RunID); r.Status != runFailed || r.Error == nil || !strings.Contains(r.Error.Message, "cancelled before its turn") {
		t.Errorf("parent of a cancelled entry = %s %v; want failed naming the cancellation", r.Status, r.Error)
	}
	// The remaining entry starts when the first run ends and reads as its run.
	if _, err := te.resumeHook(token, json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	te.await(t, first.RunID)
	eventually(t, 10*time.Second, "the third entry started", func() bool {
		code, out := get(third.QueueID)
		return code == http.StatusOK && out["run"].(map[string]any)["status"] == runWaiting
	})
	te.checkReplayMatches(t)
}

// TestEngineEditKeepsInFlightRuns edits a workflow while runs of it sleep:
// they finish on the code they started with, live and after a restart
// (the version is loaded from disk), while new runs take the new code.
func TestEngineEditKeepsInFlightRuns(t *testing.T) {
	eachEngineStore(t, testEngineEditKeepsInFlightRuns)
}

// testEngineEditKeepsInFlightRuns is TestEngineEditKeepsInFlightRuns on one store.
func testEngineEditKeepsInFlightRuns(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	compile := func(src string) {
		t.Helper()
		writeFile(t, te.dir, "workflows/edited.workflow.ts", src)
		cat, cerr := compileCatalog(te.dir, discardLogger())
		if cerr != nil || cat.Workflows["edited"] == nil {
			t.Fatalf("compile: %v %v", cerr, cat.Failed)
		}
		te.cat = cat
	}
	compile(`
import { sleep } from "svc";
async function a() { "use step"; return "a1"; }
export default async function edited(input: { ms: number }) { "use workflow"; const x = await a(); await sleep(input.ms); return { v: 1, x }; }`)
	start := func(ms int) string {
		t.Helper()
		rc, err := te.start(startRequest{Workflow: "edited", Input: json.RawMessage(fmt.Sprintf(`{"ms":%d}`, ms)), Trigger: triggerHTTP})
		if err != nil {
			t.Fatal(err)
		}
		return rc.RunID
	}
	live, restarted := start(300), start(1500)
	for _, id := range []string{live, restarted} {
		eventually(t, 10*time.Second, "the run sleeps", func() bool { r, _ := te.get(id); return r.Status == runWaiting })
	}
	compile(`
import { sleep } from "svc";
async function b() { "use step"; return "b2"; }
async function a() { "use step"; return "a2"; }
export default async function edited(input: { ms: number }) { "use workflow"; await sleep(1); const y = await b(); const x = await a(); return { v: 2, x, y }; }`)
	te.resumeAll() // what an edit does
	if r := te.await(t, live); r.Status != runCompleted || string(r.Output) != `{"v":1,"x":"a1"}` {
		t.Errorf("run in flight during the edit = %s %s %v; want the old code's output", r.Status, r.Output, r.Error)
	}
	if r := te.await(t, start(1)); r.Status != runCompleted || string(r.Output) != `{"v":2,"x":"a2","y":"b2"}` {
		t.Errorf("run started after the edit = %s %s %v; want the new code's output", r.Status, r.Output, r.Error)
	}
	te.close()
	te.open(t)
	if r := te.await(t, restarted); r.Status != runCompleted || string(r.Output) != `{"v":1,"x":"a1"}` {
		t.Errorf("run resumed after a restart = %s %s %v; want the old code's output", r.Status, r.Output, r.Error)
	}
	te.close()
	te.open(t)
	if left := te.savedVersions(t); len(left) != 0 {
		t.Errorf("saved versions left with no active run: %v", left)
	}
}

// TestEngineRunawayCode checks that workflow code that never yields fails
// its run after the busy limit, that a step past its timeout (set in
// svc.config.ts) fails, whether it spins or waits, and that fetch and
// setTimeout in workflow code fail saying where such code belongs.
func TestEngineRunawayCode(t *testing.T) { eachEngineStore(t, testEngineRunawayCode) }

// testEngineRunawayCode is TestEngineRunawayCode on one store.
func testEngineRunawayCode(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	te.close()
	for f, src := range map[string]string{
		"workflows/spin.workflow.ts": `
export default async function spin() { "use workflow"; while (true) {} }`,
		"workflows/spinlater.workflow.ts": `
async function one() { "use step"; return 1; }
export default async function spinlater() { "use workflow"; await one(); for (;;) {} }`,
		"workflows/fetcher.workflow.ts": `
export default async function fetcher() { "use workflow"; return await fetch("http://127.0.0.1:1/"); }`,
		"workflows/timer.workflow.ts": `
export default async function timer() { "use workflow"; setTimeout(() => {}, 10); return 1; }`,
		"workflows/slowstep.workflow.ts": `
async function spinning() { "use step"; while (true) {} }
async function waiting() { "use step"; await new Promise((r) => setTimeout(r, 60000)); return 1; }
export default async function slowstep(input: { wait?: boolean }) { "use workflow"; return input.wait ? await waiting() : await spinning(); }`,
		"svc.config.ts": `export default { workflows: { slowstep: { stepTimeout: "300ms" } } };`,
	} {
		writeFile(t, te.dir, f, src)
	}
	cat, cerr := compileCatalog(te.dir, discardLogger())
	if cerr != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", cerr, cat.Failed)
	}
	te.cat, te.busyLimit = cat, 300*time.Millisecond
	te.open(t)
	for _, tc := range []struct{ wf, input, want string }{
		{"spin", `{}`, "without yielding"},
		{"spinlater", `{}`, "without yielding"},
		{"fetcher", `{}`, "fetch cannot be used in workflow code"},
		{"timer", `{}`, "use sleep()"},
		{"slowstep", `{}`, "timed out after 300ms"},
		{"slowstep", `{"wait":true}`, "timed out after 300ms"},
	} {
		r := te.startWait(t, tc.wf, tc.input)
		if r.Status != runFailed || r.Error == nil || !strings.Contains(r.Error.Message, tc.want) {
			t.Errorf("%s %s = %s %+v; want failed saying %q", tc.wf, tc.input, r.Status, r.Error, tc.want)
		}
	}
	// An ordinary run is not disturbed by the watchdog.
	if r := te.startWait(t, "three", `{"id":"busy"}`); r.Status != runCompleted {
		t.Errorf("an ordinary run under a short busy limit = %s %v", r.Status, r.Error)
	}
}

// TestEngineLogsRunsAndStacks checks the run log lines (one per start and
// end, and per step attempt at debug level) and that an error thrown by
// user code keeps a stack with TypeScript file:line.
func TestEngineLogsRunsAndStacks(t *testing.T) { eachEngineStore(t, testEngineLogsRunsAndStacks) }

// testEngineLogsRunsAndStacks is TestEngineLogsRunsAndStacks on one store.
func testEngineLogsRunsAndStacks(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	te.close()
	var out syncBuffer
	te.logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	te.open(t)
	te.counter.failN["logged"] = 1
	r := te.startWait(t, "retry", `{"key":"logged"}`)
	logs := out.String()
	for _, want := range []string{
		`msg="run started" workflow=retry run=` + r.RunID + ` trigger=http`,
		`msg="step attempt" run=` + r.RunID + ` step=flaky attempt=1`,
		`msg="step attempt" run=` + r.RunID + ` step=flaky attempt=2`,
		`msg="run ended" workflow=retry run=` + r.RunID + ` status=completed duration=`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	f := te.startWait(t, "retry", `{"key":"x","fatal":true}`)
	for what, e := range map[string]*runError{"run": f.Error, "step attempt": f.Steps[0].Attempts[0].Error} {
		if e == nil || !strings.Contains(e.Stack, "at fatal (workflows/retry.workflow.ts:4:") {
			t.Errorf("%s error = %+v; want a stack naming workflows/retry.workflow.ts:4", what, e)
		}
	}
}

// TestEngineKeepsConsoleWithTheRun checks that console lines of workflow
// and step code are kept with the run, each once although the workflow
// code is replayed after its sleep, with the step and attempt, and that
// they replay from the journal.
func TestEngineKeepsConsoleWithTheRun(t *testing.T) {
	eachEngineStore(t, testEngineKeepsConsoleWithTheRun)
}

// testEngineKeepsConsoleWithTheRun is TestEngineKeepsConsoleWithTheRun on one store.
func testEngineKeepsConsoleWithTheRun(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	r := te.startWait(t, "chatty", `{}`)
	want := []string{"info  before", `info talk#1 step says 1 {"n":1}`, "warn  between", "info  napping", "error  after"}
	got := func(r runRecord) []string {
		var lines []string
		for _, l := range r.Logs {
			step := ""
			if l.Step != "" {
				step = fmt.Sprintf("%s#%d", l.Step, l.Attempt)
			}
			lines = append(lines, l.Level+" "+step+" "+l.Message)
		}
		return lines
	}
	if !reflect.DeepEqual(got(r), want) {
		t.Fatalf("logs = %q; want %q", got(r), want)
	}
	te.close()
	te.open(t)
	if again, _ := te.get(r.RunID); !reflect.DeepEqual(got(again), want) {
		t.Fatalf("replayed logs = %q; want %q", got(again), want)
	}
}
