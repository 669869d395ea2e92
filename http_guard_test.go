package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Paces the slow-client tests use instead of the production ones: a body
// must keep 512 B/s on average after 300 ms.
const (
	guardTestGrace   = 300 * time.Millisecond
	guardTestMinRate = 512
)

// guardTestLoopback and guardTestListen are the guard's two modes in dev:
// bound to loopback, and bound to all addresses (--listen), each with the
// dev key and a key of SVC_API_KEYS.
var (
	guardTestLoopback = httpGuardConfig{Access: true, BindHost: "127.0.0.1", APIKeys: []string{"dev-key", "extra-key"}}
	guardTestListen   = httpGuardConfig{Access: true, BindHost: "0.0.0.0", APIKeys: []string{"dev-key", "extra-key"}}
)

// guardTestNext stands for the routes: 200 "reached", echoing the
// Authorization the routes saw in X-Seen-Authorization.
var guardTestNext = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Seen-Authorization", r.Header.Get("Authorization"))
	io.WriteString(w, "reached")
})

// guardTestNew builds a guard with cfg in front of guardTestNext. A
// recorded request has no connection for the kernel to name its account,
// so the guard takes every request it tests as coming from this account,
// checking only what a browser says (TestHTTPGuardOwner checks the
// kernel's part with real connections).
func guardTestNew(t *testing.T, cfg httpGuardConfig) *httpGuard {
	t.Helper()
	g, err := newHTTPGuard(guardTestNext, cfg)
	if err != nil {
		t.Fatalf("newHTTPGuard(%+v): %v", cfg, err)
	}
	if k, ok := g.auth.(*httpGuardKeys); ok {
		k.owner = httpGuardNotForAnotherPage
	}
	return g
}

