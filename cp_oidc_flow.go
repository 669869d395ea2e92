package main

// The single sign-on of the control plane's sign-in page (cp_oidc.go has
// the provider's side): "Sign in with <provider>" on the device page goes
// to GET /oidc/start, which sends the browser to the provider with an
// authorization code request (PKCE S256, a fresh state and nonce, stored
// in PostgreSQL as hashes with the sealed verifier, single-use, expiring
// in cpOIDCLoginTTL, and the state also in a cookie of this browser); the
// provider sends it back to GET /oidc/callback, which spends the state,
// exchanges the code, verifies the ID token, maps (issuer, sub) to a user
// (a first sign-in creates a member of the configured organization) and
// signs the browser in with the console cookie, as the one-time code does.
// Every refusal is audited (signin.failed) and answered with the sign-in
// page saying why.

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Values of the single sign-on flow.
const (
	// cpOIDCLoginTTL is how long a started sign-in waits for the provider.
	cpOIDCLoginTTL = 10 * time.Minute
	// cpOIDCCookie binds a started sign-in to the browser that started it
	// (its state): the callback is refused in any other browser, so a link
	// to someone else's callback signs nobody in as them.
	cpOIDCCookie = "svc_cp_oidc"
	// cpOIDCPendingPerSource and cpOIDCPendingMax cap the started sign-ins
	// waiting at once, per source address and in all (as device codes).
	cpOIDCPendingPerSource = 50
	cpOIDCPendingMax       = 10000
	// cpOIDCCallbackPath is the redirect URI's path, registered at the
	// provider as <control plane URL>/oidc/callback.
	cpOIDCCallbackPath = "/oidc/callback"
)

// errCPNoOrganization is a known single sign-on user who belongs to no
// organization any more (removed): they are not added back.
var errCPNoOrganization = errors.New("the user is in no organization")

// redirectURI is the control plane's redirect URI at the provider.
func (s *cpServer) redirectURI() string { return s.url + cpOIDCCallbackPath }

// setConsoleCookie signs the browser in with the console credential cred.
func (s *cpServer) setConsoleCookie(w http.ResponseWriter, cred string) {
	http.SetCookie(w, &http.Cookie{Name: cpCookie, Value: cred, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: strings.HasPrefix(s.origin(), "https:"), MaxAge: int((30 * 24 * time.Hour) / time.Second)})
}

