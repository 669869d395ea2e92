package main

// The control plane's audit log (issue 20 item 5, issue 36 items 10, 11
// and 13): every change of state and every refusal that matters (sign-in
// and failed sign-in, invitation, role change, removal, API key created,
// agent created, link with its teaching, a refused link, a route refused
// for a role, a proxied call refused to a known caller) is appended to
// cp.audit_log with its actor, time, organization, target and source
// address, never a secret (no code, credential, key or signing secret).
//
// Each organization has a chain of its own (and rows of no organization,
// sign-ins, one more): chain_seq counts its rows without gaps, a row's
// hash is an HMAC-SHA-256 keyed with a key derived from the control
// plane's master key over the previous row's hash and its own fields, and
// cp.audit_heads names each chain's last row. So a row changed or removed
// afterwards, the last one included, is found by GET
// /api/orgs/{org}/audit/verify (`svc audit verify`), and whoever can write
// to the database but lacks the master key cannot rewrite a chain so that
// it verifies. Someone who holds both can: keep the head hash verify
// prints elsewhere, with its time, to compare later. Appends lock only
// their chain's head row. Repeated refusals of one actor are counted, not
// written a row each (cpAuditRefusals).

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Values of the audit log.
const (
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

// cpAuditRow is an appended event: its place in its organization's chain,
// time and hash.
type cpAuditRow struct {
	Seq            int64     `json:"seq"`
	ChainSeq       int64     `json:"chain_seq"`
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

// cpAuditKeyOf derives the chains' key from the control plane's master key.
func cpAuditKeyOf(master []byte) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("svc control plane: audit chain key v1"))
	return m.Sum(nil)
}

// cpAuditDigest is a row's hash: HMAC-SHA-256 under key over prev, then
// each field as a 4-byte big-endian length and its bytes (chain_seq in
// decimal, at in UTC RFC 3339 with nanoseconds). A nil key is the old
// unkeyed SHA-256 of the single chain before issue 36, still read once to
// check that chain before it is re-chained.
func cpAuditDigest(key, prev []byte, chainSeq int64, r cpAuditRow) []byte {
	var h hash.Hash
	if key == nil {
		h = sha256.New()
	} else {
		h = hmac.New(sha256.New, key)
	}
	h.Write(prev)
	for _, f := range []string{strconv.FormatInt(chainSeq, 10), r.At.UTC().Format(time.RFC3339Nano), r.OrganizationID,
		r.ActorID, r.Actor, r.Action, r.Outcome, r.Target, r.Source, r.Detail} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

// cpAuditGenesis is the previous hash of a chain's first row.
var cpAuditGenesis = make([]byte, sha256.Size)

// auditAppend appends e to its organization's chain inside tx, which must
// be a transaction: it holds that chain's head row until tx ends, so the
// caller's change and its row commit (or roll back) together, and appends
// to other organizations' chains do not wait for it.
func (s *cpStore) auditAppend(ctx context.Context, tx pgx.Tx, e cpAuditEvent) error {
	e.Target, e.Detail = cpClientText(e.Target, cpAuditDetailMax), cpClientText(e.Detail, cpAuditDetailMax)
	return s.auditLink(ctx, tx, cpAuditRow{At: time.Now().UTC().Truncate(time.Microsecond), OrganizationID: e.Org, ActorID: e.ActorID,
		Actor: e.Actor, Action: e.Action, Outcome: e.Outcome, Target: e.Target, Source: e.Source, Detail: e.Detail})
}

// auditLink puts r at the end of its organization's chain inside tx,
// holding the chain's head row: a new row when r.Seq is 0, else the
// existing row r.Seq, re-chained (auditRechain).
func (s *cpStore) auditLink(ctx context.Context, tx pgx.Tx, r cpAuditRow) error {
	if _, err := tx.Exec(ctx, `INSERT INTO cp.audit_heads (org_id, chain_seq, hash) VALUES ($1, 0, $2) ON CONFLICT (org_id) DO NOTHING`,
		r.OrganizationID, cpAuditGenesis); err != nil {
		return fmt.Errorf("audit: head: %w", err)
	}
	var head int64
	var prev []byte
	if err := tx.QueryRow(ctx, `SELECT chain_seq, hash FROM cp.audit_heads WHERE org_id = $1 FOR UPDATE`, r.OrganizationID).Scan(&head, &prev); err != nil {
		return fmt.Errorf("audit: head: %w", err)
	}
	r.ChainSeq = head + 1
	hash := cpAuditDigest(s.auditKey, prev, r.ChainSeq, r)
	var err error
	if r.Seq == 0 {
		_, err = tx.Exec(ctx, `INSERT INTO cp.audit_log (chain_seq, at, org_id, actor_id, actor, action, outcome, target, source, detail, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			r.ChainSeq, r.At, r.OrganizationID, r.ActorID, r.Actor, r.Action, r.Outcome, r.Target, r.Source, r.Detail, prev, hash)
	} else {
		_, err = tx.Exec(ctx, `UPDATE cp.audit_log SET chain_seq = $2, prev_hash = $3, hash = $4 WHERE seq = $1`, r.Seq, r.ChainSeq, prev, hash)
	}
	if err != nil {
		return fmt.Errorf("audit: append: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE cp.audit_heads SET chain_seq = $2, hash = $3 WHERE org_id = $1`, r.OrganizationID, r.ChainSeq, hash); err != nil {
		return fmt.Errorf("audit: head: %w", err)
	}
	return nil
}

// appendAudit appends e in a transaction of its own.
func (s *cpStore) appendAudit(ctx context.Context, e cpAuditEvent) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return s.auditAppend(ctx, tx, e) })
}

