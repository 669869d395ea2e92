package main

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/token"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runInProcess runs the CLI in-process in dir with env and returns stdout,
// stderr and the exit code.
func runInProcess(t *testing.T, dir string, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, cliIO{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return env[k] }, dir: dir})
	return stdout.String(), stderr.String(), code
}

// decodeEnvelope decodes one --json line.
func decodeEnvelope(t *testing.T, s string) envelope {
	t.Helper()
	var e struct {
		OK    bool            `json:"ok"`
		Data  json.RawMessage `json:"data"`
		Error *envelopeError  `json:"error"`
	}
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		t.Fatalf("not a JSON envelope: %q", s)
	}
	return envelope{OK: e.OK, Data: e.Data, Error: e.Error}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
	}{
		{"no verb", nil},
		{"unknown verb", []string{"frobnicate"}},
		{"unknown flag", []string{"dev", "--bogus"}},
		{"unknown sub-verb", []string{"workflows", "explode"}},
		{"missing sub-verb", []string{"runs"}},
		{"init too many args", []string{"init", "a", "b"}},
		{"dev positional", []string{"dev", "extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runInProcess(t, dir, nil, tt.args...)
			if code != 1 || !strings.Contains(stderr, "usage: svc") {
				t.Fatalf("svc %q = exit %d, stderr %q; want exit 1 with usage", tt.args, code, stderr)
			}
			stdout, _, code := runInProcess(t, dir, nil, append([]string{"--json"}, tt.args...)...)
			env := decodeEnvelope(t, stdout)
			if code != 1 || env.OK || env.Error.Code != codeGeneric {
				t.Fatalf("svc --json %q = exit %d, %s; want exit 1, code generic", tt.args, code, stdout)
			}
		})
	}
}

// TestHelpOnEveryVerb prints the help of svc and of every verb: each
// exits 0 with its usage, and none sends the user to a document they do
// not have (a "§" section of the design notes or the spec).
func TestHelpOnEveryVerb(t *testing.T) {
	standsAlone := func(args []string, help string) {
		for _, ref := range []string{"§", "DESIGN", "SPEC"} {
			if strings.Contains(help, ref) {
				t.Errorf("svc %s --help names %q, a document users do not have:\n%s", strings.Join(args, " "), ref, help)
			}
		}
	}
	top, _, _ := runInProcess(t, t.TempDir(), nil, "--help")
	standsAlone(nil, top)
	var walk func(prefix []string, vs []*verb)
	walk = func(prefix []string, vs []*verb) {
		for _, v := range vs {
			args := append(append([]string{}, prefix...), v.name)
			stdout, _, code := runInProcess(t, t.TempDir(), nil, append(args, "--help")...)
			want := "usage: svc " + strings.Join(args, " ")
			if code != 0 || !strings.Contains(stdout, want) || !strings.Contains(stdout, "--json") {
				t.Errorf("svc %s --help = exit %d, %q; want exit 0 with %q", strings.Join(args, " "), code, stdout, want)
			}
			standsAlone(args, stdout)
			walk(args, v.subverbs)
		}
	}
	walk(nil, verbs())
}