// handleOIDCStart starts a single sign-on for ?return= (a path of the
// control plane, default the device page): it stores the sign-in and sends
// the browser to the provider's authorization endpoint.
func (s *cpServer) handleOIDCStart(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		cpError(w, http.StatusNotFound, codeNotFound, "single sign-on is not configured on this control plane (SVC_OIDC_ISSUER)")
		return
	}
	back, ok := cpReturnPath(r.URL.Query().Get("return"))
	if !ok {
		back = "/device"
	}
	d, err := s.oidc.discover(r.Context())
	if err != nil {
		s.oidcRefused(w, r, "", err)
		return
	}
	state, nonce, verifier := cpNewSecret(""), cpNewSecret(""), cpNewSecret("")
	err = s.store.startOIDC(r.Context(), state, nonce, verifier, back, rateLimitPeer(r), s.now().Add(cpOIDCLoginTTL))
	if errors.Is(err, errCPTooMany) {
		rateLimitRefuse(w, cpOIDCLoginTTL/2, "too many single sign-ins from your address (or in all) wait for the identity provider: finish them, or let them expire")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	auth, err := url.Parse(d.AuthorizationEndpoint)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	scope := "openid email profile"
	if len(s.oidc.cfg.Groups) > 0 {
		scope += " groups"
	}
	q := auth.Query()
	for k, v := range map[string]string{"response_type": "code", "client_id": s.oidc.cfg.ClientID, "redirect_uri": s.redirectURI(), "scope": scope,
		"state": state, "nonce": nonce, "code_challenge": identB64.EncodeToString(cpHash(verifier)), "code_challenge_method": "S256"} {
		q.Set(k, v)
	}
	auth.RawQuery = q.Encode()
	http.SetCookie(w, &http.Cookie{Name: cpOIDCCookie, Value: state, Path: "/oidc/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: strings.HasPrefix(s.origin(), "https:"), MaxAge: int(cpOIDCLoginTTL / time.Second)})
	http.Redirect(w, r, auth.String(), http.StatusSeeOther)
}

// cpOIDCSignedInPage goes on to where the sign-in was started from. A page
// of the control plane's own origin, not a redirect: the console cookie is
// SameSite=Strict, which a browser does not send on a redirect chain that
// began at the provider's site.
var cpOIDCSignedInPage = template.Must(template.New("signed-in").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>svc sign-in</title><link rel="icon" href="data:,">
<meta http-equiv="refresh" content="0;url={{.Back}}"></head>
<body><h1>svc sign-in</h1><p>Signed in as <b>{{.Email}}</b> through {{.Provider}}. <a href="{{.Back}}">Continue</a></p></body></html>
`))

// handleOIDCCallback finishes a single sign-on: the state must be this
// browser's (cpOIDCCookie) and a stored, unexpired, unspent one, which it
// spends; the provider's code is exchanged with the PKCE verifier, the ID
// token verified (cpOIDCProvider.verify) and the user allowed
// (cpOIDCConfig.allowed) and mapped (cpStore.oidcUser); the browser then
// has the console cookie and goes back where it started.
func (s *cpServer) handleOIDCCallback(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		cpError(w, http.StatusNotFound, codeNotFound, "single sign-on is not configured on this control plane (SVC_OIDC_ISSUER)")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cpOIDCCookie, Value: "", Path: "/oidc/", HttpOnly: true, MaxAge: -1})
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		s.oidcRefused(w, r, "", oidcRefuse(http.StatusBadRequest, "the identity provider's answer has no state"))
		return
	}
	if c, err := r.Cookie(cpOIDCCookie); err != nil || !hmac.Equal([]byte(c.Value), []byte(state)) {
		s.oidcRefused(w, r, "", oidcRefuse(http.StatusForbidden, "this answer of the identity provider is for a sign-in this browser did not start (its state is not this browser's), or the browser lost the sign-in's cookie"))
		return
	}
	login, err := s.store.takeOIDC(r.Context(), state)
	if errors.Is(err, errCPNotFound) {
		s.oidcRefused(w, r, "", oidcRefuse(http.StatusUnauthorized, "the sign-in's state is unknown, expired (after %v) or was used already", cpOIDCLoginTTL))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if e := q.Get("error"); e != "" {
		s.oidcRefused(w, r, "", oidcRefuse(http.StatusUnauthorized, "the identity provider answered %s: %s", cpClientText(e, 64), cpClientText(q.Get("error_description"), 200)))
		return
	}
	u, err := s.oidcSignIn(r.Context(), r, q.Get("code"), login)
	if err != nil {
		var refused *cpOIDCError
		if errors.As(err, &refused) {
			s.oidcRefused(w, r, u.Email, err)
		} else {
			s.internal(w, r, err)
		}
		return
	}
	cred, err := s.store.createCredential(r.Context(), u.ID, "console", cpCredentialBrowser)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.audit(r, cpAuditEvent{ActorID: u.ID, Actor: u.Email, Action: "signin", Target: u.Email, Detail: "single sign-on through " + s.oidc.cfg.Issuer + ", console credential"})
	s.setConsoleCookie(w, cred)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	cpOIDCSignedInPage.Execute(w, map[string]string{"Back": login.back, "Email": u.Email, "Provider": s.oidc.cfg.Name})
}

// oidcSignIn exchanges code for the ID token of login, verifies it and
// returns the user it maps to; a refusal is a *cpOIDCError, and the user
// then carries the token's email when it got that far.
func (s *cpServer) oidcSignIn(ctx context.Context, r *http.Request, code string, login cpOIDCLogin) (cpUser, error) {
	if code == "" {
		return cpUser{}, oidcRefuse(http.StatusBadRequest, "the identity provider's answer has no code")
	}
	d, err := s.oidc.discover(ctx)
	if err != nil {
		return cpUser{}, err
	}
	tok, err := s.oidc.exchange(ctx, d, code, login.verifier, s.redirectURI())
	if err != nil {
		return cpUser{}, err
	}
	c, err := s.oidc.verify(ctx, d, tok, login.nonceHash)
	if err != nil {
		return cpUser{}, err
	}
	email, err := cpCheckEmail(c.Email)
	if err != nil {
		return cpUser{}, oidcRefuse(http.StatusForbidden, "the identity provider's email claim: %v", err)
	}
	c.Email = email
	if err := s.oidc.cfg.allowed(c); err != nil {
		return cpUser{Email: email}, err
	}
	u, err := s.store.oidcUser(ctx, s.oidc.cfg, c, rateLimitPeer(r))
	switch {
	case errors.Is(err, errCPOtherAccount):
		return cpUser{Email: email}, oidcRefuse(http.StatusForbidden, "%s has an account on this control plane that is not linked to %s: sign in with it the way it was made (a one-time code); single sign-on never takes an account over by its email alone", email, s.oidc.cfg.Name)
	case errors.Is(err, errCPNoOrganization):
		return cpUser{Email: email}, oidcRefuse(http.StatusForbidden, "%s was removed from every organization of this control plane: ask an owner for an invitation", email)
	case errors.Is(err, errCPNotFound):
		return cpUser{Email: email}, oidcRefuse(http.StatusForbidden, "the organization %s that single sign-on joins (SVC_OIDC_ORG) does not exist: tell the control plane's operator", s.oidc.cfg.Org)
	}
	return u, err
}

// oidcRefused audits a refused single sign-on (the email, when the token
// named one) and answers the sign-in page saying why.
func (s *cpServer) oidcRefused(w http.ResponseWriter, r *http.Request, email string, err error) {
	var refused *cpOIDCError
	if !errors.As(err, &refused) {
		s.internal(w, r, err)
		return
	}
	s.log.Info("single sign-on refused", "email", email, "reason", refused.msg)
	s.audit(r, cpAuditEvent{Action: "signin.failed", Outcome: cpAuditRefused, Target: email, Detail: "single sign-on: " + refused.msg})
	s.devicePage(w, r, refused.status, "", "", "Single sign-on refused: "+refused.msg+".")
}

// cpOIDCLogin is a started sign-in as the callback reads it back.
type cpOIDCLogin struct {
	nonceHash []byte
	verifier  string
	back      string
}

// startOIDC stores a started sign-in (state and nonce hashed, the verifier
// sealed) from addr until expires, deleting the expired ones first;
// errCPTooMany when addr, or the control plane, has its cap waiting.
func (s *cpStore) startOIDC(ctx context.Context, state, nonce, verifier, back, addr string, expires time.Time) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM cp.oidc_logins WHERE expires_at < now()`); err != nil {
			return err
		}
		var mine, all int
		err := tx.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM (SELECT 1 FROM cp.oidc_logins WHERE used_at IS NULL AND client_addr = $1 LIMIT $2) m),
			(SELECT count(*) FROM (SELECT 1 FROM cp.oidc_logins WHERE used_at IS NULL LIMIT $3) a)`,
			addr, cpOIDCPendingPerSource, cpOIDCPendingMax).Scan(&mine, &all)
		if err != nil {
			return err
		}
		if mine >= cpOIDCPendingPerSource || all >= cpOIDCPendingMax {
			return errCPTooMany
		}
		h := cpHash(state)
		_, err = tx.Exec(ctx, `INSERT INTO cp.oidc_logins (state_hash, nonce_hash, verifier, return_to, client_addr, expires_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			h, cpHash(nonce), secretSeal(s.aead, []byte(verifier), cpOIDCVerifierAAD(h)), back, addr, expires)
		return err
	})
	if err != nil && !errors.Is(err, errCPTooMany) {
		err = fmt.Errorf("start single sign-on: %w", err)
	}
	return err
}

