package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDeploymentWalkthrough runs the README's "Deploy a box and link it"
// as a user would on one machine, each command its own process: a control
// plane, `svc login` approved on the device page with the first boot's
// one-time code, `svc init`, one `svc dev` (auto-migrate writes the
// project's migration), `svc serve` of the project (the fake model
// provider opens the gate), `svc link`, then the workflows and runs verbs
// with --agent. The scaffold's greet workflow writes a row with sql and a
// file with storage, so the box runs it on its own PostgreSQL and object
// storage. No process's output holds the signing secret or the credential.
func TestDeploymentWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane, svc dev and a box")
	}
	user := baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")
	var outputs []string
	svc := func(dir string, args ...string) (string, int) {
		t.Helper()
		stdout, stderr, code := cli(t, dir, user, args...)
		outputs = append(outputs, stdout, stderr)
		return stdout, code
	}

	// svc control-plane: its first boot prints a one-time sign-in code.
	cp, signInCode := startTestControlPlane(t, testPostgresURL(t))
	m := []string{"", signInCode}

	// svc login: the device code, approved in a browser signed in with the
	// one-time code.
	browser := walkBrowser(t, cp.url)
	cred := walkLogin(t, user, cp.url, func(userCode string) {
		browser.form("/device/sign-in", url.Values{"user_code": {userCode}, "sign_in_code": {m[1]}})
		browser.form("/device/approve", url.Values{"user_code": {userCode}})
	}, &outputs)
	if out, code := svc(t.TempDir(), "whoami"); code != 0 || !strings.Contains(out, "organization default") {
		t.Fatalf("svc whoami = %d %s", code, out)
	}
	// The agent, as the console creates it.
	if status := browser.json("POST", "/api/orgs/default/agents", map[string]string{"slug": "demo", "name": "Demo"}); status != 201 {
		t.Fatalf("create the agent = %d", status)
	}

	// svc init, then one svc dev: auto-migrate writes the greetings table's
	// migration, which the box applies (it runs no auto-migrate).
	parent := t.TempDir()
	if out, code := svc(parent, "init", "demo"); code != 0 {
		t.Fatalf("svc init = %d %s", code, out)
	}
	dir := filepath.Join(parent, "demo")
	t.Cleanup(func() { pgTestRemoveRootCluster(dir) })
	model := newFakeProvider(t)
	modelEnv := []string{"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=" + model.URL + "/v1"}
	dev := startDev(t, dir, append(append([]string{}, user...), append(modelEnv, "SVC_DATABASE_URL="+testPostgresURL(t))...))
	if code := dev.interrupt(); code != 0 {
		t.Fatalf("svc dev exit = %d\n%s", code, dev.stderr.String())
	}
	outputs = append(outputs, dev.stderr.String())
	if migrations, _ := filepath.Glob(filepath.Join(dir, ".svc", "migrations", "*.sql")); len(migrations) != 1 {
		t.Fatalf("svc dev wrote migrations %v; want the greetings table's", migrations)
	}

	// svc serve: the box, on its own database; its first boot logs the
	// signing secret once.
	boxDB := testPostgresURL(t)
	box := startBox(t, dir, t.TempDir(), baseEnv(append(modelEnv, "DATABASE_URL="+boxDB, "SVC_IMAGE_TAG=1.0.0", "SVC_CONTROL_PLANE_URL="+cp.url)...))
	secret := boxMintedSecret(t, box)
	if strings.Contains(box.stderr.String(), "the database lacks") {
		t.Errorf("the box warns of schema drift although the migration was committed:\n%s", box.stderr.String())
	}

	// svc link: the deployment registered, the box taught and armed.
	out, code := svc(dir, "--json", "link", "--agent", "demo", "--url", box.url, "--secret", secret, "--tag", "1.0.0", "--no-agents", "--force")
	var p linkPayload
	if e := cpEnvelope(t, strings.TrimSpace(out), &p); code != 0 || !e.OK || p.Deployment.URL != box.url || p.Deployment.ImageTag != "1.0.0" ||
		p.IdentityVerification.State != linkArmed || p.LocalDevInstallation.ID == "" {
		t.Fatalf("svc link = %d %s", code, out)
	}
	inst := p.LocalDevInstallation.ID

	// The box, through --agent: list, start, wait for the run.
	var list struct{ Items []workflowItem }
	out, code = svc(t.TempDir(), "--json", "workflows", "list", "--agent", inst)
	if e := cpEnvelope(t, strings.TrimSpace(out), &list); code != 0 || !e.OK || len(list.Items) != 2 || list.Items[0].Name != "greet" {
		t.Fatalf("svc workflows list --agent = %d %s", code, out)
	}
	var receipt startReceipt
	out, code = svc(t.TempDir(), "--json", "workflows", "start", "greet", "--input", `{"name":"Ada"}`, "--agent", inst)
	if e := cpEnvelope(t, strings.TrimSpace(out), &receipt); code != 0 || !e.OK || receipt.Status != "started" || receipt.RunID == "" {
		t.Fatalf("svc workflows start greet --agent = %d %s", code, out)
	}
	var got struct{ Run runRecord }
	out, code = svc(t.TempDir(), "--json", "runs", "get", receipt.RunID, "--wait", "30s", "--agent", inst)
	var result struct {
		Greeting string `json:"greeting"`
		ID       int    `json:"id"`
		File     string `json:"file"`
	}
	if e := cpEnvelope(t, strings.TrimSpace(out), &got); code != 0 || !e.OK || got.Run.Status != "completed" || json.Unmarshal(got.Run.Output, &result) != nil ||
		result.Greeting != "Hello, Ada!" || result.ID != 1 || result.File != "greetings/1.txt" {
		t.Fatalf("svc runs get --wait --agent = %d %s", code, out)
	}
	// The row is in the box's database, not dev's.
	conn, err := pgx.Connect(context.Background(), boxDB)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var greeting string
	if err := conn.QueryRow(context.Background(), `SELECT greeting FROM greetings WHERE id = 1`).Scan(&greeting); err != nil || greeting != "Hello, Ada!" {
		t.Fatalf("the box's greetings row = %q, %v", greeting, err)
	}
	// Errors keep their exit codes through --agent.
	if out, code := svc(t.TempDir(), "--json", "workflows", "start", "nope", "--agent", inst); code != 4 || !strings.Contains(out, codeWorkflowNotFound) {
		t.Fatalf("start an unknown workflow --agent = %d %s; want exit 4", code, out)
	}

	box.stop()
	cp.stop()
	outputs = append(outputs, cp.stdout.String(), cp.stderr.String(), box.stdout.String())
	for _, o := range outputs {
		if strings.Contains(o, secret) || strings.Contains(o, cred) {
			t.Fatalf("a process's output holds the signing secret or the credential:\n%s", o)
		}
	}
	// The box logs its secret once, on its first boot, and nothing else of it.
	if strings.Count(box.stderr.String(), secret) != 1 || strings.Contains(box.stderr.String(), cred) {
		t.Fatalf("the box's log holds the secret %d times (want 1, its first boot) or the credential", strings.Count(box.stderr.String(), secret))
	}
}