// TestUserTextNamesNoDocument reads every string literal of the program
// (not its tests or comments): none names a section ("§") of a document,
// since help, errors, hints and logs reach users who have only svc.
func TestUserTextNamesNoDocument(t *testing.T) {
	fset := token.NewFileSet()
	for _, file := range parseProgramFiles(t, fset, []string{"*.go"}) {
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, "§") {
				t.Errorf("%s: a string names a document section: %s", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
	}
}

func TestExitCodeTable(t *testing.T) {
	want := map[string]int{"generic": 1, "auth": 2, "no_project": 3, "no_target": 3, "dev_not_running": 3, "not_found": 4, "workflow_not_found": 4}
	for code, exit := range want {
		if got := (&cliError{Code: code}).exitCode(); got != exit {
			t.Errorf("exit code of %q = %d; want %d", code, got, exit)
		}
	}
}

func TestDevInvalidPort(t *testing.T) {
	dir := projectDir(t)
	for _, port := range []string{"abc", "0", "65536", "12.5", "-1", ""} {
		stdout, _, code := runInProcess(t, dir, nil, "dev", "--json", "--port", port)
		env := decodeEnvelope(t, stdout)
		if code != 1 || env.Error == nil || env.Error.Code != codeGeneric || !strings.Contains(env.Error.Message, "--port") {
			t.Errorf("dev --port %q = exit %d, %s; want exit 1, code generic", port, code, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".svc", "journal")); !os.IsNotExist(err) {
		t.Errorf("an invalid --port started something: .svc/journal exists")
	}
	stdout, _, code := runInProcess(t, dir, map[string]string{"SVC_DEV_PORT_OFFSET": "x"}, "dev", "--json")
	if env := decodeEnvelope(t, stdout); code != 1 || env.Error.Code != codeGeneric {
		t.Errorf("bad SVC_DEV_PORT_OFFSET = exit %d, %s; want exit 1 generic", code, stdout)
	}
}

func TestPrintContractMatchesRoute(t *testing.T) {
	stdout, _, code := runInProcess(t, t.TempDir(), nil, "dev", "--print-contract")
	if code != 0 {
		t.Fatalf("dev --print-contract = exit %d", code)
	}
	rec := httptest.NewRecorder()
	srv, err := newTestServer(&runtimeCore{log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/contract", nil))
	if rec.Code != 200 || rec.Body.String() != stdout {
		t.Fatalf("GET /api/contract = %d %q\nwant byte-for-byte %q", rec.Code, rec.Body.String(), stdout)
	}
	var c struct {
		SchemaVersion        int `json:"schema_version"`
		AgentProtocolVersion int `json:"agent_protocol_version"`
		Verbs                []struct {
			Name  string `json:"name"`
			Flags []struct {
				Name string `json:"name"`
			} `json:"flags"`
		} `json:"verbs"`
		Routes    []contractRoute `json:"routes"`
		ExitCodes map[string]int  `json:"exit_codes"`
	}
	if err := json.Unmarshal([]byte(stdout), &c); err != nil {
		t.Fatal(err)
	}
	flags := map[string][]string{}
	for _, v := range c.Verbs {
		for _, f := range v.Flags {
			flags[v.Name] = append(flags[v.Name], f.Name)
		}
	}
	for verb, want := range map[string][]string{
		"dev":             {"--port", "--listen", "--print-contract", "--auto-migrate", "--no-auto-migrate"},
		"workflows start": {"--agent", "--input", "--input-file"},
		"link":            {"--agent", "--url", "--secret", "--tag", "--force", "--agents", "--no-agents"},
	} {
		for _, f := range want {
			if !strings.Contains(strings.Join(flags[verb], " "), f) {
				t.Errorf("contract verb %q lacks flag %s (has %v)", verb, f, flags[verb])
			}
		}
	}
	if c.SchemaVersion != 1 || c.AgentProtocolVersion < 15 || c.ExitCodes["dev_not_running"] != 3 || len(c.Routes) < 5 {
		t.Errorf("contract = %+v; want schema 1, protocol ≥ 15, exit codes and routes", c)
	}
}

func TestInitScaffoldAndRefusal(t *testing.T) {
	parent := t.TempDir()
	stdout, _, code := runInProcess(t, parent, nil, "--json", "init", "my-agent")
	if code != 0 {
		t.Fatalf("init = exit %d: %s", code, stdout)
	}
	dir := filepath.Join(parent, "my-agent")
	for _, f := range []string{"agent.yaml", ".gitignore", "tsconfig.json", "deep-agents/assistant/index.ts", "workflows/greet.workflow.ts", "workflows/ping.workflow.ts", ".svc/project.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("scaffold lacks %s", f)
		}
	}
	p, err := loadProject(dir)
	if err != nil || p.Link == nil || p.Link.OrganizationID != "local" || p.Link.Agent.Slug != "my-agent" || !strings.HasPrefix(p.Link.LocalDevInstallationID, "ldi_") {
		t.Fatalf("project = %+v, %v; want a local-only link", p, err)
	}
	gi, _ := os.ReadFile(filepath.Join(dir, ".gitignore"))
	if !strings.Contains(string(gi), ".svc/") {
		t.Errorf(".gitignore = %q; want .svc/", gi)
	}
	before, _ := os.ReadFile(filepath.Join(dir, ".svc", "project.json"))
	stdout, _, code = runInProcess(t, parent, nil, "--json", "init", "my-agent")
	if env := decodeEnvelope(t, stdout); code != 1 || env.Error.Code != codeGeneric {
		t.Fatalf("second init = exit %d %s; want exit 1", code, stdout)
	}
	after, _ := os.ReadFile(filepath.Join(dir, ".svc", "project.json"))
	if !bytes.Equal(before, after) {
		t.Errorf("second init rewrote .svc/project.json")
	}
}

// TestInitNextCommand runs `svc init demo` as a process the ways a user
// starts it, and its "Next:" lines name the binary as they would type it
// after `cd demo`: ../svc after ./svc (the quick start), the path rebased
// after another relative one, the absolute path after one, and svc when
// the shell found it on PATH.
func TestInitNextCommand(t *testing.T) {
	work := t.TempDir()
	bin := filepath.Join(work, "bin", "svc")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(svcBinary(t), bin); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, dir, argv0, want string }{
		{"quick start", "bin", "./svc", "../svc dev"},
		{"relative", "projects", "../bin/svc", "../../bin/svc dev"},
		{"absolute", "projects", bin, bin + " dev"},
		{"PATH", "projects", "svc", "svc dev"},
	} {
		dir := filepath.Join(work, tt.dir, tt.name)
		os.MkdirAll(dir, 0o755)
		var stdout, stderr bytes.Buffer
		cmd := &exec.Cmd{Path: bin, Args: []string{tt.argv0, "init", "demo"}, Dir: dir, Env: baseEnv(), Stdout: &stdout, Stderr: &stderr}
		if tt.dir == "bin" {
			cmd.Dir = filepath.Dir(bin)
		}
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", tt.name, err, stderr.String())
		}
		if want := "Next:\n  cd demo\n  " + tt.want + "\n"; !strings.HasSuffix(stdout.String(), want) {
			t.Errorf("%s: svc init printed\n%s\nwant it to end with\n%s", tt.name, stdout.String(), want)
		}
	}
}

func TestDevWithoutProjectNonInteractive(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"json", nil, []string{"--json", "dev"}},
		{"yes", nil, []string{"--yes", "dev"}},
		{"CI", map[string]string{"CI": "true"}, []string{"dev"}},
		{"no terminal", nil, []string{"dev"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runInProcess(t, dir, tt.env, tt.args...)
			if code != 3 || !strings.Contains(stdout+stderr, "no_project") && !strings.Contains(stdout+stderr, "svc init") {
				t.Fatalf("dev without project = exit %d, %q %q; want exit 3 no_project naming svc init", code, stdout, stderr)
			}
			if tt.name == "json" {
				if env := decodeEnvelope(t, stdout); env.Error.Code != codeNoProject || !strings.Contains(env.Error.Message+stderr, ".svc/project.json") {
					t.Fatalf("envelope = %s; want code no_project", stdout)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, ".svc")); !os.IsNotExist(err) {
		t.Errorf("dev without a project wrote .svc/")
	}
}

func TestWorkflowVerbsWithoutTarget(t *testing.T) {
	noProject := t.TempDir()
	proj := projectDir(t)
	badInput := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(badInput, []byte(`{"name":`), 0o644)
	env := map[string]string{"SVC_DEV_PORT_OFFSET": "3"}
	tests := []struct {
		name string
		dir  string
		args []string
		code string
		exit int
	}{
		{"no project", noProject, []string{"workflows", "list"}, codeNoTarget, 3},
		{"dev not running", proj, []string{"workflows", "list"}, codeDevNotRunning, 3},
		{"runs dev not running", proj, []string{"runs", "list"}, codeDevNotRunning, 3},
		{"--agent not signed in", proj, []string{"workflows", "list", "--agent", "inst_123"}, codeAuth, 2},
		{"invalid input before anything", proj, []string{"workflows", "start", "greet", "--input", "{nope"}, "invalid_json", 1},
		{"invalid input file before anything", proj, []string{"workflows", "start", "greet", "--input-file", badInput}, "invalid_json", 1},
		{"unreadable input file", proj, []string{"workflows", "start", "greet", "--input-file", "/nonexistent.json"}, codeGeneric, 1},
		{"input not an object", proj, []string{"workflows", "start", "greet", "--input", "[1]"}, "invalid_json", 1},
		{"link with a short secret", proj, []string{"link", "--agent", "a", "--url", "http://x", "--secret", "s", "--tag", "1"}, codeGeneric, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, code := runInProcess(t, tt.dir, env, append([]string{"--json"}, tt.args...)...)
			e := decodeEnvelope(t, stdout)
			if code != tt.exit || e.Error == nil || e.Error.Code != tt.code {
				t.Fatalf("svc %q = exit %d %s; want exit %d code %s", tt.args, code, stdout, tt.exit, tt.code)
			}
		})
	}
}

func TestReadStartInputPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(file, []byte(`{"from":"file"}`), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, `{}`},
		{[]string{"--input-file", file}, `{"from":"file"}`},
		{[]string{"--input", `{"from":"flag"}`, "--input-file", file}, `{"from":"flag"}`},
	} {
		fs := newStartFlags()
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		got, err := readStartInput(fs)
		if err != nil || string(got) != tt.want {
			t.Errorf("readStartInput(%q) = %s, %v; want %s", tt.args, got, err, tt.want)
		}
	}
}

