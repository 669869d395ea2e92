package main

// The OpenID provider that judges the control plane's single sign-on:
// tools/oidcop, zitadel/oidc's certified provider library and its example
// server (a module of its own, so the product never depends on it), built
// into the user cache directory on first use (.ci/run builds it there
// ahead of the suite) and started on loopback behind a reverse proxy of the
// test. The proxy is the issuer's address; it passes everything through,
// and lets a test swap the ID token of a token answer for another one it
// minted itself (a token of another sign-in, of another client, altered):
// the attacker's move the control plane must refuse.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// oidcOPSource are the files of tools/oidcop whose content names its build.
var oidcOPSource = []string{"go.mod", "go.sum", "main.go"}

// oidcOPBinary builds tools/oidcop at most once per test process into
// <user cache dir>/svc-test/oidcop-<first 12 hex of the SHA-256 of its
// go.mod, go.sum and main.go, in that order>, unless it is there already.
var oidcOPBinary = sync.OnceValues(func() (string, error) {
	h := sha256.New()
	for _, f := range oidcOPSource {
		b, err := os.ReadFile(filepath.Join("tools", "oidcop", f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "svc-test", "oidcop-"+hex.EncodeToString(h.Sum(nil))[:12])
	bin := filepath.Join(dir, "oidcop")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Built beside, then renamed: another test process never runs half a binary.
	tmp := bin + ".build-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, ".")
	cmd.Dir, cmd.Env = filepath.Join("tools", "oidcop"), append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tools/oidcop (the OpenID provider of the single sign-on tests): %v\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
})

// oidcTestUser is a user of the test provider (the example storage's JSON).
type oidcTestUser struct {
	ID, Username, Password, FirstName, LastName, Email string
	EmailVerified                                      bool
	PreferredLanguage                                  string
}

// oidcTestPassword is every test user's password.
const oidcTestPassword = "verysecure"

// oidcTestUsers are the provider's users, by subject: alice and bob of the
// allowed domain, gina outside it but in the allowed group, mallory of
// another domain, una whose email is unverified, carol whose email has an
// account on the control plane already.
var oidcTestUsers = map[string]oidcTestUser{
	"sub-alice":   {Username: "alice", Email: "alice@example.com", EmailVerified: true, FirstName: "Alice", LastName: "Liddell"},
	"sub-bob":     {Username: "bob", Email: "bob@example.com", EmailVerified: true, FirstName: "Bob", LastName: "Builder"},
	"sub-gina":    {Username: "gina", Email: "gina@contractor.example", EmailVerified: true, FirstName: "Gina"},
	"sub-mallory": {Username: "mallory", Email: "mallory@evil.example", EmailVerified: true, FirstName: "Mallory"},
	"sub-una":     {Username: "una", Email: "una@example.com", EmailVerified: false, FirstName: "Una"},
	"sub-carol":   {Username: "carol", Email: "carol@example.com", EmailVerified: true, FirstName: "Carol"},
}

// The clients registered at the test provider: the control plane's, and
// another application's (whose tokens the control plane must refuse).
const (
	oidcTestClient      = "svc-control-plane"
	oidcTestSecret      = "cp-client-secret-0123456789"
	oidcTestOtherClient = "other-app"
	oidcTestOtherSecret = "other-app-secret-0123456789"
	oidcTestOtherURI    = "http://127.0.0.1:9/callback"
)

// oidcTestProvider is the provider behind the test's proxy.
type oidcTestProvider struct {
	issuer string // the proxy's URL, with the trailing slash the provider names itself with
	target atomic.Pointer[url.URL]
	// swap, when set, replaces the id_token of the provider's token answers.
	swap atomic.Pointer[func(string) string]
	out  *syncBuffer
}

// newOIDCTestProxy starts the proxy whose address is the issuer; the
// provider behind it starts with start, once the control plane's redirect
// URI is known.
func newOIDCTestProxy(t testing.TB) *oidcTestProvider {
	p := &oidcTestProvider{out: &syncBuffer{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(p.target.Load()); r.Out.Host = r.In.Host },
		ModifyResponse: func(resp *http.Response) error {
			swap := p.swap.Load()
			if swap == nil || resp.Request.URL.Path != "/oauth/token" || resp.StatusCode != 200 {
				return nil
			}
			var m map[string]any
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if json.Unmarshal(b, &m) == nil {
				if tok, ok := m["id_token"].(string); ok {
					m["id_token"] = (*swap)(tok)
				}
				b, _ = json.Marshal(m)
			}
			resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
			return nil
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	p.issuer = srv.URL + "/"
	return p
}

// start builds and starts the provider with the test users and clients, the
// control plane's redirecting to redirectURI, and waits until it serves.
func (p *oidcTestProvider) start(t testing.TB, redirectURI string) {
	t.Helper()
	bin, err := oidcOPBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	users := map[string]oidcTestUser{}
	for sub, u := range oidcTestUsers {
		u.ID, u.Password, u.PreferredLanguage = sub, oidcTestPassword, "en"
		users[sub] = u
	}
	cfg := map[string]any{
		"clients": []map[string]any{
			{"id": oidcTestClient, "secret": oidcTestSecret, "redirect_uris": []string{redirectURI}},
			{"id": oidcTestOtherClient, "secret": oidcTestOtherSecret, "redirect_uris": []string{oidcTestOtherURI}},
		},
		"groups": map[string][]string{"sub-gina": {"svc-users"}, "sub-mallory": {"visitors"}},
	}
	for name, v := range map[string]any{"users.json": users, "config.json": cfg} {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-issuer", p.issuer, "-config", filepath.Join(dir, "config.json"), "-users", filepath.Join(dir, "users.json"))
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		s.Scan()
		line <- s.Text()
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		f := strings.Fields(l) // issuer <url> listening <addr>
		if len(f) != 4 {
			t.Fatalf("oidcop's first line %q\n%s", l, p.out.String())
		}
		p.target.Store(&url.URL{Scheme: "http", Host: f[3]})
	case <-time.After(30 * time.Second):
		t.Fatalf("oidcop did not start within 30s\n%s", p.out.String())
	}
}

// authorize drives the provider's login for the authorization request
// authURL as username over HTTP (its login page's form), and returns where
// the provider then sends the browser: the client's redirect URI with code
// and state.
func (p *oidcTestProvider) authorize(t testing.TB, authURL, username string) *url.URL {
	t.Helper()
	next := func(resp *http.Response) *url.URL {
		t.Helper()
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if resp.StatusCode/100 != 3 || err != nil {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s = %d, want a redirect\n%s", resp.Request.Method, resp.Request.URL, resp.StatusCode, b)
		}
		resp.Body.Close()
		return loc
	}
	resp, err := cpNoRedirect.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	login := next(resp)
	form := url.Values{"id": {login.Query().Get("authRequestID")}, "username": {username}, "password": {oidcTestPassword}}
	if resp, err = cpNoRedirect.PostForm(p.issuer+"login/username", form); err != nil {
		t.Fatal(err)
	}
	callback := next(resp)
	if resp, err = cpNoRedirect.Get(callback.String()); err != nil {
		t.Fatal(err)
	}
	return next(resp)
}

// idToken mints, at the provider, a genuine ID token for client (secret,
// redirectURI) and username with nonce, through its own authorization code
// flow with PKCE: what an attacker holding another sign-in's token has.
func (p *oidcTestProvider) idToken(t testing.TB, client, secret, redirectURI, username, nonce string) string {
	t.Helper()
	verifier := cpNewSecret("")
	q := url.Values{"response_type": {"code"}, "client_id": {client}, "redirect_uri": {redirectURI}, "scope": {"openid email profile"},
		"state": {"test-state"}, "nonce": {nonce}, "code_challenge": {identB64.EncodeToString(cpHash(verifier))}, "code_challenge_method": {"S256"}}
	code := p.authorize(t, p.issuer+"auth?"+q.Encode(), username).Query().Get("code")
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}
	req, _ := http.NewRequest("POST", p.issuer+"oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		IDToken string `json:"id_token"`
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, &tok) != nil || tok.IDToken == "" {
		t.Fatalf("token for %s = %d %s", client, resp.StatusCode, b)
	}
	return tok.IDToken
}

// swapIDToken makes the proxy replace the ID token of the next token
// answers with f's (nil: pass them through).
func (p *oidcTestProvider) swapIDToken(f func(string) string) {
	if f == nil {
		p.swap.Store(nil)
		return
	}
	p.swap.Store(&f)
}
