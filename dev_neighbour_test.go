package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testNeighbour is a second Unix account a test makes and removes:
// another person on the developer's machine, with no access to the
// project's files (0700/0600, as svc and the test keep them).
type testNeighbour struct {
	name     string
	uid, gid uint32
}

// newTestNeighbour makes a system account with no home and no shell; it is
// removed, with every process it still runs, when the test ends. Making an
// account needs root (CI runs as root).
func newTestNeighbour(t *testing.T) *testNeighbour {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("making a second Unix account needs root")
	}
	for _, tool := range []string{"useradd", "userdel", "pkill"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "svcnb" + hex.EncodeToString(b)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		exec.Command("pkill", "-KILL", "-u", name).Run()
		for range 10 { // userdel refuses while a process of the account lingers
			if exec.Command("userdel", name).Run() == nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("userdel %s failed: remove the account by hand", name)
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &testNeighbour{name: name, uid: uint32(uid), gid: uint32(gid)}
}

// command is name args run as the neighbour, from /, with a minimal
// environment.
func (n *testNeighbour) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: n.uid, Gid: n.gid}}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent"}
	return cmd
}

// curl sends one request as the neighbour and returns the status and body.
func (n *testNeighbour) curl(t *testing.T, method, target, body string, headers ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	args := []string{"-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", "--max-time", "20"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	if body != "" {
		args = append(args, "-H", "content-type: application/json", "--data-binary", body)
	}
	out, err := n.command(ctx, "curl", append(args, target)...).Output()
	if err != nil {
		t.Fatalf("curl %s %s as %s: %v", method, target, n.name, err)
	}
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	code, _ := strconv.Atoi(s[i+1:])
	return code, s[:i]
}

// TestDevNeighbourAccount is issue 29's attacks by another account of the
// developer's machine, against a running svc dev: it cannot read the dev
// key, every route refuses it (runs, starts, cancels, the model-provider
// setting, the chat wires and MCP, the dev-only routes, a console link's
// code), while the developer's own account is served without a key as
// before. Then the developer's browser, signed in to the console, shows a
// page the neighbour serves on another loopback port: no cookie and no
// secret reaches the neighbour's server, and the page's calls to svc dev
// are refused. Both bound to loopback and with --listen (whose console
// once kept the dev key in a cookie for every port of the host).
func TestDevNeighbourAccount(t *testing.T) {
	nb := newTestNeighbour(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	t.Run("loopback", func(t *testing.T) { devNeighbourAttacks(t, nb, nil) })
	t.Run("listen", func(t *testing.T) { devNeighbourAttacks(t, nb, []string{"--listen"}) })
}

// devNeighbourAttacks runs TestDevNeighbourAccount's attacks by nb against
// a svc dev started with args.
func devNeighbourAttacks(t *testing.T, nb *testNeighbour, args []string) {
	dir := projectDir(t)
	fake := newFakeProvider(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake"), args...)
	api := d.payload.EmulatorURL
	devKey, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil || len(strings.TrimSpace(string(devKey))) < 16 {
		t.Fatalf("read the dev key: %v %q", err, devKey)
	}
	key := strings.TrimSpace(string(devKey))

	// The developer's own account: no key needed (SPEC §5), as before.
	resp, err := http.Post(api+"/api/workflows/ping/start", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var receipt struct {
		RunID string `json:"runId"`
	}
	json.NewDecoder(resp.Body).Decode(&receipt)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || receipt.RunID == "" {
		t.Fatalf("the developer's start without a key = %d; want 202 with a run", resp.StatusCode)
	}
	runs := func() string {
		resp, err := http.Get(api + "/api/runs")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("the developer's GET /api/runs = %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	before := strings.Count(runs(), `"runId"`)

	// The neighbour cannot read the key.
	if out, err := nb.command(t.Context(), "cat", filepath.Join(dir, ".svc", devAPIKeyFile)).CombinedOutput(); err == nil {
		t.Fatalf("the neighbour read the dev key: %s", out)
	}
	attacks := []struct {
		name, method, path, body string
		headers                  []string
		shape                    string // the refusal's error code, at error.code
	}{
		{"read every run", "GET", "/api/runs", "", nil, "auth"},
		{"read a run", "GET", "/api/runs/" + receipt.RunID, "", nil, "auth"},
		{"start a run", "POST", "/api/workflows/ping/start", "{}", nil, "auth"},
		{"cancel a run", "POST", "/api/runs/" + receipt.RunID + "/cancel", "", nil, "auth"},
		{"resume a hook", "POST", "/api/hooks/guess", "{}", nil, "auth"},
		{"replace the model provider", "PUT", "/api/settings/model-provider", `{"provider":"openai","apiKey":"sk-evil","baseURL":"http://127.0.0.1:9/v1"}`, nil, "auth"},
		{"chat with any key", "POST", "/openai/v1/chat/completions", `{"model":"helper","messages":[{"role":"user","content":"hi"}]}`, []string{"Authorization: Bearer anything"}, "invalid_api_key"},
		{"MCP", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, []string{"Authorization: Bearer anything"}, "auth"},
		{"the local credentials", "GET", "/api/dev/env", "", []string{devTokenHeader + ": guess"}, "auth"},
		{"a new console link", "POST", "/api/dev/console-link", "", []string{devTokenHeader + ": guess"}, "auth"},
		{"health and the project's path", "GET", "/api/health", "", nil, "auth"},
		{"the metrics", "GET", "/metrics", "", nil, "auth"},
		{"a guessed console code", "POST", consoleSessionPath, `{"code":"guess"}`, nil, "console_link_owner"},
		{"a guessed dev key traded for a session", "POST", consoleSessionPath, `{"key":"svc-dev-guess"}`, nil, "auth"},
		{"a key rotation", "POST", "/api/dev/rotate-key", "", []string{devTokenHeader + ": guess"}, "auth"},
	}
	for _, a := range attacks {
		code, body := nb.curl(t, a.method, api+a.path, a.body, a.headers...)
		var v map[string]any
		json.Unmarshal([]byte(body), &v)
		if code != http.StatusUnauthorized || wiresJSONAt(v, "error.code") != a.shape {
			t.Errorf("the neighbour's %s (%s %s) = %d %s; want 401 %s", a.name, a.method, a.path, code, body, a.shape)
		}
		if strings.Contains(body, receipt.RunID) || strings.Contains(body, dir) {
			t.Errorf("the neighbour's %s shows the developer's data: %s", a.name, body)
		}
	}
	if after := strings.Count(runs(), `"runId"`); after != before {
		t.Errorf("runs after the neighbour's attempts = %d; want %d", after, before)
	}
	if code, _ := nb.curl(t, "GET", api+"/api/runs", "", "Authorization: Bearer "+key); code != 200 {
		t.Errorf("the neighbour with the developer's key = %d; want 200 (the key is the credential, and only the developer can read it)", code)
	}

	// The developer's browser, signed in, shows the neighbour's page.
	scripts, err := os.MkdirTemp("", "svc-neighbour-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scripts) })
	src, err := os.ReadFile(filepath.Join("testdata", "neighbour", "server.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scripts, "server.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv := nb.command(ctx, node, filepath.Join(scripts, "server.mjs"))
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var port struct {
		Port int `json:"port"`
	}
	select {
	case l := <-lines:
		json.Unmarshal([]byte(l), &port)
	case <-time.After(30 * time.Second):
	}
	if port.Port == 0 {
		t.Fatal("the neighbour's server did not say its port")
	}
	u, _ := url.Parse(api)
	link := consoleLink(t, dir)
	code := link[strings.Index(link, "#code=")+len("#code="):]
	// Opened from a terminal, the link is on the browser's command line,
	// which the neighbour reads in /proc and trades first (issue 36, item
	// 1): refused, and the code stays for the developer's browser.
	if status, body := nb.curl(t, "POST", api+consoleSessionPath, `{"code":"`+code+`"}`); status != http.StatusUnauthorized || !strings.Contains(body, "console_link_owner") {
		t.Errorf("the neighbour's trade of the developer's fresh console link = %d %s; want 401 console_link_owner", status, body)
	}
	runConformance(t, "conformance/neighbour.test.mjs", []string{"SVC_URL=" + api, "SVC_CONSOLE_LINK=" + link,
		"NEIGHBOUR_URL=http://127.0.0.1:" + strconv.Itoa(port.Port) + "/?api=" + u.Port()})
	cancel()
	var got []string
	for l := range lines {
		got = append(got, l)
	}
	var report map[string]any
	for _, l := range got {
		var req struct {
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
			Body    string            `json:"body"`
		}
		json.Unmarshal([]byte(l), &req)
		if c, ok := req.Headers["cookie"]; ok {
			t.Errorf("the neighbour's server received a cookie: %q", c)
		}
		for _, secret := range []string{key, code, consoleTokenPrefix} {
			if strings.Contains(l, secret) {
				t.Errorf("the neighbour's server received a secret (%.8s…): %s", secret, l)
			}
		}
		if strings.HasPrefix(req.URL, "/report") {
			json.Unmarshal([]byte(req.Body), &report)
		}
	}
	if len(report) < 6 {
		t.Fatalf("the neighbour's page reported %v; want its tries (server log: %q)", report, got)
	}
	for try, r := range report {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		status, _ := m["status"].(float64)
		body, _ := m["body"].(string)
		if status >= 200 && status < 300 || strings.Contains(body, receipt.RunID) {
			t.Errorf("the neighbour's page, in the developer's browser: %s = %v; want it refused", try, m)
		}
	}
	if ls, _ := report["localStorage"].([]any); len(ls) != 0 || report["cookie"] != "" {
		t.Errorf("the neighbour's page sees storage %v and cookies %q; want none of svc dev's", ls, report["cookie"])
	}
	// The link's code was spent by the browser: the neighbour cannot reuse it.
	if status, body := nb.curl(t, "POST", api+consoleSessionPath, `{"code":"`+code+`"}`); status != http.StatusUnauthorized {
		t.Errorf("the neighbour replaying the used console link = %d %s; want 401", status, body)
	}
}
