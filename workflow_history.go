package main

// The run history (issue 8): ended runs leave the engine's memory for a
// durable, queryable store, so memory and snapshots are bounded by the
// active runs and not by everything that ever ran. The engine hands
// terminal runs to a runHistory, answers GET /api/runs by merging its active
// runs (filtered with runQuery.matches) with a page of the history, and
// prunes what ended longer ago than the retention (SVC_RUN_RETENTION).
//
// Pages are walked newest first, ordered by (createdAt desc, runId desc),
// with a keyset cursor: the position of the last run of a page. A cursor
// therefore stays valid while runs are added or pruned; it carries no
// filters, so the next page is asked with the same filters again.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// runQueryDefaultLimit is the page size of GET /api/runs and `svc runs
	// list` when none is asked.
	runQueryDefaultLimit = 50
	// runQueryMaxLimit bounds a page, so one request never serializes the
	// whole history (a 46k-run history once answered 97 MB unpaged).
	runQueryMaxLimit = 500
	// runCursorMaxLength bounds an encoded cursor; real ones are 71
	// characters (a microsecond timestamp and a UUID).
	runCursorMaxLength = 256
	// runRetentionDefault is how long ended runs are kept when
	// SVC_RUN_RETENTION is unset.
	runRetentionDefault = 30 * 24 * time.Hour
	// runRetentionMaxDays is the most days a time.Duration holds (about 292 years).
	runRetentionMaxDays = int64(1<<63-1) / int64(24*time.Hour)
	// runHistoryChunkBytes bounds the JSON of the records sent in one
	// statement of archive: PostgreSQL refuses messages over 1 GB, and a
	// batch of runs with 4 MiB inputs gets there.
	runHistoryChunkBytes = 64 << 20
	// runHistoryPruneBatch is how many runs one prune statement deletes, so
	// pruning a large backlog runs as short transactions.
	runHistoryPruneBatch = 10_000
)

// runStates lists every run state, in lifecycle order (DESIGN §3).
var runStates = []string{runQueued, runPending, runRunning, runWaiting, runCompleted, runFailed, runCancelled}

// runTriggers lists every run trigger.
var runTriggers = []string{triggerHTTP, triggerCLI, triggerWorkflow, triggerAgent, triggerSchedule}

// runHistory is the durable, queryable home of ended runs once they leave
// the engine's memory.
type runHistory interface {
	// archive stores terminal runs, replacing any stored under the same runId.
	archive(ctx context.Context, runs []runRecord) error
	// archived returns which of ids the history holds.
	archived(ctx context.Context, ids []string) (map[string]bool, error)
	// get returns an archived run; ok is false when there is none.
	get(ctx context.Context, runID string) (r runRecord, ok bool, err error)
	// list returns at most q.Limit runs matching q, newest first
	// (createdAt desc, runId desc), strictly after q.After when set.
	list(ctx context.Context, q runQuery) ([]runRecord, error)
	// prune deletes the runs that ended before endedBefore and returns how many.
	prune(ctx context.Context, endedBefore time.Time) (int64, error)
	// hasReruns reports whether any stored run reruns another.
	hasReruns(ctx context.Context) (bool, error)
	// stream returns an archived run's stream (workflow_stream.go).
	stream(ctx context.Context, runID string) ([]streamEntry, error)
	// stats is its part of the overview of the runs created since
	// q.Since (workflow_stats.go).
	stats(ctx context.Context, q runStatsQuery) (*runStatsPart, error)
}

// runQuery selects a page of runs. The zero value of a filter field
// matches any run.
type runQuery struct {
	Workflow string     // exact workflowName; "" any
	Status   []string   // any of these statuses; empty any
	Trigger  string     // exact trigger (http, cli, workflow, agent); "" any
	Agent    string     // agent turns: exact agent; "" any
	RerunOf  string     // reruns of this run (engine_rerun.go); "" any
	Session  string     // agent turns: exact durable session key; "" any
	Since    time.Time  // created at or after; zero any
	Until    time.Time  // created before; zero any
	Text     string     // lowercased text its input, output or error holds; "" any
	Summary  bool       // view=summary: each run without its input, output, calls and logs
	Limit    int        // page size, 1..runQueryMaxLimit
	After    *runCursor // page after this position (exclusive); nil = first page
}

