package main

// Child runs: a workflow's `workflows.start` and `startAndWait` are calls of
// its timeline (kinds callStart and callStartAndWait) that the child's
// events settle. start settles when the child is queued or started;
// startAndWait holds the child's outcome, so the parent replays without
// the child's record (it may have left memory for the history).

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// registerChildren hangs child runs off the engine (engine_hooks.go).
func (e *engine) registerChildren() {
	e.on(engineHook{apply: e.childQueuedOrStarted}, evQueue, evStart, evLink)
	e.on(engineHook{apply: e.childEnded}, evEnd)
	e.on(engineHook{apply: e.childDequeued}, evDequeue)
	e.on(engineHook{apply: e.childEndedElsewhere}, evChildEnd)
}

// childQueuedOrStarted settles the parent's call of a child that was queued
// (evQueue), started (evStart) or answered by its idempotency key (evLink).
// mu must be held.
func (e *engine) childQueuedOrStarted(ev *journalEvent, at time.Time) []func() {
	p := e.st.Runs[ev.Parent]
	if p == nil {
		return nil
	}
	c := p.ensureCall(ev.ParentSeq, ev.Kind, ev.Workflow, at)
	switch ev.Type {
	case evQueue:
		c.QueueID = ev.Queue
		if c.Kind == callStart { // workflows.start resolves at once: queued
			c.settle(at, startReceipt{SchemaVersion: schemaVersion, WorkflowName: ev.Workflow, Status: "queued", Trigger: workflowRoute(ev.Workflow), QueueID: ev.Queue}, nil)
		}
	case evStart:
		c.ChildRunID = ev.Run
		if c.Kind == callStart && c.EndedAt == nil {
			c.settle(at, startReceipt{SchemaVersion: schemaVersion, WorkflowName: ev.Workflow, Status: "started",
				RunID: ev.Run, WorldRunID: ev.WRun, Trigger: workflowRoute(ev.Workflow)}, nil)
		}
	case evLink:
		c.ChildRunID, c.QueueID = ev.Run, ev.Queue
		switch {
		case c.EndedAt != nil:
		case c.Kind == callStart:
			c.settle(at, idemReceipt(ev.Workflow, ev.Run, ev.WRun, ev.Queue), nil)
		default: // startAndWait of a child in another partition: its end comes as evChildEnd
			parent, seq := p.RunID, c.Seq
			return []func(){func() { e.watchChild(parent, seq) }}
		}
	}
	return nil
}

// childEnded settles the parent's startAndWait of the run that ended and
// schedules the parent. mu must be held.
func (e *engine) childEnded(ev *journalEvent, at time.Time) []func() {
	r := e.st.Runs[ev.Run]
	if r.ParentRunID == "" {
		return nil
	}
	if p := e.st.Runs[r.ParentRunID]; p != nil {
		if c := p.call(r.ParentSeq); c != nil && c.Kind == callStartAndWait && c.EndedAt == nil {
			settleChildCall(c, at, r.WorkflowName, ev.Status, ev.Result, ev.Error)
		}
	}
	parent := r.ParentRunID
	return []func(){func() { e.schedule(parent) }}
}

// childDequeued fails the parent's startAndWait of a queued child that was
// cancelled before its turn, and schedules the parent. It runs before the
// concurrency queue drops the entry. mu must be held.
func (e *engine) childDequeued(ev *journalEvent, at time.Time) []func() {
	t := e.queuedLocked(ev.Queue)
	if t == nil {
		return nil
	}
	if p := e.st.Runs[t.ParentRunID]; p != nil {
		if c := p.call(t.ParentSeq); c != nil && c.Kind == callStartAndWait && c.EndedAt == nil {
			c.settle(at, nil, &runError{Name: "Cancelled", Message: fmt.Sprintf("child workflow %s was cancelled before its turn", t.WorkflowName)})
			return []func(){func() { e.schedule(p.RunID) }}
		}
	}
	return nil
}

// A child run whose workflow has a concurrency limit, or whose start has
// an idempotency key, lives in its key's partition (engine_fleet.go) so
// the limit and the key hold fleet-wide; another partition than its
// parent's, often. Its start is then recorded there, with an idempotency
// key of the parent's call (so a parent that crashed before it noted the
// child starts it once), and noted in the parent's partition by evLink.
// A startAndWait call then waits on the child from the parent's engine
// (watchChild: a long poll, here or on the replica that holds the child)
// and its end is recorded in the parent's partition as evChildEnd.

// childIdemPrefix starts the idempotency key of a child started in another
// partition without a key of its own.
const childIdemPrefix = "svc-child:"

// elsewhere reports whether id (a run's or a queued start's) lives in
// another partition than e's.
func (e *engine) elsewhere(id string) bool {
	return e.opts.Fleet != nil && partitionOfID(id, e.opts.Partitions) != e.opts.Partition
}

