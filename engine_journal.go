package main

// The engine's side of the journal: rebuilding the state by replay, records
// that cannot be decoded, and a journal that stops writing (a full disk, an
// I/O error). While it cannot write, the engine refuses every change with
// errJournalUnavailable (the API answers 503 with Retry-After), stops its
// executions, and rebuilds its state from what is on disk, so the API shows
// only durable records; it reopens the journal until a write succeeds again
// and then resumes every unfinished run, without a restart.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// evProbe is a record with no effect: the write that proves a recovered
// journal writes again.
const evProbe = "probe"

// Backoff between attempts to reopen a failed journal.
const (
	journalRetryMin = 100 * time.Millisecond
	journalRetryMax = 5 * time.Second
)

// errJournalUnavailable wraps every change refused while the journal cannot
// write: nothing of it was recorded, and it may be retried once the journal
// has recovered.
var errJournalUnavailable = errors.New("the journal cannot write")

// errJournalOutcomeUnknown wraps a change whose commit the database lost
// the answer to (it failed over, or its connection broke, while the commit
// was under way) and whose outcome could not be read back in time: it may
// have been recorded. Never reported as errJournalUnavailable, which says
// nothing was.
var errJournalOutcomeUnknown = errors.New("the database failed while this change was being committed, and whether it was recorded could not be checked yet")

// journalHealth is the journal's state as the health route reports it.
type journalHealth struct {
	State string `json:"state"`           // "ok" or "failed"
	Error string `json:"error,omitempty"` // why it cannot write
}

// journalHealth reports whether the journal writes.
func (e *engine) journalHealth() journalHealth {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed != nil {
		return journalHealth{State: "failed", Error: e.failed.Error()}
	}
	return journalHealth{State: "ok"}
}

// storeHealth reports the engine's store: its kind and, on PostgreSQL,
// its lease.
func (e *engine) storeHealth() engineStoreHealth { return e.opts.Store.health() }

// replayJournal opens the journal and rebuilds e's state, which must be
// empty, from it; live is told when the journal later stops writing and,
// on a shared log, is delivered its records (live is e, or the engine
// whose state e rebuilds). It returns the records that could not be
// decoded.
func (e *engine) replayJournal(live *engine) (engineLog, []poisonedRecord, error) {
	var poisoned []poisonedRecord
	j, err := e.opts.Store.open(engineLogHooks{onFail: live.journalFailed, onSnapshot: e.restoreSnapshot, deliver: live.deliver, claim: claimRecord, onRecord: func(b []byte) error {
		var ev journalEvent
		err := journalJSON.check(b)
		if err == nil {
			err = json.Unmarshal(b, &ev)
		}
		if err != nil {
			poisoned = append(poisoned, poisonedRecord{head: journalRecordHead(b), err: err})
			return nil
		}
		e.apply(&ev)
		return nil
	}})
	if err != nil {
		return nil, nil, err
	}
	for id, r := range e.st.Runs {
		if terminal(r.Status) {
			r.done.fire()
			e.endedLocked(id)
		}
	}
	return j, poisoned, nil
}

// journalFailed is called once when the journal stops writing: every
// change is refused from now on, executions and timers stop, and recovery
// starts.
func (e *engine) journalFailed(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.failed != nil {
		return
	}
	e.failed = cause
	e.log.Error("the journal cannot write: starts, steps and resumes are refused until it recovers", "err", cause)
	for id, t := range e.timers {
		t.Stop()
		delete(e.timers, id)
	}
	for _, r := range e.st.Runs {
		if r.cancel != nil {
			r.cancel()
		}
	}
	e.bg.Add(1)
	go e.recoverJournal()
}

// recoverJournal waits for the executions to stop, then reopens the journal
// until a write succeeds, backing off between attempts.
func (e *engine) recoverJournal() {
	defer e.bg.Done()
	e.wg.Wait()
	for delay := journalRetryMin; ; delay = min(2*delay, journalRetryMax) {
		err := e.reopenJournal()
		if err == nil {
			e.log.Info("the journal writes again; unfinished runs resume", "store", e.opts.Store.kind())
			return
		}
		e.mu.Lock()
		e.failed = err
		e.mu.Unlock()
		select {
		case <-e.stop:
			return
		case <-time.After(delay):
		}
	}
}

