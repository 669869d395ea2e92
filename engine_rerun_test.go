package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

func TestEngineRerun(t *testing.T) { eachEngineStore(t, testEngineRerun) }

// testEngineRerun is TestEngineRerun on one store: run again re-executes
// every step; a retry from step N executes only N on, with the outcomes of
// the calls before it (a step's result, a resumed hook) reused, and both
// survive a reopen; what cannot be retried is refused before anything is
// written.
func testEngineRerun(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	ctx := context.Background()
	first := te.startWait(t, "three", `{"id":"x"}`)
	if string(first.Output) != `{"sum":3}` {
		t.Fatalf("first run = %s", first.Output)
	}
	if te.rerunsStarted() {
		t.Fatal("rerunsStarted before any rerun: showing a run would ask the history for reruns there are none of")
	}
	rerun := func(id string, from int) runRecord {
		t.Helper()
		rc, err := te.rerun(ctx, rerunRequest{RunID: id, FromStep: from, Trigger: triggerCLI})
		if err != nil {
			t.Fatalf("rerun %s from %d: %v", id, from, err)
		}
		if rc.RerunOf != id || rc.RetryFromStep != from || rc.Status != "started" {
			t.Fatalf("receipt = %+v", rc)
		}
		return te.await(t, rc.RunID)
	}
	// Retry from step 3: steps 1 and 2 are not called again.
	fork := rerun(first.RunID, 3)
	if !te.rerunsStarted() {
		t.Fatal("rerunsStarted after a rerun = false: GET /api/runs/{runId} would not name it")
	}
	if fork.Status != runCompleted || string(fork.Output) != `{"sum":4}` {
		t.Fatalf("retry from step 3 = %s %s; want {\"sum\":4} (1+1 reused, x-c called a second time)", fork.Status, fork.Output)
	}
	if a, b, c := te.counter.count("x-a"), te.counter.count("x-b"), te.counter.count("x-c"); a != 1 || b != 1 || c != 2 {
		t.Errorf("calls after the retry: a=%d b=%d c=%d; want 1 1 2", a, b, c)
	}
	if fork.RerunOf != first.RunID || fork.RetryFromStep != 3 || fork.Trigger != triggerCLI || fork.Input == nil || string(fork.Input) != `{"id":"x"}` {
		t.Errorf("fork = rerunOf %q from %d trigger %q input %s", fork.RerunOf, fork.RetryFromStep, fork.Trigger, fork.Input)
	}
	for i, s := range fork.Steps {
		reused := i < 2
		if s.Reused != reused || s.Status != runCompleted || (reused && (len(s.Attempts) != 0 || string(s.Result) != "1")) || (!reused && len(s.Attempts) != 1) {
			t.Errorf("fork step %d = %+v; want reused %v", s.Seq, s, reused)
		}
	}
	// Run again: every step runs.
	again := rerun(first.RunID, 0)
	if string(again.Output) != `{"sum":7}` || again.Steps[0].Reused {
		t.Errorf("run again = %s reused %v; want {\"sum\":7} with nothing reused", again.Output, again.Steps[0].Reused)
	}
	// The old run finds its reruns, newest first.
	runs, _, _, err := soloFleet(te.engine).listRuns(ctx, runQuery{RerunOf: first.RunID, Limit: 10})
	if err != nil || len(runs) != 2 || runs[0].RunID != again.RunID || runs[1].RunID != fork.RunID {
		t.Errorf("reruns of the first run = %d %v", len(runs), err)
	}
	// A resumed hook's payload is reused: the retry completes without a resume.
	rc, err := te.start(startRequest{Workflow: "hooked", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := te.resumeHook(<-te.counter.tokens, json.RawMessage(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	te.await(t, rc.RunID)
	hooked := rerun(rc.RunID, 2)
	if hooked.Status != runCompleted || string(hooked.Output) != `{"approved":true}` || !hooked.Steps[0].Reused || hooked.Steps[0].Kind != callHook {
		t.Errorf("hooked retried from step 2 = %s %s %+v", hooked.Status, hooked.Output, hooked.Steps[0])
	}
	<-te.counter.tokens // the announce step ran again
	// A rerun of a serial workflow waits its turn, and keeps what it reuses.
	lonely := te.startWait(t, "lonely", `{"i":1}`)
	var ids []string
	for range 2 {
		rc, err := te.rerun(ctx, rerunRequest{RunID: lonely.RunID, FromStep: 2, Trigger: triggerHTTP})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rc.RunID+rc.QueueID)
	}
	if !isQueueID(ids[1]) {
		t.Fatalf("second rerun of a serial workflow = %s; want queued behind the first", ids[1])
	}
	for _, id := range ids {
		r := te.await(t, id)
		if r.Status != runCompleted || !r.Steps[0].Reused || r.RerunOf != lonely.RunID || r.RetryFromStep != 2 || string(r.Output) != string(lonely.Output) {
			t.Errorf("serial rerun %s = %s %s %+v", id, r.Status, r.Output, r.Steps[0])
		}
	}
	if n := te.counter.count("serial-1"); n != 1 {
		t.Errorf("the reused step ran %d times; want 1", n)
	}
	// Refusals, with nothing written.
	failed := te.startWait(t, "abandon", `{"fail":true}`)
	for _, tc := range []struct {
		id   string
		from int
		code string
	}{
		{failed.RunID, 2, "step_not_reusable"}, // step 1, its hook, never completed
		{failed.RunID, 3, "invalid_step"},
		{first.RunID, -1, "invalid_step"},
	} {
		_, err := te.rerun(ctx, rerunRequest{RunID: tc.id, FromStep: tc.from, Trigger: triggerHTTP})
		var se *startError
		if !errors.As(err, &se) || se.Code != tc.code {
			t.Errorf("rerun %s from %d = %v; want %s", tc.id, tc.from, err, tc.code)
		}
	}
	if _, err := te.rerun(ctx, rerunRequest{RunID: "nope", Trigger: triggerHTTP}); !errors.Is(err, errRunNotFound) {
		t.Errorf("rerun of an unknown run = %v", err)
	}
	// The journal rebuilds the rerun as it was: reused calls and links.
	te.close()
	te.open(t)
	if !te.rerunsStarted() {
		t.Error("rerunsStarted after a reopen = false; the log holds reruns")
	}
	back, ok := te.get(fork.RunID)
	if !ok || string(back.Output) != `{"sum":4}` || back.RerunOf != first.RunID || back.RetryFromStep != 3 || !back.Steps[0].Reused || back.Steps[2].Reused {
		t.Fatalf("fork after reopen = %+v", back)
	}
}
