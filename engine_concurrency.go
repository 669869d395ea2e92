package main

// Concurrency limits of workflows: `export const concurrency = { limit: N,
// key: "/userId" }` admits at most N active runs per value of the key (a
// JSON pointer into the run's input, RFC 6901); the other starts wait in a
// FIFO queue of their own per key, as `q_…` entries (engine_queue.go).
// `export const serial = true` is the same with limit 1 and no key.
//
// A run, a queued entry and their journal events carry the limit and the
// key value they were admitted under, so replay and every replica decide
// alike whatever the code says now. Limit 1 with no key is written as the
// serial flag it always was, so serial journals and snapshots keep their
// format; any other limit adds its own fields.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// Bounds of a concurrency declaration and of the key values of inputs.
const (
	concurrencyMaxLimit = 10000
	// concurrencyMaxKey bounds a key value in bytes: it is kept in memory
	// with every active run and queued entry, and written in each event.
	concurrencyMaxKey = 256
)

// concurrencyDecl is a workflow's declared limit: Limit 0 means none.
type concurrencyDecl struct {
	Limit int    `json:"limit,omitempty"`
	Key   string `json:"key,omitempty"` // a JSON pointer into the input; "" for one bucket
}

// limited reports whether the workflow has a limit.
func (d concurrencyDecl) limited() bool { return d.Limit > 0 }

// serial reports whether the declaration is `serial = true`'s.
func (d concurrencyDecl) serial() bool { return d.Limit == 1 && d.Key == "" }

// inspectConcurrency reads `export const serial` and `export const
// concurrency` of a workflow module into wf.Concurrency.
func inspectConcurrency(vm *goja.Runtime, exports *goja.Object, wf *workflowDef) error {
	serial := exports.Get("serial")
	if serial != nil && serial.ToBoolean() {
		wf.Concurrency = concurrencyDecl{Limit: 1}
	}
	v := exports.Get("concurrency")
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return nil
	}
	fail := func(format string, args ...any) error {
		return &compileError{File: wf.File, Message: fmt.Sprintf("workflow %s: export const concurrency: ", wf.Name) + fmt.Sprintf(format, args...)}
	}
	if wf.Concurrency.limited() {
		return fail("the file also exports serial = true; keep one (serial is concurrency { limit: 1 })")
	}
	raw, err := jsonStringify(vm, v)
	if err != nil {
		return fail("not JSON: %v", err)
	}
	d, err := parseConcurrencyDecl(raw)
	if err != nil {
		return fail("%v", err)
	}
	wf.Concurrency = d
	return nil
}

// parseConcurrencyDecl checks a declaration: { limit: 1..10000, key?:
// "/pointer" }.
func parseConcurrencyDecl(raw []byte) (concurrencyDecl, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return concurrencyDecl{}, errors.New(`want an object such as { limit: 8, key: "/userId" }`)
	}
	var d concurrencyDecl
	for name, v := range fields {
		switch name {
		case "limit":
			n, err := strconv.Atoi(string(v))
			if err != nil || n < 1 || n > concurrencyMaxLimit {
				return d, fmt.Errorf("limit %s: want an integer from 1 to %d", v, concurrencyMaxLimit)
			}
			d.Limit = n
		case "key":
			if err := json.Unmarshal(v, &d.Key); err != nil {
				return d, fmt.Errorf("key %s: want a JSON pointer string such as \"/userId\"", v)
			}
			if _, err := parsePointer(d.Key); err != nil || d.Key == "" {
				return d, fmt.Errorf("key %q: want a JSON pointer (RFC 6901) to a property of the input, such as \"/userId\" or \"/customer/id\"", d.Key)
			}
		default:
			return d, fmt.Errorf("unknown property %q: want limit and, optionally, key", name)
		}
	}
	if d.Limit == 0 {
		return d, errors.New(`limit is missing: want { limit: 8 } or { limit: 8, key: "/userId" }`)
	}
	return d, nil
}

// parsePointer splits a JSON pointer (RFC 6901) into its unescaped
// reference tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, errors.New("a JSON pointer starts with /")
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, errors.New("~ must be followed by 0 or 1")
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

// concurrencyKeyError is an input whose key value cannot name a bucket.
type concurrencyKeyError struct{ msg string }

func (e *concurrencyKeyError) Error() string { return e.msg }