// guardTestDo sends method target to h with Host host and headers.
func guardTestDo(h http.Handler, method, target, host string, headers map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// guardTestJSON decodes a recorded JSON body (nil when it is not JSON).
func guardTestJSON(rec *httptest.ResponseRecorder) map[string]any {
	var v map[string]any
	json.Unmarshal(rec.Body.Bytes(), &v)
	return v
}

// guardTestServe serves h on loopback with the production server limits
// until the test ends.
func guardTestServe(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Config = newHTTPServer(h)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// guardTestShrink gives g the test pace.
func guardTestShrink(g *httpGuard) {
	g.bodyGrace, g.bodyMinRate = guardTestGrace, guardTestMinRate
}

// TestHTTPGuardConfig checks what newHTTPGuard refuses.
func TestHTTPGuardConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  httpGuardConfig
		ok   bool
	}{
		{"zero value paces bodies only", httpGuardConfig{}, true},
		{"loopback", guardTestLoopback, true},
		{"listen with keys", guardTestListen, true},
		{"listen without keys", httpGuardConfig{Access: true, BindHost: "0.0.0.0"}, false},
		{"bind address not an IP", httpGuardConfig{BindHost: "localhost"}, false},
		{"empty key", httpGuardConfig{Access: true, APIKeys: []string{""}}, false},
		{"allowed host with scheme", httpGuardConfig{AllowedHosts: []string{"http://devbox"}}, false},
		{"allowed host with port", httpGuardConfig{AllowedHosts: []string{"devbox:4242"}}, false},
		{"allowed host and IP", httpGuardConfig{AllowedHosts: []string{"DevBox.lan", "192.168.1.20", "[fd00::1]"}}, true},
		{"allowed origin", httpGuardConfig{AllowedOrigins: []string{"http://devbox.lan:3000", "https://app.example"}}, true},
		{"allowed origin with path", httpGuardConfig{AllowedOrigins: []string{"http://devbox.lan/app"}}, false},
		{"allowed origin ftp", httpGuardConfig{AllowedOrigins: []string{"ftp://devbox.lan"}}, false},
		{"allowed origin null", httpGuardConfig{AllowedOrigins: []string{"null"}}, false},
	}
	for _, tt := range tests {
		_, err := newHTTPGuard(guardTestNext, tt.cfg)
		if (err == nil) != tt.ok {
			t.Errorf("%s: newHTTPGuard = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
	if _, err := newHTTPGuard(nil, httpGuardConfig{}); err == nil {
		t.Errorf("newHTTPGuard(nil) succeeded; want an error")
	}
	got, err := httpGuardList(" http://A.example:80 , ,https://b.example:8443/", httpGuardOriginNormalize)
	if want := "http://a.example,https://b.example:8443"; err != nil || strings.Join(got, ",") != want {
		t.Errorf("httpGuardList(origins) = %q, %v; want %q", got, err, want)
	}
}

// TestHTTPGuardHost checks the Host rule in both modes.
func TestHTTPGuardHost(t *testing.T) {
	withNames := guardTestLoopback
	withNames.AllowedHosts = []string{"devbox.lan"}
	key := map[string]string{"Authorization": "Bearer dev-key"}
	tests := []struct {
		name string
		cfg  httpGuardConfig
		host string
		want int
	}{
		{"loopback IP", guardTestLoopback, "127.0.0.1:4242", 200},
		{"loopback range", guardTestLoopback, "127.9.9.9", 200},
		{"localhost", guardTestLoopback, "localhost:4242", 200},
		{"localhost upper case, trailing dot", guardTestLoopback, "LOCALHOST.:4242", 200},
		{"sub.localhost", guardTestLoopback, "app.localhost:4242", 200},
		{"IPv6 loopback", guardTestLoopback, "[::1]:4242", 200},
		{"evil name", guardTestLoopback, "evil.example", 403},
		{"rebinding name", guardTestLoopback, "7f000001.rebind.attacker.test:4242", 403},
		{"localhost as a label", guardTestLoopback, "localhost.evil.example", 403},
		{"LAN IP when bound to loopback", guardTestLoopback, "10.231.7.1:4242", 403},
		{"empty", guardTestLoopback, "", 403},
		{"SVC_ALLOWED_HOSTS name", withNames, "DevBox.lan:4242", 200},
		{"IP under --listen", guardTestListen, "10.231.7.1:4242", 200},
		{"IPv6 under --listen", guardTestListen, "[fd00::7]:4242", 200},
		{"localhost under --listen", guardTestListen, "localhost:4242", 200},
		{"evil name under --listen", guardTestListen, "evil.example:4242", 403},
	}
	for _, tt := range tests {
		rec := guardTestDo(guardTestNew(t, tt.cfg), "GET", "/api/runs", tt.host, key)
		if rec.Code != tt.want {
			t.Errorf("%s: Host %q = %d %s; want %d", tt.name, tt.host, rec.Code, rec.Body, tt.want)
		}
		if rec.Header().Get("X-Frame-Options") != "DENY" || rec.Header().Get("Content-Security-Policy") != "frame-ancestors 'none'" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v; want framing denied and nosniff on every answer", tt.name, rec.Header())
		}
		if tt.want == 403 && (wiresJSONAt(guardTestJSON(rec), "error.code") != "host_not_allowed" || !strings.Contains(rec.Body.String(), "SVC_ALLOWED_HOSTS")) {
			t.Errorf("%s: body %s; want host_not_allowed naming SVC_ALLOWED_HOSTS", tt.name, rec.Body)
		}
	}
}

// TestHTTPGuardOrigin checks the Origin rule on state-changing methods and
// the CORS headers of answers.
func TestHTTPGuardOrigin(t *testing.T) {
	listed := guardTestListen
	listed.AllowedOrigins = []string{"http://10.231.7.1:3000"}
	key := "dev-key"
	tests := []struct {
		name, method, host, origin string
		cfg                        httpGuardConfig
		want                       int
		acao                       bool // the answer allows the origin
	}{
		{"no origin (curl, SDKs, CLI)", "POST", "127.0.0.1:4242", "", guardTestLoopback, 200, false},
		{"localhost on another port", "POST", "127.0.0.1:4242", "http://localhost:3000", guardTestLoopback, 200, true},
		{"loopback IP on another port", "PUT", "localhost:4242", "http://127.0.0.1:5173", guardTestLoopback, 200, true},
		{"same origin", "POST", "127.0.0.1:4242", "http://127.0.0.1:4242", guardTestLoopback, 200, true},
		{"evil origin POST", "POST", "127.0.0.1:4242", "http://evil.example", guardTestLoopback, 403, false},
		{"evil origin PUT", "PUT", "127.0.0.1:4242", "https://evil.example:4242", guardTestLoopback, 403, false},
		{"evil origin DELETE", "DELETE", "127.0.0.1:4242", "http://evil.example", guardTestLoopback, 403, false},
		{"evil origin PATCH", "PATCH", "127.0.0.1:4242", "http://evil.example", guardTestLoopback, 403, false},
		{"localhost as a label", "POST", "127.0.0.1:4242", "http://localhost.evil.example", guardTestLoopback, 403, false},
		{"null origin", "POST", "127.0.0.1:4242", "null", guardTestLoopback, 403, false},
		{"file origin", "POST", "127.0.0.1:4242", "file://", guardTestLoopback, 403, false},
		{"evil origin GET is read-only: served, not shared", "GET", "127.0.0.1:4242", "http://evil.example", guardTestLoopback, 200, false},
		{"same origin under --listen", "POST", "10.231.7.1:4242", "http://10.231.7.1:4242", guardTestListen, 200, true},
		{"same origin, default port", "POST", "10.231.7.1", "http://10.231.7.1:80", guardTestListen, 200, true},
		{"another port of the LAN host", "POST", "10.231.7.1:4242", "http://10.231.7.1:3000", guardTestListen, 403, false},
		{"another LAN host", "POST", "10.231.7.1:4242", "http://10.231.7.2:4242", guardTestListen, 403, false},
		{"SVC_ALLOWED_ORIGINS", "POST", "10.231.7.1:4242", "http://10.231.7.1:3000", listed, 200, true},
	}
	for _, tt := range tests {
		headers := map[string]string{"Authorization": "Bearer " + key}
		if tt.origin != "" {
			headers["Origin"] = tt.origin
		}
		rec := guardTestDo(guardTestNew(t, tt.cfg), tt.method, "/api/workflows/x/start", tt.host, headers)
		if rec.Code != tt.want {
			t.Errorf("%s: %s with Origin %q = %d %s; want %d", tt.name, tt.method, tt.origin, rec.Code, rec.Body, tt.want)
		}
		if tt.want == 403 && wiresJSONAt(guardTestJSON(rec), "error.code") != "origin_not_allowed" {
			t.Errorf("%s: body %s; want origin_not_allowed", tt.name, rec.Body)
		}
		acao := rec.Header().Get("Access-Control-Allow-Origin")
		if tt.acao && (acao != tt.origin || !strings.Contains(rec.Header().Get("Vary"), "Origin")) || !tt.acao && acao != "" {
			t.Errorf("%s: Access-Control-Allow-Origin %q, Vary %q; want the origin echoed: %v", tt.name, acao, rec.Header().Get("Vary"), tt.acao)
		}
	}
}

// TestHTTPGuardPreflight checks CORS preflights: answered for an allowed
// origin without a credential, refused for an unknown one.
func TestHTTPGuardPreflight(t *testing.T) {
	asked := "authorization, x-api-key, content-type, x-svc-session, x-svc-conversation"
	for _, cfg := range []httpGuardConfig{guardTestLoopback, guardTestListen} {
		g := guardTestNew(t, cfg)
		rec := guardTestDo(g, "OPTIONS", "/openai/v1/chat/completions", "127.0.0.1:4242", map[string]string{
			"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": asked})
		h := rec.Header()
		if rec.Code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
			!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || h.Get("Access-Control-Allow-Headers") != asked ||
			h.Get("Access-Control-Max-Age") != "600" || !strings.Contains(h.Get("Vary"), "Origin") {
			t.Errorf("bind %s: allowed preflight = %d %v; want 204 echoing origin and headers, max age 600, Vary: Origin", cfg.BindHost, rec.Code, h)
		}
		rec = guardTestDo(g, "OPTIONS", "/api/settings/model-provider", "127.0.0.1:4242", map[string]string{
			"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"})
		if rec.Code != http.StatusForbidden || rec.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("bind %s: evil preflight = %d %v; want 403 without Access-Control-Allow-Origin", cfg.BindHost, rec.Code, rec.Header())
		}
	}
}

// guardTestRoutePath fills the parameters of a route table path.
func guardTestRoutePath(p string) string {
	return regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(p, "x")
}

// guardTestAuthShape reports whether a 401 body is in the shape of the
// route at path: each chat wire its own (SPEC §7), the rest the API's.
func guardTestAuthShape(path string, v map[string]any) bool {
	switch {
	case strings.HasPrefix(path, "/openai/"):
		return wiresJSONAt(v, "error.code") == "invalid_api_key"
	case strings.HasPrefix(path, "/anthropic/"):
		return wiresJSONAt(v, "type") == "error" && wiresJSONAt(v, "error.type") == "authentication_error"
	case strings.HasPrefix(path, "/agui/"), path == "/chat":
		return wiresJSONAt(v, "type") == "RUN_ERROR"
	}
	return wiresJSONAt(v, "error.code") == "auth"
}

// TestHTTPGuardListenCredentialEveryRoute checks that from another machine
// (--listen) every route of the table but the console's files and the
// probes (which say only yes or no) requires a key or a console session,
// in each accepted form, and refuses in the route's own shape.
func TestHTTPGuardListenCredentialEveryRoute(t *testing.T) {
	cfg := guardTestListen
	cfg.Console = &consoleSessions{}
	session, _ := cfg.Console.trade(cfg.Console.mintCode())
	g := guardTestNew(t, cfg)
	g.auth.(*httpGuardKeys).owner = nil // nobody on another machine is this account
	forms := []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"none", nil, 401},
		{"wrong bearer", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"wrong x-api-key", map[string]string{"x-api-key": "dev-key-"}, 401},
		{"an earlier session", map[string]string{"Authorization": "Bearer " + consoleTokenPrefix + "gone"}, 401},
		{"a cookie of old", map[string]string{"Cookie": "svc_key=ZGV2LWtleQ"}, 401},
		{"dev key as bearer", map[string]string{"Authorization": "Bearer dev-key"}, 200},
		{"dev key as x-api-key", map[string]string{"x-api-key": "dev-key"}, 200},
		{"SVC_API_KEYS key", map[string]string{"Authorization": "Bearer extra-key"}, 200},
		{"console session", map[string]string{"Authorization": "Bearer " + session}, 200},
	}
	for _, r := range routeTable(nil) {
		path := guardTestRoutePath(r.path)
		for _, f := range forms {
			want := f.want
			probe := path == healthLivePath || path == healthReadyPath
			if (path == "/" && r.method == "GET") || probe {
				want = 200 // the console's page holds no data; a probe says yes or no
			}
			rec := guardTestDo(g, r.method, path, "10.231.7.1:4242", f.headers)
			if rec.Code != want {
				t.Errorf("%s %s with %s = %d %s; want %d", r.method, path, f.name, rec.Code, rec.Body, want)
				continue
			}
			if want == 401 && !guardTestAuthShape(path, guardTestJSON(rec)) && (f.name != "an earlier session" || httpGuardWire(path) != nil) {
				t.Errorf("%s %s with %s: 401 body %s; not the route's error shape", r.method, path, f.name, rec.Body)
			}
			if f.name == "console session" && path != "/" && !probe && rec.Header().Get("X-Seen-Authorization") != "Bearer "+consolePrincipal {
				t.Errorf("%s %s with a console session: routes saw Authorization %q; want the console's principal", r.method, path, rec.Header().Get("X-Seen-Authorization"))
			}
		}
	}
}

