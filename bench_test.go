package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks of the whole product, run against the real binary over HTTP:
//
//	go test -run '^$' -bench 'Boot|Workflow' -benchtime=1x .
//
// They print figures and never fail on timing.

// percentile returns the p-th percentile (0-100) of sorted durations in ms.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return float64(sorted[i].Microseconds()) / 1000
}

// benchProject writes a project of nWorkflows workflows and nAgents agents
// in all: the scaffold's two workflows and one agent, the W3 workflow of
// 1000 sequential steps, and generated 3-step workflows and agents.
func benchProject(b *testing.B, nWorkflows, nAgents int) string {
	dir := projectDir(b)
	for i := range nWorkflows - 3 {
		writeFile(b, dir, fmt.Sprintf("workflows/w%02d.workflow.ts", i), fmt.Sprintf(`
export const inputSchema = { type: "object", properties: { n: { type: "integer" } } };
async function one(n: number) { "use step"; return n + 1; }
async function two(n: number) { "use step"; return n * 2; }
async function three(n: number) { "use step"; return n - 1; }
export default async function w%02d(input: { n?: number }) {
  "use workflow";
  return { v: await three(await two(await one(input.n ?? 0))) };
}`, i))
	}
	for i := range nAgents - 1 {
		writeFile(b, dir, fmt.Sprintf("deep-agents/a%02d/index.ts", i), `
import { defineAgent, tool } from "svc";
export default defineAgent({ instructions: "bench", tools: { t: tool({ description: "t", parameters: { type: "object" }, execute: async () => 1 }) } });`)
	}
	writeFile(b, dir, "workflows/long.workflow.ts", `
async function step(i: number) { "use step"; return i; }
export default async function long(input: { steps: number }) {
  "use workflow";
  let sum = 0;
  for (let i = 0; i < input.steps; i++) sum += await step(i);
  return { sum };
}`)
	return dir
}

// peakRSS returns the peak resident set of a running process in MiB.
func peakRSS(pid int) float64 { return procStatusMiB(pid, "VmHWM:") }

// procStatusMiB reads a kB field of /proc/<pid>/status, in MiB.
func procStatusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, field)), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkBoot measures `svc dev` to its JSON line for 50 workflows and 10
// agents: the first boot (initdb of the local PostgreSQL included) and warm
// boots, and the peak memory of the svc process.
func BenchmarkBoot(b *testing.B) {
	dir := benchProject(b, 50, 10)
	env := baseEnv("OPENAI_API_KEY=sk-bench")
	bootOnce := func() (time.Duration, float64) {
		start := time.Now()
		d := startDevProcess(b, dir, freePortBase(b), env)
		d.payload = d.nextPayload(120 * time.Second)
		took := time.Since(start)
		if len(d.payload.DeepAgents) != 10 {
			b.Fatalf("agents = %v", d.payload.DeepAgents)
		}
		rss := peakRSS(d.cmd.Process.Pid)
		d.cmd.Process.Signal(syscall.SIGINT)
		<-d.exited
		return took, rss
	}
	first, rss := bootOnce()
	var warm []time.Duration
	for range max(b.N, 5) {
		t, r := bootOnce()
		warm = append(warm, t)
		rss = max(rss, r)
	}
	sort.Slice(warm, func(i, k int) bool { return warm[i] < warm[k] })
	b.ReportMetric(float64(first.Milliseconds()), "first-boot-ms")
	b.ReportMetric(percentile(warm, 50), "warm-boot-p50-ms")
	b.ReportMetric(rss, "peak-rss-MiB")
}

// BenchmarkWorkflows runs the durable-workflow workloads against `svc dev`
// on the file journal, over HTTP: W1 100 sequential start-and-await runs of
// a 3-step workflow, each one request (POST start ?wait=; W1-2req, a start
// and a long-polled GET); W2 1000 runs from 32 concurrent clients, and the
// svc process's CPU per run (from /proc); W3 one run of 1000 sequential
// steps.
func BenchmarkWorkflows(b *testing.B) { benchWorkflows(b) }

// BenchmarkWorkflowsTraced is BenchmarkWorkflows with trace export on, to
// the OpenTelemetry Collector (otel_judge_test.go): the cost of tracing.
func BenchmarkWorkflowsTraced(b *testing.B) {
	endpoint, _ := startOTelCol(b)
	benchWorkflows(b, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint)
}