// runQueryParams are the query parameters GET /api/runs reads; any other
// is refused (400), not ignored (issue 37, item 3).
var runQueryParams = []string{"workflow", "status", "trigger", "agent", "session", "rerunOf", "since", "until", "q", "view", "limit", "cursor"}

// runQueryTextMax bounds q, in bytes.
const runQueryTextMax = 256

// runCursor is a position in the newest-first order of runs: the run
// created at CreatedAt (microseconds) with id RunID.
type runCursor struct {
	CreatedAt time.Time
	RunID     string
}

// runCursorOf returns the position of r; the cursor of a page's last run
// asks for the next page.
func runCursorOf(r *runRecord) runCursor {
	return runCursor{CreatedAt: r.CreatedAt.Truncate(time.Microsecond).UTC(), RunID: r.RunID}
}

// before reports whether c comes before o newest first: c was created
// later, or at the same microsecond with a greater runId (byte order, as
// svc.runs.run_id collates).
func (c runCursor) before(o runCursor) bool {
	if !c.CreatedAt.Equal(o.CreatedAt) {
		return c.CreatedAt.After(o.CreatedAt)
	}
	return c.RunID > o.RunID
}

// String encodes c as an opaque, URL-safe token: base64url of
// "<unix microseconds>.<runId>".
func (c runCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.RunID))
}

// parseRunCursor decodes a token made by runCursor.String.
func parseRunCursor(s string) (runCursor, error) {
	if len(s) > runCursorMaxLength {
		return runCursor{}, fmt.Errorf("parse run cursor: longer than %d characters", runCursorMaxLength)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return runCursor{}, fmt.Errorf("parse run cursor: not base64url: %w", err)
	}
	micros, id, ok := strings.Cut(string(b), ".")
	if !ok {
		return runCursor{}, errors.New("parse run cursor: no separator")
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil || us < 0 {
		return runCursor{}, fmt.Errorf("parse run cursor: bad time %q", micros)
	}
	// PostgreSQL text holds neither NUL nor invalid UTF-8: refuse them here
	// rather than fail the query.
	if id == "" || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return runCursor{}, fmt.Errorf("parse run cursor: bad run id %q", id)
	}
	return runCursor{CreatedAt: time.UnixMicro(us).UTC(), RunID: id}, nil
}

// runQueryError is a query parameter that parseRunQuery refused.
type runQueryError struct {
	Param string // query parameter: workflow, status, trigger, agent, limit or cursor
	Value string
	Want  string // what would be accepted
}

// Error names the parameter, its value and what is accepted.
func (e *runQueryError) Error() string {
	return fmt.Sprintf("invalid %s %q: want %s", e.Param, e.Value, e.Want)
}

// parseRunQuery reads the query parameters of GET /api/runs: workflow,
// status (comma-separated run states), trigger, agent, since and until (an
// RFC 3339 time, or an age before now: 90m, 24h, 7d), q (text the run's
// input, output or error holds, any case), limit (1 to runQueryMaxLimit,
// default runQueryDefaultLimit) and cursor (a nextCursor). An empty
// parameter is the same as an absent one; any other parameter is refused.
// Errors are *runQueryError.
func parseRunQuery(v url.Values) (runQuery, error) {
	return parseRunQueryAt(v, time.Now())
}

