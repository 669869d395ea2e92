package main

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README's own walkthrough runs from its text in
// readme_walkthrough_test.go (TestREADMEWalkthroughs); the steps below are
// the same walk with the box in the container image, and the person's
// parts (a browser, svc login) the other walkthroughs share.

// TestDeploymentWalkthroughImage walks the deploy walkthrough with the box
// in the container image, started as the README's `docker run` starts it:
// the Dockerfile built with podman (container_test.go), the container
// booted with a /data volume and no DATABASE_URL, so the box runs the
// image's PostgreSQL under /data, every process of it as the image's user
// (uid 10001); the minted secret in its log, link, a greet run to
// completion with --agent. A second container on the same volume logs no
// secret and keeps the state: the first run (the journal), the greetings
// table (the next row is 2) and the teaching and secret (--agent still
// answered).
func TestDeploymentWalkthroughImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a container image and runs a control plane, svc dev and the box in a container")
	}
	needsLong(t, "builds a container image")
	podman := newContainerPodman(t)
	w := newDeployWalk(t)
	image := podman.build(w.dir)
	port := freePortBase(t)
	box := podman.startBox(image, "svc-walkthrough-data", port, w.boxEnv())
	if uids := podman.hostUIDs(box); slices.IndexFunc(uids, func(u string) bool { return u != "10001" }) >= 0 {
		t.Fatalf("the container's processes run as host users %v; want 10001, the image's svc user, for all", uids)
	}
	secret := boxMintedSecret(t, box.boxProcess)
	if log := box.stderr.String(); !strings.Contains(log, "provider=local") || strings.Contains(log, "the database lacks") {
		t.Fatalf("want the box on the image's PostgreSQL under /data, with the project's migration applied:\n%s", log)
	}
	inst := w.link(box.boxProcess, secret)
	w.listWorkflows(inst)
	first, r := w.greet(inst, "Ada")
	if r.ID != 1 {
		t.Fatalf("the first greeting's id = %d; want 1", r.ID)
	}
	box.stop()

	again := podman.startBox(image, "svc-walkthrough-data", port, w.boxEnv())
	if r := w.completedGreeting(inst, first); r.Greeting != "Hello, Ada!" {
		t.Fatalf("after the restart, the first run's output = %+v", r)
	}
	if _, r := w.greet(inst, "Grace"); r.ID != 2 {
		t.Fatalf("after the restart, the second greeting's id = %d; want 2 (the first row kept under /data)", r.ID)
	}
	w.finish(secret, box.boxProcess, again.boxProcess)
}

// deployWalk is the README's deploy walkthrough up to the box: a control
// plane, the CLI signed in to it, the agent "demo" and its project after
// one `svc dev`. The walkthrough tests start their box on it and then
// link and drive it through the walk's methods.
type deployWalk struct {
	t        *testing.T
	user     []string // the CLI's environment
	outputs  []string // every process's output, checked for secrets by finish
	cp       *cpProcess
	cred     string   // the CLI's saved credential
	dir      string   // the project
	modelEnv []string // the fake model provider, for the box
}