// BenchmarkWorkflowsProfile is BenchmarkWorkflows's W2 (and W1 in one
// request) against `svc dev` running in the test process, for its
// profiles; the CPU per run counts the clients' too:
//
//	go test -run '^$' -bench WorkflowsProfile -benchtime=1x -cpuprofile cpu.out -memprofile mem.out .
//	go tool pprof -top -cum svc.test cpu.out
func BenchmarkWorkflowsProfile(b *testing.B) {
	url := benchDevInProcess(b, benchProject(b, 4, 1), "http://127.0.0.1:9/v1")
	w := newBenchWorkflowClient(url)
	benchW2(b, w.startAndWait) // warm: connections, VMs, the journal's files
	b.ResetTimer()
	for range b.N {
		benchWorkflowLoad(b, w, os.Getpid())
	}
}

// benchWorkflowClient drives W1-W3 over HTTP against one svc dev.
type benchWorkflowClient struct {
	base   string
	client *http.Client
	key    string // the dev key sent with every request; "": none (the owner check admits the client)
}

// newBenchWorkflowClient is a client of the svc dev at base (its URL).
func newBenchWorkflowClient(base string) *benchWorkflowClient {
	return &benchWorkflowClient{base: base, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// startAndWait starts wf with input and waits for its end in a long-polled
// GET: two requests.
func (w *benchWorkflowClient) startAndWait(wf, input string) error {
	resp, err := w.do("POST", "/api/workflows/"+wf+"/start", input)
	if err != nil {
		return err
	}
	var rc startReceipt
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(buf.Bytes(), &rc); err != nil || rc.RunID == "" {
		return fmt.Errorf("start: %s", buf.String())
	}
	resp, err = w.do("GET", "/api/runs/"+rc.RunID+"?wait=60s", "")
	if err != nil {
		return err
	}
	buf.Reset()
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(buf.String(), `"status":"completed"`) {
		return fmt.Errorf("run did not complete: %.300s", buf.String())
	}
	return nil
}

// startSync starts wf with input and waits for its end in the same
// request (POST start ?wait=).
func (w *benchWorkflowClient) startSync(wf, input string) error {
	resp, err := w.do("POST", "/api/workflows/"+wf+"/start?wait=60s", input)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"status":"completed"`)) {
		return fmt.Errorf("start?wait: %d %.300s", resp.StatusCode, body)
	}
	return nil
}

// do sends a request, with the dev key when w has one.
func (w *benchWorkflowClient) do(method, path, body string) (*http.Response, error) {
	req, err := http.NewRequest(method, w.base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if w.key != "" {
		req.Header.Set("Authorization", "Bearer "+w.key)
	}
	return w.client.Do(req)
}

// benchW1Floor reports W1's floor on this machine: two fdatasyncs of a
// record into preallocated blocks on the disk the journal is on (dir), and
// one HTTP round trip to the server (GET /api/workflows, the catalog in
// memory, 200 times); p50s.
func benchW1Floor(b *testing.B, w *benchWorkflowClient, dir string) {
	f, err := os.CreateTemp(dir, "floor")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := journalPreallocate(f, 0, journalPreallocStep); err != nil {
		b.Logf("no preallocation (%v): the floor's fdatasyncs extend the file", err)
	}
	rec := make([]byte, journalBenchRecordSize)
	var syncs, trips []time.Duration
	for i := range 200 {
		t0 := time.Now()
		if _, err := f.WriteAt(rec, int64(i*len(rec))); err != nil {
			b.Fatal(err)
		}
		if err := journalFdatasync(f); err != nil {
			b.Fatal(err)
		}
		syncs = append(syncs, time.Since(t0))
		t0 = time.Now()
		resp, err := w.do("GET", "/api/workflows", "")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		trips = append(trips, time.Since(t0))
	}
	sort.Slice(syncs, func(i, k int) bool { return syncs[i] < syncs[k] })
	sort.Slice(trips, func(i, k int) bool { return trips[i] < trips[k] })
	b.ReportMetric(percentile(syncs, 50), "fdatasync-p50-ms")
	b.ReportMetric(percentile(trips, 50), "round-trip-p50-ms")
	b.ReportMetric(2*percentile(syncs, 50)+percentile(trips, 50), "W1-floor-ms")
}

// benchW1Way is one way of starting and awaiting a run, named for the
// figures it reports.
type benchW1Way struct {
	name         string
	startAndWait func(wf, input string) error
}

// benchW1 runs W1 each way: 100 sequential runs of w00, the ways taking
// turns run by run (whoever goes first alternates), so that each sees the
// same machine (a history still archiving the last W2, a GC); it reports
// p50 and p99 of each as name-p50-ms and name-p99-ms.
func benchW1(b *testing.B, ways ...benchW1Way) {
	lat := make([][]time.Duration, len(ways))
	for i := range 100 {
		for k := range ways {
			way := (k + i) % len(ways)
			t0 := time.Now()
			if err := ways[way].startAndWait("w00", `{"n":1}`); err != nil {
				b.Fatal(err)
			}
			lat[way] = append(lat[way], time.Since(t0))
		}
	}
	for k, way := range ways {
		sort.Slice(lat[k], func(i, j int) bool { return lat[k][i] < lat[k][j] })
		b.ReportMetric(percentile(lat[k], 50), way.name+"-p50-ms")
		b.ReportMetric(percentile(lat[k], 99), way.name+"-p99-ms")
	}
}

// benchWorkflowLoad runs W1 both ways (interleaved) and W2 through w, and reports W2's
// runs/s and the CPU per run of process pid.
func benchWorkflowLoad(b *testing.B, w *benchWorkflowClient, pid int) {
	benchW1(b, benchW1Way{"W1", w.startSync}, benchW1Way{"W1-2req", w.startAndWait})
	if pid == os.Getpid() {
		benchW2Measured(b, w.startAndWait)
		return
	}
	cpu0 := procCPU(pid, false)
	t0 := time.Now()
	benchW2(b, w.startAndWait)
	el := time.Since(t0).Seconds()
	b.ReportMetric(float64((procCPU(pid, false)-cpu0).Microseconds())/1000, "W2-cpu-µs/run")
	b.ReportMetric(1000/el, "W2-runs/s")
	b.ReportMetric(3000/el, "W2-steps/s")
}

// benchW2Measured runs W2 against an engine in this process and reports
// runs/s, the process's CPU per run and its heap allocations per run (the
// one figure a loaded machine does not move).
func benchW2Measured(b *testing.B, startAndWait func(wf, input string) error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := procCPU(os.Getpid(), false)
	t0 := time.Now()
	benchW2(b, startAndWait)
	el := time.Since(t0).Seconds()
	cpu := procCPU(os.Getpid(), false) - cpu0
	runtime.ReadMemStats(&m1)
	b.ReportMetric(1000/el, "W2-runs/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000, "W2-cpu-µs/run")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/1000, "W2-allocs/run")
}

// benchWorkflows runs W1-W3 over HTTP against svc dev with env added,
// keyless (the owner check admits the client) and with the dev key, and
// reports W1's floor beside them.
func benchWorkflows(b *testing.B, env ...string) {
	dir := benchProject(b, 4, 1)
	d := startDev(b, dir, baseEnv(append([]string{"SVC_DATABASE_URL=" + testPostgresURL(b), "OPENAI_API_KEY=sk-bench"}, env...)...))
	keyless := newBenchWorkflowClient(d.url(""))
	keyed := newBenchWorkflowClient(d.url(""))
	keyRaw, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		b.Fatal(err)
	}
	keyed.key = strings.TrimSpace(string(keyRaw))
	b.Run("floor", func(b *testing.B) { benchW1Floor(b, keyless, filepath.Join(dir, ".svc")) })
	b.Run("keyless", func(b *testing.B) { benchWorkflowsOn(b, keyless, d) })
	b.Run("keyed", func(b *testing.B) { benchWorkflowsOn(b, keyed, d) })
}

// benchWorkflowsOn is benchWorkflows's W1-W3 through w.
func benchWorkflowsOn(b *testing.B, w *benchWorkflowClient, d *devProcess) {
	for range b.N {
		benchWorkflowLoad(b, w, d.cmd.Process.Pid)
		t0 := time.Now()
		if err := w.startAndWait("long", `{"steps":1000}`); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/1000, "W3-ms/step")
	}
}

// BenchmarkEngineInProcess runs W1-W3 against the engine in-process, as
// the peers' figures in TARGETS.md were taken (their clients ran
// in-process), on the file journal in the working directory's disk.
func BenchmarkEngineInProcess(b *testing.B) { benchW1W3(b, benchEngine(b, 0)) }

// BenchmarkEngineInProcessPostgres is BenchmarkEngineInProcess on the
// PostgreSQL store (SVC_ENGINE=postgres, one process holding the lease), on
// the tests' PostgreSQL.
func BenchmarkEngineInProcessPostgres(b *testing.B) {
	pool := historyTestDB(b)
	benchW1W3(b, benchEngineOn(b, 0, newEngineStorePG(pool, engineSettings{Lease: engineLeaseDefault, Renew: engineLeaseRenewDefault}, discardLogger())))
}

// benchW2 runs W2 through startAndWait: 1000 runs of w00 from 32
// concurrent clients; the caller times it.
func benchW2(b *testing.B, startAndWait func(wf, input string) error) {
	benchW2Of(b, startAndWait, benchW2Run)
}

// benchW2Run is W2's workflow and input, the same for every run.
func benchW2Run(int) (wf, input string) { return "w00", `{"n":2}` }

// benchW2Of is benchW2 with the workflow and input of run i (0-999) from
// run.
func benchW2Of(b *testing.B, startAndWait func(wf, input string) error, run func(i int) (wf, input string)) {
	benchW2Load(b, 32, 1000, startAndWait, run)
}

// benchW2Load is W2 at another load: runs runs from clients concurrent
// clients, run i's workflow and input from run.
func benchW2Load(b *testing.B, clients, runs int, startAndWait func(wf, input string) error, run func(i int) (wf, input string)) {
	work := make(chan int, runs)
	for i := range runs {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := startAndWait(run(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkW2ConcurrencyLimit runs W2 in-process on the file journal, in
// one sitting, without a limit and with concurrency { limit: 8, key: "/k" }
// over 100 keys (and, where the limit binds and starts queue, over 2 keys:
// 16 slots for 32 clients).
func BenchmarkW2ConcurrencyLimit(b *testing.B) { benchW2Limit(b, benchEngine(b, 0)) }

// BenchmarkW2ConcurrencyLimitPostgres is BenchmarkW2ConcurrencyLimit on
// the PostgreSQL store (one process holding the lease).
func BenchmarkW2ConcurrencyLimitPostgres(b *testing.B) {
	pool := historyTestDB(b)
	benchW2Limit(b, benchEngineOn(b, 0, newEngineStorePG(pool, engineSettings{Lease: engineLeaseDefault, Renew: engineLeaseRenewDefault}, discardLogger())))
}

// benchW2Limit reports W2 on e for w00 (no limit) and wlim (limit 8 per
// key) with 100 and 2 keys; a queued start waits on its queue id.
func benchW2Limit(b *testing.B, e *engine) {
	defer debug.SetGCPercent(debug.SetGCPercent(devGCPercent)) // as svc dev runs
	startAndWait := benchEngineStartAndWait(e)
	keyed := func(keys int) func(i int) (string, string) {
		return func(i int) (string, string) { return "wlim", fmt.Sprintf(`{"n":2,"k":"user-%d"}`, i%keys) }
	}
	for range b.N {
		for _, v := range []struct {
			metric string
			run    func(i int) (string, string)
		}{
			{"W2-runs/s", func(int) (string, string) { return "w00", `{"n":2}` }},
			{"W2-limit8-100keys-runs/s", keyed(100)},
			{"W2-limit8-2keys-runs/s", keyed(2)},
		} {
			t0 := time.Now()
			benchW2Of(b, startAndWait, v.run)
			b.ReportMetric(1000/time.Since(t0).Seconds(), v.metric)
		}
	}
}

// benchEngineStartAndWait starts a run on e in process and waits for it
// to end (a queued start: on its queue id).
func benchEngineStartAndWait(e *engine) func(wf, input string) error {
	return func(wf, input string) error {
		rc, err := e.start(startRequest{Workflow: wf, Input: json.RawMessage(input), Trigger: triggerHTTP})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return e.wait(ctx, cmp.Or(rc.RunID, rc.QueueID))
	}
}

// benchW1W3 runs W1-W3 against e and reports them.
func benchW1W3(b *testing.B, e *engine) {
	defer debug.SetGCPercent(debug.SetGCPercent(devGCPercent)) // as svc dev runs
	startAndWait := benchEngineStartAndWait(e)
	for range b.N {
		benchW1(b, benchW1Way{"W1", startAndWait})
		benchW2Measured(b, startAndWait)
		t0 := time.Now()
		if err := startAndWait("long", `{"steps":1000}`); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/1000, "W3-ms/step")
	}
}