// parseRunQueryAt is parseRunQuery with the ages of since and until taken
// back from now.
func parseRunQueryAt(v url.Values, now time.Time) (runQuery, error) {
	q := runQuery{Limit: runQueryDefaultLimit}
	for name := range v {
		if !slices.Contains(runQueryParams, name) {
			return runQuery{}, &runQueryError{Param: name, Value: v.Get(name), Want: "no such parameter: GET /api/runs takes " + strings.Join(runQueryParams, ", ")}
		}
	}
	one := func(name string) (string, error) {
		if len(v[name]) > 1 {
			return "", &runQueryError{Param: name, Value: strings.Join(v[name], ","), Want: "a single value"}
		}
		return v.Get(name), nil
	}
	var err error
	if q.Workflow, err = one("workflow"); err != nil {
		return runQuery{}, err
	}
	if q.Agent, err = one("agent"); err != nil {
		return runQuery{}, err
	}
	for name, into := range map[string]*string{"rerunOf": &q.RerunOf, "session": &q.Session} {
		if *into, err = one(name); err != nil {
			return runQuery{}, err
		}
		if len(*into) > runCursorMaxLength || !utf8.ValidString(*into) || strings.ContainsRune(*into, 0) {
			return runQuery{}, &runQueryError{Param: name, Value: truncateForMessage(*into), Want: fmt.Sprintf("an id of at most %d bytes of UTF-8", runCursorMaxLength)}
		}
	}
	if q.Trigger, err = one("trigger"); err != nil {
		return runQuery{}, err
	}
	if q.Trigger != "" && !slices.Contains(runTriggers, q.Trigger) {
		return runQuery{}, &runQueryError{Param: "trigger", Value: q.Trigger, Want: "one of " + strings.Join(runTriggers, ", ")}
	}
	for _, list := range v["status"] {
		if list == "" {
			continue
		}
		for _, s := range strings.Split(list, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(runStates, s) {
				return runQuery{}, &runQueryError{Param: "status", Value: s, Want: "a comma-separated list of " + strings.Join(runStates, ", ")}
			}
			if !slices.Contains(q.Status, s) {
				q.Status = append(q.Status, s)
			}
		}
	}
	for _, p := range []struct {
		name string
		at   *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		raw, err := one(p.name)
		if err != nil {
			return runQuery{}, err
		}
		if raw == "" {
			continue
		}
		if *p.at, err = runQueryTime(raw, now); err != nil {
			return runQuery{}, &runQueryError{Param: p.name, Value: raw, Want: "an RFC 3339 time (2026-01-02T15:04:05Z) or an age before now (90m, 24h, 7d)"}
		}
	}
	text, err := one("q")
	if err != nil {
		return runQuery{}, err
	}
	if text = strings.TrimSpace(text); len(text) > runQueryTextMax || !utf8.ValidString(text) {
		return runQuery{}, &runQueryError{Param: "q", Value: text[:min(len(text), 32)], Want: fmt.Sprintf("text of at most %d bytes of UTF-8", runQueryTextMax)}
	}
	q.Text = strings.ToLower(text)
	switch view, err := one("view"); {
	case err != nil:
		return runQuery{}, err
	case view == "summary":
		q.Summary = true
	case view != "":
		return runQuery{}, &runQueryError{Param: "view", Value: view, Want: "summary (or none, for whole run records)"}
	}
	limit, err := one("limit")
	if err != nil {
		return runQuery{}, err
	}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > runQueryMaxLimit {
			return runQuery{}, &runQueryError{Param: "limit", Value: limit, Want: fmt.Sprintf("an integer from 1 to %d", runQueryMaxLimit)}
		}
		q.Limit = n
	}
	cursor, err := one("cursor")
	if err != nil {
		return runQuery{}, err
	}
	if cursor != "" {
		c, err := parseRunCursor(cursor)
		if err != nil {
			return runQuery{}, &runQueryError{Param: "cursor", Value: cursor, Want: "the nextCursor of an earlier page"}
		}
		q.After = &c
	}
	return q, nil
}

// runSummary is a run as a list shows it (GET /api/runs?view=summary):
// what tells runs apart, without the input, output, calls and logs that
// make a whole record up to megabytes (issue 37, item 6).
type runSummary struct {
	RunID        string     `json:"runId"`
	WorkflowName string     `json:"workflowName"`
	Agent        string     `json:"agent,omitempty"`
	Status       string     `json:"status"`
	Trigger      string     `json:"trigger"`
	CreatedAt    time.Time  `json:"createdAt"`
	EndedAt      *time.Time `json:"endedAt,omitempty"`
	ParentRunID  string     `json:"parentRunId,omitempty"`
	Calls        int        `json:"calls"`
	Error        string     `json:"error,omitempty"` // its name and message, cut at 200 bytes
}

// runSummaryOf is r's summary.
func runSummaryOf(r *runRecord) runSummary {
	s := runSummary{RunID: r.RunID, WorkflowName: r.WorkflowName, Agent: r.Agent, Status: r.Status, Trigger: r.Trigger,
		CreatedAt: r.CreatedAt, EndedAt: r.EndedAt, ParentRunID: r.ParentRunID, Calls: len(r.Steps)}
	if r.Error != nil {
		s.Error = runErrorWords(r.Error)
	}
	return s
}

