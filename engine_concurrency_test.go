package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func init() {
	// A workflow limited to two active runs per user, each waiting on a
	// hook until the test resumes it.
	engineWorkflows["workflows/peruser.workflow.ts"] = peruserWorkflow
}

// peruserWorkflow holds each run on a hook; at most two per input user.
const peruserWorkflow = `
import { createHook } from "svc";
export const concurrency = { limit: 2, key: "/user" };
export default async function peruser(input: { user?: unknown, i?: number }) { "use workflow"; return await createHook(); }`

// TestConcurrencyDeclaration loads workflow files with good and bad
// concurrency declarations: the bad ones fail to compile with a message
// that names what to write.
func TestConcurrencyDeclaration(t *testing.T) {
	good := map[string]concurrencyDecl{
		`export const serial = true;`:                                                           {Limit: 1},
		`export const concurrency = { limit: 8 };`:                                              {Limit: 8},
		`export const concurrency = { limit: 10000, key: "/a~1b/0/c~0" };`:                      {Limit: 10000, Key: "/a~1b/0/c~0"},
		`export const serial = false; export const concurrency = { limit: 3, key: "/userId" };`: {Limit: 3, Key: "/userId"},
		``: {},
	}
	bad := map[string]string{
		`export const concurrency = { limit: 0 };`:                             "want an integer from 1 to 10000",
		`export const concurrency = { limit: 10001 };`:                         "want an integer from 1 to 10000",
		`export const concurrency = { limit: 1.5 };`:                           "want an integer from 1 to 10000",
		`export const concurrency = { limit: "8" };`:                           "want an integer from 1 to 10000",
		`export const concurrency = { key: "/userId" };`:                       "limit is missing",
		`export const concurrency = { limit: 2, key: "userId" };`:              "want a JSON pointer",
		`export const concurrency = { limit: 2, key: "" };`:                    "want a JSON pointer",
		`export const concurrency = { limit: 2, key: "/a~2" };`:                "want a JSON pointer",
		`export const concurrency = { limit: 2, key: 7 };`:                     "want a JSON pointer string",
		`export const concurrency = { limit: 2, keys: "/a" };`:                 `unknown property "keys"`,
		`export const concurrency = 8;`:                                        "want an object",
		`export const serial = true; export const concurrency = { limit: 2 };`: "also exports serial = true",
	}
	compile := func(decl string) (*catalog, string) {
		dir := t.TempDir()
		writeFile(t, dir, "workflows/w.workflow.ts", decl+`
export default async function w() { "use workflow"; return 1; }`)
		cat, cerr := compileCatalog(dir, discardLogger())
		if cerr != nil {
			t.Fatal(cerr)
		}
		if ce := cat.Failed["w"]; ce != nil {
			return cat, ce.Message
		}
		return cat, ""
	}
	for decl, want := range good {
		cat, msg := compile(decl)
		if msg != "" || cat.Workflows["w"].Concurrency != want {
			t.Errorf("%s: compile error %q, concurrency %+v; want %+v", decl, msg, cat.Workflows["w"], want)
		}
	}
	for decl, want := range bad {
		if _, msg := compile(decl); !strings.Contains(msg, want) || !strings.Contains(msg, "export const concurrency") {
			t.Errorf("%s: compile error %q; want one naming concurrency and %q", decl, msg, want)
		}
	}
}

