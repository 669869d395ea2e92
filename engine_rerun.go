package main

// Reruns (issue 37, item 4): "run again" starts a new run of a run's
// workflow with the same input; "retry from step N" starts one that reuses
// the journaled outcomes of the calls before N and runs from N on, on the
// code current now (what DBOS calls a fork). The new run records the run it
// reruns (rerunOf) and, for a retry, the step (retryFromStep); the old run
// finds its reruns by that field (GET /api/runs?rerunOf=, and reruns on
// GET /api/runs/{runId}), so both directions are durable without changing
// an ended run's record.
//
// The reused calls travel in the start's own event (journalEvent.Calls): a
// rerun replays without the run it came from, which may have left memory
// for the history or been pruned since.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// registerReruns hangs reruns off the engine (engine_hooks.go): once a
// rerun starts or queues, GET /api/runs/{runId} looks up the reruns of the
// runs it shows (rerunsStarted).
func (e *engine) registerReruns() {
	e.on(engineHook{apply: func(ev *journalEvent, _ time.Time) []func() {
		if ev.RerunOf != "" {
			e.reruns.Store(true)
		}
		return nil
	}}, evStart, evQueue)
}

// rerunsStarted reports whether any run may have reruns: one was started
// since this engine opened, its snapshot or log holds one, or the history
// did when it opened. Until then, showing a run asks nothing of the
// history for its reruns.
func (e *engine) rerunsStarted() bool { return e.reruns.Load() }

// noteRerunsLocked marks that reruns exist when the restored state holds
// one. mu must be held (or the engine not yet shared).
func (e *engine) noteRerunsLocked() {
	for _, r := range e.st.Runs {
		if r.RerunOf != "" {
			e.reruns.Store(true)
			return
		}
	}
	for _, q := range e.st.Queues {
		for _, t := range q {
			if t.RerunOf != "" {
				e.reruns.Store(true)
				return
			}
		}
	}
}

// noteArchivedReruns marks that reruns exist when the history holds one
// (or cannot say).
func (e *engine) noteArchivedReruns() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if found, err := e.opts.History.hasReruns(ctx); err != nil || found {
		e.reruns.Store(true)
	}
}

// rerunRequest asks for a rerun of RunID; FromStep 0 runs it again from the
// start with nothing reused.
type rerunRequest struct {
	RunID       string
	FromStep    int
	Trigger     string
	IdemKey     string
	TraceParent string
}

// rerunReuseMaxBytes bounds the JSON of the calls a retry reuses, which go
// into one journal record with room to spare for its other fields.
const rerunReuseMaxBytes = journalMaxRecord / 2

// rerun starts a rerun of a workflow run (an agent's turn has none: its
// client sends the message again). The input must still be accepted by the
// workflow's current inputSchema; every call before FromStep must have
// completed. Errors before anything is written are *startError, or
// errRunNotFound.
func (e *engine) rerun(ctx context.Context, req rerunRequest) (startReceipt, error) {
	src, ok, err := e.find(ctx, req.RunID)
	if err != nil {
		return startReceipt{}, err
	}
	if !ok || src.Status == runQueued {
		return startReceipt{}, errRunNotFound
	}
	if src.Agent != "" {
		return startReceipt{}, &startError{Code: "rerun_unsupported",
			Message: fmt.Sprintf("run %s is a turn of agent %s: send the message again from its client instead", src.RunID, src.Agent)}
	}
	reuse, err := reusableCalls(&src, req.FromStep)
	if err != nil {
		return startReceipt{}, err
	}
	return e.start(startRequest{Workflow: src.WorkflowName, Input: src.Input, Trigger: req.Trigger, IdemKey: req.IdemKey,
		TraceParent: req.TraceParent, RerunOf: src.RunID, RetryFrom: req.FromStep, Reuse: reuse})
}

// reusableCalls returns the calls of src before step from, as a retry from
// that step reuses them: each must have completed. from 0 reuses nothing.
func reusableCalls(src *runRecord, from int) ([]*durableCall, error) {
	if from == 0 {
		return nil, nil
	}
	if from < 1 || from > len(src.Steps) {
		want := fmt.Sprintf("a step between 1 and %d", len(src.Steps))
		if len(src.Steps) == 0 {
			want = "none: the run made no calls, so run it again instead"
		}
		return nil, &startError{Code: "invalid_step", Message: fmt.Sprintf("run %s has no step %d to retry from: want %s", src.RunID, from, want)}
	}
	reuse := make([]*durableCall, 0, from-1)
	size := 0
	for _, c := range src.Steps[:from-1] {
		if c.Status != runCompleted || c.EndedAt == nil {
			what := c.Kind
			if c.Name != "" {
				what += " " + c.Name
			}
			return nil, &startError{Code: "step_not_reusable", Message: fmt.Sprintf(
				"step %d (%s) of run %s did not complete (%s), so its outcome cannot be reused: retry from step %d or earlier", c.Seq, what, src.RunID, c.Status, c.Seq)}
		}
		// What replay reads, and no more: its attempts and times belong to
		// the old run.
		cp := &durableCall{Seq: c.Seq, Kind: c.Kind, Name: c.Name, Status: runCompleted, Result: c.Result,
			Until: c.Until, Token: c.Token, ChildRunID: c.ChildRunID, QueueID: c.QueueID}
		b, _ := json.Marshal(cp)
		if size += len(b); size > rerunReuseMaxBytes {
			return nil, &startError{Code: "too_large", Message: fmt.Sprintf("the outcomes of steps 1 to %d of run %s exceed %d MiB: retry from an earlier step", from-1, src.RunID, rerunReuseMaxBytes>>20)}
		}
		reuse = append(reuse, cp)
	}
	return reuse, nil
}

// reusedCalls makes the timeline a rerun starts with at at: the reused
// calls, completed at its start.
func reusedCalls(reuse []*durableCall, at time.Time) []*durableCall {
	steps := make([]*durableCall, len(reuse))
	for i, c := range reuse {
		cp := *c
		cp.Status, cp.Reused, cp.StartedAt, cp.EndedAt = runCompleted, true, at, &at
		steps[i] = &cp
	}
	return steps
}