// newDeployWalk runs the walkthrough's steps before the box: the control
// plane's first boot, `svc login` approved in a browser signed in with the
// one-time code, the agent created as the console does, `svc init`, and
// one `svc dev` whose auto-migrate writes the greetings table's migration
// (the box applies it; it runs no auto-migrate).
func newDeployWalk(t *testing.T) *deployWalk {
	t.Helper()
	w := &deployWalk{t: t, user: baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")}
	cp, signInCode := startTestControlPlane(t, testPostgresURL(t))
	w.cp = cp
	browser := walkBrowser(t, cp.url)
	w.cred = walkLogin(t, w.user, cp.url, func(userCode string) {
		browser.form("/device/sign-in", url.Values{"user_code": {userCode}, "sign_in_code": {signInCode}})
		browser.form("/device/approve", url.Values{"user_code": {userCode}, "confirm": {"yes"}})
	}, &w.outputs)
	if out, code := w.svc(t.TempDir(), "whoami"); code != 0 || !strings.Contains(out, "* default") {
		t.Fatalf("svc whoami = %d %s", code, out)
	}
	if status := browser.json("POST", "/api/orgs/default/agents", map[string]string{"slug": "demo", "name": "Demo"}); status != 201 {
		t.Fatalf("create the agent = %d", status)
	}
	parent := t.TempDir()
	if out, code := w.svc(parent, "init", "demo"); code != 0 {
		t.Fatalf("svc init = %d %s", code, out)
	}
	w.dir = filepath.Join(parent, "demo")
	t.Cleanup(func() { pgTestRemoveRootCluster(w.dir) })
	model := newFakeProvider(t)
	w.modelEnv = []string{"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=" + model.URL + "/v1"}
	dev := startDev(t, w.dir, append(append([]string{}, w.user...), append(w.modelEnv, "SVC_DATABASE_URL="+testPostgresURL(t))...))
	if code := dev.interrupt(); code != 0 {
		t.Fatalf("svc dev exit = %d\n%s", code, dev.stderr.String())
	}
	w.outputs = append(w.outputs, dev.stderr.String())
	if migrations, _ := filepath.Glob(filepath.Join(w.dir, ".svc", "migrations", "*.sql")); len(migrations) != 1 {
		t.Fatalf("svc dev wrote migrations %v; want the greetings table's", migrations)
	}
	return w
}

// svc runs the CLI as the signed-in user in dir and keeps its output.
func (w *deployWalk) svc(dir string, args ...string) (string, int) {
	w.t.Helper()
	stdout, stderr, code := cli(w.t, dir, w.user, args...)
	w.outputs = append(w.outputs, stdout, stderr)
	return stdout, code
}

// boxEnv is the box's environment as the walkthrough's `docker run` sets
// it (the fake model provider standing in for the real one), plus extra.
func (w *deployWalk) boxEnv(extra ...string) []string {
	return append(append([]string{"SVC_IMAGE_TAG=1.0.0", "SVC_CONTROL_PLANE_URL=" + w.cp.url}, w.modelEnv...), extra...)
}

// link runs `svc link` for the box with its minted secret and returns the
// installation id the --agent verbs address: the deployment registered,
// the box taught and armed.
func (w *deployWalk) link(box *boxProcess, secret string) string {
	w.t.Helper()
	out, code := w.svc(w.dir, "--json", "link", "--agent", "demo", "--url", box.url, "--secret", secret, "--tag", "1.0.0", "--no-agents", "--force")
	var p linkPayload
	if e := cpEnvelope(w.t, strings.TrimSpace(out), &p); code != 0 || !e.OK || p.Deployment.URL != box.url || p.Deployment.ImageTag != "1.0.0" ||
		p.IdentityVerification.State != linkArmed || p.LocalDevInstallation.ID == "" {
		w.t.Fatalf("svc link = %d %s", code, out)
	}
	return p.LocalDevInstallation.ID
}

// listWorkflows checks `svc workflows list --agent inst`: the scaffold's
// two workflows, greet first.
func (w *deployWalk) listWorkflows(inst string) {
	w.t.Helper()
	var list struct{ Items []workflowItem }
	out, code := w.svc(w.t.TempDir(), "--json", "workflows", "list", "--agent", inst)
	if e := cpEnvelope(w.t, strings.TrimSpace(out), &list); code != 0 || !e.OK || len(list.Items) != 2 || list.Items[0].Name != "greet" {
		w.t.Fatalf("svc workflows list --agent = %d %s", code, out)
	}
}

// walkGreeting is the output of the scaffold's greet workflow: the row it
// inserted with sql and the file it wrote with storage.
type walkGreeting struct {
	Greeting string `json:"greeting"`
	ID       int    `json:"id"`
	File     string `json:"file"`
}

// greet starts the greet workflow for name with --agent inst, waits for
// the run to complete and returns its id and output, which must greet
// name and name the file of its row.
func (w *deployWalk) greet(inst, name string) (string, walkGreeting) {
	w.t.Helper()
	var receipt startReceipt
	out, code := w.svc(w.t.TempDir(), "--json", "workflows", "start", "greet", "--input", `{"name":"`+name+`"}`, "--agent", inst)
	if e := cpEnvelope(w.t, strings.TrimSpace(out), &receipt); code != 0 || !e.OK || receipt.Status != "started" || receipt.RunID == "" {
		w.t.Fatalf("svc workflows start greet --agent = %d %s", code, out)
	}
	r := w.completedGreeting(inst, receipt.RunID)
	if r.Greeting != "Hello, "+name+"!" || r.File != "greetings/"+strconv.Itoa(r.ID)+".txt" {
		w.t.Fatalf("greet %s = %+v", name, r)
	}
	return receipt.RunID, r
}

// completedGreeting waits with `svc runs get --wait --agent inst` for the
// greet run runID to complete and returns its output.
func (w *deployWalk) completedGreeting(inst, runID string) walkGreeting {
	w.t.Helper()
	var got struct{ Run runRecord }
	var r walkGreeting
	out, code := w.svc(w.t.TempDir(), "--json", "runs", "get", runID, "--wait", "30s", "--agent", inst)
	if e := cpEnvelope(w.t, strings.TrimSpace(out), &got); code != 0 || !e.OK || got.Run.Status != "completed" || json.Unmarshal(got.Run.Output, &r) != nil {
		w.t.Fatalf("svc runs get %s --wait --agent = %d %s", runID, code, out)
	}
	return r
}

// finish stops the boxes and the control plane and fails if any output
// holds the signing secret or the credential, but for the boxes' logs:
// together they hold the secret once, the first boot's, and never the
// credential.
func (w *deployWalk) finish(secret string, boxes ...*boxProcess) {
	w.t.Helper()
	outs := w.outputs
	logged := 0
	for _, b := range boxes {
		b.stop()
		outs = append(outs, b.stdout.String())
		logged += strings.Count(b.stderr.String(), secret)
		if strings.Contains(b.stderr.String(), w.cred) {
			w.t.Errorf("a box's log holds the credential")
		}
	}
	w.cp.stop()
	outs = append(outs, w.cp.stdout.String(), w.cp.stderr.String())
	for _, o := range outs {
		if strings.Contains(o, secret) || strings.Contains(o, w.cred) {
			w.t.Fatalf("a process's output holds the signing secret or the credential:\n%s", o)
		}
	}
	if logged != 1 {
		w.t.Fatalf("the boxes' logs hold the secret %d times; want once, on the first boot", logged)
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
