package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Benchmarks of a long life (history must not slow anything):
//
//	go test -run '^$' -bench 'LongLife|StartDuringCompaction|ActiveRunMemory' -benchtime=1x .
//
// They print figures and never fail on timing.

// benchLongLifeHistory is how many ended runs BenchmarkLongLife puts in the
// run history; SVC_BENCH_HISTORY overrides it.
const benchLongLifeHistory = 1_000_000

// BenchmarkLongLife boots `svc dev` on a fresh project and again with a
// million ended runs in its history (plus 20,000 runs through the engine
// just before): boot time to the JSON line, resident memory after boot,
// snapshot and journal size, and the first page of GET /api/runs.
func BenchmarkLongLife(b *testing.B) {
	n := benchLongLifeHistory
	if v := os.Getenv("SVC_BENCH_HISTORY"); v != "" {
		fmt.Sscan(v, &n)
	}
	dir := benchProject(b, 4, 1)
	env := baseEnv("OPENAI_API_KEY=sk-bench")
	boot := func() (*devProcess, time.Duration) {
		start := time.Now()
		d := startDevProcess(b, dir, freePortBase(b), env)
		d.payload = d.nextPayload(120 * time.Second)
		return d, time.Since(start)
	}
	stop := func(d *devProcess) {
		d.cmd.Process.Signal(syscall.SIGINT)
		<-d.exited
	}
	rss := func(d *devProcess) float64 { return procStatusMiB(d.cmd.Process.Pid, "VmRSS:") }
	d, _ := boot() // first boot: initdb
	stop(d)
	d, fresh := boot()
	freshRSS := rss(d)
	b.ReportMetric(float64(fresh.Milliseconds()), "boot-empty-ms")
	b.ReportMetric(freshRSS, "rss-empty-MiB")

	pool, err := pgxpool.New(context.Background(), d.payload.Services.PostgresURL)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	seedRunHistory(b, pool, n, "w00")
	b.Logf("seeded %d ended runs in %v", n, time.Since(t0).Round(time.Millisecond))
	// 20,000 runs through the engine, 32 clients: they end, are archived
	// and leave memory.
	const runs = 20000
	work := make(chan int, runs)
	for i := range runs {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				var rc startReceipt
				if code := httpJSON(b, "POST", d.url("/api/workflows/w00/start"), map[string]int{"n": i}, &rc); code != 202 {
					b.Errorf("start = %d", code)
					return
				}
				httpJSON(b, "GET", d.url("/api/runs/"+rc.RunID+"?wait=60s"), nil, nil)
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second) // the archiver's last batch
	b.ReportMetric(rss(d), "rss-after-20k-runs-MiB")
	stop(d)
	pool.Close()

	d, warm := boot()
	b.ReportMetric(float64(warm.Milliseconds()), fmt.Sprintf("boot-%dk-history-ms", (n+runs)/1000))
	b.ReportMetric(rss(d), fmt.Sprintf("rss-%dk-history-MiB", (n+runs)/1000))
	var snap, journal int64
	files, _ := filepath.Glob(filepath.Join(dir, ".svc/journal/*"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			journal += st.Size()
			if filepath.Ext(f) == journalSnapshotExt {
				snap += st.Size()
			}
		}
	}
	b.ReportMetric(float64(snap)/1024, "snapshot-KiB")
	b.ReportMetric(float64(journal)/(1<<20), "journal-MiB")
	t0 = time.Now()
	var page struct {
		Items []runRecord `json:"items"`
	}
	httpJSON(b, "GET", d.url("/api/runs"), nil, &page)
	b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "list-first-page-ms")
	if len(page.Items) != runQueryDefaultLimit {
		b.Errorf("first page = %d runs", len(page.Items))
	}
	stop(d)
}

