package main

// Child runs: a workflow's `workflows.start` and `startAndWait` are calls of
// its timeline (kinds callStart and callStartAndWait) that the child's
// events settle. start settles when the child is queued or started;
// startAndWait holds the child's outcome, so the parent replays without
// the child's record (it may have left memory for the history).

import (
	"encoding/json"
	"fmt"
	"time"
)

// registerChildren hangs child runs off the engine (engine_hooks.go).
func (e *engine) registerChildren() {
	e.on(engineHook{apply: e.childQueuedOrStarted}, evQueue, evStart, evLink)
	e.on(engineHook{apply: e.childEnded}, evEnd)
	e.on(engineHook{apply: e.childDequeued}, evDequeue)
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
		if c.EndedAt == nil {
			c.settle(at, idemReceipt(ev.Workflow, ev.Run, ev.WRun, ev.Queue), nil)
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
			if ev.Status == runCompleted {
				c.settle(at, json.RawMessage(ev.Result), nil)
			} else {
				msg, name := ev.Status, ""
				if ev.Error != nil {
					msg, name = ev.Error.Message, ev.Error.Name
				}
				c.settle(at, nil, &runError{Name: name, Message: fmt.Sprintf("child workflow %s %s: %s", r.WorkflowName, ev.Status, msg)})
			}
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
