package main

// Queued triggers of limited workflows (engine_concurrency.go) as
// first-class entries: a `q_…` id reads as a run record with status queued (or, once it has started, as the
// run it became, while that is in memory) and can be cancelled, durably,
// before its turn.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// queueIDPrefix starts the id of a queued trigger.
const queueIDPrefix = "q_"

// evDequeue removes a queued trigger that was cancelled before its turn.
const evDequeue = "dequeue"

// queuedLocked returns the queued trigger id, or nil. mu must be held.
func (e *engine) queuedLocked(id string) *queuedTrigger {
	for _, q := range e.st.Queues {
		for _, t := range q {
			if t.QueueID == id {
				return t
			}
		}
	}
	return nil
}

// record shows a queued trigger as a run record with status queued: the
// queue id stands in for the run id it does not have yet.
func (t *queuedTrigger) record() runRecord {
	return runRecord{RunID: t.QueueID, WorkflowName: t.WorkflowName, Status: runQueued, Trigger: t.Trigger, Input: t.Input,
		Serial: t.Limit == 0, Limit: t.Limit, LimitKey: t.LimitKey, QueueID: t.QueueID, ParentRunID: t.ParentRunID, ParentSeq: t.ParentSeq, ScheduledAt: t.ScheduledAt, CreatedAt: t.CreatedAt, Steps: []*durableCall{},
		RerunOf: t.RerunOf, RetryFromStep: t.RetryFrom}
}

// findQueued returns a queued trigger as a record, or the run it started
// as while that run is in memory.
func (e *engine) findQueued(id string) (runRecord, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.queuedLocked(id); t != nil {
		return t.record(), true
	}
	for _, r := range e.st.Runs {
		if r.QueueID == id {
			return snapshotRun(r), true
		}
	}
	return runRecord{}, false
}

// waitTurn blocks until the queued entry id has left its queue (its run
// started, or it was cancelled before its turn) or ctx ends.
func (e *engine) waitTurn(ctx context.Context, id string) error {
	e.mu.Lock()
	t := e.queuedLocked(id)
	if t == nil {
		e.mu.Unlock()
		return nil
	}
	if t.turn == nil {
		t.turn = make(chan struct{})
	}
	turn := t.turn
	e.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelQueued removes a queued trigger before its turn, durably; a
// parent waiting on it with startAndWait gets the cancellation as the
// child's failure. An entry that has started is cancelled as its run.
func (e *engine) cancelQueued(id string) (runRecord, error) {
	e.mu.Lock()
	t := e.queuedLocked(id)
	if t == nil {
		e.mu.Unlock()
		r, ok := e.findQueued(id)
		if !ok {
			return runRecord{}, errRunNotFound
		}
		return e.cancelRun(r.RunID)
	}
	rec := t.record()
	if err := e.commitLocked(&journalEvent{Type: evDequeue, Queue: id, Workflow: t.WorkflowName, Key: t.LimitKey}, true); err != nil {
		return rec, err
	}
	now := time.Now().UTC()
	rec.Status, rec.EndedAt, rec.Error = runCancelled, &now, &runError{Name: "Cancelled", Message: "cancelled before its turn"}
	return rec, nil
}

// applyDequeue removes the queued trigger of ev from its queue and settles
// the startAndWait of a parent waiting on it.
func (e *engine) applyDequeue(ev *journalEvent, at time.Time) (after []func()) {
	t := e.removeQueuedLocked(concurrencyBucket(ev.Workflow, ev.Key), ev.Queue)
	if t == nil {
		return nil
	}
	if p := e.st.Runs[t.ParentRunID]; p != nil {
		if c := p.call(t.ParentSeq); c != nil && c.Kind == callStartAndWait && c.EndedAt == nil {
			c.settle(at, nil, &runError{Name: "Cancelled", Message: fmt.Sprintf("child workflow %s was cancelled before its turn", t.WorkflowName)})
			after = append(after, func() { e.schedule(p.RunID) })
		}
	}
	return after
}

// isQueueID reports whether id names a queued trigger rather than a run.
func isQueueID(id string) bool { return strings.HasPrefix(id, queueIDPrefix) }

// queueDepths returns how many starts wait in each limited workflow's
// queues (all its keys together), for the workflows with a queue.
func (e *engine) queueDepths() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.st.Queues))
	for _, q := range e.st.Queues {
		out[q[0].WorkflowName] += len(q)
	}
	return out
}
