package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envelopeProcess is a verb under test that prints one --json envelope
// line once it serves (svc control-plane, svc serve).
type envelopeProcess struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	exited chan struct{}
}

// startEnvelopeProcess runs svc with args and env, waits (bounded) for its
// first stdout line, an ok envelope, and decodes its data into data.
func startEnvelopeProcess(t testing.TB, env []string, data any, args ...string) *envelopeProcess {
	t.Helper()
	cmd := exec.Command(svcBinary(t), args...)
	cmd.Env = env
	return startEnvelopeCommand(t, cmd, data)
}

// startEnvelopeCommand is startEnvelopeProcess for a command that runs svc
// some other way (in a container: containerPodman.startBox); cmd's stdout
// and stderr must be unset.
func startEnvelopeCommand(t testing.TB, cmd *exec.Cmd, data any) *envelopeProcess {
	t.Helper()
	p := &envelopeProcess{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	what := strings.Join(append([]string{filepath.Base(cmd.Args[0])}, cmd.Args[1:]...), " ")
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.stdout.Write([]byte(sc.Text() + "\n"))
			select {
			case lines <- sc.Text():
			default:
			}
		}
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	select {
	case line := <-lines:
		var env struct {
			OK   bool            `json:"ok"`
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal([]byte(line), &env); !env.OK || json.Unmarshal(env.Data, data) != nil {
			t.Fatalf("%s printed %q\nstderr:\n%s", what, line, p.stderr.String())
		}
	case <-p.exited:
		t.Fatalf("%s exited early (%v)\nstderr:\n%s", what, p.cmd.ProcessState, p.stderr.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("%s not up after 90s\nstderr:\n%s", what, p.stderr.String())
	}
	return p
}

// stop interrupts the process and waits (bounded) for it to exit; its
// stdout and stderr are then complete.
func (p *envelopeProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("svc did not stop within 30s of SIGINT")
	}
}

// boxProcess is a running `svc --json serve` under test.
type boxProcess struct {
	*envelopeProcess
	url   string
	ready servePayload
}

// startBox starts `svc --json serve --addr 127.0.0.1:0 --data data dir`
// with env and waits for its payload line.
func startBox(t testing.TB, dir, data string, env []string) *boxProcess {
	t.Helper()
	b := &boxProcess{}
	b.envelopeProcess = startEnvelopeProcess(t, env, &b.ready, "--json", "serve", "--addr", "127.0.0.1:0", "--data", data, dir)
	b.url = b.ready.URL
	return b
}

// boxReply is an HTTP answer of the box.
type boxReply struct {
	status int
	body   []byte
	header http.Header
}

// boxDo sends a request to the box: signed with secret at signedAt when
// secret is not nil, with the bearer token when not "", and with the
// headers of edit applied last (to tamper). body is sent as is.
func boxDo(t testing.TB, method, url string, body []byte, secret []byte, signedAt time.Time, token string, edit func(*http.Request)) boxReply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != nil {
		testSender.sign(req, body, secret, signedAt)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return boxReply{resp.StatusCode, b, resp.Header}
}

// boxHandshakeOf reads the box's public handshake.
func boxHandshakeOf(t testing.TB, url string) boxHandshake {
	t.Helper()
	var h boxHandshake
	if code := httpJSON(t, "GET", url+boxWellKnown, nil, &h); code != 200 {
		t.Fatalf("GET %s = %d", boxWellKnown, code)
	}
	return h
}

// boxMAC is what the box must answer to challenge under secret.
func boxMAC(secret []byte, challenge string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(challenge))
	return hex.EncodeToString(m.Sum(nil))
}

// boxSecretLine finds the minted secret in a box's log.
var boxSecretLine = regexp.MustCompile(`signing_secret=([0-9a-f]{64})`)

