package main

// The engine among replicas (DESIGN §12): several processes share one log
// (the PostgreSQL store) and every one applies every event, in the log's
// order, its own included, so each holds the same state. What a replica
// does with that state depends on ownership: it executes (VMs, timers) only
// the runs whose Owner is its name, the runs it started or claimed. Any
// replica reads any run, waits on it, resumes its hooks and cancels it: the
// event goes into the log and reaches the owner like any other.
//
// Two replicas can decide at once on the same state (admit a run into the
// last free slot of a limited workflow's key, resume the same hook, take
// the same idempotency key), so apply voids the event the state no longer
// admits, the same way on every replica, and the writer learns from the
// state once its event is delivered whether it won (voidLocked; start and
// resumeHook ask). On the file journal nothing is
// ever void: one process decides under mu what apply then sees.

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

// owns reports whether this process executes r. mu must be held.
func (e *engine) owns(r *runRecord) bool { return r.Owner == e.self }

// registerReplicas hangs replicas off the engine (engine_hooks.go), on a
// shared log only: a claim moves runs between replicas, and a run another
// replica executes shows the status its events imply.
func (e *engine) registerReplicas() {
	if e.self == "" {
		return
	}
	e.on(engineHook{apply: func(ev *journalEvent, _ time.Time) []func() { return e.applyClaim(ev) }}, evClaim)
	e.on(engineHook{apply: e.observeLocked}, evSleep, evHook, evAttempt, evStep, evResume)
}

// voidLocked reports whether the state no longer admits ev (see apply): a
// record of a run that ended, a resume of a hook that is no longer
// waiting, or an event a feature refuses (engine_hooks.go: a start whose
// idempotency key or concurrency slot another replica took). mu must be
// held.
func (e *engine) voidLocked(ev *journalEvent, at time.Time) bool {
	if e.self == "" {
		// The file journal holds only what one process decided under mu:
		// its replay applies every record, whatever the settings now.
		return false
	}
	if runScoped(ev.Type) {
		if r := e.st.Runs[ev.Run]; r == nil || terminal(r.Status) {
			return true
		}
	}
	if ev.Type == evResume {
		c := e.st.Runs[ev.Run].call(ev.Seq)
		if c == nil || c.Status != runWaiting || c.Token != ev.Token {
			return true
		}
	}
	return e.hooksVoid(ev, at)
}

// observeLocked keeps the status of a run another replica executes as its
// events show it (its owner sets running and waiting as its execution
// goes, without events): waiting after a sleep or a hook, running after a
// step's progress or a resume. mu must be held.
func (e *engine) observeLocked(ev *journalEvent, _ time.Time) []func() {
	r := e.st.Runs[ev.Run]
	if r == nil || terminal(r.Status) || e.owns(r) {
		return nil
	}
	switch ev.Type {
	case evSleep, evHook:
		r.Status = runWaiting
	case evAttempt, evStep, evResume:
		r.Status = runRunning
	}
	return nil
}

// engineCatchUpTimeout bounds how long a lookup waits for the shared log
// to deliver what was committed before it.
const engineCatchUpTimeout = 2 * time.Second

// seen reports whether look finds what it looks for, catching up with a
// shared log first when it does not: a run, queued start or hook another
// replica made and acknowledged an instant ago is found on this one too,
// not answered 404 until a notification arrives. look takes mu itself.
func (e *engine) seen(ctx context.Context, look func() bool) bool {
	if look() {
		return true
	}
	if e.self == "" {
		return false
	}
	e.mu.Lock()
	j := e.j
	e.mu.Unlock()
	if j == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, engineCatchUpTimeout)
	defer cancel()
	return j.catchUp(ctx) && look()
}