// concurrencyKey returns the bucket key of input under d: the string or
// the number (as written) the pointer names; "" when the input has no
// such property or it is null, so those starts share one bucket. Another
// type, or a key longer than concurrencyMaxKey bytes, is refused.
func (d concurrencyDecl) concurrencyKey(workflow string, input json.RawMessage) (string, error) {
	if d.Key == "" {
		return "", nil
	}
	toks, err := parsePointer(d.Key)
	if err != nil {
		return "", err // checked at load time
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", &concurrencyKeyError{msg: "input is not valid JSON: " + err.Error()}
	}
	for _, t := range toks {
		switch c := v.(type) {
		case map[string]any:
			v = c[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) || (len(t) > 1 && t[0] == '0') {
				v = nil
			} else {
				v = c[i]
			}
		default:
			v = nil
		}
		if v == nil {
			return "", nil
		}
	}
	var key string
	switch x := v.(type) {
	case string:
		key = x
	case json.Number:
		key = x.String()
	default:
		return "", &concurrencyKeyError{msg: fmt.Sprintf("input %s is %s; workflow %s's concurrency key must be a string or a number (or absent: one shared bucket)", d.Key, jsonTypeName(v), workflow)}
	}
	if len(key) > concurrencyMaxKey || !utf8.ValidString(key) {
		return "", &concurrencyKeyError{msg: fmt.Sprintf("input %s is %d bytes; workflow %s's concurrency key takes at most %d bytes of UTF-8", d.Key, len(key), workflow, concurrencyMaxKey)}
	}
	return key, nil
}

// jsonTypeName names the JSON type of a decoded value for messages.
func jsonTypeName(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "a value of another type"
}

// concurrencyBucket names the queue and the active count of workflow's
// runs with key: the workflow's name alone for key "" (as serial queues
// always were, so old snapshots read alike), else "workflow/key" (a
// workflow's name is an identifier, so names never collide).
func concurrencyBucket(workflow, key string) string {
	if key == "" {
		return workflow
	}
	return workflow + "/" + key
}

// setConcurrency writes limit and key into a start or queue event: limit 1
// with no key as the serial flag, so serial events keep their old format.
func (ev *journalEvent) setConcurrency(limit int, key string) {
	ev.Serial, ev.Limit, ev.Key = false, 0, ""
	switch {
	case limit == 1 && key == "":
		ev.Serial = true
	case limit > 0:
		ev.Limit, ev.Key = limit, key
	}
}

// concurrencyLimit is the limit ev was decided under (0: none).
func (ev *journalEvent) concurrencyLimit() int { return limitOf(ev.Limit, ev.Serial) }

// limitOf is a recorded limit: limit, or 1 when only the serial flag is set.
func limitOf(limit int, serial bool) int {
	if limit == 0 && serial {
		return 1
	}
	return limit
}

// concurrencyLimit is the limit the run was admitted under (0: none).
func (r *runRecord) concurrencyLimit() int { return limitOf(r.Limit, r.Serial) }

// concurrencyLimit is the limit the entry waits under: every queued entry
// has one, and entries from before limits had keys are serial.
func (t *queuedTrigger) concurrencyLimit() int { return limitOf(t.Limit, true) }

// bucket is the entry's queue.
func (t *queuedTrigger) bucket() string { return concurrencyBucket(t.WorkflowName, t.LimitKey) }

// registerConcurrency hangs concurrency limits off the engine
// (engine_hooks.go): a queued start joins its key's queue, an admitted run
// takes a slot of its key (leaving the queue when it waited in it), an
// ended run frees its slot and lets the queue's head start, a cancelled
// entry leaves its queue. On a shared log a start or a queued start's turn
// the key's slots no longer admit is void.
func (e *engine) registerConcurrency() {
	e.on(engineHook{void: e.concurrencyVoid, apply: func(ev *journalEvent, at time.Time) []func() {
		q := &queuedTrigger{QueueID: ev.Queue, WorkflowName: ev.Workflow, Limit: ev.Limit, LimitKey: ev.Key, Input: ev.Input, Trigger: ev.Trigger,
			ParentRunID: ev.Parent, ParentSeq: ev.ParentSeq, ParentKind: ev.Kind, TraceParent: ev.TraceParent, CreatedAt: at,
			RerunOf: ev.RerunOf, RetryFrom: ev.Seq, Reuse: ev.Calls}
		e.st.Queues[q.bucket()] = append(e.st.Queues[q.bucket()], q)
		return nil
	}}, evQueue)
	e.on(engineHook{void: e.concurrencyVoid, apply: func(ev *journalEvent, _ time.Time) []func() {
		if ev.Queue != "" {
			e.removeQueuedLocked(concurrencyBucket(ev.Workflow, ev.Key), ev.Queue)
		}
		e.countActiveLocked(e.st.Runs[ev.Run])
		return nil
	}}, evStart)
	e.on(engineHook{apply: func(ev *journalEvent, _ time.Time) []func() {
		r := e.st.Runs[ev.Run]
		e.releaseActiveLocked(r)
		if r.concurrencyLimit() == 0 {
			return nil
		}
		return []func(){func() { e.advanceQueueSoon(r.WorkflowName, concurrencyBucket(r.WorkflowName, r.LimitKey)) }}
	}}, evEnd)
	e.on(engineHook{apply: func(ev *journalEvent, _ time.Time) []func() {
		e.removeQueuedLocked(concurrencyBucket(ev.Workflow, ev.Key), ev.Queue)
		return nil
	}}, evDequeue)
}

