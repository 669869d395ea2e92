package main

// otel_judge_test.go: the OpenTelemetry Collector (Apache-2.0), an OTLP receiver nobody here
// wrote, built from its Go modules (tools/otelcol, a module of its own) and started on
// loopback with the file exporter, judges svc's trace export: a real `svc dev` exports to it
// and the tests read the spans it wrote back. .ci/run builds it into the cache directory this
// file looks in; elsewhere the first test that needs it builds it there (about 4.5 minutes
// cold on 2 cores).

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// otelColVersion names the collector build tools/otelcol pins (its go.mod).
const otelColVersion = "v0.165.0"

// otelColBuild builds the collector at most once per test process.
var otelColBuild struct {
	once sync.Once
	path string
	err  error
}

// otelColDir is where the collector binary is cached: <user cache dir>/svc-test/otelcol-<version>
// (.ci/run builds into the same place).
func otelColDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "svc-test", "otelcol-"+otelColVersion), nil
}

// otelColBinary returns the path of the collector, building it from tools/otelcol into its
// cache directory if absent. It never skips: a test that cannot reach the judge fails and
// says how to build it.
func otelColBinary(t testing.TB) string {
	t.Helper()
	otelColBuild.once.Do(func() {
		dir, err := otelColDir()
		if err != nil {
			otelColBuild.err = err
			return
		}
		bin := filepath.Join(dir, "otelcol")
		if _, err := os.Stat(bin); err == nil {
			otelColBuild.path = bin
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			otelColBuild.err = err
			return
		}
		src, err := filepath.Abs(filepath.Join("tools", "otelcol"))
		if err != nil {
			otelColBuild.err = err
			return
		}
		// Build beside the final name, then rename: another test process building at the same
		// time never sees a half-written binary.
		tmp := fmt.Sprintf("%s.build-%d", bin, os.Getpid())
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, ".")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			otelColBuild.err = fmt.Errorf("%v\n%s", err, out)
			return
		}
		if err := os.Rename(tmp, bin); err != nil {
			otelColBuild.err = err
			return
		}
		otelColBuild.path = bin
	})
	if otelColBuild.err != nil {
		dir, _ := otelColDir()
		t.Fatalf("the OpenTelemetry Collector the trace tests are judged by is not built: %v\n"+
			"Build it once with `cd tools/otelcol && go build -o %s/otelcol .` (it needs the Go module proxy) and rerun.",
			otelColBuild.err, dir)
	}
	return otelColBuild.path
}

