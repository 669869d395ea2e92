package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// standInBox is a STAND-IN for `svc serve`'s side of the link contract
// (DESIGN §7): the handshake, the signed challenge and the signed teach,
// with knobs to misbehave. The end-to-end tests against the real box use
// startBox once that branch is merged; this one lets the control plane and
// the CLI be tested on their own.
type standInBox struct {
	*httptest.Server
	secret   []byte
	mu       sync.Mutex
	protocol int    // agent_protocol_version
	identity string // what the handshake says after teaching ("" omits the field)
	wrongMAC bool   // answer the challenge with a MAC of another secret
	noTeach  bool   // refuse teaching
	taught   linkTeaching
}

// newStandInBox starts a stand-in box holding secret.
func newStandInBox(t testing.TB, secret string) *standInBox {
	b := &standInBox{secret: []byte(secret), protocol: linkMinProtocol, identity: linkArmed}
	v, err := newSignVerifier(b.secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := func() map[string]any {
		h := map[string]any{"agent_protocol_version": b.protocol, "image_tag": "1.2.3", "control_plane": b.taught.ControlPlaneURL,
			"taught": b.taught.InstallationID != "", "organization_id": b.taught.OrganizationID, "installation_id": b.taught.InstallationID}
		if b.identity != "" {
			h["identity"] = b.identity
		}
		return h
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/svc", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		defer b.mu.Unlock()
		writeJSON(w, 200, hs())
	})
	signed := func(h func(w http.ResponseWriter, body []byte)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := v.verifyRequest(r, 1<<20); err != nil {
				cpError(w, 401, "signature", err.Error())
				return
			}
			body, _ := readBody(r)
			b.mu.Lock()
			defer b.mu.Unlock()
			h(w, body)
		}
	}
	mux.HandleFunc("POST /.well-known/svc/challenge", signed(func(w http.ResponseWriter, body []byte) {
		var in struct{ Challenge string }
		json.Unmarshal(body, &in)
		key := b.secret
		if b.wrongMAC {
			key = []byte("another-secret-entirely")
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(in.Challenge))
		writeJSON(w, 200, map[string]string{"mac": hex.EncodeToString(m.Sum(nil))})
	}))
	mux.HandleFunc("POST /.well-known/svc/teach", signed(func(w http.ResponseWriter, body []byte) {
		if b.noTeach {
			cpError(w, 409, "taught", "this box is taught another organization")
			return
		}
		json.Unmarshal(body, &b.taught)
		writeJSON(w, 200, hs())
	}))
	// The box commands, behind an identity token for the taught
	// organization and installation, as the real box gates them.
	gated := func(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b.mu.Lock()
			taught := b.taught
			b.mu.Unlock()
			v, err := newIdentVerifier(taught.ControlPlaneURL, taught.OrganizationID, taught.InstallationID, nil, nil)
			if err == nil {
				_, err = v.verify(r.Context(), identBearer(r))
			}
			if err != nil {
				cpError(w, 401, codeAuth, "identity token refused: "+err.Error())
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /api/workflows", gated(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"schema_version": 1, "items": []workflowItem{{Name: "greet", Trigger: "POST /api/workflows/greet/start"}}})
	}))
	mux.HandleFunc("GET /api/workflows/{name}/schema", gated(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != "greet" {
			cpError(w, 404, codeWorkflowNotFound, "no workflow "+r.PathValue("name"))
			return
		}
		writeJSON(w, 200, map[string]any{"schema_version": 1, "schema": map[string]any{"input": nil, "output": nil}})
	}))
	mux.HandleFunc("POST /api/workflows/{name}/start", gated(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, startReceipt{SchemaVersion: 1, WorkflowName: r.PathValue("name"), Status: "started", RunID: "run-1", WorldRunID: "wrun-1", Trigger: "POST /api/workflows/greet/start"})
	}))
	b.Server = httptest.NewServer(mux)
	t.Cleanup(b.Close)
	return b
}

