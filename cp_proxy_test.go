package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cpHoldProvider serves the fake provider through a gate: once armed, the
// next streamed answer pauses after its second event (an OpenAI stream's
// role, then its first piece of text) until released, so a test can tell
// a stream that is passed on from one that is buffered.
type cpHoldProvider struct {
	*httptest.Server
	fake *fakeProvider
	mu   sync.Mutex
	gate chan struct{}
}

// newCPHoldProvider starts a gated fake provider, closed when the test ends.
func newCPHoldProvider(t testing.TB) *cpHoldProvider {
	p := &cpHoldProvider{fake: newFakeProvider(t)}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		gate := p.gate
		p.gate = nil
		p.mu.Unlock()
		if gate != nil {
			w = &cpHoldWriter{ResponseWriter: w, gate: gate}
		}
		p.fake.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// arm gates the next answer; release lets it go on (at most 30s later it
// goes on anyway, so no test hangs).
func (p *cpHoldProvider) arm() (release func()) {
	gate := make(chan struct{})
	p.mu.Lock()
	p.gate = gate
	p.mu.Unlock()
	return sync.OnceFunc(func() { close(gate) })
}

// cpHoldWriter blocks after its second flush until its gate closes.
type cpHoldWriter struct {
	http.ResponseWriter
	gate    chan struct{}
	flushes int
}

// Flush flushes, then, the second time, waits for the gate.
func (h *cpHoldWriter) Flush() {
	http.NewResponseController(h.ResponseWriter).Flush()
	if h.flushes++; h.flushes == 2 {
		select {
		case <-h.gate:
		case <-time.After(30 * time.Second):
		}
	}
}

// cpProxyFixture is a control plane with a signed-in admin, an API key, and
// a box linked as agent "demo" of organization "default", whose model is a
// gated fake provider.
type cpProxyFixture struct {
	cp     *cpProcess
	dbURL  string // the control plane's database
	box    *boxProcess
	model  *cpHoldProvider
	admin  string // the admin's credential
	key    string // an API key of the organization
	secret []byte // the box's signing secret
	boxDB  string // the box's DATABASE_URL
	proxy  string // cp URL + "/default/demo"
	org    string // cp URL + "/api/orgs/default"
}

// startCPProxyFixture starts the processes and links the box through the
// control plane's link route.
func startCPProxyFixture(t testing.TB) *cpProxyFixture {
	t.Helper()
	f := &cpProxyFixture{model: newCPHoldProvider(t), boxDB: testPostgresURL(t)}
	var code string
	f.dbURL = testPostgresURL(t)
	f.cp, code = startTestControlPlane(t, f.dbURL)
	f.admin, f.org, f.proxy = cpSignInAdmin(t, f.cp, code), f.cp.url+"/api/orgs/default", f.cp.url+"/default/demo"
	f.box = startBox(t, projectDir(t), t.TempDir(), baseEnv("DATABASE_URL="+f.boxDB, "SVC_CONTROL_PLANE_URL="+f.cp.url,
		"SVC_IMAGE_TAG=1.0.0", "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+f.model.URL+"/v1"))
	var m []string
	eventually(t, 10*time.Second, "the box's minted secret", func() bool {
		m = boxSecretLine.FindStringSubmatch(f.box.stderr.String())
		return m != nil
	})
	f.secret = []byte(m[1])
	if code := httpJSONAuth(t, "POST", f.org+"/agents", f.admin, map[string]string{"slug": "demo", "name": "Demo"}, nil); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	f.link(t)
	var key struct{ Key string }
	if code := httpJSONAuth(t, "POST", f.org+"/api-keys", f.admin, map[string]string{"name": "proxy"}, &key); code != 201 || key.Key == "" {
		t.Fatalf("create API key = %d", code)
	}
	f.key = key.Key
	return f
}

// link links the box to agent demo through the control plane's link route.
func (f *cpProxyFixture) link(t testing.TB) {
	t.Helper()
	if code := httpJSONAuth(t, "POST", f.org+"/agents/demo/link", f.admin, cpLinkRequest{URL: f.box.url, Secret: string(f.secret), ImageTag: "1.0.0"}, nil); code != 200 {
		t.Fatalf("link = %d\n%s", code, f.cp.stderr.String())
	}
}

// deployment reads the agent's deployment record from the control plane.
func (f *cpProxyFixture) deployment(t testing.TB) cpDeployment {
	t.Helper()
	var d cpDeployment
	if code := httpJSONAuth(t, "GET", f.org+"/agents/demo/deployment", f.admin, nil, &d); code != 200 {
		t.Fatalf("GET deployment = %d", code)
	}
	return d
}

// cpProxyDo sends a request with the header name: value (none when value
// is "") and returns the answer.
func cpProxyDo(t testing.TB, client *http.Client, method, url, name, value string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if value != "" {
		req.Header.Set(name, value)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// cpProxyChat is an OpenAI chat completion request for the scaffold's agent.
func cpProxyChat(text string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": "assistant", "stream": stream, "messages": []map[string]string{{"role": "user", "content": text}}})
	return b
}

// cpFirstEvent reads r up to and including its first SSE data line.
func cpFirstEvent(r *bufio.Reader) (string, error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil || strings.HasPrefix(line, "data:") {
			return line, err
		}
	}
}

// TestControlPlaneProxy runs a control plane, a box linked to it and a
// fake model provider as real processes on loopback, and calls the box
// through the proxy: a chat completion with an API key, whole and streamed
// (the first event arrives while the provider holds the rest); a workflow
// start and its long poll with a user credential; the refusals (no, an
// unknown or a tampered credential 401; an API key off the chat wires and
// the box's own channel 403; unknown organization, agent, or no deployment
// 404; an oversized body 413); and every status transition: registered,
// active, rejected (the box refuses the signature), active again,
// unreachable (the box stopped, 502).
func TestControlPlaneProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane and a box")
	}
	f := startCPProxyFixture(t)
	client := &http.Client{Timeout: 60 * time.Second}
	if d := f.deployment(t); d.Status != cpStatusRegistered || d.LastActiveAt != nil {
		t.Fatalf("after link: %+v; want registered, never active", d)
	}

	// A whole chat completion with an API key, which the box never sees.
	resp, body := cpProxyDo(t, client, "POST", f.proxy+"/openai/v1/chat/completions", "Authorization", "Bearer "+f.key, cpProxyChat("hello there", false))
	if resp.StatusCode != 200 || !strings.Contains(string(body), "echo: hello there") {
		t.Fatalf("chat through the proxy = %d %s", resp.StatusCode, body)
	}
	// A durable session belongs to the caller the control plane proxies
	// for: the same x-svc-session key from another credential is another
	// session (the box scopes it by the signed principal header).
	for _, turn := range []struct{ cred, text string }{{f.key, "alpha from the key"}, {f.admin, "beta from the admin"}} {
		req, _ := http.NewRequest("POST", f.proxy+"/openai/v1/chat/completions", bytes.NewReader(cpProxyChat(turn.text, false)))
		req.Header.Set("Authorization", "Bearer "+turn.cred)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Svc-Session", "shared-key")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("session turn %q = %d %s", turn.text, resp.StatusCode, b)
		}
	}
	reqs := f.model.fake.requests()
	if last := string(reqs[len(reqs)-1].Raw); !strings.Contains(last, "beta from the admin") || strings.Contains(last, "alpha from the key") {
		t.Errorf("the admin's turn in session shared-key carried another caller's history: %s", last)
	}
	if d := f.deployment(t); d.Status != cpStatusActive || d.LastActiveAt == nil {
		t.Errorf("after a proxied call: %+v; want active with last_active_at", d)
	}

	// Streamed: the first event arrives while the provider holds the rest.
	release := f.model.arm()
	defer release()
	req, _ := http.NewRequest("POST", f.proxy+"/openai/v1/chat/completions", bytes.NewReader(cpProxyChat("one two three four", true)))
	req.Header.Set("x-api-key", f.key)
	stream, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if ct := stream.Header.Get("Content-Type"); stream.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("streamed chat = %d %s", stream.StatusCode, ct)
	}
	sse := bufio.NewReader(stream.Body)
	first := make(chan string, 1)
	go func() { line, _ := cpFirstEvent(sse); first <- line }()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, "data: {") || strings.Contains(line, "four") {
			t.Errorf("first event = %q", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no SSE event through the proxy while the provider held its answer: the proxy buffers")
	}
	release()
	rest, _ := io.ReadAll(sse)
	if !strings.Contains(string(rest), "data: [DONE]") || !strings.Contains(string(rest), "four") {
		t.Errorf("rest of the stream = %q; want the remaining words and [DONE]", rest)
	}

	// A workflow start and its long poll, with the admin's credential.
	var receipt startReceipt
	resp, body = cpProxyDo(t, client, "POST", f.proxy+"/api/workflows/ping/start", "Authorization", "Bearer "+f.admin, []byte(`{}`))
	if json.Unmarshal(body, &receipt); resp.StatusCode != 202 || receipt.RunID == "" {
		t.Fatalf("start through the proxy = %d %s", resp.StatusCode, body)
	}
	resp, body = cpProxyDo(t, client, "GET", f.proxy+"/api/runs/"+receipt.RunID+"?wait=30s", "Authorization", "Bearer "+f.admin, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "pong") {
		t.Errorf("long poll through the proxy = %d %s; want the finished run", resp.StatusCode, body)
	}

	// Refusals, each with the error shape.
	for _, tt := range []struct {
		name, method, url, header, value string
		body                             []byte
		status                           int
		code                             string
	}{
		{"no credential", "GET", f.proxy + "/openai/v1/models", "", "", nil, 401, codeAuth},
		{"unknown key", "GET", f.proxy + "/openai/v1/models", "x-api-key", "svc_key_unknown", nil, 401, codeAuth},
		{"tampered key", "GET", f.proxy + "/openai/v1/models", "x-api-key", f.key[:len(f.key)-1] + "x", nil, 401, codeAuth},
		{"API key off the chat wires", "GET", f.proxy + "/api/workflows", "x-api-key", f.key, nil, 403, "forbidden"},
		{"the box's own channel", "POST", f.proxy + "/.well-known/svc/teach", "Authorization", "Bearer " + f.admin, []byte(`{}`), 403, "forbidden"},
		{"the box's own channel, escaped", "POST", f.proxy + "/%2Ewell-known/svc/teach", "Authorization", "Bearer " + f.admin, []byte(`{}`), 403, "forbidden"},
		{"unknown organization", "GET", f.cp.url + "/nope/demo/api/workflows", "Authorization", "Bearer " + f.admin, nil, 404, codeNotFound},
		{"unknown agent", "GET", f.cp.url + "/default/nope/api/workflows", "Authorization", "Bearer " + f.admin, nil, 404, codeNotFound},
		{"oversized body", "POST", f.proxy + "/api/workflows/ping/start", "Authorization", "Bearer " + f.admin, make([]byte, cpProxyMaxBody+1), 413, "too_large"},
	} {
		var e struct{ Error apiError }
		resp, body := cpProxyDo(t, client, tt.method, tt.url, tt.header, tt.value, tt.body)
		if json.Unmarshal(body, &e); resp.StatusCode != tt.status || e.Error.Code != tt.code || e.Error.Message == "" {
			t.Errorf("%s: %d %.300s; want %d %s", tt.name, resp.StatusCode, body, tt.status, tt.code)
		}
	}
	if code := httpJSONAuth(t, "POST", f.org+"/agents", f.admin, map[string]string{"slug": "idle"}, nil); code != 201 {
		t.Fatalf("create agent idle = %d", code)
	}
	var e struct{ Error apiError }
	if resp, body := cpProxyDo(t, client, "GET", f.cp.url+"/default/idle/api/workflows", "Authorization", "Bearer "+f.admin, nil); json.Unmarshal(body, &e) != nil || resp.StatusCode != 404 || e.Error.Code != "no_deployment" {
		t.Errorf("an agent without a deployment = %d %s; want 404 no_deployment", resp.StatusCode, body)
	}

	// Rejected: the recorded secret is not the box's (as when the box's
	// secret changed after link); re-linking heals.
	cpTestRecordDeployment(t, f.dbURL, "demo", f.box.url, []byte("not-the-box-secret-0123456789abcdef"))
	resp, body = cpProxyDo(t, client, "GET", f.proxy+"/api/workflows", "Authorization", "Bearer "+f.admin, nil)
	if json.Unmarshal(body, &e); resp.StatusCode != 502 || e.Error.Code != cpCodeBoxRejected {
		t.Errorf("a box refusing the signature = %d %s; want 502 %s", resp.StatusCode, body, cpCodeBoxRejected)
	}
	if d := f.deployment(t); d.Status != cpStatusRejected {
		t.Errorf("after a refused signature: %+v; want rejected", d)
	}
	f.link(t)
	if resp, body := cpProxyDo(t, client, "GET", f.proxy+"/api/workflows", "Authorization", "Bearer "+f.admin, nil); resp.StatusCode != 200 {
		t.Errorf("after re-linking = %d %s", resp.StatusCode, body)
	}
	if d := f.deployment(t); d.Status != cpStatusActive {
		t.Errorf("after re-linking: %+v; want active", d)
	}

	// Unreachable: the box stopped.
	f.box.stop()
	resp, body = cpProxyDo(t, client, "GET", f.proxy+"/openai/v1/models", "x-api-key", f.key, nil)
	if json.Unmarshal(body, &e); resp.StatusCode != 502 || e.Error.Code != linkCodeUnreachable {
		t.Errorf("a stopped box = %d %s; want 502 %s", resp.StatusCode, body, linkCodeUnreachable)
	}
	if d := f.deployment(t); d.Status != cpStatusUnreachable || d.LastActiveAt == nil {
		t.Errorf("after a stopped box: %+v; want unreachable, last_active_at kept", d)
	}
	f.cp.stop()
	for name, out := range map[string]string{"control plane": f.cp.stdout.String() + f.cp.stderr.String(), "box": f.box.stdout.String() + f.box.stderr.String()} {
		if strings.Contains(out, f.key) || strings.Contains(out, f.admin) {
			t.Errorf("the %s logged a caller's credential", name)
		}
	}
}

