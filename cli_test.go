package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

func TestHelpOnEveryVerb(t *testing.T) {
	var walk func(prefix []string, vs []*verb)
	walk = func(prefix []string, vs []*verb) {
		for _, v := range vs {
			args := append(append([]string{}, prefix...), v.name)
			stdout, _, code := runInProcess(t, t.TempDir(), nil, append(args, "--help")...)
			want := "usage: svc " + strings.Join(args, " ")
			if code != 0 || !strings.Contains(stdout, want) || !strings.Contains(stdout, "--json") {
				t.Errorf("svc %s --help = exit %d, %q; want exit 0 with %q", strings.Join(args, " "), code, stdout, want)
			}
			walk(args, v.subverbs)
		}
	}
	walk(nil, verbs())
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
	srv, err := newServer(&devRuntime{log: discardLogger()})
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
		{"unknown box", proj, []string{"workflows", "list", "--agent", "inst_123"}, codeNotFound, 4},
		{"invalid input before anything", proj, []string{"workflows", "start", "greet", "--input", "{nope"}, codeGeneric, 1},
		{"unreadable input file", proj, []string{"workflows", "start", "greet", "--input-file", "/nonexistent.json"}, codeGeneric, 1},
		{"input not an object", proj, []string{"workflows", "start", "greet", "--input", "[1]"}, codeGeneric, 1},
		{"link not yet", proj, []string{"link", "--agent", "a", "--url", "http://x", "--secret", "s", "--tag", "1"}, codeGeneric, 1},
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
		eventually(t, 60*time.Second, "svc dev to come up", func() bool { return strings.Contains(stdout.String(), "svc dev is up") })
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
		"github.com/google/pprof", "golang.org/x/text", "golang.org/x/sync", "golang.org/x/sys"}
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
