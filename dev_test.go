package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// assertClosed fails when anything still listens on the loopback port.
func assertClosed(t *testing.T, port int) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("port %d still listening after shutdown", port)
	}
}

// TestDevBootEndToEnd boots the scaffold on an external PostgreSQL
// (SVC_DATABASE_URL), checks every payload field against the live services,
// drives the workflow verbs, and stops it with SIGINT.
func TestDevBootEndToEnd(t *testing.T) {
	dir := projectDir(t)
	dbURL := testPostgresURL(t)
	writeFile(t, dir, ".svc/migrations/0001_notes.sql", "create table notes(id serial primary key, body text);")
	writeFile(t, dir, ".env", "GREETING=hi\n")
	writeFile(t, dir, "workflows/envcheck.workflow.ts", `async function read() { "use step"; return { greeting: process.env.GREETING, db: !!process.env.DATABASE_URL, s3: !!process.env.S3_ENDPOINT && !!process.env.S3_SECRET_ACCESS_KEY, key: process.env.OPENAI_API_KEY }; }
export default async function envcheck() { "use workflow"; return await read(); }`)
	env := baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk-test")
	d := startDev(t, dir, env)
	p := d.payload
	wantURL := fmt.Sprintf("http://127.0.0.1:%d", d.port)
	if p.SchemaVersion != 1 || p.EmulatorURL != wantURL || p.AgentURL != wantURL || p.PublicURL != nil || p.Deeplink != nil {
		t.Errorf("payload urls = %+v; want emulator %s, null tunnel fields", p, wantURL)
	}
	proj, _ := loadProject(dir)
	if p.LocalDevInstallationID != proj.Link.LocalDevInstallationID {
		t.Errorf("local_dev_installation_id = %q; want %q", p.LocalDevInstallationID, proj.Link.LocalDevInstallationID)
	}
	if !p.Gate.Open || p.Gate.Reason != gateProviderEnv || strings.Join(p.DeepAgents, ",") != "assistant" {
		t.Errorf("gate/agents = %+v %v; want open model-provider-env, [assistant]", p.Gate, p.DeepAgents)
	}
	if p.Services.PostgresURL != dbURL || p.Services.S3Endpoint != fmt.Sprintf("http://127.0.0.1:%d", d.port+2) || p.Services.S3Bucket != "svc" {
		t.Errorf("services = %+v", p.Services)
	}
	// The database has the platform and user migrations applied.
	conn, err := pgx.Connect(context.Background(), p.Services.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(context.Background(), `select count(*) from svc.svc_migrations where name like '%0001_notes.sql'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("user migration tracked %d times (%v); want 1", n, err)
	}
	if _, err := conn.Exec(context.Background(), `insert into notes(body) values('x')`); err != nil {
		t.Errorf("user migration table missing: %v", err)
	}
	conn.Close(context.Background())
	// The object storage answers, and refuses unsigned requests.
	resp, err := http.Get(p.Services.S3Endpoint + "/svc")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "<Error>") {
		t.Errorf("unsigned S3 request = %d %s; want 403 S3 XML error", resp.StatusCode, body)
	}
	// The contract route serves the same bytes as --print-contract.
	printed, _, _ := cli(t, dir, env, "dev", "--print-contract")
	resp, err = http.Get(d.url("/api/contract"))
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(served) != printed {
		t.Errorf("GET /api/contract differs from dev --print-contract")
	}
	// The CLI verbs find this runtime.
	cliEnv := baseEnv()
	out, stderr, code := cli(t, dir, cliEnv, "workflows", "list")
	if code != 0 || !strings.Contains(out, "◆ greet") || !strings.Contains(out, "◇ ping") || !strings.Contains(out, "POST /api/workflows/greet/start") {
		t.Errorf("workflows list = exit %d %q %q", code, out, stderr)
	}
	// A second session on the same ports is refused while this one runs.
	_, stderr, code = cli(t, dir, env, "dev", "--port", fmt.Sprint(d.port))
	if code != 1 || !strings.Contains(stderr, fmt.Sprint(d.port)) || !strings.Contains(stderr, "SVC_DEV_PORT_OFFSET") {
		t.Errorf("dev on a busy port = exit %d %q; want exit 1 naming the port and SVC_DEV_PORT_OFFSET", code, stderr)
	}
	// Agents and workflows see the system secrets, the provider and .env.
	if run := startAndWait(t, d, "envcheck"); string(run.Output) != `{"greeting":"hi","db":true,"s3":true,"key":"sk-test"}` {
		t.Errorf("process.env in a step = %s %+v", run.Output, run.Error)
	}
	if code := d.interrupt(); code != 0 {
		t.Errorf("SIGINT exit = %d; want 0\n%s", code, d.stderr.String())
	}
	for i := range 3 {
		assertClosed(t, d.port+i)
	}
	if _, err := os.Stat(filepath.Join(dir, ".svc", "runtime.json")); !os.IsNotExist(err) {
		t.Errorf(".svc/runtime.json left behind")
	}
	_, _, code = cli(t, dir, cliEnv, "workflows", "list")
	if code != 3 {
		t.Errorf("workflows list after shutdown = exit %d; want 3 (dev_not_running)", code)
	}
	// A run completed in this project: without any provider the gate opens
	// with first-run-completed.
	d = startDev(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL))
	if !d.payload.Gate.Open || d.payload.Gate.Reason != gateFirstRun {
		t.Errorf("gate after a completed run = %+v; want open first-run-completed", d.payload.Gate)
	}
}

// TestDevLocalPostgresAndOffset boots with the local server binaries (initdb
// into .svc or its root fallback), with SVC_DEV_PORT_OFFSET shifting all
// three ports, and checks nothing is left listening after SIGINT.
func TestDevLocalPostgresAndOffset(t *testing.T) {
	dir := projectDir(t)
	base := freePortBase(t)
	// Find an offset whose shifted ports are free too.
	offset := 0
	for o := 10; o < 200; o += 10 {
		free := true
		for i := range 3 {
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+o+i)); err != nil {
				free = false
			} else {
				ln.Close()
			}
		}
		if free {
			offset = o
			break
		}
	}
	env := baseEnv("OPENAI_API_KEY=sk-test", fmt.Sprintf("SVC_DEV_PORT_OFFSET=%d", offset))
	d := startDevProcess(t, dir, base, env)
	d.payload = d.nextPayload(120 * time.Second)
	api := base + offset
	if d.payload.EmulatorURL != fmt.Sprintf("http://127.0.0.1:%d", api) ||
		!strings.Contains(d.payload.Services.PostgresURL, fmt.Sprintf(":%d/", api+1)) ||
		d.payload.Services.S3Endpoint != fmt.Sprintf("http://127.0.0.1:%d", api+2) {
		t.Fatalf("ports not shifted by %d: %+v", offset, d.payload)
	}
	conn, err := pgx.Connect(context.Background(), d.payload.Services.PostgresURL)
	if err != nil {
		t.Fatalf("connect local PostgreSQL: %v", err)
	}
	conn.Close(context.Background())
	if code := d.interrupt(); code != 0 {
		t.Errorf("SIGINT exit = %d; want 0\n%s", code, d.stderr.String())
	}
	for i := range 3 {
		assertClosed(t, api+i)
	}
}

// TestDevGateClosedThenStored boots with no provider: the gate is closed,
// no agent is listed, starts are refused; storing a credential opens it
// without a restart and prints a second payload line.
func TestDevGateClosedThenStored(t *testing.T) {
	dir := projectDir(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t)))
	if d.payload.Gate.Open || d.payload.Gate.Reason != gateNoProvider || len(d.payload.DeepAgents) != 0 || d.payload.DeepAgents == nil {
		t.Fatalf("gate = %+v agents %#v; want closed no-model-provider, []", d.payload.Gate, d.payload.DeepAgents)
	}
	eventually(t, 5*time.Second, "the console link on stderr", func() bool { return strings.Contains(d.stderr.String(), d.payload.EmulatorURL+"/") })
	var e struct{ Error apiError }
	if st := httpJSON(t, "POST", d.url("/api/workflows/ping/start"), "{}", &e); st != 503 || e.Error.Code != "gate_closed" ||
		!strings.Contains(e.Error.Message, "OPENAI_API_KEY") || strings.Count(e.Error.Message, "no model provider is configured") != 1 {
		t.Errorf("start while closed = %d %+v; want 503 gate_closed saying once that no provider is configured and how to add one", st, e)
	}
	if st := httpJSON(t, "PUT", d.url("/api/settings/model-provider"), map[string]string{"provider": "bogus"}, nil); st != 422 {
		t.Errorf("invalid provider = %d; want 422", st)
	}
	if st := httpJSON(t, "PUT", d.url("/api/settings/model-provider"), map[string]string{"provider": "openai", "apiKey": "sk-stored"}, nil); st != 200 {
		t.Fatalf("store provider = %d", st)
	}
	p := d.nextPayload(30 * time.Second)
	if !p.Gate.Open || p.Gate.Reason != gateProviderStored || strings.Join(p.DeepAgents, ",") != "assistant" {
		t.Fatalf("after storing: gate %+v agents %v; want open model-provider-stored [assistant]", p.Gate, p.DeepAgents)
	}
	var rc startReceipt
	if st := httpJSON(t, "POST", d.url("/api/workflows/ping/start"), "", &rc); st != 202 || rc.Status != "started" {
		t.Fatalf("start after opening = %d %+v", st, rc)
	}
	if strings.Contains(d.stderr.String(), "sk-stored") {
		t.Errorf("the stored key was printed")
	}
}

// TestDevCompileErrorsAndEdits: a broken workflow is reported with
// file:line and does not stop the others; edits are picked up live.
func TestDevCompileErrorsAndEdits(t *testing.T) {
	dir := projectDir(t)
	writeFile(t, dir, "workflows/broken.workflow.ts", "export default async function broken() {\n  \"use workflow\";\n  const x = ;\n}\n")
	writeFile(t, dir, "workflows/twice.workflow.ts", "export async function a() { \"use workflow\"; }\nexport async function b() { \"use workflow\"; }\n")
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk"))
	errs := d.stderr.String()
	if !strings.Contains(errs, "workflows/broken.workflow.ts:3:") || !strings.Contains(errs, "workflows/twice.workflow.ts") {
		t.Errorf("compile errors not reported with file:line:\n%s", errs)
	}
	names := func() string {
		var out struct{ Items []workflowItem }
		httpJSON(t, "GET", d.url("/api/workflows"), nil, &out)
		var n []string
		for _, it := range out.Items {
			n = append(n, it.Name)
		}
		return strings.Join(n, ",")
	}
	if got := names(); got != "greet,ping" {
		t.Fatalf("workflows = %s; want greet,ping", got)
	}
	var e struct{ Error apiError }
	if st := httpJSON(t, "POST", d.url("/api/workflows/broken/start"), "{}", &e); st != 503 || e.Error.Code != "workflow_compile_failed" || !strings.Contains(e.Error.Message, "broken.workflow.ts:3") {
		t.Errorf("start broken = %d %+v; want 503 workflow_compile_failed with file:line", st, e)
	}
	_, stderr, code := cli(t, dir, baseEnv(), "workflows", "start", "broken")
	if code != 1 || !strings.Contains(stderr, "broken.workflow.ts:3") {
		t.Errorf("CLI start of broken = exit %d %q; want 1 with the reason", code, stderr)
	}
	writeFile(t, dir, "workflows/broken.workflow.ts", "export default async function broken() {\n  \"use workflow\";\n  return 1;\n}\n")
	writeFile(t, dir, "workflows/fresh.workflow.ts", "export default async function fresh() {\n  \"use workflow\";\n  return 2;\n}\n")
	eventually(t, 10*time.Second, "edits to be compiled", func() bool { return names() == "broken,fresh,greet,ping" })
	eventually(t, 5*time.Second, "the editor types to follow the edit", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, ".svc", "workflows.d.ts"))
		return strings.Contains(string(b), `"fresh": { input: unknown; output: unknown };`)
	})
}

// TestDevFailingMigrationStopsBoot: boot stops naming the file and the
// database error, exit 1, nothing half-applied.
func TestDevFailingMigrationStopsBoot(t *testing.T) {
	dir := projectDir(t)
	dbURL := testPostgresURL(t)
	writeFile(t, dir, ".svc/migrations/0001_ok.sql", "create table a(id int);")
	writeFile(t, dir, ".svc/migrations/0002_bad.sql", "create table b(id int);\ncreate tabel c(id int);")
	_, stderr, code := cli(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=x"), "dev", "--port", fmt.Sprint(freePortBase(t)))
	if code != 1 || !strings.Contains(stderr, "0002_bad.sql") || !strings.Contains(stderr, "syntax error") {
		t.Fatalf("dev with a bad migration = exit %d %q; want 1 naming the file and the error", code, stderr)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var b *string
	conn.QueryRow(context.Background(), `select to_regclass('public.b')::text`).Scan(&b)
	if b != nil {
		t.Errorf("table b exists: the failing migration was half-applied")
	}
}

// tableColumns returns the columns of a public table ("" when absent).
func tableColumns(t *testing.T, dbURL, table string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var cols *string
	conn.QueryRow(context.Background(), `select string_agg(column_name, ',' order by ordinal_position) from information_schema.columns where table_schema = 'public' and table_name = $1`, table).Scan(&cols)
	if cols == nil {
		return ""
	}
	return *cols
}

// usersSchema is a src/schema.ts with the given extra columns.
func usersSchema(extra string) string {
	return `import { pgTable, serial, text, integer } from "drizzle-orm/pg-core";
export const users = pgTable("users", { id: serial("id").primaryKey(), name: text("name").notNull()` + extra + ` });
`
}

// TestDevAutoMigrate: src/schema.ts is applied at boot and on edits while
// svc dev runs; --no-auto-migrate and dev.autoMigrate: false turn it off,
// and --auto-migrate overrides the file.
func TestDevAutoMigrate(t *testing.T) {
	t.Run("on by default, follows edits", func(t *testing.T) {
		dir := projectDir(t)
		dbURL := testPostgresURL(t)
		writeFile(t, dir, "src/schema.ts", usersSchema(""))
		startDev(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk"))
		if got := tableColumns(t, dbURL, "users"); got != "id,name" {
			t.Fatalf("users columns after boot = %q; want id,name", got)
		}
		writeFile(t, dir, "src/schema.ts", usersSchema(`, age: integer("age")`))
		eventually(t, 15*time.Second, "the added column to be applied", func() bool { return tableColumns(t, dbURL, "users") == "id,name,age" })
		files, _ := filepath.Glob(filepath.Join(dir, ".svc", "migrations", "*.sql"))
		if len(files) != 2 {
			t.Errorf("migrations written = %v; want 2 files", files)
		}
	})
	for _, tt := range []struct {
		name   string
		yaml   string
		args   []string
		create bool
	}{
		{"--no-auto-migrate", "", []string{"--no-auto-migrate"}, false},
		{"dev.autoMigrate false", "dev:\n  autoMigrate: false\n", nil, false},
		{"--auto-migrate overrides the file", "dev:\n  autoMigrate: false\n", []string{"--auto-migrate"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := projectDir(t)
			dbURL := testPostgresURL(t)
			if tt.yaml != "" {
				writeFile(t, dir, "agent.yaml", tt.yaml)
			}
			writeFile(t, dir, "src/schema.ts", usersSchema(""))
			startDev(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk"), tt.args...)
			if got := tableColumns(t, dbURL, "users") != ""; got != tt.create {
				t.Errorf("users table created = %v; want %v", got, tt.create)
			}
		})
	}
}

// TestWorkflowAndRunVerbsEndToEnd drives every workflows/runs verb through
// the binary against a running svc dev, in human and --json modes.
func TestWorkflowAndRunVerbsEndToEnd(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	dir := projectDir(t)
	writeFile(t, dir, "workflows/slow.workflow.ts", `import { sleep } from "svc";
export const serial = true;
export default async function slow() { "use workflow"; await sleep("1h"); return 1; }`)
	writeFile(t, dir, "workflows/noisy.workflow.ts", `import { createHook } from "svc";
async function shaky(n: number) { "use step"; console.log("attempt for", n); if (n > 0) throw new Error("shaky " + n); return n; }
export default async function noisy(input: { n: number }) {
  "use workflow";
  const h = createHook();
  console.warn("hook", h.token.length > 0);
  if (input.n === 0) return await h;
  return await shaky(input.n);
}`)
	startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk"))
	env := baseEnv()
	jsonOut := func(args ...string) (map[string]any, int) {
		out, stderr, code := cli(t, dir, env, append([]string{"--json"}, args...)...)
		var e struct {
			OK    bool           `json:"ok"`
			Data  map[string]any `json:"data"`
			Error *envelopeError `json:"error"`
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatalf("svc %v: not an envelope: %q %q", args, out, stderr)
		}
		if !e.OK {
			return map[string]any{"code": e.Error.Code, "message": e.Error.Message}, code
		}
		return e.Data, code
	}
	list, _ := jsonOut("workflows", "list")
	if list["schema_version"].(float64) != 1 || len(list["items"].([]any)) != 4 {
		t.Fatalf("list = %v", list)
	}
	first := list["items"].([]any)[0].(map[string]any)
	if first["name"] != "greet" || first["trigger"] != "POST /api/workflows/greet/start" || first["hasSchema"] != true {
		t.Errorf("first item = %v", first)
	}
	schema, _ := jsonOut("workflows", "schema", "greet")
	if in := schema["schema"].(map[string]any)["input"].(map[string]any); in["type"] != "object" {
		t.Errorf("schema = %v", schema)
	}
	out, _, code := cli(t, dir, env, "workflows", "schema", "ping")
	if code != 0 || !strings.Contains(out, "declares no input/output schema") || !strings.Contains(out, "raw JSON field") {
		t.Errorf("schema ping = %d %q", code, out)
	}
	if got, code := jsonOut("workflows", "schema", "nope"); code != 4 || got["code"] != codeWorkflowNotFound {
		t.Errorf("schema nope = %d %v; want 4 workflow_not_found", code, got)
	}
	// start: --input wins over --input-file.
	file := filepath.Join(dir, "in.json")
	os.WriteFile(file, []byte(`{"name":"File"}`), 0o644)
	rc, code := jsonOut("workflows", "start", "greet", "--input-file", file, "--input", `{"name":"Flag"}`)
	if code != 0 || rc["status"] != "started" || rc["schema_version"].(float64) != 1 || rc["trigger"] != "POST /api/workflows/greet/start" || rc["runId"] == nil || !strings.HasPrefix(rc["worldRunId"].(string), "wrun_") {
		t.Fatalf("start = %d %v", code, rc)
	}
	id := rc["runId"].(string)
	run, _ := jsonOut("runs", "get", id, "--wait", "20s")
	r := run["run"].(map[string]any)
	if r["status"] != runCompleted || r["trigger"] != triggerCLI || r["traceId"] != rc["worldRunId"] || !strings.Contains(fmt.Sprint(r["output"]), "Hello, Flag!") {
		t.Fatalf("run = %v", r)
	}
	if steps := r["steps"].([]any); len(steps) != 3 || steps[0].(map[string]any)["attempts"] == nil {
		t.Errorf("timeline = %v", steps)
	}
	scaffoldDataPath(t, dir, env, r["output"])
	out, stderr, code := cli(t, dir, env, "workflows", "start", "greet", "--input", `{"name":""}`)
	if code != 1 || !strings.Contains(stderr, "/name") {
		t.Errorf("schema failure = %d %q %q; want exit 1 with the path on stderr", code, out, stderr)
	}
	if got, code := jsonOut("workflows", "start", "nope"); code != 4 || got["code"] != codeWorkflowNotFound {
		t.Errorf("start nope = %d %v", code, got)
	}
	// Serial: the second start is queued, with the sentence in human mode.
	first2, _ := jsonOut("workflows", "start", "slow")
	out, _, _ = cli(t, dir, env, "workflows", "start", "slow")
	if !strings.Contains(out, "queued") || !strings.Contains(out, "earlier run is still active") || !strings.Contains(out, "starts automatically") {
		t.Errorf("queued start printed %q", out)
	}
	out, _, _ = cli(t, dir, env, "runs", "list")
	if !strings.Contains(out, "queued") || !strings.Contains(out, "slow") {
		t.Errorf("runs list = %q", out)
	}
	cancelled, code := jsonOut("runs", "cancel", first2["runId"].(string))
	if code != 0 || cancelled["run"].(map[string]any)["status"] != runCancelled {
		t.Errorf("cancel = %d %v", code, cancelled)
	}
	// The queued start now runs.
	eventually(t, 10*time.Second, "the queued start to run", func() bool {
		l, _ := jsonOut("runs", "list", "--workflow", "slow")
		return len(l["queued"].([]any)) == 0 && len(l["items"].([]any)) == 2
	})
	if got, code := jsonOut("runs", "get", "00000000-0000-0000-0000-000000000000"); code != 4 || got["code"] != "run_not_found" {
		t.Errorf("get unknown run = %d %v", code, got)
	}
	// Queue entries are first-class: the receipt names the entry, and
	// runs get / cancel take its id.
	queued, _ := jsonOut("workflows", "start", "slow")
	qid, _ := queued["queueId"].(string)
	if queued["status"] != "queued" || !isQueueID(qid) {
		t.Fatalf("queued receipt = %v; want a queueId", queued)
	}
	if got, code := jsonOut("runs", "get", qid); code != 0 || got["run"].(map[string]any)["status"] != runQueued {
		t.Errorf("runs get %s = %d %v", qid, code, got)
	}
	if got, code := jsonOut("runs", "cancel", qid); code != 0 || got["run"].(map[string]any)["status"] != runCancelled {
		t.Errorf("runs cancel %s = %d %v", qid, code, got)
	}
	// A failed run: --wait exits 1; human get shows each attempt's error
	// and the hook's token; logs are kept with the run.
	failed, _ := jsonOut("workflows", "start", "noisy", "--input", `{"n":2}`)
	fid := failed["runId"].(string)
	if _, code := jsonOut("runs", "get", fid, "--wait", "30s"); code != 1 {
		t.Errorf("runs get --wait of a failed run = exit %d; want 1", code)
	}
	out, _, code = cli(t, dir, env, "runs", "get", fid)
	if code != 0 || !strings.Contains(out, "attempt 1: Error: shaky 2") || !strings.Contains(out, "attempt 3: Error: shaky 2") || !strings.Contains(out, "token hook_") {
		t.Errorf("human runs get = %d %q; want the attempts' errors and the hook token", code, out)
	}
	out, _, code = cli(t, dir, env, "runs", "logs", fid)
	if code != 0 || !strings.Contains(out, "warn  workflow") || !strings.Contains(out, "shaky#3") || strings.Count(out, "attempt for 2") != 3 {
		t.Errorf("runs logs = %d %q; want the workflow line and the three attempts' lines", code, out)
	}
	if got, code := jsonOut("runs", "cancel", fid); code != 1 || !strings.Contains(fmt.Sprint(got["message"]), "already ended") {
		t.Errorf("cancel of an ended run = %d %v; want exit 1 saying it ended", code, got)
	}
	done, _ := jsonOut("workflows", "start", "noisy", "--input", `{"n":0}`)
	if _, code := jsonOut("runs", "get", done["runId"].(string), "--wait", "1s"); code != 0 {
		t.Errorf("runs get --wait of a waiting run = exit %d; want 0 (it has not failed)", code)
	}
	// svc runs rerun: again from the start, or from a step with the earlier
	// outcomes reused; both linked to the run they rerun.
	out, _, code = cli(t, dir, env, "runs", "rerun", id, "--wait", "20s")
	if code != 0 || !strings.Contains(out, "Hello, Flag!") {
		t.Errorf("runs rerun --wait = %d %q; want the new run's output", code, out)
	}
	out, _, code = cli(t, dir, env, "runs", "rerun", id, "--from-step", "3")
	if code != 0 || !strings.Contains(out, "rerunOf  "+id+" (from step 3: steps 1 to 2 reused)") {
		t.Errorf("runs rerun --from-step 3 = %d %q", code, out)
	}
	fork, _ := jsonOut("runs", "rerun", id, "--from-step", "2", "--wait", "20s")
	fr := fork["run"].(map[string]any)
	if fr["rerunOf"] != id || fr["retryFromStep"].(float64) != 2 || fr["status"] != runCompleted || fr["trigger"] != triggerCLI ||
		fr["steps"].([]any)[0].(map[string]any)["reused"] != true || !strings.Contains(fmt.Sprint(fr["output"]), "Hello, Flag!") {
		t.Errorf("runs rerun --from-step 2 --json = %v", fr)
	}
	out, _, code = cli(t, dir, env, "runs", "get", id)
	if code != 0 || strings.Count(out, "reruns    ") != 1 || !strings.Contains(out, fr["runId"].(string)) {
		t.Errorf("runs get of the first run = %d %q; want its reruns", code, out)
	}
	if got, code := jsonOut("runs", "rerun", fid, "--from-step", "2"); code != 1 || got["code"] != "step_not_reusable" || !strings.Contains(fmt.Sprint(got["message"]), "retry from step 1 or earlier") {
		t.Errorf("rerun past a hook that never completed = %d %v", code, got)
	}
	if got, code := jsonOut("runs", "rerun", id, "--from-step", "-2"); code != 1 || got["code"] != "invalid_step" {
		t.Errorf("rerun --from-step -2 = %d %v; want refused before sending", code, got)
	}
	// svc hooks resume: the waiting run's hook, by the token runs get shows.
	waiting, _ := jsonOut("runs", "get", done["runId"].(string))
	token := waiting["run"].(map[string]any)["steps"].([]any)[0].(map[string]any)["token"].(string)
	if got, code := jsonOut("hooks", "resume", token, "--payload", "{not json"); code != 1 || got["code"] != "invalid_json" {
		t.Errorf("hooks resume with bad JSON = %d %v; want refused before sending", code, got)
	}
	out, _, code = cli(t, dir, env, "hooks", "resume", token, "--payload", `{"ok":true}`)
	if code != 0 || !strings.Contains(out, "Resumed run "+done["runId"].(string)) {
		t.Errorf("hooks resume = %d %q", code, out)
	}
	if ended, _ := jsonOut("runs", "get", done["runId"].(string), "--wait", "20s"); ended["run"].(map[string]any)["status"] != runCompleted || fmt.Sprint(ended["run"].(map[string]any)["output"]) != "map[ok:true]" {
		t.Errorf("the resumed run = %v", ended["run"])
	}
	if got, code := jsonOut("hooks", "resume", token); code != 1 || got["code"] != "hook_used" {
		t.Errorf("a second resume = %d %v; want hook_used", code, got)
	}
}

// TestDevCorruptJournalStopsBoot: damage before the journal's tail stops
// boot with exit 1, naming the segment and the offset.
func TestDevCorruptJournalStopsBoot(t *testing.T) {
	dir := projectDir(t)
	env := baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk")
	d := startDev(t, dir, env)
	for range 3 {
		var rc startReceipt
		httpJSON(t, "POST", d.url("/api/workflows/ping/start"), "", &rc)
		httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=20s"), nil, nil)
	}
	d.interrupt()
	segs, _ := filepath.Glob(filepath.Join(dir, ".svc", "journal", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no journal segment")
	}
	b, _ := os.ReadFile(segs[0])
	b[20] ^= 0xff // inside the first record's payload
	os.WriteFile(segs[0], b, 0o644)
	_, stderr, code := cli(t, dir, env, "dev", "--port", fmt.Sprint(freePortBase(t)))
	if code != 1 || !strings.Contains(stderr, filepath.Base(segs[0])) || !strings.Contains(stderr, "offset") {
		t.Fatalf("boot on a corrupt journal = exit %d %q; want 1 naming the segment and offset", code, stderr)
	}
}

// TestCLIReachesOnlyItsProject runs svc dev in project A on a port that is
// the default port of project B's environment: B's CLI must not list, start
// or read A's runs (issue 9), not even with A's runtime.json copied into B,
// while A's CLI works. A's start errors keep the runtime's code.
func TestCLIReachesOnlyItsProject(t *testing.T) {
	a, b := projectDir(t), projectDir(t)
	d := startDev(t, a, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-test"))
	bEnv := baseEnv(fmt.Sprintf("SVC_DEV_PORT_OFFSET=%d", d.port-defaultAPIPort))
	verbs := [][]string{{"workflows", "list"}, {"workflows", "start", "greet", "--input", `{"name":"B"}`}, {"runs", "list"}}
	check := func(what, wantInMessage string) {
		t.Helper()
		for _, args := range verbs {
			out, _, code := cli(t, b, bEnv, append([]string{"--json"}, args...)...)
			var env struct{ Error *envelopeError }
			json.Unmarshal([]byte(out), &env)
			if code != 3 || env.Error == nil || env.Error.Code != codeDevNotRunning || !strings.Contains(env.Error.Message, wantInMessage) {
				t.Errorf("%s: svc %q in B = exit %d %s; want exit 3 dev_not_running naming %q", what, args, code, out, wantInMessage)
			}
		}
	}
	check("no runtime.json in B", "no .svc/runtime.json")
	rf, err := os.ReadFile(filepath.Join(a, ".svc", devRuntimeFileName))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, b, ".svc/"+devRuntimeFileName, string(rf))
	check("A's runtime.json copied into B", a)
	if runs, queued := listAllRuns(t, d.payload.EmulatorURL); len(runs)+len(queued) != 0 {
		t.Errorf("B's CLI reached A: A has runs %v queued %v", runs, queued)
	}
	if out, stderr, code := cli(t, a, baseEnv(), "workflows", "list"); code != 0 || !strings.Contains(out, "greet") {
		t.Errorf("workflows list in A = exit %d %q %q; want the list", code, out, stderr)
	}
	// A start the input schema refuses: the envelope keeps the code and
	// the violations; a terminal reads each violation once.
	out, _, code := cli(t, a, baseEnv(), "--json", "workflows", "start", "greet", "--input", `{"x":1}`)
	var env struct{ Error *envelopeError }
	if json.Unmarshal([]byte(out), &env); code != 1 || env.Error == nil || env.Error.Code != "schema_validation" || len(env.Error.Violations) < 2 {
		t.Errorf("schema-invalid start --json = exit %d %s; want exit 1, schema_validation with the violations", code, out)
	}
	_, stderr, code := cli(t, a, baseEnv(), "workflows", "start", "greet", "--input", `{"x":1}`)
	for _, v := range env.Error.Violations {
		if n := strings.Count(stderr, v.Message); code != 1 || n != 1 {
			t.Errorf("schema-invalid start = exit %d, %q printed %d times in %q; want exit 1, once", code, v.Message, n, stderr)
		}
	}
}

// TestEnvPrintsLocalCredentials checks `svc env` (shell exports and JSON)
// against the session, that the route wants the token of runtime.json, and
// that neither the payload nor the logs carry the object-storage secret.
func TestEnvPrintsLocalCredentials(t *testing.T) {
	dir := projectDir(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-test"))
	out, stderr, code := cli(t, dir, baseEnv(), "--json", "env")
	var env struct {
		OK   bool
		Data devEnvOutput
	}
	if err := json.Unmarshal([]byte(out), &env); code != 0 || err != nil || !env.OK {
		t.Fatalf("svc env --json = exit %d %q %q", code, out, stderr)
	}
	got := env.Data.Env
	want := map[string]string{"DATABASE_URL": d.payload.Services.PostgresURL, "S3_ENDPOINT": d.payload.Services.S3Endpoint, "S3_BUCKET": "svc", "S3_REGION": runtimeS3Region}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("svc env %s = %q; want %q", k, got[k], v)
		}
	}
	secret := got["S3_SECRET_ACCESS_KEY"]
	if got["S3_ACCESS_KEY_ID"] == "" || len(secret) < 20 {
		t.Fatalf("svc env keys = %q / %q; want the minted keys", got["S3_ACCESS_KEY_ID"], secret)
	}
	s3Get(t, d.payload.Services.S3Endpoint+"/svc", got["S3_ACCESS_KEY_ID"], secret, http.StatusOK)
	human, _, code := cli(t, dir, baseEnv(), "env")
	for _, k := range devToolEnvVars {
		if code != 0 || !strings.Contains(human, "export "+k+"="+shellWord(got[k])+"\n") {
			t.Errorf("svc env = exit %d %q; want export %s=%s", code, human, k, shellWord(got[k]))
		}
	}
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", d.url("/api/dev/env"), nil)
		req.Header.Set(devTokenHeader, tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), secret) {
			t.Errorf("GET /api/dev/env with token %q = %d %s; want 403 without the secret", tok, resp.StatusCode, body)
		}
	}
	if code := d.interrupt(); code != 0 {
		t.Errorf("SIGINT exit = %d", code)
	}
	raw, _ := json.Marshal(d.payload)
	if strings.Contains(string(raw), secret) || strings.Contains(d.stderr.String(), secret) {
		t.Errorf("the dev payload or the logs carry the object-storage secret")
	}
}

// TestEnvS3KeysFromDotEnv checks that object storage adopts the keys .env
// sets (workflows, svc env and the server agree) and that boot refuses a
// key it cannot accept, naming .env and the variable.
func TestEnvS3KeysFromDotEnv(t *testing.T) {
	dir := projectDir(t)
	dbURL := testPostgresURL(t)
	writeFile(t, dir, ".env", "S3_ACCESS_KEY_ID=AKIADOTENV\nS3_SECRET_ACCESS_KEY=dotenv-secret-0123456789\n")
	writeFile(t, dir, "workflows/keys.workflow.ts", `async function read() { "use step"; return process.env.S3_ACCESS_KEY_ID + ":" + process.env.S3_SECRET_ACCESS_KEY; }
export default async function keys() { "use workflow"; return await read(); }`)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk-test"))
	s3Get(t, d.payload.Services.S3Endpoint+"/svc", "AKIADOTENV", "dotenv-secret-0123456789", http.StatusOK)
	if run := startAndWait(t, d, "keys"); string(run.Output) != `"AKIADOTENV:dotenv-secret-0123456789"` {
		t.Errorf("process.env keys in a step = %s %+v; want those of .env", run.Output, run.Error)
	}
	out, _, _ := cli(t, dir, baseEnv(), "env")
	if !strings.Contains(out, "export S3_ACCESS_KEY_ID=AKIADOTENV\n") || !strings.Contains(out, "export S3_SECRET_ACCESS_KEY=dotenv-secret-0123456789\n") {
		t.Errorf("svc env = %q; want the keys of .env", out)
	}
	d.interrupt()
	writeFile(t, dir, ".env", "S3_ACCESS_KEY_ID=\n")
	_, stderr, code := cli(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk-test"), "dev", "--port", fmt.Sprint(freePortBase(t)))
	if code != 1 || !strings.Contains(stderr, ".env") || !strings.Contains(stderr, "S3_ACCESS_KEY_ID") {
		t.Errorf("dev with an empty S3_ACCESS_KEY_ID in .env = exit %d %q; want exit 1 naming .env and the variable", code, stderr)
	}
}

// s3Get sends a GET signed with the keys to url and checks the status.
func s3Get(t *testing.T, url, access, secret string, want int) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	s3TestSign(req, access, secret, time.Now(), s3TestHash(nil))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("signed GET %s with %s = %d %s; want %d", url, access, resp.StatusCode, body, want)
	}
}

// startAndWait starts workflow name with no input on d and returns the run
// once it ended (or after a wait of 20 s).
func startAndWait(t *testing.T, d *devProcess, name string) runRecord {
	t.Helper()
	var rc startReceipt
	httpJSON(t, "POST", d.url("/api/workflows/"+name+"/start"), "", &rc)
	var got struct{ Run runRecord }
	httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=20s"), nil, &got)
	return got.Run
}

// scaffoldDataPath checks, from outside and with what svc env prints, that
// the starter workflow's run (output: greeting, id, file) wrote its row to
// the project's PostgreSQL (the table auto-migrate made from src/schema.ts)
// and its file to the project's bucket.
func scaffoldDataPath(t *testing.T, dir string, env []string, output any) {
	t.Helper()
	out, _ := output.(map[string]any)
	id, _ := out["id"].(float64)
	file, _ := out["file"].(string)
	if id < 1 || file != fmt.Sprintf("greetings/%d.txt", int(id)) {
		t.Fatalf("greet output = %v; want a row id and its file", output)
	}
	stdout, _, code := cli(t, dir, env, "--json", "env")
	var e struct {
		Data struct{ Env map[string]string } `json:"data"`
	}
	if json.Unmarshal([]byte(stdout), &e); code != 0 || e.Data.Env["DATABASE_URL"] == "" {
		t.Fatalf("svc env = %d %q", code, stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.Data.Env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var name, greeting string
	if err := conn.QueryRow(ctx, "select name, greeting from greetings where id = $1", int(id)).Scan(&name, &greeting); err != nil || greeting != out["greeting"] {
		t.Errorf("greetings row %v = %q %q %v; want the run's greeting", id, name, greeting, err)
	}
	c, err := newStorageClient(storageTarget{Endpoint: e.Data.Env["S3_ENDPOINT"], Bucket: e.Data.Env["S3_BUCKET"], Region: e.Data.Env["S3_REGION"],
		AccessKey: e.Data.Env["S3_ACCESS_KEY_ID"], SecretKey: e.Data.Env["S3_SECRET_ACCESS_KEY"]})
	if err != nil {
		t.Fatal(err)
	}
	body, err := c.get(ctx, file, nil)
	if err != nil {
		t.Fatalf("get %s: %v", file, err)
	}
	defer body.Body.Close()
	b, _ := io.ReadAll(body.Body)
	if string(b) != out["greeting"].(string)+"\n" {
		t.Errorf("%s = %q; want the greeting", file, b)
	}
}