func TestParseAgentConfig(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    bool
		wantErr bool
	}{
		{"name: x\n", true, false},
		{"name: x\ndev:\n  autoMigrate: false # off\n", false, false},
		{"dev:\n  autoMigrate: maybe\n", false, true},
		{"- a\n", false, true},
	} {
		cfg, err := parseAgentConfig([]byte(tt.in))
		if (err != nil) != tt.wantErr || (err == nil && cfg.DevAutoMigrate != tt.want) {
			t.Errorf("parseAgentConfig(%q) = %+v, %v; want autoMigrate %v, err %v", tt.in, cfg, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseDotEnv(t *testing.T) {
	got, err := parseDotEnv([]byte("# c\nA=1\nexport B=\"two words\"\nC='x y'\nD=v # note\n"))
	want := map[string]string{"A": "1", "B": "two words", "C": "x y", "D": "v"}
	if err != nil || len(got) != len(want) {
		t.Fatalf("parseDotEnv = %v, %v", got, err)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parseDotEnv[%s] = %q; want %q", k, got[k], v)
		}
	}
	if _, err := parseDotEnv([]byte("NOEQUALS\n")); err == nil {
		t.Error("parseDotEnv accepted a line without =")
	}
}

func TestDevWithoutProjectInteractive(t *testing.T) {
	t.Run("declined", func(t *testing.T) {
		dir := t.TempDir()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"dev"}, cliIO{stdin: strings.NewReader("n\n"), stdout: &stdout, stderr: &stderr,
			getenv: func(string) string { return "" }, dir: dir, stdinTerminal: true})
		if code != 3 || !strings.Contains(stderr.String(), "Create a local-only project") {
			t.Fatalf("declined prompt = exit %d %q; want 3 after the prompt", code, stderr.String())
		}
	})
	t.Run("accepted", func(t *testing.T) {
		parent := t.TempDir()
		os.Chmod(parent, 0o755)
		dir := filepath.Join(parent, "cloned")
		writeFile(t, dir, "agent.yaml", "name: cloned\n")
		env := map[string]string{"SVC_DATABASE_URL": testPostgresURL(t), "OPENAI_API_KEY": "sk"}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stdout, stderr syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"dev", "--port", strconv.Itoa(freePortBase(t))}, cliIO{stdin: strings.NewReader("\n"), stdout: &stdout, stderr: &stderr,
				getenv: func(k string) string { return env[k] }, dir: dir, stdinTerminal: true})
		}()
		eventually(t, 60*time.Second, "svc dev to come up", func() bool { return strings.Contains(stdout.String(), "Press Ctrl-C") })
		// The summary's console link carries a one-time code, never the
		// session's token.
		var rf devRuntimeFile
		if b, err := os.ReadFile(filepath.Join(dir, ".svc", devRuntimeFileName)); err != nil || json.Unmarshal(b, &rf) != nil ||
			!regexp.MustCompile(`Console +`+regexp.QuoteMeta(rf.URL)+`/#code=[0-9a-f]{64} `).MatchString(stdout.String()) || strings.Contains(stdout.String(), rf.Token) {
			t.Errorf("summary without a console link with a code, or with the token %q (%v):\n%s", rf.Token, err, stdout.String())
		}
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("exit %d after cancel: %s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("svc dev did not stop")
		}
		p, err := loadProject(dir)
		if err != nil || p.Link == nil || p.Link.OrganizationID != "local" || p.Link.Agent.Name != "cloned" {
			t.Fatalf("project after the prompt = %+v, %v", p, err)
		}
	})
}