// cpOIDCVerifierAAD binds a sealed verifier to its sign-in's state hash.
func cpOIDCVerifierAAD(stateHash []byte) []byte {
	return []byte("oidc-verifier:" + hex.EncodeToString(stateHash))
}

// takeOIDC spends the started sign-in of state when it is stored, unspent
// and unexpired; errCPNotFound otherwise.
func (s *cpStore) takeOIDC(ctx context.Context, state string) (cpOIDCLogin, error) {
	var l cpOIDCLogin
	var sealed []byte
	h := cpHash(state)
	err := s.db.QueryRow(ctx, `UPDATE cp.oidc_logins SET used_at = now() WHERE state_hash = $1 AND used_at IS NULL AND expires_at > now()
		RETURNING nonce_hash, verifier, return_to`, h).Scan(&l.nonceHash, &sealed, &l.back)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, errCPNotFound
	}
	if err != nil {
		return l, fmt.Errorf("single sign-on state: %w", err)
	}
	v, err := secretOpen(s.aead, sealed, cpOIDCVerifierAAD(h))
	if err != nil {
		return l, fmt.Errorf("single sign-on verifier: %w (was the master key replaced?)", err)
	}
	l.verifier = string(v)
	return l, nil
}

// oidcUser returns the user of the verified claims c of cfg's provider,
// from source. A known (issuer, sub) is its user, whatever the email says
// now, unless they belong to no organization any more
// (errCPNoOrganization). An unknown one creates a user of c's email as a
// member of cfg.Org, an owner when cfg.owner says so (errCPNotFound when it does not exist), with the
// member.joined audit row, unless an account of that email exists
// (errCPOtherAccount): an email alone never maps to an account.
func (s *cpStore) oidcUser(ctx context.Context, cfg cpOIDCConfig, c *cpOIDCClaims, source string) (cpUser, error) {
	var u cpUser
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var inOrgs bool
		err := tx.QueryRow(ctx, `UPDATE cp.oidc_identities i SET last_sign_in_at = now(), email = $3 FROM cp.users u
			WHERE i.issuer = $1 AND i.subject = $2 AND u.id = i.user_id
			RETURNING u.id, u.email, u.name, EXISTS (SELECT 1 FROM cp.memberships m WHERE m.user_id = u.id)`,
			cfg.Issuer, c.Sub, c.Email).Scan(&u.ID, &u.Email, &u.Name, &inOrgs)
		switch {
		case err == nil && !inOrgs:
			return errCPNoOrganization
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var org string
		if err := tx.QueryRow(ctx, `SELECT id FROM cp.organizations WHERE slug = $1`, cfg.Org).Scan(&org); errors.Is(err, pgx.ErrNoRows) {
			return errCPNotFound
		} else if err != nil {
			return err
		}
		u = cpUser{ID: randomID("usr_", 8), Email: c.Email, Name: cpClientText(cpOIDCName(c.Name, c.Email), cpNameMax)}
		_, err = tx.Exec(ctx, `INSERT INTO cp.users (id, email, name) VALUES ($1, $2, $3)`, u.ID, u.Email, u.Name)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return errCPOtherAccount
		}
		if err != nil {
			return err
		}
		role, why := cpRoleMember, ""
		if cfg.owner(c) {
			role, why = cpRoleOwner, " (SVC_OIDC_OWNERS)"
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO cp.memberships (org_id, user_id, role) VALUES ($1, $2, $3)`, []any{org, u.ID, role}},
			{`INSERT INTO cp.oidc_identities (issuer, subject, user_id, email) VALUES ($1, $2, $3, $4)`, []any{cfg.Issuer, c.Sub, u.ID, u.Email}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return s.auditAppend(ctx, tx, cpAuditEvent{Org: org, ActorID: u.ID, Actor: u.Email, Action: "member.joined", Outcome: cpAuditOK,
			Target: u.Email, Source: source, Detail: "role " + role + why + ", first single sign-on through " + cfg.Issuer})
	})
	if err != nil && !errors.Is(err, errCPNoOrganization) && !errors.Is(err, errCPOtherAccount) && !errors.Is(err, errCPNotFound) {
		err = fmt.Errorf("single sign-on user: %w", err)
	}
	return u, err
}

// cpOIDCName is a user's name from the provider, or their email's local
// part when it gives none.
func cpOIDCName(name, email string) string {
	if strings.TrimSpace(name) != "" {
		return name
	}
	return strings.SplitN(email, "@", 2)[0]
}
