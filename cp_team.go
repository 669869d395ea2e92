package main

// The team page of the control plane (issue 20, the console part of items
// 1, 3 and 5): GET /team/{org} serves a page (cp_pages/) that lists the
// organization's members and agents (with their deployments) and, for its
// owners and admins, creates, renames and deletes agents, creates and
// revokes API keys, invites, changes roles, removes members and shows the
// audit log and its verification. The
// page holds no data: its script calls the JSON API with the console
// cookie, which enforces every role, and sends a browser not signed in to
// the sign-in page, which comes back.

import (
	"embed"
	"net/http"
)

// cpPagesFS holds the team page and its script; a package variable
// because go:embed only fills those. Nothing writes it.
//
//go:embed cp_pages/*
var cpPagesFS embed.FS

// cpPageCSP is the team page's Content-Security-Policy: its own script, its
// inline style, calls to its own origin, nothing else.
const cpPageCSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// cpServePage answers the embedded file name with its type.
func cpServePage(w http.ResponseWriter, r *http.Request, name, contentType string) {
	b, err := cpPagesFS.ReadFile("cp_pages/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", cpPageCSP)
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(b)
}

// cpHandleTeamPage serves the team page of any {org}: the page shows only
// what the API answers the signed-in browser.
func cpHandleTeamPage(w http.ResponseWriter, r *http.Request) {
	cpServePage(w, r, "team.html", "text/html; charset=utf-8")
}

// cpHandleTeamScript serves the team page's script.
func cpHandleTeamScript(w http.ResponseWriter, r *http.Request) {
	cpServePage(w, r, "team.js", "text/javascript; charset=utf-8")
}