// TestDependencyBudget fails when a package outside the allowed modules
// reaches the binary (DESIGN §1: standard library, pgx, uuid, esbuild, goja).
func TestDependencyBudget(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"svc", "github.com/jackc/pgx/v5", "github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile", "github.com/jackc/puddle/v2",
		"github.com/google/uuid", "github.com/evanw/esbuild", "github.com/dop251/goja", "github.com/dlclark/regexp2", "github.com/go-sourcemap/sourcemap",
		"github.com/google/pprof", "golang.org/x/text", "golang.org/x/sync", "golang.org/x/sys", "golang.org/x/net/idna"}
	for _, pkg := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			if pkg == a || strings.HasPrefix(pkg, a+"/") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("package %s reaches the binary; add it to the README's dependency list with a reason, then here", pkg)
		}
	}
}

// fakeHealth serves /api/health with the identity given and an empty
// workflow list, standing in for another project's svc dev.
func fakeHealth(t *testing.T, projectDir, installation string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"ok": true, "project_dir": projectDir, "local_dev_installation_id": installation})
	})
	mux.HandleFunc("GET /api/workflows", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"schema_version": 1, "items": []any{}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestLocalTargetIdentity checks that the CLI acts only on a runtime that
// says it serves this directory and this local-dev installation, and
// otherwise exits 3 dev_not_running naming what it found.
func TestLocalTargetIdentity(t *testing.T) {
	dir := projectDir(t)
	proj, err := loadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	ldi := proj.Link.LocalDevInstallationID
	link := filepath.Join(t.TempDir(), "via-symlink")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	tests := []struct {
		name       string
		cwd        string
		served     string // project_dir of the runtime; "" = no runtime.json
		servedLDI  string
		wantExit   int
		wantInText string
	}{
		{"no runtime.json", dir, "", "", 3, "no .svc/runtime.json"},
		{"another project's runtime", dir, other, ldi, 3, other},
		{"another installation", dir, dir, "ldi_other", 3, "ldi_other"},
		{"this project", dir, dir, ldi, 0, ""},
		{"this project through a symlink", link, dir, ldi, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(proj.stateDir(devRuntimeFileName))
			if tt.served != "" {
				srv := fakeHealth(t, tt.served, tt.servedLDI)
				writeFile(t, dir, ".svc/"+devRuntimeFileName, `{"url":"`+srv.URL+`"}`)
			}
			stdout, _, code := runInProcess(t, tt.cwd, nil, "--json", "workflows", "list")
			e := decodeEnvelope(t, stdout)
			if code != tt.wantExit {
				t.Fatalf("workflows list = exit %d %s; want exit %d", code, stdout, tt.wantExit)
			}
			if tt.wantExit != 0 && (e.Error.Code != codeDevNotRunning || !strings.Contains(e.Error.Message, tt.wantInText)) {
				t.Fatalf("workflows list = %s; want dev_not_running naming %q", stdout, tt.wantInText)
			}
		})
	}
}

