package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// standInBox is a FAKE box at the edge: it speaks the link contract of
// `svc serve` (DESIGN §7: the handshake, the signed challenge, the signed
// teach) with knobs to misbehave in the ways a real box cannot: speak
// protocol 14, answer the challenge with a MAC of another secret, refuse
// teaching, report no identity state or stay unarmed although its control
// plane is reachable. Everything a real box can do is tested against
// startLinkBox's real `svc serve`.
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

// newStandInBox starts a fake box holding secret.
func newStandInBox(t testing.TB, secret string) *standInBox {
	b := &standInBox{secret: []byte(secret), protocol: linkMinProtocol, identity: linkArmed}
	_, db := signTestDB(t)
	v, err := newSignVerifier(b.secret, db, nil)
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
				w.Header().Set(signRefusedHeader, signCheckName(err))
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
		writeJSON(w, 200, map[string]string{"mac": boxMAC(key, in.Challenge)})
	}))
	mux.HandleFunc("POST /.well-known/svc/teach", signed(func(w http.ResponseWriter, body []byte) {
		if b.noTeach {
			cpError(w, 409, "taught", "this box is taught another organization")
			return
		}
		json.Unmarshal(body, &b.taught)
		writeJSON(w, 200, hs())
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
	var code string
	w.cp, code = startTestControlPlane(t, w.dbURL)
	w.admin = cpSignInAdmin(t, w.cp, code)
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

// linkBox is a real `svc serve` of a fresh scaffold on a fresh database,
// trusting the world's control plane, the fake model provider opening its
// gate, with the signing secret its first boot logged.
type linkBox struct {
	*boxProcess
	secret string
	dbURL  string // the box's DATABASE_URL
}

// startLinkBox starts a real box for w.
func (w *linkWorld) startLinkBox() *linkBox {
	w.t.Helper()
	model, dbURL := newFakeProvider(w.t), testPostgresURL(w.t)
	b := startBox(w.t, projectDir(w.t), w.t.TempDir(), baseEnv("DATABASE_URL="+dbURL, "SVC_CONTROL_PLANE_URL="+w.cp.url,
		"SVC_IMAGE_TAG=1.2.3", "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL+"/v1"))
	return &linkBox{boxProcess: b, secret: boxMintedSecret(w.t, b), dbURL: dbURL}
}

// boxFillSenders runs sql on the box's database: the tests fill or empty
// its replay windows' senders (sign_window.go) with it.
func boxFillSenders(t testing.TB, dbURL, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// boxSendersFull fills a box's senders to signMaxSenders, each signed just
// now: as if that many control plane processes had signed to it in the
// signing window. A new sender is then refused for capacity.
var boxSendersFull = fmt.Sprintf(`INSERT INTO svc.sign_senders (sender, hwm, seen, newest)
	SELECT 'filler-sender-' || g || '-0123456789', 1, B'1'::bit(4096), now() FROM generate_series(1, %d) g`, signMaxSenders)

// boxMintedSecret waits (bounded) for the signing secret a box's first
// boot logs at WARN and returns it.
func boxMintedSecret(t testing.TB, b *boxProcess) string {
	t.Helper()
	var m []string
	eventually(t, 10*time.Second, "the signing secret in the box's first boot log", func() bool {
		m = boxSecretLine.FindStringSubmatch(b.stderr.String())
		return m != nil
	})
	return m[1]
}

// checkOutputs fails unless the signing secret is absent from every
// output kept and from the boxes' stdout, and appears in each box's log
// once (its first boot's WARN line).
func (w *linkWorld) checkOutputs(secrets []string, boxes ...*linkBox) {
	w.t.Helper()
	w.cp.stop()
	outs := append(w.outputs, w.cp.stdout.String(), w.cp.stderr.String())
	for _, b := range boxes {
		b.stop()
		outs = append(outs, b.stdout.String())
		if n := strings.Count(b.stderr.String(), b.secret); n != 1 {
			w.t.Errorf("the box's log holds its secret %d times; want once, on its first boot", n)
		}
	}
	for _, o := range outs {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				w.t.Fatalf("a signing secret appears in a process's output:\n%s", o)
			}
		}
	}
}

// TestLinkRules runs every rule of SPEC §4.2 `svc link` in order, with
// the CLI, the control plane and two boxes (svc serve) as processes, and
// the fake box only for what a real one cannot do (protocol 14, a MAC of
// another secret, refusing teaching, unarmed or silent on identity): flags
// before the network, already linked, not signed in, no agents, unknown
// slug, box too old, unreachable, secret mismatch, teaching refused, then
// a link (armed), a re-link that updates the one deployment, idempotent
// coding-agent files, and unarmed and unknown identity states. No output
// of any process holds the secret.
func TestLinkRules(t *testing.T) {
	w := newLinkWorld(t)
	box := w.startLinkBox()
	secret := box.secret
	fake := newStandInBox(t, secret)
	dir := t.TempDir()
	flags := []string{"--agent", "demo", "--url", box.url, "--secret", secret, "--tag", "1.2.3"}
	fakeFlags := []string{"--agent", "demo", "--url", fake.URL, "--secret", secret, "--tag", "1.2.3"}
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
	fake.set(func(b *standInBox) { b.protocol = 14 })
	wantFail("a box speaking protocol 14", fakeFlags, 1, linkCodeTooOld)
	fake.set(func(b *standInBox) { b.protocol = linkMinProtocol })
	wantFail("an unreachable box", []string{"--agent", "demo", "--url", "http://127.0.0.1:1", "--secret", secret, "--tag", "1"}, 1, linkCodeUnreachable)
	// A box whose replay window is full refuses the proof for capacity:
	// link says so, not that the secret is wrong; a wrong secret still is.
	boxFillSenders(t, box.dbURL, boxSendersFull)
	wantFail("a box at its senders' cap", flags, 1, linkCodeBusy)
	wantFail("a wrong secret", append(flags[:4:4], "--secret", "not-the-box-secret-0123", "--tag", "1.2.3"), 1, linkCodeMismatch)
	boxFillSenders(t, box.dbURL, `DELETE FROM svc.sign_senders`)
	wantFail("not a box", []string{"--agent", "demo", "--url", w.cp.url, "--secret", secret, "--tag", "1"}, 1, linkCodeNotABox)
	fake.set(func(b *standInBox) { b.wrongMAC = true })
	wantFail("a MAC of another secret", fakeFlags, 1, linkCodeMismatch)
	fake.set(func(b *standInBox) { b.wrongMAC, b.noTeach = false, true })
	wantFail("a box refusing teaching", fakeFlags, 1, linkCodeTeach)
	if n := w.deployments(); n != 0 {
		t.Fatalf("%d deployments after failed links; want none saved", n)
	}
	if h := boxHandshakeOf(t, box.url); h.Taught {
		t.Fatalf("the box was taught by a failed link: %+v", h)
	}
	fake.set(func(b *standInBox) { b.noTeach = false })

	// A link: every field of the payload, the files, the box taught.
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("node_modules/\n.svc/\n"), 0o644)
	p, env, code := w.link(dir, append(flags, "--agents", "claude-code,codex")...)
	if code != 0 || !env.OK {
		t.Fatalf("link = %d %+v", code, env.Error)
	}
	abs, _ := filepath.EvalSymlinks(dir)
	if p.SchemaVersion != 1 || p.Agent.Slug != "demo" || p.Agent.Name != "Demo" || p.Agent.ID == "" || p.OrganizationID == "" ||
		p.LocalDevInstallation.ID == "" || p.LocalDevInstallation.OrganizationSlug != "default" ||
		p.Deployment.ID == "" || p.Deployment.URL != box.url || p.Deployment.ImageTag != "1.2.3" || p.Deployment.Status != cpStatusRegistered || p.Deployment.LastActiveAt != nil ||
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
	h := boxHandshakeOf(t, box.url)
	if !h.Taught || h.OrganizationID != p.OrganizationID || h.ControlPlane != w.cp.url || h.InstallationID == "" || h.Identity != boxArmed {
		t.Fatalf("the box's handshake after link = %+v", h)
	}
	mcp, _ := os.ReadFile(filepath.Join(dir, ".mcp.json"))
	if !strings.Contains(string(mcp), `"mcp"`) || strings.Contains(string(mcp), secret) {
		t.Fatalf(".mcp.json = %s", mcp)
	}
	// The audit log has the refused links, the teaching and the link, by
	// the admin, and never the secret.
	for _, q := range []struct {
		sql  string
		args []any
		want bool
	}{
		{`SELECT count(*) FROM cp.audit_log WHERE action = 'deployment.link' AND outcome = 'refused' AND detail LIKE '%' || $1`, []any{linkCodeMismatch}, true},
		{`SELECT count(*) FROM cp.audit_log WHERE action = 'box.taught' AND actor = 'admin' AND target = 'demo' AND detail LIKE '%' || $1`, []any{h.InstallationID}, true},
		{`SELECT count(*) FROM cp.audit_log WHERE action = 'deployment.linked' AND actor = 'admin' AND detail LIKE '%' || $1 || '%'`, []any{box.url}, true},
		{`SELECT count(*) FROM cp.audit_log a WHERE position($1 in a::text) > 0`, []any{secret}, false},
	} {
		if n := cpTestCount(t, w.dbURL, q.sql, q.args...); (n > 0) != q.want {
			t.Errorf("audit log: %d rows of %s %v", n, q.sql, q.args)
		}
	}

	// Rule 2: a re-link of the same agent updates its one deployment; the
	// coding-agent files are not rewritten.
	box2 := w.startLinkBox()
	p2, env, code := w.link(dir, "--agent", "demo", "--url", box2.url+"/", "--secret", box2.secret, "--tag", "sha256:"+strings.Repeat("ab", 32), "--agents", "claude-code,codex")
	if code != 0 || p2.Deployment.ID != p.Deployment.ID || p2.Deployment.URL != box2.url || !strings.HasPrefix(p2.Deployment.ImageTag, "sha256:") || w.deployments() != 1 {
		t.Fatalf("re-link = %d %+v %+v; want the same deployment, new URL and tag", code, env.Error, p2.Deployment)
	}
	if p2.FilesWritten == nil || len(p2.FilesWritten) != 0 {
		t.Fatalf("re-link files_written = %#v; want [] (idempotent)", p2.FilesWritten)
	}
	if s := p2.AgentSetup.Steps; s.MCP["claude-code"] != agentSetupUnchanged || s.MCP["codex"] != agentSetupUnchanged || s.MCP["cursor"] != agentSetupSkipped {
		t.Fatalf("re-link agent_setup.steps = %+v; want the two MCP entries unchanged", s)
	}
	// Already linked to demo: another agent needs --force.
	wantFailLinked := func() {
		_, env, code := w.link(dir, "--agent", "other", "--url", box2.url, "--secret", box2.secret, "--tag", "1", "--no-agents")
		if code != 1 || !strings.Contains(env.Error.Message, "already linked") {
			t.Fatalf("link to another agent without --force = %d %+v; want exit 1", code, env.Error)
		}
	}
	wantFailLinked()

	// Unarmed and silent boxes link, with a warning naming SVC_CONTROL_PLANE_URL.
	for _, tt := range []struct{ identity, want string }{{linkUnarmed, linkUnarmed}, {"", linkUnknown}} {
		fake.set(func(b *standInBox) { b.identity = tt.identity })
		p, env, code := w.link(dir, "--agent", "other", "--url", fake.URL, "--secret", secret, "--tag", "1", "--no-agents", "--force")
		if code != 0 || p.IdentityVerification.State != tt.want || p.IdentityVerification.Warning == nil || !strings.Contains(*p.IdentityVerification.Warning, "SVC_CONTROL_PLANE_URL="+w.cp.url) {
			t.Fatalf("link of a box with identity %q = %d %+v %+v", tt.identity, code, env.Error, p.IdentityVerification)
		}
		if p.AgentSetup.Steps.Skills != "skipped" || p.AgentSetup.Steps.MCP["cursor"] != "skipped" || len(p.AgentSetup.Selected) != 0 {
			t.Fatalf("--no-agents agent_setup = %+v", p.AgentSetup)
		}
	}
	// Human mode prints the warning too.
	out, _, _ := w.run(dir, "link", "--agent", "other", "--url", fake.URL, "--secret", secret, "--tag", "1", "--no-agents")
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
	code = run(context.Background(), []string{"link", "--url", box2.url, "--secret", box2.secret, "--tag", "2"},
		cliIO{stdin: strings.NewReader("2\ncursor\n"), stdout: &stdout, stderr: &stderr, getenv: getenv, stdinTerminal: true, dir: tty})
	w.outputs = append(w.outputs, stdout.String(), stderr.String())
	if code != 0 || !strings.Contains(stderr.String(), "2. other") || !strings.Contains(stdout.String(), "agent other") || !strings.Contains(stdout.String(), ".cursor/mcp.json") {
		t.Fatalf("interactive link = %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}

	if h := boxHandshakeOf(t, box2.url); !h.Taught || h.Identity != boxArmed || h.ControlPlane != w.cp.url {
		t.Fatalf("box2's handshake after the links = %+v", h)
	}
	w.checkOutputs([]string{secret, box2.secret}, box, box2)
}

// TestLinkLocal links a project of `svc init` to an agent of the
// organization without a box, as the tunnel needs: `svc link --agent demo
// --local` (CI, no terminal) writes .svc/project.json with the user's
// local-dev installation of the agent (the control plane's), prints the
// link envelope with deployment null, refuses --url, --secret and --tag
// before anything, is idempotent (files_written [] and every MCP entry
// unchanged on the second run), writes the path of the binary that ran
// it into the coding agents' MCP files, and needs --force to move to
// another agent.
func TestLinkLocal(t *testing.T) {
	w := newLinkWorld(t)
	dir := projectDir(t) // svc init: linked local-only
	before, _ := os.ReadFile(filepath.Join(dir, ".svc", "project.json"))
	for _, extra := range [][]string{{"--url", "http://127.0.0.1:1"}, {"--secret", "s3cret-s3cret-s3cret"}, {"--tag", "1"}} {
		_, env, code := w.link(dir, append([]string{"--agent", "demo", "--local"}, extra...)...)
		if code != 1 || env.OK || env.Error.Code != codeGeneric || !strings.Contains(env.Error.Message, extra[0]) {
			t.Fatalf("link --local %s = %d %+v; want exit 1 naming the flag", extra[0], code, env.Error)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, ".svc", "project.json")); !bytes.Equal(before, after) {
		t.Fatalf("a refused link --local rewrote .svc/project.json")
	}
	for _, slug := range []string{"demo", "other"} {
		httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": slug, "name": strings.ToUpper(slug[:1]) + slug[1:]}, nil)
	}

	linkLocal := func() (linkPayload, string) {
		t.Helper()
		out, stderr, code := w.run(dir, "--json", "link", "--agent", "demo", "--local", "--agents", "all")
		var p linkPayload
		if env := cpEnvelope(t, strings.TrimSpace(out), &p); code != 0 || !env.OK {
			t.Fatalf("link --local = %d %s %s", code, out, stderr)
		}
		return p, out
	}
	p, out := linkLocal()
	var local cpInstallation
	httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents/demo/local-dev-installation", w.admin, nil, &local)
	if p.Agent.Slug != "demo" || p.Agent.Name != "Demo" || p.OrganizationID != local.OrganizationID || p.LocalDevInstallation.ID != local.ID ||
		p.LocalDevInstallation.OrganizationSlug != "default" || p.Deployment != nil || p.IdentityVerification != nil ||
		!strings.Contains(out, `"deployment":null`) || p.SchemaVersion != 1 || p.TargetDir == "" {
		t.Fatalf("link --local payload = %s; want the control plane's local-dev installation %s and deployment null", out, local.ID)
	}
	wantFiles := []string{".svc/project.json", ".agents/skills/svc/SKILL.md", ".claude/skills/svc/SKILL.md", ".mcp.json", ".cursor/mcp.json", ".codex/config.toml"} // the scaffold's .gitignore is right already
	if strings.Join(p.FilesWritten, " ") != strings.Join(wantFiles, " ") {
		t.Fatalf("files_written = %v; want %v", p.FilesWritten, wantFiles)
	}
	proj, err := loadProject(dir)
	if err != nil || proj.Link == nil || proj.Link.ControlPlaneURL != w.cp.url || proj.Link.Agent.Slug != "demo" || proj.Link.LocalDevInstallationID != local.ID || proj.Link.OrganizationID != local.OrganizationID {
		t.Fatalf(".svc/project.json = %+v, %v", proj.Link, err)
	}
	bin, _ := filepath.EvalSymlinks(svcBinary(t))
	var mcp struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ".mcp.json"))
	if json.Unmarshal(raw, &mcp) != nil || mcp.MCPServers["svc"].Command != bin || strings.Join(mcp.MCPServers["svc"].Args, " ") != "mcp" {
		t.Fatalf(".mcp.json = %s; want the svc server started as %s mcp", raw, bin)
	}
	if toml, _ := os.ReadFile(filepath.Join(dir, ".codex", "config.toml")); !strings.Contains(string(toml), "command = \""+bin+"\"") {
		t.Fatalf(".codex/config.toml = %s; want command %s", toml, bin)
	}

	// Again: the same link, nothing written, every MCP entry unchanged.
	p2, out := linkLocal()
	if p2.LocalDevInstallation.ID != local.ID || p2.FilesWritten == nil || len(p2.FilesWritten) != 0 || !strings.Contains(out, `"files_written":[]`) {
		t.Fatalf("second link --local = %s; want the same installation and files_written []", out)
	}
	for name, step := range p2.AgentSetup.Steps.MCP {
		if step != agentSetupUnchanged {
			t.Errorf("second link --local: agent_setup.steps.mcp.%s = %q; want %q (no file changed)", name, step, agentSetupUnchanged)
		}
	}
	// Human mode names the installation and what to run next.
	human, _, code := w.run(dir, "link", "--agent", "demo", "--local", "--no-agents")
	if code != 0 || !strings.Contains(human, local.ID) || !strings.Contains(human, "Next: "+svcBinary(t)+" dev") {
		t.Fatalf("human link --local = %d\n%s", code, human)
	}
	// Another agent needs --force.
	if _, env, code := w.link(dir, "--agent", "other", "--local", "--no-agents"); code != 1 || !strings.Contains(env.Error.Message, "already linked") {
		t.Fatalf("link --local to another agent without --force = %d %+v; want exit 1", code, env.Error)
	}
	if p, env, code := w.link(dir, "--agent", "other", "--local", "--no-agents", "--force"); code != 0 || p.Agent.Slug != "other" || p.Deployment != nil {
		t.Fatalf("link --local --force to another agent = %d %+v %+v", code, env.Error, p)
	}
}

// TestAgentTarget runs `svc workflows … --agent <installationId>` and
// `svc runs … --agent`: resolved through the control plane (a process),
// then the box (svc serve) called directly with an identity token: not
// signed in exit 2, an unknown installation or one without a deployment
// exit 4, the box's payloads and exit codes as locally.
func TestAgentTarget(t *testing.T) {
	w := newLinkWorld(t)
	box := w.startLinkBox()
	if !strings.Contains(box.stderr.String(), `msg="the database lacks what src/schema.ts declares; queries of it will fail" missing="create table greetings`) {
		t.Errorf("a box of a project without its migrations: want the boot to warn of the missing table:\n%s", box.stderr.String())
	}
	for _, slug := range []string{"demo", "bare"} {
		httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": slug, "name": slug}, nil)
	}
	p, env, code := w.link(t.TempDir(), "--agent", "demo", "--url", box.url, "--secret", box.secret, "--tag", "1", "--no-agents")
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
		{"invalid input", []string{"workflows", "start", "greet", "--input", `{"name":""}`, "--agent", ldi}, 1, "schema_validation"},
		{"unknown run", []string{"runs", "get", "run-nope", "--agent", ldi}, 4, "run_not_found"},
	} {
		out, _, code := w.run(dir, append([]string{"--json"}, tt.args...)...)
		if e := cpEnvelope(t, strings.TrimSpace(out), nil); code != tt.exit || e.Error == nil || e.Error.Code != tt.code {
			t.Errorf("%s: exit %d %s; want exit %d %s", tt.name, code, out, tt.exit, tt.code)
		}
	}
	var list struct{ Items []workflowItem }
	if out, _, code := w.run(dir, "--json", "workflows", "list", "--agent", ldi); code != 0 || !cpEnvelope(t, strings.TrimSpace(out), &list).OK || len(list.Items) != 2 || list.Items[0].Name != "greet" {
		t.Fatalf("workflows list --agent = %d %s", code, out)
	}
	var rc startReceipt
	if out, _, code := w.run(dir, "--json", "workflows", "start", "ping", "--agent", ldi); code != 0 || !cpEnvelope(t, strings.TrimSpace(out), &rc).OK || rc.RunID == "" || rc.Status != "started" {
		t.Fatalf("workflows start --agent = %d %s", code, out)
	}
	var runs struct{ Items []runRecord }
	if out, _, code := w.run(dir, "--json", "runs", "list", "--agent", ldi); code != 0 || !cpEnvelope(t, strings.TrimSpace(out), &runs).OK || len(runs.Items) != 1 || runs.Items[0].RunID != rc.RunID {
		t.Fatalf("runs list --agent = %d %s", code, out)
	}
	if out, _, code := w.run(dir, "workflows", "schema", "greet", "--agent", p.Deployment.ID); code != 4 {
		t.Fatalf("a deployment id is not an installation id: %d %s", code, out)
	}
	// A box taught another installation refuses the token: exit 2, as a
	// 401 is locally.
	teach, _ := json.Marshal(boxTeaching{OrganizationID: p.OrganizationID, InstallationID: "ins_other", ControlPlaneURL: w.cp.url})
	if rep := boxDo(t, "POST", box.url+boxWellKnown+"/teach", teach, []byte(box.secret), time.Now(), "", nil); rep.status != 200 {
		t.Fatalf("teach another installation = %d %s", rep.status, rep.body)
	}
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
// an agent named after the folder, a number picks a listed one, and in a
// clone whose agent exists Enter links that one;
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
	// A clone of the project: its agent exists, so Enter links it.
	clone := projectDir(t)
	os.Remove(filepath.Join(clone, ".svc", "project.json"))
	if proj, prompt, err := pick(clone, "\n"); err != nil || proj.Link == nil || proj.Link.Agent.Slug != "demo" || proj.Link.LocalDevInstallationID != local.ID ||
		!strings.Contains(prompt, `press Enter to link "demo"`) || strings.Contains(prompt, "create") {
		t.Fatalf("Enter at the pick in a clone = %+v, %v\n%s; want the existing demo linked", proj, err, prompt)
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
// proof, teaching and record on PostgreSQL, the box's (svc serve) answers,
// and the files. Run:
// go test -run '^$' -bench BenchmarkLink -benchtime 20x .
func BenchmarkLink(b *testing.B) {
	w := newLinkWorld(b)
	box := w.startLinkBox()
	httpJSONAuth(b, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": "demo", "name": "Demo"}, nil)
	dir := b.TempDir()
	b.ResetTimer()
	for i := range b.N {
		if _, env, code := w.link(dir, "--agent", "demo", "--url", box.url, "--secret", box.secret, "--tag", fmt.Sprint(i), "--agents", "all"); code != 0 {
			b.Fatalf("link = %d %+v", code, env.Error)
		}
	}
}
