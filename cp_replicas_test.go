package main

// Several control-plane replicas on one database behind one load balancer
// (issue 20 item 7): nothing one replica needs is in another's memory.

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCPReplicas runs two `svc control-plane` processes on one database
// with one public URL, behind a round-robin proxy in the test: the first
// boot's sign-in code, the device flow of `svc login` (started, approved and
// polled on alternating replicas), an invitation made on one and accepted
// on the other, identity tokens minted by either and verified against the
// key set either serves, a removal that revokes on both, one intact audit
// chain written by both, and the sign-in
// routes' rate limit, which holds across the replicas (each replica alone
// would allow its own burst).
func TestCPReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two control planes")
	}
	dbURL := testPostgresURL(t)
	var (
		mu       sync.Mutex
		backends []string
		next     atomic.Uint64
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := backends[int(next.Add(1))%len(backends)]
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(r.Method, b+r.URL.RequestURI(), strings.NewReader(string(body)))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	env := baseEnv("DATABASE_URL="+dbURL, "SVC_MASTER_KEY="+cpTestMasterKey, "XDG_CONFIG_HOME="+t.TempDir(), "SVC_TUNNEL_DOMAIN=test")
	// Each replica listens on its own address; both say the proxy's URL is
	// theirs (the identity tokens' issuer, the sign-in page's address).
	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	a1, a2 := addr(), addr()
	cp1 := startControlPlane(t, env, "--addr", a1, "--url", proxy.URL)
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m = cpSignInCodePattern.FindStringSubmatch(cp1.stderr.String())
	}
	if m == nil {
		t.Fatalf("no sign-in code on the first boot's stderr:\n%s", cp1.stderr.String())
	}
	cp2 := startControlPlane(t, env, "--addr", a2, "--url", proxy.URL)
	cp1.url, cp2.url = "http://"+a1, "http://"+a2
	if cpSignInCodePattern.MatchString(cp2.stderr.String()) {
		t.Fatal("the second replica made a second first-boot code")
	}
	mu.Lock()
	backends = []string{cp1.url, cp2.url}
	mu.Unlock()

	var admin cpSignedIn
	if code := httpJSONAuth(t, "POST", proxy.URL+"/api/login/code", "", map[string]string{"code": m[1]}, &admin); code != 200 || admin.Credential == "" {
		t.Fatalf("sign in through the proxy = %d", code)
	}
	for _, u := range []string{cp1.url, cp2.url} {
		if code := httpJSONAuth(t, "GET", u+"/api/whoami", admin.Credential, nil, nil); code != 200 {
			t.Fatalf("whoami on %s with the credential either replica minted = %d", u, code)
		}
	}

	// svc login's device flow through the proxy: its start, polls and the
	// approval land on either replica.
	home := t.TempDir()
	login := exec.Command(svcBinary(t), "--json", "login")
	login.Env = baseEnv("XDG_CONFIG_HOME="+home, "SVC_CONTROL_PLANE_URL="+proxy.URL)
	var lout, lerr syncBuffer
	login.Stdout, login.Stderr = &lout, &lerr
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- login.Wait() }()
	var userCode string
	eventually(t, 30*time.Second, "the user code on svc login's stderr", func() bool {
		if m := regexp.MustCompile(`approve the code ([A-Z]{4}-[A-Z]{4})`).FindStringSubmatch(lerr.String()); m != nil {
			userCode = m[1]
		}
		return userCode != ""
	})
	if code := httpJSONAuth(t, "POST", proxy.URL+"/api/login/device/approve", admin.Credential, map[string]string{"user_code": userCode}, nil); code != 200 {
		t.Fatalf("approve through the proxy = %d", code)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("svc login = %v\n%s", err, lerr.String())
		}
	case <-time.After(30 * time.Second):
		login.Process.Kill()
		t.Fatalf("svc login did not finish after the approval\n%s", lerr.String())
	}
	for range 2 {
		if out, _, code := cli(t, t.TempDir(), baseEnv("XDG_CONFIG_HOME="+home), "--json", "whoami"); code != 0 || !strings.Contains(out, `"email":"admin"`) {
			t.Fatalf("whoami after the device flow = %d %s", code, out)
		}
	}

	// An invitation made on one replica, accepted on the other; the new
	// member's removal revokes its credential on both.
	org := "/api/orgs/default"
	var inv cpNewInvitation
	if code := httpJSONAuth(t, "POST", cp1.url+org+"/invitations", admin.Credential, map[string]string{"email": "bob@example.com", "role": "member"}, &inv); code != 201 && code != 200 {
		t.Fatalf("invite on the first replica = %d", code)
	}
	var bob cpSignedIn
	if code := httpJSONAuth(t, "POST", cp2.url+"/api/login/invitation", "", map[string]string{"code": inv.Code}, &bob); code != 200 || bob.Credential == "" {
		t.Fatalf("accept on the second replica = %d", code)
	}
	if code := httpJSONAuth(t, "POST", cp1.url+"/api/login/invitation", "", map[string]string{"code": inv.Code}, nil); code != 401 {
		t.Errorf("the invitation again, on the first replica = %d; want 401", code)
	}

	// Identity tokens minted by either replica verify against the key set
	// the proxy serves (either replica's).
	if code := httpJSONAuth(t, "POST", proxy.URL+org+"/agents", admin.Credential, map[string]string{"slug": "demo", "name": "Demo"}, nil); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	var local cpInstallation
	if code := httpJSONAuth(t, "POST", proxy.URL+org+"/agents/demo/local-dev-installation", admin.Credential, nil, &local); code != 200 {
		t.Fatalf("local-dev installation = %d", code)
	}
	v, err := newIdentVerifier(proxy.URL, local.OrganizationID, local.ID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{cp1.url, cp2.url} {
		var id cpIdentity
		if code := httpJSONAuth(t, "POST", u+"/api/installations/"+local.ID+"/token", admin.Credential, nil, &id); code != 200 {
			t.Fatalf("token on %s = %d", u, code)
		}
		if _, err := v.verify(context.Background(), id.IdentityToken); err != nil {
			t.Errorf("a token minted on %s: %v", u, err)
		}
	}

	if code := httpJSONAuth(t, "DELETE", cp2.url+org+"/members/bob@example.com", admin.Credential, nil, nil); code != 200 {
		t.Fatalf("remove bob on the second replica = %d", code)
	}
	for _, u := range []string{cp1.url, cp2.url} {
		if code := httpJSONAuth(t, "GET", u+"/api/whoami", bob.Credential, nil, nil); code != 401 {
			t.Errorf("the removed member on %s = %d; want 401", u, code)
		}
	}

	// Both replicas appended to the organization's audit chain: it holds.
	var verdict cpAuditVerdict
	if code := httpJSONAuth(t, "GET", proxy.URL+org+"/audit/verify", admin.Credential, nil, &verdict); code != 200 || !verdict.OK || verdict.Rows < 4 {
		t.Errorf("audit verify after both replicas wrote = %d %+v; want an intact chain", code, verdict)
	}

	// The sign-in limit holds across replicas: wrong codes sent to both in
	// turn meet a 429 before either replica's own burst is spent.
	refused := 0
	for i := range cpSignInBurst + 10 {
		u := []string{cp1.url, cp2.url}[i%2]
		if code := httpJSONAuth(t, "POST", u+"/api/login/code", "", map[string]string{"code": "WRONG-CODE"}, nil); code == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("%d wrong sign-in codes over two replicas (%d each) met no 429: the limit is per replica", cpSignInBurst+10, (cpSignInBurst+10)/2)
	}

	// So does the proxy's per-caller limit: requests of one credential to
	// both replicas in turn (each sees fewer than its own burst) meet 429s
	// once the shared bucket is spent. The agent has no deployment: each
	// request is answered 404 without a box, and counts all the same.
	var proxied sync.WaitGroup
	var tooMany, missed atomic.Int64
	var sent atomic.Int64
	n := int64(cpProxyBurst*2 - 10)
	for range 8 {
		proxied.Add(1)
		go func() {
			defer proxied.Done()
			for i := sent.Add(1); i <= n; i = sent.Add(1) {
				u := []string{cp1.url, cp2.url}[i%2]
				switch code := httpJSONAuth(t, "GET", u+"/default/demo/api/health", admin.Credential, nil, nil); code {
				case http.StatusTooManyRequests:
					tooMany.Add(1)
				case http.StatusNotFound:
					missed.Add(1)
				}
			}
		}()
	}
	proxied.Wait()
	if tooMany.Load() == 0 || tooMany.Load()+missed.Load() != n {
		t.Errorf("%d proxied requests of one credential over two replicas: %d refused 429, %d answered 404 (no deployment); want some 429s (the limit is shared) and nothing else",
			n, tooMany.Load(), missed.Load())
	}
}