// TestStatusErrorKeepsRuntimeCode checks that an error answer keeps the
// runtime's code in the envelope while the exit code follows SPEC §7, and
// that a terminal sees each schema violation once.
func TestStatusErrorKeepsRuntimeCode(t *testing.T) {
	two := `{"error":{"code":"schema_validation","message":"input does not match the inputSchema of \"greet\": /name: want a string","violations":[{"path":"/name","message":"want a string"},{"path":"","message":"unknown property \"x\""}]}}`
	tests := []struct {
		status   int
		body     string
		wantCode string
		wantExit int
	}{
		{422, two, "schema_validation", 1},
		{400, `{"error":{"code":"invalid_json","message":"bad"}}`, "invalid_json", 1},
		{503, `{"error":{"code":"gate_closed","message":"closed"}}`, "gate_closed", 1},
		{503, `{"error":{"code":"workflow_compile_failed","message":"x.ts:1"}}`, "workflow_compile_failed", 1},
		{404, `{"error":{"code":"workflow_not_found","message":"no"}}`, codeWorkflowNotFound, 4},
		{404, `{"error":{"code":"run_not_found","message":"no"}}`, "run_not_found", 4},
		{404, `not json`, codeNotFound, 4},
		{401, `{"error":{"code":"auth","message":"key"}}`, codeAuth, 2},
		{500, ``, codeGeneric, 1},
	}
	tg := &target{baseURL: "http://127.0.0.1:1"}
	for _, tt := range tests {
		ce := tg.statusError("POST", "/api/x", tt.status, []byte(tt.body))
		if ce.Code != tt.wantCode || ce.exitCode() != tt.wantExit {
			t.Errorf("statusError(%d, %s) = code %q exit %d; want %q exit %d", tt.status, tt.body, ce.Code, ce.exitCode(), tt.wantCode, tt.wantExit)
		}
	}
	ce := tg.statusError("POST", "/api/x", 422, []byte(two))
	var stdout, stderr bytes.Buffer
	(&cmd{cliIO: cliIO{stdout: &stdout, stderr: &stderr}}).fail(ce)
	if n := strings.Count(stderr.String(), "want a string"); n != 1 || !strings.Contains(stderr.String(), `(root): unknown property "x"`) {
		t.Errorf("human error = %q; want each violation once (\"want a string\" %d times)", stderr.String(), n)
	}
	stdout.Reset()
	(&cmd{cliIO: cliIO{stdout: &stdout, stderr: &stderr}, json: true}).fail(ce)
	var env struct{ Error envelopeError }
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil || env.Error.Code != "schema_validation" || len(env.Error.Violations) != 2 {
		t.Errorf("--json error = %s; want code schema_validation with 2 violations", stdout.String())
	}
}

