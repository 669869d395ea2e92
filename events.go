package main

import (
	"encoding/json"
	"fmt"
	"time"
)

// schemaVersion is the version carried by every JSON payload of SPEC §9
// (CLI payloads, start receipts, run records).
const schemaVersion = 1

// Journal event types. Each is applied by engine.apply, live and on replay.
const (
	evQueue    = "queue"   // a start of a limited workflow waiting for a free slot of its key
	evStart    = "start"   // a run was created (possibly from a queued trigger)
	evAttempt  = "attempt" // a step attempt that waits on I/O began (ended by its evStep)
	evStep     = "step"    // one attempt of a step; Final settles it
	evSleep    = "sleep"   // a durable sleep until Until
	evHook     = "hook"    // a hook was created with Token
	evResume   = "resume"  // a hook was resumed with Result as payload
	evEnd      = "end"     // a run reached Status (completed, failed, cancelled)
	evTurn     = "turn"    // an agent's chat turn, recorded as a finished run
	evLog      = "log"     // a console line of the run (Seq/Name/Attempt: the step attempt; 0: workflow code)
	evLink     = "link"    // a workflow's keyed start answered by its idempotency key, or a child started in another partition: the call learns the child
	evChildEnd = "cend"    // a child run in another partition ended (Status, Result, Error): the parent's startAndWait call Seq settles (engine_children.go)
	evClaim    = "claim"   // the runs replica From owned become By's (engine_replica.go)
	evStream   = "stream"  // a chunk a step attempt wrote to its run's stream (Seq/Name/Attempt; Result: JSON, else Message: text; engine_stream.go)
)

// journalEvent is one journal record (JSON-encoded; short keys keep the log
// and its fsyncs small).
type journalEvent struct {
	Type      string          `json:"t"`
	At        int64           `json:"at"` // unix µs, set at commit
	Run       string          `json:"r,omitempty"`
	WRun      string          `json:"w,omitempty"`
	Workflow  string          `json:"wf,omitempty"`
	Input     json.RawMessage `json:"in,omitempty"`
	Trigger   string          `json:"tr,omitempty"`
	Serial    bool            `json:"se,omitempty"` // evStart, evQueue: concurrency limit 1, no key (engine_concurrency.go)
	Limit     int             `json:"cl,omitempty"` // evStart, evQueue: any other concurrency limit
	Key       string          `json:"ck,omitempty"` // its key value ("" for one bucket); evDequeue: the entry's
	Queue     string          `json:"q,omitempty"`
	Parent    string          `json:"p,omitempty"`
	ParentSeq int             `json:"ps,omitempty"`
	Kind      string          `json:"k,omitempty"` // child call kind (start/startAndWait)
	Ver       string          `json:"v,omitempty"` // evStart: the workflow version the run is pinned to
	Seq       int             `json:"s,omitempty"`
	Name      string          `json:"n,omitempty"`
	Attempt   int             `json:"a,omitempty"`
	StartedAt int64           `json:"sa,omitempty"` // step attempt start, unix µs
	Final     bool            `json:"f,omitempty"`
	Result    json.RawMessage `json:"res,omitempty"`
	Error     *runError       `json:"err,omitempty"`
	Until     int64           `json:"u,omitempty"` // sleep end, unix µs
	Token     string          `json:"tok,omitempty"`
	Status    string          `json:"st,omitempty"`
	Agent     string          `json:"ag,omitempty"` // evTurn: the agent, its wire and session keys
	Wire      string          `json:"wi,omitempty"`
	Session   string          `json:"ss,omitempty"`
	Conv      string          `json:"cv,omitempty"`
	Calls     []*durableCall  `json:"calls,omitempty"` // evTurn: the tool calls of the turn; evStart, evQueue of a retry from a step: the calls it reuses
	RerunOf   string          `json:"ro,omitempty"`    // evStart, evQueue: the run this one reruns (engine_rerun.go; Seq: the step it retries from)
	Owners    []string        `json:"ow,omitempty"`    // evClaim: the live replicas From's runs are dealt out over (engine_replica.go)
	Level     string          `json:"lv,omitempty"`    // evLog
	Message   string          `json:"m,omitempty"`     // evLog
	Idem      string          `json:"ik,omitempty"`    // evStart, evQueue: the start's idempotency key
	IdemHash  string          `json:"ih,omitempty"`    // its idemInputHash
	By        string          `json:"by,omitempty"`    // evStart: the replica that executes the run; evClaim: the new owner ("": released)
	From      string          `json:"fr,omitempty"`    // evClaim: the former owner
	ID        string          `json:"id,omitempty"`    // evResume: names the resume, so its sender learns whether it won
	IdemTTL   int64           `json:"it,omitempty"`    // evStart, evQueue on a shared log: the key retention (ms) the writer decided under
	Fire      int64           `json:"sf,omitempty"`    // evStart, evQueue, evSchedule: a schedule's fire, unix µs (schedule_engine.go)
	// TraceParent (evStart, evQueue) is the W3C span the run's span is the child of.
	TraceParent string `json:"tp,omitempty"`
}

