// Command dbos runs the durable-workflow workloads of svc's benchmarks
// (bench_test.go, bench_replicas_test.go) on DBOS Transact Go, in process,
// on the PostgreSQL at DBOS_BENCH_DATABASE_URL (a database it may create),
// with synchronous_commit on:
//
//	W1 100 sequential start-and-await runs of a 3-step workflow (p50/p99)
//	W2 1000 runs of it from 32 concurrent clients (runs/s)
//	W3 one run of 1000 sequential steps (ms/step)
//
// and, per run (W3: per step), PostgreSQL's committed transactions
// (pg_stat_database.xact_commit), WAL bytes (pg_current_wal_lsn) and
// inserted rows (pg_stat_user_tables.n_tup_ins), less DBOS's idle load.
// It is a module of its own so that svc does not depend on DBOS.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

// settle is how long to wait before reading pg_stat_database: an idle
// backend flushes its counters only after 10 s.
const settle = 11 * time.Second

func one(ctx context.Context, n int) (int, error)   { return n + 1, nil }
func two(ctx context.Context, n int) (int, error)   { return n * 2, nil }
func three(ctx context.Context, n int) (int, error) { return n - 1, nil }

// w00 is the 3-step workflow of W1 and W2.
func w00(ctx dbos.Context, n int) (int, error) {
	v := n
	for _, f := range []func(context.Context, int) (int, error){one, two, three} {
		var err error
		if v, err = dbos.RunAsStep(ctx, func(c context.Context) (int, error) { return f(c, v) }); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// long is the workflow of W3: steps sequential steps.
func long(ctx dbos.Context, steps int) (int, error) {
	sum := 0
	for i := range steps {
		v, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) { return i, nil })
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// load is a reading of PostgreSQL's counters for the benchmark's database.
type load struct {
	at                 time.Time
	xacts, wal, tupIns int64
}

func read(conn *pgx.Conn) load {
	l := load{at: time.Now()}
	if err := conn.QueryRow(context.Background(), `SELECT
  (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
  pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
  (SELECT coalesce(sum(n_tup_ins), 0)::bigint FROM pg_stat_user_tables)`).Scan(&l.xacts, &l.wal, &l.tupIns); err != nil {
		fail(err)
	}
	return l
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "dbos bench:", err)
	os.Exit(1)
}

func main() {
	dbURL := os.Getenv("DBOS_BENCH_DATABASE_URL")
	if dbURL == "" {
		fail(fmt.Errorf("set DBOS_BENCH_DATABASE_URL to a postgres:// URL (bench/run.sh does)"))
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		fail(err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "on") // a startup parameter of every connection
	u.RawQuery = q.Encode()
	dbURL = u.String()

	ctx, err := dbos.NewContext(context.Background(), dbos.Config{DatabaseURL: dbURL, AppName: "svc-bench"})
	if err != nil {
		fail(err)
	}
	dbos.RegisterWorkflow(ctx, w00)
	dbos.RegisterWorkflow(ctx, long)
	if err := dbos.Launch(ctx); err != nil {
		fail(err)
	}
	defer dbos.Shutdown(ctx, 5*time.Second)
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		fail(err)
	}
	var sc string
	conn.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&sc)
	fmt.Printf("dbos-transact-golang, synchronous_commit=%s\n", sc)

	run := func(wf dbos.Workflow[int, int], in int) {
		h, err := dbos.RunWorkflow(ctx, wf, in)
		if err != nil {
			fail(err)
		}
		if _, err := h.GetResult(); err != nil {
			fail(err)
		}
	}
	// The idle load, subtracted from each workload's.
	time.Sleep(settle)
	last := read(conn)
	time.Sleep(settle)
	idle := read(conn)
	s := idle.at.Sub(last.at).Seconds()
	idleX, idleW, idleI := float64(idle.xacts-last.xacts)/s, float64(idle.wal-last.wal)/s, float64(idle.tupIns-last.tupIns)/s
	last = idle
	fmt.Printf("idle-xact/s %.2f\n", idleX)
	report := func(name, unit string, units float64) {
		time.Sleep(settle)
		now := read(conn)
		s := now.at.Sub(last.at).Seconds()
		fmt.Printf("%s-xact/%s %.2f  %s-WAL-B/%s %.0f  %s-ins/%s %.2f\n",
			name, unit, (float64(now.xacts-last.xacts)-idleX*s)/units,
			name, unit, (float64(now.wal-last.wal)-idleW*s)/units,
			name, unit, (float64(now.tupIns-last.tupIns)-idleI*s)/units)
		last = now
	}

	var lat []time.Duration
	for range 100 {
		t0 := time.Now()
		run(w00, 1)
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
	fmt.Printf("W1-p50-ms %.3f  W1-p99-ms %.3f\n", ms(lat[49]), ms(lat[98]))
	report("W1", "run", 100)

	work := make(chan struct{}, 1000)
	for range 1000 {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				run(w00, 2)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("W2-runs/s %.1f\n", 1000/time.Since(t0).Seconds())
	report("W2", "run", 1000)

	t0 = time.Now()
	run(long, 1000)
	fmt.Printf("W3-ms/step %.3f\n", float64(time.Since(t0).Microseconds())/1000/1000)
	report("W3", "step", 1000)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
