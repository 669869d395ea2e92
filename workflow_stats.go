package main

// The overview's figures (issue 37, item 2): GET /api/runs/stats?since=1h&
// bucket=1m answers, for the runs created since then, how many started in
// each bucket by status, each workflow's runs, failure rate and p50/p95
// duration, what is active now, and the most frequent errors. Ended runs
// come from the run history (three grouped statements over the range of
// created_at, each on an index), the others from the engine's memory; a
// run ended in the last archive interval may be counted twice.

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"
)

// Bounds of a stats query.
const (
	runStatsMaxBuckets = 500
	runStatsTopErrors  = 10
)

// runStatsQuery is a parsed stats query.
type runStatsQuery struct {
	Since  time.Time
	Bucket time.Duration
	// inMemory are the runs the engine counted from its memory: the
	// history leaves them out, so a run archived meanwhile (the archiver
	// writes it before it leaves memory) is counted once.
	inMemory []string
}

// runStats is the answer of GET /api/runs/stats.
type runStats struct {
	Since     time.Time          `json:"since"`
	BucketMs  int64              `json:"bucketMs"`
	Buckets   []runStatsBucket   `json:"buckets"`
	Workflows []runStatsWorkflow `json:"workflows"`
	Active    map[string]int     `json:"active"` // running, pending, waiting, queued now
	TopErrors []runStatsError    `json:"topErrors"`
}

// runStatsBucket is how many runs were created in [Start, Start+bucket), by status.
type runStatsBucket struct {
	Start  time.Time      `json:"start"`
	Counts map[string]int `json:"counts"`
}

// runStatsWorkflow is one workflow's runs in the range: how many, how many
// failed, and the p50 and p95 duration of the ended ones (nil: none ended).
type runStatsWorkflow struct {
	Workflow    string   `json:"workflow"`
	Runs        int      `json:"runs"`
	Failed      int      `json:"failed"`
	FailureRate float64  `json:"failureRate"`
	P50Ms       *float64 `json:"p50Ms"`
	P95Ms       *float64 `json:"p95Ms"`
}

// runStatsError is a frequent error: its words, its workflow, how many
// failed runs had it, and the newest of them.
type runStatsError struct {
	Message   string `json:"message"`
	Workflow  string `json:"workflow"`
	Count     int    `json:"count"`
	LastRunID string `json:"lastRunId"`
}

// parseRunStatsQuery reads since (an RFC 3339 time or an age; default 1h)
// and bucket (a duration; default since's range / 60, at least 1s); at most
// runStatsMaxBuckets buckets. Any other parameter is refused.
func parseRunStatsQuery(v url.Values, now time.Time) (runStatsQuery, error) {
	for name := range v {
		if name != "since" && name != "bucket" {
			return runStatsQuery{}, &runQueryError{Param: name, Value: v.Get(name), Want: "no such parameter: GET /api/runs/stats takes since and bucket"}
		}
	}
	q := runStatsQuery{Since: now.Add(-time.Hour)}
	if raw := v.Get("since"); raw != "" {
		t, err := runQueryTime(raw, now)
		if err != nil || !t.Before(now) {
			return q, &runQueryError{Param: "since", Value: raw, Want: "an RFC 3339 time in the past or an age (90m, 24h, 7d)"}
		}
		q.Since = t
	}
	q.Bucket = max(now.Sub(q.Since)/60, time.Second).Round(time.Second)
	if raw := v.Get("bucket"); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d < time.Second {
			return q, &runQueryError{Param: "bucket", Value: raw, Want: "a duration of at least 1s (1m, 5m, 1h)"}
		}
		q.Bucket = d
	}
	if n := now.Sub(q.Since) / q.Bucket; n > runStatsMaxBuckets {
		return q, &runQueryError{Param: "bucket", Value: q.Bucket.String(), Want: fmt.Sprintf("at most %d buckets in the range: a longer bucket", runStatsMaxBuckets)}
	}
	return q, nil
}

// runStatsPart is what one source (the history, the engine's memory) adds.
type runStatsPart struct {
	buckets   map[int64]map[string]int // bucket index → status → count
	workflows map[string]*runStatsWorkflow
	errors    map[[2]string]*runStatsError // message, workflow
	newest    map[[2]string]time.Time      // of errors' LastRunID
}