// TestHTTPGuardLoopbackCredentials checks the emulator's convention for the
// developer's own account: the API and the console need no credential,
// the chat wires any non-empty one.
func TestHTTPGuardLoopbackCredentials(t *testing.T) {
	g := guardTestNew(t, guardTestLoopback)
	for _, r := range routeTable(nil) {
		path := guardTestRoutePath(r.path)
		wire := !strings.HasPrefix(path, "/api/") && path != "/" && path != "/mcp" && path != metricsPath // MCP and the metrics are the runtime's own, like /api
		want := 200
		if wire {
			want = 401
		}
		rec := guardTestDo(g, r.method, path, "127.0.0.1:4242", nil)
		if rec.Code != want || want == 401 && !guardTestAuthShape(path, guardTestJSON(rec)) {
			t.Errorf("%s %s without a credential = %d %s; want %d in the route's shape", r.method, path, rec.Code, rec.Body, want)
		}
		if rec := guardTestDo(g, r.method, path, "127.0.0.1:4242", map[string]string{"x-api-key": "anything"}); rec.Code != 200 {
			t.Errorf("%s %s with any credential = %d %s; want 200", r.method, path, rec.Code, rec.Body)
		}
	}
}

// TestHTTPGuardConsoleSession checks the console link's code: traded once
// for a session, which the routes see as the console's principal and the
// dev-only routes as the dev key; a spent or unknown code is refused.
func TestHTTPGuardConsoleSession(t *testing.T) {
	cfg := guardTestListen
	cfg.Console = &consoleSessions{}
	g := guardTestNew(t, cfg)
	g.auth.(*httpGuardKeys).owner = nil
	code := cfg.Console.mintCode()
	trade := func(code string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", consoleSessionPath, strings.NewReader(`{"code":"`+code+`"}`))
		req.Host = "10.231.7.1:4242"
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		return rec
	}
	rec := trade(code)
	token, _ := guardTestJSON(rec)["token"].(string)
	if rec.Code != 200 || !strings.HasPrefix(token, consoleTokenPrefix) || rec.Header().Get("Cache-Control") != "no-store" || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("trade of a fresh code = %d %v %s; want 200 with a token, no-store, no cookie", rec.Code, rec.Header(), rec.Body)
	}
	for name, c := range map[string]string{"the spent code": code, "an unknown code": "nope", "no code": ""} {
		if rec := trade(c); rec.Code != 401 || wiresJSONAt(guardTestJSON(rec), "error.code") != "console_link_used" {
			t.Errorf("trade of %s = %d %s; want 401 console_link_used", name, rec.Code, rec.Body)
		}
	}
	var devKey bool
	g.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		devKey = devKeyShown(r)
		guardTestNext(w, r)
	})
	for _, tt := range []struct {
		cred   string
		devKey bool
	}{{token, true}, {"dev-key", true}, {"extra-key", false}} {
		devKey = false
		rec := guardTestDo(g, "GET", "/openai/v1/models", "10.231.7.1:4242", map[string]string{"Authorization": "Bearer " + tt.cred})
		if rec.Code != 200 || devKey != tt.devKey {
			t.Errorf("GET a wire with %q = %d, dev key shown %v; want 200, %v", tt.cred[:5], rec.Code, devKey, tt.devKey)
		}
	}
}