// TestCPProxyFlood is the attack of issue 18 item 1 through the real
// processes: one API key floods the proxy with invalid chat requests. It
// is held to its rate (429 with Retry-After) while the box never refuses
// the control plane's signature; another caller's request then succeeds
// and the deployment stays active. A box refusing for capacity (its
// senders full) is a retryable 503 that leaves the status alone.
func TestCPProxyFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane and a box")
	}
	f := startCPProxyFixture(t)
	client := &http.Client{Timeout: 60 * time.Second}
	var (
		sent, limited atomic.Int64
		mu            sync.Mutex
		refusal       *http.Response
		other         []string // answers neither the box's 400 nor a 429
	)
	invalid := []byte(`{"model":"assistant","messages":"not a list"}`)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for limited.Load() == 0 && sent.Add(1) <= 5000 {
				req, _ := http.NewRequest("POST", f.proxy+"/openai/v1/chat/completions", bytes.NewReader(invalid))
				req.Header.Set("x-api-key", f.key)
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					other = append(other, err.Error())
					mu.Unlock()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				switch resp.StatusCode {
				case http.StatusTooManyRequests:
					if limited.Add(1) == 1 {
						refusal = resp
						refusal.Body = io.NopCloser(bytes.NewReader(body))
					}
				case http.StatusBadRequest:
				default:
					other = append(other, fmt.Sprintf("%d %.200s", resp.StatusCode, body))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if refusal == nil {
		t.Fatalf("%d proxied requests of one API key were never rate limited", sent.Load())
	}
	var e struct{ Error apiError }
	body, _ := io.ReadAll(refusal.Body)
	if secs, err := strconv.Atoi(refusal.Header.Get("Retry-After")); json.Unmarshal(body, &e) != nil || e.Error.Code != "rate_limited" || err != nil || secs < 1 {
		t.Errorf("the refusal = Retry-After %q %s; want a Retry-After in seconds and %s", refusal.Header.Get("Retry-After"), body, "rate_limited")
	}
	if len(other) > 0 {
		t.Errorf("during the flood the proxy answered %d times neither the box's 400 nor 429: %q", len(other), other[0])
	}
	resp, body := cpProxyDo(t, client, "POST", f.proxy+"/openai/v1/chat/completions", "Authorization", "Bearer "+f.admin, cpProxyChat("after the flood", false))
	if resp.StatusCode != 200 || !strings.Contains(string(body), "echo: after the flood") {
		t.Fatalf("another caller after the flood = %d %s", resp.StatusCode, body)
	}
	if d := f.deployment(t); d.Status != cpStatusActive {
		t.Errorf("after the flood: %+v; want active", d)
	}

	// The box at its senders' cap, the control plane's sender forgotten
	// (as after a restart of the control plane): refused for capacity.
	boxFillSenders(t, f.boxDB, `DELETE FROM svc.sign_senders`)
	boxFillSenders(t, f.boxDB, boxSendersFull)
	resp, body = cpProxyDo(t, client, "GET", f.proxy+"/api/workflows", "Authorization", "Bearer "+f.admin, nil)
	if json.Unmarshal(body, &e); resp.StatusCode != 503 || e.Error.Code != signCodeReplayWindow || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a box at its senders' cap = %d %s; want 503 %s with Retry-After", resp.StatusCode, body, signCodeReplayWindow)
	}
	if d := f.deployment(t); d.Status != cpStatusActive {
		t.Errorf("after a refusal for capacity: %+v; want active, not rejected", d)
	}
	boxFillSenders(t, f.boxDB, `DELETE FROM svc.sign_senders WHERE sender LIKE 'filler-sender-%'`)
	if resp, body := cpProxyDo(t, client, "GET", f.proxy+"/api/workflows", "Authorization", "Bearer "+f.admin, nil); resp.StatusCode != 200 {
		t.Errorf("once the box has room = %d %s; want 200", resp.StatusCode, body)
	}
}