// newRunStatsPart is an empty part.
func newRunStatsPart() *runStatsPart {
	return &runStatsPart{buckets: map[int64]map[string]int{}, workflows: map[string]*runStatsWorkflow{},
		errors: map[[2]string]*runStatsError{}, newest: map[[2]string]time.Time{}}
}

// count adds n runs of workflow with status created in bucket b.
func (p *runStatsPart) count(b int64, workflow, status string, n int) {
	if p.buckets[b] == nil {
		p.buckets[b] = map[string]int{}
	}
	p.buckets[b][status] += n
	if workflow == "" {
		return // an agent's turn: in the buckets, not among the workflows
	}
	w := p.workflows[workflow]
	if w == nil {
		w = &runStatsWorkflow{Workflow: workflow}
		p.workflows[workflow] = w
	}
	w.Runs += n
	if status == runFailed {
		w.Failed += n
	}
}

// failure adds n failed runs of workflow with error message, the newest
// created at at with id runID.
func (p *runStatsPart) failure(message, workflow string, n int, runID string, at time.Time) {
	k := [2]string{message, workflow}
	e := p.errors[k]
	if e == nil {
		e = &runStatsError{Message: message, Workflow: workflow}
		p.errors[k] = e
	}
	e.Count += n
	if at.After(p.newest[k]) {
		p.newest[k], e.LastRunID = at, runID
	}
}

// runStatsOf merges the parts into the answer, its buckets from since to now.
func runStatsOf(q runStatsQuery, now time.Time, active map[string]int, parts ...*runStatsPart) runStats {
	st := runStats{Since: q.Since, BucketMs: q.Bucket.Milliseconds(), Active: active, Buckets: []runStatsBucket{}, Workflows: []runStatsWorkflow{}, TopErrors: []runStatsError{}}
	n := int64(now.Sub(q.Since)/q.Bucket) + 1
	all := newRunStatsPart()
	for _, p := range parts {
		for b, counts := range p.buckets {
			for status, c := range counts {
				if all.buckets[b] == nil {
					all.buckets[b] = map[string]int{}
				}
				all.buckets[b][status] += c
			}
		}
		for name, w := range p.workflows {
			if all.workflows[name] == nil {
				all.workflows[name] = &runStatsWorkflow{Workflow: name}
			}
			if w.P50Ms != nil { // only the history's ended runs give durations
				all.workflows[name].P50Ms, all.workflows[name].P95Ms = w.P50Ms, w.P95Ms
			}
			all.workflows[name].Runs += w.Runs
			all.workflows[name].Failed += w.Failed
		}
		for k, e := range p.errors {
			all.failure(e.Message, e.Workflow, e.Count, e.LastRunID, p.newest[k])
		}
	}
	for b := range n {
		counts := all.buckets[b]
		if counts == nil {
			counts = map[string]int{}
		}
		st.Buckets = append(st.Buckets, runStatsBucket{Start: q.Since.Add(time.Duration(b) * q.Bucket), Counts: counts})
	}
	for _, w := range all.workflows {
		w.FailureRate = float64(w.Failed) / float64(max(w.Runs, 1))
		st.Workflows = append(st.Workflows, *w)
	}
	slices.SortFunc(st.Workflows, func(a, b runStatsWorkflow) int { return cmp.Compare(a.Workflow, b.Workflow) })
	for _, e := range all.errors {
		st.TopErrors = append(st.TopErrors, *e)
	}
	slices.SortFunc(st.TopErrors, func(a, b runStatsError) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Message, b.Message), cmp.Compare(a.Workflow, b.Workflow))
	})
	st.TopErrors = st.TopErrors[:min(len(st.TopErrors), runStatsTopErrors)]
	return st
}

// memoryRunsSince returns the runs in memory created at or after since,
// each without its input, output and timeline (what the overview counts).
func (e *engine) memoryRunsSince(since time.Time) []runRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []runRecord
	for _, r := range e.st.Runs {
		if !r.CreatedAt.Before(since) {
			out = append(out, runRecord{RunID: r.RunID, WorkflowName: r.WorkflowName, Status: r.Status, Agent: r.Agent, Error: r.Error, CreatedAt: r.CreatedAt})
		}
	}
	return out
}

