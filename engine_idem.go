package main

// Idempotent starts (issue 21): a start may carry a key; the same key with
// the same workflow and input within the retention answers the first
// start's receipt and records nothing. The key travels in the start's own
// journal event (evStart or evQueue), so it is durable exactly when the
// start is, on either store, and replay rebuilds the keys with the runs.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Bounds of an idempotency key: 1 to idemKeyMax visible ASCII characters
// (0x21 to 0x7e), what a UUID, a ULID or a request id fits.
const idemKeyMax = 255

// Defaults of the idempotency keys' retention (SVC_IDEMPOTENCY_RETENTION)
// and of how often expired keys leave memory.
const (
	idemRetentionDefault = 24 * time.Hour
	idemSweepInterval    = time.Minute
)

// idemEntry is a kept key: what it started and when. A queued start keeps
// its queue id, which is what its receipt named.
type idemEntry struct {
	Workflow string    `json:"wf"`
	Hash     string    `json:"h"` // idemInputHash of the input
	RunID    string    `json:"r,omitempty"`
	WRun     string    `json:"w,omitempty"`
	QueueID  string    `json:"q,omitempty"`
	At       time.Time `json:"at"`
}

// checkIdemKey reports why key cannot be an idempotency key ("" is none).
func checkIdemKey(key string) error {
	if len(key) > idemKeyMax {
		return fmt.Errorf("the idempotency key is %d bytes long: at most %d are kept", len(key), idemKeyMax)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return fmt.Errorf("the idempotency key holds byte 0x%02x at %d: use visible ASCII only (letters, digits, punctuation; no spaces)", key[i], i)
		}
	}
	return nil
}

