package main

// The box's credential check (SPEC §5, DESIGN §7), the one middleware's
// (http_guard.go) for `svc serve`:
//
//   - CORS is answered for the trusted control plane's console only
//     (cors.go), its preflights before any credential;
//   - GET /.well-known/svc and GET / (which sends a browser to the
//     console at the control plane, box.go) are public;
//   - the rest of /.well-known/svc/ must be signed by the control plane;
//   - any request carrying a signature is verified (control plane traffic,
//     proxied or not) and, when valid, admitted to every route; a refusal
//     names its check in x-svc-signature-refused, and one for capacity
//     (the replay window full, or its database unreachable) is 503 with
//     Retry-After: it says nothing about the secret;
//   - the chat wires, and the transcripts of durable sessions (scoped to
//     the credential that made them), and GET /metrics (a scraper's
//     static bearer) take a key of SVC_API_KEYS or an identity token;
//   - every other route (runs, workflows, console) takes an identity token
//     for the organization and installation the box was taught.
//
// A refusal is 401 naming the check that failed, never the secret; on a
// chat wire it has that wire's error shape.

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// admit decides whether r may reach its route (httpGuardAuth).
func (b *boxRuntime) admit(w http.ResponseWriter, r *http.Request) bool {
	if corsConsole(w, r, b.console()) {
		return false
	}
	path := r.URL.Path
	if ((path == boxWellKnown || path == "/") && (r.Method == http.MethodGet || r.Method == http.MethodHead)) || healthProbe(r) {
		return true
	}
	if strings.HasPrefix(path, boxWellKnown+"/") || boxSigned(r) {
		if err := b.signer.verifyRequest(r, maxRequestBody); err != nil {
			check := signCheckName(err)
			if check == "" {
				// The replay window lives in the database: it could not be
				// asked. The driver's words (host, port, role, database) go
				// to the log, never to the caller (issue 36, item 14).
				b.log.Error("signed request refused: the database is unavailable", "path", path, "err", err)
				boxDatabaseDown(w, r)
				return false
			}
			if check == signCheckNames[errSignCapacity] {
				b.log.Warn("signed request refused for capacity", "path", path, "err", err)
				boxBusy(w, r, err.Error()+": retry in a moment")
				return false
			}
			w.Header().Set(signRefusedHeader, check)
			boxRefuse(w, r, "signature", err.Error()+": the control plane signs this route with the box's signing secret")
			return false
		}
		// The control plane names the caller it proxies for; durable
		// sessions are scoped to that caller (only a signed request may
		// say so, and its signature covers the name: sign.go).
		if p := r.Header.Get(signPrincipalHeader); p != "" {
			*r = *r.WithContext(context.WithValue(r.Context(), httpGuardPrincipalKey{}, "signed:"+p))
		}
		return true
	}
	cred := wireCredential(r)
	if (httpGuardWire(path) != nil || boxSessionRead(r) || metricsScrapeRequest(r)) && b.keys.keyValid(cred) {
		return true
	}
	v := b.ident.Load()
	if v == nil || b.taught.Load() == nil {
		boxRefuse(w, r, "untaught", "this box was never linked, so it admits no console or CLI traffic yet: run svc link")
		return false
	}
	c, err := v.verify(r.Context(), identBearer(r))
	if err != nil {
		msg := err.Error()
		if errors.Is(err, errIdentMissing) {
			msg += ": send Authorization: Bearer <identity token> (svc --agent and the console get one from the control plane)"
		}
		if errors.Is(err, errIdentNoKeys) {
			msg += ": this box is unarmed (it has not reached its control plane's keys; set SVC_CONTROL_PLANE_URL or re-link it)"
		}
		boxRefuse(w, r, "identity", msg)
		return false
	}
	// A durable session belongs to the user, not to one of the tokens
	// that are renewed every few minutes.
	*r = *r.WithContext(context.WithValue(r.Context(), httpGuardPrincipalKey{}, c.principal()))
	return true
}

// console is the browser origin answered CORS: the console's at the
// control plane the box trusts ("" when its URL has no origin).
func (b *boxRuntime) console() string {
	cpURL, _ := b.controlPlane()
	o, _ := corsConsoleOrigin(cpURL)
	return o
}

// boxSigned reports whether r carries any of the signature headers.
func boxSigned(r *http.Request) bool {
	for _, h := range signHeaders {
		if r.Header.Get(h) != "" {
			return true
		}
	}
	return false
}

// boxBusy answers 503 replay_window_full with Retry-After and
// x-svc-signature-refused: capacity, in the wire's shape on a chat wire: a
// signed request the box cannot take now, whatever its secret.
func boxBusy(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("Retry-After", "60")
	w.Header().Set(signRefusedHeader, signCheckNames[errSignCapacity])
	if wire := httpGuardWire(r.URL.Path); wire != nil {
		wire.writeError(w, &wireError{Status: http.StatusServiceUnavailable, Kind: signCodeReplayWindow, Message: msg})
		return
	}
	writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: signCodeReplayWindow, Message: msg})
}

// boxCodeDatabaseDown is the error code of a signed request the box could
// not check because its database is down.
const boxCodeDatabaseDown = "database_unavailable"

// boxDatabaseDown answers 503 database_unavailable with Retry-After and no
// detail, in the wire's shape on a chat wire.
func boxDatabaseDown(w http.ResponseWriter, r *http.Request) {
	const msg = "the box's database is unavailable: retry in a moment (the box's log has the detail)"
	w.Header().Set("Retry-After", "5")
	if wire := httpGuardWire(r.URL.Path); wire != nil {
		wire.writeError(w, &wireError{Status: http.StatusServiceUnavailable, Kind: boxCodeDatabaseDown, Message: msg})
		return
	}
	writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: boxCodeDatabaseDown, Message: msg})
}

// boxRefuse answers 401 with code and msg, in the wire's shape on a chat
// wire.
func boxRefuse(w http.ResponseWriter, r *http.Request, code, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="svc"`)
	if wire := httpGuardWire(r.URL.Path); wire != nil {
		wire.writeError(w, &wireError{Status: http.StatusUnauthorized, Kind: wireErrAuth, Message: msg})
		return
	}
	writeAPIError(w, http.StatusUnauthorized, apiError{Code: code, Message: msg})
}

// boxSessionRead reports whether r reads a durable session's transcript
// (GET /api/agents/{agent}/sessions/{id}): a key's client may read its own
// sessions, as an identity's may.
func boxSessionRead(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/agents/")
	parts := strings.Split(rest, "/")
	return ok && len(parts) == 3 && parts[0] != "" && parts[1] == "sessions" && parts[2] != ""
}
