package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// cpProcess is a running `svc control-plane --json` under test.
type cpProcess struct {
	*envelopeProcess
	url string
}

// startControlPlane starts `svc control-plane --json` on a free loopback
// port with env and the flags args, and waits until it serves.
func startControlPlane(t testing.TB, env []string, args ...string) *cpProcess {
	t.Helper()
	var ready cpReady
	p := startEnvelopeProcess(t, env, &ready, append([]string{"--json", "control-plane", "--addr", "127.0.0.1:0"}, args...)...)
	if ready.URL == "" {
		t.Fatalf("control plane printed no URL\nstdout:\n%s", p.stdout.String())
	}
	return &cpProcess{envelopeProcess: p, url: ready.URL}
}

// cpTestMasterKey is the SVC_MASTER_KEY of test control planes.
var cpTestMasterKey = hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// cpSignInCodePattern finds the first boot's one-time sign-in code in the log.
var cpSignInCodePattern = regexp.MustCompile(`sign_in_code=([A-Z-]+)`)

// startTestControlPlane starts svc control-plane on the database dbURL with
// a fresh config directory and the variables env, and returns it with its
// first boot's one-time sign-in code (waited for, bounded: the log line
// precedes the ready line but stderr reaches the test through its own pipe).
func startTestControlPlane(t testing.TB, dbURL string, env ...string) (*cpProcess, string) {
	t.Helper()
	cp := startControlPlane(t, baseEnv(append([]string{"DATABASE_URL=" + dbURL, "SVC_MASTER_KEY=" + cpTestMasterKey, "XDG_CONFIG_HOME=" + t.TempDir(), "SVC_TUNNEL_DOMAIN=test"}, env...)...))
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m = cpSignInCodePattern.FindStringSubmatch(cp.stderr.String())
	}
	if m == nil {
		t.Fatalf("no sign-in code on the first boot's stderr:\n%s", cp.stderr.String())
	}
	return cp, m[1]
}

// openTestCPStore opens the store of the test control plane on dbURL with
// its master key, closed when the test ends.
func openTestCPStore(t testing.TB, dbURL string) *cpStore {
	t.Helper()
	key, err := cpMasterKey(cpTestMasterKey, "", "")
	if err != nil {
		t.Fatal(err)
	}
	store, err := openCPStore(context.Background(), dbURL, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.close)
	return store
}