// TestConcurrencyKeyOfInput resolves the key of inputs: strings and
// numbers name their bucket, a missing or null key the shared "" bucket,
// other types and over-long keys are refused.
func TestConcurrencyKeyOfInput(t *testing.T) {
	d := concurrencyDecl{Limit: 2, Key: "/user/id"}
	for in, want := range map[string]string{
		`{"user":{"id":"ann"}}`: "ann", `{"user":{"id":12.50}}`: "12.50", `{"user":{"id":null}}`: "", `{}`: "", `{"user":"ann"}`: "",
		`{"user":{"id":"` + strings.Repeat("é", 128) + `"}}`: strings.Repeat("é", 128),
	} {
		if got, err := d.concurrencyKey("w", json.RawMessage(in)); err != nil || got != want {
			t.Errorf("key of %.60s = %q, %v; want %q", in, got, err, want)
		}
	}
	arr := concurrencyDecl{Limit: 2, Key: "/list/1/a~1b"}
	if got, _ := arr.concurrencyKey("w", json.RawMessage(`{"list":[{},{"a/b":"x"}]}`)); got != "x" {
		t.Errorf("key through an array index and an escaped token = %q; want x", got)
	}
	for _, in := range []string{`{"user":{"id":{"x":1}}}`, `{"user":{"id":[1]}}`, `{"user":{"id":true}}`, `{"user":{"id":"` + strings.Repeat("a", concurrencyMaxKey+1) + `"}}`} {
		var ke *concurrencyKeyError
		if _, err := d.concurrencyKey("w", json.RawMessage(in)); !errors.As(err, &ke) {
			t.Errorf("key of %.60s: err %v; want a concurrency key error", in, err)
		}
	}
}

// TestEngineConcurrencyLimit starts a workflow limited to two active runs
// per user for three users at once: two of each start, the rest queue per
// user with queue ids, listed; the limit and the queues survive a restart;
// as runs end, each user's queue advances FIFO and never more than two of
// a user's runs overlap; a wait on a queue id lasts until its run ended. Inputs without the key share one bucket; a key of
// another type or too long is refused with nothing written.
func TestEngineConcurrencyLimit(t *testing.T) { eachEngineStore(t, testEngineConcurrencyLimit) }