// TestBoxServe runs a control plane and two boxes as real processes on
// loopback: the handshake; the minted secret, logged once and reused
// across a restart, HMAC_SECRET winning over it; the signed challenge and
// its refusals (tampered body, skewed clock, replayed nonce, wrong
// secret, unsigned); teaching, durable across a restart; identity tokens
// minted by the control plane admitted, and refused for another
// installation, when expired, signed by an unknown key, or absent; an
// unarmed box refusing them all.
func TestBoxServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane and boxes")
	}
	cpDB := testPostgresURL(t)
	cp, code := startTestControlPlane(t, cpDB)
	admin := cpSignedIn{Credential: cpSignInAdmin(t, cp, code)}

	dir, data := projectDir(t), t.TempDir()
	fakeModel := newFakeProvider(t)
	boxEnv := baseEnv("DATABASE_URL="+testPostgresURL(t), "SVC_CONTROL_PLANE_URL="+cp.url, "SVC_IMAGE_TAG=1.2.3",
		"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+fakeModel.URL+"/v1", "SVC_API_KEYS=wire-key-1")
	box := startBox(t, dir, data, boxEnv)
	var sm []string
	eventually(t, 10*time.Second, "the minted secret in the first boot's log", func() bool {
		sm = boxSecretLine.FindStringSubmatch(box.stderr.String())
		return sm != nil
	})
	secret := []byte(sm[1])
	eventually(t, 10*time.Second, "the first boot's log naming the control plane it armed against", func() bool {
		return strings.Contains(box.stderr.String(), `msg="identity armed" control_plane=`+cp.url)
	})
	if !strings.Contains(box.stderr.String(), "level=WARN msg=\"first boot: minted the signing secret") {
		t.Errorf("first boot log: want the secret at WARN:\n%s", box.stderr.String())
	}
	h := boxHandshakeOf(t, box.url)
	if h.AgentProtocolVersion != 15 || h.ImageTag != "1.2.3" || h.Identity != boxArmed || h.ControlPlane != cp.url || h.Taught {
		t.Fatalf("handshake before teaching = %+v", h)
	}
	if code := httpJSON(t, "GET", box.url+"/api/workflows", nil, nil); code != 401 {
		t.Errorf("GET /api/workflows on an untaught box = %d; want 401", code)
	}

	// The secret proof, and each refusal naming its check.
	challenge := []byte(`{"challenge":"c-0123456789"}`)
	var mac struct{ MAC string }
	rep := boxDo(t, "POST", box.url+boxWellKnown+"/challenge", challenge, secret, time.Now(), "", nil)
	if json.Unmarshal(rep.body, &mac); rep.status != 200 || mac.MAC != boxMAC(secret, "c-0123456789") {
		t.Fatalf("signed challenge = %d %s; want the MAC", rep.status, rep.body)
	}
	var replayed *http.Request
	boxDo(t, "POST", box.url+boxWellKnown+"/challenge", challenge, secret, time.Now(), "", func(r *http.Request) { replayed = r.Clone(r.Context()) })
	refusals := []struct {
		name   string
		body   []byte
		secret []byte
		at     time.Time
		edit   func(*http.Request)
		want   string
	}{
		{"tampered body", challenge, secret, time.Now(), func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(`{"challenge":"c-9876543210"}`))
		}, errSignMismatch.Error()},
		{"skewed clock", challenge, secret, time.Now().Add(-10 * time.Minute), nil, errSignClockSkew.Error()},
		{"replayed counter", challenge, nil, time.Time{}, func(r *http.Request) { r.Header = replayed.Header.Clone() }, errSignReplayed.Error()},
		{"re-pointed principal", challenge, nil, time.Time{}, func(r *http.Request) {
			// Someone on the path re-points a captured request at another caller.
			r.Header.Set(signPrincipalHeader, "cp-user:alice")
			testSender.sign(r, challenge, secret, time.Now())
			r.Header.Set(signPrincipalHeader, "cp-user:bob")
		}, errSignMismatch.Error()},
		{"v1 with a principal it does not cover", challenge, nil, time.Time{}, func(r *http.Request) {
			r.Header.Set(signPrincipalHeader, "cp-user:bob")
			signTestV1(r, challenge, secret, time.Now())
		}, errSignUnsignedHeader.Error()},
		{"wrong secret", challenge, []byte("another-secret-of-32-bytes-000000"), time.Now(), nil, errSignMismatch.Error()},
		{"unsigned", challenge, nil, time.Time{}, nil, errSignMissingHeader.Error()},
	}
	for _, tt := range refusals {
		rep := boxDo(t, "POST", box.url+boxWellKnown+"/challenge", tt.body, tt.secret, tt.at, "", tt.edit)
		if rep.status != 401 || !strings.Contains(string(rep.body), tt.want) || strings.Contains(string(rep.body), string(secret)) {
			t.Errorf("%s: challenge = %d %s; want 401 naming %q", tt.name, rep.status, rep.body, tt.want)
		}
	}

	// The control plane's records: an agent, its deployment, tokens.
	org := cp.url + "/api/orgs/default"
	deploy := func(slug string) (cpInstallation, cpTarget) {
		var target cpTarget
		httpJSONAuth(t, "POST", org+"/agents", admin.Credential, map[string]string{"slug": slug, "name": slug}, nil)
		_, deployed := cpTestRecordDeployment(t, cpDB, slug, box.url, secret)
		var local cpInstallation
		httpJSONAuth(t, "POST", org+"/agents/"+slug+"/local-dev-installation", admin.Credential, nil, &local)
		if code := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/resolve", admin.Credential, nil, &target); code != 200 || target.IdentityToken == "" {
			t.Fatalf("resolve %s = %d", slug, code)
		}
		return deployed, target
	}
	deployed, target := deploy("demo")
	_, other := deploy("other")
	teach := func(cpURL string) boxHandshake {
		t.Helper()
		body, _ := json.Marshal(boxTeaching{OrganizationID: target.Installation.OrganizationID, InstallationID: deployed.ID, ControlPlaneURL: cpURL})
		var h boxHandshake
		rep := boxDo(t, "POST", box.url+boxWellKnown+"/teach", body, secret, time.Now(), "", nil)
		if json.Unmarshal(rep.body, &h); rep.status != 200 {
			t.Fatalf("teach = %d %s", rep.status, rep.body)
		}
		return h
	}
	if rep := boxDo(t, "POST", box.url+boxWellKnown+"/teach", []byte(`{"organization_id":"o"}`), nil, time.Time{}, "", nil); rep.status != 401 {
		t.Errorf("unsigned teach = %d; want 401", rep.status)
	}

	// Expiry, against a key set the test serves with the issuer's code.
	k := identNewKey()
	fake := httptest.NewServer(nil)
	defer fake.Close()
	is, _ := newIdentIssuer(fake.URL, []identKey{k})
	fake.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, is.keySet()) })
	if h := teach(fake.URL); !h.Taught || h.Identity != boxArmed {
		t.Fatalf("handshake after teaching the test issuer = %+v", h)
	}
	orgID, inst := target.Installation.OrganizationID, deployed.ID
	expired, _ := is.issue("u", orgID, inst, time.Now().Add(-time.Hour))
	fresh, _ := is.issue("u", orgID, inst, time.Now())
	if rep := boxDo(t, "GET", box.url+"/api/workflows", nil, nil, time.Time{}, fresh, nil); rep.status != 200 {
		t.Errorf("a fresh token of the taught issuer = %d %s; want 200", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/api/workflows", nil, nil, time.Time{}, expired, nil); rep.status != 401 || !strings.Contains(string(rep.body), errIdentExpired.Error()) {
		t.Errorf("an expired token = %d %s; want 401 expired", rep.status, rep.body)
	}

	// Taught the real control plane: its tokens work, the others do not.
	if h := teach(cp.url); !h.Taught || h.Identity != boxArmed || h.ControlPlane != cp.url || h.InstallationID != deployed.ID {
		t.Fatalf("handshake after teaching = %+v", h)
	}
	unknown, _ := newIdentIssuer(cp.url, []identKey{identNewKey()})
	forged, _ := unknown.issue("u", orgID, inst, time.Now())
	for _, tt := range []struct {
		name, token string
		want        int
		says        string
	}{
		{"the control plane's token", target.IdentityToken, 200, ""},
		{"another installation's token", other.IdentityToken, 401, errIdentAudience.Error()},
		{"a token of an unknown key", forged, 401, errIdentUnknownKey.Error()},
		{"no token", "", 401, errIdentMissing.Error()},
	} {
		for _, path := range []string{"/api/workflows", "/api/runs", "/console/app.js"} {
			rep := boxDo(t, "GET", box.url+path, nil, nil, time.Time{}, tt.token, nil)
			if rep.status != tt.want || !strings.Contains(string(rep.body), tt.says) {
				t.Errorf("%s: GET %s = %d %.200s; want %d %q", tt.name, path, rep.status, rep.body, tt.want, tt.says)
			}
		}
	}
	// A durable session belongs to the user: a renewed token continues it.
	_, renewed := deploy("demo")
	for i, tok := range []string{target.IdentityToken, renewed.IdentityToken} {
		body := fmt.Sprintf(`{"model":"assistant","messages":[{"role":"user","content":"turn-%d"}]}`, i)
		rep := boxDo(t, "POST", box.url+"/openai/v1/chat/completions", []byte(body), nil, time.Time{}, tok, func(r *http.Request) { r.Header.Set(wireHeaderSession, "s1") })
		if rep.status != 200 {
			t.Fatalf("durable chat turn %d = %d %s", i, rep.status, rep.body)
		}
	}
	if reqs := fakeModel.requests(); renewed.IdentityToken == target.IdentityToken || len(reqs) != 2 || !strings.Contains(string(reqs[1].Raw), "turn-0") {
		t.Errorf("the second turn, under a renewed token, does not continue the session: %d model requests", len(reqs))
	}
	var receipt map[string]any
	rep = boxDo(t, "POST", box.url+"/api/workflows/ping/start", []byte(`{}`), nil, time.Time{}, target.IdentityToken, nil)
	if json.Unmarshal(rep.body, &receipt); rep.status != 202 || receipt["status"] != "started" {
		t.Errorf("start with the token = %d %s; want 202 started", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/api/workflows", nil, secret, time.Now(), "", nil); rep.status != 200 {
		t.Errorf("a signed request (the control plane's proxy) = %d %s; want 200", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/openai/v1/models", nil, nil, time.Time{}, "", func(r *http.Request) { r.Header.Set("x-api-key", "wire-key-1") }); rep.status != 200 {
		t.Errorf("a chat wire with a key of SVC_API_KEYS = %d %s; want 200", rep.status, rep.body)
	}
	// A key's client reads back its own durable session, and only that.
	withKey := func(key string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("x-api-key", key); r.Header.Set(wireHeaderSession, "k1") }
	}
	if rep := boxDo(t, "POST", box.url+"/openai/v1/chat/completions", []byte(`{"model":"assistant","messages":[{"role":"user","content":"keyed turn"}]}`), nil, time.Time{}, "", withKey("wire-key-1")); rep.status != 200 {
		t.Errorf("a durable turn with a key = %d %s", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/api/agents/assistant/sessions/k1", nil, nil, time.Time{}, "", withKey("wire-key-1")); rep.status != 200 || !strings.Contains(string(rep.body), "keyed turn") {
		t.Errorf("the key's session transcript = %d %s; want 200 with its turn", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/api/agents/assistant/sessions/s1", nil, nil, time.Time{}, "", withKey("wire-key-1")); rep.status != 404 {
		t.Errorf("another credential's session with a key = %d %s; want 404", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/api/runs", nil, nil, time.Time{}, "", withKey("wire-key-1")); rep.status != 401 {
		t.Errorf("the runs with a key = %d %s; want 401 (identity only)", rep.status, rep.body)
	}
	// The metrics take a key (a scraper's bearer) or an identity, like the
	// wires; they count the control plane's signed requests, refused ones
	// included.
	for _, tt := range []struct {
		name, key, token string
		want             int
	}{{"no credential", "", "", 401}, {"a wrong key", "nope", "", 401}, {"a key", "wire-key-1", "", 200}, {"an identity", "", target.IdentityToken, 200}} {
		rep := boxDo(t, "GET", box.url+"/metrics", nil, nil, time.Time{}, tt.token, func(r *http.Request) {
			if tt.key != "" {
				r.Header.Set("x-api-key", tt.key)
			}
		})
		if rep.status != tt.want {
			t.Errorf("GET /metrics with %s = %d %.200s; want %d", tt.name, rep.status, rep.body, tt.want)
		}
		if rep.status == 200 && (!strings.Contains(string(rep.body), `svc_proxy_requests_total{code="200"}`) || !strings.Contains(string(rep.body), `svc_proxy_requests_total{code="401"}`)) {
			t.Errorf("GET /metrics with %s: no count of the signed requests answered and refused:\n%s", tt.name, rep.body)
		}
	}
	if rep := boxDo(t, "POST", box.url+"/openai/v1/chat/completions", []byte(`{}`), nil, time.Time{}, "", func(r *http.Request) { r.Header.Set("x-api-key", "nope") }); rep.status != 401 || !strings.HasPrefix(string(rep.body), `{"error":`) {
		t.Errorf("a chat wire with a wrong key = %d %s; want 401 in the wire's shape", rep.status, rep.body)
	}

	// A signed start, captured on the way, is replayed after a restart.
	var captured *http.Request
	start := []byte(`{}`)
	if rep := boxDo(t, "POST", box.url+"/api/workflows/ping/start", start, secret, time.Now(), "", func(r *http.Request) { captured = r.Clone(r.Context()) }); rep.status != 202 {
		t.Fatalf("signed start = %d %s", rep.status, rep.body)
	}
	pingRuns := func() int {
		var page struct {
			Items []struct{ WorkflowName string }
		}
		rep := boxDo(t, "GET", box.url+"/api/runs?limit=100", nil, nil, time.Time{}, target.IdentityToken, nil)
		if err := json.Unmarshal(rep.body, &page); rep.status != 200 || err != nil {
			t.Fatalf("runs = %d %s", rep.status, rep.body)
		}
		n := 0
		for _, r := range page.Items {
			if r.WorkflowName == "ping" {
				n++
			}
		}
		return n
	}
	runsBefore := pingRuns()

	// A restart reuses the stored secret without logging it, and stays taught.
	box.stop()
	box = startBox(t, dir, data, boxEnv)
	replay := boxDo(t, "POST", box.url+"/api/workflows/ping/start", start, nil, time.Time{}, "", func(r *http.Request) { r.Header = captured.Header.Clone() })
	if replay.status != 401 || !strings.Contains(string(replay.body), errSignReplayed.Error()) {
		t.Errorf("a signed start replayed after a restart = %d %s; want 401 %q", replay.status, replay.body, errSignReplayed)
	}
	if n := pingRuns(); n != runsBefore {
		t.Errorf("ping runs after the replay = %d; want %d (the replay must not start one)", n, runsBefore)
	}
	// The box serves at once and arms in the background.
	eventually(t, 10*time.Second, "the restarted box to arm", func() bool { return boxHandshakeOf(t, box.url).Identity == boxArmed })
	if h := boxHandshakeOf(t, box.url); !h.Taught || h.Identity != boxArmed || h.InstallationID != deployed.ID {
		t.Errorf("handshake after a restart = %+v; want taught and armed", h)
	}
	rep = boxDo(t, "POST", box.url+boxWellKnown+"/challenge", challenge, secret, time.Now(), "", nil)
	if json.Unmarshal(rep.body, &mac); rep.status != 200 || mac.MAC != boxMAC(secret, "c-0123456789") {
		t.Errorf("challenge after a restart = %d %s", rep.status, rep.body)
	}
	if rep := boxDo(t, "GET", box.url+"/api/runs", nil, nil, time.Time{}, target.IdentityToken, nil); rep.status != 200 || !strings.Contains(string(rep.body), "ping") {
		t.Errorf("runs after a restart = %d %.300s; want the ping run", rep.status, rep.body)
	}

	// HMAC_SECRET wins over the stored secret.
	box.stop() // its whole log is read now
	if strings.Contains(box.stderr.String(), string(secret)) || strings.Contains(box.stderr.String(), "signing_secret") {
		t.Errorf("the second boot logged the secret:\n%s", box.stderr.String())
	}
	override := []byte("override-secret-0123456789abcdef")
	box = startBox(t, dir, data, append(boxEnv, "HMAC_SECRET="+string(override)))
	if rep := boxDo(t, "POST", box.url+boxWellKnown+"/challenge", challenge, override, time.Now(), "", nil); rep.status != 200 {
		t.Errorf("challenge signed with HMAC_SECRET = %d %s", rep.status, rep.body)
	}
	if rep := boxDo(t, "POST", box.url+boxWellKnown+"/challenge", challenge, secret, time.Now(), "", nil); rep.status != 401 {
		t.Errorf("challenge signed with the stored secret under HMAC_SECRET = %d; want 401", rep.status)
	}
	box.stop()

	// A box that cannot reach its control plane's keys is unarmed: 401 to all.
	down := "http://127.0.0.1:1"
	lone := startBox(t, projectDir(t), t.TempDir(), baseEnv("DATABASE_URL="+testPostgresURL(t), "SVC_CONTROL_PLANE_URL="+down, "OPENAI_API_KEY=sk-test"))
	eventually(t, 10*time.Second, "the unarmed box's log naming its control plane", func() bool {
		return strings.Contains(lone.stderr.String(), "identity unarmed") && strings.Contains(lone.stderr.String(), "control_plane="+down)
	})
	if h := boxHandshakeOf(t, lone.url); h.Identity != boxUnarmed || h.ControlPlane != down {
		t.Errorf("unarmed handshake = %+v", h)
	}
	eventually(t, 10*time.Second, "the minted secret in the second box's log", func() bool {
		sm = boxSecretLine.FindStringSubmatch(lone.stderr.String())
		return sm != nil
	})
	body, _ := json.Marshal(boxTeaching{OrganizationID: orgID, InstallationID: inst, ControlPlaneURL: down})
	if rep := boxDo(t, "POST", lone.url+boxWellKnown+"/teach", body, []byte(sm[1]), time.Now(), "", nil); rep.status != 200 || !strings.Contains(string(rep.body), `"identity":"unarmed"`) {
		t.Errorf("teach an unreachable control plane = %d %s; want 200 unarmed", rep.status, rep.body)
	}
	for _, token := range []string{target.IdentityToken, fresh, ""} {
		if rep := boxDo(t, "GET", lone.url+"/api/workflows", nil, nil, time.Time{}, token, nil); rep.status != 401 {
			t.Errorf("unarmed box: GET /api/workflows = %d; want 401", rep.status)
		}
	}
}

// TestBoxLocalPostgres boots a box without DATABASE_URL: it starts its own
// cluster under --data (as root, under pgFallbackRoot, which the postgres
// user can enter), and a restart reuses it, secret and all.
func TestBoxLocalPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	dir, data := projectDir(t), t.TempDir()
	t.Cleanup(func() { pgTestRemoveRootCluster(filepath.Join(data, "postgres")) })
	env := baseEnv("SVC_CONTROL_PLANE_URL=http://127.0.0.1:1")
	box := startBox(t, dir, data, env)
	if h := boxHandshakeOf(t, box.url); h.AgentProtocolVersion != 15 || h.Identity != boxUnarmed || h.ImageTag != "dev" {
		t.Errorf("handshake = %+v", h)
	}
	eventually(t, 10*time.Second, "a local cluster and the minted secret in the first boot's log", func() bool {
		return boxSecretLine.MatchString(box.stderr.String()) && strings.Contains(box.stderr.String(), "provider=local")
	})
	box.stop()
	box = startBox(t, dir, data, env)
	box.stop() // its whole log is read now
	if strings.Contains(box.stderr.String(), "signing_secret") || !strings.Contains(box.stderr.String(), "provider=local") {
		t.Errorf("the second boot: want the local cluster again and no secret:\n%s", box.stderr.String())
	}
}

// TestBoxReplicasShareTeaching: replicas of a box on one database (the
// PostgreSQL engine, one SVC_MASTER_KEY) adopt what svc link taught the
// one it reached within about a second, with no restart, and a re-link to
// another installation too (issue 38, item D); a replica whose master key
// differs says every replica needs the same SVC_MASTER_KEY.
func TestBoxReplicasShareTeaching(t *testing.T) {
	t.Parallel() // waits on processes and polls more than it computes
	db, dir := testPostgresURL(t), projectDir(t)
	secret := []byte("replicas-secret-0123456789abcdef")
	env := baseEnv("DATABASE_URL="+db, "SVC_MASTER_KEY="+cpTestMasterKey, "HMAC_SECRET="+string(secret), "SVC_ENGINE=postgres",
		"SVC_STORAGE_LOCAL_OK=1", "SVC_CONTROL_PLANE_URL=http://127.0.0.1:1", "OPENAI_API_KEY=sk-test")
	a := startBox(t, dir, t.TempDir(), env)
	b := startBox(t, dir, t.TempDir(), env)
	teach := func(installation string) {
		t.Helper()
		body, _ := json.Marshal(boxTeaching{OrganizationID: "org_replicas", InstallationID: installation, ControlPlaneURL: "http://127.0.0.1:1"})
		if rep := boxDo(t, "POST", a.url+boxWellKnown+"/teach", body, secret, time.Now(), "", nil); rep.status != 200 {
			t.Fatalf("teach %s = %d %s", installation, rep.status, rep.body)
		}
		eventually(t, 5*time.Second, "the other replica to adopt "+installation, func() bool {
			h := boxHandshakeOf(t, b.url)
			return h.Taught && h.InstallationID == installation && h.OrganizationID == "org_replicas"
		})
	}
	teach("ins_first")
	teach("ins_second") // a re-link to another agent
	other := slices.Clone(env)
	for i, kv := range other {
		if strings.HasPrefix(kv, "SVC_MASTER_KEY=") {
			other[i] = "SVC_MASTER_KEY=" + hex.EncodeToString([]byte("another-master-key-of-32-bytes!!"))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // it stops at boot; bounded all the same
	defer cancel()
	cmd := exec.CommandContext(ctx, svcBinary(t), "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), dir)
	cmd.Env = other
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "same SVC_MASTER_KEY") {
		t.Errorf("a replica with another master key said:\n%s\nwant it to ask for the same SVC_MASTER_KEY on every replica", out)
	}
}
