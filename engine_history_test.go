package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// newHistoryEngine opens a test engine whose ended runs go to a run
// history in a fresh PostgreSQL database.
func newHistoryEngine(t *testing.T, store string) *testEngine {
	t.Helper()
	te := newTestEngineOn(t, store)
	te.close()
	te.history = newPGRunHistory(te.historyPool(t))
	te.open(t)
	return te
}

// TestEngineHistoryBoundsMemory runs workflows with a run history: ended
// runs leave memory (and snapshots) once archived, and stay readable one by
// one, in pages through GET /api/runs, by wait and by cancel; a parent's
// startAndWait gets its child's output even once the child has left memory.
func TestEngineHistoryBoundsMemory(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	eachEngineStore(t, testEngineHistoryBoundsMemory)
}

// testEngineHistoryBoundsMemory is TestEngineHistoryBoundsMemory on one store.
func testEngineHistoryBoundsMemory(t *testing.T, store string) {
	te := newHistoryEngine(t, store)
	const n = 60
	var ids []string
	for i := range n {
		wf, input := "three", fmt.Sprintf(`{"id":"h%d"}`, i)
		if i%10 == 0 {
			wf = "parent"
		}
		rc, err := te.start(startRequest{Workflow: wf, Input: json.RawMessage(input), Trigger: triggerHTTP})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rc.RunID)
	}
	for _, id := range ids {
		if r := te.await(t, id); r.Status != runCompleted {
			t.Fatalf("run %s = %s %v", id, r.Status, r.Error)
		}
	}
	eventually(t, 10*time.Second, "ended runs leave memory", func() bool {
		runs, _ := te.list()
		return len(runs) == 0
	})
	for _, id := range ids {
		r, ok, err := te.find(context.Background(), id)
		if err != nil || !ok || r.Status != runCompleted || len(r.Steps) == 0 {
			t.Fatalf("find %s = %v %v %+v", id, ok, err, r)
		}
		if r.WorkflowName == "parent" && string(r.Output) != fmt.Sprintf(`{"started":"started","child":3}`) {
			t.Errorf("parent output = %s", r.Output)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := te.wait(ctx, ids[0]); err != nil {
		t.Errorf("wait on an archived run = %v", err)
	}
	if r, err := te.cancelRun(ids[1]); !errors.Is(err, errRunEnded) || r.Status != runCompleted {
		t.Errorf("cancel of an archived run = %s %v; want it unchanged and errRunEnded", r.Status, err)
	}
	// Pages of 7 through the API visit every run once, newest first.
	srv := httptest.NewServer(te.server(t))
	defer srv.Close()
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("too many pages")
		}
		var body struct {
			Items      []runRecord `json:"items"`
			NextCursor string      `json:"nextCursor"`
		}
		if code := httpJSON(t, "GET", srv.URL+"/api/runs?limit=7&cursor="+cursor, nil, &body); code != 200 {
			t.Fatalf("page %d = %d", page, code)
		}
		if len(body.Items) > 7 {
			t.Fatalf("page of %d runs; want at most 7", len(body.Items))
		}
		for _, r := range body.Items {
			if seen[r.RunID] {
				t.Fatalf("run %s on two pages", r.RunID)
			}
			seen[r.RunID] = true
		}
		if cursor = body.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != n+n/10*2 { // each parent started two children
		t.Errorf("paged through %d runs; want %d", len(seen), n+n/10*2)
	}
	var parents struct {
		Items []runRecord `json:"items"`
	}
	httpJSON(t, "GET", srv.URL+"/api/runs?workflow=parent&status=completed", nil, &parents)
	if len(parents.Items) != n/10 {
		t.Errorf("filtered list = %d runs; want %d", len(parents.Items), n/10)
	}
	if code := httpJSON(t, "GET", srv.URL+"/api/runs?limit=0", nil, nil); code != 400 {
		t.Errorf("limit=0 = %d; want 400", code)
	}
	var full struct {
		Items []runRecord `json:"items"`
	}
	if code := httpJSON(t, "GET", srv.URL+fmt.Sprintf("/api/runs?limit=%d", runQueryMaxLimit), nil, &full); code != 200 || len(full.Items) != len(seen) {
		t.Errorf("limit=%d = %d with %d runs; want 200 with all %d", runQueryMaxLimit, code, len(full.Items), len(seen))
	}
	// A snapshot holds what memory holds: no archived run is in it.
	te.close()
	te.compactBytes = 1
	te.open(t)
	rc, err := te.start(startRequest{Workflow: "echo", Input: json.RawMessage(`{"wait":true}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	waitHookToken(t, te, rc.RunID)
	eventually(t, 10*time.Second, "the replayed ended runs leave memory again", func() bool {
		runs, _ := te.list()
		return len(runs) == 1
	})
	eventually(t, 20*time.Second, "a snapshot without the archived runs", func() bool {
		te.startWait(t, "three", `{"id":"compact"}`) // its records grow the log to the next compaction
		b := te.lastSnapshot(t)
		if b == nil {
			return false
		}
		for _, id := range ids {
			if strings.Contains(string(b), id) {
				return false
			}
		}
		return strings.Contains(string(b), rc.RunID)
	})
	// Retention: a reopen with a retention shorter than the runs' age
	// prunes them from the history.
	te.close()
	te.compactBytes, te.retention = 0, time.Millisecond
	te.open(t)
	eventually(t, 10*time.Second, "runs past the retention are pruned", func() bool {
		_, ok, err := te.find(context.Background(), ids[0])
		return err == nil && !ok
	})
	if r, ok := te.get(rc.RunID); !ok || r.Status != runWaiting {
		t.Errorf("the active run after pruning = %v %s; want it kept", ok, r.Status)
	}
}

// TestEngineKeepsHostileStrings: what user code (or a model through it)
// produces may hold U+0000 and lone surrogates; a step's result, the run's
// output, its logs and its error keep them through the journal, a replay
// and the run history in PostgreSQL, and nothing is lost on the way.
func TestEngineKeepsHostileStrings(t *testing.T) { eachEngineStore(t, testEngineKeepsHostileStrings) }

// testEngineKeepsHostileStrings is TestEngineKeepsHostileStrings on one store.
func testEngineKeepsHostileStrings(t *testing.T, store string) {
	te := newHistoryEngine(t, store)
	ok := te.startWait(t, "hostile", `{}`)
	failed := te.startWait(t, "hostile", `{"fail":true}`)
	// JSON text of the evil string, however an encoder spells the surrogate.
	evil := regexp.MustCompile(`a\\u0000b(\\ud800|\\ufffd|\x{fffd})c`)
	check := func(when string, ok, failed runRecord) {
		t.Helper()
		if ok.Status != runCompleted || !evil.Match(ok.Output) || len(ok.Steps) != 1 || !evil.Match(ok.Steps[0].Result) {
			t.Errorf("%s: run = %s output %s steps %+v; want completed keeping the string", when, ok.Status, ok.Output, ok.Steps)
		}
		if len(ok.Logs) != 2 || !strings.Contains(ok.Logs[0].Message, "a\x00b") || !strings.Contains(ok.Logs[1].Message, "a\x00b") {
			t.Errorf("%s: logs = %+v; want both lines with the string", when, ok.Logs)
		}
		if failed.Status != runFailed || failed.Error == nil || !strings.Contains(failed.Error.Message, "refused a\x00b") {
			t.Errorf("%s: failed run = %s %+v; want its error keeping the string", when, failed.Status, failed.Error)
		}
	}
	check("archived", ok, failed)
	te.close()
	te.open(t)
	again := func(id string) runRecord {
		r, found, err := te.find(context.Background(), id)
		if err != nil || !found {
			t.Fatalf("run %s after a restart: %v", id, err)
		}
		return r
	}
	check("after a restart", again(ok.RunID), again(failed.RunID))
}

// TestEngineHistoryOutageSaidOnce checks that while the run history's
// PostgreSQL refuses connections (a closed port), ended runs stay readable
// from memory and the archiver's warning is logged once, not at every tick.
func TestEngineHistoryOutageSaidOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every connection is refused
	pool, err := pgxpool.New(context.Background(), "postgres://svc:pw@"+addr+"/svc?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	te := newTestEngineOn(t, "file")
	te.close()
	var out syncBuffer
	te.logger = slog.New(slog.NewTextHandler(&out, nil))
	te.history = newPGRunHistory(pool)
	te.open(t)
	for i := range 3 {
		if r := te.startWait(t, "three", fmt.Sprintf(`{"id":"o%d"}`, i)); r.Status != runCompleted {
			t.Fatalf("run = %s %v", r.Status, r.Error)
		}
	}
	time.Sleep(5 * archiveInterval) // several archiver ticks, each failing
	if runs, _ := te.list(); len(runs) != 3 {
		t.Errorf("runs in memory during the outage = %d; want the 3 ended ones kept", len(runs))
	}
	if n := strings.Count(out.String(), "archive ended runs to the run history"); n != 1 {
		t.Errorf("the archive warning was logged %d times during one outage; want once:\n%s", n, out.String())
	}
}

// failingHistory is a run history whose archive always fails.
type failingHistory struct{ runHistory }

func (failingHistory) archive(context.Context, []runRecord) error {
	return errors.New("the history is down (test)")
}

// TestEngineArchivesOnceAcrossReplicas runs two engines on one PostgreSQL
// log and history: each run is archived by the replica that executed it,
// and the other, after archiveForeignDelay, finds it there, drops it from
// memory and writes nothing (a trigger counts the history's row writes); so
// with an agent's recorded turn. A run whose
// owner could not archive it (its archive fails, as for an owner killed
// before its archiver ran) is archived by the other replica.
func TestEngineArchivesOnceAcrossReplicas(t *testing.T) {
	a := newHistoryEngine(t, engineKindPostgres)
	history := a.history
	b := &testEngine{dir: a.dir, cat: a.cat, counter: a.counter, store: engineKindPostgres, pool: a.pool, history: history}
	b.open(t)
	ctx := context.Background()
	if _, err := a.pool.Exec(ctx, `CREATE TABLE public.archive_writes (run_id text NOT NULL);
CREATE FUNCTION public.count_archive_write() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.archive_writes VALUES (NEW.run_id); RETURN NEW; END$$;
CREATE TRIGGER count_archive_write AFTER INSERT OR UPDATE ON svc.runs FOR EACH ROW EXECUTE FUNCTION public.count_archive_write();`); err != nil {
		t.Fatal(err)
	}
	writes := func(id string) (n int) {
		a.pool.QueryRow(ctx, `SELECT count(*) FROM public.archive_writes WHERE run_id = $1`, id).Scan(&n)
		return n
	}
	inMemory := func(te *testEngine, id string) bool {
		te.mu.Lock()
		defer te.mu.Unlock()
		return te.st.Runs[id] != nil
	}
	var ids []string
	for i := range 3 {
		ids = append(ids, a.startWait(t, "three", fmt.Sprintf(`{"id":"once%d"}`, i)).RunID)
	}
	// An agent's turn, recorded by a: both replicas let it go too (b kept
	// every turn another replica recorded in memory for good before).
	turn, err := a.recordTurn(agentTurn{Agent: "helper", Wire: wireOpenAI, StartedAt: time.Now(), Input: json.RawMessage(`[]`), Output: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, turn)
	eventually(t, 10*time.Second, "both replicas dropped the runs from memory", func() bool {
		return !slices.ContainsFunc(ids, func(id string) bool { return inMemory(a, id) || inMemory(b, id) })
	})
	for _, id := range ids {
		if n := writes(id); n != 1 {
			t.Errorf("run %s written %d times to the history; want once", id, n)
		}
	}

	// The owner cannot archive: the other replica does, after the delay.
	a.close()
	a.history = failingHistory{history}
	a.open(t)
	orphan := a.startWait(t, "three", `{"id":"orphan"}`).RunID
	if !inMemory(a, orphan) {
		t.Fatal("the owner dropped a run it could not archive")
	}
	eventually(t, 10*time.Second, "the other replica archived the owner's run", func() bool { return writes(orphan) == 1 })
	r, ok, err := b.find(ctx, orphan)
	if err != nil || !ok || r.Status != runCompleted || len(r.Steps) != 3 {
		t.Errorf("the orphan run in the history = %v %v %+v", ok, err, r)
	}
}
