package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// cpOIDCTest is a control plane with single sign-on through the test
// provider (cp_oidc_op_test.go): example.com's domain and the svc-users
// group may sign in, first sign-ins join organization default.
type cpOIDCTest struct {
	cp    *cpProcess
	op    *oidcTestProvider
	db    string
	admin string // the first boot's admin's credential
}

// startCPOIDC starts the provider's proxy, the control plane naming it as
// issuer, then the provider with the control plane's redirect URI.
func startCPOIDC(t *testing.T) *cpOIDCTest {
	t.Helper()
	op := newOIDCTestProxy(t)
	db := testPostgresURL(t)
	cp, code := startTestControlPlane(t, db, "SVC_OIDC_ISSUER="+op.issuer, "SVC_OIDC_CLIENT_ID="+oidcTestClient, "SVC_OIDC_CLIENT_SECRET="+oidcTestSecret,
		"SVC_OIDC_ALLOWED_DOMAINS=example.com", "SVC_OIDC_ALLOWED_GROUPS=svc-users", "SVC_OIDC_NAME=Test IdP")
	op.start(t, cp.url+cpOIDCCallbackPath)
	return &cpOIDCTest{cp: cp, op: op, db: db, admin: cpSignInAdmin(t, cp, code)}
}

// start begins a sign-in as a browser would (GET /oidc/start) and returns
// the provider's authorization URL and the state cookie it set.
func (c *cpOIDCTest) start(t *testing.T) (string, *http.Cookie) {
	t.Helper()
	resp, body := cpConsoleSend(t, c.cp.url, "GET", "/oidc/start?return=%2Fteam%2Fdefault", "", "", nil)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].Name != cpOIDCCookie {
		t.Fatalf("GET /oidc/start = %d %v %s", resp.StatusCode, resp.Cookies(), body)
	}
	return resp.Header.Get("Location"), resp.Cookies()[0]
}

// callback sends the browser's return from the provider (cb, the control
// plane's redirect URI with code and state) with the state cookie value
// (none: "") and answers the response and its body.
func (c *cpOIDCTest) callback(t *testing.T, cb *url.URL, cookie string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", cb.String(), nil)
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: cpOIDCCookie, Value: cookie})
	}
	resp, err := cpNoRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	io.Copy(&b, resp.Body)
	return resp, b.String()
}

// signIn runs a whole sign-in over HTTP as username and answers the
// callback's response and body.
func (c *cpOIDCTest) signIn(t *testing.T, username string) (*http.Response, string) {
	t.Helper()
	auth, cookie := c.start(t)
	return c.callback(t, c.op.authorize(t, auth, username), cookie.Value)
}

