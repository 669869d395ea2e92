package main

// The local services on the console's settings page (DESIGN §10: "local
// service URLs and keys on request"). GET /api/dev/services lists what
// `svc env` prints with the secrets left out; POST /api/dev/services/reveal
// answers them, on the click that asks. Both are dev-only routes
// (devRoutes): the box never serves them, and the tunnel refuses /api/dev/
// (tunnelHandler), so a relayed page cannot reach them. The console's page
// proves it may see the keys with a cookie holding the session token,
// set by the link svc dev prints (GET /api/dev/console?session=…): being
// on this machine is not enough, since .svc's secrets are kept from the
// machine's other users (0600 files).

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
)

// devSessionCookie holds the session token for the console's page: HttpOnly,
// SameSite=Strict, sent only to the dev-only routes.
const devSessionCookie = "svc_dev_session"

// devConsoleLink is the console link svc dev prints: it sets the session
// cookie, then opens the console.
func (rt *devRuntime) devConsoleLink() string {
	return rt.apiURL + "/api/dev/console?session=" + url.QueryEscape(rt.devToken)
}

// handleDevConsole serves GET /api/dev/console?session=<token>: the
// session token becomes the console's cookie and the browser goes on to
// the console; a wrong token is 403.
func (rt *devRuntime) handleDevConsole(w http.ResponseWriter, r *http.Request) {
	if !devFromLoopback(w, r) {
		return
	}
	tok := r.URL.Query().Get("session")
	if !rt.devTokenIs(tok) {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "dev_token", Message: "this link is not this session's: open the Console link the running svc dev printed"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: devSessionCookie, Value: tok, Path: "/api/dev/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/#/settings", http.StatusSeeOther)
}

// devSecretVars are the variables of devToolEnvVars whose values the list
// leaves out until revealed: DATABASE_URL shows with its password hidden,
// the keys not at all.
var devSecretVars = map[string]bool{"DATABASE_URL": true, "S3_ACCESS_KEY_ID": true, "S3_SECRET_ACCESS_KEY": true}

// devServiceVar is one variable of a service as `svc env` names it. Value
// is "" for a secret (DATABASE_URL: the URL with its password hidden).
type devServiceVar struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Secret bool   `json:"secret,omitempty"`
}

// devService is one local service: what it is, its URL, its variables.
type devService struct {
	Name string          `json:"name"`
	URL  string          `json:"url"`
	Vars []devServiceVar `json:"vars"`
}

// devServices lists the session's services: the API (and its public URL
// through the tunnel), PostgreSQL and object storage, secrets left out.
func (rt *devRuntime) devServices() []devService {
	env := rt.toolEnv()
	vars := func(names ...string) []devServiceVar {
		out := make([]devServiceVar, 0, len(names))
		for _, n := range names {
			v := devServiceVar{Name: n, Value: env[n], Secret: devSecretVars[n]}
			if v.Secret {
				v.Value = ""
			}
			if n == "DATABASE_URL" {
				v.Value = redactURL(env[n])
			}
			out = append(out, v)
		}
		return out
	}
	list := []devService{{Name: "API and console", URL: rt.apiURL, Vars: []devServiceVar{}}}
	if public, _ := rt.tunnel.urls(); public != nil {
		list = append(list, devService{Name: "Public URL (tunnel)", URL: *public, Vars: []devServiceVar{}})
	}
	return append(list,
		devService{Name: "PostgreSQL", URL: redactURL(env["DATABASE_URL"]), Vars: vars("DATABASE_URL")},
		devService{Name: "Object storage (S3)", URL: env["S3_ENDPOINT"], Vars: vars("S3_ENDPOINT", "S3_BUCKET", "S3_REGION", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY")})
}

// handleDevServices serves GET /api/dev/services: the local services
// without their secrets, to a caller on this machine.
func (rt *devRuntime) handleDevServices(w http.ResponseWriter, r *http.Request) {
	if !devFromLoopback(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "services": rt.devServices()})
}

// handleDevServicesReveal serves POST /api/dev/services/reveal: the
// values `svc env` prints, to the console's own page (see
// devConsoleRequest) or to a caller with the session token, on this
// machine only.
func (rt *devRuntime) handleDevServicesReveal(w http.ResponseWriter, r *http.Request) {
	if !devFromLoopback(w, r) {
		return
	}
	if !rt.devTokenValid(r) && !rt.devConsoleAllowed(r) {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "dev_token",
			Message: "to show the keys here, open the console from the Console link svc dev printed (it carries this session's token), or run svc env in the project"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "env": rt.toolEnv()})
}

// devFromLoopback reports whether r comes from this machine, else answers
// 403: the local credentials are never served over the network (--listen).
func devFromLoopback(w http.ResponseWriter, r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if addr, perr := netip.ParseAddr(host); err != nil || perr != nil || !addr.Unmap().IsLoopback() {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "not_loopback", Message: "the local credentials are served to this machine only"})
		return false
	}
	return true
}

// devTokenValid reports whether r shows the session token of
// .svc/runtime.json (proof that it can read the project's private state).
func (rt *devRuntime) devTokenValid(r *http.Request) bool {
	return rt.devTokenIs(r.Header.Get(devTokenHeader))
}

// devTokenIs compares tok with the session token in constant time.
func (rt *devRuntime) devTokenIs(tok string) bool {
	return rt.devToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(rt.devToken)) == 1
}

// devConsoleAllowed reports whether r comes from the console's own page
// (devConsoleRequest) with the session cookie of the printed link.
func (rt *devRuntime) devConsoleAllowed(r *http.Request) bool {
	c, err := r.Cookie(devSessionCookie)
	return err == nil && devConsoleRequest(r) && rt.devTokenIs(c.Value)
}

// devConsoleRequest reports whether r was sent by a page of this very
// server (the console), as the browser tells: Sec-Fetch-Site same-origin
// and an Origin equal to the address requested (scheme, host and port).
// Both are headers a page cannot set, so no other site, no other localhost
// port and no relayed page passes. A program on this machine can send
// them: the session cookie (devConsoleAllowed) is the proof.
func devConsoleRequest(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") != "same-origin" {
		return false
	}
	o, err := httpGuardParseOrigin(r.Header.Get("Origin"))
	scheme := "http://"
	if r.TLS != nil { // svc dev --tls
		scheme = "https://"
	}
	self, serr := httpGuardParseOrigin(scheme + r.Host)
	return err == nil && serr == nil && o == self
}
