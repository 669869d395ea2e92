package main

import (
	"context"
	"net/url"
	"testing"
	"time"
)

// TestRunStatsHistory checks the overview's figures over archived runs
// and runs in memory: counts a bucket by status, each workflow's runs,
// failures and durations, the top errors with their newest run, and that a
// run created before the range counts nowhere.
func TestRunStatsHistory(t *testing.T) {
	ctx := context.Background()
	h := newPGRunHistory(historyTestDB(t))
	now := time.Now().UTC().Truncate(time.Microsecond)
	q := runStatsQuery{Since: now.Add(-10 * time.Minute), Bucket: time.Minute}
	var runs []runRecord
	add := func(id, wf, status string, ago, took time.Duration, msg string) {
		r := historyTestRun(id, wf, status, now.Add(-ago))
		ended := r.CreatedAt.Add(took)
		r.EndedAt = &ended
		if msg != "" {
			r.Error = &runError{Name: "FatalError", Message: msg}
		}
		runs = append(runs, r)
	}
	add("a1", "order", runCompleted, 9*time.Minute+30*time.Second, 100*time.Millisecond, "")
	add("a2", "order", runCompleted, 9*time.Minute+20*time.Second, 300*time.Millisecond, "")
	add("a3", "order", runFailed, 5*time.Minute+10*time.Second, 200*time.Millisecond, "card declined")
	add("a4", "order", runFailed, 2*time.Minute+5*time.Second, 200*time.Millisecond, "card declined")
	add("b1", "ship", runFailed, 2*time.Minute+1*time.Second, time.Second, "carrier timeout")
	add("old", "order", runFailed, 20*time.Minute, time.Second, "card declined")
	add("turn", "helper (agui)", runCompleted, time.Minute, time.Second, "")
	runs[len(runs)-1].Agent, runs[len(runs)-1].Trigger = "helper", triggerAgent
	if err := h.archive(ctx, runs); err != nil {
		t.Fatal(err)
	}
	hist, err := h.stats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	mem := newRunStatsPart()
	mem.count(int64(9), "ship", runRunning, 1) // a run in memory, created in the last bucket
	st := runStatsOf(q, now, map[string]int{runRunning: 1}, mem, hist)
	if len(st.Buckets) != 11 {
		t.Fatalf("%d buckets; want 11 (10 minutes of 1m, and the one now is in)", len(st.Buckets))
	}
	for i, want := range map[int]map[string]int{0: {runCompleted: 2}, 4: {runFailed: 1}, 7: {runFailed: 2}, 9: {runRunning: 1}} {
		for s, n := range want {
			if st.Buckets[i].Counts[s] != n {
				t.Errorf("bucket %d %s = %d; want %d (%v)", i, s, st.Buckets[i].Counts[s], n, st.Buckets[i].Counts)
			}
		}
	}
	byName := map[string]runStatsWorkflow{}
	for _, w := range st.Workflows {
		byName[w.Workflow] = w
	}
	if o := byName["order"]; o.Runs != 4 || o.Failed != 2 || o.FailureRate != 0.5 || o.P50Ms == nil || *o.P50Ms != 200 || *o.P95Ms < 270 || *o.P95Ms > 300 {
		t.Errorf("order = %+v (p50 %v p95 %v); want 4 runs, 2 failed, p50 200 ms, p95 about 285 ms", o, o.P50Ms, o.P95Ms)
	}
	if _, ok := byName["helper (agui)"]; ok || st.Buckets[9].Counts[runCompleted] != 1 {
		t.Errorf("an agent's turn is among the workflows (%v) or missing from its bucket (%v)", st.Workflows, st.Buckets[9].Counts)
	}
	if s := byName["ship"]; s.Runs != 2 || s.Failed != 1 {
		t.Errorf("ship = %+v; want 2 runs (one in memory), 1 failed", s)
	}
	if len(st.TopErrors) != 2 || st.TopErrors[0].Message != "FatalError: card declined" || st.TopErrors[0].Count != 2 || st.TopErrors[0].LastRunID != "a4" {
		t.Errorf("top errors = %+v; want card declined twice (newest a4), then carrier timeout", st.TopErrors)
	}
	// Runs the engine counts from memory (ended, archived and not yet
	// gone from memory) are left out of the history's part: once each.
	q.inMemory = []string{"a3", "a4"}
	hist, err = h.stats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	st = runStatsOf(q, now, nil, hist)
	for _, w := range st.Workflows {
		if w.Workflow == "order" && (w.Runs != 2 || w.Failed != 0) {
			t.Errorf("order without the runs in memory = %+v; want 2 runs, none failed", w)
		}
	}
	if len(st.TopErrors) != 1 || st.TopErrors[0].Message != "FatalError: carrier timeout" {
		t.Errorf("top errors without the runs in memory = %+v", st.TopErrors)
	}
}

func TestParseRunStatsQuery(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"":                           "since 2026-11-29 11:00:00 bucket 1m0s",
		"since=24h":                  "since 2026-11-28 12:00:00 bucket 24m0s",
		"since=7d&bucket=1h":         "since 2026-11-22 12:00:00 bucket 1h0m0s",
		"since=1h&bucket=1s":         "error bucket",
		"since=tomorrow":             "error since",
		"bucket=0s":                  "error bucket",
		"since=1h&workflow=x":        "error workflow",
		"since=2026-11-29T11:30:00Z": "since 2026-11-29 11:30:00 bucket 30s",
	} {
		v, _ := url.ParseQuery(in)
		q, err := parseRunStatsQuery(v, now)
		got := "since " + q.Since.UTC().Format(time.DateTime) + " bucket " + q.Bucket.String()
		if qe, ok := err.(*runQueryError); ok {
			got = "error " + qe.Param
		}
		if got != want {
			t.Errorf("parseRunStatsQuery(%q) = %s; want %s", in, got, want)
		}
	}
}
