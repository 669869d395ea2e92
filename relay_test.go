package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// relayTestCA writes a test CA and a certificate it signed for *.tun.test,
// relay.test and 127.0.0.1 into dir, and returns the CA's pool and the
// paths of the CA, the certificate and its key.
func relayTestCA(t testing.TB, dir string) (pool *x509.CertPool, caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "svc test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "*.tun.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"*.tun.test", "relay.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, caFile, certFile, keyFile
}

// relayFreeAddr is a loopback address nothing listens on (just freed).
func relayFreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// relayProcess is a running `svc relay` under test.
type relayProcess struct {
	t      testing.TB
	args   []string
	addr   string
	state  string // its --state, kept across restarts
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
}

// startRelay runs `svc relay` with args on addr, with a --state directory
// of its own, and waits for it to listen.
func startRelay(t testing.TB, addr string, args ...string) *relayProcess {
	t.Helper()
	r := &relayProcess{t: t, args: args, addr: addr, state: t.TempDir()}
	r.start()
	t.Cleanup(r.kill)
	return r
}

// start runs the process and waits (bounded) until it accepts connections.
func (r *relayProcess) start() {
	r.t.Helper()
	r.stderr, r.exited = &syncBuffer{}, make(chan struct{})
	r.cmd = exec.Command(svcBinary(r.t), append([]string{"relay", "--addr", r.addr, "--state", r.state}, r.args...)...)
	r.cmd.Env = baseEnv()
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	for range 200 {
		if strings.Contains(r.stderr.String(), "relay up") {
			return
		}
		select {
		case <-r.exited:
			r.t.Fatalf("svc relay exited: %s", r.stderr.String())
		case <-time.After(25 * time.Millisecond):
		}
	}
	r.t.Fatalf("svc relay did not come up: %s", r.stderr.String())
}

// kill ends the process with SIGKILL and waits for it.
func (r *relayProcess) kill() {
	select {
	case <-r.exited:
	default:
		r.cmd.Process.Kill()
		<-r.exited
	}
}

// publicURL is the public URL r gives installation: its port kept, not
// being 443.
func (r *relayProcess) publicURL(installation string) string {
	_, port, _ := net.SplitHostPort(r.addr)
	return "https://" + relaySubdomain(installation) + ".tun.test:" + port
}

// relayFixture is a relay in front of a svc dev, both trusting a real
// control plane: svc dev is signed in (svc login --token, in its own
// XDG_CONFIG_HOME), its project linked to an agent there, and fetches its
// registration tokens from it; identity tokens come from the control
// plane's API. The client trusts the test CA and resolves every name to
// the relay.
type relayFixture struct {
	relay    *relayProcess
	dev      *devProcess
	cp       *cpProcess
	dbURL    string       // the control plane's database
	admin    string       // the admin's credential
	issuer   *identIssuer // the control plane's own keys (from its store), for tokens it never mints
	client   *http.Client
	org, ldi string
	caFile   string
	env      []string // dev's environment
	gate     atomic.Pointer[chan struct{}]
	held     atomic.Int32 // streams the gate held
}

// newRelayFixture starts the control plane, the relay and svc dev (with
// devArgs), the model provider gated (gatedProvider).
func newRelayFixture(t testing.TB, devArgs ...string) *relayFixture {
	t.Helper()
	f := &relayFixture{}
	f.dbURL = testPostgresURL(t)
	var code string
	f.cp, code = startTestControlPlane(t, f.dbURL)
	f.admin = cpSignInAdmin(t, f.cp, code)
	f.issuer = relayControlPlaneIssuer(t, f.dbURL, f.cp.url)
	xdg := t.TempDir()
	if out, errOut, code := cli(t, t.TempDir(), baseEnv("XDG_CONFIG_HOME="+xdg), "--json", "login", "--control-plane", f.cp.url, "--token", f.admin); code != 0 {
		t.Fatalf("svc login = %d %s %s", code, out, errOut)
	}
	tmp := t.TempDir()
	pool, caFile, certFile, keyFile := relayTestCA(t, tmp)
	f.caFile = caFile
	dir := projectDir(t)
	f.org, f.ldi = f.link(t, dir, "demo")
	addr := relayFreeAddr(t)
	f.relay = startRelay(t, addr, "--domain", "test", "--tls-cert", certFile, "--tls-key", keyFile, "--control-plane", f.cp.url)
	f.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	t.Cleanup(f.client.CloseIdleConnections)
	provider := f.gatedProvider(t)
	f.env = baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "SSL_CERT_FILE="+caFile, "XDG_CONFIG_HOME="+xdg,
		"SVC_RELAY_URL=https://"+addr, "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+provider+"/v1")
	f.dev = startDev(t, dir, f.env, devArgs...)
	return f
}