// micros converts unix microseconds to a time.
func micros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// apply changes the state for one event and returns the follow-up actions
// (waking waiters, scheduling runs), which live commits run once the event
// is durable and replay ignores. mu must be held (or the engine not yet
// shared, during open). apply is the state machine of runs and their
// timelines; then each feature registered for the event's type applies its
// part (engine_hooks.go).
//
// An event the state no longer admits is void: it changes nothing, on every
// replica alike (engine_replica.go). A single process never writes one (it
// decides under mu what apply then sees), but replicas sharing one log can:
// a start admitted on two replicas at once, a hook resumed twice, a step
// journaled after a cancel reached the run.
func (e *engine) apply(ev *journalEvent) (after []func()) {
	if e.self != "" {
		// Replicas stamp events by their own clocks before the log orders
		// them: time follows the log, so a run admitted after another's end
		// is not shown as created before it.
		ev.At = max(ev.At, e.st.Clock)
		e.st.Clock = ev.At
	}
	at := micros(ev.At)
	if e.voidLocked(ev, at) {
		return nil
	}
	after, ok := e.applyRun(ev, at)
	if !ok {
		return nil
	}
	return e.hooksApply(ev, at, after)
}

// applyRun is apply's own part: the runs, their calls, hooks and timers.
// It reports false when ev changes nothing (an end of a run that ended),
// and then no feature applies it either.
func (e *engine) applyRun(ev *journalEvent, at time.Time) (after []func(), ok bool) {
	switch ev.Type {
	case evStart:
		r := &runRecord{RunID: ev.Run, TraceID: ev.WRun, WorkflowName: ev.Workflow, Status: runPending, Trigger: ev.Trigger,
			Input: ev.Input, Serial: ev.Serial, Limit: ev.Limit, LimitKey: ev.Key, Version: ev.Ver, QueueID: ev.Queue, ParentRunID: ev.Parent, ParentSeq: ev.ParentSeq,
			CreatedAt: at, Steps: reusedCalls(ev.Calls, at), Owner: ev.By, TraceParent: ev.TraceParent, done: newRunSignal(),
			RerunOf: ev.RerunOf, RetryFromStep: ev.Seq}
		e.st.Runs[r.RunID] = r
	case evAttempt:
		if r := e.st.Runs[ev.Run]; r != nil {
			c := r.ensureCall(ev.Seq, callStep, ev.Name, micros(ev.StartedAt))
			c.Inflight = &stepAttempt{Attempt: ev.Attempt, StartedAt: micros(ev.StartedAt)}
		}
	case evStep:
		r := e.st.Runs[ev.Run]
		if r == nil {
			return nil, false
		}
		c := r.ensureCall(ev.Seq, callStep, ev.Name, micros(ev.StartedAt))
		c.Inflight = nil
		c.Attempts = append(c.Attempts, stepAttempt{Attempt: ev.Attempt, StartedAt: micros(ev.StartedAt), EndedAt: at, Error: ev.Error})
		if ev.Final {
			c.EndedAt = &at
			if ev.Error != nil {
				c.Status, c.Error = runFailed, ev.Error
			} else {
				c.Status, c.Result = runCompleted, ev.Result
			}
		}
		r.supersedeAttempt(ev, at)
	case evSleep:
		if r := e.st.Runs[ev.Run]; r != nil {
			c := r.ensureCall(ev.Seq, callSleep, "", at)
			until := micros(ev.Until)
			c.Status, c.Until = runWaiting, &until
		}
	case evHook:
		if r := e.st.Runs[ev.Run]; r != nil {
			c := r.ensureCall(ev.Seq, callHook, "", at)
			c.Status, c.Token = runWaiting, ev.Token
			e.st.Hooks[ev.Token] = hookRef{RunID: ev.Run, Seq: ev.Seq}
		}
	case evResume:
		if r := e.st.Runs[ev.Run]; r != nil {
			if c := r.call(ev.Seq); c != nil {
				c.Status, c.Result, c.EndedAt, c.resumedBy = runCompleted, ev.Result, &at, ev.ID
			}
			delete(e.st.Hooks, ev.Token)
			after = append(after, func() { e.schedule(ev.Run) })
		}
	case evLog:
		if r := e.st.Runs[ev.Run]; r != nil {
			if len(r.Logs) >= runMaxLogs {
				r.LogsDropped++
			} else {
				r.Logs = append(r.Logs, runLog{At: at, Level: ev.Level, Message: ev.Message, Step: ev.Name, Seq: ev.Seq, Attempt: ev.Attempt})
			}
		}
	case evTurn:
		calls := ev.Calls
		if calls == nil {
			calls = []*durableCall{}
		}
		r := &runRecord{RunID: ev.Run, TraceID: ev.WRun, WorkflowName: agentTurnName(ev.Agent, ev.Wire), Status: ev.Status, Trigger: triggerAgent,
			Input: ev.Input, Output: ev.Result, Error: ev.Error, Agent: ev.Agent, Wire: ev.Wire, SessionID: ev.Session,
			ConversationID: ev.Conv, CreatedAt: micros(ev.StartedAt), EndedAt: &at, Steps: calls, done: newRunSignal(), Owner: ev.By}
		e.st.Runs[ev.Run] = r
		// A turn is recorded ended: every replica of a shared log hands it
		// to its archiver (the one that recorded it first), as after a run's end.
		after = append(after, func() { e.runDone(r) })
	case evEnd:
		r := e.st.Runs[ev.Run]
		if r == nil || terminal(r.Status) {
			return nil, false
		}
		r.Status, r.Output, r.Error, r.EndedAt = ev.Status, ev.Result, ev.Error, &at
		r.closeCalls(at)
		for tok, ref := range e.st.Hooks {
			if ref.RunID == r.RunID {
				delete(e.st.Hooks, tok)
			}
		}
		if t := e.timers[r.RunID]; t != nil {
			t.Stop()
			delete(e.timers, r.RunID)
		}
		if r.cancel != nil {
			r.cancel()
		}
		owned := e.owns(r) // on a shared log, the owner says so, not every replica
		after = append(after, func() {
			e.runDone(r) // first: its waiters need not wait for the line
			if owned {
				e.log.Info("run ended", "workflow", r.WorkflowName, "run", r.RunID, "status", r.Status,
					"duration", r.EndedAt.Sub(r.CreatedAt).Round(time.Millisecond))
			}
		})
	}
	return after, true
}