// benchEngine opens an in-process engine on the benchmark project, its
// journal under the working directory (a real disk), with compactBytes.
func benchEngine(b *testing.B, compactBytes int64) *engine {
	journalDir, err := os.MkdirTemp(".", ".bench-journal-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(journalDir) })
	return benchEngineOn(b, compactBytes, engineStoreFile{dir: journalDir})
}

// benchEngineOn opens an in-process engine on the benchmark project and
// store, with compactBytes.
func benchEngineOn(b *testing.B, compactBytes int64, store engineStore) *engine {
	dir := benchProject(b, 4, 1)
	writeFile(b, dir, "workflows/hold.workflow.ts", `
import { createHook } from "svc";
export default async function hold() { "use workflow"; return await createHook(); }`)
	writeFile(b, dir, "workflows/wlim.workflow.ts", `
export const concurrency = { limit: 8, key: "/k" };
async function one(n: number) { "use step"; return n + 1; }
async function two(n: number) { "use step"; return n * 2; }
async function three(n: number) { "use step"; return n - 1; }
export default async function wlim(input: { n?: number, k?: string }) {
  "use workflow";
  return { v: await three(await two(await one(input.n ?? 0))) };
}`)
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil {
		b.Fatal(cerr)
	}
	e, err := openEngine(engineOptions{Store: store, Catalog: func() *catalog { return cat },
		Env: func() map[string]string { return nil }, Log: discardLogger(), CompactBytes: compactBytes})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.close() })
	return e
}

// holdRuns starts n runs that wait on a hook and waits until they all do.
func holdRuns(b *testing.B, e *engine, n int) {
	for range n {
		if _, err := e.start(startRequest{Workflow: "hold", Input: json.RawMessage(`{}`), Trigger: triggerHTTP}); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		e.mu.Lock()
		waiting := len(e.st.Hooks)
		e.mu.Unlock()
		if waiting == n {
			return
		}
	}
	b.Fatal("runs did not all reach their hook")
}

// BenchmarkStartDuringCompaction measures durable start latency while the
// journal compacts over and over (a 1 MiB threshold) with 20,000 active
// runs in memory, so each snapshot is several MiB, against the same load
// with compaction off: the snapshot is encoded and written off the engine
// lock, so no start waits on it.
func BenchmarkStartDuringCompaction(b *testing.B) {
	for _, tc := range []struct {
		name  string
		bytes int64
	}{{"compacting", 1 << 20}, {"no-compaction", 1 << 40}} {
		b.Run(tc.name, func(b *testing.B) { benchStartsWhileCompacting(b, tc.bytes) })
	}
}

// benchStartsWhileCompacting times 3000 durable starts with 20,000 active
// runs and the given compaction threshold.
func benchStartsWhileCompacting(b *testing.B, compactBytes int64) {
	e := benchEngine(b, compactBytes)
	holdRuns(b, e, 20000)
	var lat []time.Duration
	compactions := 0
	for range 3000 {
		e.mu.Lock()
		during := e.compacting
		e.snapBytes = 0 // compact at every CompactBytes, however large the last snapshot
		e.mu.Unlock()
		t0 := time.Now()
		if _, err := e.start(startRequest{Workflow: "w00", Input: json.RawMessage(`{"n":1}`), Trigger: triggerHTTP}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		e.mu.Lock()
		if during || e.compacting {
			compactions++
		}
		e.mu.Unlock()
	}
	sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
	b.ReportMetric(percentile(lat, 50), "start-p50-ms")
	b.ReportMetric(percentile(lat, 99), "start-p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "start-max-ms")
	b.ReportMetric(float64(compactions), "starts-during-compaction")
}

// BenchmarkActiveRunMemory measures the heap held per active run: runs
// suspended on a hook (no goroutine, no VM), after a full GC.
func BenchmarkActiveRunMemory(b *testing.B) {
	e := benchEngine(b, 0)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const n = 10000
	holdRuns(b, e, n)
	after := heap()
	b.ReportMetric(float64(after-before)/n, "bytes/active-run")
}
