package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// historyTestDB returns a pool on a fresh, migrated database.
func historyTestDB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	u := testPostgresURL(tb)
	if _, err := applyMigrations(context.Background(), u, tb.TempDir(), nil); err != nil {
		tb.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), u)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	return db
}

// historyTestBase is the creation time of the test runs: a whole
// microsecond, as the engine keeps them.
var historyTestBase = time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)

// historyTestRun returns an ended run of workflow created at created.
func historyTestRun(id, workflow, status string, created time.Time) runRecord {
	ended := created.Add(time.Second)
	return runRecord{RunID: id, TraceID: "wrun_" + id, WorkflowName: workflow, Status: status, Trigger: triggerHTTP,
		Input: json.RawMessage(`{}`), CreatedAt: created, EndedAt: &ended, Steps: []*durableCall{}}
}

// historyTestRecordJSON is r as the API shows it.
func historyTestRecordJSON(t *testing.T, r runRecord) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunHistoryArchiveGetRoundTrip(t *testing.T) {
	ctx := context.Background()
	h := newPGRunHistory(historyTestDB(t))
	at := func(ms int) time.Time { return historyTestBase.Add(time.Duration(ms) * time.Millisecond) }
	ended, stepEnded, dur := at(900), at(300), 200.0
	full := runRecord{
		RunID: uuid.NewString(), TraceID: "wrun_01", WorkflowName: "greet", Status: runFailed, Trigger: triggerCLI,
		Input:  json.RawMessage(`{"name":"Zoë 🦊","nul":"a\u0000b","nested":[1,2.5,null,true]}`),
		Output: json.RawMessage(`{"text":"bye\u0000"}`),
		Error:  &runError{Name: "FatalError", Message: "boom: ünïcode \u0000"},
		Serial: true, ParentRunID: uuid.NewString(), ParentSeq: 3,
		CreatedAt: historyTestBase, EndedAt: &ended,
		Steps: []*durableCall{
			{Seq: 1, Kind: callStep, Name: "fetch", Status: runFailed, StartedAt: at(100), EndedAt: &stepEnded, DurationMs: &dur,
				Attempts: []stepAttempt{
					{Attempt: 1, StartedAt: at(100), EndedAt: at(150), Error: &runError{Name: "Error", Message: "first"}},
					{Attempt: 2, StartedAt: at(200), EndedAt: at(300), Error: &runError{Message: "second \u0000"}},
				},
				Error: &runError{Name: "Error", Message: "second \u0000"}},
			{Seq: 2, Kind: callStartAndWait, Name: "child", Status: runCompleted, ChildRunID: uuid.NewString(), Result: json.RawMessage(`"ok"`), StartedAt: at(400)},
		},
	}
	turn := historyTestRun(uuid.NewString(), "", runCompleted, historyTestBase)
	turn.Trigger, turn.Agent, turn.Wire, turn.SessionID, turn.ConversationID = triggerAgent, "helper", "openai", "s1", "c1"
	if err := h.archive(ctx, []runRecord{full, turn}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []runRecord{full, turn} {
		got, ok, err := h.get(ctx, want.RunID)
		if err != nil || !ok {
			t.Fatalf("get(%s) = %v, %v", want.RunID, ok, err)
		}
		if g, w := historyTestRecordJSON(t, got), historyTestRecordJSON(t, want); g != w {
			t.Errorf("get(%s) =\n%s\nwant\n%s", want.RunID, g, w)
		}
	}
	if _, ok, err := h.get(ctx, uuid.NewString()); ok || err != nil {
		t.Errorf("get(unknown) = %v, %v; want not found", ok, err)
	}

	// Re-archiving replaces the run and adds no row.
	full.Output = json.RawMessage(`{"text":"again"}`)
	if err := h.archive(ctx, []runRecord{full}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := h.get(ctx, full.RunID); string(got.Output) != `{"text":"again"}` {
		t.Errorf("re-archived output = %s", got.Output)
	}
	all, err := h.list(ctx, runQuery{Limit: runQueryMaxLimit})
	if err != nil || len(all) != 2 {
		t.Errorf("list after re-archive = %d runs, %v; want 2", len(all), err)
	}

	// Raw JSON with bytes that are not UTF-8 is stored as Go's decoder reads it.
	bad := historyTestRun(uuid.NewString(), "greet", runCompleted, historyTestBase)
	bad.Input = json.RawMessage("{\"b\":\"x\xffy\"}")
	if err := h.archive(ctx, []runRecord{bad}); err != nil {
		t.Fatalf("archive invalid UTF-8: %v", err)
	}
	if got, _, _ := h.get(ctx, bad.RunID); string(got.Input) != "{\"b\":\"x\uFFFDy\"}" {
		t.Errorf("invalid UTF-8 input came back as %q", got.Input)
	}

	// An active run is refused.
	active := historyTestRun(uuid.NewString(), "greet", runRunning, historyTestBase)
	if err := h.archive(ctx, []runRecord{active}); err == nil || !strings.Contains(err.Error(), "not terminal") {
		t.Errorf("archive(running) = %v; want a not-terminal error", err)
	}
}

func TestRunHistoryArchiveSeveralChunks(t *testing.T) {
	ctx := context.Background()
	db := historyTestDB(t)
	h := newPGRunHistory(db)
	h.chunkBytes = 4 << 10
	// Records of about 1 KiB: four to a statement, 2,500 runs in one call.
	input := json.RawMessage(`{"blob":"` + strings.Repeat("x", 1<<10) + `"}`)
	runs := make([]runRecord, 2500)
	for i := range runs {
		runs[i] = historyTestRun(uuid.NewString(), "big", runCompleted, historyTestBase.Add(time.Duration(i)*time.Microsecond))
		runs[i].Input = input
	}
	if err := h.archive(ctx, runs); err != nil {
		t.Fatal(err)
	}
	var count int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM svc.runs WHERE length(record) > $1`, 1<<10).Scan(&count); err != nil || count != len(runs) {
		t.Errorf("stored %d runs, %v; want %d", count, err, len(runs))
	}
	// A failing statement fails the whole call: nothing of it is stored.
	bad := slices.Clone(runs[:20])
	for i := range bad {
		bad[i].RunID = uuid.NewString()
	}
	bad[15].WorkflowName = "nul\x00" // PostgreSQL text refuses NUL
	if err := h.archive(ctx, bad); err == nil {
		t.Fatal("archive with a NUL workflow name succeeded")
	}
	if _, ok, _ := h.get(ctx, bad[0].RunID); ok {
		t.Error("the first chunk of a failed archive was stored")
	}
}

// historyTestPageAll walks every page of q and returns the run ids in order.
func historyTestPageAll(t *testing.T, h runHistory, q runQuery) []string {
	t.Helper()
	var ids []string
	for page := 0; ; page++ {
		if page > 10_000 {
			t.Fatal("paging did not end")
		}
		runs, err := h.list(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) > q.Limit {
			t.Fatalf("page of %d runs; limit %d", len(runs), q.Limit)
		}
		for i := range runs {
			ids = append(ids, runs[i].RunID)
		}
		if len(runs) < q.Limit {
			return ids
		}
		// The cursor goes through its string form, as a client sends it.
		c, err := parseRunCursor(runCursorOf(&runs[len(runs)-1]).String())
		if err != nil {
			t.Fatal(err)
		}
		q.After = &c
	}
}

func TestRunHistoryListPaging(t *testing.T) {
	ctx := context.Background()
	h := newPGRunHistory(historyTestDB(t))
	const n = 1000
	workflows := []string{"a", "b", "c"}
	statuses := []string{runCompleted, runFailed, runCancelled}
	runs := make([]runRecord, n)
	for i := range runs {
		// Groups of five share a microsecond: the run id breaks the tie.
		created := historyTestBase.Add(time.Duration(i/5) * time.Microsecond)
		runs[i] = historyTestRun(uuid.NewString(), workflows[i%3], statuses[(i/3)%3], created)
		if i%4 == 0 {
			runs[i].Trigger, runs[i].Agent = triggerAgent, []string{"x", "y"}[(i/4)%2]
		}
		switch i % 7 { // text to search: in the input, the output, the error; a NUL kept as written
		case 0:
			runs[i].Input = json.RawMessage(fmt.Sprintf(`{"orderId":"ORD-%d","note":"a\u0000b"}`, i))
		case 1:
			runs[i].Output = json.RawMessage(fmt.Sprintf(`{"shipped":"Parcel-%d"}`, i))
		case 2:
			runs[i].Error = &runError{Name: "FatalError", Message: fmt.Sprintf("card %d declined", i)}
		}
		if i%10 == 3 { // reruns of the first run and the second
			runs[i].RerunOf = runs[i%20/10].RunID
		}
		if i%8 == 4 { // turns of two sessions
			runs[i].SessionID = []string{"s1", "s2"}[(i/8)%2]
		}
	}
	if found, err := h.hasReruns(ctx); err != nil || found {
		t.Fatalf("hasReruns of an empty history = %v %v; want false", found, err)
	}
	if err := h.archive(ctx, runs[:3]); err != nil { // no rerun among them
		t.Fatal(err)
	}
	if found, err := h.hasReruns(ctx); err != nil || found {
		t.Fatalf("hasReruns without a rerun stored = %v %v; want false", found, err)
	}
	if err := h.archive(ctx, runs); err != nil {
		t.Fatal(err)
	}
	if found, err := h.hasReruns(ctx); err != nil || !found {
		t.Fatalf("hasReruns with reruns stored = %v %v; want true", found, err)
	}
	newestFirst := slices.Clone(runs)
	slices.SortFunc(newestFirst, func(a, b runRecord) int {
		if runCursorOf(&a).before(runCursorOf(&b)) {
			return -1
		}
		return 1
	})
	tests := []struct {
		name string
		q    runQuery
	}{
		{"all", runQuery{}},
		{"workflow", runQuery{Workflow: "b"}},
		{"status", runQuery{Status: []string{runFailed}}},
		{"statuses", runQuery{Status: []string{runFailed, runCancelled}}},
		{"trigger", runQuery{Trigger: triggerAgent}},
		{"agent", runQuery{Agent: "y"}},
		{"workflow and status", runQuery{Workflow: "c", Status: []string{runCompleted}}},
		{"no match", runQuery{Workflow: "zzz"}},
		{"since", runQuery{Since: historyTestBase.Add(100 * time.Microsecond)}},
		{"until", runQuery{Until: historyTestBase.Add(50 * time.Microsecond)}},
		{"text in inputs", runQuery{Text: "ord-"}},
		{"one order", runQuery{Text: "ord-14\""}},
		{"text in outputs", runQuery{Text: "parcel-"}},
		{"text in errors", runQuery{Text: "declined"}},
		{"text and workflow", runQuery{Text: "ord-", Workflow: "a"}},
		{"reruns", runQuery{RerunOf: runs[1].RunID}},
		{"reruns and status", runQuery{RerunOf: runs[0].RunID, Status: []string{runFailed}}},
		{"session", runQuery{Session: "s2"}},
		{"agent and session", runQuery{Agent: "x", Session: "s1"}},
	}
	for _, tt := range tests {
		for _, limit := range []int{7, runQueryMaxLimit} {
			t.Run(fmt.Sprintf("%s limit %d", tt.name, limit), func(t *testing.T) {
				q := tt.q
				q.Limit = limit
				var want []string
				for i := range newestFirst {
					if q.matches(&newestFirst[i]) {
						want = append(want, newestFirst[i].RunID)
					}
				}
				if got := historyTestPageAll(t, h, q); !slices.Equal(got, want) {
					t.Errorf("paged %d runs; want %d in order (first got %v, want %v)", len(got), len(want), got[:min(3, len(got))], want[:min(3, len(want))])
				}
			})
		}
	}
	// A page from the middle matches the in-memory filter after that cursor.
	mid := runCursorOf(&newestFirst[n/2])
	page, err := h.list(ctx, runQuery{Limit: 10, After: &mid})
	if err != nil || len(page) != 10 || page[0].RunID != newestFirst[n/2+1].RunID {
		t.Errorf("page after the middle = %d runs, %v; want 10 starting at %s", len(page), err, newestFirst[n/2+1].RunID)
	}
	if _, err := h.list(ctx, runQuery{}); err == nil {
		t.Error("list with limit 0 succeeded")
	}
}

func TestRunHistoryTieBreakByRunID(t *testing.T) {
	ctx := context.Background()
	db := historyTestDB(t)
	h := newPGRunHistory(db)
	// The test server's databases collate "C" anyway: check that the column
	// does so on any database, as runCursor.before assumes.
	var collation string
	if err := db.QueryRow(ctx, `SELECT collation_name FROM information_schema.columns
WHERE table_schema = 'svc' AND table_name = 'runs' AND column_name = 'run_id'`).Scan(&collation); err != nil || collation != "C" {
		t.Errorf("svc.runs.run_id collation = %q, %v; want C", collation, err)
	}
	// Byte order, not a locale's: upper case before lower case, '-' before digits.
	ids := []string{"B", "a", "b", "a-1", "a1", "Z"}
	var runs []runRecord
	for _, id := range ids {
		runs = append(runs, historyTestRun(id, "w", runCompleted, historyTestBase))
	}
	runs = append(runs, historyTestRun("0", "w", runCompleted, historyTestBase.Add(time.Microsecond)))
	if err := h.archive(ctx, runs); err != nil {
		t.Fatal(err)
	}
	want := []string{"0", "b", "a1", "a-1", "a", "Z", "B"}
	if got := historyTestPageAll(t, h, runQuery{Limit: 2}); !slices.Equal(got, want) {
		t.Errorf("order = %q; want %q", got, want)
	}
}

func TestRunHistoryPrune(t *testing.T) {
	ctx := context.Background()
	h := newPGRunHistory(historyTestDB(t))
	var runs []runRecord
	for i := range 5 {
		r := historyTestRun(fmt.Sprint("r", i), "w", runCompleted, historyTestBase)
		ended := historyTestBase.Add(time.Duration(i) * time.Hour)
		r.EndedAt = &ended
		runs = append(runs, r)
	}
	if err := h.archive(ctx, runs); err != nil {
		t.Fatal(err)
	}
	n, err := h.prune(ctx, historyTestBase.Add(2*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("prune = %d, %v; want 2", n, err)
	}
	for i, r := range runs {
		if _, ok, _ := h.get(ctx, r.RunID); ok != (i >= 2) {
			t.Errorf("after prune, %s (ended +%dh) kept = %v", r.RunID, i, ok)
		}
	}
	if n, err := h.prune(ctx, historyTestBase.Add(2*time.Hour)); err != nil || n != 0 {
		t.Errorf("prune again = %d, %v; want 0", n, err)
	}
}

func TestRunHistoryPruneManyBatches(t *testing.T) {
	ctx := context.Background()
	db := historyTestDB(t)
	h := newPGRunHistory(db)
	n := runHistoryPruneBatch*2 + 5
	seedRunHistory(t, db, n, "old")
	keep := historyTestRun(uuid.NewString(), "new", runCompleted, time.Now().UTC())
	if err := h.archive(ctx, []runRecord{keep}); err != nil {
		t.Fatal(err)
	}
	got, err := h.prune(ctx, time.Now().Add(-time.Minute))
	if err != nil || got != int64(n) {
		t.Fatalf("prune = %d, %v; want %d", got, err, n)
	}
	if left, _ := h.list(ctx, runQuery{Limit: 10}); len(left) != 1 || left[0].RunID != keep.RunID {
		t.Errorf("left after prune: %d runs; want only the new one", len(left))
	}
}

func TestRunCursorRoundTrip(t *testing.T) {
	for _, c := range []runCursor{
		{CreatedAt: historyTestBase, RunID: uuid.NewString()},
		{CreatedAt: time.UnixMicro(0).UTC(), RunID: "x"},
		{CreatedAt: historyTestBase, RunID: "with.dots/and ünïcode"},
	} {
		s := c.String()
		if url.QueryEscape(s) != s {
			t.Errorf("cursor %q is not URL-safe", s)
		}
		got, err := parseRunCursor(s)
		if err != nil || !got.CreatedAt.Equal(c.CreatedAt) || got.RunID != c.RunID {
			t.Errorf("parseRunCursor(%q) = %v, %v; want %v", s, got, err, c)
		}
	}
}

func TestParseRunCursorGarbage(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	for _, s := range []string{
		"", "not base64!", "====", enc([]byte("nodot")), enc([]byte(".id")), enc([]byte("abc.id")), enc([]byte("-5.id")), enc([]byte("12.")),
		enc([]byte("12.a\x00b")), enc([]byte("12.\xff")), enc([]byte("99999999999999999999.id")), strings.Repeat("A", runCursorMaxLength+1),
	} {
		if c, err := parseRunCursor(s); err == nil {
			t.Errorf("parseRunCursor(%q) = %v; want an error", s, c)
		}
	}
}

func TestParseRunQuery(t *testing.T) {
	cursor := runCursor{CreatedAt: historyTestBase, RunID: "r1"}
	tests := []struct {
		name    string
		in      string
		want    runQuery
		wantErr string // the parameter named by the error; "" no error
	}{
		{"defaults", "", runQuery{Limit: runQueryDefaultLimit}, ""},
		{"empty values", "workflow=&status=&limit=&cursor=", runQuery{Limit: runQueryDefaultLimit}, ""},
		{"everything", "workflow=greet&status=failed,%20cancelled&trigger=cli&agent=helper&limit=7&cursor=" + cursor.String(),
			runQuery{Workflow: "greet", Status: []string{runFailed, runCancelled}, Trigger: triggerCLI, Agent: "helper", Limit: 7, After: &cursor}, ""},
		{"repeated status", "status=failed&status=completed,failed", runQuery{Status: []string{runFailed, runCompleted}, Limit: runQueryDefaultLimit}, ""},
		{"max limit", "limit=500", runQuery{Limit: runQueryMaxLimit}, ""},
		{"unknown parameter refused", "wait=30s", runQuery{}, "wait"},
		{"a misspelt filter refused", "statuses=failed", runQuery{}, "statuses"},
		{"range and text", "since=2025-03-04T05:06:07Z&until=2025-03-05T00:00:00Z&q=%20Ord_7F3K%20",
			runQuery{Since: time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC), Until: time.Date(2025, 3, 5, 0, 0, 0, 0, time.UTC), Text: "ord_7f3k", Limit: runQueryDefaultLimit}, ""},
		{"summary view", "view=summary", runQuery{Summary: true, Limit: runQueryDefaultLimit}, ""},
		{"other view", "view=full", runQuery{}, "view"},
		{"bad since", "since=yesterday", runQuery{}, "since"},
		{"negative age", "until=-1h", runQuery{}, "until"},
		{"text too long", "q=" + strings.Repeat("x", runQueryTextMax+1), runQuery{}, "q"},
		{"bad status", "status=done", runQuery{}, "status"},
		{"empty status in list", "status=failed,", runQuery{}, "status"},
		{"bad trigger", "trigger=cron", runQuery{}, "trigger"},
		{"limit zero", "limit=0", runQuery{}, "limit"},
		{"limit too big", "limit=501", runQuery{}, "limit"},
		{"limit negative", "limit=-1", runQuery{}, "limit"},
		{"limit not a number", "limit=ten", runQuery{}, "limit"},
		{"garbage cursor", "cursor=%21%21", runQuery{}, "cursor"},
		{"repeated workflow", "workflow=a&workflow=b", runQuery{}, "workflow"},
		{"repeated limit", "limit=1&limit=2", runQuery{}, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := url.ParseQuery(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseRunQuery(v)
			if tt.wantErr != "" {
				qe, ok := err.(*runQueryError)
				if !ok || qe.Param != tt.wantErr {
					t.Fatalf("parseRunQuery(%q) error = %v; want a *runQueryError on %s", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseRunQuery(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRunQueryMatches(t *testing.T) {
	r := historyTestRun("m", "greet", runFailed, historyTestBase)
	r.Trigger, r.Agent = triggerAgent, "helper"
	newer := runCursor{CreatedAt: historyTestBase.Add(time.Microsecond), RunID: "a"}
	sameTimeGreaterID := runCursor{CreatedAt: historyTestBase, RunID: "n"}
	sameTimeSmallerID := runCursor{CreatedAt: historyTestBase, RunID: "l"}
	older := runCursor{CreatedAt: historyTestBase.Add(-time.Microsecond), RunID: "z"}
	itself := runCursorOf(&r)
	tests := []struct {
		name string
		q    runQuery
		want bool
	}{
		{"empty", runQuery{}, true},
		{"workflow", runQuery{Workflow: "greet"}, true},
		{"other workflow", runQuery{Workflow: "other"}, false},
		{"status among", runQuery{Status: []string{runCompleted, runFailed}}, true},
		{"status not among", runQuery{Status: []string{runCompleted}}, false},
		{"trigger", runQuery{Trigger: triggerAgent}, true},
		{"other trigger", runQuery{Trigger: triggerHTTP}, false},
		{"agent", runQuery{Agent: "helper"}, true},
		{"other agent", runQuery{Agent: "x"}, false},
		{"after a newer run", runQuery{After: &newer}, true},
		{"after same time greater id", runQuery{After: &sameTimeGreaterID}, true},
		{"after same time smaller id", runQuery{After: &sameTimeSmallerID}, false},
		{"after itself", runQuery{After: &itself}, false},
		{"after an older run", runQuery{After: &older}, false},
		{"since its creation", runQuery{Since: historyTestBase}, true},
		{"since later", runQuery{Since: historyTestBase.Add(time.Microsecond)}, false},
		{"until later", runQuery{Until: historyTestBase.Add(time.Microsecond)}, true},
		{"until its creation", runQuery{Until: historyTestBase}, false},
		{"text of its input", runQuery{Text: "ord_7f3k"}, true},
		{"text of its error", runQuery{Text: "card declined"}, true},
		{"text it does not hold", runQuery{Text: "ord_0000"}, false},
	}
	r.Input, r.Error = json.RawMessage(`{"orderId":"Ord_7F3K"}`), &runError{Name: "FatalError", Message: "Card declined"}
	for _, tt := range tests {
		if got := tt.q.matches(&r); got != tt.want {
			t.Errorf("%s: matches = %v; want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseRetention(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", runRetentionDefault, false},
		{"0", 0, false},
		{"30d", 30 * 24 * time.Hour, false},
		{" 7d ", 7 * 24 * time.Hour, false},
		{"0d", 0, false},
		{"720h", 720 * time.Hour, false},
		{"90m", 90 * time.Minute, false},
		{"-1h", 0, true},
		{"-1d", 0, true},
		{"1.5d", 0, true},
		{"d", 0, true},
		{"30", 0, true},
		{"forever", 0, true},
		{"999999999d", 0, true},
	}
	for _, tt := range tests {
		got, err := parseRetention(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// seedRunHistory inserts n ended runs of workflow into svc.runs with COPY,
// for benchmarks: one every microsecond ending an hour ago, newest last,
// alternating completed and failed.
func seedRunHistory(tb testing.TB, db *pgxpool.Pool, n int, workflow string) {
	tb.Helper()
	ended := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	start := ended.Add(-time.Duration(n) * time.Microsecond)
	rows := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if rows == n {
			return nil, nil
		}
		status := []string{runCompleted, runFailed}[rows%2]
		// Time-ordered ids (UUIDv7) fill the primary key's index in order,
		// several times faster than random ones.
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		r := historyTestRun(id.String(), workflow, status, start.Add(time.Duration(rows)*time.Microsecond))
		r.EndedAt = &ended
		r.Input = json.RawMessage(fmt.Sprintf(`{"orderId":"ORD-%s-%d","items":3}`, workflow, rows))
		rows++
		record, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return []any{r.RunID, r.WorkflowName, r.Status, r.Trigger, r.Agent, r.CreatedAt, ended, string(record), runSearchText(&r)}, nil
	})
	got, err := db.CopyFrom(context.Background(), pgx.Identifier{"svc", "runs"},
		[]string{"run_id", "workflow_name", "status", "trigger", "agent", "created_at", "ended_at", "record", "search"}, src)
	if err != nil || got != int64(n) {
		tb.Fatalf("seed %d runs: copied %d, %v", n, got, err)
	}
}

// benchRunHistoryRows is the history size of BenchmarkRunHistoryList.
const benchRunHistoryRows = 1_000_000

// BenchmarkRunHistoryList times a first page and a deep page (90% down)
// over a history of benchRunHistoryRows runs, overall and per workflow and
// status. Seeding takes a while, so run it alone:
//
//	go test -run '^$' -bench RunHistoryList -benchtime=1x .
func BenchmarkRunHistoryList(b *testing.B) {
	ctx := context.Background()
	db := historyTestDB(b)
	seeded := time.Now()
	seedRunHistory(b, db, benchRunHistoryRows-1000, "bulk")
	seedRunHistory(b, db, 1000, "rare")
	if _, err := db.Exec(ctx, "ANALYZE svc.runs"); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d runs in %v", benchRunHistoryRows, time.Since(seeded).Round(time.Millisecond))
	h := newPGRunHistory(db)
	// cursorAt is the position of the run offset runs down q's order.
	cursorAt := func(q runQuery, offset int) *runCursor {
		var c runCursor
		sql := `SELECT created_at, run_id FROM svc.runs
WHERE ($1 = '' OR workflow_name = $1) AND (cardinality($2::text[]) = 0 OR status = ANY($2))
ORDER BY created_at DESC, run_id DESC OFFSET $3 LIMIT 1`
		statuses := append([]string{}, q.Status...) // a nil slice is NULL
		if err := db.QueryRow(ctx, sql, q.Workflow, statuses, offset).Scan(&c.CreatedAt, &c.RunID); err != nil {
			b.Fatalf("cursor at %d: %v", offset, err)
		}
		return &c
	}
	for _, bc := range []struct {
		name   string
		q      runQuery
		offset int
	}{
		{"first", runQuery{Limit: runQueryDefaultLimit}, 0},
		{"deep", runQuery{Limit: runQueryDefaultLimit}, benchRunHistoryRows * 9 / 10},
		{"status first", runQuery{Status: []string{runFailed}, Limit: runQueryDefaultLimit}, 0},
		{"status deep", runQuery{Status: []string{runFailed}, Limit: runQueryDefaultLimit}, benchRunHistoryRows * 9 / 20},
		{"workflow first", runQuery{Workflow: "rare", Limit: runQueryDefaultLimit}, 0},
		{"workflow deep", runQuery{Workflow: "rare", Limit: runQueryDefaultLimit}, 900},
		{"max page deep", runQuery{Limit: runQueryMaxLimit}, benchRunHistoryRows * 9 / 10},
		// q: one order among a million, a rare workflow's orders, and a
		// text every run holds (the first page comes from the newest).
		{"search one order", runQuery{Text: "ord-bulk-123456\"", Limit: runQueryDefaultLimit}, 0},
		{"search rare orders", runQuery{Text: "ord-rare-", Limit: runQueryDefaultLimit}, 0},
		{"search every run", runQuery{Text: "items", Limit: runQueryDefaultLimit}, 0},
	} {
		if bc.offset > 0 {
			bc.q.After = cursorAt(bc.q, bc.offset)
		}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				runs, err := h.list(ctx, bc.q)
				if err != nil || len(runs) == 0 {
					b.Fatalf("list = %d runs, %v", len(runs), err)
				}
			}
		})
	}
	// The overview (GET /api/runs/stats): a range holding every run of
	// the history (the seed's are all an hour old), and the last hour,
	// which holds none of them.
	for _, sc := range []struct {
		name  string
		since time.Duration
	}{{"stats of all runs", 2 * time.Hour}, {"stats of the last hour", time.Hour}} {
		b.Run(sc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := h.stats(ctx, runStatsQuery{Since: time.Now().Add(-sc.since), Bucket: time.Minute}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
