package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pafCluster is a pg_auto_failover formation made by a test (JUDGES.md):
// a monitor, a primary and a synchronous secondary on loopback, each run
// by pg_autoctl as the postgres user.
type pafCluster struct {
	t     *testing.T
	dir   string
	ports [3]int // monitor, node 1, node 2
	url   string // the database svc, both nodes named, read-write wanted
}

// pafBin is where Debian's PostgreSQL 15 and pg_auto_failover live.
const pafBin = "/usr/lib/postgresql/15/bin"

// pafCommand is pg_autoctl args as the postgres user.
func (c *pafCluster) command(args ...string) *exec.Cmd {
	cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", "env", "PATH=" + pafBin + ":/usr/bin:/bin", "pg_autoctl"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// background runs pg_autoctl args until the test ends, its output in log.
func (c *pafCluster) background(log string, args ...string) {
	f, err := os.Create(filepath.Join(c.dir, log))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := c.command(args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("pg_autoctl %v: %v", args, err)
	}
	c.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		f.Close()
	})
}

// state is pg_autoctl show state of the formation.
func (c *pafCluster) state() string {
	out, _ := c.command("show", "state", "--pgdata", filepath.Join(c.dir, "monitor")).CombinedOutput()
	return string(out)
}

// newPAFCluster makes the formation and the database svc on it.
func newPAFCluster(t *testing.T) *pafCluster {
	if _, err := os.Stat(filepath.Join("/usr/bin", "pg_autoctl")); err != nil {
		t.Fatalf("this test needs Debian's postgresql-15-auto-failover (apt-get install postgresql-15-auto-failover; .ci/run installs it): %v", err)
	}
	dir, err := os.MkdirTemp("", "svc-paf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if out, err := exec.Command("chown", "postgres", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown postgres %s: %v %s", dir, err, out)
	}
	base := freePortBase(t)
	c := &pafCluster{t: t, dir: dir, ports: [3]int{base, base + 1, base + 2}}
	mon := filepath.Join(dir, "monitor")
	if out, err := c.command("create", "monitor", "--pgdata", mon, "--pgport", strconv.Itoa(c.ports[0]), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl").CombinedOutput(); err != nil {
		t.Fatalf("pg_autoctl create monitor: %v\n%s", err, out)
	}
	c.background("monitor.log", "run", "--pgdata", mon)
	monitorURL := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", c.ports[0])
	for i := 1; i <= 2; i++ {
		c.background(fmt.Sprintf("node%d.log", i), "create", "postgres", "--pgdata", filepath.Join(dir, fmt.Sprintf("node%d", i)), "--pgport", strconv.Itoa(c.ports[i]),
			"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--monitor", monitorURL, "--run")
		eventually(t, 90*time.Second, "node "+strconv.Itoa(i)+" to serve", func() bool {
			st := c.state()
			if i == 1 { // alone, it is single
				return strings.Count(st, "single") >= 2 // reported and assigned
			}
			return strings.Count(st, "secondary") >= 2 && strings.Count(st, "primary") >= 2
		})
	}
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.ports[1])
	if out, err := exec.Command("psql", admin, "-c", "CREATE DATABASE svc").CombinedOutput(); err != nil {
		t.Fatalf("create database svc: %v %s", err, out)
	}
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/svc?sslmode=disable&target_session_attrs=read-write", c.ports[1], c.ports[2])
	return c
}

// primary is the data directory of the node serving read-write now.
func (c *pafCluster) primary() (string, int) {
	for _, line := range strings.Split(c.state(), "\n") {
		f := strings.Split(line, "|")
		if len(f) > 5 && strings.TrimSpace(f[len(f)-2]) == "primary" && strings.TrimSpace(f[len(f)-1]) == "primary" {
			name := strings.TrimSpace(f[0])
			n, _ := strconv.Atoi(strings.TrimPrefix(name, "node_"))
			return filepath.Join(c.dir, fmt.Sprintf("node%d", n)), n
		}
	}
	return "", 0
}

