package main

// The control plane's audit log (issue 20 item 5): every change of state
// and every refusal that matters (sign-in and failed sign-in, invitation,
// role change, removal, API key created, agent created, link with its
// teaching, a refused link, a route refused for a role, a proxied call
// refused to a known caller) is appended to cp.audit_log with its actor,
// time, organization, target and source address, never a secret (no
// code, credential, key or signing secret). The log is hash-chained: a
// row's hash is SHA-256 over the previous row's hash and its own fields,
// seq counts without gaps, and cp.state 'audit_head' names the last row,
// so a row changed or removed afterwards, the last one included, is found
// by GET /api/orgs/{org}/audit/verify (`svc audit verify`). Whoever can
// rewrite the whole chain and the head in PostgreSQL can hide an edit:
// keep the head hash verify prints somewhere else to compare later.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Values of the audit log.
const (
	// cpAuditLockKey serializes appends (pg_advisory_xact_lock), so seq
	// and the chain have one order.
	cpAuditLockKey = 0x5356_4341_5544_4954 // "SVCAUDIT"
	// cpAuditListDefault and cpAuditListMax bound the rows of one read.
	cpAuditListDefault = 100
	cpAuditListMax     = 1000
	// cpAuditDetailMax bounds a row's target and detail, in bytes (longer
	// ones are cut; control characters dropped).
	cpAuditDetailMax = 1024
	// Outcomes of a row.
	cpAuditOK      = "ok"
	cpAuditRefused = "refused"
)

// cpAuditEvent is one thing that happened, as a handler reports it.
type cpAuditEvent struct {
	Org     string // the organization's id; "" for none (a sign-in)
	ActorID string // a user's id, or "" when nobody is known (a failed sign-in)
	Actor   string // the user's email, for reading after they are gone
	Action  string // e.g. member.invited, signin.failed
	Outcome string // cpAuditOK or cpAuditRefused
	Target  string // what was acted on: an email, an agent's slug, an installation
	Source  string // the request's TCP peer address
	Detail  string // a short note (cpAuditDetailMax), never a secret
}

// cpAuditRow is an appended event: its place in the chain, time and hash.
type cpAuditRow struct {
	Seq            int64     `json:"seq"`
	At             time.Time `json:"at"`
	OrganizationID string    `json:"organization_id"`
	ActorID        string    `json:"actor_id"`
	Actor          string    `json:"actor"`
	Action         string    `json:"action"`
	Outcome        string    `json:"outcome"`
	Target         string    `json:"target"`
	Source         string    `json:"source"`
	Detail         string    `json:"detail"`
	Hash           string    `json:"hash"` // hex
}

// cpAuditDigest is a row's hash: SHA-256 over prev, then each field as a
// 4-byte big-endian length and its bytes (seq in decimal, at in UTC
// RFC 3339 with nanoseconds).
func cpAuditDigest(prev []byte, r cpAuditRow) []byte {
	h := sha256.New()
	h.Write(prev)
	for _, f := range []string{strconv.FormatInt(r.Seq, 10), r.At.UTC().Format(time.RFC3339Nano), r.OrganizationID,
		r.ActorID, r.Actor, r.Action, r.Outcome, r.Target, r.Source, r.Detail} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

// cpAuditHead is cp.state 'audit_head': the last row's seq and hash (hex).
type cpAuditHead struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// cpAuditGenesis is the previous hash of the first row.
var cpAuditGenesis = make([]byte, sha256.Size)

// cpAuditAppend appends e inside tx, which must be a transaction: it holds
// the append lock until tx ends, so the caller's change and its row commit
// (or roll back) together.
func cpAuditAppend(ctx context.Context, tx pgx.Tx, e cpAuditEvent) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(cpAuditLockKey)); err != nil {
		return fmt.Errorf("audit: lock: %w", err)
	}
	var head cpAuditHead
	err := tx.QueryRow(ctx, `SELECT value FROM cp.state WHERE key = 'audit_head'`).Scan(&head)
	prev := cpAuditGenesis
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("audit: head: %w", err)
	default:
		if prev, err = hex.DecodeString(head.Hash); err != nil {
			return fmt.Errorf("audit: head hash: %w", err)
		}
	}
	e.Target, e.Detail = cpClientText(e.Target, cpAuditDetailMax), cpClientText(e.Detail, cpAuditDetailMax)
	r := cpAuditRow{Seq: head.Seq + 1, At: time.Now().UTC().Truncate(time.Microsecond), OrganizationID: e.Org, ActorID: e.ActorID,
		Actor: e.Actor, Action: e.Action, Outcome: e.Outcome, Target: e.Target, Source: e.Source, Detail: e.Detail}
	hash := cpAuditDigest(prev, r)
	if _, err := tx.Exec(ctx, `INSERT INTO cp.audit_log (seq, at, org_id, actor_id, actor, action, outcome, target, source, detail, prev_hash, hash)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		r.Seq, r.At, r.OrganizationID, r.ActorID, r.Actor, r.Action, r.Outcome, r.Target, r.Source, r.Detail, prev, hash); err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	b, _ := json.Marshal(cpAuditHead{Seq: r.Seq, Hash: hex.EncodeToString(hash)})
	if _, err := tx.Exec(ctx, `INSERT INTO cp.state (key, value) VALUES ('audit_head', $1)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, b); err != nil {
		return fmt.Errorf("audit: head: %w", err)
	}
	return nil
}

// appendAudit appends e in a transaction of its own.
func (s *cpStore) appendAudit(ctx context.Context, e cpAuditEvent) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return cpAuditAppend(ctx, tx, e) })
}

// cpAuditColumns are the columns a cpAuditRow scans, in order.
const cpAuditColumns = `seq, at, org_id, actor_id, actor, action, outcome, target, source, detail`