// runErrorWords is what a list or the overview shows of a run's error: its
// name and message, at most 200 bytes of UTF-8, without NUL (which
// PostgreSQL's text refuses).
func runErrorWords(e *runError) string {
	w := strings.TrimPrefix(e.Name+": "+e.Message, ": ")
	return truncateBytes(strings.ReplaceAll(strings.ToValidUTF8(w, "\uFFFD"), "\x00", ""), 200)
}

// truncateBytes cuts s to at most n bytes, at a character boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// runQueryTime reads a time that may be an age: an RFC 3339 time, or an
// age before now (a Go duration, or whole days "7d"): GET /api/runs's since
// and until, the stats' since, `svc audit --since`.
func runQueryTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 36500 {
			return time.Time{}, errors.New("bad age")
		}
		return now.Add(-time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, errors.New("bad age")
	}
	return now.Add(-d), nil
}

// runSearchMaxBytes bounds the text q searches in one run: an input of
// megabytes is searched in its first 64 KiB.
const runSearchMaxBytes = 64 << 10

// runSearchText is what q searches in r: its input, output and error as
// JSON, lowercased, at most runSearchMaxBytes (cut at a character). The
// history stores it beside the record (svc.runs.search).
func runSearchText(r *runRecord) string {
	var b strings.Builder
	b.Write(r.Input)
	b.WriteByte('\n')
	b.Write(r.Output)
	b.WriteByte('\n')
	if r.Error != nil {
		e, _ := json.Marshal(r.Error)
		b.Write(e)
	}
	return truncateBytes(strings.ToValidUTF8(strings.ToLower(b.String()), "\uFFFD"), runSearchMaxBytes)
}

// matches reports whether r passes q's filters and comes after q.After: the
// same selection as list, for the runs the engine still holds in memory.
// Limit is not a filter.
func (q runQuery) matches(r *runRecord) bool {
	switch {
	case q.Workflow != "" && r.WorkflowName != q.Workflow,
		len(q.Status) > 0 && !slices.Contains(q.Status, r.Status),
		q.Trigger != "" && r.Trigger != q.Trigger,
		q.Agent != "" && r.Agent != q.Agent,
		q.RerunOf != "" && r.RerunOf != q.RerunOf,
		q.Session != "" && r.SessionID != q.Session,
		!q.Since.IsZero() && r.CreatedAt.Before(q.Since),
		!q.Until.IsZero() && !r.CreatedAt.Before(q.Until),
		q.After != nil && !q.After.before(runCursorOf(r)),
		q.Text != "" && !strings.Contains(runSearchText(r), q.Text):
		return false
	}
	return true
}

// pgRunHistory is the run history in PostgreSQL (svc.runs, platform
// migration 0003_runs.sql).
type pgRunHistory struct {
	db         *pgxpool.Pool
	chunkBytes int // record bytes per archive statement: runHistoryChunkBytes
}

// newPGRunHistory returns the history kept in db, which must have the
// platform migrations applied.
func newPGRunHistory(db *pgxpool.Pool) *pgRunHistory {
	return &pgRunHistory{db: db, chunkBytes: runHistoryChunkBytes}
}

// runHistoryUpsertSQL inserts or replaces a chunk of runs given as parallel
// arrays: one statement however many runs.
const runHistoryUpsertSQL = `INSERT INTO svc.runs (run_id, workflow_name, status, trigger, agent, created_at, ended_at, record, search, error_message, rerun_of, session_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[])
ON CONFLICT (run_id) DO UPDATE SET workflow_name = excluded.workflow_name, status = excluded.status,
    trigger = excluded.trigger, agent = excluded.agent, created_at = excluded.created_at,
    ended_at = excluded.ended_at, record = excluded.record, search = excluded.search, error_message = excluded.error_message, rerun_of = excluded.rerun_of, session_id = excluded.session_id`

// runHistoryChunk is the arrays of one upsert statement.
type runHistoryChunk struct {
	ids, workflows, statuses, triggers, agents, records, searches []string
	errors                                                        []*string // NULL unless the run failed
	rerunOf, sessions                                             []*string // NULL unless the run is a rerun; unless it is a turn of a durable session
	created, ended                                                []time.Time
	bytes                                                         int
}

