package main

import (
	"context"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestCPReturnPath accepts only paths of the control plane's own origin
// as the place a sign-in goes back to, never one a browser would read as
// another host.
func TestCPReturnPath(t *testing.T) {
	for _, raw := range []string{
		"/", "/dev/ldi_1?url=https%3A%2F%2Fab.tun.test#/workflows/greet", "/device?code=ABCD-EFGH", "/%2F%2Fevil.example", "/a/../b",
	} {
		if got, ok := cpReturnPath(raw); !ok || got != raw {
			t.Errorf("cpReturnPath(%q) = %q, %v; want it as is", raw, got, ok)
		}
	}
	for _, raw := range []string{
		"", "dev/ldi_1", "//evil.example", "//evil.example/dev", "/\\evil.example", "\\\\evil.example", "/dev\\x",
		"https://evil.example", "http:/evil.example", "javascript:alert(1)", "/\t/evil.example", "/\n/evil.example", " /dev",
		"/dev /x", "/dév", "/dev\x7f", "/" + strings.Repeat("a", cpReturnMax),
	} {
		if got, ok := cpReturnPath(raw); ok {
			t.Errorf("cpReturnPath(%q) = %q; want refused", raw, got)
		}
	}
}

// TestCPDeviceReturn: the device page keeps the page to return to in its
// sign-in form, and a sign-in there sends the browser back to it (303,
// the Location as given, with the console cookie); another host is
// dropped from the page and ignored by the sign-in, which goes to the
// device page as before: no open redirect. Each sign-in spends a first
// boot's one-time code, so each case has its own control plane.
func TestCPDeviceReturn(t *testing.T) {
	back := "/dev/ldi_1?url=" + url.QueryEscape("https://ab.tun.test") + "#/workflows"
	for _, tt := range []struct{ ret, want string }{
		{back, back},
		{"//evil.example/x", "/device?code=ABCD-EFGH"},
	} {
		cp, code := startTestControlPlane(t, testPostgresURL(t))
		resp, page := cpConsoleSend(t, cp.url, "GET", "/device?code=ABCD-EFGH&return="+url.QueryEscape(tt.ret), "", "", nil)
		field := `name="return" value="` + template.HTMLEscapeString(tt.ret) + `"`
		if strings.Contains(page, field) != (tt.want == back) || strings.Contains(page, "evil.example") {
			t.Errorf("device page with return %q = %s; want the return in the sign-in form only when it is safe", tt.ret, page)
		}

		resp, _ = cpConsoleSend(t, cp.url, "POST", "/device/sign-in", "", cp.url, url.Values{"sign_in_code": {code}, "user_code": {"ABCD-EFGH"}, "return": {tt.ret}})
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != tt.want || len(resp.Cookies()) != 1 {
			t.Errorf("sign-in with return %q = %d to %q (cookies %v); want 303 to %q with the console cookie", tt.ret, resp.StatusCode, loc, resp.Cookies(), tt.want)
		}
	}
}

// TestCPBrowserSignInCode: `svc login --browser` mints the signed-in user a
// one-time code that signs a browser in on the device page (and comes
// back to the return path); the code works once and not after it
// expires; without a sign-in the command exits 2.
func TestCPBrowserSignInCode(t *testing.T) {
	db := testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	env := baseEnv("XDG_CONFIG_HOME=" + t.TempDir())
	if out, _, code := cli(t, t.TempDir(), env, "--json", "login", "--browser"); code != 2 || cpEnvelope(t, out, nil).Error.Code != codeAuth {
		t.Fatalf("login --browser before login = %d %s; want exit 2 auth", code, out)
	}
	if out, _, code := cli(t, t.TempDir(), env, "--json", "login", "--control-plane", cp.url, "--token", cpSignInAdmin(t, cp, first)); code != 0 {
		t.Fatalf("login --token = %d %s", code, out)
	}
	mint := func() cpNewSignInCode {
		t.Helper()
		var c cpNewSignInCode
		out, stderr, code := cli(t, t.TempDir(), env, "--json", "login", "--browser")
		if code != 0 || !cpEnvelope(t, out, &c).OK || c.Code == "" || c.SignInURL != cp.url+"/device" || time.Until(c.ExpiresAt) > cpSignInCodeTTL {
			t.Fatalf("login --browser = %d %s %s", code, out, stderr)
		}
		return c
	}
	signIn := func(code string) *http.Response {
		t.Helper()
		resp, _ := cpConsoleSend(t, cp.url, "POST", "/device/sign-in", "", cp.url, url.Values{"sign_in_code": {code}, "return": {"/dev/ldi_1?url=x"}})
		return resp
	}
	c := mint()
	if resp := signIn(c.Code); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dev/ldi_1?url=x" || len(resp.Cookies()) != 1 {
		t.Fatalf("browser sign-in = %d to %q; want 303 back with the console cookie", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := signIn(c.Code); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the browser code, twice = %d; want 401", resp.StatusCode)
	}
	c = mint()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE cp.signin_codes SET expires_at = now() - interval '1 second' WHERE code_hash = $1`, cpHash(cpNormalizeCode(c.Code))); err != nil {
		t.Fatal(err)
	}
	if resp := signIn(c.Code); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an expired browser code = %d; want 401", resp.StatusCode)
	}
}

// TestCPSignInFlood performs issue 18's flood: one source sends device
// starts without end. Only cpDevicePendingPerSource codes are kept
// pending for it, then 429 with Retry-After; its further sign-in requests
// (polls, one-time codes) are refused once it spent its burst, while
// another source still signs in; once many sources filled the control
// plane's cap of pending codes, a start from any is refused; the cleanup
// reads an index.
func TestCPSignInFlood(t *testing.T) {
	ctx := context.Background()
	c := newCPTestServer(t)
	now := time.Now()
	c.s.signInLimit.now = func() time.Time { return now } // no refill during the test
	const flooder, other = "203.0.113.66:1000", "198.51.100.2:2000"
	started, refused := 0, 0
	var first *httptest.ResponseRecorder
	for range cpSignInBurst + 20 {
		switch w := c.do(flooder, "POST", "/api/login/device", ""); w.Code {
		case http.StatusOK:
			started++
		case http.StatusTooManyRequests:
			if refused++; first == nil {
				first = w
			}
		default:
			t.Fatalf("device start = %d %s", w.Code, w.Body)
		}
	}
	if started != cpDevicePendingPerSource || first == nil || first.Header().Get("Retry-After") == "" || !strings.Contains(first.Body.String(), "rate_limited") {
		t.Fatalf("flood: %d started, %d refused (first refusal %v); want %d started, then 429 rate_limited with Retry-After", started, refused, first, cpDevicePendingPerSource)
	}
	var kept int
	if err := c.store.db.QueryRow(ctx, `SELECT count(*) FROM cp.device_codes`).Scan(&kept); err != nil || kept != cpDevicePendingPerSource {
		t.Fatalf("%d device codes kept (%v); want %d", kept, err, cpDevicePendingPerSource)
	}
	// The burst is spent: polls, one-time codes and the page's sign-in are refused too.
	for _, req := range [][3]string{
		{"/api/login/device/token", `{"device_code":"svc_dev_x"}`, "application/json"},
		{"/api/login/code", `{"code":"` + c.code + `"}`, "application/json"},
		{"/device/sign-in", "sign_in_code=" + c.code, cpFormType},
	} {
		if w := c.do(flooder, "POST", req[0], req[1], "Content-Type", req[2], "Origin", "http://cp.test"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("POST %s from the flooder = %d %s; want 429 with Retry-After", req[0], w.Code, w.Body)
		}
	}
	if w := c.do(other, "POST", "/api/login/device", ""); w.Code != http.StatusOK {
		t.Fatalf("device start from another source = %d %s; want 200", w.Code, w.Body)
	}
	if w := c.do(other, "POST", "/api/login/code", `{"code":"`+c.code+`"}`); w.Code != http.StatusOK {
		t.Fatalf("the one-time code from another source = %d %s; want 200", w.Code, w.Body)
	}
	// Many sources at their caps fill the control plane's: a start from yet
	// another is refused too.
	if _, err := c.store.db.Exec(ctx, `INSERT INTO cp.device_codes (device_hash, user_code, status, expires_at, client_addr)
		SELECT sha256(i::text::bytea), 'FLOOD' || i, 'pending', now() + interval '5 minutes', '10.0.' || (i / 20) || '.1'
		FROM generate_series(1, $1) i`, cpDevicePendingMax); err != nil {
		t.Fatal(err)
	}
	if w := c.do("192.0.2.200:3000", "POST", "/api/login/device", ""); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "wait for approval") {
		t.Fatalf("device start with %d codes pending = %d %s; want 429", cpDevicePendingMax, w.Code, w.Body)
	}
	var plan string
	if err := c.store.db.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'cp' AND indexname = 'device_codes_expires'`).Scan(&plan); err != nil || !strings.Contains(plan, "(expires_at)") {
		t.Fatalf("index of the device codes' expiry = %q, %v", plan, err)
	}
}

// TestCPClientRetriesRateLimits: a 429 whose Retry-After is short is sent
// again after it (svc login used to give up on a Retry-After of 1 s); a
// long one, or none, is the caller's answer at once.
func TestCPClientRetriesRateLimits(t *testing.T) {
	var sent atomic.Int32
	retryAfter := "0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := sent.Add(1); n <= 2 || retryAfter == "60" {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":{"code":"rate_limited","message":"slow down"}}`))
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	var out struct{ OK bool }
	if err := newCPClient(srv.URL, "").call(context.Background(), http.MethodPost, "/api/login/device", map[string]string{"a": "b"}, &out); err != nil || !out.OK || sent.Load() != 3 {
		t.Errorf("call = %v %+v after %d sends; want ok after 3", err, out, sent.Load())
	}
	sent.Store(0)
	retryAfter = "60"
	err := newCPClient(srv.URL, "").call(context.Background(), http.MethodPost, "/api/login/device", nil, &out)
	if cpErrorCode(err) != "rate_limited" || sent.Load() != 1 {
		t.Errorf("a Retry-After of a minute = %v after %d sends; want the 429 at once", err, sent.Load())
	}
}
