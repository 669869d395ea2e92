package main

// The spans of durable runs (docs/operations.md "OpenTelemetry"). A run is one trace:
// its trace id is the incoming request's when the start carried a
// traceparent, else the 128 bits of its traceId; every span id is derived
// from the run id and the call's place in the run, so a replay, a restart
// or another replica continues the same trace and names the same parents.
// Spans are made from journal events as they are committed (never on
// replay): a step attempt when it ends, a hook wait when it is resumed, a
// sleep when it is over (execution.go), the run when it ends; a child run
// is the child of its parent run's span.

import (
	"strconv"
	"time"
)

// otelRunContext is the span context of run r's span.
func otelRunContext(r *runRecord) otelContext {
	c := otelContext{Trace: otelTraceOf(r.TraceID), Span: otelSpanID("run", r.RunID)}
	if p, ok := otelParseTraceparent(r.TraceParent); ok {
		c.Trace = p.Trace
	}
	return c
}

// otelParentSpan is the span id r's span is the child of (zero: a root).
func otelParentSpan(r *runRecord) [8]byte {
	p, _ := otelParseTraceparent(r.TraceParent)
	return p.Span
}

// otelStepContext is the span context of attempt of the step at seq of r.
func otelStepContext(r *runRecord, seq, attempt int) otelContext {
	return otelContext{Trace: otelRunContext(r).Trace, Span: otelSpanID("step", r.RunID, strconv.Itoa(seq), strconv.Itoa(attempt))}
}

// otelStartParentLocked is the traceparent journaled with a start: a child
// run's is its parent run's span, any other the request's (validated).
// mu must be held.
func (e *engine) otelStartParentLocked(req startRequest) string {
	if p := e.st.Runs[req.ParentRun]; p != nil {
		return otelRunContext(p).traceparent()
	}
	if c, ok := otelParseTraceparent(req.TraceParent); ok {
		return c.traceparent()
	}
	return ""
}

// registerTelemetry hangs metrics and traces off the engine
// (engine_hooks.go): a committed event is counted (metrics.engineEvent) and
// ends its spans (otelEventLocked).
func (e *engine) registerTelemetry() {
	if e.opts.Metrics != nil {
		e.on(engineHook{committed: e.opts.Metrics.engineEvent}, evStart, evEnd, evStep)
	}
	if e.opts.Tracer != nil {
		e.on(engineHook{committed: func(ev *journalEvent, _ *runRecord) { e.otelEventLocked(ev) }}, evStep, evResume, evEnd)
	}
}

// otelEventLocked emits the spans a committed event ends. mu must be held.
func (e *engine) otelEventLocked(ev *journalEvent) {
	t := e.opts.Tracer
	if t == nil {
		return
	}
	r := e.st.Runs[ev.Run]
	if r == nil {
		return
	}
	switch ev.Type {
	case evStep:
		if c := r.call(ev.Seq); c != nil && len(c.Attempts) > 0 {
			t.emit(otelStepSpan(r, c, c.Attempts[len(c.Attempts)-1]))
		}
	case evResume:
		if c := r.call(ev.Seq); c != nil {
			t.emit(otelCallSpan(r, c))
		}
	case evEnd:
		if r.EndedAt == nil {
			return
		}
		// Calls the end cut short (closeCalls) end with it.
		for _, c := range r.Steps {
			if c.Status != runCancelled || c.EndedAt == nil || !c.EndedAt.Equal(*r.EndedAt) {
				continue
			}
			if c.Kind == callStep && len(c.Attempts) > 0 {
				t.emit(otelStepSpan(r, c, c.Attempts[len(c.Attempts)-1]))
			} else if c.Kind == callSleep || c.Kind == callHook {
				t.emit(otelCallSpan(r, c))
			}
		}
		t.emit(otelRunSpan(r))
	}
}

// otelSleepOverLocked emits the span of a sleep that is over. mu must be
// held.
func (e *engine) otelSleepOverLocked(r *runRecord, c *durableCall) {
	e.opts.Tracer.emit(otelCallSpan(r, c))
}

// otelRunSpan is the span of an ended run.
func otelRunSpan(r *runRecord) *otelSpan {
	attrs := []otelAttr{otelString("svc.workflow.name", r.WorkflowName), otelString("svc.run.id", r.RunID),
		otelString("svc.run.trace_id", r.TraceID), otelString("svc.run.trigger", r.Trigger), otelString("svc.run.status", r.Status)}
	if r.ParentRunID != "" {
		attrs = append(attrs, otelString("svc.run.parent_id", r.ParentRunID))
	}
	s := &otelSpan{Ctx: otelRunContext(r), Parent: otelParentSpan(r), Name: "workflow " + r.WorkflowName, Kind: otelKindInternal,
		Start: r.CreatedAt, End: *r.EndedAt, Attrs: attrs}
	if r.Status != runCompleted {
		s.Err = r.Status
		if r.Error != nil {
			s.Err = r.Error.Message
		}
	}
	return s
}

// otelStepSpan is the span of one attempt of step call c of r.
func otelStepSpan(r *runRecord, c *durableCall, a stepAttempt) *otelSpan {
	s := &otelSpan{Ctx: otelStepContext(r, c.Seq, a.Attempt), Parent: otelRunContext(r).Span, Name: "step " + c.Name,
		Kind: otelKindInternal, Start: a.StartedAt, End: a.EndedAt,
		Attrs: []otelAttr{otelString("svc.step.name", c.Name), otelInt("svc.step.seq", int64(c.Seq)),
			otelInt("svc.step.attempt", int64(a.Attempt)), otelString("svc.run.id", r.RunID)}}
	if a.Error != nil {
		s.Err = a.Error.Message
	}
	return s
}

// otelCallSpan is the span of a sleep or a hook wait of r that is over.
func otelCallSpan(r *runRecord, c *durableCall) *otelSpan {
	end := time.Now()
	if c.EndedAt != nil {
		end = *c.EndedAt
	}
	s := &otelSpan{Ctx: otelContext{Trace: otelRunContext(r).Trace, Span: otelSpanID(c.Kind, r.RunID, strconv.Itoa(c.Seq))},
		Parent: otelRunContext(r).Span, Name: c.Kind, Kind: otelKindInternal, Start: c.StartedAt, End: end,
		Attrs: []otelAttr{otelInt("svc.call.seq", int64(c.Seq)), otelString("svc.run.id", r.RunID)}}
	if c.Until != nil {
		s.Attrs = append(s.Attrs, otelString("svc.sleep.until", c.Until.UTC().Format(time.RFC3339Nano)))
	}
	if c.Error != nil {
		s.Err = c.Error.Message
	}
	return s
}