// add appends r with its encoded record.
func (c *runHistoryChunk) add(r *runRecord, record string) {
	ended := r.CreatedAt // a terminal run always has EndedAt; never keep one forever if not
	if r.EndedAt != nil {
		ended = *r.EndedAt
	}
	c.ids = append(c.ids, r.RunID)
	c.workflows = append(c.workflows, r.WorkflowName)
	c.statuses = append(c.statuses, r.Status)
	c.triggers = append(c.triggers, r.Trigger)
	c.agents = append(c.agents, r.Agent)
	c.created = append(c.created, r.CreatedAt)
	c.ended = append(c.ended, ended)
	c.records = append(c.records, record)
	search := strings.ReplaceAll(runSearchText(r), "\x00", "") // PostgreSQL text holds no NUL
	c.searches = append(c.searches, search)
	var msg *string
	if r.Status == runFailed && r.Error != nil {
		m := runErrorWords(r.Error)
		msg = &m
	}
	c.errors = append(c.errors, msg)
	var of *string
	if r.RerunOf != "" {
		of = &r.RerunOf
	}
	c.rerunOf = append(c.rerunOf, of)
	var sess *string
	if r.SessionID != "" {
		sess = &r.SessionID
	}
	c.sessions = append(c.sessions, sess)
	c.bytes += len(record) + len(search)
}

// archived returns which of ids svc.runs holds.
func (h *pgRunHistory) archived(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := h.db.Query(ctx, `SELECT run_id FROM svc.runs WHERE run_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(held))
	for _, id := range held {
		m[id] = true
	}
	return m, nil
}

// archive upserts runs by runId, with their streams; archiving a run again replaces it. Every
// run must be terminal. The runs go in one round trip and one transaction:
// one statement per chunkBytes of records. A record's JSON that is
// not valid UTF-8 (possible in an input's raw JSON) is stored with U+FFFD in
// place of the bad bytes, as Go's JSON decoder reads it anyway.
func (h *pgRunHistory) archive(ctx context.Context, runs []runRecord) error {
	if len(runs) == 0 {
		return nil
	}
	var chunks []*runHistoryChunk
	cur := &runHistoryChunk{}
	for i := range runs {
		r := &runs[i]
		if !terminal(r.Status) {
			return fmt.Errorf("archive run %s: status %q is not terminal", r.RunID, r.Status)
		}
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("archive run %s: encode: %w", r.RunID, err)
		}
		if len(cur.ids) > 0 && cur.bytes+len(b) > h.chunkBytes {
			chunks, cur = append(chunks, cur), &runHistoryChunk{}
		}
		cur.add(r, strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	chunks = append(chunks, cur)
	batch := &pgx.Batch{}
	for _, c := range chunks {
		batch.Queue(runHistoryUpsertSQL, c.ids, c.workflows, c.statuses, c.triggers, c.agents, c.created, c.ended, c.records, c.searches, c.errors, c.rerunOf, c.sessions)
	}
	if err := queueStreams(batch, runs); err != nil {
		return err
	}
	if err := h.db.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("archive %d runs: %w", len(runs), err)
	}
	return nil
}

// get returns the archived run runID.
func (h *pgRunHistory) get(ctx context.Context, runID string) (runRecord, bool, error) {
	var record string
	err := h.db.QueryRow(ctx, `SELECT record FROM svc.runs WHERE run_id = $1`, runID).Scan(&record)
	if errors.Is(err, pgx.ErrNoRows) {
		return runRecord{}, false, nil
	}
	if err != nil {
		return runRecord{}, false, fmt.Errorf("get archived run %s: %w", runID, err)
	}
	var r runRecord
	if err := json.Unmarshal([]byte(record), &r); err != nil {
		return runRecord{}, false, fmt.Errorf("get archived run %s: decode: %w", runID, err)
	}
	return r, true, nil
}

// list returns a page of archived runs. The statement holds a condition per
// filter in use, so each query walks an index in order (the keyset
// condition included) instead of a plan generic over absent filters; the
// values are always parameters.
func (h *pgRunHistory) list(ctx context.Context, q runQuery) ([]runRecord, error) {
	if q.Limit < 1 || q.Limit > runQueryMaxLimit+1 { // +1: the engine asks one past a page
		return nil, fmt.Errorf("list archived runs: limit %d is not between 1 and %d", q.Limit, runQueryMaxLimit+1)
	}
	var where []string
	var args []any
	arg := func(v any) string { // the placeholder of a new parameter
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Workflow != "" {
		where = append(where, "workflow_name = "+arg(q.Workflow))
	}
	if len(q.Status) > 0 {
		where = append(where, "status = ANY("+arg(q.Status)+")")
	}
	if q.Trigger != "" {
		where = append(where, "trigger = "+arg(q.Trigger))
	}
	if q.Agent != "" {
		// agent <> '' lets the planner use the partial index whatever $n is.
		where = append(where, "agent = "+arg(q.Agent)+" AND agent <> ''")
	}
	if q.RerunOf != "" {
		where = append(where, "rerun_of = "+arg(q.RerunOf))
	}
	if q.Session != "" {
		where = append(where, "session_id = "+arg(q.Session))
	}
	if !q.Since.IsZero() {
		where = append(where, "created_at >= "+arg(q.Since))
	}
	if !q.Until.IsZero() {
		where = append(where, "created_at < "+arg(q.Until))
	}
	if q.Text != "" {
		// LIKE, which the trigram index serves; runs archived before the
		// search column are searched in their whole record.
		pattern := "%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(q.Text) + "%"
		where = append(where, "(search LIKE "+arg(pattern)+" OR (search IS NULL AND strpos(lower(record), "+arg(q.Text)+") > 0))")
	}
	if q.After != nil {
		where = append(where, "(created_at, run_id) < ("+arg(q.After.CreatedAt)+", "+arg(q.After.RunID)+")")
	}
	sql := "SELECT record FROM svc.runs"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY created_at DESC, run_id DESC LIMIT " + arg(q.Limit)
	rows, err := h.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list archived runs: %w", err)
	}
	runs := make([]runRecord, 0, q.Limit)
	var record []byte
	_, err = pgx.ForEachRow(rows, []any{&record}, func() error {
		var r runRecord
		if err := json.Unmarshal(record, &r); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		runs = append(runs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list archived runs: %w", err)
	}
	return runs, nil
}

// hasReruns reports whether any stored run reruns another (an index scan of
// runs_rerun_of_idx, which holds only reruns).
func (h *pgRunHistory) hasReruns(ctx context.Context) (bool, error) {
	var found bool
	err := h.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM svc.runs WHERE rerun_of IS NOT NULL)`).Scan(&found)
	return found, err
}

