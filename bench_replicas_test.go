package main

// Benchmarks of several `svc serve` replicas on one PostgreSQL
// (SVC_ENGINE=postgres, active/active), over signed HTTP:
//
//	go test -run '^$' -bench 'Replicas' -benchtime=1x .
//
// They print figures and never fail on timing.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchStatsSettle is how long the benchmarks wait before reading
// pg_stat_database: a backend flushes its counters at most once a second,
// and an idle one with counters pending only after 10 s.
const benchStatsSettle = 11 * time.Second

// benchFleetSender signs the benchmarks' requests as a control plane
// process does (cp_server.go): over cpSignLanes sender ids in turn, so
// that the replicas decide concurrent requests' counters in parallel
// rather than one at a time on one sender's window.
var benchFleetSender = newSignSender(cpSignLanes)

// benchFleet is a client of n replicas of one box: each request goes to the
// next replica in turn.
type benchFleet struct {
	boxes  []*boxProcess
	secret []byte
	client *http.Client
	next   atomic.Uint64
}

// pick returns the next replica's URL, round-robin.
func (f *benchFleet) pick() string {
	return f.boxes[int(f.next.Add(1)-1)%len(f.boxes)].url
}

// do sends a signed request to base and returns the status and body.
func (f *benchFleet) do(base, method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	benchFleetSender.sign(req, []byte(body), f.secret, time.Now())
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// run returns run id as the replica at base shows it.
func (f *benchFleet) run(base, id string) (runRecord, error) {
	var got struct{ Run runRecord }
	code, body, err := f.do(base, "GET", "/api/runs/"+id, "")
	if err == nil && code != 200 {
		err = fmt.Errorf("GET run %s = %d %.200s", id, code, body)
	}
	if err == nil {
		err = json.Unmarshal(body, &got)
	}
	return got.Run, err
}

// startAndWait starts wf on the next replica with ?wait= and, when the run
// outlives the wait, long-polls it there until it ends.
func (f *benchFleet) startAndWait(wf, input string) error {
	base := f.pick()
	code, body, err := f.do(base, "POST", "/api/workflows/"+wf+"/start?wait=60s", input)
	for range 10 {
		if err != nil {
			return err
		}
		if bytes.Contains(body, []byte(`"status":"completed"`)) {
			return nil
		}
		var rc startReceipt
		if json.Unmarshal(body, &rc); rc.RunID == "" || code >= 300 {
			return fmt.Errorf("start %s = %d %.300s", wf, code, body)
		}
		code, body, err = f.do(base, "GET", "/api/runs/"+rc.RunID+"?wait=60s", "")
	}
	return fmt.Errorf("run of %s did not complete: %.300s", wf, body)
}

// health returns the engine's store as the replica at base reports it.
func (f *benchFleet) health(base string) engineStoreHealth {
	var h struct{ Engine engineStoreHealth }
	if _, body, err := f.do(base, "GET", "/api/health", ""); err == nil {
		json.Unmarshal(body, &h)
	}
	return h.Engine
}

// ready waits until every replica holds its lease and sees the others.
func (f *benchFleet) ready(b *testing.B) {
	for _, x := range f.boxes {
		eventually(b, 30*time.Second, "every replica holds its lease and sees the others", func() bool {
			h := f.health(x.url)
			return h.Lease == engineLeaseHeld && h.Replicas == len(f.boxes)
		})
	}
}

// pgLoad is a reading of PostgreSQL's counters for one database.
type pgLoad struct {
	at     time.Time
	xacts  int64 // pg_stat_database.xact_commit
	wal    int64 // pg_current_wal_lsn() in bytes (cluster-wide)
	tupIns int64 // sum of pg_stat_user_tables.n_tup_ins
	syncs  int64 // pg_stat_wal.wal_sync: WAL flushes to disk (cluster-wide)
}

// readPGLoad reads the counters through conn.
func readPGLoad(b *testing.B, conn *pgx.Conn) pgLoad {
	l := pgLoad{at: time.Now()}
	err := conn.QueryRow(context.Background(), `SELECT
  (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
  pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
  (SELECT coalesce(sum(n_tup_ins), 0)::bigint FROM pg_stat_user_tables),
  (SELECT wal_sync FROM pg_stat_wal)`).Scan(&l.xacts, &l.wal, &l.tupIns, &l.syncs)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// pgLoadMeter reports the load a workload put on PostgreSQL, less the load
// of idle replicas (lease renewals, polls) over the same time.
type pgLoadMeter struct {
	b                *testing.B
	conn             *pgx.Conn
	idleXacts        float64 // per second
	idleWAL, idleIns float64
	idleSyncs        float64
	last             pgLoad
	dataDir          string // the server's, for its CPU time
}

// newPGLoadMeter measures the idle load of the fleet over one settle time.
func newPGLoadMeter(b *testing.B, conn *pgx.Conn) *pgLoadMeter {
	time.Sleep(benchStatsSettle)
	m := &pgLoadMeter{b: b, conn: conn, last: readPGLoad(b, conn)}
	conn.QueryRow(context.Background(), "SHOW data_directory").Scan(&m.dataDir)
	time.Sleep(benchStatsSettle)
	now := readPGLoad(b, conn)
	s := now.at.Sub(m.last.at).Seconds()
	m.idleXacts, m.idleWAL, m.idleIns = float64(now.xacts-m.last.xacts)/s, float64(now.wal-m.last.wal)/s, float64(now.tupIns-m.last.tupIns)/s
	m.idleSyncs = float64(now.syncs-m.last.syncs) / s
	m.last = now
	b.ReportMetric(m.idleXacts, "idle-xact/s")
	return m
}

// report waits for the counters to settle and reports the load since the
// last reading per unit (runs or steps) under name.
func (m *pgLoadMeter) report(name, unit string, units float64) {
	time.Sleep(benchStatsSettle)
	now := readPGLoad(m.b, m.conn)
	s := now.at.Sub(m.last.at).Seconds()
	m.b.ReportMetric((float64(now.xacts-m.last.xacts)-m.idleXacts*s)/units, name+"-xact/"+unit)
	m.b.ReportMetric((float64(now.wal-m.last.wal)-m.idleWAL*s)/units, name+"-WAL-B/"+unit)
	m.b.ReportMetric((float64(now.tupIns-m.last.tupIns)-m.idleIns*s)/units, name+"-ins/"+unit)
	m.b.ReportMetric((float64(now.syncs-m.last.syncs)-m.idleSyncs*s)/units, name+"-WAL-flushes/"+unit)
	m.last = now
}

// benchReplicasNapper sleeps durably, long enough to be asleep when its
// replica is killed.
const benchReplicasNapper = `
import { sleep } from "svc";
export default async function napper(input: { ms: number }) {
  "use workflow";
  await sleep(input.ms);
  return {};
}`

// fleetCPU is the CPU time used so far by a fleet's replicas, its
// PostgreSQL server (zero when not on this machine), the benchmark's own
// process (the load generator) and the whole machine (busy, of all cores).
type fleetCPU struct{ replicas, pg, client, machine time.Duration }

// cpu reads the fleet's CPU times now.
func (f *benchFleet) cpu(m *pgLoadMeter) fleetCPU {
	var c fleetCPU
	for _, box := range f.boxes {
		c.replicas += procCPU(box.cmd.Process.Pid, false)
	}
	c.pg, _ = pgServerCPU(m.dataDir)
	c.client = procCPU(os.Getpid(), false)
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		// "cpu  user nice system idle iowait irq softirq steal ...", in USER_HZ.
		for i, v := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:] {
			if n, _ := strconv.ParseInt(v, 10, 64); i != 3 && i != 4 && i < 8 {
				c.machine += time.Duration(n) * time.Second / 100
			}
		}
	}
	return c
}

