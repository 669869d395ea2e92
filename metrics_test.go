package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
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

// metricsPromtool returns promtool (Debian's prometheus package), the
// judge of the exposition. Without it the test is skipped, but fails in CI
// (CI set), where .ci/run installs it.
func metricsPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed; .ci/run installs Debian's prometheus package")
		}
		t.Skip("promtool is not installed (apt-get install prometheus): nothing here may judge the exposition")
	}
	return p
}

// metricsPromtoolCheck fails the test unless `promtool check metrics`
// accepts body, lint included.
func metricsPromtoolCheck(t *testing.T, promtool, body string) {
	t.Helper()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s\n--- the exposition:\n%s", err, out, body)
	}
}

// metricsParse reads an exposition's samples: series (name and labels as
// written) → value.
func metricsParse(t testing.TB, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("sample line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsExposition writes families with hostile label values and
// checks the text: escaping, cumulative buckets, HELP and TYPE, and
// promtool's verdict.
func TestMetricsExposition(t *testing.T) {
	promtool := metricsPromtool(t)
	c := newMetricsCounterVec("test_events_total", "Events.\nSecond line with a \\ backslash.", "name")
	c.with(`a "quoted" \ value` + "\nwith a newline").inc()
	c.with("plain").inc()
	c.with("plain").inc()
	h := newMetricsHistogramVec("test_wait_seconds", "Waits.", []float64{0.1, 1}, "kind")
	for _, v := range []float64{0.05, 0.1, 0.5, 3} {
		h.with("x").observe(v)
	}
	g := newMetricsGaugeVec("test_open", "Open things.")
	g.with().add(2)
	g.with().add(-1)
	var b strings.Builder
	if err := metricsExpose(&b, []metricsWriter{c, h, g}, nil); err != nil {
		t.Fatal(err)
	}
	body := b.String()
	for _, want := range []string{
		"# HELP test_events_total Events.\\nSecond line with a \\\\ backslash.\n# TYPE test_events_total counter\n",
		`test_events_total{name="a \"quoted\" \\ value\nwith a newline"} 1` + "\n",
		`test_events_total{name="plain"} 2` + "\n",
		`test_wait_seconds_bucket{kind="x",le="0.1"} 2` + "\n",
		`test_wait_seconds_bucket{kind="x",le="1"} 3` + "\n",
		`test_wait_seconds_bucket{kind="x",le="+Inf"} 4` + "\n",
		`test_wait_seconds_sum{kind="x"} 3.65` + "\n",
		`test_wait_seconds_count{kind="x"} 4` + "\n",
		"# TYPE test_open gauge\ntest_open 1\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("exposition lacks %q:\n%s", want, body)
		}
	}
	metricsPromtoolCheck(t, promtool, body)
}

// TestMetricsDev drives a real svc dev, on the file journal and on the
// PostgreSQL engine: runs of a workflow by HTTP and by the CLI, a step
// that fails every attempt, a serial workflow with starts queued behind
// its active run, a chat turn on the OpenAI wire against the fake
// provider and an AG-UI stream held open. GET /metrics with the dev key
// then passes promtool, and its values are what those actions imply.
func TestMetricsDev(t *testing.T) {
	promtool := metricsPromtool(t)
	for _, engine := range []string{engineKindFile, engineKindPostgres} {
		t.Run(engine, func(t *testing.T) { metricsDevScenario(t, promtool, engine) })
	}
}

// metricsDevScenario is TestMetricsDev on the engine store named engine.
func metricsDevScenario(t *testing.T, promtool, engine string) {
	dir := projectDir(t)
	writeFile(t, dir, "workflows/two.workflow.ts", `async function one() { "use step"; return 1; }
async function two(n: number) { "use step"; return n + 1; }
export default async function twoSteps() { "use workflow"; return await two(await one()); }`)
	writeFile(t, dir, "workflows/boom.workflow.ts", `async function explode() { "use step"; throw new Error("boom"); }
export default async function boom() { "use workflow"; return await explode(); }`)
	writeFile(t, dir, "workflows/slow.workflow.ts", `import { sleep } from "svc";
export const serial = true;
export default async function slow() { "use workflow"; await sleep("1h"); return 1; }`)
	fake := newFakeProvider(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake",
		"SVC_ENGINE="+engine))
	keyFile, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyFile))

	const httpRuns = 3
	var ids []string
	for range httpRuns {
		var rc startReceipt
		if code := httpJSONAuth(t, "POST", d.url("/api/workflows/two/start"), key, "{}", &rc); code != http.StatusAccepted || rc.RunID == "" {
			t.Fatalf("start two = %d %+v", code, rc)
		}
		ids = append(ids, rc.RunID)
	}
	if out, stderr, code := cli(t, dir, baseEnv(), "workflows", "start", "two", "--wait"); code != 0 {
		t.Fatalf("svc workflows start two --wait = %d %q %q", code, out, stderr)
	}
	var boom startReceipt
	httpJSONAuth(t, "POST", d.url("/api/workflows/boom/start"), key, "{}", &boom)
	ids = append(ids, boom.RunID)
	for range 3 { // one active, two queued behind it
		httpJSONAuth(t, "POST", d.url("/api/workflows/slow/start"), key, "{}", nil)
	}
	for _, id := range ids {
		var got struct{ Run runRecord }
		if code := httpJSONAuth(t, "GET", d.url("/api/runs/"+id+"?wait=30s"), key, nil, &got); code != 200 || !terminal(got.Run.Status) {
			t.Fatalf("run %s = %d %s; want it ended", id, code, got.Run.Status)
		}
	}
	var chat map[string]any
	if code := httpJSONAuth(t, "POST", d.url("/openai/v1/chat/completions"), key,
		`{"model":"assistant","messages":[{"role":"user","content":"hello"}]}`, &chat); code != 200 {
		t.Fatalf("chat turn = %d %v", code, chat)
	}
	// An AG-UI stream the fake provider never answers stays open.
	ctx, hangUp := context.WithCancel(t.Context())
	defer hangUp()
	req, _ := http.NewRequestWithContext(ctx, "POST", d.url("/agui/assistant"),
		strings.NewReader(`{"threadId":"","runId":"r","messages":[{"id":"m1","role":"user","content":"hang"}],"tools":[],"context":[],"state":{},"forwardedProps":{}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if first, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(first, "RUN_STARTED") {
		t.Fatalf("AG-UI stream began with %q, %v", first, err)
	}

	scrape := func() (string, map[string]float64) {
		t.Helper()
		req, _ := http.NewRequest("GET", d.url("/metrics"), nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
			t.Fatalf("GET /metrics = %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		return string(b), metricsParse(t, string(b))
	}
	body, got := scrape()
	metricsPromtoolCheck(t, promtool, body)
	want := map[string]float64{
		`svc_runs_started_total{workflow="two",trigger="http"}`:                 httpRuns,
		`svc_runs_started_total{workflow="two",trigger="cli"}`:                  1,
		`svc_runs_ended_total{workflow="two",status="completed"}`:               httpRuns + 1,
		`svc_step_attempts_total{workflow="two",outcome="completed"}`:           2 * (httpRuns + 1),
		`svc_step_duration_seconds_count{workflow="two"}`:                       2 * (httpRuns + 1),
		`svc_runs_started_total{workflow="boom",trigger="http"}`:                1,
		`svc_runs_ended_total{workflow="boom",status="failed"}`:                 1,
		`svc_step_attempts_total{workflow="boom",outcome="retried"}`:            defaultMaxAttempts - 1,
		`svc_step_attempts_total{workflow="boom",outcome="failed"}`:             1,
		`svc_step_duration_seconds_bucket{workflow="boom",le="+Inf"}`:           defaultMaxAttempts,
		`svc_runs_started_total{workflow="slow",trigger="http"}`:                1,
		`svc_queue_depth{workflow="slow"}`:                                      2,
		`svc_runs_active{status="queued"}`:                                      2,
		`svc_chat_requests_total{wire="openai",code="200"}`:                     1,
		`svc_chat_request_duration_seconds_count{wire="openai"}`:                1,
		`svc_sse_streams_open`:                                                  1,
		`svc_runs_ended_total{workflow="slow",status="completed"}`:              -1, // absent
		`svc_runs_started_total{workflow="assistant (openai)",trigger="agent"}`: -1,
	}
	switch engine {
	case engineKindFile:
		want[`svc_engine_lease_state{state="held"}`] = -1
	case engineKindPostgres:
		want[`svc_engine_lease_state{state="held"}`] = 1
		want[`svc_engine_partitions_held`] = enginePartitionsDefault // alone: every partition
	}
	for series, w := range want {
		v, ok := got[series]
		switch {
		case w < 0 && ok:
			t.Errorf("%s = %v; want it absent", series, v)
		case w >= 0 && (!ok || v != w):
			t.Errorf("%s = %v (present %v); want %v", series, v, ok, w)
		}
	}
	// The store's batches: every event journaled rode one, each timed.
	batches, records := "svc_journal_batch_records", "svc_journal_fsync_seconds_count"
	if engine == engineKindPostgres {
		batches, records = "svc_engine_pg_batch_records", "svc_engine_pg_commit_seconds_count"
	}
	if n, sum := got[batches+"_count"], got[batches+"_sum"]; n < 1 || sum < n || got[records] != n {
		t.Errorf("%s: %v batches of %v records, %s %v; want at least one batch, each timed", batches, n, sum, records, got[records])
	}
	if engine == engineKindPostgres && got["svc_engine_lease_epoch"] < 1 {
		t.Errorf("svc_engine_lease_epoch = %v; want the lease's epoch", got["svc_engine_lease_epoch"])
	}

	hangUp()
	eventually(t, 10*time.Second, "the AG-UI stream counted closed", func() bool {
		_, got := scrape()
		return got["svc_sse_streams_open"] == 0 && got[`svc_chat_request_duration_seconds_count{wire="agui"}`] == 1
	})
	body, _ = scrape()
	metricsPromtoolCheck(t, promtool, body)
}

// TestMetricsTunnel: requests the tunnel relays are counted by status,
// and the developer's own requests are not.
func TestMetricsTunnel(t *testing.T) {
	promtool := metricsPromtool(t)
	srv, err := newTestServer(&runtimeCore{log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	relayed := tunnelHandler(srv, "127.0.0.1:4242")
	for _, tt := range []struct {
		h    http.Handler
		path string
	}{{relayed, "/api/contract"}, {relayed, "/api/contract"}, {relayed, "/nope/x"}, {srv, "/api/contract"}} {
		req := httptest.NewRequest("GET", tt.path, nil)
		req.Host = "127.0.0.1:4242"
		tt.h.ServeHTTP(httptest.NewRecorder(), req)
	}
	var b strings.Builder
	if err := srv.rt.metrics.write(&b, metricsScrape{}); err != nil {
		t.Fatal(err)
	}
	got := metricsParse(t, b.String())
	if got[`svc_tunnel_requests_total{code="200"}`] != 2 || got[`svc_tunnel_requests_total{code="404"}`] != 1 || len(got) != 3 {
		t.Errorf("tunnel requests counted: %v; want 2 answered 200 and 1 answered 404, and no stream open", got)
	}
	metricsPromtoolCheck(t, promtool, b.String())
}
