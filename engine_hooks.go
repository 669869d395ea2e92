package main

// The engine's features hang off its state machine by one hook each
// (STYLE 21). apply (events.go) is the state machine of runs and their
// timelines; a feature (idempotency keys, concurrency queues, schedules,
// child runs, pinned versions, run streams, replicas, metrics and traces)
// registers, in its own file, the hooks it has for the event types it
// cares about, and keeps its own state. apply calls the hooks of the
// event's type in the order of engineFeatures, after its own change, so
// every effect of one event is found by its type: apply's case, then the
// hooks registered for it; and a start walks down through the engine once,
// never climbing back from a feature into apply.

import "time"

// engineHook is one feature's part in an event. Any field may be nil.
type engineHook struct {
	// void answers, on a shared log only (engine_replica.go), whether the
	// feature's state no longer admits ev: then no part of the engine
	// applies it, on every replica alike. mu is held.
	void func(ev *journalEvent, at time.Time) bool
	// apply makes the feature's change for ev, which the engine admitted
	// and applied to its runs, and returns the follow-up actions (run once
	// the event is durable; replay ignores them). mu is held.
	apply func(ev *journalEvent, at time.Time) []func()
	// committed tells the feature, once and only in the process that wrote
	// ev, that the log has it: on the file journal as soon as it is
	// appended and applied (durable with its batch), on a shared log once
	// delivered (a step's outcome: in the run's owner, as it applies it);
	// appendLocked, deliver. mu is held.
	committed func(ev *journalEvent, r *runRecord)
}

// engineFeatures registers every feature's hooks on a new engine; their
// hooks run in this order.
var engineFeatures = []func(e *engine){
	(*engine).registerChildren,    // engine_children.go: a parent's calls to its child runs
	(*engine).registerConcurrency, // engine_concurrency.go: queues and active runs per key
	(*engine).registerIdem,        // engine_idem.go: idempotency keys
	(*engine).registerSchedules,   // schedule_engine.go: schedules and their fires
	(*engine).registerVersions,    // engine_versions.go: the code versions of active runs
	(*engine).registerStreams,     // engine_stream.go: what steps write to their run's stream
	(*engine).registerReruns,      // engine_rerun.go: whether any run was rerun
	(*engine).registerReplicas,    // engine_replica.go: owners and takeovers on a shared log
	(*engine).registerTelemetry,   // otel_engine.go: metrics and spans of runs and steps
}

// on registers h for the events of types.
func (e *engine) on(h engineHook, types ...string) {
	for _, t := range types {
		e.hooks[t] = append(e.hooks[t], h)
	}
}

// hooksVoid reports whether a feature no longer admits ev. mu must be held.
func (e *engine) hooksVoid(ev *journalEvent, at time.Time) bool {
	for _, h := range e.hooks[ev.Type] {
		if h.void != nil && h.void(ev, at) {
			return true
		}
	}
	return false
}

// hooksApply applies ev to every feature that registered for it and returns
// their follow-up actions after. mu must be held.
func (e *engine) hooksApply(ev *journalEvent, at time.Time, after []func()) []func() {
	for _, h := range e.hooks[ev.Type] {
		if h.apply != nil {
			after = append(after, h.apply(ev, at)...)
		}
	}
	return after
}

// committedLocked tells the features that ev is durable. mu must be held.
func (e *engine) committedLocked(ev *journalEvent) {
	r := e.st.Runs[ev.Run]
	for _, h := range e.hooks[ev.Type] {
		if h.committed != nil {
			h.committed(ev, r)
		}
	}
}