// prune deletes the runs that ended before endedBefore, runHistoryPruneBatch
// at a time so no transaction grows with the backlog; readers are never
// blocked (MVCC). It stops at ctx's end, returning what it deleted so far.
func (h *pgRunHistory) prune(ctx context.Context, endedBefore time.Time) (int64, error) {
	var total int64
	for {
		tag, err := h.db.Exec(ctx, `DELETE FROM svc.runs WHERE run_id IN (
    SELECT run_id FROM svc.runs WHERE ended_at < $1 LIMIT $2)`, endedBefore, runHistoryPruneBatch)
		if err != nil {
			return total, fmt.Errorf("prune runs ended before %s: %w", endedBefore.Format(time.RFC3339), err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < runHistoryPruneBatch {
			return total, nil
		}
	}
}

// parseRetention reads SVC_RUN_RETENTION: how long ended runs are kept in
// the history (parseRetentionOf, default runRetentionDefault, 30 days).
func parseRetention(s string) (time.Duration, error) {
	return parseRetentionOf("SVC_RUN_RETENTION", s, runRetentionDefault)
}

// parseRetentionOf reads the retention s of the variable name. It accepts
// a Go duration ("720h", "90m") or whole days ("30d"); "0" keeps things
// forever and returns 0; "" returns def. Negative values are errors.
func parseRetentionOf(name, s string, def time.Duration) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		n, err = strconv.ParseInt(days, 10, 64)
		if n > runRetentionMaxDays {
			n = -1 // overflows a time.Duration
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("parse %s %q: want whole days such as 30d, a duration such as 720h, or 0 to keep them forever", name, s)
	}
	return d, nil
}
