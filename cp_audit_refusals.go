package main

// Repeated refusals, counted (issue 36, item 10). Every refused route once
// wrote a row: one member wrote hundreds a second and buried the log. Now
// the first refusal of an actor (organization, actor, action, source
// address and detail) in a window is written as before; the refusals that follow it
// within cpAuditRefusalWindow are counted, and the count is written as one
// row (action as before, detail "repeated N more times within 1m0s, last
// target …") when the window has passed, at the next audited event or at
// shutdown. So an actor writes at most two rows a window for one kind of
// refusal. A crash loses the count of the last window, not its first row.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Limits of the refusal counts.
const (
	cpAuditRefusalWindow = time.Minute
	// cpAuditRefusalKeys bounds the windows held; past it a refusal is
	// written as a row of its own, as before.
	cpAuditRefusalKeys = 10000
)

// cpAuditRefusals holds the open windows of repeated refusals.
type cpAuditRefusals struct {
	mu        sync.Mutex
	open      map[cpAuditRefusalKey]*cpAuditRefusalCount
	lastFlush time.Time
}

// cpAuditRefusalKey is who was refused what, from where, and why (the
// detail: a refused link's cause, a role's shortfall), not on which target,
// which a caller chooses freely.
type cpAuditRefusalKey struct{ org, actorID, actor, action, source, detail string }

// cpAuditRefusalCount is an open window: its first refusal's event and
// time, and the refusals counted since.
type cpAuditRefusalCount struct {
	first      cpAuditEvent
	since      time.Time
	n          int
	lastTarget string
}

// admit reports whether e, a refusal at now, is to be written (the first
// of its window); a window of its kind that has passed ends here, its
// summary returned to be written first.
func (a *cpAuditRefusals) admit(e cpAuditEvent, now time.Time) (write bool, ended *cpAuditEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open == nil {
		a.open = map[cpAuditRefusalKey]*cpAuditRefusalCount{}
	}
	k := cpAuditRefusalKey{e.Org, e.ActorID, e.Actor, e.Action, e.Source, e.Detail}
	if c, ok := a.open[k]; ok {
		if now.Sub(c.since) < cpAuditRefusalWindow {
			c.n++
			c.lastTarget = e.Target
			return false, nil
		}
		delete(a.open, k)
		ended = c.summary()
	}
	if len(a.open) < cpAuditRefusalKeys {
		a.open[k] = &cpAuditRefusalCount{first: e, since: now}
	}
	return true, ended
}

// expired returns the summaries of the windows that have passed at now
// (all of them when all), and forgets those windows. Without all it looks
// at most once a second.
func (a *cpAuditRefusals) expired(now time.Time, all bool) []cpAuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !all && now.Sub(a.lastFlush) < time.Second {
		return nil
	}
	a.lastFlush = now
	var out []cpAuditEvent
	for k, c := range a.open {
		if !all && now.Sub(c.since) < cpAuditRefusalWindow {
			continue
		}
		delete(a.open, k)
		if s := c.summary(); s != nil {
			out = append(out, *s)
		}
	}
	return out
}

// summary is the row of a window's counted refusals; nil when none was
// counted after its first.
func (c *cpAuditRefusalCount) summary() *cpAuditEvent {
	if c.n == 0 {
		return nil
	}
	s := c.first
	s.Target = c.lastTarget
	s.Detail = fmt.Sprintf("repeated %d more times within %s of the row before (%s)", c.n, cpAuditRefusalWindow, c.first.Detail)
	return &s
}

// flushRefusals writes the summaries of every open window: at shutdown.
func (s *cpServer) flushRefusals(ctx context.Context) {
	for _, e := range s.refusals.expired(s.now(), true) {
		if err := s.store.appendAudit(ctx, e); err != nil {
			s.log.Error("audit log: append failed", "action", e.Action, "err", err)
		}
	}
}