// listAudit returns the rows of org since since, oldest first, at most
// limit (the newest ones when there are more): the organization's own, the
// sign-ins of its members, and, for its owners (owners), the failed
// sign-ins that name no user.
func (s *cpStore) listAudit(ctx context.Context, org string, owners bool, since time.Time, limit int) ([]cpAuditRow, error) {
	rows, err := s.db.Query(ctx, `SELECT * FROM (SELECT `+cpAuditColumns+`, hash FROM cp.audit_log
		WHERE at >= $2 AND (org_id = $1 OR (org_id = '' AND (actor_id IN (SELECT user_id FROM cp.memberships WHERE org_id = $1)
			OR (actor_id = '' AND $3))))
		ORDER BY seq DESC LIMIT $4) r ORDER BY seq`, org, since, owners, limit)
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	var out []cpAuditRow
	var r cpAuditRow
	var hash []byte
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &hash}, func() error {
		r.At, r.Hash = r.At.UTC(), hex.EncodeToString(hash)
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	return out, nil
}

// cpAuditVerdict is the answer of a verification of the whole chain: OK,
// or the first row found wrong (BadSeq) and what is wrong with it.
type cpAuditVerdict struct {
	OK       bool   `json:"ok"`
	Rows     int64  `json:"rows"`
	HeadSeq  int64  `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	BadSeq   int64  `json:"bad_seq,omitempty"`
	Problem  string `json:"problem,omitempty"`
}

// verifyAudit walks the whole chain in seq order (streamed, not loaded):
// each row must follow the previous one without a gap, name its hash as
// its prev_hash and hash to its stored hash; the head must name the last
// row.
func (s *cpStore) verifyAudit(ctx context.Context) (cpAuditVerdict, error) {
	var v cpAuditVerdict
	var head cpAuditHead
	err := s.db.QueryRow(ctx, `SELECT value FROM cp.state WHERE key = 'audit_head'`).Scan(&head)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("verify the audit log: head: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT `+cpAuditColumns+`, prev_hash, hash FROM cp.audit_log ORDER BY seq`)
	if err != nil {
		return v, fmt.Errorf("verify the audit log: %w", err)
	}
	prev, want := cpAuditGenesis, int64(1)
	var r cpAuditRow
	var rowPrev, hash []byte
	fail := func(seq int64, format string, args ...any) {
		if v.Problem == "" {
			v.BadSeq, v.Problem = seq, fmt.Sprintf(format, args...)
		}
	}
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &rowPrev, &hash}, func() error {
		switch {
		case r.Seq != want:
			fail(want, "row %d is missing: row %d follows row %d", want, r.Seq, want-1)
		case !bytes.Equal(rowPrev, prev):
			fail(r.Seq, "row %d does not chain to row %d: row %d was changed or replaced", r.Seq, r.Seq-1, r.Seq-1)
		case !bytes.Equal(cpAuditDigest(prev, r), hash):
			fail(r.Seq, "row %d was changed after it was written: its content does not match its hash", r.Seq)
		}
		v.Rows++
		prev, want = bytes.Clone(hash), r.Seq+1
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("verify the audit log: %w", err)
	}
	v.HeadSeq, v.HeadHash = want-1, hex.EncodeToString(prev)
	if v.Rows == 0 {
		v.HeadHash = ""
	}
	if head.Seq != v.HeadSeq || head.Hash != v.HeadHash {
		fail(head.Seq, "the log ends at row %d but its head names row %d: rows were removed from its end", v.HeadSeq, head.Seq)
	}
	v.OK = v.Problem == ""
	return v, nil
}

// auditEvent completes e as an event of r's request: the caller (when
// signed in and e names no actor) as its actor, r's peer as its source,
// outcome ok unless e says otherwise.
func auditEvent(r *http.Request, e cpAuditEvent) cpAuditEvent {
	if c, ok := r.Context().Value(cpCallerKey{}).(*cpCaller); ok && e.ActorID == "" {
		e.ActorID, e.Actor = c.user.ID, c.user.Email
	}
	e.Source = rateLimitPeer(r)
	if e.Outcome == "" {
		e.Outcome = cpAuditOK
	}
	return e
}

// audit appends what happened in r's request (auditEvent). A failed append
// is logged at ERROR and not the caller's failure: the change is made.
func (s *cpServer) audit(r *http.Request, e cpAuditEvent) {
	e = auditEvent(r, e)
	if err := s.store.appendAudit(context.WithoutCancel(r.Context()), e); err != nil {
		s.log.Error("audit log: append failed", "action", e.Action, "err", err)
	}
}

// handleListAudit answers the organization's audit rows (?since=RFC 3339,
// default all; ?limit=1..cpAuditListMax, default cpAuditListDefault).
func (s *cpServer) handleListAudit(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			cpError(w, http.StatusBadRequest, "invalid", "since: want an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
			return
		}
		since = t
	}
	limit := cpAuditListDefault
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > cpAuditListMax {
			cpError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("limit: want 1 to %d", cpAuditListMax))
			return
		}
		limit = n
	}
	rows, err := s.store.listAudit(r.Context(), o.ID, o.Role == cpRoleOwner, since, limit)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"organization": o, "entries": rows})
}

// handleVerifyAudit verifies the whole chain (every organization's rows
// are links of it) and answers the verdict: 200 either way, ok false
// naming the first row found wrong.
func (s *cpServer) handleVerifyAudit(w http.ResponseWriter, r *http.Request) {
	v, err := s.store.verifyAudit(r.Context())
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !v.OK {
		s.log.Error("audit log: verification failed", "row", v.BadSeq, "problem", v.Problem)
	}
	writeJSON(w, http.StatusOK, v)
}
