package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
		"SVC_OIDC_ALLOWED_DOMAINS=example.com", "SVC_OIDC_ALLOWED_GROUPS=svc-users", "SVC_OIDC_NAME=Test IdP", "SVC_OIDC_OWNERS=group:svc-users")
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

	// The issuer must be the one the provider names itself with, exactly.
	if _, err := newCPOIDCProvider(cpOIDCConfig{Issuer: strings.TrimSuffix(c.op.issuer, "/")}).discover(ctx); err == nil || !strings.Contains(err.Error(), "must match it exactly") {
		t.Errorf("discovery of the issuer without its slash = %v; want a refusal", err)
	}
	auth, cookie := c.start(t)
	au, _ := url.Parse(auth)
	q := au.Query()
	if !strings.HasPrefix(auth, c.op.issuer+"auth?") || q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 ||
		q.Get("state") != cookie.Value || len(q.Get("nonce")) < 43 || q.Get("client_id") != oidcTestClient || q.Get("redirect_uri") != c.cp.url+cpOIDCCallbackPath {
		t.Fatalf("authorization request %s", auth)
	}
	var stored, hashed int
	var dump string
	store.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state_hash = $1 AND nonce_hash = $2), string_agg(row(l.*)::text, ' ')
		FROM cp.oidc_logins l`, cpHash(q.Get("state")), cpHash(q.Get("nonce"))).Scan(&stored, &hashed, &dump)
	if stored != 1 || hashed != 1 {
		t.Fatalf("stored sign-ins %d, with the hashes %d; want 1 and 1", stored, hashed)
	}
	for _, v := range []string{q.Get("state"), q.Get("nonce")} {
		if strings.Contains(dump, v) || strings.Contains(dump, hex.EncodeToString([]byte(v))) {
			t.Errorf("a sign-in's state or nonce is stored in the clear: %s", dump)
		}
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
	// Another replica (same database, master key and public URL) finishes
	// a sign-in this one started: nothing of it lived in the first's memory.
	replicaAddr := fmt.Sprintf("127.0.0.1:%d", freePortBase(t))
	replica := startControlPlane(t, baseEnv("DATABASE_URL="+c.db, "SVC_MASTER_KEY="+cpTestMasterKey, "XDG_CONFIG_HOME="+t.TempDir(),
		"SVC_OIDC_ISSUER="+c.op.issuer, "SVC_OIDC_CLIENT_ID="+oidcTestClient, "SVC_OIDC_CLIENT_SECRET="+oidcTestSecret, "SVC_OIDC_ALLOWED_DOMAINS=example.com"),
		"--addr", replicaAddr, "--url", c.cp.url)
	auth, cookie = c.start(t)
	cb = c.op.authorize(t, auth, "alice")
	atReplica, _ := url.Parse(cb.String())
	atReplica.Host = replicaAddr
	if resp, body := c.callback(t, atReplica, cookie.Value); resp.StatusCode != 200 || !strings.Contains(body, "alice@example.com") {
		t.Errorf("a sign-in started at one replica, finished at another = %d\n%s", resp.StatusCode, body)
	}
	replica.stop()
	// Outside the domains, inside the group.
	if resp, body := c.signIn(t, "gina"); resp.StatusCode != 200 || !strings.Contains(body, "gina@contractor.example") {
		t.Errorf("gina, of the allowed group = %d\n%s", resp.StatusCode, body)
	}
	// SVC_OIDC_OWNERS names the group svc-users: gina joined as an owner, alice as a member.
	for email, role := range map[string]string{"gina@contractor.example": cpRoleOwner, "alice@example.com": cpRoleMember} {
		var got string
		store.db.QueryRow(ctx, `SELECT m.role FROM cp.memberships m JOIN cp.users u ON u.id = m.user_id WHERE u.email = $1`, email).Scan(&got)
		if got != role {
			t.Errorf("%s joined as %q; want %s", email, got, role)
		}
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
	// Each kind of refusal is audited; the same refusal again from the same
	// source within a minute is counted, not written again (issue 36, item 10).
	for _, r := range refusals {
		if !slices.ContainsFunc(details, func(d string) bool { return strings.Contains(html.UnescapeString(d), html.UnescapeString(r.want)) }) {
			t.Errorf("no audited refusal says %q:\n%s", r.want, strings.Join(details, "\n"))
		}
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

// TestCPOIDCSettings: the control plane refuses to start with single
// sign-on half configured, naming what is missing.
func TestCPOIDCSettings(t *testing.T) {
	ok := []string{"https://idp.example.com/", "id", "secret", "example.com", "", "", "", ""}
	for _, tt := range []struct {
		args []string // issuer, client id, secret, domains, groups, org, name, owners
		want string
	}{
		{[]string{"", "id", "", "", "", "", "", ""}, "SVC_OIDC_ISSUER is not"},
		{[]string{"http://idp.example.com/", "id", "secret", "example.com", "", "", "", ""}, "want https"},
		{[]string{"https://idp.example.com/?x=1", "id", "secret", "example.com", "", "", "", ""}, "without query"},
		{[]string{"https://idp.example.com/", "id", "", "example.com", "", "", "", ""}, "SVC_OIDC_CLIENT_SECRET"},
		{[]string{"https://idp.example.com/", "id", "secret", "", "", "", "", ""}, "say who may sign in"},
		{[]string{"https://idp.example.com/", "id", "secret", "ada@example.com", "", "", "", ""}, "is not a domain"},
		{[]string{"https://idp.example.com/", "id", "secret", "example.com", "", "Not A Slug", "", ""}, "SVC_OIDC_ORG"},
		{[]string{"https://idp.example.com/", "id", "secret", "example.com", "", "", "", "ada@example.com, not an email"}, "SVC_OIDC_OWNERS"},
		{[]string{"", "", "", "", "", "", "", "ada@example.com"}, "SVC_OIDC_ISSUER is not"},
	} {
		a := tt.args
		if _, err := cpParseOIDC(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], "default"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("cpParseOIDC(%q) = %v; want an error saying %q", a, err, tt.want)
		}
	}
	c, err := cpParseOIDC(ok[0], ok[1], ok[2], " Example.COM, @corp.example ", "eng, ops", "", "", "Ada@Example.com, group:leads", "default")
	if err != nil || c.Org != "default" || c.Name != "idp.example.com" || strings.Join(c.Domains, " ") != "example.com corp.example" || strings.Join(c.Groups, " ") != "eng ops" ||
		strings.Join(c.Owners, " ") != "ada@example.com group:leads" {
		t.Errorf("cpParseOIDC = %+v, %v", c, err)
	}
	for _, tt := range []struct {
		claims cpOIDCClaims
		owner  bool
	}{
		{cpOIDCClaims{Email: "ADA@example.com"}, true},
		{cpOIDCClaims{Email: "bob@example.com", Groups: []string{"eng", "leads"}}, true},
		{cpOIDCClaims{Email: "bob@example.com", Groups: []string{"eng"}}, false},
		{cpOIDCClaims{Email: "group:leads"}, false},
	} {
		if got := c.owner(&tt.claims); got != tt.owner {
			t.Errorf("owner(%+v) = %v; want %v", tt.claims, got, tt.owner)
		}
	}
	if c, err := cpParseOIDC("http://127.0.0.1:9/", "id", "secret", "", "eng", "", "", "", "default"); err != nil || c == nil {
		t.Errorf("http on loopback = %v", err)
	}
	env := map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none", "SVC_OIDC_ISSUER": "https://idp.example.com/", "SVC_OIDC_CLIENT_ID": "id"}
	if _, stderr, code := runInProcess(t, t.TempDir(), env, "control-plane"); code != 1 || !strings.Contains(stderr, "SVC_OIDC_CLIENT_SECRET") {
		t.Errorf("control-plane with half a single sign-on = exit %d %q; want 1 naming SVC_OIDC_CLIENT_SECRET", code, stderr)
	}
}

// TestCPOIDCVerifyToken checks the ID token checks the real provider's
// tokens do not reach (it signs RS256, with good claims): an ES256 token of
// a P-256 key verifies; alg none, HS256, an algorithm other than its key's,
// a missing kid, an expired token, one issued in the future, another
// issuer, several audiences without azp, and a false email_verified are
// refused.
func TestCPOIDCVerifyToken(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	d := &cpOIDCDiscovery{Issuer: "https://idp.example.com/", JWKSURI: "https://idp.example.com/keys"}
	p := newCPOIDCProvider(cpOIDCConfig{Issuer: d.Issuer, ClientID: "svc"})
	p.now = func() time.Time { return now }
	// The JWKS as fetched a moment ago: no fetch happens for a known kid.
	p.keys, p.keysAt, p.keysTryAt, p.keysSource = map[string]cpOIDCKey{"ec1": {alg: "ES256", pub: &priv.PublicKey}}, now, now, d.JWKSURI
	sign := func(h map[string]any, c map[string]any) string {
		hb, _ := json.Marshal(h)
		cb, _ := json.Marshal(c)
		input := identB64.EncodeToString(hb) + "." + identB64.EncodeToString(cb)
		sum := sha256.Sum256([]byte(input))
		r, s, _ := ecdsa.Sign(rand.Reader, priv, sum[:])
		sig := append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
		return input + "." + identB64.EncodeToString(sig)
	}
	claims := func(change func(map[string]any)) map[string]any {
		c := map[string]any{"iss": d.Issuer, "sub": "s1", "aud": "svc", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
			"nonce": "n1", "email": "ada@example.com", "email_verified": true}
		if change != nil {
			change(c)
		}
		return c
	}
	es := map[string]any{"alg": "ES256", "kid": "ec1"}
	if c, err := p.verify(context.Background(), d, sign(es, claims(nil)), cpHash("n1")); err != nil || c.Sub != "s1" {
		t.Fatalf("a good ES256 token = %+v, %v", c, err)
	}
	for _, tt := range []struct {
		name string
		tok  string
		want string
	}{
		{"alg none", sign(map[string]any{"alg": "none", "kid": "ec1"}, claims(nil)), `alg "none"`},
		{"HS256", sign(map[string]any{"alg": "HS256", "kid": "ec1"}, claims(nil)), `alg "HS256"`},
		{"RS256 with an EC key", sign(map[string]any{"alg": "RS256", "kid": "ec1"}, claims(nil)), "is an ES256 key"},
		{"no kid", sign(map[string]any{"alg": "ES256"}, claims(nil)), "names no kid"},
		{"expired", sign(es, claims(func(c map[string]any) { c["exp"] = now.Add(-3 * time.Minute).Unix() })), "it expired"},
		{"issued in the future", sign(es, claims(func(c map[string]any) { c["iat"] = now.Add(3 * time.Minute).Unix() })), "in the future or too old"},
		{"another issuer", sign(es, claims(func(c map[string]any) { c["iss"] = "https://idp.example.com" })), "is not the issuer"},
		{"several audiences, no azp", sign(es, claims(func(c map[string]any) { c["aud"] = []string{"svc", "other"} })), "azp"},
		{"azp of another client", sign(es, claims(func(c map[string]any) { c["azp"] = "other" })), "azp"},
		{"email not verified", sign(es, claims(func(c map[string]any) { c["email_verified"] = false })), "has not verified the email"},
		{"another nonce", sign(es, claims(nil)), "nonce"},
	} {
		nonce := cpHash("n1")
		if tt.name == "another nonce" {
			nonce = cpHash("n2")
		}
		if _, err := p.verify(context.Background(), d, tt.tok, nonce); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s = %v; want a refusal saying %q", tt.name, err, tt.want)
		}
	}
}

// TestCPOIDCIssuerCheckedAtBoot is issue 38, item C: a SVC_OIDC_ISSUER that
// the provider's discovery document does not name stops the control
// plane's boot with what to fix, instead of a 502 at the first "Sign in".
func TestCPOIDCIssuerCheckedAtBoot(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"issuer":"https://idp.example.com/","authorization_endpoint":"https://idp.example.com/auth","token_endpoint":"https://idp.example.com/token","jwks_uri":"https://idp.example.com/jwks"}`)
	}))
	defer idp.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, svcBinary(t), "control-plane", "--addr", "127.0.0.1:0")
	cmd.Env = baseEnv("DATABASE_URL="+testPostgresURL(t), "SVC_MASTER_KEY="+cpTestMasterKey, "XDG_CONFIG_HOME="+t.TempDir(),
		"SVC_OIDC_ISSUER="+idp.URL+"/", "SVC_OIDC_CLIENT_ID="+oidcTestClient, "SVC_OIDC_CLIENT_SECRET="+oidcTestSecret, "SVC_OIDC_ALLOWED_DOMAINS=example.com")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), `names the issuer "https://idp.example.com/"`) || !strings.Contains(string(out), "SVC_OIDC_ISSUER") {
		t.Fatalf("svc control-plane with a wrong issuer = %v\n%s\nwant it to stop at boot naming the issuer the provider names", err, out)
	}
}