// testEngineConcurrencyLimit is TestEngineConcurrencyLimit on one store.
func testEngineConcurrencyLimit(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	const users, per = 3, 5
	receipts := make([][]startReceipt, users)
	var wg sync.WaitGroup
	for u := range users {
		wg.Add(1)
		go func() { // each user's starts in order, the users at once
			defer wg.Done()
			for i := range per {
				rc, err := te.start(startRequest{Workflow: "peruser", Input: json.RawMessage(fmt.Sprintf(`{"user":"u%d","i":%d}`, u, i)), Trigger: triggerHTTP})
				if err != nil {
					t.Error(err)
				}
				receipts[u] = append(receipts[u], rc)
			}
		}()
	}
	wg.Wait()
	for u, rcs := range receipts {
		for i, rc := range rcs {
			if want := map[bool]string{true: "started", false: "queued"}[i < 2]; rc.Status != want || (want == "queued") != isQueueID(rc.QueueID) {
				t.Errorf("user u%d start %d = %+v; want %s", u, i, rc, want)
			}
		}
	}
	// The queued entries as the runs API lists them: per user, in order,
	// with their key.
	checkQueued := func(when string) {
		t.Helper()
		rec := httptest.NewRecorder()
		te.server(t).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/runs?workflow=peruser", nil))
		var page struct{ Queued []queuedTrigger }
		json.Unmarshal(rec.Body.Bytes(), &page)
		for u, rcs := range receipts {
			var got, want []string
			for _, q := range page.Queued {
				if q.LimitKey == fmt.Sprintf("u%d", u) && q.Limit == 2 {
					got = append(got, q.QueueID)
				}
			}
			for _, rc := range rcs[2:] {
				want = append(want, rc.QueueID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: user u%d's queue lists %v; want %v", when, u, got, want)
			}
		}
	}
	checkQueued("before the restart")
	te.close()
	te.open(t)
	checkQueued("after the restart")

	// Without the key: one shared bucket. Of another type: refused.
	for i := range 3 {
		rc, err := te.start(startRequest{Workflow: "peruser", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Trigger: triggerHTTP})
		if want := map[bool]string{true: "started", false: "queued"}[i < 2]; err != nil || rc.Status != want {
			t.Errorf("keyless start %d = %+v %v; want %s", i, rc, err, want)
		}
	}
	for _, in := range []string{`{"user":{"id":1}}`, `{"user":"` + strings.Repeat("x", concurrencyMaxKey+1) + `"}`} {
		var se *startError
		if _, err := te.start(startRequest{Workflow: "peruser", Input: json.RawMessage(in), Trigger: triggerHTTP}); !errors.As(err, &se) || se.Code != "invalid_concurrency_key" {
			t.Errorf("start with key %.40s: %v; want invalid_concurrency_key", in, err)
		}
	}

	// A wait on a queued entry's id lasts until the run it becomes ends.
	waited := make(chan runRecord, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := te.wait(ctx, receipts[0][per-1].QueueID); err != nil {
			t.Error(err)
		}
		r, _ := te.findQueued(receipts[0][per-1].QueueID)
		waited <- r
	}()
	// Drain: resume every waiting run until all ended.
	const total = users*per + 3
	for round := 0; ; round++ {
		runs, queued := te.list()
		var waiting []runRecord
		done := 0
		for _, r := range runs {
			if r.WorkflowName != "peruser" {
				continue
			}
			if r.Status == runCompleted {
				done++
			} else if r.Status == runWaiting && len(r.Steps) == 1 && r.Steps[0].Token != "" {
				waiting = append(waiting, r)
			}
		}
		if done == total && len(queued) == 0 {
			break
		}
		if round > 200 {
			t.Fatalf("after %d rounds: %d of %d completed, %d queued", round, done, total, len(queued))
		}
		for _, r := range waiting {
			if _, err := te.resumeHook(r.Steps[0].Token, json.RawMessage(`1`)); err != nil {
				t.Fatal(err)
			}
		}
		if len(waiting) == 0 {
			time.Sleep(20 * time.Millisecond) // a started run has not reached its hook yet
		} else {
			for _, r := range waiting {
				te.await(t, r.RunID)
			}
		}
	}
	if r := <-waited; r.Status != runCompleted {
		t.Errorf("a wait on a queued entry returned with its run %s; want completed", r.Status)
	}
	// Every user's runs: admitted in start order, never more than two at once.
	runs, _ := te.list()
	byKey := checkConcurrencySpans(t, runs, "peruser", 2, true)
	if len(byKey) != users+1 {
		t.Errorf("runs under %d keys; want %d (the users and the keyless bucket)", len(byKey), users+1)
	}
}

// TestEngineConcurrencyReplaysSerialRecords replays queue records of a
// serial workflow in the format older versions wrote (the serial flag, no
// limit or key) behind a run that is active: they read as serial entries,
// a new start queues behind them, the limit of one holds from the records
// and from a snapshot, and the entries start in order as runs end.
func TestEngineConcurrencyReplaysSerialRecords(t *testing.T) {
	eachEngineStore(t, testEngineConcurrencyReplaysSerialRecords)
}

// testEngineConcurrencyReplaysSerialRecords is
// TestEngineConcurrencyReplaysSerialRecords on one store.
func testEngineConcurrencyReplaysSerialRecords(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	first, err := te.start(startRequest{Workflow: "turnstile", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	token := waitHookToken(t, te, first.RunID)
	te.close()
	at := time.Now().UnixMicro()
	te.appendRaw(t,
		fmt.Sprintf(`{"t":"queue","at":%d,"wf":"turnstile","in":{"n":1},"tr":"http","se":true,"q":"q_old1"}`, at),
		fmt.Sprintf(`{"t":"queue","at":%d,"wf":"turnstile","in":{"n":2},"tr":"http","se":true,"q":"q_old2"}`, at+1))
	check := func(from string, want []string) {
		t.Helper()
		_, queued := te.list()
		var ids []string
		for _, q := range queued {
			ids = append(ids, q.QueueID)
			if rec := q.record(); !rec.Serial || q.Limit != 0 || q.LimitKey != "" {
				t.Errorf("%s: entry %s reads as %+v; want a serial entry", from, q.QueueID, rec)
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%s: queue %v; want %v", from, ids, want)
		}
	}
	te.open(t)
	check("old records", []string{"q_old1", "q_old2"})
	third, err := te.start(startRequest{Workflow: "turnstile", Input: json.RawMessage(`{"n":3}`), Trigger: triggerHTTP})
	if err != nil || third.Status != "queued" {
		t.Fatalf("a start behind old entries = %+v %v; want queued", third, err)
	}
	te.reopenFromSnapshot(t)
	check("a snapshot", []string{"q_old1", "q_old2", third.QueueID})
	if rc, err := te.start(startRequest{Workflow: "turnstile", Input: json.RawMessage(`{"n":4}`), Trigger: triggerHTTP}); err != nil || rc.Status != "queued" {
		t.Fatalf("a start after the snapshot = %+v %v; want queued behind the active run", rc, err)
	}
	// The entries start one at a time, in order.
	for _, id := range []string{"q_old1", "q_old2", third.QueueID} {
		if _, err := te.resumeHook(token, json.RawMessage(`1`)); err != nil {
			t.Fatal(err)
		}
		var next runRecord
		eventually(t, 10*time.Second, "entry "+id+" started", func() bool {
			next, _ = te.findQueued(id)
			return next.Status == runWaiting
		})
		runs, _ := te.list()
		active := 0
		for _, r := range runs {
			if r.WorkflowName == "turnstile" && !terminal(r.Status) {
				active++
			}
		}
		if active != 1 || !next.Serial {
			t.Errorf("after %s started: %d turnstile runs active (want 1), serial %v", id, active, next.Serial)
		}
		token = waitHookToken(t, te, next.RunID)
	}
}

// checkConcurrencySpans checks the ended runs of workflow, by key: each
// recorded limit, never more than limit of one key active at once (by
// their created and ended times), and, with fifo, admitted in the order of
// their input's i. It returns the runs by key.
func checkConcurrencySpans(t *testing.T, runs []runRecord, workflow string, limit int, fifo bool) map[string][]runRecord {
	t.Helper()
	byKey := map[string][]runRecord{}
	for _, r := range runs {
		if r.WorkflowName == workflow {
			byKey[r.LimitKey] = append(byKey[r.LimitKey], r)
		}
	}
	for key, rs := range byKey {
		slices.SortFunc(rs, func(a, b runRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
		var order []int
		for _, r := range rs {
			var in struct{ I int }
			json.Unmarshal(r.Input, &in)
			order = append(order, in.I)
			if r.EndedAt == nil || r.concurrencyLimit() != limit {
				t.Errorf("run %s of key %q: ended %v, recorded limit %d; want ended, limit %d", r.RunID, key, r.EndedAt, r.concurrencyLimit(), limit)
				continue
			}
			overlapping := 0
			for _, o := range rs {
				if o.EndedAt != nil && !o.CreatedAt.After(r.CreatedAt) && o.EndedAt.After(r.CreatedAt) {
					overlapping++
				}
			}
			if overlapping > limit {
				t.Errorf("key %q: %d runs active when run %d started; want at most %d", key, overlapping, in.I, limit)
			}
		}
		if fifo && !slices.IsSorted(order) {
			t.Errorf("key %q: runs admitted in input order %v; want FIFO", key, order)
		}
	}
	return byKey
}

// TestConcurrencyLimitSurvivesSIGKILL runs `svc dev` on the file journal
// with a workflow limited to two runs per user: three users' starts at
// once, two of each start and the rest queue with queue ids; SIGKILL and a
// restart keep the active runs and each user's queue in order (the runs
// API and svc runs list show them with their key); a key of another type
// is refused over HTTP (400) and by the CLI (exit 1); resumed over HTTP,
// every run ends, admitted FIFO per user, never more than two of a user's
// at once.
func TestConcurrencyLimitSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs svc dev twice")
	}
	dir := projectDir(t)
	writeFile(t, dir, "workflows/peruser.workflow.ts", peruserWorkflow)
	env := baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk")
	port := freePortBase(t)
	d := startDevProcess(t, dir, port, env)
	d.payload = d.nextPayload(60 * time.Second)
	const users, per = 3, 4
	queued := make([][]string, users)
	var wg sync.WaitGroup
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				var rc startReceipt
				code := httpJSON(t, "POST", d.url("/api/workflows/peruser/start"), fmt.Sprintf(`{"user":"u%d","i":%d}`, u, i), &rc)
				if want := map[bool]string{true: "started", false: "queued"}[i < 2]; code != http.StatusAccepted || rc.Status != want {
					t.Errorf("user u%d start %d = %d %+v; want %s", u, i, code, rc, want)
				}
				if rc.QueueID != "" {
					queued[u] = append(queued[u], rc.QueueID)
				}
			}
		}()
	}
	wg.Wait()
	var refused struct{ Error apiError }
	if code := httpJSON(t, "POST", d.url("/api/workflows/peruser/start"), `{"user":["u0"]}`, &refused); code != http.StatusBadRequest || refused.Error.Code != "invalid_concurrency_key" || !strings.Contains(refused.Error.Message, "/user") {
		t.Errorf("start with an array for the key = %d %+v; want 400 invalid_concurrency_key naming /user", code, refused)
	}
	// The CLI: the same refusal exits 1 with its code; runs list shows the
	// queued entries with their key.
	if out, _, code := cli(t, dir, env, "workflows", "start", "peruser", "--input", `{"user":true}`, "--json"); code != 1 || !strings.Contains(out, `"invalid_concurrency_key"`) {
		t.Errorf("svc workflows start with a boolean key = exit %d %s; want 1 invalid_concurrency_key", code, out)
	}
	out, _, _ := cli(t, dir, env, "runs", "list", "--workflow", "peruser", "--json")
	for u := range users {
		for _, id := range queued[u] {
			if !strings.Contains(out, fmt.Sprintf(`"queueId":%q`, id)) || !strings.Contains(out, fmt.Sprintf(`"concurrencyKey":"u%d"`, u)) {
				t.Errorf("svc runs list --json lacks the queued entry %s of key u%d: %.400s", id, u, out)
			}
		}
	}
	// list returns the workflow's runs (with their steps) and each user's
	// queued ids, in order.
	list := func() ([]runRecord, map[string][]string) {
		var page struct {
			Items  []runRecord
			Queued []queuedTrigger
		}
		httpJSON(t, "GET", d.url("/api/runs?workflow=peruser&limit=100"), nil, &page)
		q := map[string][]string{}
		for _, e := range page.Queued {
			q[e.LimitKey] = append(q[e.LimitKey], e.QueueID)
		}
		var runs []runRecord
		for _, r := range page.Items {
			var full struct{ Run runRecord }
			httpJSON(t, "GET", d.url("/api/runs/"+r.RunID), nil, &full)
			runs = append(runs, full.Run)
		}
		return runs, q
	}
	checkHeld := func(when string) {
		t.Helper()
		var runs []runRecord
		var q map[string][]string
		eventually(t, 20*time.Second, "two runs of each user waiting on their hook "+when, func() bool {
			runs, q = list()
			waiting := 0
			for _, r := range runs {
				if r.Status == runWaiting {
					waiting++
				}
			}
			return waiting == users*2
		})
		for u := range users {
			if got := q[fmt.Sprintf("u%d", u)]; !slices.Equal(got, queued[u]) {
				t.Errorf("%s: user u%d's queue lists %v; want %v", when, u, got, queued[u])
			}
		}
		if len(runs) != users*2 {
			t.Errorf("%s: %d runs; want %d", when, len(runs), users*2)
		}
	}
	checkHeld("before the kill")
	d.cmd.Process.Kill()
	<-d.exited
	d = startDevProcess(t, dir, port, env)
	d.payload = d.nextPayload(60 * time.Second)
	checkHeld("after SIGKILL and a restart")

	for round := 0; ; round++ {
		runs, q := list()
		done := 0
		for _, r := range runs {
			switch {
			case r.Status == runCompleted:
				done++
			case r.Status == runWaiting && len(r.Steps) == 1 && r.Steps[0].Token != "":
				httpJSON(t, "POST", d.url("/api/hooks/"+r.Steps[0].Token), `{"ok":true}`, nil)
			}
		}
		if done == users*per && len(q) == 0 {
			checkConcurrencySpans(t, runs, "peruser", 2, true)
			break
		}
		if round > 200 {
			t.Fatalf("after %d rounds: %d of %d completed, queues %v", round, done, users*per, q)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
