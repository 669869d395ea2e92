package main

// Issue 36's attacks on svc dev's local trust boundary that are not a
// page in the developer's browser (those are in dev_neighbour_test.go):
// the dev key's rotation, a neighbour on a dead svc dev's port, and a
// neighbour whose clients close right after sending.

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// trustTestGet sends GET path to svc dev with the key (none: "") and a Via
// header, which keeps the guard from taking this test's own account for
// the developer: only the key can admit it.
func trustTestGet(t *testing.T, api, path, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", api+path, nil)
	req.Header.Set("Via", "1.1 test")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// trustTestDevKey reads the project's dev key.
func trustTestDevKey(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestDevRotateKey is issue 36, item 1's rotation: `svc rotate-key` makes
// the running svc dev refuse the old key at once and ends every console
// session (made from a link or from a pasted key); the new key works and
// `svc env` prints it; a console session never sees the key; with svc dev
// stopped, the next one boots with the new key.
func TestDevRotateKey(t *testing.T) {
	dir := projectDir(t)
	env := baseEnv("SVC_DATABASE_URL=" + testPostgresURL(t))
	d := startDev(t, dir, env)
	api := d.payload.EmulatorURL
	old := trustTestDevKey(t, dir)
	if code := trustTestGet(t, api, "/api/runs", ""); code != 401 {
		t.Fatalf("a relayed request without the key = %d; want 401", code)
	}
	if code := trustTestGet(t, api, "/api/runs", old); code != 200 {
		t.Fatalf("a relayed request with the dev key = %d; want 200", code)
	}
	for _, probe := range []string{healthLivePath, healthReadyPath} { // a probe needs no key and learns nothing else
		if code := trustTestGet(t, api, probe, ""); code != 200 {
			t.Errorf("GET %s without a key = %d; want 200", probe, code)
		}
	}
	link := consoleLink(t, dir)
	var fromLink, fromKey struct {
		Token string `json:"token"`
	}
	if code := httpJSON(t, "POST", api+consoleSessionPath, map[string]string{"code": link[strings.Index(link, "#code=")+6:]}, &fromLink); code != 200 {
		t.Fatalf("trade the link's code = %d", code)
	}
	if code := httpJSON(t, "POST", api+consoleSessionPath, map[string]string{"key": old}, &fromKey); code != 200 || !strings.HasPrefix(fromKey.Token, consoleTokenPrefix) {
		t.Fatalf("trade the dev key = %d %q; want 200 with a session", code, fromKey.Token)
	}
	var revealed struct {
		Env map[string]string `json:"env"`
	}
	if code := httpJSONAuth(t, "POST", api+"/api/dev/services/reveal", fromKey.Token, nil, &revealed); code != 200 || revealed.Env["S3_SECRET_ACCESS_KEY"] == "" {
		t.Fatalf("reveal with a console session = %d %v", code, revealed.Env)
	}
	if k, ok := revealed.Env["SVC_DEV_KEY"]; ok {
		t.Errorf("a console session was shown the dev key (%.12s…)", k)
	}

	out, stderr, code := cli(t, dir, env, "--json", "rotate-key")
	var res struct {
		Data devRotateKeyOutput `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !res.Data.Running || res.Data.ConsoleSessionsEnded != 2 {
		t.Fatalf("svc rotate-key = exit %d %s %s; want the running svc dev to end 2 sessions", code, out, stderr)
	}
	if strings.Contains(out+stderr, "svc-dev-") {
		t.Errorf("svc rotate-key printed a key: %s %s", out, stderr)
	}
	fresh := trustTestDevKey(t, dir)
	if fresh == old {
		t.Fatal("the dev key file did not change")
	}
	if code := trustTestGet(t, api, "/api/runs", old); code != 401 {
		t.Errorf("the old key after rotation = %d; want 401", code)
	}
	if code := trustTestGet(t, api, "/api/runs", fresh); code != 200 {
		t.Errorf("the new key = %d; want 200", code)
	}
	for _, tok := range []string{fromLink.Token, fromKey.Token} {
		if code := httpJSONAuth(t, "GET", api+"/api/runs", tok, nil, nil); code != 401 {
			t.Errorf("a console session made before the rotation = %d; want 401", code)
		}
	}
	if out, _, _ := cli(t, dir, env, "env"); !strings.Contains(out, "SVC_DEV_KEY="+fresh) {
		t.Errorf("svc env after rotation does not print the new key:\n%s", out)
	}

	d.interrupt()
	if out, stderr, code := cli(t, dir, env, "rotate-key"); code != 0 || !strings.Contains(out, "not running") {
		t.Fatalf("svc rotate-key with svc dev stopped = exit %d %s %s", code, out, stderr)
	}
	third := trustTestDevKey(t, dir)
	if third == fresh {
		t.Fatal("svc rotate-key with svc dev stopped left the key")
	}
	d2 := startDev(t, dir, env)
	if code := trustTestGet(t, d2.payload.EmulatorURL, "/api/runs", third); code != 200 {
		t.Errorf("the next svc dev with the key rotated while stopped = %d; want 200", code)
	}
}

// TestDevNeighbourHoldsDeadPort is issue 36, item 5: svc dev was killed
// and left .svc/runtime.json; another account listens on its port. The
// developer's CLI must send it nothing secret (no dev key, no session
// token) and say that svc dev is not running.
func TestDevNeighbourHoldsDeadPort(t *testing.T) {
	nb := newTestNeighbour(t)
	python, err := exec.LookPath("python3")
	if err != nil || !strings.HasPrefix(python, "/usr/") {
		python = "/usr/bin/python3"
	}
	if _, err := os.Stat(python); err != nil {
		t.Skip("python3 is not installed for other accounts")
	}
	dir := projectDir(t)
	env := baseEnv("SVC_DATABASE_URL=" + testPostgresURL(t))
	d := startDev(t, dir, env)
	u, _ := url.Parse(d.payload.EmulatorURL)
	key := trustTestDevKey(t, dir)
	rf, err := os.ReadFile(filepath.Join(dir, ".svc", devRuntimeFileName))
	if err != nil {
		t.Fatal(err)
	}
	var runtime devRuntimeFile
	json.Unmarshal(rf, &runtime)
	d.kill()

	// The neighbour's server logs every request it gets, answers {}.
	const server = `import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.settimeout(2)
    try:
        d = c.recv(65536); sys.stdout.write(repr(d) + "\n"); sys.stdout.flush()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
    except Exception:
        pass
    c.close()
`
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv := nb.command(ctx, python, "-c", server, u.Port())
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("the neighbour's server said %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the neighbour's server did not start")
	}

	for _, args := range [][]string{{"runs", "list"}, {"env"}, {"console"}, {"workflows", "start", "ping"}} {
		out, stderr, code := cli(t, dir, env, args...)
		if code != exitCodes[codeDevNotRunning] || !strings.Contains(stderr, "another account") {
			t.Errorf("svc %s against the neighbour's port = exit %d %s %s; want exit %d naming another account", strings.Join(args, " "), code, out, stderr, exitCodes[codeDevNotRunning])
		}
	}
	cancel()
	srv.Wait()
	for l := range lines {
		for _, secret := range []string{key, runtime.Token, "Authorization", devTokenHeader} {
			if secret != "" && strings.Contains(strings.ToLower(l), strings.ToLower(secret)) {
				t.Errorf("the neighbour's server received %q: %s", secret, l)
			}
		}
	}
}

// TestDevNeighbourClosedClient is issue 36, item 2 as the attacker did it,
// against a svc dev run as root: the neighbour's client sends a start and
// closes at once (its socket then lingers as a TIME_WAIT entry owned by
// uid 0). No start may run.
func TestDevNeighbourClosedClient(t *testing.T) {
	nb := newTestNeighbour(t)
	dir := projectDir(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t)))
	u, _ := url.Parse(d.payload.EmulatorURL)
	const script = `for i in $(seq 1 20); do
  exec 3<>/dev/tcp/127.0.0.1/$1
  printf 'POST /api/workflows/ping/start HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}' "$1" >&3
  exec 3>&-
done`
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if out, err := nb.command(ctx, "bash", "-c", script, "attack", u.Port()).CombinedOutput(); err != nil {
		t.Fatalf("the neighbour's closing clients: %v %s", err, out)
	}
	time.Sleep(500 * time.Millisecond) // what was accepted would have started by now
	if runs, queued := listAllRuns(t, d.payload.EmulatorURL); len(runs)+len(queued) != 0 {
		t.Fatalf("the neighbour's closing clients started %d runs (%d queued); want none", len(runs), len(queued))
	}
}

// TestDevHoldsBothLoopbacks is issue 36, item 7: svc dev answers on
// [::1] as on 127.0.0.1 (browsers send localhost there first), and when
// another account already holds [::1] on its port it refuses to start,
// naming that account.
func TestDevHoldsBothLoopbacks(t *testing.T) {
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		ln.Close()
	}
	nb := newTestNeighbour(t)
	dir := projectDir(t)
	env := baseEnv("SVC_DATABASE_URL=" + testPostgresURL(t))
	d := startDev(t, dir, env)
	u, _ := url.Parse(d.payload.EmulatorURL)
	var h struct {
		ProjectDir string `json:"project_dir"`
	}
	if code := httpJSON(t, "GET", "http://[::1]:"+u.Port()+"/api/health", nil, &h); code != 200 || !sameDir(h.ProjectDir, dir) {
		t.Fatalf("GET [::1]:%s/api/health = %d %q; want svc dev's own health", u.Port(), code, h.ProjectDir)
	}
	d.interrupt()

	// The neighbour takes [::1] of a free port first.
	port := freePortBase(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	squat := nb.command(ctx, "/usr/bin/python3", "-c", `import socket, sys, time
s = socket.socket(socket.AF_INET6); s.bind(("::1", int(sys.argv[1]))); s.listen(4); print("ready", flush=True); time.sleep(120)`, strconv.Itoa(port))
	out, err := squat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := squat.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); squat.Wait() }()
	if l, _ := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
		t.Fatalf("the neighbour's squatter said %q", l)
	}
	d2 := startDevProcess(t, dir, port, env)
	select {
	case <-d2.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("svc dev started beside the neighbour's [::1] port; want a refusal")
	}
	var said strings.Builder
	for len(d2.lines) > 0 {
		said.WriteString(<-d2.lines)
	}
	said.WriteString(d2.stderr.String())
	if d2.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(said.String(), "[::1]:"+strconv.Itoa(port)+" is held by account "+nb.name) {
		t.Fatalf("svc dev beside the neighbour's [::1] port = exit %d\n%s\nwant a refusal naming %s", d2.cmd.ProcessState.ExitCode(), said.String(), nb.name)
	}
}

// TestDevNeighbourThroughDevelopersProxy is issue 36, item 9: the
// developer runs a reverse proxy in front of svc dev (as a dev server's
// proxy does; here net/http/httputil's, which says X-Forwarded-For). The
// kernel sees the developer's socket, but the request says it was relayed:
// the neighbour's start through it is refused without the key.
func TestDevNeighbourThroughDevelopersProxy(t *testing.T) {
	nb := newTestNeighbour(t)
	dir := projectDir(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t)))
	target, _ := url.Parse(d.payload.EmulatorURL)
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	if code, body := nb.curl(t, "POST", proxy.URL+"/api/workflows/ping/start", "{}"); code != http.StatusUnauthorized {
		t.Errorf("the neighbour's start through the developer's proxy = %d %s; want 401", code, body)
	}
	if runs, queued := listAllRuns(t, d.payload.EmulatorURL); len(runs)+len(queued) != 0 {
		t.Errorf("%d runs started through the proxy; want none", len(runs)+len(queued))
	}
}