// walkBrowserClient is a person's browser on the control plane's pages:
// cookies kept, requests sent from the control plane's own origin.
type walkBrowserClient struct {
	t    testing.TB
	base string
	http *http.Client
}

// walkBrowser returns a browser for the control plane at base.
func walkBrowser(t testing.TB, base string) *walkBrowserClient {
	jar, _ := cookiejar.New(nil)
	return &walkBrowserClient{t: t, base: base, http: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

// send sends one request from the control plane's origin and fails the
// test unless it is answered; it returns the status.
func (b *walkBrowserClient) send(method, path, contentType, body string) int {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Origin", b.base)
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// form submits a form of the device page; it must answer 200.
func (b *walkBrowserClient) form(path string, v url.Values) {
	b.t.Helper()
	if status := b.send("POST", path, "application/x-www-form-urlencoded", v.Encode()); status != 200 {
		b.t.Fatalf("POST %s = %d", path, status)
	}
}

// json sends a JSON request as the console does and returns the status.
func (b *walkBrowserClient) json(method, path string, body any) int {
	b.t.Helper()
	raw, _ := json.Marshal(body)
	return b.send(method, path, "application/json", string(raw))
}

// walkLogin runs `svc login --control-plane cpURL` as a process, hands the
// user code it shows to approve, waits (bounded) for it to exit 0 and
// returns the saved credential. Its output is appended to outputs.
func walkLogin(t testing.TB, env []string, cpURL string, approve func(userCode string), outputs *[]string) string {
	t.Helper()
	cmd := exec.Command(svcBinary(t), "login", "--control-plane", cpURL)
	cmd.Env = env
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { *outputs = append(*outputs, stdout.String(), stderr.String()) }()
	var code []string
	eventually(t, 10*time.Second, "svc login showing the code to approve", func() bool {
		code = regexp.MustCompile(`approve the code (\S+)`).FindStringSubmatch(stderr.String())
		return code != nil
	})
	approve(code[1])
	select {
	case err := <-done:
		if err != nil || !strings.Contains(stdout.String(), "signed in to "+cpURL) {
			t.Fatalf("svc login: %v\n%s%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("svc login did not finish within 30s of the approval:\n%s", stderr.String())
	}
	var creds loginCredentials
	for _, kv := range env {
		if dir, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			raw, _ := os.ReadFile(filepath.Join(dir, "svc", "credentials.json"))
			json.Unmarshal(raw, &creds)
		}
	}
	if creds.Credential == "" {
		t.Fatal("svc login saved no credential")
	}
	return creds.Credential
}