// knows reports, as seen, whether id (a run's, or a queued start's) is in
// memory.
func (e *engine) knows(ctx context.Context, id string) bool {
	return e.seen(ctx, func() bool {
		if isQueueID(id) {
			_, ok := e.findQueued(id)
			return ok
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.st.Runs[id] != nil
	})
}

// claimRecord encodes the claim by which by takes over the runs from owned
// (by "": from releases them), or, with spread, by which they are dealt out
// over those live replicas. The PostgreSQL log appends it when it reaps an
// expired replica or closes.
func claimRecord(from, by string, spread []string) []byte {
	b, err := encodeRecord(&journalEvent{Type: evClaim, At: time.Now().UnixMicro(), From: from, By: by, Owners: spread})
	if err != nil {
		panic(err) // plain strings always encode
	}
	return b
}

// applyClaim moves the unfinished runs of ev.From to ev.By, or, when the
// claim names the live replicas (ev.Owners), deals them out over those in
// turn, in the order of their ids: the same on every replica, so a dead
// replica's work is spread over the survivors, not all on the first that
// reaped it. Each new owner settles what was in flight and resumes its
// share; a release (By "") is claimed by whichever replica's claim comes
// first.
func (e *engine) applyClaim(ev *journalEvent) (after []func()) {
	var ids []string
	for id, r := range e.st.Runs {
		if r.Owner == ev.From && !terminal(r.Status) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var mine []string
	for i, id := range ids {
		r := e.st.Runs[id]
		r.Owner = ev.By
		if len(ev.Owners) > 0 {
			r.Owner = ev.Owners[i%len(ev.Owners)]
		}
		// Settled once live: the claim's follow-up (resumeRuns) does it.
		// A replayed claim has no follow-up: settleReplay settles every
		// run this replica owns after the replay, so a replay (a reopen
		// after the log failed, with this replica's own claims in it)
		// leaves nothing waiting to be settled.
		r.settling = r.Owner == e.self && e.self != "" && e.j != nil
		if r.settling {
			mine = append(mine, id)
		}
	}
	switch {
	case e.self == "" || len(ids) == 0:
	case len(mine) > 0:
		e.log.Info("this replica took over runs", "from", ev.From, "runs", len(mine), "of", len(ids))
		after = append(after, func() { e.resumeRuns(mine) })
	case ev.By == "":
		after = append(after, e.claimReleased)
	}
	return after
}

// claimReleased claims the runs no replica owns (a replica closed, or the
// log predates replicas); another replica's claim may come first, and then
// this one moves nothing.
func (e *engine) claimReleased() {
	e.mu.Lock()
	released := false
	for _, r := range e.st.Runs {
		if r.Owner == "" && !terminal(r.Status) {
			released = true
			break
		}
	}
	if !released || e.closed || e.failed != nil {
		e.mu.Unlock()
		return
	}
	if err := e.commitLocked(&journalEvent{Type: evClaim, From: "", By: e.self}, true); err != nil {
		e.log.Warn("claim released runs; another replica will", "err", err)
	}
}

// resumeRuns ends the step attempts that were in flight in runs this
// replica just took over (their executor is gone: the attempt counts, as
// after a crash), then schedules the runs and the queues they hold up.
func (e *engine) resumeRuns(ids []string) {
	e.interruptInflight(func(r *runRecord) bool { return slices.Contains(ids, r.RunID) })
	e.mu.Lock()
	for _, id := range ids {
		if r := e.st.Runs[id]; r != nil {
			r.settling = false
		}
	}
	e.mu.Unlock()
	for _, id := range ids {
		e.schedule(id)
	}
	e.resumeAll()
}

// deliver applies records a shared log delivers, in its order: the
// follow-up actions run on a goroutine of their own, since they may commit
// and the log's committer, which calls deliver, must not wait on itself.
func (e *engine) deliver(recs [][]byte, upto int64) {
	var after []func()
	e.mu.Lock()
	for _, b := range recs {
		var ev journalEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			// Every replica skips it alike; the writer checked it before
			// appending, so only a newer version's record can be here.
			e.log.Error("engine event from the log could not be decoded; skipped", "err", err)
			continue
		}
		after = append(after, e.apply(&ev)...)
		r := e.st.Runs[ev.Run]
		if r != nil && r.stream != nil {
			// What the log delivers is durable: readers see it at once.
			r.stream.reveal(len(r.stream.entries))
		}
		if ev.Type == evStep && r != nil && e.owns(r) {
			// Its writer, which did not wait for it (pipelineLocked).
			e.committedLocked(&ev)
		}
	}
	e.applied = upto
	if e.j != nil {
		e.maybeCompactLocked()
	}
	e.mu.Unlock()
	if len(after) > 0 {
		go func() {
			for _, fn := range after {
				fn()
			}
		}()
	}
}