// runDone hands r, whose end (or turn) is durable, to the archiver and
// wakes its waiters.
func (e *engine) runDone(r *runRecord) {
	e.mu.Lock()
	e.endedLocked(r.RunID)
	e.mu.Unlock()
	r.done.fire()
	if e.opts.OnRunDone != nil {
		e.opts.OnRunDone(r)
	}
}

// closeCalls ends every call still running or waiting when the run ended
// at at: it did not complete, and the timeline must not say it goes on. A
// step attempt in flight ends with it.
func (r *runRecord) closeCalls(at time.Time) {
	for _, c := range r.Steps {
		if c.EndedAt != nil || c.Kind == "" {
			continue
		}
		ended := &runError{Name: "Cancelled", Message: fmt.Sprintf("the run %s while this %s was %s", endedVerb(r.Status), c.Kind, c.Status)}
		if c.Inflight != nil {
			c.Attempts = append(c.Attempts, stepAttempt{Attempt: c.Inflight.Attempt, StartedAt: c.Inflight.StartedAt, EndedAt: at, Error: ended})
			c.Inflight = nil
		}
		c.Status, c.Error, c.EndedAt = runCancelled, ended, &at
	}
}

// endedVerb says how a run ended, for messages: "was cancelled", "failed",
// "completed".
func endedVerb(status string) string {
	if status == runCancelled {
		return "was cancelled"
	}
	return status
}

// settle ends the call at at with result (any JSON value, or raw JSON) or
// failure.
func (c *durableCall) settle(at time.Time, result any, failure *runError) {
	c.EndedAt = &at
	if failure != nil {
		c.Status, c.Error = runFailed, failure
		return
	}
	c.Status = runCompleted
	if raw, ok := result.(json.RawMessage); ok {
		c.Result = raw
	} else {
		c.Result, _ = json.Marshal(result)
	}
}

// agentTurnName is the name an agent's turn has in the run list, where a
// workflow's run has its workflow: the agent and the wire, "helper
// (openai)". A workflow's name is an identifier, so the two never meet
// under the workflow= filter; agent= filters turns by their agent.
func agentTurnName(agent, wire string) string {
	return agent + " (" + wire + ")"
}
