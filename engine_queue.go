package main

// Queued triggers of limited workflows (engine_concurrency.go) as
// first-class entries: a `q_…` id reads as a run record with status queued (or, once it has started, as the
// run it became, while that is in memory) and can be cancelled, durably,
// before its turn.

import (
	"context"
	"errors"
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

// queuedRunID is the id of the run a queued start becomes: its queue id's
// UUID, so whoever holds the queue id can find the run after it ended
// (engine_fleet.go awaitEnd), and the run stays in the entry's partition.
func queuedRunID(queueID string) string { return strings.TrimPrefix(queueID, queueIDPrefix) }

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

// advanceQueueSoon is advanceQueue after a run ended. On a shared log it
// runs on a goroutine of its own (close waits for it): its admissions wait
// on the log, and the other actions of the delivered events (waking the
// waiters of other runs that ended) must not wait on them.
func (e *engine) advanceQueueSoon(workflow, bucket string) {
	if e.self == "" {
		e.advanceQueue(workflow, bucket)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		e.advanceQueue(workflow, bucket)
	}()
}

// advanceQueue starts the heads of workflow's queue bucket while fewer runs
// of it are active than its limit (FIFO per key). One call at a time
// admits from a bucket: a call meanwhile returns at once, since the one at
// work looks at the state again before it stops (so on a shared log this
// process's admissions do not race each other for the same head).
func (e *engine) advanceQueue(workflow, bucket string) {
	// The entry runs the code current when its turn comes.
	ver := ""
	if cat := e.opts.Catalog(); cat != nil && cat.Workflows[workflow] != nil {
		def := cat.Workflows[workflow]
		if err := e.saveVersion(def); err != nil {
			e.log.Error("start queued run", "workflow", workflow, "err", err)
			return
		}
		ver = def.Module.Hash
	}
	e.mu.Lock()
	if e.advancing[bucket] {
		e.mu.Unlock()
		return
	}
	e.advancing[bucket] = true
	for ; ; e.mu.Lock() {
		q := e.st.Queues[bucket]
		if len(q) == 0 || !e.admitsLocked(bucket, q[0].concurrencyLimit()) || e.closed {
			delete(e.advancing, bucket) // with the look, under mu: a later call admits itself
			e.mu.Unlock()
			return
		}
		head := q[0]
		ev := &journalEvent{Type: evStart, Run: queuedRunID(head.QueueID), WRun: newWorldRunID(), Workflow: workflow, Input: head.Input,
			Trigger: head.Trigger, Queue: head.QueueID, Parent: head.ParentRunID, ParentSeq: head.ParentSeq, Kind: head.ParentKind, Ver: ver,
			Fire: scheduleMicros(head.ScheduledAt), TraceParent: head.TraceParent, RerunOf: head.RerunOf, Seq: head.RetryFrom, Calls: head.Reuse}
		ev.setConcurrency(head.concurrencyLimit(), head.LimitKey)
		if err := e.commitLocked(ev, false); err != nil {
			e.mu.Lock()
			delete(e.advancing, bucket)
			e.mu.Unlock()
			if !errors.Is(err, errEngineClosed) {
				e.log.Error("start queued run", "workflow", workflow, "err", err)
			}
			return
		}
		if _, ok := e.get(ev.Run); !ok {
			continue // void: another replica took the head or the slot first (engine_replica.go); look again
		}
		e.log.Info("run started", "workflow", workflow, "run", ev.Run, "queue", head.QueueID)
		e.schedule(ev.Run)
	}
}