// TestEnginePGFailover runs two engine replicas on a pg_auto_failover
// formation (issue 39, item 5), named by a multi-host DATABASE_URL, under
// a steady load of starts: a planned failover, then a SIGKILL of the new
// primary's postmaster. No acknowledged start is lost, none runs twice,
// every one completes, and the replicas serve again after each failover;
// the outages are printed.
func TestEnginePGFailover(t *testing.T) {
	t.Parallel() // waits on the monitor and on processes
	if testing.Short() {
		t.Skip("makes a pg_auto_failover formation")
	}
	c := newPAFCluster(t)
	if _, err := applyMigrations(context.Background(), c.url, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), c.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a := newTestEngineOn(t, engineKindPostgres, func(te *testEngine) { te.pool = pool })
	b := &testEngine{dir: a.dir, cat: a.cat, counter: a.counter, store: engineKindPostgres, pool: pool}
	b.open(t)

	var mu sync.Mutex
	acked := map[string]string{} // input id → run id
	var refused, unknown int
	var last time.Time // the last acknowledged start
	var outage time.Duration
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			te := []*testEngine{a, b}[i%2]
			id := fmt.Sprintf("f-%d", i)
			rc, err := te.start(startRequest{Workflow: "three", Input: json.RawMessage(`{"id":"` + id + `"}`), Trigger: triggerHTTP})
			mu.Lock()
			switch {
			case err == nil:
				if gap := time.Since(last); !last.IsZero() && gap > outage {
					outage = gap
				}
				acked[id], last = rc.RunID, time.Now()
			case errors.Is(err, errJournalOutcomeUnknown):
				unknown++
			default:
				refused++
			}
			mu.Unlock()
		}
	}()
	ackedNow := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	// Planned failover, under load.
	eventually(t, 20*time.Second, "starts before the failover", func() bool { return ackedNow() >= 20 })
	if out, err := c.command("perform", "failover", "--pgdata", filepath.Join(c.dir, "monitor")).CombinedOutput(); err != nil {
		t.Fatalf("pg_autoctl perform failover: %v\n%s", err, out)
	}
	n := ackedNow()
	eventually(t, 60*time.Second, "starts after the planned failover", func() bool { return ackedNow() >= n+20 })
	// The new primary's postmaster killed.
	data, _ := c.primary()
	pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		t.Fatalf("the primary's postmaster.pid: %v\n%s", err, c.state())
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	syscall.Kill(pid, syscall.SIGKILL)
	n = ackedNow()
	eventually(t, 90*time.Second, "starts after the primary was killed", func() bool { return ackedNow() >= n+20 })
	close(stop)
	<-loaded

	// Every acknowledged start completed, as either replica (one may
	// still be rebuilding its state from the new primary) shows it, and
	// ran once.
	ctx := context.Background()
	lost, doubled := 0, 0
	for id, run := range acked {
		completed := func() bool {
			for _, te := range []*testEngine{a, b} {
				if r, ok, _ := te.find(ctx, run); ok && r.Status == runCompleted {
					return true
				}
			}
			return false
		}
		deadline := time.Now().Add(60 * time.Second)
		for !completed() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !completed() {
			lost++
			var seen []string
			for i, te := range []*testEngine{a, b} {
				r, ok, err := te.find(ctx, run)
				seen = append(seen, fmt.Sprintf("replica %d (%s, journal %+v, store %+v): found %v (%v), status %q, owner %q, %d calls",
					i, te.self, te.journalHealth(), te.storeHealth(), ok, err, r.Status, r.Owner, len(r.Steps)))
			}
			t.Errorf("acknowledged run %s (%s) never completed on either replica:\n%s", run, id, strings.Join(seen, "\n"))
		}
	}
	for _, te := range []*testEngine{a, b} {
		runs := map[string]int{}
		list, _ := te.list()
		for _, r := range list {
			runs[string(r.Input)]++
		}
		for id := range acked {
			if runs[`{"id":"`+id+`"}`] > 1 {
				doubled++
			}
		}
	}
	t.Logf("pg_auto_failover, two replicas, a start every 50 ms: %d acknowledged, %d refused as not recorded, %d outcome unknown; lost %d, doubled %d; longest gap between acknowledged starts %v",
		len(acked), refused, unknown, lost, doubled, outage.Round(10*time.Millisecond))
	if lost != 0 || doubled != 0 {
		t.Errorf("lost %d acknowledged starts, doubled %d", lost, doubled)
	}
}