// concurrencyVoid reports, on a shared log, whether the slots of ev's key
// no longer admit ev: a direct start only while its key has a free slot and
// nothing waits; a queued start's turn only for the queue's head, while its
// key has a free slot. mu must be held.
func (e *engine) concurrencyVoid(ev *journalEvent, _ time.Time) bool {
	limit := ev.concurrencyLimit()
	if ev.Type == evQueue || limit == 0 {
		return false
	}
	bucket := concurrencyBucket(ev.Workflow, ev.Key)
	q := e.st.Queues[bucket]
	if ev.Queue == "" {
		return !e.admitsLocked(bucket, limit) || len(q) > 0
	}
	return !e.admitsLocked(bucket, limit) || len(q) == 0 || q[0].QueueID != ev.Queue
}

// admitsLocked reports whether a run may start now in bucket under limit:
// fewer than limit runs of it are active. mu must be held.
func (e *engine) admitsLocked(bucket string, limit int) bool {
	return limit == 0 || e.active[bucket] < limit
}

// pendingAdmissions are the starts and queue entries of one bucket that
// this process appended to a shared log and the log has not delivered yet.
type pendingAdmissions struct{ starts, queued int }

// mustQueueLocked reports whether a start in bucket under limit queues: its
// key has no free slot, or starts wait already. On a shared log it counts
// this process's admissions on their way too: starts decided at once on
// the state before any of them is delivered would all take the same free
// slot, and all but one would come back void and decide again. mu must be
// held.
func (e *engine) mustQueueLocked(bucket string, limit int) bool {
	if limit == 0 {
		return false
	}
	p := e.pending[bucket]
	return e.active[bucket]+p.starts >= limit || len(e.st.Queues[bucket])+p.queued > 0
}

// pendLocked adds n (1 before the append, -1 once it returned) to the
// pending admissions of ev, a start or queue entry in bucket, on a shared
// log. mu must be held.
func (e *engine) pendLocked(ev *journalEvent, bucket string, n int) {
	if e.self == "" || ev.concurrencyLimit() == 0 {
		return
	}
	p := e.pending[bucket]
	if ev.Type == evQueue {
		p.queued += n
	} else {
		p.starts += n
	}
	if p == (pendingAdmissions{}) {
		delete(e.pending, bucket)
	} else {
		e.pending[bucket] = p
	}
}

// countActiveLocked counts r, a run just admitted, in its bucket. mu must
// be held.
func (e *engine) countActiveLocked(r *runRecord) {
	if r.concurrencyLimit() > 0 {
		e.active[concurrencyBucket(r.WorkflowName, r.LimitKey)]++
	}
}

// releaseActiveLocked uncounts r, a run that just ended. mu must be held.
func (e *engine) releaseActiveLocked(r *runRecord) {
	if r.concurrencyLimit() == 0 {
		return
	}
	b := concurrencyBucket(r.WorkflowName, r.LimitKey)
	if n := e.active[b] - 1; n > 0 {
		e.active[b] = n
	} else {
		delete(e.active, b)
	}
}

// recountActiveLocked rebuilds the active counts from the runs, after a
// snapshot replaced the state. mu must be held (or the engine not shared).
func (e *engine) recountActiveLocked() {
	clear(e.active)
	for _, r := range e.st.Runs {
		if !terminal(r.Status) {
			e.countActiveLocked(r)
		}
	}
}

// removeQueuedLocked takes the entry id out of bucket's queue and returns
// it (nil when absent). The head leaves in O(1), so long queues drain
// without copying. mu must be held.
func (e *engine) removeQueuedLocked(bucket, id string) *queuedTrigger {
	q := e.st.Queues[bucket]
	for i, t := range q {
		if t.QueueID != id {
			continue
		}
		if i == 0 {
			q = q[1:]
		} else {
			q = append(q[:i:i], q[i+1:]...)
		}
		if len(q) == 0 {
			delete(e.st.Queues, bucket)
		} else {
			e.st.Queues[bucket] = q
		}
		if t.turn != nil {
			close(t.turn)
		}
		return t
	}
	return nil
}
