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

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// cpConsoleSignIn is the control plane's sign-in page (cp_device.go).
const cpConsoleSignIn = "/device"

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

// cpHandleConsoleFile serves the console's files, which index.html at
// /dev/{installation} refers to relatively (/dev/console/...).
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
