package main

// API keys of an organization (issue 20 item 3): accepted by the proxy on
// its boxes' chat wires (cp_proxy.go). Owners and admins list them (name,
// creator, created, last used, expiry; never the key), create them with
// an optional expiry (the answer is the only time the key is shown) and
// revoke them, at once: the proxy looks every call's key up, so a revoked
// or expired key's next call is 401. Every change is audited.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limits of API keys.
const (
	// cpNameMax bounds an API key's or an agent's name, in bytes.
	cpNameMax = 200
	// cpAPIKeyMaxLife is the latest expiry a key may be given, from now.
	cpAPIKeyMaxLife = 366 * 24 * time.Hour
	// cpTouchEvery is how stale a key's or credential's last use may be
	// before a call records it again (one write a minute, not one a call).
	cpTouchEvery = time.Minute
)

// cpAPIKey is an API key's record; the key itself is shown once, at
// creation, and stored hashed.
type cpAPIKey struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	CreatedBy  string     `json:"created_by"` // the creator's email ("" once they are gone)
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at"` // nil: never
}

// cpCheckName checks a name given by a caller (an API key's, an agent's):
// 1 to cpNameMax bytes, printable, trimmed; it returns the trimmed name.
func cpCheckName(raw string) (string, error) {
	n := strings.TrimSpace(raw)
	if n == "" || len(n) > cpNameMax || cpClientText(n, cpNameMax) != n {
		return "", fmt.Errorf("name: want 1 to %d bytes of printable text", cpNameMax)
	}
	return n, nil
}

// handleListAPIKeys lists the organization's unrevoked API keys, expired
// ones included, never the keys.
func (s *cpServer) handleListAPIKeys(w http.ResponseWriter, r *http.Request) {
	cpAnswerList(s, w, r, "api_keys", s.store.listAPIKeys)
}

// handleCreateAPIKey mints an API key {name, expires_at (RFC 3339,
// optional, within cpAPIKeyMaxLife)}: the answer is the only time the key
// is shown.
func (s *cpServer) handleCreateAPIKey(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	var in struct {
		Name      string     `json:"name"`
		ExpiresAt *time.Time `json:"expires_at"`
	}
	if !cpDecode(w, r, &in) {
		return
	}
	name, err := cpCheckName(in.Name)
	if err == nil && in.ExpiresAt != nil && (!in.ExpiresAt.After(s.now()) || in.ExpiresAt.After(s.now().Add(cpAPIKeyMaxLife))) {
		err = fmt.Errorf("expires_at: want a time after now and at most %d days ahead", cpAPIKeyMaxLife/(24*time.Hour))
	}
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	detail := "never expires"
	if in.ExpiresAt != nil {
		t := in.ExpiresAt.UTC().Truncate(time.Second)
		in.ExpiresAt, detail = &t, "expires "+t.Format(time.RFC3339)
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "api_key.created", Target: name, Detail: detail})
	key, rec, err := s.store.createAPIKey(r.Context(), o.ID, caller(r).user, name, in.ExpiresAt, ev)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, struct {
		cpAPIKey
		Organization string `json:"organization"`
		Key          string `json:"key"`
	}{rec, o.Slug, key})
}

// handleRevokeAPIKey revokes the organization's key {id} (or the one of
// that name, when one unrevoked key has it); 404 no_api_key otherwise,
// another organization's key included.
func (s *cpServer) handleRevokeAPIKey(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	ref := r.PathValue("id")
	k, err := s.store.revokeAPIKey(r.Context(), o.ID, ref, auditEvent(r, cpAuditEvent{Org: o.ID, Action: "api_key.revoked"}))
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, "no_api_key", fmt.Sprintf("no unrevoked API key %q (one id, or a name only one key has) in organization %s", cpClientText(ref, 64), o.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"organization": o.Slug, "revoked": k})
}

// cpAPIKeyColumns are the columns a cpAPIKey scans from cp.api_keys k
// joined with its creator u, in order.
const cpAPIKeyColumns = `k.id, k.name, coalesce(u.email, ''), k.created_at, k.last_used_at, k.expires_at`

// createAPIKey mints an API key of org named name for by, expiring at
// expires (nil: never), appending ev; it returns the key (the only time
// it is seen) with its record; only its hash is stored.
func (s *cpStore) createAPIKey(ctx context.Context, org string, by cpUser, name string, expires *time.Time, ev cpAuditEvent) (string, cpAPIKey, error) {
	key := cpNewSecret("svc_key_")
	k := cpAPIKey{ID: randomID("key_", 8), Name: name, CreatedBy: by.Email, ExpiresAt: expires}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO cp.api_keys (id, org_id, name, key_hash, created_by, expires_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at`,
			k.ID, org, name, cpHash(key), by.ID, expires).Scan(&k.CreatedAt)
		if err != nil {
			return err
		}
		ev.Detail = "key " + k.ID + ", " + ev.Detail
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil {
		return "", k, fmt.Errorf("create API key: %w", err)
	}
	return key, k, nil
}

// listAPIKeys lists the organization's unrevoked API keys (never the keys).
func (s *cpStore) listAPIKeys(ctx context.Context, org string) ([]cpAPIKey, error) {
	rows, err := s.db.Query(ctx, `SELECT `+cpAPIKeyColumns+` FROM cp.api_keys k LEFT JOIN cp.users u ON u.id = k.created_by
		WHERE k.org_id = $1 AND k.revoked_at IS NULL ORDER BY k.created_at`, org)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpAPIKey])
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return keys, nil
}

// revokeAPIKey revokes org's unrevoked key ref (its id, or a name exactly
// one such key has), appending ev with the key as its target;
// errCPNotFound when there is none.
func (s *cpStore) revokeAPIKey(ctx context.Context, org, ref string, ev cpAuditEvent) (cpAPIKey, error) {
	var k cpAPIKey
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE cp.api_keys SET revoked_at = now()
			WHERE id = (SELECT id FROM cp.api_keys WHERE org_id = $1 AND revoked_at IS NULL AND (id = $2 OR name = $2)
				AND (id = $2 OR (SELECT count(*) FROM cp.api_keys WHERE org_id = $1 AND revoked_at IS NULL AND name = $2) = 1)
				ORDER BY id = $2 DESC LIMIT 1)
			RETURNING id, name`, org, ref).Scan(&k.ID, &k.Name)
		if errors.Is(err, pgx.ErrNoRows) {
			return errCPNotFound
		}
		if err != nil {
			return err
		}
		ev.Target, ev.Detail = k.Name, "key "+k.ID
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, errCPNotFound) {
		err = fmt.Errorf("revoke API key: %w", err)
	}
	return k, err
}
