package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestCPConsolePublicURL accepts only the session's own public URL,
// https://<its subdomain>.tun.<domain>[:port], and refuses anything a
// forged deeplink could send the installation's token to.
func TestCPConsolePublicURL(t *testing.T) {
	sub := relaySubdomain("ldi_1")
	for raw, want := range map[string]string{
		"https://" + sub + ".tun.example.com":                       "https://" + sub + ".tun.example.com",
		"https://" + sub + ".tun.example.com/":                      "https://" + sub + ".tun.example.com",
		"https://" + strings.ToUpper(sub) + ".TUN.example.com:8443": "https://" + sub + ".tun.example.com:8443",
	} {
		if got, err := cpConsolePublicURL("ldi_1", raw, "example.com"); err != nil || got != want {
			t.Errorf("cpConsolePublicURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{
		"", "http://" + sub + ".tun.example.com", "https://" + relaySubdomain("ldi_2") + ".tun.example.com",
		"https://" + sub + ".tun.", "https://" + sub + ".tun..example.com", "https://" + sub + ".tun.example.com/x",
		"https://" + sub + ".tun.example.com?a=1", "https://" + sub + ".tun.example.com#f", "https://u:p@" + sub + ".tun.example.com",
		"https://x." + sub + ".tun.example.com", "https://" + sub + ".example.com", "https://" + sub + ".tun.ex_ample.com",
		"https://" + sub + ".tun.example.com:x", "//" + sub + ".tun.example.com", "https:" + sub + ".tun.example.com",
		"https://" + sub + ".tun.evil.com", "https://" + sub + ".tun.example.com.evil.com", "https://" + sub + ".tun.sub.example.com",
	} {
		if got, err := cpConsolePublicURL("ldi_1", raw, "example.com"); err == nil || !strings.Contains(err.Error(), sub+".tun.<relay domain>") {
			t.Errorf("cpConsolePublicURL(%q) = %q, %v; want an error naming the expected host", raw, got, err)
		}
	}
}

// TestCPConsoleDeeplink runs the control plane as a process: GET
// /dev/{installation}?url= serves the console without a credential, its
// API base the public URL, its token URL the installation's, the public
// URL in the CSP's connect-src; a bad url is 400; the files are under
// /dev/console/. A browser signed in on the device page (the console
// cookie) gets the installation's token from the page's origin only.
func TestCPConsoleDeeplink(t *testing.T) {
	cp, code := startTestControlPlane(t, testPostgresURL(t))
	send := func(method, path, cookie, origin string, form url.Values) (*http.Response, string) {
		t.Helper()
		return cpConsoleSend(t, cp.url, method, path, cookie, origin, form)
	}

	// The device page's sign-in sets the console cookie.
	resp, _ := send("POST", "/device/sign-in", "", cp.url, url.Values{"sign_in_code": {code}})
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == cpCookie {
			cookie = c.Value
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == "" {
		t.Fatalf("device page sign-in = %d, cookie %q", resp.StatusCode, cookie)
	}
	// The cookie's value is a credential: the setup sends it as a bearer.
	var local cpInstallation
	if code := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents", cookie, map[string]string{"slug": "demo"}, nil); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	if code := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents/demo/local-dev-installation", cookie, nil, &local); code != 200 {
		t.Fatalf("local-dev installation = %d", code)
	}
	public := "https://" + relaySubdomain(local.ID) + ".tun.test:8443"

	resp, page := send("GET", "/dev/"+local.ID+"?url="+url.QueryEscape(public), "", "", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(page, `name="svc-api-base" content="`+public+`"`) ||
		!strings.Contains(page, `name="svc-token-url" content="/api/installations/`+local.ID+`/token"`) ||
		!strings.Contains(page, `name="svc-sign-in-url" content="/device"`) || !strings.Contains(csp, "connect-src 'self' "+public+";") {
		t.Fatalf("GET the deeplink = %d, CSP %q\n%s", resp.StatusCode, csp, page)
	}
	if resp, body := send("GET", "/dev/"+local.ID+"?url="+url.QueryEscape("https://evil.tun.test"), "", "", nil); resp.StatusCode != 400 || !strings.Contains(body, "is not the public URL") {
		t.Errorf("GET the deeplink with another host = %d %s; want 400", resp.StatusCode, body)
	}
	for path, want := range map[string]int{"/dev/console/app.js": 200, "/dev/console/dom.js": 200, "/dev/console/style.css": 200, "/dev/console/index.html": 404, "/dev/console/nope.js": 404} {
		if resp, _ := send("GET", path, "", "", nil); resp.StatusCode != want {
			t.Errorf("GET %s = %d; want %d", path, resp.StatusCode, want)
		}
	}

	// The page's token call: the cookie from the control plane's origin.
	tokenPath := "/api/installations/" + local.ID + "/token"
	for _, tt := range []struct {
		name, cookie, origin string
		want                 int
	}{
		{"the page", cookie, cp.url, 200},
		{"another origin", cookie, "https://evil.example", 403},
		{"not signed in", "", cp.url, 401},
	} {
		if resp, body := send("POST", tokenPath, tt.cookie, tt.origin, nil); resp.StatusCode != tt.want || (tt.want == 200 && !strings.Contains(body, `"identity_token"`)) {
			t.Errorf("%s: POST %s = %d %s; want %d", tt.name, tokenPath, resp.StatusCode, body, tt.want)
		}
	}
}

// cpNoRedirect is an HTTP client that shows redirects instead of following them.
var cpNoRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// cpConsoleSend sends a request to the control plane at base as a browser
// would: the console cookie and Origin when not "", a form body when form
// is not nil. It follows no redirect.
func cpConsoleSend(t testing.TB, base, method, path, cookie, origin string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: cpCookie, Value: cookie})
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := cpNoRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestCPConsoleOffWithoutTunnelDomain: a control plane that knows no relay
// domain serves no console at deeplinks (it could not tell the session's
// host from any other).
func TestCPConsoleOffWithoutTunnelDomain(t *testing.T) {
	s := &cpServer{}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/dev/ldi_1?url="+url.QueryEscape("https://"+relaySubdomain("ldi_1")+".tun.evil.com"), nil)
	req.SetPathValue("installation", "ldi_1")
	s.handleConsole(rec, req)
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "SVC_TUNNEL_DOMAIN") {
		t.Errorf("deeplink without SVC_TUNNEL_DOMAIN = %d %s; want 404 naming SVC_TUNNEL_DOMAIN", rec.Code, rec.Body)
	}
}