// runStatsFrom is the overview of the runs in memory mem (of one engine,
// or of every replica's), active, and the history h's (nil: none).
func runStatsFrom(ctx context.Context, h runHistory, q runStatsQuery, active map[string]int, mem []runRecord) (runStats, error) {
	now := time.Now()
	part := newRunStatsPart()
	for _, r := range mem {
		wf := r.WorkflowName
		if r.Agent != "" {
			wf = "" // an agent's turn: in the buckets, not among the workflows
		}
		part.count(int64(r.CreatedAt.Sub(q.Since)/q.Bucket), wf, r.Status, 1)
		q.inMemory = append(q.inMemory, r.RunID)
		if r.Status == runFailed && r.Error != nil {
			part.failure(runErrorWords(r.Error), r.WorkflowName, 1, r.RunID, r.CreatedAt)
		}
	}
	if h == nil {
		return runStatsOf(q, now, active, part), nil
	}
	hist, err := h.stats(ctx, q)
	if err != nil {
		return runStats{}, err
	}
	return runStatsOf(q, now, active, part, hist), nil
}

// stats is the history's part of an overview: three grouped statements on
// the runs created since q.Since.
func (h *pgRunHistory) stats(ctx context.Context, q runStatsQuery) (*runStatsPart, error) {
	p := newRunStatsPart()
	sec := q.Bucket.Seconds()
	if q.inMemory == nil {
		q.inMemory = []string{} // NULL would leave every run out
	}
	rows, err := h.db.Query(ctx, `SELECT floor(extract(epoch FROM created_at - $1) / $2)::bigint, CASE WHEN agent = '' THEN workflow_name ELSE '' END, status, count(*)
		FROM svc.runs WHERE created_at >= $1 AND run_id <> ALL($3) GROUP BY 1, 2, 3`, q.Since, sec, q.inMemory)
	if err != nil {
		return nil, fmt.Errorf("run stats: %w", err)
	}
	for rows.Next() {
		var b int64
		var wf, status string
		var n int
		if err := rows.Scan(&b, &wf, &status, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("run stats: %w", err)
		}
		p.count(b, wf, status, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run stats: %w", err)
	}
	rows, err = h.db.Query(ctx, `SELECT workflow_name,
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ended_at - created_at) * 1000),
			percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM ended_at - created_at) * 1000)
		FROM svc.runs WHERE created_at >= $1 AND workflow_name <> '' AND agent = '' AND run_id <> ALL($2) GROUP BY 1`, q.Since, q.inMemory)
	if err != nil {
		return nil, fmt.Errorf("run stats: durations: %w", err)
	}
	for rows.Next() {
		var wf string
		var p50, p95 float64
		if err := rows.Scan(&wf, &p50, &p95); err != nil {
			rows.Close()
			return nil, fmt.Errorf("run stats: durations: %w", err)
		}
		if w := p.workflows[wf]; w != nil {
			w.P50Ms, w.P95Ms = &p50, &p95
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run stats: durations: %w", err)
	}
	rows, err = h.db.Query(ctx, `SELECT error_message, workflow_name, count(*), (array_agg(run_id ORDER BY created_at DESC))[1], max(created_at)
		FROM svc.runs WHERE created_at >= $1 AND error_message IS NOT NULL AND run_id <> ALL($3)
		GROUP BY 1, 2 ORDER BY 3 DESC LIMIT $2`, q.Since, runStatsTopErrors, q.inMemory)
	if err != nil {
		return nil, fmt.Errorf("run stats: errors: %w", err)
	}
	for rows.Next() {
		var msg, wf, id string
		var n int
		var at time.Time
		if err := rows.Scan(&msg, &wf, &n, &id, &at); err != nil {
			rows.Close()
			return nil, fmt.Errorf("run stats: errors: %w", err)
		}
		p.failure(msg, wf, n, id, at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run stats: errors: %w", err)
	}
	return p, nil
}