// cpTestRecordDeployment records agent slug's deployment of organization
// "default" at boxURL with secret straight in the store of the test control
// plane on dbURL, as link records it once a box proved itself: for tests of
// what follows a link that need no box (there is no route that records a
// deployment without the proof).
func cpTestRecordDeployment(t testing.TB, dbURL, slug, boxURL string, secret []byte) (cpDeployment, cpInstallation) {
	t.Helper()
	ctx := context.Background()
	store := openTestCPStore(t, dbURL)
	var o cpOrg
	var agent string
	if err := store.db.QueryRow(ctx, `SELECT o.id, o.slug, a.id FROM cp.organizations o JOIN cp.agents a ON a.org_id = o.id
		WHERE o.slug = 'default' AND a.slug = $1`, slug).Scan(&o.ID, &o.Slug, &agent); err != nil {
		t.Fatalf("agent %s: %v", slug, err)
	}
	d, in, err := store.recordDeployment(ctx, o, agent, boxURL, "1.0.0", secret, cpUser{ID: "usr_test", Email: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return d, in
}

// cpSignInAdmin spends the one-time code for the admin's credential.
func cpSignInAdmin(t testing.TB, cp *cpProcess, code string) string {
	t.Helper()
	var admin cpSignedIn
	if st := httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": code}, &admin); st != 200 || admin.Credential == "" {
		t.Fatalf("sign in with the one-time code = %d", st)
	}
	return admin.Credential
}

// cpEnvelope decodes a --json line of the CLI.
func cpEnvelope(t testing.TB, stdout string, data any) envelope {
	t.Helper()
	var env struct {
		envelope
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(stdout), &env); err != nil {
		t.Fatalf("not an envelope: %q", stdout)
	}
	if data != nil && env.OK {
		json.Unmarshal(env.Data, data)
	}
	return env.envelope
}

// TestControlPlaneSignIn runs the control plane on the test PostgreSQL and
// the CLI as subprocesses: the first boot's one-time code, svc login
// --token, whoami, the device flow approved over HTTP by the admin,
// logout; agents, a deployment, an API key and an identity token its box
// would verify; secrets at rest; no secret in any process's output.
func TestControlPlaneSignIn(t *testing.T) {
	dbURL := testPostgresURL(t)
	cp, code := startTestControlPlane(t, dbURL)
	m := []string{"", code}
	masterKey := cpTestMasterKey
	cpEnv := baseEnv("DATABASE_URL="+dbURL, "SVC_MASTER_KEY="+masterKey, "XDG_CONFIG_HOME="+t.TempDir())
	var outputs []string // every output of every process, grepped for secrets at the end
	var secrets []string

	var admin cpSignedIn
	if code := httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": strings.ToLower(m[1])}, &admin); code != 200 || admin.Credential == "" {
		t.Fatalf("POST /api/login/code = %d", code)
	}
	secrets = append(secrets, admin.Credential)
	var e struct{ Error apiError }
	if code := httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": m[1]}, &e); code != 401 || e.Error.Code != codeAuth {
		t.Fatalf("the one-time code, twice = %d %+v; want 401 auth", code, e)
	}

	// svc login --token, whoami, in a fresh config directory.
	home := t.TempDir()
	env := baseEnv("XDG_CONFIG_HOME=" + home)
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		stdout, stderr, code := cli(t, t.TempDir(), env, args...)
		outputs = append(outputs, stdout, stderr)
		return stdout, code
	}
	if out, code := run(env, "--json", "whoami"); code != 2 || cpEnvelope(t, out, nil).Error.Code != codeAuth {
		t.Fatalf("whoami before login = %d %s; want exit 2 auth", code, out)
	}
	if out, code := run(env, "--json", "login", "--control-plane", cp.url, "--token", "svc_cred_wrong"); code != 2 {
		t.Fatalf("login with a wrong token = %d %s; want exit 2", code, out)
	}
	var id loginIdentity
	if out, code := run(env, "--json", "login", "--control-plane", cp.url, "--token", admin.Credential); code != 0 || !cpEnvelope(t, out, &id).OK || id.User.Email != "admin" {
		t.Fatalf("login --token = %d %s", code, out)
	}
	credFile := filepath.Join(home, "svc", "credentials.json")
	if fi, err := os.Stat(credFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, mode %v; want 0600", err, fi)
	}
	if out, code := run(env, "--json", "whoami"); code != 0 || !cpEnvelope(t, out, &id).OK || id.Organization == nil || id.Organization.Slug != "default" {
		t.Fatalf("whoami = %d %s", code, out)
	}
	if out, code := run(append(env, "SVC_CONTROL_PLANE_URL=http://127.0.0.1:1"), "--json", "whoami"); code != 2 {
		t.Fatalf("whoami against another control plane = %d %s; want exit 2", code, out)
	}

	// The device flow, approved over HTTP by the admin.
	home2 := t.TempDir()
	login := exec.Command(svcBinary(t), "--json", "login")
	login.Env = baseEnv("XDG_CONFIG_HOME="+home2, "SVC_CONTROL_PLANE_URL="+cp.url)
	var lout, lerr syncBuffer
	login.Stdout, login.Stderr = &lout, &lerr
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	loginDone := make(chan error, 1)
	go func() { loginDone <- login.Wait() }()
	var userCode string
	eventually(t, 30*time.Second, "the user code on svc login's stderr", func() bool {
		if m := regexp.MustCompile(`approve the code ([A-Z]{4}-[A-Z]{4})`).FindStringSubmatch(lerr.String()); m != nil {
			userCode = m[1]
		}
		return userCode != ""
	})
	if code := httpJSONAuth(t, "POST", cp.url+"/api/login/device/approve", "", map[string]string{"user_code": userCode}, nil); code != 401 {
		t.Fatalf("approve without a credential = %d; want 401", code)
	}
	if code := httpJSONAuth(t, "POST", cp.url+"/api/login/device/approve", admin.Credential, map[string]string{"user_code": userCode}, nil); code != 200 {
		t.Fatalf("approve = %d", code)
	}
	// The audit log holds no code (issue 38, item C): the approval says which by a hash.
	if n := cpTestCount(t, dbURL, `SELECT count(*) FROM cp.audit_log WHERE position($1 in detail) > 0 OR position($2 in detail) > 0`, userCode, cpNormalizeCode(userCode)); n != 0 {
		t.Errorf("the device's user code is in %d audit rows", n)
	}
	if n := cpTestCount(t, dbURL, `SELECT count(*) FROM cp.audit_log WHERE action = 'signin.device_approved' AND detail = $1`, cpAuditCodeTag(userCode)); n != 1 {
		t.Errorf("approval rows tagged with the code's hash = %d; want 1", n)
	}
	select {
	case err := <-loginDone:
		if err != nil {
			t.Fatalf("svc login (device) = %v\nstdout: %s\nstderr: %s", err, lout.String(), lerr.String())
		}
	case <-time.After(30 * time.Second):
		login.Process.Kill()
		t.Fatalf("svc login did not finish 30s after approval\nstderr: %s", lerr.String())
	}
	outputs = append(outputs, lout.String(), lerr.String())
	var saved loginCredentials
	b, _ := os.ReadFile(filepath.Join(home2, "svc", "credentials.json"))
	json.Unmarshal(b, &saved)
	secrets = append(secrets, saved.Credential)
	env2 := baseEnv("XDG_CONFIG_HOME=" + home2)
	if out, code := run(env2, "--json", "whoami"); code != 0 || !cpEnvelope(t, out, &id).OK || id.User.Email != "admin" {
		t.Fatalf("whoami after the device flow = %d %s", code, out)
	}

	// Agents, a deployment, an installation's target and identity token.
	org := cp.url + "/api/orgs/default"
	var agent cpAgent
	if code := httpJSONAuth(t, "POST", org+"/agents", admin.Credential, map[string]string{"slug": "demo", "name": "Demo"}, &agent); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	if code := httpJSONAuth(t, "POST", org+"/agents", admin.Credential, map[string]string{"slug": "demo"}, nil); code != 409 {
		t.Fatalf("create agent twice = %d; want 409", code)
	}
	if code := httpJSONAuth(t, "POST", org+"/agents", admin.Credential, map[string]string{"slug": "Bad Slug"}, nil); code != 400 {
		t.Fatalf("create agent with a bad slug = %d; want 400", code)
	}
	if code := httpJSONAuth(t, "GET", cp.url+"/api/orgs/elsewhere/agents", admin.Credential, nil, nil); code != 404 {
		t.Fatalf("another organization's agents = %d; want 404", code)
	}
	var local cpInstallation
	if code := httpJSONAuth(t, "POST", org+"/agents/demo/local-dev-installation", admin.Credential, nil, &local); code != 200 || local.Kind != "local_dev" || local.OrganizationSlug != "default" {
		t.Fatalf("local-dev installation = %d %+v", code, local)
	}
	var again cpInstallation
	httpJSONAuth(t, "POST", org+"/agents/demo/local-dev-installation", admin.Credential, nil, &again)
	if again.ID != local.ID {
		t.Fatalf("local-dev installation changed: %s then %s; want one per user and agent", local.ID, again.ID)
	}
	if code := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/resolve", admin.Credential, nil, &e); code != 404 || e.Error.Code != "no_deployment" {
		t.Fatalf("resolve before a deployment = %d %+v; want 404 no_deployment", code, e)
	}
	secret := "box-signing-secret-" + strings.Repeat("s", 20)
	secrets = append(secrets, secret)
	deployment, deployed := cpTestRecordDeployment(t, dbURL, "demo", "http://127.0.0.1:9", []byte(secret))
	if deployment.Status != cpStatusRegistered || deployment.LastActiveAt != nil || deployed.Kind != "deployment" {
		t.Fatalf("deployment record = %+v %+v", deployment, deployed)
	}
	var target cpTarget
	if code := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/resolve", admin.Credential, nil, &target); code != 200 || target.Deployment.ID != deployment.ID {
		t.Fatalf("resolve = %d %+v", code, target)
	}
	v, _ := newIdentVerifier(cp.url, local.OrganizationID, deployed.ID, nil, nil)
	if c, err := v.verify(context.Background(), target.IdentityToken); err != nil || c.Sub != id.User.ID {
		t.Fatalf("the box's verification of the minted token = %+v, %v", c, err)
	}
	other, _ := newIdentVerifier(cp.url, local.OrganizationID, local.ID, nil, nil)
	if _, err := other.verify(context.Background(), target.IdentityToken); !errors.Is(err, errIdentAudience) {
		t.Fatalf("the token at another installation = %v; want %v", err, errIdentAudience)
	}

	// An API key, shown once.
	var key struct {
		cpAPIKey
		Key string `json:"key"`
	}
	if code := httpJSONAuth(t, "POST", org+"/api-keys", admin.Credential, map[string]string{"name": "ci"}, &key); code != 201 || !strings.HasPrefix(key.Key, "svc_key_") {
		t.Fatalf("create API key = %d %+v", code, key)
	}
	secrets = append(secrets, key.Key)
	var list map[string]json.RawMessage
	httpJSONAuth(t, "GET", org+"/api-keys", admin.Credential, nil, &list)
	var keys []map[string]any
	json.Unmarshal(list["api_keys"], &keys)
	if len(keys) != 1 || keys[0]["key"] != nil {
		t.Fatalf("API key list = %v; want one key, without the key", list)
	}

	// At rest: the deployment secret sealed, the key and credentials hashed.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var sealed, keyHash []byte
	conn.QueryRow(context.Background(), `SELECT signing_secret FROM cp.deployments`).Scan(&sealed)
	conn.QueryRow(context.Background(), `SELECT key_hash FROM cp.api_keys`).Scan(&keyHash)
	if len(sealed) == 0 || bytes.Contains(sealed, []byte(secret)) || bytes.Contains(sealed, []byte(secret[:16])) {
		t.Errorf("deployment secret row holds the plaintext: %x", sealed)
	}
	if !bytes.Equal(keyHash, cpHash(key.Key)) {
		t.Errorf("API key row = %x; want the key's SHA-256", keyHash)
	}
	var dump string
	conn.QueryRow(context.Background(), `SELECT string_agg(t::text, ' ') FROM (
		SELECT row(c.*)::text t FROM cp.credentials c UNION ALL SELECT row(k.*)::text FROM cp.api_keys k
		UNION ALL SELECT row(d.*)::text FROM cp.deployments d UNION ALL SELECT row(s.*)::text FROM cp.signing_keys s) x`).Scan(&dump)
	for _, s := range secrets {
		if strings.Contains(dump, s) || strings.Contains(dump, hex.EncodeToString([]byte(s))) {
			t.Errorf("a secret is stored in the clear: %.12s…", s)
		}
	}

	// Logout revokes the credential; whoami is then exit 2.
	if out, code := run(env2, "--json", "logout"); code != 0 || !strings.Contains(out, `"revoked":true`) {
		t.Fatalf("logout = %d %s", code, out)
	}
	if code := httpJSONAuth(t, "GET", cp.url+"/api/whoami", saved.Credential, nil, nil); code != 401 {
		t.Fatalf("whoami with the logged-out credential = %d; want 401", code)
	}
	if out, code := run(env2, "--json", "whoami"); code != 2 {
		t.Fatalf("whoami after logout = %d %s; want exit 2", code, out)
	}

	// A second boot keeps the admin and prints no sign-in code.
	cp.stop()
	cp2 := startControlPlane(t, cpEnv)
	if strings.Contains(cp2.stderr.String(), "sign_in_code") {
		t.Errorf("the second boot printed a sign-in code:\n%s", cp2.stderr.String())
	}
	if code := httpJSONAuth(t, "GET", cp2.url+"/api/whoami", admin.Credential, nil, nil); code != 200 {
		t.Errorf("the admin's credential after a restart = %d; want 200", code)
	}
	cp2.stop()

	outputs = append(outputs, cp.stdout.String(), cp.stderr.String(), cp2.stdout.String(), cp2.stderr.String())
	for _, s := range append(secrets, masterKey) {
		for _, o := range outputs {
			if s != "" && strings.Contains(o, s) {
				t.Errorf("a secret (%.12s…) appears in a process's output:\n%s", s, o)
			}
		}
	}
}

