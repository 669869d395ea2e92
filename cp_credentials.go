package main

// User credentials have a life (issue 20 item 4). A credential (`svc
// login`'s, a browser's console cookie) expires a TTL after its last use,
// or after its creation when never used: the control plane's
// --credential-ttl (default cpCredentialTTLDefault). Its owner lists every
// live one with its device (the host name the CLI reported, or
// "browser"), created and last used, and revokes any, at once; `svc
// login` on a machine revokes the credential it replaces (cli_login.go).
// Every revocation is audited; nobody sees or revokes another user's.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limits of credentials.
const (
	// cpCredentialTTLDefault is how long an unused credential lives.
	cpCredentialTTLDefault = 30 * 24 * time.Hour
	// cpCredentialTTLMin and cpCredentialTTLMax bound --credential-ttl.
	cpCredentialTTLMin = time.Minute
	cpCredentialTTLMax = 366 * 24 * time.Hour
	// cpDeviceNameMax bounds a credential's device name, in bytes.
	cpDeviceNameMax = 255
	// cpCredentialBrowser is the device name of a browser's credential.
	cpCredentialBrowser = "browser"
)

// cpAPIKeyLive is the SQL condition of a usable row of cp.api_keys.
const cpAPIKeyLive = `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`

// cpCredentialLive is the SQL condition of a usable row c of
// cp.credentials, its TTL in seconds being the query parameter ttlParam
// ("$2").
func cpCredentialLive(ttlParam string) string {
	return `c.revoked_at IS NULL AND coalesce(c.last_used_at, c.created_at) > now() - make_interval(secs => ` + ttlParam + `::float8)`
}

// credentialTTL is how long s's unused credentials live.
func (s *cpStore) credentialTTL() time.Duration {
	if s.credTTL <= 0 {
		return cpCredentialTTLDefault
	}
	return s.credTTL
}

// cpCheckCredentialTTL checks a --credential-ttl.
func cpCheckCredentialTTL(d time.Duration) error {
	if d < cpCredentialTTLMin || d > cpCredentialTTLMax {
		return fmt.Errorf("--credential-ttl %s: want %s to %s (e.g. 720h for 30 days)", d, cpCredentialTTLMin, cpCredentialTTLMax)
	}
	return nil
}

// cpCredential is a live credential of a user as its owner sees it.
type cpCredential struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"` // cli or console
	Device     string     `json:"device"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	Current    bool       `json:"current"` // the one this request carried
}

// cpCredentialList is the answer of GET /api/credentials.
type cpCredentialList struct {
	User        cpUser         `json:"user"`
	TTLSeconds  int64          `json:"ttl_seconds"`
	Credentials []cpCredential `json:"credentials"`
}

// handleListCredentials lists the caller's live credentials.
func (s *cpServer) handleListCredentials(w http.ResponseWriter, r *http.Request) {
	c := caller(r)
	list, err := s.store.listCredentials(r.Context(), c.user.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	for i := range list {
		list[i].Current = list[i].ID == c.credID
	}
	writeJSON(w, http.StatusOK, cpCredentialList{User: c.user, TTLSeconds: int64(s.store.credentialTTL().Seconds()), Credentials: list})
}

// handleRevokeCredential revokes the caller's live credential {id}; 404
// no_credential for any other (another user's included).
func (s *cpServer) handleRevokeCredential(w http.ResponseWriter, r *http.Request) {
	c := caller(r)
	ev := auditEvent(r, cpAuditEvent{Action: "credential.revoked", Target: c.user.Email})
	cred, err := s.store.revokeOwnCredential(r.Context(), c.user.ID, r.PathValue("id"), ev)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, "no_credential", fmt.Sprintf("no live credential %q of yours: svc devices list shows them", cpClientText(r.PathValue("id"), 64)))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	cred.Current = cred.ID == c.credID
	writeJSON(w, http.StatusOK, map[string]any{"revoked": cred})
}

// cpCredentialColumns are the columns a cpCredential scans from
// cp.credentials c (but Current), the TTL being the parameter $2.
const cpCredentialColumns = `c.id, c.kind, c.name, c.created_at, c.last_used_at, coalesce(c.last_used_at, c.created_at) + make_interval(secs => $2::float8), false`

// listCredentials lists user's live credentials, the last used first.
func (s *cpStore) listCredentials(ctx context.Context, user string) ([]cpCredential, error) {
	rows, err := s.db.Query(ctx, `SELECT `+cpCredentialColumns+` FROM cp.credentials c
		WHERE c.user_id = $1 AND `+cpCredentialLive("$2")+` ORDER BY coalesce(c.last_used_at, c.created_at) DESC, c.id`,
		user, s.credentialTTL().Seconds())
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpCredential])
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	return list, nil
}

// revokeOwnCredential revokes user's live credential id, appending ev;
// errCPNotFound when user has no such live credential.
func (s *cpStore) revokeOwnCredential(ctx context.Context, user, id string, ev cpAuditEvent) (cpCredential, error) {
	var cred cpCredential
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE cp.credentials c SET revoked_at = now() WHERE c.user_id = $1 AND c.id = $3 AND `+cpCredentialLive("$2")+`
			RETURNING `+cpCredentialColumns, user, s.credentialTTL().Seconds(), id).
			Scan(&cred.ID, &cred.Kind, &cred.Device, &cred.CreatedAt, &cred.LastUsedAt, &cred.ExpiresAt, &cred.Current)
		if errors.Is(err, pgx.ErrNoRows) {
			return errCPNotFound
		}
		if err != nil {
			return err
		}
		ev.Detail = fmt.Sprintf("credential %s (%s, device %q) revoked", cred.ID, cred.Kind, cred.Device)
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, errCPNotFound) {
		err = fmt.Errorf("revoke credential: %w", err)
	}
	return cred, err
}