// report reports the CPU µs per run each part used since before.
func (c fleetCPU) report(b *testing.B, before fleetCPU, name string, runs float64) {
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / runs }
	b.ReportMetric(per(c.replicas-before.replicas), name+"-cpu-replicas-µs/run")
	b.ReportMetric(per(c.pg-before.pg), name+"-cpu-pg-µs/run")
	b.ReportMetric(per(c.client-before.client), name+"-cpu-client-µs/run")
	b.ReportMetric(per(c.machine-before.machine), name+"-cpu-machine-µs/run")
}

// startBenchFleet starts n `svc serve` replicas of dir with
// SVC_ENGINE=postgres on a new database, default lease settings.
func startBenchFleet(b *testing.B, dir string, n int) (*benchFleet, *pgx.Conn) {
	dbURL := testPostgresURL(b)
	secret := strings.Repeat("ab", 32)
	env := baseEnv("DATABASE_URL="+dbURL, "HMAC_SECRET="+secret, "SVC_MASTER_KEY="+strings.Repeat("cd", 32),
		"OPENAI_API_KEY=sk-bench", "SVC_ENGINE=postgres", "SVC_STORAGE_LOCAL_OK=1")
	f := &benchFleet{secret: []byte(secret), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for range n {
		f.boxes = append(f.boxes, startBox(b, dir, b.TempDir(), env))
	}
	f.ready(b)
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	return f, conn
}

// BenchmarkReplicas runs W1-W3 (as BenchmarkWorkflows) against 1, 2 and 4
// `svc serve` replicas on one PostgreSQL, the client going round-robin
// over the replicas: W1 100 sequential runs of a 3-step workflow, each one
// POST start?wait=; W2 1000 runs from 32 concurrent clients (three times
// over: benchFleetW2); W2scaled W2 at 32 clients and 1000 runs per
// replica (the load grown with the fleet); W3 one run of 1000 sequential
// steps. Per run (W3: per step) it reports PostgreSQL's committed
// transactions, WAL bytes, WAL flushes and inserted rows, less the idle
// fleet's; then each replica's memory with 4,000 runs asleep
// (benchFleetMemory). Then the takeover time: a replica with runs asleep
// SIGKILLed, the time until another replica owns them (default lease
// settings).
func BenchmarkReplicas(b *testing.B) {
	dir := benchProject(b, 4, 1)
	writeFile(b, dir, "workflows/napper.workflow.ts", benchReplicasNapper)
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			f, conn := startBenchFleet(b, dir, n)
			m := newPGLoadMeter(b, conn)
			for range b.N {
				benchFleetW1W3(b, f, m)
			}
			benchFleetMemory(b, f)
		})
	}
	b.Run("takeover", func(b *testing.B) { benchTakeover(b, dir) })
}