// TestCPProxyRequestParts checks what the proxy forwards: the path after
// /{org}/{agent}/ as escaped, and headers without credentials, signatures
// and hop-by-hop ones (including those Connection names).
func TestCPProxyRequestParts(t *testing.T) {
	for _, tt := range []struct {
		in               string
		escaped, decoded string
		ok               bool
	}{
		{"/o/a/api/runs/x", "api/runs/x", "api/runs/x", true},
		{"/o/a/", "", "", true},
		{"/o/a/api/a%2Fb", "api/a%2Fb", "api/a/b", true},
		{"/o/a/%zz", "", "", false},
	} {
		got, ok := cpProxyRest(tt.in)
		if ok != tt.ok || (ok && (got.escaped != tt.escaped || got.decoded != tt.decoded)) {
			t.Errorf("cpProxyRest(%q) = %+v, %v", tt.in, got, ok)
		}
	}
	h := http.Header{}
	for _, k := range []string{"Authorization", "Cookie", "X-Api-Key", "Connection", "X-Hop", "Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", signSignatureHeader, signNonceHeader, signTimestampHeader, "Accept", "X-Svc-Session"} {
		h.Set(k, "v")
	}
	h.Set("Connection", "X-Hop, keep-alive")
	var kept []string
	for k := range cpProxyHeaders(h, cpProxyCredentialHeaders) {
		kept = append(kept, k)
	}
	slices.Sort(kept)
	if fmt.Sprint(kept) != "[Accept X-Svc-Session]" {
		t.Errorf("forwarded headers = %v; want [Accept X-Svc-Session]", kept)
	}
}

