package main

// The console at svc dev's deeplink (issue 12): the control plane serves
// the web console at GET /dev/{installation}?url=<public URL>, the pages
// calling that svc dev session through the relay. The page is public (the
// terminal's link is a cross-site navigation, which carries no SameSite
// cookie); from it the browser asks the control plane, with the console
// cookie, for an identity token for the installation (POST
// /api/installations/{id}/token), sends it as the bearer of every API
// call and renews it before it expires; a browser not signed in is sent
// to the sign-in page.
//
// The console of a deployed agent (issue 12) works the same way at GET
// /box/{installation}, where a box sends a browser opening its URL
// (box.go): the pages call the deployment URL the control plane recorded
// at svc link, with identity tokens of POST
// /api/installations/{id}/resolve; the box answers CORS for this control
// plane's origin (cors.go). The page is served to the signed-in user of
// an installation of their organizations only. The console cookie is
// SameSite=Strict, so the box's redirect (a cross-site navigation) comes
// without it: a request without it is answered a page that reloads
// itself, a same-site navigation that carries it, and a browser still
// without it is sent to the sign-in page, which returns to the console.

import (
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Paths of the console pages.
const (
	// cpConsoleSignIn is the control plane's sign-in page (cp_device.go).
	cpConsoleSignIn = "/device"
	// cpBoxConsolePath is the prefix of a deployment's console: the page
	// at /box/{installation}, its files under /box/console/.
	cpBoxConsolePath = "/box/"
	// cpBoxReloaded is the query parameter of the page's self-reload, which
	// tells a browser not signed in from one whose cookie was withheld.
	cpBoxReloaded = "reloaded"
)

// handleConsole serves the console's index.html for the deeplink of
// installation, its API base the session's public URL (the url query,
// validated by cpConsolePublicURL against the relay's domain); 400 for any
// other url, 404 when the control plane knows no relay domain (the page
// would send the installation's token to any host it is given).
func (s *cpServer) handleConsole(w http.ResponseWriter, r *http.Request) {
	if s.tunnelDomain == "" {
		cpError(w, http.StatusNotFound, codeNotFound, "this control plane serves no console for svc dev sessions: set SVC_TUNNEL_DOMAIN to the relay's --domain")
		return
	}
	id := r.PathValue("installation")
	public, err := cpConsolePublicURL(id, r.URL.Query().Get("url"), s.tunnelDomain)
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	index := consoleIndex(public, "/api/installations/"+url.PathEscape(id)+"/token", cpConsoleSignIn)
	consoleServe(w, r, "/", index, consoleCSP(public))
}

// handleBoxConsole serves the console's index.html for the deployment of
// installation, its API base the deployment's URL, its token URL the
// installation's resolve; 404 for an installation not in the signed-in
// user's organizations or without a deployment (cpServer.deployed).
func (s *cpServer) handleBoxConsole(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("installation")
	page := cpBoxConsolePath + url.PathEscape(id)
	user, err := s.cookieUser(r)
	switch {
	case err != nil && !errors.Is(err, errCPNotFound):
		s.internal(w, r, err)
		return
	case err != nil && r.URL.Query().Has(cpBoxReloaded):
		http.Redirect(w, r, cpConsoleSignIn+"?return="+url.QueryEscape(page), http.StatusSeeOther)
		return
	case err != nil:
		cpBoxReload(w, page+"?"+cpBoxReloaded)
		return
	}
	in, d, ok := s.deployed(w, r, user.ID, id)
	if !ok {
		return
	}
	index := consoleIndex(d.URL, "/api/installations/"+url.PathEscape(in.ID)+"/resolve", cpConsoleSignIn)
	consoleServe(w, r, "/", index, consoleCSP(d.URL))
}

// cpBoxReload answers a page that loads target (a path of this control
// plane) at once: a navigation of this origin, which carries the
// SameSite=Strict console cookie a cross-site redirect withheld.
func cpBoxReload(w http.ResponseWriter, target string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	t := html.EscapeString(target)
	io.WriteString(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0; url=`+t+
		`"><title>svc console</title><link rel="icon" href="data:,"></head><body><p>Opening the console… <a href="`+t+`">Continue</a></p></body></html>`+"\n")
}

// cpHandleConsoleFile serves the console's files, which index.html at
// /dev/{installation} and /box/{installation} refers to relatively
// (/dev/console/..., /box/console/...).
func cpHandleConsoleFile(w http.ResponseWriter, r *http.Request) {
	name := consoleAssetPrefix + r.PathValue("file")
	if name == consoleAssetPrefix+"index.html" {
		http.NotFound(w, r) // only at the deeplink, with its URLs
		return
	}
	consoleServe(w, r, name, consoleAsset{}, consoleCSP(""))
}

// cpConsolePublicURL checks that raw is the public URL the relay of
// domain gives installation's session,
// https://<relaySubdomain(installation)>.tun.<domain> (a port allowed,
// which url.Parse checks; nothing after the host), and returns it without
// a trailing slash: the pages send that installation's identity token
// there, so another installation's host, or another relay's, is refused.
func cpConsolePublicURL(installation, raw, domain string) (string, error) {
	sub := relaySubdomain(installation)
	bad := fmt.Errorf("console deeplink: url %q is not the public URL of installation %s's svc dev session: open the deeplink svc dev prints (https://%s.tun.<relay domain>)", raw, installation, sub)
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", bad
	}
	if strings.ToLower(u.Hostname()) != sub+".tun."+strings.ToLower(domain) {
		return "", bad
	}
	return "https://" + strings.ToLower(u.Host), nil
}