// TestHTTPGuardServer checks that the API server answers through the guard,
// built from the runtime's bind address and keys.
func TestHTTPGuardServer(t *testing.T) {
	core := func() *runtimeCore { return &runtimeCore{log: discardLogger()} }
	listen := &devRuntime{runtimeCore: core(), keys: []string{"dev-key"}, opts: devOptions{host: "0.0.0.0"}}
	loopback := &devRuntime{runtimeCore: core(), keys: []string{"dev-key"}}
	tests := []struct {
		name    string
		rt      *devRuntime
		host    string
		headers map[string]string
		want    int
	}{
		{"loopback, dev key", loopback, "127.0.0.1:4242", map[string]string{"x-api-key": "dev-key"}, 200},
		{"loopback, no credential and no connection the kernel lists", loopback, "127.0.0.1:4242", nil, 401},
		{"loopback, evil host", loopback, "evil.example", nil, 403},
		{"--listen, no credential", listen, "10.231.7.1:4242", nil, 401},
		{"--listen, dev key", listen, "10.231.7.1:4242", map[string]string{"Authorization": "Bearer dev-key"}, 200},
	}
	for _, tt := range tests {
		srv, err := newDevServer(tt.rt)
		if err != nil {
			t.Fatal(err)
		}
		if rec := guardTestDo(srv, "GET", "/api/contract", tt.host, tt.headers); rec.Code != tt.want {
			t.Errorf("%s: GET /api/contract = %d %s; want %d", tt.name, rec.Code, rec.Body, tt.want)
		}
	}
	if _, err := newDevServer(&devRuntime{runtimeCore: core(), opts: devOptions{host: "0.0.0.0"}}); err == nil {
		t.Errorf("newDevServer bound to 0.0.0.0 without keys succeeded; want an error")
	}
}