// cpProxyPercentiles reports the p50 and p99 of samples, in µs, as
// metrics named prefix-p50-µs and prefix-p99-µs.
func cpProxyPercentiles(b *testing.B, prefix string, samples []time.Duration) {
	slices.Sort(samples)
	at := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), prefix+"-p50-µs")
	b.ReportMetric(at(0.99), prefix+"-p99-µs")
}

// BenchmarkProxy measures the proxy's added latency on loopback, against
// one box: a small request (GET /openai/v1/models) signed and sent to the
// box directly vs sent through the control plane with an API key, and the
// time to the first byte of a streamed chat answer, direct vs proxied.
// Direct and proxied calls alternate, so both see the same machine load.
//
//	go test -run '^$' -bench BenchmarkProxy -benchtime 300x .
func BenchmarkProxy(b *testing.B) {
	f := startCPProxyFixture(b)
	client := &http.Client{Timeout: 60 * time.Second}
	// The proxied calls keep under the caller's rate limit: after
	// cpProxyBurst*4/5 of them back to back, a pause lets the bucket refill,
	// so no run is cut short by a 429 whatever its count.
	proxiedCalls := 0
	call := func(url string, body []byte, sign bool, firstByte bool) time.Duration {
		if !sign {
			if proxiedCalls++; proxiedCalls%(cpProxyBurst*4/5) == 0 {
				time.Sleep(time.Duration(cpProxyBurst*4/5) * time.Second / cpProxyRate)
			}
		}
		method := "GET"
		if body != nil {
			method = "POST"
		}
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		if sign {
			testSender.sign(req, body, f.secret, time.Now())
		} else {
			req.Header.Set("x-api-key", f.key)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var took time.Duration
		if firstByte {
			var one [1]byte
			io.ReadFull(resp.Body, one[:])
			took = time.Since(start)
		}
		io.Copy(io.Discard, resp.Body)
		if !firstByte {
			took = time.Since(start)
		}
		if resp.StatusCode != 200 {
			b.Fatalf("%s %s = %d", method, url, resp.StatusCode)
		}
		return took
	}
	b.Run("small", func(b *testing.B) {
		var direct, proxied []time.Duration
		for range b.N {
			direct = append(direct, call(f.box.url+"/openai/v1/models", nil, true, false))
			proxied = append(proxied, call(f.proxy+"/openai/v1/models", nil, false, false))
		}
		cpProxyPercentiles(b, "direct", direct)
		cpProxyPercentiles(b, "proxy", proxied)
	})
	b.Run("sse_first_byte", func(b *testing.B) {
		chat := cpProxyChat("one two three", true)
		var direct, proxied []time.Duration
		for range b.N {
			direct = append(direct, call(f.box.url+"/openai/v1/chat/completions", chat, true, true))
			proxied = append(proxied, call(f.proxy+"/openai/v1/chat/completions", chat, false, true))
		}
		cpProxyPercentiles(b, "direct", direct)
		cpProxyPercentiles(b, "proxy", proxied)
	})
}