// benchFleetW2Rounds is how many times over benchFleetW2 runs its load:
// its figures are per run over all of them, so that a periodic cost (a
// snapshot, PostgreSQL's autovacuum) is spread over thousands of runs
// instead of landing whole in one round of 1,000.
const benchFleetW2Rounds = 3

// benchFleetW2 runs W2's workflow benchFleetW2Rounds times over, runs runs
// from clients concurrent clients each time, and reports under name the
// runs per second, and the CPU and PostgreSQL's load per run, over all.
func benchFleetW2(b *testing.B, f *benchFleet, m *pgLoadMeter, name string, clients, runs int) {
	cpu := f.cpu(m)
	t0 := time.Now()
	for range benchFleetW2Rounds {
		benchW2Load(b, clients, runs, f.startAndWait, benchW2Run)
	}
	total := float64(benchFleetW2Rounds * runs)
	b.ReportMetric(total/time.Since(t0).Seconds(), name+"-runs/s")
	f.cpu(m).report(b, cpu, name, total)
	m.report(name, "run", total)
}

// benchFleetW1W3 runs W1-W3 (and W2scaled) against f and reports them.
func benchFleetW1W3(b *testing.B, f *benchFleet, m *pgLoadMeter) {
	var lat []time.Duration
	for range 100 {
		t0 := time.Now()
		if err := f.startAndWait("w00", `{"n":1}`); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
	b.ReportMetric(percentile(lat, 50), "W1-p50-ms")
	b.ReportMetric(percentile(lat, 99), "W1-p99-ms")
	m.report("W1", "run", 100)

	benchFleetW2(b, f, m, "W2", 32, 1000)
	// W2 with the load grown with the fleet: 32 clients and 1,000 runs
	// per replica, as when replicas are added because the work grew.
	benchFleetW2(b, f, m, "W2scaled", 32*len(f.boxes), 1000*len(f.boxes))

	t0 := time.Now()
	if err := f.startAndWait("long", `{"steps":1000}`); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/1000, "W3-ms/step")
	m.report("W3", "step", 1000)
}

// benchFleetSleepers is how many sleeping runs benchFleetMemory starts.
const benchFleetSleepers = 4000