// cpAuditColumns are the columns a cpAuditRow scans, in order.
const cpAuditColumns = `seq, coalesce(chain_seq, 0), at, org_id, actor_id, actor, action, outcome, target, source, detail`

// cpAuditPage is one page of an organization's log, oldest first, and the
// cursor of the page before it (0: this page holds the oldest row).
type cpAuditPage struct {
	Entries []cpAuditRow `json:"entries"`
	Before  int64        `json:"next_before,omitempty"`
}

// listAudit returns the newest limit rows of org older than before (0: the
// newest) and since since, oldest first: the organization's own and the
// sign-ins of its members. Failed sign-ins that name nobody are in no
// organization's log (issue 36, item 13).
func (s *cpStore) listAudit(ctx context.Context, org string, since time.Time, before int64, limit int) (cpAuditPage, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := s.db.Query(ctx, `SELECT `+cpAuditColumns+`, hash FROM cp.audit_log
		WHERE seq < $4 AND at >= $2 AND (org_id = $1 OR (org_id = '' AND actor_id <> '' AND actor_id IN (SELECT user_id FROM cp.memberships WHERE org_id = $1)))
		ORDER BY seq DESC LIMIT $3`, org, since, limit+1, before)
	if err != nil {
		return cpAuditPage{}, fmt.Errorf("read the audit log: %w", err)
	}
	var page cpAuditPage
	var r cpAuditRow
	var hash []byte
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.ChainSeq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &hash}, func() error {
		r.At, r.Hash = r.At.UTC(), hex.EncodeToString(hash)
		page.Entries = append(page.Entries, r)
		return nil
	})
	if err != nil {
		return cpAuditPage{}, fmt.Errorf("read the audit log: %w", err)
	}
	if len(page.Entries) > limit {
		page.Entries = page.Entries[:limit]
		page.Before = page.Entries[limit-1].Seq
	}
	slices.Reverse(page.Entries)
	return page, nil
}

// cpAuditVerdict is the answer of a verification of an organization's
// chain: OK, or the first row found wrong (BadSeq, its chain_seq) and what
// is wrong with it.
type cpAuditVerdict struct {
	OK       bool   `json:"ok"`
	Rows     int64  `json:"rows"`
	HeadSeq  int64  `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	BadSeq   int64  `json:"bad_seq,omitempty"`
	Problem  string `json:"problem,omitempty"`
	// At is when the chain was read: keep it with the head to compare later.
	At time.Time `json:"at"`
}

// verifyAudit walks org's chain in order (streamed, not loaded): each row
// must follow the previous one without a gap, name its hash as its
// prev_hash and hash, under the chains' key, to its stored hash; the head
// must name the last row.
func (s *cpStore) verifyAudit(ctx context.Context, org string) (cpAuditVerdict, error) {
	var v cpAuditVerdict
	headSeq, headHash := int64(0), cpAuditGenesis
	err := s.db.QueryRow(ctx, `SELECT chain_seq, hash FROM cp.audit_heads WHERE org_id = $1`, org).Scan(&headSeq, &headHash)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("verify the audit log: head: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT `+cpAuditColumns+`, prev_hash, hash FROM cp.audit_log WHERE org_id = $1 AND chain_seq IS NOT NULL ORDER BY chain_seq`, org)
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
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.ChainSeq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &rowPrev, &hash}, func() error {
		switch {
		case r.ChainSeq != want:
			fail(want, "row %d is missing: row %d follows row %d", want, r.ChainSeq, want-1)
		case !bytes.Equal(rowPrev, prev):
			fail(r.ChainSeq, "row %d does not chain to row %d: row %d was changed or replaced", r.ChainSeq, r.ChainSeq-1, r.ChainSeq-1)
		case !hmac.Equal(cpAuditDigest(s.auditKey, prev, r.ChainSeq, r), hash):
			fail(r.ChainSeq, "row %d does not match its hash under this control plane's key: it was changed after it was written, or written without the master key", r.ChainSeq)
		}
		v.Rows++
		prev, want = bytes.Clone(hash), r.ChainSeq+1
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("verify the audit log: %w", err)
	}
	v.HeadSeq, v.HeadHash = want-1, hex.EncodeToString(prev)
	if v.Rows == 0 {
		v.HeadHash = ""
	}
	if headSeq != v.HeadSeq || !bytes.Equal(headHash, prev) {
		fail(headSeq, "the log ends at row %d but its head names row %d: rows were removed from its end", v.HeadSeq, headSeq)
	}
	v.OK, v.At = v.Problem == "", time.Now().UTC()
	return v, nil
}