// reopenJournal closes the failed journal, rebuilds the state from what is
// on disk (dropping every change that was applied but never became
// durable), and proves a write; then the engine takes changes again and
// resumes its runs.
func (e *engine) reopenJournal() error {
	e.mu.Lock()
	old := e.j
	e.j = nil
	e.mu.Unlock()
	if old != nil {
		old.close() // its error is the failure being recovered from
	}
	fresh := newEngineShell(e.opts)
	// A shared log delivers into e from its first read on: e must hold the
	// rebuilt state by then, so the swap is under the lock the delivery
	// takes.
	e.mu.Lock()
	j, poisoned, err := fresh.replayJournal(e)
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("reopen the journal: %w", err)
	}
	stale := e.st.Runs
	e.st, e.active, e.j, e.ended, e.versions, e.ending = fresh.st, fresh.active, j, fresh.ended, fresh.versions, fresh.ending
	e.epoch++
	e.mu.Unlock()
	for _, r := range stale {
		r.done.fire() // waiters on a replaced record read the rebuilt one
	}
	probe, _ := json.Marshal(&journalEvent{Type: evProbe, At: time.Now().UnixMicro()})
	if err := j.append(probe, commitDurable).Wait(); err != nil {
		return fmt.Errorf("write to the reopened journal: %w", err)
	}
	e.mu.Lock()
	e.failed = nil
	e.mu.Unlock()
	e.settleReplay(poisoned)
	e.resumeAll()
	return nil
}

// settleReplay records what replay found unfinished before any run resumes:
// the runs of undecodable records fail, and step attempts that were in
// flight when the process stopped (a shutdown or a crash) end as
// interrupted; the step is then retried, the interrupted attempt counting
// as one.
func (e *engine) settleReplay(poisoned []poisonedRecord) {
	e.failPoisoned(poisoned)
	e.interruptInflight(e.owns)
	if e.self != "" {
		e.claimReleased()
	}
}

// interruptInflight ends as interrupted the step attempts in flight in the
// unfinished runs mine selects (this process executes them now; whoever
// began the attempts is gone).
func (e *engine) interruptInflight(mine func(*runRecord) bool) {
	e.mu.Lock()
	e.revealStreamsLocked()
	var evs []*journalEvent
	for _, r := range e.st.Runs {
		for _, c := range r.Steps {
			if c.Inflight != nil && !terminal(r.Status) && mine(r) {
				evs = append(evs, &journalEvent{Type: evStep, Run: r.RunID, Seq: c.Seq, Name: c.Name, Attempt: c.Inflight.Attempt,
					StartedAt: c.Inflight.StartedAt.UnixMicro(), Error: &runError{Name: "Interrupted", Message: "svc stopped (a shutdown or a crash) during this attempt"}})
			}
		}
	}
	e.mu.Unlock()
	for _, ev := range evs {
		e.mu.Lock()
		if err := e.commitLocked(ev, false); err != nil {
			e.log.Error("record an interrupted step attempt", "run", ev.Run, "err", err)
		}
	}
}

// poisonedRecord is a journal record that replay could not decode, with
// what could be read of its head (type, run, workflow).
type poisonedRecord struct {
	head journalEvent
	err  error
}

// failPoisoned makes each undecodable record cost its run, not the
// project: the run is failed durably with the reason (a run whose start
// record was the bad one is recorded as failed, with a null input). A record
// with no run (a queued trigger, an agent turn) is logged and skipped.
func (e *engine) failPoisoned(recs []poisonedRecord) {
	for _, p := range recs {
		h := p.head
		e.log.Error("journal record could not be decoded; its run is failed", "type", h.Type, "run", h.Run, "workflow", h.Workflow, "err", p.err)
		if h.Run == "" {
			continue
		}
		reason := &runError{Name: "JournalError", Message: fmt.Sprintf("a %q record of this run could not be replayed (%v); the run was failed at boot", h.Type, p.err)}
		e.mu.Lock()
		if e.st.Runs[h.Run] == nil && h.Type == evStart && h.Workflow != "" {
			start := &journalEvent{Type: evStart, Run: h.Run, WRun: h.WRun, Workflow: h.Workflow, Trigger: h.Trigger, Input: json.RawMessage("null")}
			if err := e.commitLocked(start, false); err != nil {
				e.log.Error("record the failed run", "run", h.Run, "err", err)
				continue
			}
			e.mu.Lock()
		}
		if err := e.commitLocked(&journalEvent{Type: evEnd, Run: h.Run, Status: runFailed, Error: reason}, true); err != nil && !errors.Is(err, errRunEnded) {
			e.log.Error("record the failed run", "run", h.Run, "err", err)
		}
	}
}

// journalRecordHead reads the top-level string fields of a record that
// does not decode as a whole (too deep, a bad number): the streaming
// tokenizer reads what precedes the damage, and the identifying fields come
// first in every record.
func journalRecordHead(b []byte) journalEvent {
	var head journalEvent
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return head
	}
	fields := map[string]*string{"t": &head.Type, "r": &head.Run, "w": &head.WRun, "wf": &head.Workflow, "tr": &head.Trigger}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return head
		}
		v, err := dec.Token()
		if err != nil {
			return head
		}
		if s, ok := v.(string); ok {
			if f := fields[k.(string)]; f != nil {
				*f = s
			}
			continue
		}
		// Skip a nested value token by token: no depth limit applies.
		for depth := 0; ; {
			if d, ok := v.(json.Delim); ok {
				if d == '{' || d == '[' {
					depth++
				} else {
					depth--
				}
			}
			if depth == 0 {
				break
			}
			if v, err = dec.Token(); err != nil {
				return head
			}
		}
	}
	return head
}