// benchFleetMemory starts benchFleetSleepers runs that sleep for ten
// minutes, round-robin over the replicas from 32 clients, waits until the
// last one is asleep, and reports each replica's resident memory before
// and after: the largest replica's growth per sleeping run, and its growth
// as a whole (DESIGN §12: a replica holds only its share of active runs).
func benchFleetMemory(b *testing.B, f *benchFleet) {
	rss := func() []float64 {
		runtime.GC() // the benchmark's own garbage does not matter; the replicas' RSS is read as is
		var out []float64
		for _, x := range f.boxes {
			out = append(out, procStatusMiB(x.cmd.Process.Pid, "VmRSS:"))
		}
		return out
	}
	before := rss()
	var next atomic.Int64
	var last atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= benchFleetSleepers {
				code, body, err := f.do(f.pick(), "POST", "/api/workflows/napper/start", `{"ms":600000}`)
				var rc startReceipt
				if json.Unmarshal(body, &rc); err != nil || code != 202 || rc.RunID == "" {
					b.Errorf("start napper = %d %.200s %v", code, body, err)
					return
				}
				last.Store(rc.RunID)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	id := last.Load().(string)
	for _, x := range f.boxes {
		eventually(b, 60*time.Second, "the last sleeper asleep, as every replica shows it", func() bool {
			r, err := f.run(x.url, id)
			return err == nil && r.Status == runWaiting
		})
	}
	time.Sleep(2 * time.Second) // the others' last sleeps, journaled just after
	after := rss()
	var grew, peak float64
	for i := range after {
		grew = max(grew, after[i]-before[i])
		peak = max(peak, after[i])
	}
	b.ReportMetric(grew*1024/benchFleetSleepers, "sleeping-KiB/run/replica")
	b.ReportMetric(grew, "sleepers-MiB/replica")
	b.ReportMetric(peak, "rss-MiB/replica")
	// What each replica holds, exactly (svc_runs_active): RSS moves with
	// the heap's headroom and the collector's timing, this does not.
	var held []float64
	for _, x := range f.boxes {
		_, body, err := f.do(x.url, "GET", "/metrics", "")
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, metricsParse(b, string(body))[`svc_runs_active{status="waiting"}`])
	}
	b.ReportMetric(slices.Max(held)/benchFleetSleepers, "held-share-max/replica")
	b.Logf("%d sleeping runs: replicas' RSS %.1f → %.1f MiB; sleeping runs each holds %v", benchFleetSleepers, before, after, held)
}

// benchTakeoverSamples is how many kills the takeover benchmark times.
const benchTakeoverSamples = 10

// benchTakeover times takeovers on two replicas with the default lease:
// replica 0 starts runs that go to sleep, is SIGKILLed, and replica 1 is
// polled until it shows another owner for them; replica 0 is then started
// afresh for the next sample.
func benchTakeover(b *testing.B, dir string) {
	f, _ := startBenchFleet(b, dir, 2)
	var took []time.Duration
	for range benchTakeoverSamples * b.N {
		victim, other := f.boxes[0], f.boxes[1].url
		owner := f.health(victim.url).Owner
		var ids []string
		for range 3 {
			code, body, err := f.do(victim.url, "POST", "/api/workflows/napper/start", `{"ms":30000}`)
			var rc startReceipt
			if json.Unmarshal(body, &rc); err != nil || code != 202 || rc.RunID == "" {
				b.Fatalf("start napper = %d %s %v", code, body, err)
			}
			ids = append(ids, rc.RunID)
		}
		for _, id := range ids {
			eventually(b, 30*time.Second, "the napper asleep on its replica", func() bool {
				r, err := f.run(other, id)
				return err == nil && r.Status == runWaiting && r.Owner == owner
			})
		}
		killed := time.Now()
		victim.cmd.Process.Signal(syscall.SIGKILL)
		<-victim.exited
		for _, id := range ids {
			eventually(b, 60*time.Second, "the runs of the killed replica claimed", func() bool {
				r, err := f.run(other, id)
				return err == nil && r.Owner != "" && r.Owner != owner
			})
		}
		took = append(took, time.Since(killed))
		f.boxes[0] = startBox(b, dir, b.TempDir(), victim.cmd.Env)
		f.ready(b)
	}
	sort.Slice(took, func(i, k int) bool { return took[i] < took[k] })
	b.ReportMetric(percentile(took, 50), "takeover-p50-ms")
	b.ReportMetric(percentile(took, 99), "takeover-p99-ms")
	b.ReportMetric(percentile(took, 100), "takeover-max-ms")
	b.Logf("takeovers after SIGKILL: %v", took)
}