// startChild records the start of a child run (req names its parent's
// call): here, or in the partition its key names.
func (e *engine) startChild(req startRequest) error {
	f := e.opts.Fleet
	p, keyed := 0, false
	if f != nil {
		p, keyed = f.startPartition(req)
	}
	if !keyed || p == e.opts.Partition {
		_, err := e.start(req)
		return err
	}
	if req.IdemKey == "" {
		req.IdemKey = fmt.Sprintf("%s%s:%d", childIdemPrefix, req.ParentRun, req.ParentSeq)
	}
	rc, err := f.startIn(p, req)
	if err != nil {
		return err
	}
	e.mu.Lock()
	return e.commitLocked(&journalEvent{Type: evLink, Workflow: rc.WorkflowName, Run: rc.RunID, WRun: rc.WorldRunID, Queue: rc.QueueID,
		Parent: req.ParentRun, ParentSeq: req.ParentSeq, Kind: req.ParentKind}, true)
}

// childEndedElsewhere settles the parent's startAndWait of a child in
// another partition that ended, and schedules the parent. mu must be held.
func (e *engine) childEndedElsewhere(ev *journalEvent, at time.Time) []func() {
	p := e.st.Runs[ev.Run]
	c := openCall(p, ev.Seq)
	if c == nil {
		return nil
	}
	settleChildCall(c, at, ev.Workflow, ev.Status, ev.Result, ev.Error)
	return []func(){func() { e.schedule(p.RunID) }}
}

// openCall returns call seq of run r while both exist and the call has
// not ended; else nil.
func openCall(r *runRecord, seq int) *durableCall {
	if r == nil {
		return nil
	}
	if c := r.call(seq); c != nil && c.EndedAt == nil {
		return c
	}
	return nil
}

// settleChildCall settles a startAndWait call c with the end of its child
// run of workflow: its output, or why it did not complete.
func settleChildCall(c *durableCall, at time.Time, workflow, status string, result json.RawMessage, rerr *runError) {
	if status == runCompleted {
		c.settle(at, result, nil)
		return
	}
	msg, name := status, ""
	if rerr != nil {
		msg, name = rerr.Message, rerr.Name
	}
	c.settle(at, nil, &runError{Name: name, Message: fmt.Sprintf("child workflow %s %s: %s", workflow, status, msg)})
}

// watchChild waits, on a goroutine of its own, for the child of run
// parent's call seq, which lives in another partition, to end, and records
// its end here. One watch per call; it stops with the engine (a later
// holder of this partition watches again: resumeAll).
func (e *engine) watchChild(parent string, seq int) {
	e.mu.Lock()
	r := e.st.Runs[parent]
	key := fmt.Sprintf("%s:%d", parent, seq)
	c := openCall(r, seq)
	if c == nil || terminal(r.Status) || e.closed || e.watching[key] || !e.owns(r) {
		e.mu.Unlock()
		return
	}
	id := c.ChildRunID
	if id == "" {
		id = c.QueueID
	}
	if e.watching == nil {
		e.watching = map[string]bool{}
	}
	e.watching[key] = true
	e.bg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.bg.Done()
		defer func() {
			e.mu.Lock()
			delete(e.watching, key)
			e.mu.Unlock()
		}()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-e.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for backoff := 100 * time.Millisecond; ctx.Err() == nil; backoff = min(2*backoff, 5*time.Second) {
			child, err := e.opts.Fleet.awaitEnd(ctx, id)
			if err == nil && terminal(child.Status) {
				e.mu.Lock()
				if r := e.st.Runs[parent]; openCall(r, seq) == nil || terminal(r.Status) || e.closed {
					e.mu.Unlock()
					return
				}
				err = e.commitLocked(&journalEvent{Type: evChildEnd, Run: parent, Seq: seq, Workflow: child.WorkflowName,
					Status: child.Status, Result: child.Output, Error: child.Error}, true)
				if err == nil {
					return
				}
			}
			if ctx.Err() == nil && err != nil {
				e.log.Warn("wait for a child run in another partition; retrying", "parent", parent, "child", id, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}()
}

// watchChildrenLocked lists the startAndWait calls of e's runs whose child
// lives in another partition and has not ended, as (run, seq) pairs to
// watch. mu must be held.
func (e *engine) watchChildrenLocked() (runs []string, seqs []int) {
	if e.opts.Fleet == nil {
		return nil, nil
	}
	for id, r := range e.st.Runs {
		if terminal(r.Status) {
			continue
		}
		for _, c := range r.Steps {
			child := c.ChildRunID
			if child == "" {
				child = c.QueueID
			}
			if c.Kind == callStartAndWait && c.EndedAt == nil && child != "" && e.elsewhere(child) {
				runs, seqs = append(runs, id), append(seqs, c.Seq)
			}
		}
	}
	return runs, seqs
}