// startOTelCol starts the collector with an OTLP/HTTP receiver on a loopback port and the
// file exporter writing to a fresh file; it returns the receiver's base URL and the file.
func startOTelCol(t testing.TB) (endpoint, spansFile string) {
	t.Helper()
	bin := otelColBinary(t)
	dir := t.TempDir()
	spansFile = filepath.Join(dir, "spans.jsonl")
	var lastErr error
	// A free port may be taken between picking it and the collector binding it: try a few.
	for range 3 {
		port, err := pgTestFreePort()
		if err != nil {
			t.Fatal(err)
		}
		config := filepath.Join(dir, "config.yaml")
		writeFile(t, dir, "config.yaml", fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  file:
    path: %s
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [file]
`, port, spansFile))
		logs := &syncBuffer{}
		cmd := exec.Command(bin, "--config=file:"+config)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the collector: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
		if lastErr = otelColReady(endpoint, exited); lastErr == nil {
			t.Cleanup(stop)
			return endpoint, spansFile
		}
		stop()
		lastErr = fmt.Errorf("%w\n%s", lastErr, logs.String())
	}
	t.Fatalf("the collector did not come up: %v", lastErr)
	return
}

// otelColReady waits (boundedly) until the receiver accepts an empty export.
func otelColReady(endpoint string, exited <-chan error) error {
	var err error
	for range 200 {
		select {
		case werr := <-exited:
			return fmt.Errorf("the collector exited: %v", werr)
		default:
		}
		var resp *http.Response
		resp, err = http.Post(endpoint+"/v1/traces", "application/json", strings.NewReader(`{"resourceSpans":[]}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("empty export answered %s", resp.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// judgedSpan is a span as the collector's file exporter wrote it, with its resource's
// attributes.
type judgedSpan struct {
	TraceID, SpanID, ParentSpanID, Name string
	Kind                                int
	Attrs, Resource                     map[string]string
	Status                              struct{ Code int }
}

// readJudgedSpans reads every span of the collector's file (one OTLP/JSON request a line).
func readJudgedSpans(t testing.TB, file string) []judgedSpan {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	type attr struct {
		Key   string
		Value map[string]any
	}
	flat := func(as []attr) map[string]string {
		m := map[string]string{}
		for _, a := range as {
			for _, v := range a.Value {
				m[a.Key] = fmt.Sprint(v)
			}
		}
		return m
	}
	var out []judgedSpan
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var line struct {
			ResourceSpans []struct {
				Resource   struct{ Attributes []attr }
				ScopeSpans []struct {
					Spans []struct {
						TraceID, SpanID, ParentSpanID, Name string
						Kind                                int
						Attributes                          []attr
						Status                              struct{ Code int }
					}
				}
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("the collector's file has a line that is not OTLP/JSON: %v: %.200s", err, sc.Bytes())
		}
		for _, rs := range line.ResourceSpans {
			res := flat(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, judgedSpan{TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Name: s.Name,
						Kind: s.Kind, Attrs: flat(s.Attributes), Resource: res, Status: s.Status})
				}
			}
		}
	}
	return out
}

// TestOTelTraceTree: svc dev exporting to the collector. A start carrying a traceparent runs
// a workflow with a step that fetches (sending its traceparent on), a sleep, a hook wait and
// a child run whose steps use sql and storage; the collector's file then holds one trace (the
// caller's) whose tree is the request's span, the run, its step attempt with the fetch under
// it, the sleep, the hook wait and the child run with its steps and their calls. A chat turn
// carrying a traceparent is, under its request's span, the turn with its model calls (GenAI
// attributes, token usage) and its tool call; so is a run started by MCP's start_workflow. A run
// started
// without a traceparent, interrupted by a restart of svc dev during its sleep, is one trace
// across both processes, whose id is the run's traceId.
func TestOTelTraceTree(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	endpoint, spansFile := startOTelCol(t)
	var mu sync.Mutex
	var received []string // traceparent headers the fetch target got
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("traceparent"))
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer target.Close()

	dir := projectDir(t)
	writeFile(t, dir, "workflows/traced.workflow.ts", `import { sleep, createHook, workflows } from "svc";
async function call(url: string) { "use step"; const r = await fetch(url); return r.status; }
export default async function traced(input: { url: string }) {
  "use workflow";
  await call(input.url);
  await sleep("300ms");
  const hook = createHook<{ ok: boolean }>();
  await hook;
  const child = await workflows.startAndWait("greet", { name: "Ada" });
  return child.greeting;
}`)
	writeFile(t, dir, "workflows/across.workflow.ts", `import { sleep } from "svc";
async function before() { "use step"; return 1; }
async function after() { "use step"; return 2; }
export default async function across() { "use workflow"; await before(); await sleep("4s"); return await after(); }`)
	writeFile(t, dir, "deep-agents/helper/index.ts", agentTestSource)
	fake := newFakeProvider(t)
	env := baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint,
		"OTEL_SERVICE_NAME=shop", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=judge", "OTEL_EXPORTER_OTLP_HEADERS=x-team=blue")
	d := startDev(t, dir, env)

	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	// A webhook-style URL: secrets in its path and query (issue 36, item 12).
	const webhookPath, webhookQuery = "/services/T0123ABCD/xoxbsecrettokenvalue1234", "?sig=s3cr3tsig"
	body, _ := json.Marshal(map[string]string{"url": target.URL + webhookPath + webhookQuery})
	req, _ := http.NewRequest(http.MethodPost, d.url("/api/workflows/traced/start"), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rc startReceipt
	json.NewDecoder(resp.Body).Decode(&rc)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || rc.RunID == "" {
		t.Fatalf("start = %d %+v", resp.StatusCode, rc)
	}
	// A chat turn carrying a traceparent: the model calls the tool add, then answers.
	const chatTrace, chatSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	chat := newPgFaultClient(t, dir, d.payload.EmulatorURL)
	if st, out := chat.post("/openai/v1/chat/completions", wiresOpenAIBody("helper", `call add {"a":2,"b":3}`, false),
		map[string]string{"Authorization": "Bearer " + chat.key, "traceparent": "00-" + chatTrace + "-" + chatSpan + "-01"}); st != http.StatusOK {
		t.Fatalf("chat turn = %d %v", st, out)
	}

	// MCP's start_workflow carrying a traceparent.
	const mcpTrace, mcpSpan = "5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13"
	if st, out := chat.post("/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_workflow","arguments":{"name":"ping","input":{}}}}`,
		map[string]string{"Authorization": "Bearer " + chat.key, "traceparent": "00-" + mcpTrace + "-" + mcpSpan + "-01"}); st != http.StatusOK || out["error"] != nil {
		t.Fatalf("MCP start_workflow = %d %v", st, out)
	}

	var across startReceipt
	if code := httpJSON(t, "POST", d.url("/api/workflows/across/start"), map[string]any{}, &across); code != http.StatusAccepted {
		t.Fatalf("start across = %d", code)
	}

	var token string
	eventually(t, 30*time.Second, "the run waiting on its hook", func() bool {
		var got struct{ Run runRecord }
		httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID), nil, &got)
		for _, c := range got.Run.Steps {
			if c.Kind == callHook && c.Token != "" {
				token = c.Token
			}
		}
		return token != ""
	})
	if code := httpJSON(t, "POST", d.url("/api/hooks/"+token), map[string]bool{"ok": true}, nil); code/100 != 2 {
		t.Fatalf("resume hook = %d", code)
	}
	var ended struct{ Run runRecord }
	if httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=30s"), nil, &ended); ended.Run.Status != runCompleted {
		t.Fatalf("run ended %s: %+v", ended.Run.Status, ended.Run.Error)
	}

	// Restart svc dev while across sleeps: its run span comes from the second process.
	eventually(t, 30*time.Second, "across sleeping", func() bool {
		var r struct{ Run runRecord }
		httpJSON(t, "GET", d.url("/api/runs/"+across.RunID), nil, &r)
		return r.Run.Status == runWaiting
	})
	if code := d.interrupt(); code != 0 {
		t.Fatalf("svc dev exited %d on SIGINT\n%s", code, d.stderr.String())
	}
	d = startDev(t, dir, env)
	var acrossEnded struct{ Run runRecord }
	if httpJSON(t, "GET", d.url("/api/runs/"+across.RunID+"?wait=30s"), nil, &acrossEnded); acrossEnded.Run.Status != runCompleted {
		t.Fatalf("across ended %s after the restart", acrossEnded.Run.Status)
	}

	var spans []judgedSpan
	byName := map[string][]judgedSpan{}
	eventually(t, 30*time.Second, "the collector writing both run spans", func() bool {
		spans = readJudgedSpans(t, spansFile)
		byName = map[string][]judgedSpan{}
		for _, s := range spans {
			byName[s.Name] = append(byName[s.Name], s)
		}
		return len(byName["workflow traced"]) > 0 && len(byName["workflow greet"]) > 0 && len(byName["workflow across"]) > 0 &&
			len(byName["invoke_agent helper"]) > 0 && len(byName["workflow ping"]) > 0
	})
	// pick returns the one span named name that keep accepts (nil: any).
	pick := func(name string, keep func(judgedSpan) bool) judgedSpan {
		t.Helper()
		var found []judgedSpan
		for _, s := range byName[name] {
			if keep == nil || keep(s) {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name)
			}
			t.Fatalf("%d spans named %q; want 1 (spans: %s)", len(found), name, strings.Join(names, ", "))
		}
		return found[0]
	}
	one := func(name string) judgedSpan { t.Helper(); return pick(name, nil) }
	ofRun := func(id string) func(judgedSpan) bool {
		return func(s judgedSpan) bool { return s.Attrs["svc.run.id"] == id }
	}
	childOf := func(s, parent judgedSpan) {
		t.Helper()
		if s.TraceID != parent.TraceID || s.ParentSpanID != parent.SpanID {
			t.Errorf("span %q: trace %s parent %s; want the child of %q (trace %s span %s)", s.Name, s.TraceID, s.ParentSpanID, parent.Name, parent.TraceID, parent.SpanID)
		}
	}

	server := pick("POST /api/workflows/{name}/start", func(s judgedSpan) bool { return s.TraceID == callerTrace })
	if server.TraceID != callerTrace || server.ParentSpanID != callerSpan || server.Kind != otelKindServer ||
		server.Attrs["http.response.status_code"] != "202" || server.Attrs["http.route"] != "/api/workflows/{name}/start" {
		t.Errorf("the start request's span: %+v; want the server child of the caller's traceparent, answered 202", server)
	}
	if server.Resource["service.name"] != "shop" || server.Resource["deployment.environment"] != "judge" {
		t.Errorf("resource %v; want OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES", server.Resource)
	}
	run := one("workflow traced")
	childOf(run, server)
	if run.Attrs["svc.run.id"] != rc.RunID || run.Attrs["svc.run.status"] != runCompleted || run.Attrs["svc.run.trace_id"] != rc.WorldRunID {
		t.Errorf("run span attributes %v", run.Attrs)
	}
	step := one("step call")
	childOf(step, run)
	if step.Attrs["svc.step.attempt"] != "1" || step.Attrs["svc.run.id"] != rc.RunID {
		t.Errorf("step span attributes %v", step.Attrs)
	}
	fetch := one("GET")
	childOf(fetch, step)
	if fetch.Kind != otelKindClient || fetch.Attrs["http.response.status_code"] != "200" || fetch.Attrs["url.full"] != target.URL+"/services/REDACTED/REDACTED?sig=REDACTED" {
		t.Errorf("fetch span %+v; want url.full with the path's secrets and the query's values REDACTED", fetch)
	}
	hookSpan := one("POST /api/hooks/{token}")
	if hookSpan.Attrs["url.path"] != "/api/hooks/REDACTED" || hookSpan.Attrs["http.route"] != "/api/hooks/{token}" {
		t.Errorf("the hook's server span %v; want url.path /api/hooks/REDACTED", hookSpan.Attrs)
	}
	if raw, err := os.ReadFile(spansFile); err != nil || strings.Contains(string(raw), token) || strings.Contains(string(raw), "xoxbsecret") || strings.Contains(string(raw), "s3cr3tsig") {
		t.Errorf("the exported spans hold a hook token or a URL's secret (read err %v)", err)
	}
	mu.Lock()
	if want := "00-" + callerTrace + "-" + fetch.SpanID + "-01"; len(received) != 1 || received[0] != want {
		t.Errorf("the fetch target received traceparent %q; want %q", received, want)
	}
	mu.Unlock()
	childOf(pick("sleep", ofRun(rc.RunID)), run)
	childOf(pick("hook", ofRun(rc.RunID)), run)
	child := one("workflow greet")
	childOf(child, run)
	if child.Attrs["svc.run.parent_id"] != rc.RunID {
		t.Errorf("child run attributes %v", child.Attrs)
	}
	childOf(one("step compose"), child)
	save := one("step save")
	childOf(save, child)
	insert := one("INSERT")
	childOf(insert, save)
	if insert.Attrs["db.system.name"] != "postgresql" || !strings.Contains(insert.Attrs["db.query.text"], "insert into greetings") {
		t.Errorf("sql span attributes %v", insert.Attrs)
	}
	childOf(one("storage put"), save)

	wire := one("POST /openai/v1/chat/completions")
	if wire.TraceID != chatTrace || wire.ParentSpanID != chatSpan {
		t.Errorf("the chat request's span: trace %s parent %s; want the child of the caller's traceparent", wire.TraceID, wire.ParentSpanID)
	}
	turn := one("invoke_agent helper")
	childOf(turn, wire)
	if turn.Attrs["gen_ai.agent.name"] != "helper" || turn.Attrs["svc.agent.wire"] != wireOpenAI {
		t.Errorf("turn span attributes %v", turn.Attrs)
	}
	var models []judgedSpan
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "chat") {
			models = append(models, s)
		}
	}
	if len(models) != 2 {
		t.Fatalf("%d model call spans; want 2 (the tool call, then the answer)", len(models))
	}
	for _, m := range models {
		childOf(m, turn)
		if m.Kind != otelKindClient || m.Attrs["gen_ai.system"] != providerOpenAI || m.Attrs["gen_ai.request.model"] == "" ||
			m.Attrs["gen_ai.usage.input_tokens"] == "" || m.Attrs["gen_ai.usage.input_tokens"] == "0" || m.Attrs["gen_ai.usage.output_tokens"] == "" {
			t.Errorf("model call span %+v; want the GenAI attributes with token usage", m)
		}
	}
	tool := one("execute_tool add")
	childOf(tool, turn)
	if tool.Attrs["gen_ai.tool.name"] != "add" || tool.Attrs["gen_ai.tool.call.id"] == "" {
		t.Errorf("tool call span attributes %v", tool.Attrs)
	}

	mcp := pick("POST /mcp", func(s judgedSpan) bool { return s.TraceID == mcpTrace })
	if mcp.ParentSpanID != mcpSpan {
		t.Errorf("the MCP request's span has parent %s; want the caller's %s", mcp.ParentSpanID, mcpSpan)
	}
	childOf(one("workflow ping"), mcp)

	acrossRun := one("workflow across")
	if want := otelTraceOf(across.WorldRunID); acrossRun.TraceID != hex.EncodeToString(want[:]) || acrossRun.ParentSpanID != "" {
		t.Errorf("across: trace %s parent %q; want the root of trace %x (its traceId %s)", acrossRun.TraceID, acrossRun.ParentSpanID, want, across.WorldRunID)
	}
	childOf(one("step before"), acrossRun) // exported by the first process
	childOf(one("step after"), acrossRun)  // by the second
}

// TestOTelCollectorDownDoesNotBreakRuns: svc dev pointed at a collector that is not there
// runs a workflow to its end as usual.
func TestOTelCollectorDownDoesNotBreakRuns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	dir := projectDir(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk", "OTEL_EXPORTER_OTLP_ENDPOINT="+down))
	var got map[string]any
	if code := httpJSON(t, "POST", d.url("/api/workflows/greet/start?wait=30s"), map[string]string{"name": "Ada"}, &got); code != http.StatusOK {
		t.Fatalf("start?wait with the collector down = %d %v", code, got)
	}
	if run, _ := got["run"].(map[string]any); run["status"] != runCompleted {
		t.Fatalf("run with the collector down: %v", got)
	}
}