// TestDevAllowedListsInvalid checks that svc dev refuses a malformed
// SVC_ALLOWED_HOSTS or SVC_ALLOWED_ORIGINS before starting anything.
func TestDevAllowedListsInvalid(t *testing.T) {
	for _, env := range []map[string]string{{"SVC_ALLOWED_HOSTS": "http://devbox"}, {"SVC_ALLOWED_ORIGINS": "devbox:3000"}} {
		dir := t.TempDir()
		stdout, _, code := runInProcess(t, dir, env, "dev", "--json")
		if e := decodeEnvelope(t, stdout); code != 1 || e.Error == nil || e.Error.Code != codeGeneric || !strings.Contains(e.Error.Message, "SVC_ALLOWED_") {
			t.Errorf("dev with %v = exit %d, %s; want exit 1 naming the variable", env, code, stdout)
		}
	}
}

// guardTestDribble opens a connection to addr, sends head, then one body
// byte every 200 ms; it reports whether the server closed the connection
// within limit.
func guardTestDribble(t *testing.T, addr, head string, limit time.Duration) bool {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for range int(limit/(200*time.Millisecond)) + 1 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	conn.SetReadDeadline(time.Now().Add(limit))
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// guardTestS3 is an object-storage server behind a guard with the test
// pace, served with the production server limits.
func guardTestS3(t *testing.T) *s3TestEnv {
	t.Helper()
	e := newS3TestEnv(t)
	g, err := newHTTPGuard(e.server, httpGuardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	guardTestShrink(g)
	e.http = guardTestServe(t, g)
	return e
}

// TestHTTPGuardSlowBodyCut checks that a client sending one body byte every
// 200 ms is cut off, on the API and on unauthenticated object storage.
func TestHTTPGuardSlowBodyCut(t *testing.T) {
	srv, err := newTestServer(&runtimeCore{log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	guardTestShrink(srv.guard)
	api := guardTestServe(t, srv)
	s3 := guardTestS3(t)
	tests := []struct {
		name, addr, head string
	}{
		{"API", api.Listener.Addr().String(), "POST /api/hooks/tok HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"},
		{"API, chunked", api.Listener.Addr().String(), "POST /api/hooks/tok HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n"},
		{"S3 without a signature", s3.http.Listener.Addr().String(), "PUT /bucket/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"},
		{"S3 without a signature, small body", s3.http.Listener.Addr().String(), "PUT /bucket/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n"},
	}
	for _, tt := range tests {
		if !guardTestDribble(t, tt.addr, tt.head, 10*time.Second) {
			t.Errorf("%s: a body byte every 200ms still held the connection after 10s; want it cut after the %v grace", tt.name, guardTestGrace)
		}
	}
}

// guardTestPaced is a body that yields chunk bytes of data every pause.
type guardTestPaced struct {
	data  []byte
	chunk int
	pause time.Duration
}

// Read waits pause and yields the next chunk.
func (p *guardTestPaced) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(p.pause)
	n := copy(b[:min(len(b), p.chunk)], p.data)
	p.data = p.data[n:]
	return n, nil
}

// TestHTTPGuardBodyProgress checks that uploads that keep up finish: 64 MiB
// to object storage at full speed, and a slow one above the minimum rate.
func TestHTTPGuardBodyProgress(t *testing.T) {
	e := guardTestS3(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	e.do(t, s3TestRequest{method: "PUT", path: s3TestKeyPath("big"), body: big}).wantStatus(t, "64 MiB PUT", http.StatusOK)
	if got := e.do(t, s3TestRequest{method: "GET", path: s3TestKeyPath("big")}); got.status != 200 || !bytes.Equal(got.body, big) {
		t.Errorf("GET big = %d, %d bytes; want the 64 MiB back", got.status, len(got.body))
	}

	// 64 bytes every 10 ms is 6.4 KB/s, above 512 B/s, for about 1.5 s: past the grace.
	slow := bytes.Repeat([]byte("s"), 9600)
	req, err := http.NewRequest("PUT", e.http.URL+s3TestKeyPath("slow"), &guardTestPaced{data: slow, chunk: 64, pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(slow))
	s3TestSign(req, s3TestAccessKey, s3TestSecretKey, time.Now(), s3UnsignedPayload)
	e.send(t, req).wantStatus(t, "slow PUT above the rate", http.StatusOK)
}

// guardTestSlowModel answers each turn in two streamed pieces, pause apart.
type guardTestSlowModel struct{ pause time.Duration }

// complete streams "slow " and, after the pause, "answer".
func (m guardTestSlowModel) complete(ctx context.Context, req modelRequest, onDelta func(modelDelta)) (modelResponse, error) {
	if onDelta != nil {
		onDelta(modelDelta{Text: "slow "})
	}
	select {
	case <-ctx.Done():
		return modelResponse{}, ctx.Err()
	case <-time.After(m.pause):
	}
	if onDelta != nil {
		onDelta(modelDelta{Text: "answer"})
	}
	return modelResponse{Model: req.Model, Text: "slow answer", StopReason: stopEnd}, nil
}

// TestHTTPGuardLongAnswers checks that answers lasting well past the body's
// deadline are not cut: a long poll without a body, handlers that read a
// body (sized, chunked, paced; and once more past its end) and then wait,
// and a streamed chat turn.
func TestHTTPGuardLongAnswers(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	wait := 5 * guardTestGrace
	g, err := newHTTPGuard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		r.Body.Read(make([]byte, 1)) // past the end again, as a decoder looking for trailing data does
		select {
		case <-r.Context().Done():
			io.WriteString(w, "cancelled")
		case <-time.After(wait):
			io.WriteString(w, "done")
		}
	}), guardTestLoopback)
	if err != nil {
		t.Fatal(err)
	}
	guardTestShrink(g)
	ts := guardTestServe(t, g)
	body := strings.Repeat("b", 600)
	tests := []struct {
		name   string
		method string
		body   io.Reader
	}{
		{"long poll", "GET", nil},
		{"sized body", "POST", strings.NewReader(body)},
		{"chunked body", "POST", struct{ io.Reader }{strings.NewReader(body)}},
		// 50 bytes every 20 ms: 2.5 KB/s, five times the minimum rate.
		{"paced chunked body", "POST", &guardTestPaced{data: []byte(body), chunk: 50, pause: 20 * time.Millisecond}},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, ts.URL+"/api/runs/x?wait=30s", tt.body)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != "done" {
			t.Errorf("%s: answer %q after waiting %v; want done (the request's context was cancelled)", tt.name, got, wait)
		}
	}

	env := newWiresEnv(t, "")
	env.rt.agents.models = func(*modelProvider) modelClient { return guardTestSlowModel{pause: wait} }
	srv, err := newTestServer(env.rt)
	if err != nil {
		t.Fatal(err)
	}
	guardTestShrink(srv.guard)
	env.url = guardTestServe(t, srv).URL
	r := env.post(t, "/openai/v1/chat/completions", wiresBearer, wiresOpenAIBody("helper", "take your time", true))
	var text strings.Builder
	for _, ev := range r.Events {
		var chunk map[string]any
		if json.Unmarshal([]byte(ev.Data), &chunk) == nil {
			if s, ok := wiresJSONAt(chunk, "choices.0.delta.content").(string); ok {
				text.WriteString(s)
			}
		}
	}
	if r.Status != 200 || text.String() != "slow answer" || len(r.Events) == 0 || r.Events[len(r.Events)-1].Data != "[DONE]" {
		t.Errorf("streamed turn lasting %v = %d, text %q, %d events; want the whole answer and [DONE]", wait, r.Status, text.String(), len(r.Events))
	}
}

// TestHTTPServerLimits checks the limits of newHTTPServer: oversized
// headers get 431 and an idle keep-alive connection is closed.
func TestHTTPServerLimits(t *testing.T) {
	s := newHTTPServer(guardTestNext)
	if s.MaxHeaderBytes != httpMaxHeaderBytes || s.IdleTimeout != httpIdleTimeout || s.ReadHeaderTimeout != httpReadHeaderTimeout ||
		s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 || s.ReadTimeout != 0 || s.WriteTimeout != 0 {
		t.Errorf("newHTTPServer limits = header %d, idle %v, read header %v, read %v, write %v; want %d, %v, %v, none, none",
			s.MaxHeaderBytes, s.IdleTimeout, s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, httpMaxHeaderBytes, httpIdleTimeout, httpReadHeaderTimeout)
	}
	ts := guardTestServe(t, guardTestNext)
	req, _ := http.NewRequest("GET", ts.URL+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("h", 2*httpMaxHeaderBytes))
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("%d bytes of headers = %d; want 431", 2*httpMaxHeaderBytes, resp.StatusCode)
	}

	idle := httptest.NewUnstartedServer(guardTestNext)
	idle.Config = newHTTPServer(guardTestNext)
	idle.Config.IdleTimeout = guardTestGrace
	idle.Start()
	t.Cleanup(idle.Close)
	conn, err := net.DialTimeout("tcp", idle.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle keep-alive connection: read = %v; want EOF (closed by the server) within 10s", err)
	}
}

