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
// a 3-step workflow (a start and a long-polled GET; W1-sync one start with
// ?wait=); W2 1000 runs from 32 concurrent clients; W3 one run of 1000
// sequential steps.
func BenchmarkWorkflows(b *testing.B) { benchWorkflows(b) }

// BenchmarkWorkflowsTraced is BenchmarkWorkflows with trace export on, to
// the OpenTelemetry Collector (otel_judge_test.go): the cost of tracing.
func BenchmarkWorkflowsTraced(b *testing.B) {
	endpoint, _ := startOTelCol(b)
	benchWorkflows(b, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint)
}

// benchWorkflows runs W1-W3 over HTTP against svc dev with env added.
func benchWorkflows(b *testing.B, env ...string) {
	dir := benchProject(b, 4, 1)
	d := startDev(b, dir, baseEnv(append([]string{"SVC_DATABASE_URL=" + testPostgresURL(b), "OPENAI_API_KEY=sk-bench"}, env...)...))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	startAndWait := func(wf, input string) error {
		resp, err := client.Post(d.url("/api/workflows/"+wf+"/start"), "application/json", strings.NewReader(input))
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
		resp, err = client.Get(d.url("/api/runs/" + rc.RunID + "?wait=60s"))
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
	for range b.N {
		// W1
		var lat []time.Duration
		for range 100 {
			t0 := time.Now()
			if err := startAndWait("w00", `{"n":1}`); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
		b.ReportMetric(percentile(lat, 50), "W1-p50-ms")
		b.ReportMetric(percentile(lat, 99), "W1-p99-ms")
		// W1-sync: one request per run.
		lat = lat[:0]
		for range 100 {
			t0 := time.Now()
			resp, err := client.Post(d.url("/api/workflows/w00/start?wait=60s"), "application/json", strings.NewReader(`{"n":1}`))
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"status":"completed"`)) {
				b.Fatalf("start?wait: %d %.300s", resp.StatusCode, body)
			}
			lat = append(lat, time.Since(t0))
		}
		sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
		b.ReportMetric(percentile(lat, 50), "W1-sync-p50-ms")
		b.ReportMetric(percentile(lat, 99), "W1-sync-p99-ms")
		// W2
		t0 := time.Now()
		benchW2(b, startAndWait)
		el := time.Since(t0).Seconds()
		b.ReportMetric(1000/el, "W2-runs/s")
		b.ReportMetric(3000/el, "W2-steps/s")
		// W3
		t0 = time.Now()
		if err := startAndWait("long", `{"steps":1000}`); err != nil {
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
	benchW2Of(b, startAndWait, func(int) (string, string) { return "w00", `{"n":2}` })
}

// benchW2Of is benchW2 with the workflow and input of run i (0-999) from
// run.
func benchW2Of(b *testing.B, startAndWait func(wf, input string) error, run func(i int) (wf, input string)) {
	work := make(chan int, 1000)
	for i := range 1000 {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
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
	startAndWait := func(wf, input string) error {
		rc, err := e.start(startRequest{Workflow: wf, Input: json.RawMessage(input), Trigger: triggerHTTP})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return e.wait(ctx, cmp.Or(rc.RunID, rc.QueueID))
	}
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

// benchW1W3 runs W1-W3 against e and reports them.
func benchW1W3(b *testing.B, e *engine) {
	defer debug.SetGCPercent(debug.SetGCPercent(devGCPercent)) // as svc dev runs
	startAndWait := func(wf, input string) error {
		rc, err := e.start(startRequest{Workflow: wf, Input: json.RawMessage(input), Trigger: triggerHTTP})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return e.wait(ctx, rc.RunID)
	}
	for range b.N {
		var lat []time.Duration
		for range 100 {
			t0 := time.Now()
			if err := startAndWait("w00", `{"n":1}`); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
		b.ReportMetric(percentile(lat, 50), "W1-p50-ms")
		b.ReportMetric(percentile(lat, 99), "W1-p99-ms")
		t0 := time.Now()
		benchW2(b, startAndWait)
		b.ReportMetric(1000/time.Since(t0).Seconds(), "W2-runs/s")
		t0 = time.Now()
		if err := startAndWait("long", `{"steps":1000}`); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/1000, "W3-ms/step")
	}
}
