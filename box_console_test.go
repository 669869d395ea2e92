package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestCORSConsole checks the shared CORS helper: the console's origin,
// normalized, gets its preflight answered 204 (Authorization allowed) and
// Access-Control-Allow-Origin on other answers; any other origin, a
// malformed one, or none gets no CORS header and no answer.
func TestCORSConsole(t *testing.T) {
	for raw, want := range map[string]string{
		"https://cp.example.com":        "https://cp.example.com",
		"https://CP.example.com:443/x/": "https://cp.example.com",
		"http://127.0.0.1:4300":         "http://127.0.0.1:4300",
	} {
		if got, err := corsConsoleOrigin(raw); err != nil || got != want {
			t.Errorf("corsConsoleOrigin(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "cp.example.com", "ftp://cp.example.com", "https://"} {
		if got, err := corsConsoleOrigin(raw); err == nil {
			t.Errorf("corsConsoleOrigin(%q) = %q; want an error", raw, got)
		}
	}
	const console = "https://cp.example.com"
	do := func(method, origin string, preflight bool) (*httptest.ResponseRecorder, bool) {
		r := httptest.NewRequest(method, "/api/workflows", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if preflight {
			r.Header.Set("Access-Control-Request-Method", "POST")
			r.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		}
		w := httptest.NewRecorder()
		return w, corsConsole(w, r, console)
	}
	w, done := do("OPTIONS", "https://cp.example.com:443", true)
	if h := w.Header(); !done || w.Code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://cp.example.com:443" ||
		h.Get("Access-Control-Allow-Headers") != "authorization, content-type" || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("the console's preflight = %v %d %v; want answered 204 allowing Authorization", done, w.Code, h)
	}
	if w, done := do("GET", console, false); done || w.Header().Get("Access-Control-Allow-Origin") != console || w.Header().Get("Vary") != "Origin" {
		t.Errorf("the console's GET = %v %v; want left to the route, with its origin allowed", done, w.Header())
	}
	for _, origin := range []string{"https://evil.example.com", "http://cp.example.com", "https://cp.example.com:8443", "null", ""} {
		for _, preflight := range []bool{true, false} {
			if w, done := do("OPTIONS", origin, preflight); done || w.Header().Get("Access-Control-Allow-Origin") != "" || w.Header().Get("Access-Control-Allow-Methods") != "" {
				t.Errorf("origin %q (preflight %v) = %v %v; want no CORS", origin, preflight, done, w.Header())
			}
		}
	}
	if w, done := func() (*httptest.ResponseRecorder, bool) {
		r := httptest.NewRequest("OPTIONS", "/", nil)
		r.Header.Set("Origin", console)
		r.Header.Set("Access-Control-Request-Method", "GET")
		w := httptest.NewRecorder()
		return w, corsConsole(w, r, "")
	}(); done || w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no console origin: %v %v; want no CORS", done, w.Header())
	}
}

// TestBoxCORSAndRoot runs the box's credential check behind its guard:
// its control plane's console gets its preflights answered before any
// token and Access-Control-Allow-Origin on the 401 it earns without one;
// another origin gets neither; GET / is public: a taught, armed box sends
// the browser to the console at its control plane, an untaught or unarmed
// one answers 401 saying what to do.
func TestBoxCORSAndRoot(t *testing.T) {
	const cp = "https://cp.example.com"
	b := &boxRuntime{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", b.handleRoot)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { t.Errorf("%s %s reached a route", r.Method, r.URL) })
	g, err := newHTTPGuard(mux, httpGuardConfig{Access: true, Public: true, Auth: b, BindHost: "0.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://box.example.net"+path, nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if method == "OPTIONS" {
			r.Header.Set("Access-Control-Request-Method", "POST")
			r.Header.Set("Access-Control-Request-Headers", "authorization")
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	root := func(wantCode int, want string) {
		t.Helper()
		w := do("GET", "/", "")
		if got := w.Header().Get("Location") + w.Body.String(); w.Code != wantCode || !strings.Contains(got, want) {
			t.Errorf("GET / = %d %q; want %d with %q", w.Code, got, wantCode, want)
		}
	}

	root(http.StatusUnauthorized, "svc link --agent")
	b.opts.controlPlane = cp // trusted before teaching: SVC_CONTROL_PLANE_URL
	if w := do("OPTIONS", "/api/workflows", cp); w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Headers") != "authorization" {
		t.Errorf("the console's preflight to an untaught box = %d %v; want 204", w.Code, w.Header())
	}
	b.taught.Store(&boxTeaching{OrganizationID: "org_1", InstallationID: "ins 1", ControlPlaneURL: cp})
	v, err := newIdentVerifier(cp, "org_1", "ins 1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.ident.Store(v)
	root(http.StatusUnauthorized, "cannot verify identity tokens yet: it has not reached its control plane's keys at "+cp+identJWKS)
	v.keys.Store(&identKeyCache{})
	root(http.StatusFound, cp+"/box/ins%201")

	if w := do("OPTIONS", "/api/runs", cp); w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != cp {
		t.Errorf("the console's preflight = %d %v; want 204 for %s", w.Code, w.Header(), cp)
	}
	if w := do("GET", "/api/runs", cp); w.Code != http.StatusUnauthorized || w.Header().Get("Access-Control-Allow-Origin") != cp {
		t.Errorf("the console's GET without a token = %d %v; want 401 its page can read", w.Code, w.Header())
	}
	for _, origin := range []string{"https://evil.example.com", "http://box.example.net"} {
		for _, method := range []string{"OPTIONS", "GET", "POST"} {
			if w := do(method, "/api/runs", origin); w.Code != http.StatusUnauthorized || w.Header().Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s from %s = %d %v; want 401 without CORS", method, origin, w.Code, w.Header())
			}
		}
	}
}

// boxConsoleGet sends GET path to the control plane at base with the
// console cookie when not "", following no redirect.
func boxConsoleGet(t testing.TB, base, path, cookie string) (*http.Response, string) {
	t.Helper()
	return cpConsoleSend(t, base, "GET", path, cookie, "", nil)
}

// TestCPBoxConsole runs the control plane as a process: GET
// /box/{installation} serves the signed-in user the console of the
// installation's deployment (API base its recorded URL, token URL its
// resolve, the URL's origin in the CSP's connect-src, files under
// /box/console/); without the cookie it answers a page reloading itself,
// then sends the browser to sign in and come back; an unknown installation, another
// organization's, or one without a deployment is 404.
func TestCPBoxConsole(t *testing.T) {
	dbURL := testPostgresURL(t)
	cp, code := startTestControlPlane(t, dbURL)
	admin := cpSignInAdmin(t, cp, code)
	for _, slug := range []string{"demo", "bare"} {
		if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents", admin, map[string]string{"slug": slug}, nil); st != 201 {
			t.Fatalf("create agent %s = %d", slug, st)
		}
	}
	const boxURL = "https://box.example.net:8443/"
	_, deployed := cpTestRecordDeployment(t, dbURL, "demo", strings.TrimSuffix(boxURL, "/"), []byte(strings.Repeat("s", 32)))
	var bare cpInstallation
	httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents/bare/local-dev-installation", admin, nil, &bare)
	// Another organization's deployment, the admin no member of it.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `WITH o AS (INSERT INTO cp.organizations (id, slug, name) VALUES ('org_other', 'other', 'Other') RETURNING id),
		a AS (INSERT INTO cp.agents (id, org_id, slug, name) SELECT 'agt_other', o.id, 'theirs', 'Theirs' FROM o RETURNING id, org_id),
		d AS (INSERT INTO cp.deployments (id, agent_id, url, image_tag, status, signing_secret) SELECT 'dep_other', a.id, 'https://other.example', '1', 'registered', '' FROM a)
		INSERT INTO cp.installations (id, org_id, agent_id, kind) SELECT 'ins_other', a.org_id, a.id, 'deployment' FROM a`); err != nil {
		t.Fatal(err)
	}

	page := cpBoxConsolePath + deployed.ID
	resp, body := boxConsoleGet(t, cp.url, page, admin)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(body, `name="svc-api-base" content="https://box.example.net:8443"`) ||
		!strings.Contains(body, `name="svc-token-url" content="/api/installations/`+deployed.ID+`/resolve"`) ||
		!strings.Contains(body, `name="svc-sign-in-url" content="/device"`) || !strings.Contains(csp, "connect-src 'self' https://box.example.net:8443;") {
		t.Fatalf("GET %s = %d, CSP %q\n%s", page, resp.StatusCode, csp, body)
	}
	for path, want := range map[string]int{"/box/console/app.js": 200, "/box/console/style.css": 200, "/box/console/index.html": 404, "/box/console/nope.js": 404} {
		if resp, _ := boxConsoleGet(t, cp.url, path, ""); resp.StatusCode != want {
			t.Errorf("GET %s = %d; want %d", path, resp.StatusCode, want)
		}
	}
	// The page's token: the resolve of its installation, minted for the
	// cookie from the control plane's origin.
	var target cpTarget
	if st := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+deployed.ID+"/resolve", admin, nil, &target); st != 200 ||
		target.IdentityToken == "" || target.ExpiresAt.IsZero() || target.Deployment.URL != strings.TrimSuffix(boxURL, "/") {
		t.Fatalf("resolve = %d %+v", st, target)
	}

	// Not signed in (or the cookie withheld by a cross-site redirect): a
	// page that reloads itself, then the sign-in page.
	for _, cookie := range []string{"", "not-a-credential"} {
		resp, body := boxConsoleGet(t, cp.url, page, cookie)
		if want := `<meta http-equiv="refresh" content="0; url=` + page + `?reloaded">`; resp.StatusCode != 200 || !strings.Contains(body, want) ||
			strings.Contains(body, "box.example.net") || !strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s with cookie %q = %d\n%s\nwant the reload page %s", page, cookie, resp.StatusCode, body, want)
		}
		if resp, _ := boxConsoleGet(t, cp.url, page+"?reloaded", cookie); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/device?return="+url.QueryEscape(page) {
			t.Errorf("GET %s?reloaded with cookie %q = %d %q; want 303 to the sign-in page", page, cookie, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if _, body := boxConsoleGet(t, cp.url, cpBoxConsolePath+url.PathEscape(`"><script>`), ""); strings.Contains(body, "<script>") {
		t.Errorf("the reload page echoes the path unescaped:\n%s", body)
	}

	for id, want := range map[string]string{"ins_nope": codeNotFound, "ins_other": codeNotFound, bare.ID: "no_deployment"} {
		if resp, body := boxConsoleGet(t, cp.url, cpBoxConsolePath+id, admin); resp.StatusCode != 404 || !strings.Contains(body, `"`+want+`"`) || strings.Contains(body, "other.example") {
			t.Errorf("GET /box/%s = %d %s; want 404 %s", id, resp.StatusCode, body, want)
		}
	}
}

// TestBoxConsoleInChromium opens the console of a deployed box in
// headless Chromium (conformance/console_box.test.mjs), every part a real
// process on loopback: a control plane, a box (svc serve of the scaffold,
// the fake model provider opening its gate) and the CLI. The browser
// signs in on /device with the first boot's one-time code and approves
// `svc login`; `svc link` registers the box at http://localhost:<port>
// (another site than the control plane at 127.0.0.1, as in production);
// then a fresh browser opens the box's URL, is sent to its console at the
// control plane, signs in there (a code of `svc login --browser`) and
// comes back, lists the workflows and starts ping, whose run completes in
// the timeline, the API calls going to the box with CORS and identity
// tokens; the box's URL followed from another site (no SameSite=Strict
// cookie on that navigation) opens the console too.
// Screenshots go to conformance/artifacts/.
func TestBoxConsoleInChromium(t *testing.T) {
	if _, err := os.Stat(consoleChromium); err != nil {
		t.Fatalf("console tests need Debian's chromium at %s (apt-get install -y chromium; .ci/run installs it): %v", consoleChromium, err)
	}
	cp, signInCode := startTestControlPlane(t, testPostgresURL(t))
	model := newFakeProvider(t)
	dir := projectDir(t)
	box := startBox(t, dir, t.TempDir(), baseEnv("DATABASE_URL="+testPostgresURL(t), "SVC_CONTROL_PLANE_URL="+cp.url, "SVC_IMAGE_TAG=1.0.0",
		"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL+"/v1"))
	secret := boxMintedSecret(t, box)
	artifacts, err := filepath.Abs(filepath.Join("conformance", "artifacts", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(artifacts)
	browser := func(phase string, extra ...string) {
		t.Helper()
		runConformance(t, "conformance/console_box.test.mjs", append([]string{"SVC_PHASE=" + phase, "SVC_CP_URL=" + cp.url, "SVC_ARTIFACTS=" + artifacts}, extra...))
	}

	user := baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")
	var outputs []string
	cred := walkLogin(t, user, cp.url, func(userCode string) {
		browser("signin", "SVC_USER_CODE="+userCode, "SVC_SIGN_IN_CODE="+signInCode)
	}, &outputs)
	if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents", cred, map[string]string{"slug": "demo"}, nil); st != 201 {
		t.Fatalf("create the agent = %d", st)
	}
	boxURL := strings.Replace(box.url, "127.0.0.1", "localhost", 1)
	if out, errOut, code := cli(t, dir, user, "--json", "link", "--agent", "demo", "--url", boxURL, "--secret", secret, "--tag", "1.0.0", "--no-agents", "--force"); code != 0 {
		t.Fatalf("svc link = %d %s %s", code, out, errOut)
	}
	var code cpNewSignInCode
	if out, errOut, exit := cli(t, dir, user, "--json", "login", "--browser"); exit != 0 || !cpEnvelope(t, strings.TrimSpace(out), &code).OK || code.Code == "" {
		t.Fatalf("svc login --browser = %d %s %s", exit, out, errOut)
	}
	browser("console", "SVC_BOX_URL="+boxURL, "SVC_BROWSER_CODE="+code.Code)
}