// guardTestNetnsDelete kills what still runs in the network namespace name
// (processes the test started there) and deletes it.
func guardTestNetnsDelete(name string) {
	out, _ := exec.Command("ip", "netns", "pids", name).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	exec.Command("ip", "netns", "del", name).Run()
}

// guardTestCurl runs curl in the network namespace ns and returns the
// status and the body.
func guardTestCurl(t *testing.T, ns string, args ...string) (int, string) {
	t.Helper()
	argv := append([]string{"netns", "exec", ns, "curl", "-sS", "-m", "20", "-w", "\n%{http_code}"}, args...)
	out, err := exec.Command("ip", argv...).Output()
	if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	i := strings.LastIndexByte(string(out), '\n')
	status, _ := strconv.Atoi(string(out[i+1:]))
	return status, string(out[:max(i, 0)])
}

// TestListenFromAnotherHost runs `svc dev --listen` in one network
// namespace and calls it from another over a veth pair: without the dev
// key nothing is answered or stored, a foreign Host or Origin is refused,
// and the CLI beside the runtime still works.
func TestListenFromAnotherHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (CI runs as root)")
	}
	for _, tool := range []string{"ip", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (packages iproute2 and curl; .ci/run installs them)", tool)
		}
	}
	dir := projectDir(t)
	sfx := strings.ToLower(rand.Text()[:6])
	nsA, nsB, vethA, vethB := "svcA"+sfx, "svcB"+sfx, "sva"+sfx, "svb"+sfx
	t.Cleanup(func() {
		guardTestNetnsDelete(nsA)
		guardTestNetnsDelete(nsB)
	})
	for _, args := range [][]string{
		{"netns", "add", nsA}, {"netns", "add", nsB},
		{"link", "add", vethA, "type", "veth", "peer", "name", vethB},
		{"link", "set", vethA, "netns", nsA}, {"link", "set", vethB, "netns", nsB},
		{"-n", nsA, "addr", "add", "10.231.7.1/24", "dev", vethA}, {"-n", nsB, "addr", "add", "10.231.7.2/24", "dev", vethB},
		{"-n", nsA, "link", "set", vethA, "up"}, {"-n", nsB, "link", "set", vethB, "up"},
		{"-n", nsA, "link", "set", "lo", "up"}, {"-n", nsB, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	port := freePortBase(t)
	d := startDevProcessVia(t, []string{"ip", "netns", "exec", nsA}, dir, port, baseEnv(), "--listen")
	t.Cleanup(func() { // stop it (and its PostgreSQL) cleanly before it is killed
		d.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
		}
	})
	d.payload = d.nextPayload(120 * time.Second)
	keyFile, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyFile))
	base := fmt.Sprintf("http://10.231.7.1:%d", port)
	bearer := "Authorization: Bearer " + key

	provider := `{"provider":"openai-compatible","apiKey":"sk-attacker","baseUrl":"http://10.231.7.2:9/v1"}`
	if status, body := guardTestCurl(t, nsB, "-X", "PUT", "-H", "Content-Type: application/json", "-d", provider, base+"/api/settings/model-provider"); status != 401 {
		t.Errorf("PUT model-provider without the key from another host = %d %s; want 401", status, body)
	}
	var health struct {
		Gate gateState `json:"gate"`
	}
	status, body := guardTestCurl(t, nsB, "-H", bearer, base+"/api/health")
	if json.Unmarshal([]byte(body), &health); status != 200 || health.Gate.Open || health.Gate.Reason != gateNoProvider {
		t.Errorf("health with the key = %d %s; want 200 with the gate still closed (nothing stored)", status, body)
	}
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"runs without the key", []string{base + "/api/runs"}, 401},
		{"runs with a wrong key", []string{"-H", "x-api-key: nope", base + "/api/runs"}, 401},
		{"the console's page, which holds no data", []string{base + "/"}, 200},
		{"a console session for a guessed code", []string{"-X", "POST", "-d", `{"code":"guess"}`, base + consoleSessionPath}, 401},
		{"runs with the key", []string{"-H", bearer, base + "/api/runs"}, 200},
		{"runs with the key as x-api-key", []string{"-H", "x-api-key: " + key, base + "/api/runs"}, 200},
		{"the metrics without the key", []string{base + "/metrics"}, 401},
		{"the metrics with the key", []string{"-H", bearer, base + "/metrics"}, 200},
		{"a foreign Host", []string{"-H", bearer, "-H", "Host: evil.example", base + "/api/runs"}, 403},
		{"a cross-origin POST with the key", []string{"-X", "POST", "-H", bearer, "-H", "Origin: http://evil.example", "-d", "{}", base + "/api/workflows/x/start"}, 403},
		{"a chat wire without the key", []string{"-X", "POST", "-d", "{}", base + "/openai/v1/chat/completions"}, 401},
	}
	for _, tt := range tests {
		if status, body := guardTestCurl(t, nsB, tt.args...); status != tt.want {
			t.Errorf("%s = %d %s; want %d", tt.name, status, body, tt.want)
		}
	}

	cmd := exec.Command("ip", "netns", "exec", nsA, svcBinary(t), "runs", "list", "--json")
	cmd.Dir, cmd.Env = dir, baseEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("svc runs list beside svc dev --listen: %v\n%s", err, out)
	}
}

