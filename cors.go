package main

// CORS for the console (issue 12): a page of the console served by a
// control plane calls a server of another origin from the browser (a box
// at its deployment URL, svc dev through the relay) with an identity
// token. Such a server answers CORS for that one origin, its trusted
// control plane's: a preflight is answered 204 before any token is asked
// for (Authorization allowed), and every answer to that origin carries
// Access-Control-Allow-Origin. Other origins get no CORS header, so their
// pages can neither send the token header nor read an answer.

import (
	"fmt"
	"net/http"
	"net/url"
)

// corsConsoleOrigin is the browser origin of the console of the control
// plane at cpURL: its scheme://host[:port], normalized as
// httpGuardParseOrigin does (so it compares equal to a parsed Origin
// header).
func corsConsoleOrigin(cpURL string) (string, error) {
	u, err := url.Parse(cpURL)
	if err == nil {
		var o httpGuardOrigin
		if o, err = httpGuardParseOrigin(u.Scheme + "://" + u.Host); err == nil {
			return o.String(), nil
		}
	}
	return "", fmt.Errorf("control plane URL %q: want an http:// or https:// URL with a host", cpURL)
}

// corsConsole answers CORS for console, an origin of corsConsoleOrigin
// ("" = none): a preflight from it is answered here (204) and reported
// true, the caller then done; any other request from it gets
// Access-Control-Allow-Origin. Requests of other origins are left alone.
// Every answer varies by Origin.
func corsConsole(w http.ResponseWriter, r *http.Request, console string) bool {
	w.Header().Add("Vary", "Origin")
	o, err := httpGuardParseOrigin(r.Header.Get("Origin"))
	if console == "" || err != nil || o.String() != console {
		return false
	}
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		w.Header().Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
		corsPreflight(w, r)
		return true
	}
	w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
	return false
}

// corsPreflight answers an allowed CORS preflight: 204 granting r's origin
// the methods of httpGuardAllowedMethods and the headers it asked for,
// cacheable for httpGuardPreflightMaxAge seconds (the caller sets Vary).
func corsPreflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
	h.Set("Access-Control-Allow-Methods", httpGuardAllowedMethods)
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", fmt.Sprint(httpGuardPreflightMaxAge))
	w.WriteHeader(http.StatusNoContent)
}