// TestCPOIDCSignIn signs in through a real OpenID provider over HTTP: the
// authorization request carries PKCE S256, state and nonce (stored hashed
// in PostgreSQL, nothing in the clear); a first sign-in creates the user as
// a member of the configured organization, audited; a second maps by
// (issuer, sub) to the same user; the group claim admits a user outside the
// allowed domains. Then every refusal, each with its reason on the page and
// in the audit log: a state that is not this browser's, an unknown state, a
// replayed state, an ID token of another sign-in (wrong nonce), one altered
// (its nonce forged), one for another client (audience), an email outside
// the allowed domain and groups, an unverified email, an email whose account
// exists and is not linked.
func TestCPOIDCSignIn(t *testing.T) {
	c := startCPOIDC(t)
	ctx := context.Background()
	store := openTestCPStore(t, c.db)

	auth, cookie := c.start(t)
	au, _ := url.Parse(auth)
	q := au.Query()
	if !strings.HasPrefix(auth, c.op.issuer+"auth?") || q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 ||
		q.Get("state") != cookie.Value || len(q.Get("nonce")) < 43 || q.Get("client_id") != oidcTestClient || q.Get("redirect_uri") != c.cp.url+cpOIDCCallbackPath {
		t.Fatalf("authorization request %s", auth)
	}
	var stored, clear int
	store.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state_hash = $1 AND nonce_hash = $2 AND position($3::bytea IN verifier) = 0)
		FROM cp.oidc_logins`, cpHash(q.Get("state")), cpHash(q.Get("nonce")), []byte(q.Get("state"))).Scan(&stored, &clear)
	if stored != 1 || clear != 1 {
		t.Fatalf("stored sign-ins %d, with the hashes %d; want 1 and 1", stored, clear)
	}
	cb := c.op.authorize(t, auth, "alice")
	resp, body := c.callback(t, cb, cookie.Value)
	var session string
	for _, k := range resp.Cookies() {
		if k.Name == cpCookie {
			session = k.Value
		}
	}
	if resp.StatusCode != 200 || session == "" || !strings.Contains(body, `url=/team/default`) || !strings.Contains(body, "alice@example.com") {
		t.Fatalf("callback = %d %v\n%s", resp.StatusCode, resp.Cookies(), body)
	}
	var who cpWhoami
	if st := httpJSONAuth(t, "GET", c.cp.url+"/api/whoami", session, nil, &who); st != 200 || who.User.Email != "alice@example.com" ||
		len(who.Organizations) != 1 || who.Organizations[0].Slug != "default" || who.Organizations[0].Role != cpRoleMember {
		t.Fatalf("whoami after single sign-on = %d %+v", st, who)
	}

	// The same state again (the browser's back button, or a copied URL).
	if resp, body := c.callback(t, cb, cookie.Value); resp.StatusCode != 401 || !strings.Contains(body, "was used already") {
		t.Errorf("replayed state = %d\n%s", resp.StatusCode, body)
	}
	// A second sign-in is the same user; mapped by (issuer, sub).
	if resp, _ := c.signIn(t, "alice"); resp.StatusCode != 200 {
		t.Fatalf("second sign-in = %d", resp.StatusCode)
	}
	if n := cpTestCount(t, c.db, `SELECT count(*) FROM cp.users u JOIN cp.oidc_identities i ON i.user_id = u.id WHERE i.subject = 'sub-alice' AND i.issuer = '`+c.op.issuer+`' AND u.id = '`+who.User.ID+`'`); n != 1 {
		t.Errorf("alice's identity rows: %d", n)
	}
	if n := cpTestCount(t, c.db, `SELECT count(*) FROM cp.users WHERE email = 'alice@example.com'`); n != 1 {
		t.Errorf("alice's users: %d; want 1 after two sign-ins", n)
	}
	// Outside the domains, inside the group.
	if resp, body := c.signIn(t, "gina"); resp.StatusCode != 200 || !strings.Contains(body, "gina@contractor.example") {
		t.Errorf("gina, of the allowed group = %d\n%s", resp.StatusCode, body)
	}

	// Carol has an account already (an invitation): an email alone never maps.
	var inv struct{ Code string }
	httpJSONAuth(t, "POST", c.cp.url+"/api/orgs/default/invitations", c.admin, map[string]string{"email": "carol@example.com", "role": "member"}, &inv)
	if st := httpJSONAuth(t, "POST", c.cp.url+"/api/login/invitation", "", map[string]string{"code": inv.Code}, nil); st != 200 {
		t.Fatalf("carol's invitation = %d", st)
	}

	// A token of another sign-in of the same client (another nonce), and
	// the same token with its nonce altered.
	theirs := c.op.idToken(t, oidcTestClient, oidcTestSecret, c.cp.url+cpOIDCCallbackPath, "alice", "another-sign-ins-nonce")
	parts := strings.Split(theirs, ".")
	claims, _ := identB64.DecodeString(parts[1])
	forged := parts[0] + "." + identB64.EncodeToString([]byte(regexp.MustCompile(`"nonce":"[^"]*"`).ReplaceAllString(string(claims), `"nonce":"`+strings.Repeat("A", 43)+`"`))) + "." + parts[2]
	other := c.op.idToken(t, oidcTestOtherClient, oidcTestOtherSecret, oidcTestOtherURI, "alice", "x")

	refusals := []struct {
		name   string
		run    func() (*http.Response, string)
		status int
		want   string
	}{
		{"a state that is not this browser's", func() (*http.Response, string) {
			auth, _ := c.start(t)
			_, mine := c.start(t)
			return c.callback(t, c.op.authorize(t, auth, "alice"), mine.Value)
		}, 403, "this browser did not start"},
		{"a state without the browser's cookie", func() (*http.Response, string) {
			auth, _ := c.start(t)
			return c.callback(t, c.op.authorize(t, auth, "alice"), "")
		}, 403, "this browser did not start"},
		{"an unknown state", func() (*http.Response, string) {
			u, _ := url.Parse(c.cp.url + cpOIDCCallbackPath + "?code=abc&state=made-up")
			return c.callback(t, u, "made-up")
		}, 401, "state is unknown"},
		{"a token of another sign-in", func() (*http.Response, string) {
			c.op.swapIDToken(func(string) string { return theirs })
			defer c.op.swapIDToken(nil)
			return c.signIn(t, "bob")
		}, 401, "nonce is not the one this sign-in sent"},
		{"a token with its nonce forged", func() (*http.Response, string) {
			c.op.swapIDToken(func(string) string { return forged })
			defer c.op.swapIDToken(nil)
			return c.signIn(t, "bob")
		}, 401, "signature does not verify"},
		{"a token for another client", func() (*http.Response, string) {
			c.op.swapIDToken(func(string) string { return other })
			defer c.op.swapIDToken(nil)
			return c.signIn(t, "bob")
		}, 401, `for another client (aud &#34;` + oidcTestOtherClient},
		{"an email outside the allowed domain", func() (*http.Response, string) { return c.signIn(t, "mallory") },
			403, "mallory@evil.example may not sign in to this control plane: it takes an email in example.com or membership of the group svc-users"},
		{"an unverified email", func() (*http.Response, string) { return c.signIn(t, "una") }, 403, "has not verified the email una@example.com"},
		{"an account of that email", func() (*http.Response, string) { return c.signIn(t, "carol") }, 403, "carol@example.com has an account on this control plane that is not linked"},
	}
	for _, r := range refusals {
		resp, body := r.run()
		if resp.StatusCode != r.status || !strings.Contains(body, "Single sign-on refused: ") || !strings.Contains(body, r.want) {
			t.Errorf("%s = %d; want %d saying %q\n%s", r.name, resp.StatusCode, r.status, r.want, body)
		}
		for _, k := range resp.Cookies() {
			if k.Name == cpCookie && k.Value != "" {
				t.Errorf("%s set a session cookie", r.name)
			}
		}
	}
	for _, who := range []string{"bob@example.com", "mallory@evil.example", "una@example.com"} {
		if n := cpTestCount(t, c.db, `SELECT count(*) FROM cp.users WHERE email = '`+who+`'`); n != 0 {
			t.Errorf("%s has an account after a refused sign-in", who)
		}
	}
	if n := cpTestCount(t, c.db, `SELECT count(*) FROM cp.oidc_identities WHERE subject = 'sub-carol'`); n != 0 {
		t.Errorf("carol's account was linked by her email")
	}
	rows, err := store.db.Query(ctx, `SELECT detail FROM cp.audit_log WHERE action = 'signin.failed' AND outcome = 'refused' AND detail LIKE 'single sign-on: %' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for rows.Next() {
		var d string
		rows.Scan(&d)
		details = append(details, d)
	}
	if len(details) != len(refusals)+1 { // and the replayed state
		t.Errorf("audited refusals: %d; want %d\n%s", len(details), len(refusals)+1, strings.Join(details, "\n"))
	}
	if n := cpTestCount(t, c.db, `SELECT count(*) FROM cp.audit_log WHERE action = 'member.joined' AND detail LIKE '%first single sign-on%'`); n != 2 {
		t.Errorf("audited first sign-ins: %d; want alice's and gina's", n)
	}
	for _, s := range []string{oidcTestSecret, q.Get("state"), q.Get("nonce")} {
		if strings.Contains(c.cp.stderr.String(), s) {
			t.Errorf("the control plane's log holds a secret (%.8s…)", s)
		}
	}
}

// TestCPOIDCInChromium drives the single sign-on in Chromium
// (conformance/oidc.test.mjs) against the real provider: a browser signs in
// from the team page's sign-in and lands on the team page as a new member;
// then `svc login`, as a subprocess, is approved by another browser that
// signs in through the provider on the device page: the CLI then has bob's
// credential, member of default.
func TestCPOIDCInChromium(t *testing.T) {
	if _, err := os.Stat(consoleChromium); err != nil {
		t.Fatalf("console tests need Debian's chromium at %s (apt-get install -y chromium; .ci/run installs it): %v", consoleChromium, err)
	}
	c := startCPOIDC(t)
	home := t.TempDir()
	login := exec.Command(svcBinary(t), "--json", "login")
	login.Env = baseEnv("XDG_CONFIG_HOME="+home, "SVC_CONTROL_PLANE_URL="+c.cp.url)
	var lout, lerr syncBuffer
	login.Stdout, login.Stderr = &lout, &lerr
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- login.Wait() }()
	t.Cleanup(func() { login.Process.Kill() })
	var device string
	eventually(t, 30*time.Second, "the sign-in page on svc login's stderr", func() bool {
		device = regexp.MustCompile(`https?://\S+/device\?code=[A-Z-]+`).FindString(lerr.String())
		return device != ""
	})
	artifacts, err := filepath.Abs(filepath.Join("conformance", "artifacts", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(artifacts)
	runConformance(t, "conformance/oidc.test.mjs", []string{"SVC_CP_URL=" + c.cp.url, "SVC_OP_URL=" + c.op.issuer, "SVC_DEVICE_URL=" + device,
		"SVC_OP_PASSWORD=" + oidcTestPassword, "SVC_ARTIFACTS=" + artifacts})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("svc login = %v\n%s\n%s", err, lout.String(), lerr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("svc login did not finish after the approval\n%s", lerr.String())
	}
	var id loginIdentity
	if out, _, code := cli(t, t.TempDir(), baseEnv("XDG_CONFIG_HOME="+home), "--json", "whoami"); code != 0 || !cpEnvelope(t, out, &id).OK ||
		id.User.Email != "bob@example.com" || id.Organization == nil || id.Organization.Slug != "default" {
		t.Fatalf("whoami after svc login approved through single sign-on = %d %s", code, out)
	}
	if n := cpTestCount(t, c.db, `SELECT count(*) FROM cp.memberships m JOIN cp.users u ON u.id = m.user_id JOIN cp.oidc_identities i ON i.user_id = u.id
		WHERE m.role = 'member' AND i.subject IN ('sub-alice', 'sub-bob')`); n != 2 {
		t.Errorf("members made by single sign-on: %d; want alice and bob", n)
	}
}
