package main

// The local services on the console's settings page (DESIGN §10: "local
// service URLs and keys on request"). GET /api/dev/services lists what
// `svc env` prints with the secrets left out; POST /api/dev/services/reveal
// answers them, on the click that asks. Both are dev-only routes
// (devRoutes): the box never serves them, and the tunnel refuses /api/dev/
// (tunnelHandler), so a relayed page cannot reach them. The console's page
// proves it may see the keys with a console session, traded for the
// one-time code of the link svc dev prints (console_session.go), or with
// the dev key: being the developer's browser is not enough, since any page
// it shows could ask.

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
)

// devConsoleLink is the console link svc dev prints: the console with an
// unused one-time code in the fragment (console_session.go). The code of
// the last link stays until a browser spends it; a later announcement then
// prints a fresh one.
func (rt *devRuntime) devConsoleLink() string {
	if rt.consoleCode == "" || !rt.console.pending(rt.consoleCode) {
		rt.consoleCode = rt.console.mintCode()
	}
	return rt.apiURL + "/#code=" + rt.consoleCode
}

// handleDevConsoleLink serves POST /api/dev/console-link to `svc console`:
// a link with a new one-time code, for a caller on this machine that
// shows the session token of .svc/runtime.json.
func (rt *devRuntime) handleDevConsoleLink(w http.ResponseWriter, r *http.Request) {
	if !devFromLoopback(w, r) || !rt.devTokenRequired(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "url": rt.apiURL + "/#code=" + rt.console.mintCode()})
}

// devEnvVars are what `svc env` prints: the services' variables
// (devToolEnvVars), then the API's URL and the dev key for SDK clients
// and scripts.
var devEnvVars = append(devToolEnvVars[:len(devToolEnvVars):len(devToolEnvVars)], "SVC_DEV_URL", "SVC_DEV_KEY")

// devEnv is the values of devEnvVars.
func (rt *devRuntime) devEnv() map[string]string {
	env := rt.toolEnv()
	env["SVC_DEV_URL"], env["SVC_DEV_KEY"] = rt.apiURL, rt.guardKeys.devKey()
	return env
}

// devSecretVars are the variables of devToolEnvVars whose values the list
// leaves out until revealed: DATABASE_URL shows with its password hidden,
// the keys not at all.
var devSecretVars = map[string]bool{"DATABASE_URL": true, "S3_ACCESS_KEY_ID": true, "S3_SECRET_ACCESS_KEY": true, "SVC_DEV_KEY": true}

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
	env := rt.devEnv()
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
	list := []devService{{Name: "API and console", URL: rt.apiURL, Vars: vars("SVC_DEV_URL", "SVC_DEV_KEY")}}
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
	if !rt.devTokenValid(r) && !devKeyShown(r) {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "dev_token",
			Message: "to show the keys here, open the console from the link svc dev printed (each link opens one browser) or sign in with the dev key (.svc/" + devAPIKeyFile + "), or run svc env in the project"})
		return
	}
	env := rt.devEnv()
	if devConsoleSessionShown(r) && !rt.devTokenValid(r) {
		// A session is worth less than the key: it dies with svc dev and
		// with a rotation, and it never hands out the key (issue 36, item 1).
		delete(env, "SVC_DEV_KEY")
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "env": env})
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

// devTokenRequired reports whether r shows the session token of
// .svc/runtime.json, else answers 403 saying what to send.
func (rt *devRuntime) devTokenRequired(w http.ResponseWriter, r *http.Request) bool {
	if rt.devTokenValid(r) {
		return true
	}
	writeAPIError(w, http.StatusForbidden, apiError{Code: "dev_token", Message: "send the token of .svc/" + devRuntimeFileName + " in " + devTokenHeader + " (svc env and svc console do)"})
	return false
}

// devTokenIs compares tok with the session token in constant time.
func (rt *devRuntime) devTokenIs(tok string) bool {
	return rt.devToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(rt.devToken)) == 1
}

// devKeyShown reports whether the guard admitted r with the project's dev
// key or a console session traded for the link svc dev printed.
func devKeyShown(r *http.Request) bool {
	v, _ := r.Context().Value(httpGuardDevKey{}).(httpGuardProof)
	return v != 0
}

// devConsoleSessionShown reports whether the guard admitted r with a
// console session (not the dev key itself).
func devConsoleSessionShown(r *http.Request) bool {
	v, _ := r.Context().Value(httpGuardDevKey{}).(httpGuardProof)
	return v == httpGuardConsoleSession
}

// handleDevRotateKey serves POST /api/dev/rotate-key to `svc rotate-key`:
// a new dev key, written to .svc (0600) before the old one is refused, and
// the end of every console session (each was made from a link or a key of
// before). The answer never holds the key: `svc env` prints it.
func (rt *devRuntime) handleDevRotateKey(w http.ResponseWriter, r *http.Request) {
	if !devFromLoopback(w, r) || !rt.devTokenRequired(w, r) {
		return
	}
	key, err := devAPIKeyRotate(rt.proj.stateDir(devAPIKeyFile))
	if err != nil {
		rt.log.Error("rotate the dev key", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "the dev key could not be written; the old one still holds (see svc dev's log)"})
		return
	}
	rt.guardKeys.rotateDevKey(key)
	ended := rt.console.endAll()
	rt.log.Info("dev key rotated", "console_sessions_ended", ended)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "rotated": true, "console_sessions_ended": ended})
}