// TestCPMasterKey reads SVC_MASTER_KEY as hex or base64, mints a 0600 key
// file, and refuses a key file others may read.
func TestCPMasterKey(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	for _, env := range []string{hex.EncodeToString(raw), "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="} {
		if k, err := cpMasterKey(env, "", ""); err != nil || !bytes.Equal(k, raw) {
			t.Errorf("cpMasterKey(%q) = %q, %v", env, k, err)
		}
	}
	if _, err := cpMasterKey("short", "", ""); err == nil {
		t.Error("cpMasterKey(short) = nil error")
	}
	dir := t.TempDir()
	k, err := cpMasterKey("", "", dir)
	if fi, _ := os.Stat(filepath.Join(dir, "control-plane.key")); err != nil || len(k) != 32 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("minted key file: %v, %v", err, fi)
	}
	os.Chmod(filepath.Join(dir, "control-plane.key"), 0o644)
	if _, err := cpMasterKey("", "", dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key file = %v; want a refusal", err)
	}
}

// cpTestServer is a control plane served in this process (httptest) over
// a fresh database: its server, store and the first boot's one-time code.
type cpTestServer struct {
	s     *cpServer
	store *cpStore
	code  string
}

// newCPTestServer bootstraps organization acme in a fresh database and
// serves it as http://cp.test.
func newCPTestServer(t *testing.T) *cpTestServer {
	t.Helper()
	ctx := context.Background()
	store, err := openCPStore(ctx, testPostgresURL(t), make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.close)
	code, err := store.bootstrap(ctx, "acme", "")
	if err != nil || code == "" {
		t.Fatalf("bootstrap = %q, %v", code, err)
	}
	if again, _ := store.bootstrap(ctx, "acme", ""); again != "" {
		t.Fatalf("a second bootstrap minted another code")
	}
	keys, _ := store.identityKeys(ctx)
	issuer, _ := newIdentIssuer("http://cp.test", keys)
	s, err := newCPServer(store, issuer, "http://cp.test", discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return &cpTestServer{s: s, store: store, code: code}
}

// do serves one request from remoteAddr ("" is httptest's 192.0.2.1)
// with the header pairs hdr.
func (c *cpTestServer) do(remoteAddr, method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://cp.test"+target, strings.NewReader(body))
	if remoteAddr != "" {
		r.RemoteAddr = remoteAddr
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	c.s.ServeHTTP(w, r)
	return w
}

// cpFormType is the content type of the device page's forms.
const cpFormType = "application/x-www-form-urlencoded"

// TestCPDevicePage approves a device sign-in the browser way: the one-time
// code on the page sets the console cookie (a form post without the
// control plane's Origin is refused); the page then shows who is signed
// in and what asks (time, source address, the CLI's host name and
// version); an approval needs the user's confirmation that they started
// it (RFC 8628 §5.4: a link someone sent is one click no more) and must
// come from the control plane's own origin; without a sign-in the answer
// is the page, not JSON; the poll then yields a credential once. Routes
// other than sign-in and the JWKS refuse a request without a credential
// with the JSON error shape.
func TestCPDevicePage(t *testing.T) {
	ctx := context.Background()
	c := newCPTestServer(t)
	do := func(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
		return c.do("", method, target, body, hdr...)
	}
	for _, p := range []string{"/api/whoami", "/api/orgs/acme/agents"} {
		if w := do("GET", p, ""); w.Code != 401 || !strings.Contains(w.Body.String(), `"code":"auth"`) {
			t.Errorf("GET %s without a credential = %d %s; want 401 auth", p, w.Code, w.Body)
		}
	}
	if w := do("GET", identJWKS, ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"kty":"OKP"`) {
		t.Errorf("GET %s = %d %s", identJWKS, w.Code, w.Body)
	}
	var start cpDeviceStart
	json.Unmarshal(c.do("198.51.100.7:40000", "POST", "/api/login/device", `{"client_host":"laptop-of-mallory","client_version":"v9.9.9"}`).Body.Bytes(), &start)
	if page := do("GET", "/device?code="+start.UserCode, ""); page.Code != 200 || !strings.Contains(page.Body.String(), "One-time sign-in code") {
		t.Fatalf("device page = %d %s; want the sign-in form", page.Code, page.Body)
	}
	signInForm := "sign_in_code=" + c.code + "&user_code=" + start.UserCode
	if w := do("POST", "/device/sign-in", signInForm, "Content-Type", cpFormType); w.Code != 403 {
		t.Fatalf("sign-in on the page without Origin = %d; want 403", w.Code)
	}
	signIn := do("POST", "/device/sign-in", signInForm, "Content-Type", cpFormType, "Origin", "http://cp.test")
	cookies := signIn.Result().Cookies()
	if signIn.Code != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("sign-in on the page = %d %v", signIn.Code, cookies)
	}
	cookie := cpCookie + "=" + cookies[0].Value
	page := do("GET", "/device?code="+start.UserCode, "", "Cookie", cookie).Body.String()
	for _, want := range []string{"Signed in as <b>admin</b> (Admin)", "laptop-of-mallory", "v9.9.9", "198.51.100.7", start.UserCode, `name="confirm"`} {
		if !strings.Contains(page, want) {
			t.Errorf("device page signed in lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "Not signed in") {
		t.Errorf("device page signed in still asks to sign in:\n%s", page)
	}
	approve := "user_code=" + strings.ToLower(start.UserCode)
	if w := do("POST", "/device/approve", approve+"&confirm=yes", "Content-Type", cpFormType, "Cookie", cookie, "Origin", "https://evil.example"); w.Code != 403 {
		t.Fatalf("approval from another origin = %d; want 403", w.Code)
	}
	if w := do("POST", "/device/approve", approve+"&confirm=yes", "Content-Type", cpFormType, "Origin", "http://cp.test"); w.Code != 401 ||
		!strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "One-time sign-in code") {
		t.Fatalf("approval without a sign-in = %d %q %s; want 401 and the page with the sign-in form", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	// The owner clicks Approve on a link someone sent, without confirming.
	if w := do("POST", "/device/approve", approve, "Content-Type", cpFormType, "Cookie", cookie, "Origin", "http://cp.test"); w.Code != 400 || !strings.Contains(w.Body.String(), "Nothing approved") {
		t.Fatalf("approval without the confirmation = %d %s; want 400 and nothing approved", w.Code, w.Body)
	}
	poll := `{"device_code":"` + start.DeviceCode + `"}`
	if w := do("POST", "/api/login/device/token", poll); w.Code != 400 || !strings.Contains(w.Body.String(), "authorization_pending") {
		t.Fatalf("poll before approval = %d %s", w.Code, w.Body)
	}
	if w := do("POST", "/device/approve", approve+"&confirm=yes", "Content-Type", cpFormType, "Cookie", cookie, "Origin", "http://cp.test"); w.Code != 200 || !strings.Contains(w.Body.String(), "Approved") {
		t.Fatalf("approval on the page = %d %s", w.Code, w.Body)
	}
	c.store.db.Exec(ctx, `UPDATE cp.device_codes SET last_poll_at = NULL`) // no slow_down
	var got cpSignedIn
	if w := do("POST", "/api/login/device/token", poll); w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &got) != nil || got.Credential == "" {
		t.Fatalf("poll after approval = %d %s", w.Code, w.Body)
	}
	if w := do("GET", "/api/whoami", "", "Authorization", "Bearer "+got.Credential); w.Code != 200 || !strings.Contains(w.Body.String(), `"slug":"acme"`) {
		t.Fatalf("whoami with the device credential = %d %s", w.Code, w.Body)
	}
	c.store.db.Exec(ctx, `UPDATE cp.device_codes SET last_poll_at = NULL`)
	if w := do("POST", "/api/login/device/token", poll); !strings.Contains(w.Body.String(), "expired_token") {
		t.Fatalf("second poll after approval = %d %s; want expired_token (a credential is handed out once)", w.Code, w.Body)
	}

	// A code the user did not start is denied from the page: its poll is
	// refused.
	json.Unmarshal(do("POST", "/api/login/device", "").Body.Bytes(), &start)
	if w := do("POST", "/device/approve", "decision=deny&user_code="+start.UserCode, "Content-Type", cpFormType, "Cookie", cookie, "Origin", "http://cp.test"); w.Code != 200 || !strings.Contains(w.Body.String(), "Denied") {
		t.Fatalf("deny on the page = %d %s", w.Code, w.Body)
	}
	if w := do("POST", "/api/login/device/token", `{"device_code":"`+start.DeviceCode+`"}`); !strings.Contains(w.Body.String(), "access_denied") {
		t.Fatalf("poll after deny = %d %s; want access_denied", w.Code, w.Body)
	}
}

// TestCPReservedOrgSlug: an organization named like one of the control
// plane's own first path segments is refused before anything starts.
func TestCPReservedOrgSlug(t *testing.T) {
	for _, slug := range cpReservedOrgSlugs {
		_, stderr, code := runInProcess(t, t.TempDir(), map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}, "control-plane", "--org", slug)
		if code != 1 || !strings.Contains(stderr, "reserved") {
			t.Errorf("control-plane --org %s = exit %d %q; want 1 saying it is reserved", slug, code, stderr)
		}
	}
}

// TestCPEmbeddedPostgres: with DATABASE_URL unset, svc control-plane
// starts a PostgreSQL of its own under $XDG_DATA_HOME/svc/control-plane (as
// svc dev and svc serve do), and a restart finds its organization there;
// its first boot's owner is the person --owner names.
func TestCPEmbeddedPostgres(t *testing.T) {
	t.Parallel() // waits on initdb and processes more than it computes
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	data := t.TempDir()
	cluster := filepath.Join(data, "svc", "control-plane", "postgres")
	t.Cleanup(func() { pgTestRemoveRootCluster(cluster) })
	env := baseEnv("XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+t.TempDir(), "SVC_MASTER_KEY="+cpTestMasterKey)
	env = slices.DeleteFunc(env, func(kv string) bool { // neither: the control plane's own
		return strings.HasPrefix(kv, "SVC_DATABASE_URL=") || strings.HasPrefix(kv, "DATABASE_URL=")
	})
	if _, stderr, code := runInProcess(t, t.TempDir(), map[string]string{"SVC_MASTER_KEY": cpTestMasterKey}, "control-plane", "--owner", "not an email"); code != 1 || !strings.Contains(stderr, "--owner") {
		t.Errorf("control-plane --owner 'not an email' = exit %d %q", code, stderr)
	}
	cp := startControlPlane(t, env, "--owner", "Ada@Example.com")
	var m []string
	eventually(t, 10*time.Second, "the first boot's sign-in code and its own cluster in the log", func() bool {
		m = cpSignInCodePattern.FindStringSubmatch(cp.stderr.String())
		return m != nil && strings.Contains(cp.stderr.String(), "provider=local")
	})
	var who cpWhoami
	if st := httpJSONAuth(t, "GET", cp.url+"/api/whoami", cpSignInAdmin(t, cp, m[1]), nil, &who); st != 200 || who.User.Email != "ada@example.com" ||
		len(who.Organizations) != 1 || who.Organizations[0].Role != cpRoleOwner {
		t.Errorf("the first boot's owner = %d %+v; want ada@example.com, owner", st, who)
	}
	if resp, err := http.Get(cp.url + identJWKS); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s = %v %v", identJWKS, resp, err)
	} else {
		resp.Body.Close()
	}
	cp.stop()
	if _, err := os.Stat(cluster); err != nil {
		t.Fatalf("no cluster under $XDG_DATA_HOME/svc/control-plane: %v", err)
	}
	cp = startControlPlane(t, env)
	cp.stop() // its whole log is read now
	if log := cp.stderr.String(); cpSignInCodePattern.MatchString(log) || !strings.Contains(log, "provider=local") {
		t.Errorf("the second boot: want the same cluster and no first-boot code:\n%s", log)
	}
}