// TestHTTPGuardOwner checks, over real loopback connections, who passes as
// the developer's own account without a key: a client of this process's
// account (the kernel's socket table says so), unless a browser sent the
// request for a page of another origin. Another account's client is
// refused in TestDevNeighbourAccount.
func TestHTTPGuardOwner(t *testing.T) {
	if !guardTestKernelLists(t) {
		t.Skip("this system does not say who owns a connection: every caller needs a key")
	}
	g, err := newHTTPGuard(guardTestNext, guardTestLoopback)
	if err != nil {
		t.Fatal(err)
	}
	ts := guardTestServe(t, g)
	self := ts.URL // http://127.0.0.1:<port>
	tests := []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"curl, SDKs, the CLI: no browser headers", nil, 200},
		{"typed into the browser", map[string]string{"Sec-Fetch-Site": "none"}, 200},
		{"the console's own page", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": self}, 200},
		{"a page on another port", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8000"}, 401},
		{"a page on another port, no-cors GET", map[string]string{"Sec-Fetch-Site": "same-site"}, 401},
		{"another site", map[string]string{"Sec-Fetch-Site": "cross-site"}, 401},
		{"a foreign Origin without fetch metadata", map[string]string{"Origin": "http://localhost:3000"}, 401},
		{"relayed by a proxy: Forwarded", map[string]string{"Forwarded": "for=192.0.2.7"}, 401},
		{"relayed by a proxy: X-Forwarded-For", map[string]string{"X-Forwarded-For": "127.0.0.1"}, 401},
		{"relayed by a proxy: Via", map[string]string{"Via": "1.1 vite"}, 401},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", self+"/api/runs", nil)
		for k, v := range tt.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: GET /api/runs = %d; want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

// guardTestKernelLists reports whether the kernel lists the owner of a
// loopback connection this test makes (Linux).
func guardTestKernelLists(t *testing.T) bool {
	_, s := peerTestPair(t, "tcp4", "127.0.0.1:0")
	uid, ok := peerTestUID(s)
	if ok && uid != uint32(os.Getuid()) {
		t.Fatalf("the kernel names uid %d as the owner of this test's own socket; want %d", uid, os.Getuid())
	}
	return ok
}
