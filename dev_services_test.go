package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDevServices checks the settings page's routes on dev's API: the list
// leaves the secrets out; the reveal answers them to a console session,
// the dev key or the session token of .svc/runtime.json only, from this
// machine only; and through the tunnel (tunnelHandler) both are refused,
// even from a relay on loopback.
func TestDevServices(t *testing.T) {
	const (
		dbURL  = "postgres://svc:pg-secret@127.0.0.1:4243/svc"
		s3Key  = "AKIDEXAMPLE"
		s3Pass = "s3-secret-value"
		api    = "127.0.0.1:4242"
	)
	core := &runtimeCore{log: discardLogger(), proj: &project{Dir: t.TempDir()}, apiURL: "http://" + api, baseEnv: map[string]string{
		"DATABASE_URL": dbURL, "S3_ENDPOINT": "http://127.0.0.1:4244", "S3_BUCKET": "app", "S3_REGION": "us-east-1",
		"S3_ACCESS_KEY_ID": s3Key, "S3_SECRET_ACCESS_KEY": s3Pass}}
	rt := &devRuntime{runtimeCore: core, devToken: "session-token", keys: []string{"dev-key", "extra-key"}, console: &consoleSessions{}}
	srv, err := newDevServer(rt)
	if err != nil {
		t.Fatal(err)
	}
	// A recorded request has no connection the kernel lists: take each as
	// the developer's account, as far as the browser's headers allow.
	srv.guard.auth.(*httpGuardKeys).owner = httpGuardNotForAnotherPage
	session, _ := rt.console.trade(rt.console.mintCode())
	serve := func(h http.Handler, method, path, remote string, headers map[string]string) *httptest.ResponseRecorder {
		from := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.RemoteAddr = remote
			h.ServeHTTP(w, r)
		})
		return guardTestDo(from, method, "http://"+api+path, api, headers)
	}
	const local = "127.0.0.1:50000"
	page := map[string]string{"Origin": "http://" + api, "Sec-Fetch-Site": "same-origin"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	console := with(page, "Authorization", "Bearer "+session)

	list := serve(srv, "GET", "/api/dev/services", local, nil)
	var body struct {
		Services []devService `json:"services"`
	}
	if err := json.Unmarshal(list.Body.Bytes(), &body); list.Code != 200 || err != nil || len(body.Services) != 3 {
		t.Fatalf("GET /api/dev/services = %d %s", list.Code, list.Body)
	}
	for _, secret := range []string{"pg-secret", s3Key, s3Pass, "dev-key"} {
		if strings.Contains(list.Body.String(), secret) {
			t.Errorf("the list shows the secret %q: %s", secret, list.Body)
		}
	}
	if db := body.Services[1]; db.URL != "postgres://svc:***@127.0.0.1:4243/svc" || !db.Vars[0].Secret {
		t.Errorf("database = %+v; want the URL with its password hidden", db)
	}
	if s3 := body.Services[2]; s3.URL != "http://127.0.0.1:4244" || len(s3.Vars) != 5 || s3.Vars[1].Value != "app" || s3.Vars[4].Value != "" || !s3.Vars[4].Secret {
		t.Errorf("object storage = %+v", s3)
	}

	tests := []struct {
		name    string
		h       http.Handler
		method  string
		path    string
		remote  string
		headers map[string]string
		status  int
	}{
		{"reveal to the console's page with its session", srv, "POST", "/api/dev/services/reveal", local, console, 200},
		{"reveal to the console's page without a session", srv, "POST", "/api/dev/services/reveal", local, page, 403},
		{"reveal to the console's page with an earlier session", srv, "POST", "/api/dev/services/reveal", local, with(page, "Authorization", "Bearer "+consoleTokenPrefix+"guess"), 401},
		{"reveal with the session from another site", srv, "POST", "/api/dev/services/reveal", local, with(console, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), 403},
		{"reveal with the dev key", srv, "POST", "/api/dev/services/reveal", local, map[string]string{"x-api-key": "dev-key"}, 200},
		{"reveal with a key of SVC_API_KEYS", srv, "POST", "/api/dev/services/reveal", local, map[string]string{"x-api-key": "extra-key"}, 403},
		{"reveal with the session token", srv, "POST", "/api/dev/services/reveal", local, map[string]string{devTokenHeader: "session-token"}, 200},
		{"reveal without either", srv, "POST", "/api/dev/services/reveal", local, nil, 403},
		{"reveal with a wrong token", srv, "POST", "/api/dev/services/reveal", local, map[string]string{devTokenHeader: "guess"}, 403},
		{"reveal to another localhost port", srv, "POST", "/api/dev/services/reveal", local, map[string]string{"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"}, 401},
		{"reveal to a same-origin claim from elsewhere", srv, "POST", "/api/dev/services/reveal", local, map[string]string{"Origin": "http://localhost:4242", "Sec-Fetch-Site": "same-origin"}, 401},
		{"reveal without Sec-Fetch-Site", srv, "POST", "/api/dev/services/reveal", local, map[string]string{"Origin": "http://" + api}, 403},
		{"reveal from another machine", srv, "POST", "/api/dev/services/reveal", "192.0.2.7:50000", console, 403},
		{"list from another machine", srv, "GET", "/api/dev/services", "192.0.2.7:50000", nil, 403},
		{"list through the tunnel", tunnelHandler(srv, api), "GET", "/api/dev/services", local, nil, 403},
		{"reveal through the tunnel", tunnelHandler(srv, api), "POST", "/api/dev/services/reveal", local, console, 403},
		{"env through the tunnel", tunnelHandler(srv, api), "GET", "/api/dev/env", local, map[string]string{devTokenHeader: "session-token"}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(tt.h, tt.method, tt.path, tt.remote, tt.headers)
			if w.Code != tt.status {
				t.Fatalf("%s %s = %d %s; want %d", tt.method, tt.path, w.Code, w.Body, tt.status)
			}
			revealed := strings.Contains(w.Body.String(), s3Pass)
			if revealed != (tt.status == 200 && strings.HasSuffix(tt.path, "/reveal")) {
				t.Errorf("body %s: secrets revealed = %v", w.Body, revealed)
			}
			if tt.status == 200 && w.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control = %q; want no-store", w.Header().Get("Cache-Control"))
			}
		})
	}
}