// relayControlPlaneIssuer is an issuer with the signing keys of the test
// control plane on dbURL (read from its store) and its URL: what forges
// the tokens the control plane never mints (expired, another
// organization's).
func relayControlPlaneIssuer(t testing.TB, dbURL, cpURL string) *identIssuer {
	t.Helper()
	keys, err := openTestCPStore(t, dbURL).identityKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	is, err := newIdentIssuer(cpURL, keys)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// link links the project in dir to the agent slug of the control plane
// (created when absent), as svc dev does: the admin's local-dev
// installation in .svc/project.json. It returns the organization and the
// installation.
func (f *relayFixture) link(t testing.TB, dir, slug string) (org, ldi string) {
	t.Helper()
	orgURL := f.cp.url + "/api/orgs/default"
	var agent cpAgent
	httpJSONAuth(t, "POST", orgURL+"/agents", f.admin, map[string]string{"slug": slug}, &agent)
	var local cpInstallation
	if code := httpJSONAuth(t, "POST", orgURL+"/agents/"+slug+"/local-dev-installation", f.admin, nil, &local); code != 200 {
		t.Fatalf("local-dev installation of %s = %d", slug, code)
	}
	pf := projectFile{SchemaVersion: schemaVersion, OrganizationID: local.OrganizationID, OrganizationSlug: local.OrganizationSlug,
		Agent: projectAgent{ID: local.AgentID, Slug: slug, Name: slug}, LocalDevInstallationID: local.ID, ControlPlaneURL: f.cp.url}
	if _, err := projectWrite(dir, pf); err != nil {
		t.Fatal(err)
	}
	return local.OrganizationID, local.ID
}

// identity mints the admin an identity token for their local-dev
// installation ldi with the control plane's API.
func (f *relayFixture) identity(t testing.TB, ldi string) string { return f.mint(t, ldi, "token") }

// registration mints the admin a tunnel registration token for their
// local-dev installation ldi with the control plane's API.
func (f *relayFixture) registration(t testing.TB, ldi string) string { return f.mint(t, ldi, "tunnel") }

// mint posts to /api/installations/{ldi}/{route} as the admin and returns
// the token of the answer (identity or registration).
func (f *relayFixture) mint(t testing.TB, ldi, route string) string {
	t.Helper()
	var got struct {
		IdentityToken     string `json:"identity_token"`
		RegistrationToken string `json:"registration_token"`
	}
	code := httpJSONAuth(t, "POST", f.cp.url+"/api/installations/"+ldi+"/"+route, f.admin, nil, &got)
	if tok := got.IdentityToken + got.RegistrationToken; code == 200 && tok != "" {
		return tok
	}
	t.Fatalf("POST /api/installations/%s/%s = %d", ldi, route, code)
	return ""
}

// devEnv is dev's environment of the fixture with a fresh database and
// the variables of set replaced.
func (f *relayFixture) devEnv(t testing.TB, set ...string) []string {
	env := append([]string(nil), f.env...)
	set = append(set, "SVC_DATABASE_URL="+testPostgresURL(t))
	for i, kv := range env {
		for _, s := range set {
			if name, _, _ := strings.Cut(s, "="); strings.HasPrefix(kv, name+"=") {
				env[i] = s
			}
		}
	}
	return env
}

// gatedProvider serves the fake model provider, holding each streamed
// answer after its first content event until the current gate closes
// (open by default: nil).
func (f *relayFixture) gatedProvider(t testing.TB) string {
	fake := newFakeProvider(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fake.Config.Handler.ServeHTTP(&relayGatedWriter{ResponseWriter: w, gate: f.gate.Load(), held: &f.held, ctx: r.Context()}, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// hold makes the next streams wait after their first content event until
// the returned function is called.
func (f *relayFixture) hold() (release func()) {
	ch := make(chan struct{})
	f.gate.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { f.gate.Store(nil); close(ch) }) }
}

// relayGatedWriter blocks the third write (the event after the first
// content) until gate closes.
type relayGatedWriter struct {
	http.ResponseWriter
	gate   *chan struct{}
	held   *atomic.Int32
	ctx    context.Context
	writes int
}

// Write writes p, first waiting for the gate when p is the third write.
func (w *relayGatedWriter) Write(p []byte) (int, error) {
	if w.writes++; w.writes == 3 && w.gate != nil {
		w.held.Add(1)
		select {
		case <-*w.gate:
		case <-w.ctx.Done():
		case <-time.After(30 * time.Second):
		}
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets the fake flush each event.
func (w *relayGatedWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

// do sends method path to the public URL with an identity token (none
// when tok is "").
func (f *relayFixture) do(t testing.TB, method, url, tok, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// status sends a request and returns its status and body.
func (f *relayFixture) status(t testing.TB, method, url, tok, body string) (int, string) {
	t.Helper()
	resp := f.do(t, method, url, tok, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// relayChatBody is a streamed chat request to the scaffold's agent.
const relayChatBody = `{"model":"assistant","messages":[{"role":"user","content":"hello there, how are you today?"}],"stream":true}`

// firstContent reads SSE events from br until one carries content and
// returns it.
func firstContent(t testing.TB, br *bufio.Reader) string {
	t.Helper()
	for range 50 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		if strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			return line
		}
	}
	t.Fatal("no content event in the first 50 lines")
	return ""
}

// TestRelayTunnel runs the control plane, svc relay, svc dev and this
// client as separate processes: the payload's URLs, registration tokens
// and identity tokens at the relay (neither passing for the other),
// concurrent requests, SSE streamed through as produced, the relay killed
// and restarted mid-stream, and the sessions left without a public URL.
func TestRelayTunnel(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	f := newRelayFixture(t)
	public := f.relay.publicURL(f.ldi)
	if p := f.dev.payload; p.PublicURL == nil || *p.PublicURL != public || p.Deeplink == nil ||
		*p.Deeplink != f.cp.url+"/dev/"+f.ldi+"?url="+strings.ReplaceAll(strings.ReplaceAll(public, ":", "%3A"), "/", "%2F") {
		t.Fatalf("payload public_url %v deeplink %v; want %s and its deeplink\n%s", p.PublicURL, p.Deeplink, public, f.dev.stderr.String())
	}
	good := f.identity(t, f.ldi)
	_, otherLDI := f.link(t, t.TempDir(), "other")

	t.Run("identity", func(t *testing.T) {
		for _, tt := range []struct {
			name, tok string
			want      int
			says      error
		}{
			{"none", "", 401, errIdentMissing},
			{"another installation", f.identity(t, otherLDI), 401, errIdentAudience},
			{"another organization", f.forge(identKindIdentity, "org_other", f.ldi, time.Now()), 401, errIdentOrganization},
			{"garbage", "not.a.token", 401, errIdentMalformed},
			{"a registration token", f.registration(t, f.ldi), 401, errIdentKind},
			{"valid", good, 200, nil},
		} {
			if code, body := f.status(t, "GET", public+"/api/health", tt.tok, ""); code != tt.want || (tt.says != nil && !strings.Contains(body, tt.says.Error())) {
				t.Errorf("%s: GET /api/health = %d %s; want %d %v", tt.name, code, body, tt.want, tt.says)
			}
		}
		if code, body := f.status(t, "GET", public+"/api/health", good, ""); !strings.Contains(body, f.ldi) {
			t.Errorf("health through the tunnel = %d %s; want the installation %s", code, body, f.ldi)
		}
		if code, _ := f.status(t, "GET", "https://0000000000000000.tun.test/api/health", good, ""); code != http.StatusBadGateway {
			t.Errorf("unknown subdomain = %d; want 502", code)
		}
		if code, _ := f.status(t, "GET", public+"/api/dev/env", good, ""); code != http.StatusForbidden {
			t.Errorf("dev-only route through the tunnel = %d; want 403", code)
		}
	})

	t.Run("sessions outlive the token", func(t *testing.T) {
		// A durable session started with one identity token is the
		// user's: a renewed token reads it back. The principal header a
		// caller sends is overwritten by the relay.
		req, _ := http.NewRequest("POST", public+"/openai/v1/chat/completions", strings.NewReader(`{"model":"assistant","messages":[{"role":"user","content":"remember the relay"}]}`))
		req.Header.Set("Authorization", "Bearer "+good)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(wireHeaderSession, "relay-thread")
		req.Header.Set(signPrincipalHeader, "identity:org_evil/usr_evil")
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chat in a session = %d %s", resp.StatusCode, b)
		}
		renewed := f.identity(t, f.ldi)
		if renewed == good {
			t.Fatal("the control plane minted the same token twice: the test proves nothing")
		}
		code, body := f.status(t, "GET", public+"/api/agents/assistant/sessions/relay-thread", renewed, "")
		if code != 200 || !strings.Contains(body, "remember the relay") {
			t.Fatalf("the session with a renewed token = %d %s; want its transcript", code, body)
		}
	})

	t.Run("cors", func(t *testing.T) {
		console := f.cp.url // the relay's --control-plane: the console's origin
		send := func(method, origin, tok string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest(method, public+"/api/health", nil)
			req.Header.Set("Origin", origin)
			if method == http.MethodOptions {
				req.Header.Set("Access-Control-Request-Method", "GET")
				req.Header.Set("Access-Control-Request-Headers", "authorization")
			}
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatalf("%s from %s: %v", method, origin, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		pre := send(http.MethodOptions, console, "")
		if h := pre.Header; pre.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != console ||
			!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "authorization") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "GET") {
			t.Errorf("the console's preflight = %d %v; want 204 allowing its origin and Authorization", pre.StatusCode, h)
		}
		if resp := send("GET", console, good); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != console {
			t.Errorf("the console's GET = %d %v; want 200 with its origin allowed", resp.StatusCode, resp.Header)
		}
		if resp := send("GET", console, ""); resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != console {
			t.Errorf("the console's GET without a token = %d %v; want a 401 it can read", resp.StatusCode, resp.Header)
		}
		for _, origin := range []string{"https://evil.example", console + "0", "null"} {
			for _, tt := range []struct {
				method string
				tok    string
				want   int
			}{{http.MethodOptions, "", 401}, {"GET", good, 200}} {
				resp := send(tt.method, origin, tt.tok)
				for name := range resp.Header {
					if strings.HasPrefix(name, "Access-Control-") {
						t.Errorf("%s from %s: header %s; want no CORS header", tt.method, origin, name)
					}
				}
				if resp.StatusCode != tt.want {
					t.Errorf("%s from %s = %d; want %d", tt.method, origin, resp.StatusCode, tt.want)
				}
			}
		}
	})

	t.Run("registration", func(t *testing.T) {
		stranger, _ := newIdentIssuer(f.cp.url, []identKey{identNewKey()})
		forged, _ := stranger.issueTunnel("usr_x", f.org, f.ldi, time.Now())
		spent := f.registration(t, otherLDI)
		if w := f.rawHello(t, relayHello{Installation: otherLDI, Token: spent}); w.Error != "" || w.PublicURL != f.relay.publicURL(otherLDI) {
			t.Fatalf("a registration token of the control plane: welcome %+v; want the public URL", w)
		}
		for _, tt := range []struct {
			name  string
			hello relayHello
			says  error
		}{
			{"no token", relayHello{Installation: f.ldi}, errIdentMissing},
			{"garbage", relayHello{Installation: f.ldi, Token: "wrong"}, errIdentMalformed},
			{"an identity token", relayHello{Installation: f.ldi, Token: good}, errIdentKind},
			{"another installation's token", relayHello{Installation: f.ldi, Token: f.registration(t, otherLDI)}, errIdentAudience},
			{"expired", relayHello{Installation: f.ldi, Token: f.forge(identKindTunnel, f.org, f.ldi, time.Now().Add(-time.Hour))}, errIdentExpired},
			{"signed by an unknown key", relayHello{Installation: f.ldi, Token: forged}, errIdentUnknownKey},
			{"used twice", relayHello{Installation: otherLDI, Token: spent}, errRelayTokenSpent},
		} {
			if w := f.rawHello(t, tt.hello); !strings.Contains(w.Error, "verify tunnel registration token") || !strings.Contains(w.Error, tt.says.Error()) || w.PublicURL != "" || w.Retry {
				t.Errorf("%s: welcome %+v; want refused: %v", tt.name, w, tt.says)
			}
		}
	})

	t.Run("handshake refused", f.handshakeRefused)
	t.Run("no registration token", f.noRegistrationToken)
	t.Run("relay down at boot", f.relayDownAtBoot)
	t.Run("refused then svc login", f.refusedThenLogin)
	t.Run("public URL of the dialled port", f.dialledPort)

	t.Run("concurrent", func(t *testing.T) {
		release := f.hold()
		defer release()
		// A held stream and 32 requests at once share the one tunnel.
		resp := f.do(t, "POST", public+"/openai/v1/chat/completions", good, relayChatBody)
		defer resp.Body.Close()
		firstContent(t, bufio.NewReader(resp.Body))
		var wg sync.WaitGroup
		errs := make(chan string, 32)
		for i := range 32 {
			wg.Go(func() {
				if code, body := f.status(t, "GET", public+"/api/health", good, ""); code != 200 {
					errs <- fmt.Sprintf("request %d: %d %s", i, code, body)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	})

	t.Run("sse streamed", func(t *testing.T) {
		release := f.hold()
		defer release()
		held := f.held.Load()
		resp := f.do(t, "POST", public+"/openai/v1/chat/completions", good, relayChatBody)
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
			t.Fatalf("stream = %d %s", resp.StatusCode, ct)
		}
		br := bufio.NewReader(resp.Body)
		// The provider holds the rest until release: this event crossed
		// the tunnel while the stream was still open.
		firstContent(t, br)
		release()
		rest, err := io.ReadAll(br)
		if err != nil || !strings.Contains(string(rest), "data: [DONE]") {
			t.Fatalf("rest of the stream: %v %q", err, rest)
		}
		if f.held.Load() == held {
			t.Error("the provider's stream was never held: the test proved nothing")
		}
	})

	t.Run("relay restarted mid-stream", func(t *testing.T) {
		// A registration token used before the restart (the relay killed
		// right after: its record was on disk before the welcome) is
		// still refused after it.
		used := f.registration(t, otherLDI)
		if w := f.rawHello(t, relayHello{Installation: otherLDI, Token: used}); w.Error != "" {
			t.Fatalf("a fresh registration token: welcome %+v", w)
		}
		release := f.hold()
		defer release()
		resp := f.do(t, "POST", public+"/openai/v1/chat/completions", good, relayChatBody)
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		firstContent(t, br)
		backs := strings.Count(f.dev.stderr.String(), "tunnel back up")
		f.relay.kill()
		if _, err := io.ReadAll(br); err == nil {
			t.Error("the stream ended cleanly although the relay was killed")
		}
		release()
		f.client.CloseIdleConnections()
		f.relay.start()
		var code int
		for range 300 {
			if code, _ = f.status(t, "GET", public+"/api/health", good, ""); code == 200 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code != 200 {
			t.Fatalf("after the relay restarted, %s answers %d\ndev:\n%s\nrelay:\n%s", public, code, f.dev.stderr.String(), f.relay.stderr.String())
		}
		if w := f.rawHello(t, relayHello{Installation: otherLDI, Token: used}); !strings.Contains(w.Error, errRelayTokenSpent.Error()) || w.PublicURL != "" {
			t.Errorf("a registration token used before the relay restarted: welcome %+v; want refused: %v", w, errRelayTokenSpent)
		}
		// svc dev says it is back, with its public URL.
		f.dev.waitLog(t, 10*time.Second, func(log string) bool {
			return strings.Count(log, "tunnel back up") > backs && strings.Contains(log, "public_url="+public)
		}, "line saying the tunnel is back up at "+public)
		// The same subdomain streams again.
		resp2 := f.do(t, "POST", public+"/openai/v1/chat/completions", good, relayChatBody)
		defer resp2.Body.Close()
		if b, _ := io.ReadAll(resp2.Body); !strings.Contains(string(b), "data: [DONE]") {
			t.Errorf("stream after the restart: %q", b)
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		// Both stop on SIGINT with a tunnel up; dev also while it redials.
		f.relay.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-f.relay.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("svc relay did not stop within 30s of SIGINT:\n%s", f.relay.stderr.String())
		}
		if code := f.relay.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("svc relay exit %d after SIGINT:\n%s", code, f.relay.stderr.String())
		}
		if code := f.dev.interrupt(); code != 0 {
			t.Errorf("svc dev exit %d after SIGINT:\n%s", code, f.dev.stderr.String())
		}
	})
}

// rawHello registers a tunnel by hand and returns the relay's welcome.
func (f *relayFixture) rawHello(t testing.TB, hello relayHello) relayWelcome {
	t.Helper()
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(f.caFile)
	pool.AppendCertsFromPEM(ca)
	c, err := tls.Dial("tcp", f.relay.addr, &tls.Config{RootCAs: pool, ServerName: "relay.test", NextProtos: []string{relayTunnelALPN}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var w relayWelcome
	if err := relayWriteFrame(c, hello); err != nil {
		t.Fatal(err)
	}
	if err := relayReadFrame(c, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// forge signs a token of kind k for the admin with the control plane's
// own key, issued at iat: one the control plane would never mint.
func (f *relayFixture) forge(k identKind, org, aud string, iat time.Time) string {
	tok, _ := f.issuer.sign(k, "usr_forged", org, aud, iat)
	return tok
}

// unpublished starts a svc dev that gets no public URL and checks that it
// prints null URLs, says why at WARN (a line holding every one of says)
// and serves locally.
func (f *relayFixture) unpublished(t *testing.T, dir string, env []string, says ...string) *devProcess {
	t.Helper()
	d := startDev(t, dir, env)
	if d.payload.PublicURL != nil || d.payload.Deeplink != nil {
		t.Errorf("public_url %v deeplink %v; want null", d.payload.PublicURL, d.payload.Deeplink)
	}
	d.waitWarn(t, says...)
	resp, err := http.Get(d.url("/api/health"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("runtime not up without a tunnel: %v %v", err, resp)
	}
	resp.Body.Close()
	return d
}

// waitWarn waits (bounded) for a WARN line of d holding every one of says:
// stderr reaches the test through its own pipe, after the payload maybe.
func (d *devProcess) waitWarn(t *testing.T, says ...string) {
	t.Helper()
	d.waitLog(t, 10*time.Second, func(log string) bool {
		for _, line := range strings.Split(log, "\n") {
			all := strings.Contains(line, "level=WARN")
			for _, s := range says {
				all = all && strings.Contains(line, s)
			}
			if all {
				return true
			}
		}
		return false
	}, fmt.Sprintf("WARN line saying %q", says))
}

// waitLog waits up to timeout until d's stderr satisfies ok, else fails
// the test saying it wanted what.
func (d *devProcess) waitLog(t *testing.T, timeout time.Duration, ok func(string) bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !ok(d.stderr.String()) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	if !ok(d.stderr.String()) {
		t.Errorf("no %s:\n%s", what, d.stderr.String())
	}
}

// handshakeRefused: a svc dev the relay refuses (the relay trusts the
// control plane under another name, so its tokens come from "another
// control plane") prints null URLs, says why at WARN and serves locally.
func (f *relayFixture) handshakeRefused(t *testing.T) {
	addr := relayFreeAddr(t)
	args := slices.Clone(f.relay.args)
	args[len(args)-1] = strings.Replace(f.cp.url, "127.0.0.1", "localhost", 1)
	startRelay(t, addr, args...)
	dir := projectDir(t)
	f.link(t, dir, "demo")
	f.unpublished(t, dir, f.devEnv(t, "SVC_RELAY_URL=https://"+addr), "tunnel refused by the relay", errIdentIssuer.Error())
}

// noRegistrationToken: a local-only project, or one whose control plane is
// down, has no registration token: null URLs, a WARN saying why and what
// to run, the runtime up.
func (f *relayFixture) noRegistrationToken(t *testing.T) {
	f.unpublished(t, projectDir(t), f.devEnv(t), "local only", "svc link")

	down := "http://" + relayFreeAddr(t)
	dir, xdg := projectDir(t), t.TempDir()
	pf := projectFile{SchemaVersion: schemaVersion, OrganizationID: f.org, OrganizationSlug: "default", Agent: projectAgent{ID: "agt_x", Slug: "demo", Name: "demo"},
		LocalDevInstallationID: f.ldi, ControlPlaneURL: down}
	creds, _ := json.Marshal(loginCredentials{SchemaVersion: 1, ControlPlaneURL: down, Credential: "svc_cred_" + strings.Repeat("d", 40)})
	if _, err := projectWrite(dir, pf); err != nil || os.MkdirAll(filepath.Join(xdg, "svc"), 0o700) != nil || os.WriteFile(filepath.Join(xdg, "svc", "credentials.json"), creds, 0o600) != nil {
		t.Fatalf("write the project and credentials: %v", err)
	}
	f.unpublished(t, dir, f.devEnv(t, "XDG_CONFIG_HOME="+xdg), "cannot reach the control plane", down)
}

// relayDownAtBoot: a svc dev whose relay is not up yet boots with null
// URLs and a WARN line, redials with backoff (a fresh registration token
// each time), and prints the payload again with its public URL once a
// relay answers. When the control plane then refuses it a token (its
// agent deleted upstream), it says so and stops retrying.
func (f *relayFixture) relayDownAtBoot(t *testing.T) {
	addr := relayFreeAddr(t)
	dir := projectDir(t)
	_, ldi := f.link(t, dir, "later")
	d := f.unpublished(t, dir, f.devEnv(t, "SVC_RELAY_URL=https://"+addr), "dial relay")
	relay := startRelay(t, addr, f.relay.args...)
	if p := d.nextPayload(30 * time.Second); p.PublicURL == nil || *p.PublicURL != relay.publicURL(ldi) || p.Deeplink == nil {
		t.Errorf("once the relay is up: public_url %v deeplink %v", p.PublicURL, p.Deeplink)
	}

	conn, err := pgx.Connect(context.Background(), f.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DELETE FROM cp.agents WHERE slug = 'later'`); err != nil {
		t.Fatal(err)
	}
	relay.kill()
	d.waitWarn(t, "not retrying", "tunnel refused by the control plane", "no local-dev installation")
}

// refusedThenLogin: a svc dev whose credentials are revoked while it runs
// (the control plane knows them no more) is refused a registration token
// when its relay restarts; it says so at WARN, with `svc login` as the
// fix, and keeps retrying: `svc login` in another terminal then brings
// the tunnel back up without restarting svc dev.
func (f *relayFixture) refusedThenLogin(t *testing.T) {
	dir, xdg := projectDir(t), t.TempDir()
	_, ldi := f.link(t, dir, "relogin")
	env := f.devEnv(t, "XDG_CONFIG_HOME="+xdg)
	login := func() {
		t.Helper()
		if out, errOut, code := cli(t, t.TempDir(), env, "--json", "login", "--control-plane", f.cp.url, "--token", f.admin); code != 0 {
			t.Fatalf("svc login = %d %s %s", code, out, errOut)
		}
	}
	login()
	relay := startRelay(t, relayFreeAddr(t), f.relay.args...)
	env = f.devEnv(t, "XDG_CONFIG_HOME="+xdg, "SVC_RELAY_URL=https://"+relay.addr)
	d := startDev(t, dir, env)
	if p := d.payload; p.PublicURL == nil || *p.PublicURL != relay.publicURL(ldi) {
		t.Fatalf("public_url %v; want %s\n%s", p.PublicURL, relay.publicURL(ldi), d.stderr.String())
	}
	revoked, _ := json.Marshal(loginCredentials{SchemaVersion: 1, ControlPlaneURL: f.cp.url, Credential: "svc_cred_" + strings.Repeat("r", 40)})
	if err := os.WriteFile(filepath.Join(xdg, "svc", "credentials.json"), revoked, 0o600); err != nil {
		t.Fatal(err)
	}
	relay.kill()
	relay.start()
	d.waitWarn(t, "refused; retrying", "tunnel refused by the control plane", "not signed in", "svc login", "without a restart")
	backs := strings.Count(d.stderr.String(), "tunnel back up")
	login()
	// The next attempt comes within the backoff's cap (tunnelBackoffMax).
	d.waitLog(t, 2*tunnelBackoffMax, func(log string) bool { return strings.Count(log, "tunnel back up") > backs }, "line saying the tunnel is back up after svc login")
}

// dialledPort: svc dev reaching the relay through another port (a port
// mapping in front of it: here a TCP forwarder) publishes the URL with the
// port it dials, where the relay's public side is reached.
func (f *relayFixture) dialledPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go tcpForward(ln, f.relay.addr)
	dir := projectDir(t)
	_, ldi := f.link(t, dir, "forwarded")
	d := startDev(t, dir, f.devEnv(t, "SVC_RELAY_URL=https://"+ln.Addr().String()))
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	want := "https://" + relaySubdomain(ldi) + ".tun.test:" + port
	if p := d.payload; p.PublicURL == nil || *p.PublicURL != want {
		t.Errorf("public_url %v; want %s\n%s", p.PublicURL, want, d.stderr.String())
	}
}

// TestParseTunnelRelay accepts https://host[:port] only.
func TestParseTunnelRelay(t *testing.T) {
	for _, tt := range []struct {
		in, addr, name string
		ok             bool
	}{
		{"https://relay.example.com", "relay.example.com:443", "relay.example.com", true},
		{"https://relay.example.com:8443/", "relay.example.com:8443", "relay.example.com", true},
		{"https://127.0.0.1:9000", "127.0.0.1:9000", "127.0.0.1", true},
		{"http://relay.example.com", "", "", false},
		{"relay.example.com:443", "", "", false},
		{"https://relay.example.com/path", "", "", false},
		{"https://user@relay.example.com", "", "", false},
		{"https://", "", "", false},
	} {
		addr, name, err := parseTunnelRelay(tt.in)
		if (err == nil) != tt.ok || addr != tt.addr || name != tt.name {
			t.Errorf("parseTunnelRelay(%q) = %q, %q, %v; want %q, %q, ok %v", tt.in, addr, name, err, tt.addr, tt.name, tt.ok)
		}
	}
}

// TestRelaySubdomain is stable, distinct per installation and a DNS label.
func TestRelaySubdomain(t *testing.T) {
	a, b := relaySubdomain("ldi_ABC_1"), relaySubdomain("ldi_ABC_2")
	if a != relaySubdomain("ldi_ABC_1") || a == b || len(a) != 16 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("relaySubdomain = %q, %q; want 16 stable, distinct hex digits", a, b)
	}
}

// TestRelayFrame round-trips a hello and refuses an oversized one.
func TestRelayFrame(t *testing.T) {
	var buf strings.Builder
	if err := relayWriteFrame(&buf, relayHello{Installation: "ldi_1", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	var got relayHello
	if err := relayReadFrame(strings.NewReader(buf.String()+"trailing"), &got); err != nil || got.Installation != "ldi_1" || got.Token != "t" {
		t.Errorf("relayReadFrame = %+v, %v", got, err)
	}
	huge := string([]byte{0, 1, 0, 0}) // 64 KiB announced
	if err := relayReadFrame(strings.NewReader(huge), &got); err == nil {
		t.Error("relayReadFrame accepted a 64 KiB message")
	}
}

// TestRelayRoute answers hosts outside *.tun.<domain> 404 and a known
// pattern without a tunnel 502, before any token is looked at; a relay
// needs a control plane URL it can take the console's origin from.
func TestRelayRoute(t *testing.T) {
	s, err := newRelayServer(relayConfig{Domain: "example.com", ControlPlane: "http://cp", State: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newRelayServer(relayConfig{Domain: "example.com", ControlPlane: "cp.example.com", State: t.TempDir()}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a control plane URL without a scheme: want an error (the console's origin is derived from it)")
	}
	for _, tt := range []struct {
		host string
		want int
	}{
		{"example.com", 404},
		{"abc.example.com", 404},
		{"a.b.tun.example.com", 404},
		{"tun.example.com", 404},
		{"abc.tun.example.com", 502},
		{"ABC.tun.example.com:443", 502},
	} {
		req := httptest.NewRequest("GET", "https://x/api/health", nil)
		req.Host = tt.host
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("Host %q = %d; want %d", tt.host, rec.Code, tt.want)
		}
	}
}

// TestRelayState: a relay's state directory is its own (a second relay
// on it is refused until the first closes), and what it reads back from
// it are the registration tokens not yet expired.
func TestRelayState(t *testing.T) {
	dir := t.TempDir()
	cfg := relayConfig{Domain: "example.com", ControlPlane: "http://cp", State: filepath.Join(dir, "relay")}
	log := slog.New(slog.DiscardHandler)
	s, err := newRelayServer(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cfg.State); err != nil || fi.Mode().Perm() != privateDirMode {
		t.Errorf("state directory: %v %v; want mode %v", fi, err, privateDirMode)
	}
	if _, err := newRelayServer(cfg, log); err == nil || !strings.Contains(err.Error(), "another svc relay") {
		t.Errorf("a second relay on the same state: %v; want refused", err)
	}
	now := time.Now()
	for jti, exp := range map[string]time.Time{"gone": now.Add(-time.Second), "live": now.Add(time.Minute)} {
		if fresh, err := s.spend(&identClaims{Jti: jti, Exp: exp.Add(-identLeeway).Unix()}); !fresh || err != nil {
			t.Fatalf("spend %s = %v, %v", jti, fresh, err)
		}
	}
	if fresh, err := s.spend(&identClaims{Jti: "live", Exp: now.Add(time.Minute).Unix()}); fresh || err != nil {
		t.Errorf("spend live twice = %v, %v; want refused", fresh, err)
	}
	s.close()
	s, err = newRelayServer(cfg, log)
	if err != nil {
		t.Fatalf("the state after the first relay closed: %v", err)
	}
	defer s.close()
	if _, live := s.spent["live"]; !live || len(s.spent) != 1 {
		t.Errorf("read back %v; want the live token only", s.spent)
	}
	if err := os.WriteFile(filepath.Join(cfg.State, relaySpentFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := relayLoadSpent(filepath.Join(cfg.State, relaySpentFile), now); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("a corrupt file: %v; want an error saying what to do", err)
	}
}

// TestRelayURLWithPort keeps a port other than https's own.
func TestRelayURLWithPort(t *testing.T) {
	for _, tt := range []struct{ in, port, want string }{
		{"https://ab.tun.example.com", "8443", "https://ab.tun.example.com:8443"},
		{"https://ab.tun.example.com", "443", "https://ab.tun.example.com"},
		{"https://ab.tun.example.com", "", "https://ab.tun.example.com"},
		{"https://ab.tun.example.com:8443", "443", "https://ab.tun.example.com"},
		{"https://ab.tun.example.com:8443", "9000", "https://ab.tun.example.com:9000"},
	} {
		if got := relayURLWithPort(tt.in, tt.port); got != tt.want {
			t.Errorf("relayURLWithPort(%q, %q) = %q; want %q", tt.in, tt.port, got, tt.want)
		}
	}
}

// TestRelayFlags refuses a relay without what it needs.
func TestRelayFlags(t *testing.T) {
	for _, args := range [][]string{
		{"relay"},
		{"relay", "--domain", "example.com"},
		{"relay", "--domain", "example.com", "--tls-cert", "c"},
		{"relay", "--domain", "bad/domain", "--tls-cert", "c", "--tls-key", "k"},
		{"relay", "--domain", "example.com", "--tls-cert", "missing.pem", "--tls-key", "missing.pem"},
		{"relay", "--domain", "example.com", "--tls-cert", "c", "--tls-key", "k", "--tunnels", "f"},
	} {
		var out strings.Builder
		if code := run(context.Background(), args, cliIO{stdout: &out, stderr: &out, getenv: func(string) string { return "" }, dir: t.TempDir()}); code != 1 {
			t.Errorf("svc %s: exit %d; want 1\n%s", strings.Join(args, " "), code, out.String())
		}
	}
}