// set changes the stand-in's behaviour.
func (b *standInBox) set(f func(b *standInBox)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// linkWorld is a control plane process with its admin signed in through
// the CLI in home, and every process output kept for the secret grep.
type linkWorld struct {
	t       testing.TB
	cp      *cpProcess
	dbURL   string
	admin   string // the admin's credential
	env     []string
	outputs []string
}

// newLinkWorld starts a control plane on a fresh database and signs the
// admin in (svc login --token) in a fresh config directory.
func newLinkWorld(t testing.TB) *linkWorld {
	w := &linkWorld{t: t, dbURL: testPostgresURL(t)}
	w.cp = startControlPlane(t, baseEnv("DATABASE_URL="+w.dbURL, "SVC_MASTER_KEY="+hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef")), "XDG_CONFIG_HOME="+t.TempDir()))
	m := regexp.MustCompile(`sign_in_code=([A-Z-]+)`).FindStringSubmatch(w.cp.stderr.String())
	if m == nil {
		t.Fatalf("no sign-in code:\n%s", w.cp.stderr.String())
	}
	var admin cpSignedIn
	if code := httpJSONAuth(t, "POST", w.cp.url+"/api/login/code", "", map[string]string{"code": m[1]}, &admin); code != 200 {
		t.Fatalf("sign in with the code = %d", code)
	}
	w.admin = admin.Credential
	w.env = baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")
	if out, _, code := w.run(t.TempDir(), "--json", "login", "--control-plane", w.cp.url, "--token", w.admin); code != 0 {
		t.Fatalf("svc login = %d %s", code, out)
	}
	return w
}

// run runs the CLI in dir and keeps its output.
func (w *linkWorld) run(dir string, args ...string) (string, string, int) {
	w.t.Helper()
	stdout, stderr, code := cli(w.t, dir, w.env, args...)
	w.outputs = append(w.outputs, stdout, stderr)
	return stdout, stderr, code
}

// link runs `svc --json link` in dir and decodes the payload or error.
func (w *linkWorld) link(dir string, args ...string) (linkPayload, envelope, int) {
	w.t.Helper()
	out, _, code := w.run(dir, append([]string{"--json", "link"}, args...)...)
	var p linkPayload
	env := cpEnvelope(w.t, strings.TrimSpace(out), &p)
	return p, env, code
}

// deployments counts the control plane's deployment rows.
func (w *linkWorld) deployments() int {
	w.t.Helper()
	conn, err := pgx.Connect(context.Background(), w.dbURL)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	conn.QueryRow(context.Background(), `SELECT count(*) FROM cp.deployments`).Scan(&n)
	return n
}

// TestLinkRules runs every rule of SPEC §4.2 `svc link` in order, with
// the CLI and the control plane as processes and a stand-in box: flags
// before the network, already linked, not signed in, no agents, unknown
// slug, box too old, unreachable, secret mismatch, teaching refused, then
// a link (armed), a re-link that updates the one deployment, idempotent
// coding-agent files, and unarmed and unknown identity states. No output
// of any process holds the secret.
func TestLinkRules(t *testing.T) {
	w := newLinkWorld(t)
	secret := "box-secret-" + strings.Repeat("k", 24)
	box := newStandInBox(t, secret)
	dir := t.TempDir()
	flags := []string{"--agent", "demo", "--url", box.URL, "--secret", secret, "--tag", "1.2.3"}
	wantFail := func(name string, args []string, exit int, code string) {
		t.Helper()
		_, env, got := w.link(dir, args...)
		if got != exit || env.OK || env.Error.Code != code {
			t.Fatalf("%s: exit %d %+v; want exit %d code %s", name, got, env.Error, exit, code)
		}
		if _, err := os.Stat(filepath.Join(dir, ".svc", "project.json")); err == nil {
			t.Fatalf("%s wrote .svc/project.json", name)
		}
	}

	// Rule 1: each required flag, checked before the network and sign-in.
	notSignedIn := w.env
	w.env = baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")
	for i, name := range []string{"--agent", "--url", "--secret", "--tag"} {
		args := append(append([]string{}, flags[:2*i]...), flags[2*i+2:]...)
		_, env, code := w.link(dir, args...)
		if code != 1 || !strings.Contains(env.Error.Message, "missing "+name) {
			t.Fatalf("link without %s = %d %+v; want exit 1 naming it", name, code, env.Error)
		}
	}
	wantFail("a relative --url", []string{"--agent", "demo", "--url", "box.example", "--secret", secret, "--tag", "1"}, 1, codeGeneric)
	wantFail("not signed in", flags, 2, codeAuth)
	w.env = notSignedIn
	wantFail("no agents yet", flags, 3, codeNoProject)
	if code := httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": "demo", "name": "Demo"}, nil); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": "other", "name": "Other"}, nil)
	wantFail("an unknown slug", append([]string{"--agent", "nope"}, flags[2:]...), 4, codeNotFound)

	// Rules 3–6: handshake, proof and teaching fail closed.
	box.set(func(b *standInBox) { b.protocol = 14 })
	wantFail("a box speaking protocol 14", flags, 1, linkCodeTooOld)
	box.set(func(b *standInBox) { b.protocol = linkMinProtocol })
	wantFail("an unreachable box", []string{"--agent", "demo", "--url", "http://127.0.0.1:1", "--secret", secret, "--tag", "1"}, 1, linkCodeUnreachable)
	wantFail("a wrong secret", append(flags[:4:4], "--secret", "not-the-box-secret-0123", "--tag", "1.2.3"), 1, linkCodeMismatch)
	box.set(func(b *standInBox) { b.wrongMAC = true })
	wantFail("a MAC of another secret", flags, 1, linkCodeMismatch)
	box.set(func(b *standInBox) { b.wrongMAC, b.noTeach = false, true })
	wantFail("a box refusing teaching", flags, 1, linkCodeTeach)
	if n := w.deployments(); n != 0 {
		t.Fatalf("%d deployments after failed links; want none saved", n)
	}
	box.set(func(b *standInBox) { b.noTeach = false })

	// A link: every field of the payload, the files, the box taught.
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("node_modules/\n.svc/\n"), 0o644)
	p, env, code := w.link(dir, append(flags, "--agents", "claude-code,codex")...)
	if code != 0 || !env.OK {
		t.Fatalf("link = %d %+v", code, env.Error)
	}
	abs, _ := filepath.EvalSymlinks(dir)
	if p.SchemaVersion != 1 || p.Agent.Slug != "demo" || p.Agent.Name != "Demo" || p.Agent.ID == "" || p.OrganizationID == "" ||
		p.LocalDevInstallation.ID == "" || p.LocalDevInstallation.OrganizationSlug != "default" ||
		p.Deployment.ID == "" || p.Deployment.URL != box.URL || p.Deployment.ImageTag != "1.2.3" || p.Deployment.Status != cpStatusRegistered || p.Deployment.LastActiveAt != nil ||
		(p.TargetDir != dir && p.TargetDir != abs) || p.IdentityVerification.State != linkArmed || p.IdentityVerification.Warning != nil {
		t.Fatalf("link payload = %+v", p)
	}
	wantFiles := []string{".svc/project.json", ".gitignore", ".agents/skills/svc/SKILL.md", ".claude/skills/svc/SKILL.md", ".mcp.json", ".codex/config.toml"}
	if strings.Join(p.FilesWritten, " ") != strings.Join(wantFiles, " ") {
		t.Fatalf("files_written = %v; want %v", p.FilesWritten, wantFiles)
	}
	if s := p.AgentSetup; !s.OK || strings.Join(s.Selected, ",") != "claude-code,codex" || s.Steps.Skills != "ok" ||
		s.Steps.MCP["claude-code"] != "written" || s.Steps.MCP["codex"] != "written" || s.Steps.MCP["cursor"] != "skipped" || len(s.Steps.MCP) != 3 {
		t.Fatalf("agent_setup = %+v", s)
	}
	if gi, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(gi) != "node_modules/\n.svc/*\n!.svc/migrations/\n" {
		t.Fatalf(".gitignore = %q", gi)
	}
	proj, err := loadProject(dir)
	if err != nil || proj.Link == nil || proj.Link.ControlPlaneURL != w.cp.url || proj.Link.Agent.Slug != "demo" || proj.Link.LocalDevInstallationID != p.LocalDevInstallation.ID {
		t.Fatalf(".svc/project.json = %+v, %v", proj.Link, err)
	}
	if box.taught.OrganizationID != p.OrganizationID || box.taught.ControlPlaneURL != w.cp.url || box.taught.InstallationID == "" {
		t.Fatalf("the box was taught %+v", box.taught)
	}
	mcp, _ := os.ReadFile(filepath.Join(dir, ".mcp.json"))
	if !strings.Contains(string(mcp), `"mcp"`) || strings.Contains(string(mcp), secret) {
		t.Fatalf(".mcp.json = %s", mcp)
	}

	// Rule 2: a re-link of the same agent updates its one deployment; the
	// coding-agent files are not rewritten.
	box2 := newStandInBox(t, secret+"2")
	p2, env, code := w.link(dir, "--agent", "demo", "--url", box2.URL+"/", "--secret", secret+"2", "--tag", "sha256:"+strings.Repeat("ab", 32), "--agents", "claude-code,codex")
	if code != 0 || p2.Deployment.ID != p.Deployment.ID || p2.Deployment.URL != box2.URL || !strings.HasPrefix(p2.Deployment.ImageTag, "sha256:") || w.deployments() != 1 {
		t.Fatalf("re-link = %d %+v %+v; want the same deployment, new URL and tag", code, env.Error, p2.Deployment)
	}
	if len(p2.FilesWritten) != 0 {
		t.Fatalf("re-link files_written = %v; want none (idempotent)", p2.FilesWritten)
	}
	// Already linked to demo: another agent needs --force.
	wantFailLinked := func() {
		_, env, code := w.link(dir, "--agent", "other", "--url", box2.URL, "--secret", secret+"2", "--tag", "1", "--no-agents")
		if code != 1 || !strings.Contains(env.Error.Message, "already linked") {
			t.Fatalf("link to another agent without --force = %d %+v; want exit 1", code, env.Error)
		}
	}
	wantFailLinked()

	// Unarmed and silent boxes link, with a warning naming SVC_CONTROL_PLANE_URL.
	for _, tt := range []struct{ identity, want string }{{linkUnarmed, linkUnarmed}, {"", linkUnknown}} {
		box2.set(func(b *standInBox) { b.identity = tt.identity })
		p, env, code := w.link(dir, "--agent", "other", "--url", box2.URL, "--secret", secret+"2", "--tag", "1", "--no-agents", "--force")
		if code != 0 || p.IdentityVerification.State != tt.want || p.IdentityVerification.Warning == nil || !strings.Contains(*p.IdentityVerification.Warning, "SVC_CONTROL_PLANE_URL="+w.cp.url) {
			t.Fatalf("link of a box with identity %q = %d %+v %+v", tt.identity, code, env.Error, p.IdentityVerification)
		}
		if p.AgentSetup.Steps.Skills != "skipped" || p.AgentSetup.Steps.MCP["cursor"] != "skipped" || len(p.AgentSetup.Selected) != 0 {
			t.Fatalf("--no-agents agent_setup = %+v", p.AgentSetup)
		}
	}
	// Human mode prints the warning too.
	out, _, _ := w.run(dir, "link", "--agent", "other", "--url", box2.URL, "--secret", secret+"2", "--tag", "1", "--no-agents")
	if !strings.Contains(out, "SVC_CONTROL_PLANE_URL") {
		t.Fatalf("human link output lacks the warning:\n%s", out)
	}

	// In a terminal: the agent is picked by number, the coding agents asked.
	tty := t.TempDir()
	var stdout, stderr strings.Builder
	getenv := func(k string) string {
		for _, kv := range w.env {
			if name, v, _ := strings.Cut(kv, "="); name == k && name != "CI" {
				return v
			}
		}
		return ""
	}
	code = run(context.Background(), []string{"link", "--url", box2.URL, "--secret", secret + "2", "--tag", "2"},
		cliIO{stdin: strings.NewReader("2\ncursor\n"), stdout: &stdout, stderr: &stderr, getenv: getenv, stdinTerminal: true, dir: tty})
	w.outputs = append(w.outputs, stdout.String(), stderr.String())
	if code != 0 || !strings.Contains(stderr.String(), "2. other") || !strings.Contains(stdout.String(), "agent other") || !strings.Contains(stdout.String(), ".cursor/mcp.json") {
		t.Fatalf("interactive link = %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}

	w.cp.stop()
	for _, o := range append(w.outputs, w.cp.stdout.String(), w.cp.stderr.String()) {
		if strings.Contains(o, secret) {
			t.Fatalf("the signing secret appears in a process's output:\n%s", o)
		}
	}
}

// TestAgentTarget runs `svc workflows … --agent <installationId>` and
// `svc runs … --agent`: resolved through the control plane (a process),
// then the (stand-in) box called directly with an identity token: not
// signed in exit 2, an unknown installation or one without a deployment
// exit 4, the box's payloads and exit codes as locally.
func TestAgentTarget(t *testing.T) {
	w := newLinkWorld(t)
	secret := "box-secret-" + strings.Repeat("t", 24)
	box := newStandInBox(t, secret)
	for _, slug := range []string{"demo", "bare"} {
		httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": slug, "name": slug}, nil)
	}
	p, env, code := w.link(t.TempDir(), "--agent", "demo", "--url", box.URL, "--secret", secret, "--tag", "1", "--no-agents")
	if code != 0 {
		t.Fatalf("link = %d %+v", code, env.Error)
	}
	var bare cpInstallation
	httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents/bare/local-dev-installation", w.admin, nil, &bare)
	dir := t.TempDir() // no project: --agent needs none
	ldi := p.LocalDevInstallation.ID
	for _, tt := range []struct {
		name string
		args []string
		exit int
		code string
	}{
		{"unknown installation", []string{"workflows", "list", "--agent", "ins_nope"}, 4, codeNotFound},
		{"no registered deployment", []string{"workflows", "list", "--agent", bare.ID}, 4, codeNotFound},
		{"unknown workflow", []string{"workflows", "schema", "nope", "--agent", ldi}, 4, codeWorkflowNotFound},
	} {
		out, _, code := w.run(dir, append([]string{"--json"}, tt.args...)...)
		if e := cpEnvelope(t, strings.TrimSpace(out), nil); code != tt.exit || e.Error == nil || e.Error.Code != tt.code {
			t.Errorf("%s: exit %d %s; want exit %d %s", tt.name, code, out, tt.exit, tt.code)
		}
	}
	var list struct{ Items []workflowItem }
	if out, _, code := w.run(dir, "--json", "workflows", "list", "--agent", ldi); code != 0 || !cpEnvelope(t, strings.TrimSpace(out), &list).OK || len(list.Items) != 1 || list.Items[0].Name != "greet" {
		t.Fatalf("workflows list --agent = %d %s", code, out)
	}
	var rc startReceipt
	if out, _, code := w.run(dir, "--json", "workflows", "start", "greet", "--agent", ldi); code != 0 || !cpEnvelope(t, strings.TrimSpace(out), &rc).OK || rc.RunID != "run-1" {
		t.Fatalf("workflows start --agent = %d %s", code, out)
	}
	if out, _, code := w.run(dir, "workflows", "schema", "greet", "--agent", p.Deployment.ID); code != 4 {
		t.Fatalf("a deployment id is not an installation id: %d %s", code, out)
	}
	// A box that refuses the token is exit 2, as a 401 is locally.
	box.set(func(b *standInBox) { b.taught.InstallationID = "ins_other" })
	if out, _, code := w.run(dir, "--json", "workflows", "list", "--agent", ldi); code != 2 {
		t.Fatalf("a box refusing the token = %d %s; want exit 2", code, out)
	}
	w.env = baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1")
	if out, _, code := w.run(dir, "--json", "runs", "list", "--agent", ldi); code != 2 || !strings.Contains(out, `"auth"`) {
		t.Fatalf("runs list --agent not signed in = %d %s; want exit 2", code, out)
	}
}

// TestDevControlPlane runs `svc dev`'s project pick against a control
// plane process: in a terminal, with no .svc/project.json, Enter creates
// an agent named after the folder and a number picks a listed one;
// non-interactive runs fail with exit 3 saying what to do; a linked agent
// gone upstream is exit 4; a linked project boots with the control
// plane's local-dev installation.
func TestDevControlPlane(t *testing.T) {
	w := newLinkWorld(t)
	w.env = w.env[:len(w.env)-1] // drop CI=1: these are a person's runs
	getenv := func(k string) string {
		for _, kv := range w.env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v
			}
		}
		return ""
	}
	pick := func(dir, answer string) (*project, string, error) {
		proj, err := loadProject(dir)
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		c := &cmd{cliIO: cliIO{stdin: strings.NewReader(answer), stdout: &strings.Builder{}, stderr: &stderr, getenv: getenv, stdinTerminal: true, dir: dir}}
		err = projectForDev(context.Background(), c, proj)
		return proj, stderr.String(), err
	}

	dir := projectDir(t) // a scaffold, linked local-only by svc init
	os.Remove(filepath.Join(dir, ".svc", "project.json"))
	if out, _, code := w.run(dir, "--json", "dev"); code != 3 || !strings.Contains(out, "svc link") {
		t.Fatalf("dev --json without a project, signed in = %d %s; want exit 3 saying what to do", code, out)
	}
	proj, prompt, err := pick(dir, "\n")
	if err != nil || proj.Link == nil || proj.Link.Agent.Slug != "demo" || proj.Link.ControlPlaneURL != w.cp.url || !strings.Contains(prompt, `create "demo"`) {
		t.Fatalf("Enter at the pick = %+v, %v\n%s", proj.Link, err, prompt)
	}
	var local cpInstallation
	httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents/demo/local-dev-installation", w.admin, nil, &local)
	if proj.Link.LocalDevInstallationID != local.ID {
		t.Fatalf("local_dev_installation_id = %s; want the control plane's %s", proj.Link.LocalDevInstallationID, local.ID)
	}
	other := filepath.Join(t.TempDir(), "elsewhere")
	os.MkdirAll(other, 0o755)
	if proj, prompt, err := pick(other, "1\n"); err != nil || proj.Link.Agent.Slug != "demo" || !strings.Contains(prompt, "1. demo") {
		t.Fatalf("picking 1 = %+v, %v\n%s", proj.Link, err, prompt)
	}

	// The linked project boots with the control plane's installation.
	d := startDev(t, dir, w.env)
	if d.payload.LocalDevInstallationID != local.ID {
		t.Fatalf("dev payload local_dev_installation_id = %s; want %s", d.payload.LocalDevInstallationID, local.ID)
	}
	if code := d.interrupt(); code != 0 {
		t.Fatalf("dev exit = %d", code)
	}

	// The agent disappears upstream: dev is exit 4.
	conn, err := pgx.Connect(context.Background(), w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DELETE FROM cp.agents WHERE slug = 'demo'`); err != nil {
		t.Fatal(err)
	}
	if out, _, code := w.run(dir, "--json", "dev", "--port", "1"); code != 4 || !strings.Contains(out, "gone") {
		t.Fatalf("dev with its agent gone upstream = %d %s; want exit 4", code, out)
	}
	// Signed out: exit 2.
	w.env = baseEnv("XDG_CONFIG_HOME=" + t.TempDir())
	if out, _, code := w.run(dir, "--json", "dev"); code != 2 {
		t.Fatalf("dev of a linked project, signed out = %d %s; want exit 2", code, out)
	}
}

// BenchmarkLink measures `svc link` end to end on loopback: the CLI as a
// process (sign-in file, agent list, handshake), the control plane's
// proof, teaching and record on PostgreSQL, and the files. The box is the
// stand-in until the real one is merged. Run:
// go test -run '^$' -bench BenchmarkLink -benchtime 20x .
func BenchmarkLink(b *testing.B) {
	w := newLinkWorld(b)
	secret := "box-secret-" + strings.Repeat("b", 24)
	box := newStandInBox(b, secret)
	httpJSONAuth(b, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": "demo", "name": "Demo"}, nil)
	dir := b.TempDir()
	b.ResetTimer()
	for i := range b.N {
		if _, env, code := w.link(dir, "--agent", "demo", "--url", box.URL, "--secret", secret, "--tag", fmt.Sprint(i), "--agents", "all"); code != 0 {
			b.Fatalf("link = %d %+v", code, env.Error)
		}
	}
}