// idemInputHash is the input's identity under a key: the SHA-256 of its
// JSON with object keys sorted and whitespace removed (numbers kept as
// written), so a resent request matches whatever its formatting.
func idemInputHash(input json.RawMessage) string {
	d := json.NewDecoder(bytes.NewReader(input))
	d.UseNumber()
	var v any
	canon := []byte(input)
	if d.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// idemRetention is how long keys are kept.
func (e *engine) idemRetention() time.Duration { return e.opts.idemRetention() }

// idemRetention is how long keys are kept under o.
func (o engineOptions) idemRetention() time.Duration {
	if o.IdemRetention > 0 {
		return o.IdemRetention
	}
	return idemRetentionDefault
}

// idemReceiptLocked returns the receipt a live key answers for a start of
// workflow with input hash, and whether the key is live; a live key of
// another workflow or input is an idempotency_key_reused error. It also
// drops expired keys, at most once a minute. mu must be held.
func (e *engine) idemReceiptLocked(key, workflow, hash string) (startReceipt, bool, error) {
	now := time.Now()
	if now.After(e.idemSweep) {
		e.idemSweep = now.Add(idemSweepInterval)
		e.dropExpiredIdemLocked(now)
	}
	k := e.st.Idem[key]
	if k == nil || now.Sub(k.At) > e.idemRetention() {
		return startReceipt{}, false, nil
	}
	if k.Workflow != workflow || k.Hash != hash {
		what := "another input"
		if k.Workflow != workflow {
			what = "workflow " + k.Workflow
		}
		return startReceipt{}, true, &startError{Code: "idempotency_key_reused",
			Message: fmt.Sprintf("this idempotency key already started %s at %s: use a new key for a different start", what, k.At.Format(time.RFC3339))}
	}
	return idemReceipt(workflow, k.RunID, k.WRun, k.QueueID), true, nil
}

// idemReceipt is the receipt a kept key answers: its run, or its queue entry.
func idemReceipt(workflow, runID, wrun, queueID string) startReceipt {
	rc := startReceipt{SchemaVersion: schemaVersion, WorkflowName: workflow, Trigger: workflowRoute(workflow),
		Status: "started", RunID: runID, WorldRunID: wrun, QueueID: queueID, Existing: true}
	if queueID != "" {
		rc.Status = "queued"
	}
	return rc
}

// idemAnswerLocked answers a keyed start whose key is live: the first
// receipt (once the first start is durable: a twin that arrives while it
// is written waits for it), or the key's refusal. It reports whether it
// answered; when it did, mu is released. mu must be held.
func (e *engine) idemAnswerLocked(req startRequest, workflow, hash string) (startReceipt, bool, error) {
	for {
		orig, live, err := e.idemReceiptLocked(req.IdemKey, workflow, hash)
		if !live {
			return startReceipt{}, false, nil
		}
		if wait := e.idemPending[req.IdemKey]; err == nil && wait != nil {
			e.mu.Unlock()
			<-wait
			e.mu.Lock()
			continue
		}
		if err == nil && e.failed != nil {
			// The first start's write failed: recovery decides whether it
			// happened.
			err = fmt.Errorf("%w: %w", errJournalUnavailable, e.failed)
		}
		if err == nil && req.ParentRun != "" {
			rc, err := e.linkLocked(req, orig)
			return rc, true, err
		}
		e.mu.Unlock()
		return orig, true, err
	}
}

// idemBeginLocked marks key's start as being written and returns what
// idemEnd closes. mu must be held.
func (e *engine) idemBeginLocked(key string) chan struct{} {
	if e.idemPending == nil {
		e.idemPending = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	e.idemPending[key] = done
	return done
}

// idemEnd wakes the twins of key's start once it is durable or failed.
func (e *engine) idemEnd(key string, done chan struct{}) {
	e.mu.Lock()
	delete(e.idemPending, key)
	e.mu.Unlock()
	close(done)
}

// linkLocked records that the start of a workflow's call was answered by
// its idempotency key: the call settles with the first receipt, durably,
// as the start itself would have settled it. mu must be held and is
// released.
func (e *engine) linkLocked(req startRequest, rc startReceipt) (startReceipt, error) {
	ev := &journalEvent{Type: evLink, Workflow: rc.WorkflowName, Run: rc.RunID, WRun: rc.WorldRunID, Queue: rc.QueueID,
		Parent: req.ParentRun, ParentSeq: req.ParentSeq, Kind: req.ParentKind}
	if err := e.commitLocked(ev, true); err != nil {
		return startReceipt{}, err
	}
	return rc, nil
}

// dropExpiredIdemLocked removes the keys older than the retention. mu must
// be held.
func (e *engine) dropExpiredIdemLocked(now time.Time) {
	for key, k := range e.st.Idem {
		if now.Sub(k.At) > e.idemRetention() {
			delete(e.st.Idem, key)
		}
	}
}

// applyIdem keeps the key a start event carries. mu must be held.
func (e *engine) applyIdem(ev *journalEvent, at time.Time) []func() {
	if ev.Idem == "" {
		return nil
	}
	if e.st.Idem == nil {
		e.st.Idem = map[string]*idemEntry{}
	}
	e.st.Idem[ev.Idem] = &idemEntry{Workflow: ev.Workflow, Hash: ev.IdemHash, At: at, QueueID: ev.Queue, RunID: ev.Run, WRun: ev.WRun}
	return nil
}

// registerIdem hangs idempotency keys off the engine (engine_hooks.go): a
// start or queued start with a key records it; on a shared log one whose
// key a twin on another replica took first, within the retention the
// writer decided under (in the event, so a replay under another
// SVC_IDEMPOTENCY_RETENTION decides alike), is void.
func (e *engine) registerIdem() {
	e.on(engineHook{apply: e.applyIdem, void: func(ev *journalEvent, at time.Time) bool {
		k := e.st.Idem[ev.Idem]
		return ev.Idem != "" && k != nil && at.Sub(k.At) <= time.Duration(ev.IdemTTL)*time.Millisecond
	}}, evStart, evQueue)
}