// auditRechain gives the rows of the single chain of before issue 36
// (chain_seq NULL) their places in their organizations' keyed chains,
// once, at the first boot with the master key. It first checks the old
// chain by its old, unkeyed rule and returns what it found ("" when it
// held), for the caller to log: an edit made before the upgrade is then
// said once, though the re-chained log can no longer show it.
func (s *cpStore) auditRechain(ctx context.Context) (legacyProblem string, n int64, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE cp.audit_log IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+cpAuditColumns+`, prev_hash, hash FROM cp.audit_log WHERE chain_seq IS NULL ORDER BY seq`)
		if err != nil {
			return err
		}
		var legacy []cpAuditRow
		prev := cpAuditGenesis
		var r cpAuditRow
		var rowPrev, hash []byte
		if _, err := pgx.ForEachRow(rows, []any{&r.Seq, &r.ChainSeq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &rowPrev, &hash}, func() error {
			if legacyProblem == "" && (!bytes.Equal(rowPrev, prev) || !bytes.Equal(cpAuditDigest(nil, prev, r.Seq, r), hash)) {
				legacyProblem = fmt.Sprintf("row %d of the old chain does not match its hash", r.Seq)
			}
			prev = bytes.Clone(hash)
			legacy = append(legacy, r)
			return nil
		}); err != nil {
			return err
		}
		for _, r := range legacy {
			if err := s.auditLink(ctx, tx, r); err != nil {
				return err
			}
		}
		n = int64(len(legacy))
		if _, err := tx.Exec(ctx, `SELECT setval('cp.audit_log_seq', greatest((SELECT max(seq) FROM cp.audit_log), nextval('cp.audit_log_seq')))`); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM cp.state WHERE key = 'audit_head'`)
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("audit: re-chain the log of before: %w", err)
	}
	return legacyProblem, n, nil
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

// audit appends what happened in r's request (auditEvent), a repeated
// refusal counted instead (cpAuditRefusals), after the counts of windows
// that have passed. A failed append is logged at ERROR and not the
// caller's failure: the change is made.
func (s *cpServer) audit(r *http.Request, e cpAuditEvent) {
	e = auditEvent(r, e)
	write, summaries := true, s.refusals.expired(s.now(), false)
	if e.Outcome == cpAuditRefused {
		var ended *cpAuditEvent
		if write, ended = s.refusals.admit(e, s.now()); ended != nil {
			summaries = append(summaries, *ended)
		}
	}
	if write {
		summaries = append(summaries, e)
	}
	for _, e := range summaries {
		if err := s.store.appendAudit(context.WithoutCancel(r.Context()), e); err != nil {
			s.log.Error("audit log: append failed", "action", e.Action, "err", err)
		}
	}
}

// handleListAudit answers a page of the organization's audit rows
// (?since=RFC 3339, default all; ?limit=1..cpAuditListMax, default
// cpAuditListDefault; ?before=the next_before of the page after, to page
// back through the whole log).
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
	var before int64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			cpError(w, http.StatusBadRequest, "invalid", "before: want the next_before of the page after (a row's seq)")
			return
		}
		before = n
	}
	page, err := s.store.listAudit(r.Context(), o.ID, since, before, limit)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"organization": o, "entries": page.Entries, "next_before": page.Before})
}

// handleVerifyAudit verifies the organization's chain and answers the
// verdict: 200 either way, ok false naming the first row found wrong.
func (s *cpServer) handleVerifyAudit(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	v, err := s.store.verifyAudit(r.Context(), o.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !v.OK {
		s.log.Error("audit log: verification failed", "row", v.BadSeq, "problem", v.Problem)
	}
	writeJSON(w, http.StatusOK, v)
}