// TestPrintContractJSONEnvelope checks that `dev --print-contract --json`
// is an envelope whose data is byte for byte GET /api/contract.
func TestPrintContractJSONEnvelope(t *testing.T) {
	stdout, _, code := runInProcess(t, t.TempDir(), nil, "dev", "--print-contract", "--json")
	var env struct {
		OK   bool            `json:"ok"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(stdout), &env); code != 0 || err != nil || !env.OK {
		t.Fatalf("dev --print-contract --json = exit %d %q (%v); want an ok envelope", code, stdout, err)
	}
	rec := httptest.NewRecorder()
	srv, err := newTestServer(&runtimeCore{log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/contract", nil))
	if want := strings.TrimSuffix(rec.Body.String(), "\n"); string(env.Data) != want {
		t.Fatalf("envelope data = %s\nwant byte for byte %s", env.Data, want)
	}
}

// TestDevStdinNotTerminal runs the real binary with stdin on /dev/null (a
// character device, not a terminal) in a directory without a project: it
// must exit 3 no_project without prompting or writing anything. The API
// port is held, so that a binary that did prompt stops before starting
// PostgreSQL.
func TestDevStdinNotTerminal(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	c := exec.CommandContext(ctx, svcBinary(t), "dev", "--port", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	c.Dir, c.Env, c.Stdin = dir, baseEnv(), null
	var stderr bytes.Buffer
	c.Stderr = &stderr
	c.Run()
	if code := c.ProcessState.ExitCode(); code != 3 || strings.Contains(stderr.String(), "Create a local-only project") || !strings.Contains(stderr.String(), "no .svc/project.json") {
		t.Fatalf("svc dev < /dev/null = exit %d, stderr %q; want exit 3 no_project without a prompt", code, stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("svc dev < /dev/null wrote %v", entries)
	}
}

// TestCLIIsTerminal checks that neither the null device, a file nor a pipe
// counts as a terminal.
func TestCLIIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	for _, f := range []*os.File{null, file, pr} {
		if cliIsTerminal(f) {
			t.Errorf("cliIsTerminal(%s) = true; want false", f.Name())
		}
	}
}

// TestGitignoreHidesMigrations checks the reading of .gitignore patterns,
// and, when git is installed, that git agrees on every case.
func TestGitignoreHidesMigrations(t *testing.T) {
	scaffold, err := scaffoldFS.ReadFile("scaffold/gitignore")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, gitignore string
		want            bool
	}{
		{"scaffold", string(scaffold), false},
		{"old scaffold", ".svc/\nnode_modules/\n.env\n", true},
		{"rooted dir", "/.svc\n", true},
		{"dir cannot be re-included", ".svc/\n!.svc/migrations/\n", true},
		{"content then migrations back", "/.svc/*\n!/.svc/migrations/\n", false},
		{"content without migrations back", ".svc/*\n", true},
		{"all below", ".svc/**\n!.svc/migrations/\n", true},
		{"migrations only", ".svc/migrations/\n", true},
		{"migration files", ".svc/migrations/*.sql\n", true},
		{"unrelated", "# .svc/\nnode_modules/\n.env\n", false},
		{"none", "", false},
	}
	_, gitErr := exec.LookPath("git")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gitignoreHidesMigrations([]byte(tt.gitignore)); got != tt.want {
				t.Errorf("gitignoreHidesMigrations(%q) = %v; want %v", tt.gitignore, got, tt.want)
			}
			if gitErr != nil {
				return
			}
			repo := t.TempDir()
			writeFile(t, repo, ".gitignore", tt.gitignore)
			writeFile(t, repo, ".svc/migrations/0001_init.sql", "select 1;")
			if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
				t.Fatalf("git init: %v %s", err, out)
			}
			err := exec.Command("git", "-C", repo, "check-ignore", "-q", ".svc/migrations/0001_init.sql").Run()
			if ignored := err == nil; ignored != tt.want {
				t.Errorf("git check-ignore .svc/migrations/0001_init.sql with %q = ignored %v; want %v", tt.gitignore, ignored, tt.want)
			}
			if tt.name == "scaffold" && exec.Command("git", "-C", repo, "check-ignore", "-q", ".svc/project.json").Run() != nil {
				t.Errorf("the scaffold's .gitignore does not ignore .svc/project.json")
			}
		})
	}
}

// TestDevWarnsOldGitignore checks that svc dev warns when the project's
// .gitignore hides .svc/migrations/, and not with the scaffold's. The API
// port is held, so the boot stops right after the warning.
func TestDevWarnsOldGitignore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	const warning = ".gitignore hides .svc/migrations/"
	dir := projectDir(t)
	if _, stderr, code := runInProcess(t, dir, nil, "dev", "--port", port); code != 1 || strings.Contains(stderr, warning) {
		t.Errorf("dev with the scaffold's .gitignore = exit %d %q; want exit 1 (port busy) without the warning", code, stderr)
	}
	writeFile(t, dir, ".gitignore", ".svc/\nnode_modules/\n")
	if _, stderr, code := runInProcess(t, dir, nil, "dev", "--port", port); code != 1 || !strings.Contains(stderr, warning) || !strings.Contains(stderr, "!.svc/migrations/") {
		t.Errorf("dev with an old .gitignore = exit %d %q; want the warning with the fix", code, stderr)
	}
}

// TestPlural: counts read as English (issue 38, item B: "1 members").
func TestPlural(t *testing.T) {
	for want, got := range map[string]string{
		"1 member": plural(1, "member"), "2 members": plural(2, "member"), "0 audit entries": plural(0, "audit entry"),
		"1 audit entry": plural(1, "audit entry"), "3 API keys": plural(3, "API key"), "2 signed-in devices": plural(2, "signed-in device"),
	} {
		if got != want {
			t.Errorf("plural = %q; want %q", got, want)
		}
	}
}
