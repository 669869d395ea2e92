package main

// One engine suite, two stores (STYLE 20): eachEngineStore runs a test body
// on the file journal and on PostgreSQL, and the helpers below read and
// write a store's records whichever it is, so the bodies never name one.

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// engineTestStores are the stores the engine suite runs on.
var engineTestStores = []string{engineKindFile, engineKindPostgres}

// eachEngineStore runs body once per store, as subtests named by it.
func eachEngineStore(t *testing.T, body func(t *testing.T, store string)) {
	for _, s := range engineTestStores {
		t.Run(s, func(t *testing.T) { body(t, s) })
	}
}

// engineTestLease is the lease of test engines on PostgreSQL: short, so
// that takeover tests are quick.
var engineTestLease = engineSettings{Kind: engineKindPostgres, Lease: 2 * time.Second, Renew: 500 * time.Millisecond}

// storeFor returns te's store: the journal under its project, or the
// svc_engine schema of its database (a fresh one per test).
func (te *testEngine) storeFor(t *testing.T) engineStore {
	if te.store != engineKindPostgres {
		return engineStoreFile{dir: te.journalDir()}
	}
	if te.pool == nil {
		te.pool = historyTestDB(t)
	}
	return newEngineStorePG(te.pool, engineTestLease, discardLogger())
}

// journalDir is the file store's directory.
func (te *testEngine) journalDir() string { return te.dir + "/.svc/journal" }

// records calls fn with every record of the closed engine's log after its
// snapshot, in order.
func (te *testEngine) records(t *testing.T, fn func([]byte)) {
	t.Helper()
	if te.store != engineKindPostgres {
		j, err := openJournal(te.journalDir(), journalOptions{}, func([]byte) error { return nil }, func(b []byte) error { fn(b); return nil })
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
		return
	}
	rows, err := te.pool.Query(context.Background(), `SELECT data FROM svc_engine.events WHERE part = 0 ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range recs {
		fn(b)
	}
}

// appendRaw writes records, as they are, to the closed engine's log.
func (te *testEngine) appendRaw(t *testing.T, recs ...string) {
	t.Helper()
	if te.store != engineKindPostgres {
		j, err := openJournal(te.journalDir(), journalOptions{}, func([]byte) error { return nil }, func([]byte) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		for _, r := range recs {
			if err := j.AppendDurable([]byte(r)); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for _, r := range recs {
		if _, err := te.pool.Exec(context.Background(), `INSERT INTO svc_engine.events (data) VALUES ($1)`, []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
}

// lastSnapshot returns the newest snapshot of the log (nil: none).
func (te *testEngine) lastSnapshot(t *testing.T) []byte {
	t.Helper()
	if te.store != engineKindPostgres {
		snaps, _ := filepath.Glob(te.journalDir() + "/*.snap")
		if len(snaps) == 0 {
			return nil
		}
		slices.Sort(snaps)
		b, err := os.ReadFile(snaps[len(snaps)-1])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var b []byte
	err := te.pool.QueryRow(context.Background(), `SELECT data FROM svc_engine.snapshots WHERE part = 0`).Scan(&b)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return b
}

// savedVersions lists the versions the store keeps.
func (te *testEngine) savedVersions(t *testing.T) []string {
	t.Helper()
	if te.store != engineKindPostgres {
		files, _ := filepath.Glob(te.journalDir() + "/" + versionsDir + "/*.json")
		for i, f := range files {
			files[i] = strings.TrimSuffix(filepath.Base(f), ".json")
		}
		return files
	}
	rows, err := te.pool.Query(context.Background(), `SELECT hash FROM svc_engine.versions`)
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return hashes
}

// TestEngineStorePGFencing checks the replicas' leases of the PostgreSQL
// store: two replicas append to one log and each is delivered every event,
// the other's too, in one order; once a stalls past its lease, b reaps it
// (deleting its row and appending the claim of its runs), and every write
// of a is refused and it reports the lease lost; a graceful close appends
// a release.
func TestEngineStorePGFencing(t *testing.T) {
	pool := historyTestDB(t)
	nop := func([]byte) error { return nil }
	type got struct {
		mu   sync.Mutex
		recs []string
	}
	hooks := func(g *got, lost chan error) engineLogHooks {
		return engineLogHooks{onFail: func(err error) { lost <- err }, onSnapshot: nop, onRecord: nop, claim: claimRecord,
			deliver: func(recs [][]byte, _ int64) {
				g.mu.Lock()
				defer g.mu.Unlock()
				for _, r := range recs {
					g.recs = append(g.recs, string(r))
				}
			}}
	}
	var ga, gb got
	lostA, lostB := make(chan error, 1), make(chan error, 1)
	a := newEngineStorePG(pool, engineSettings{Lease: time.Hour, Renew: time.Hour}, discardLogger())
	la, err := a.open(hooks(&ga, lostA))
	if err != nil {
		t.Fatal(err)
	}
	b := newEngineStorePG(pool, engineTestLease, discardLogger())
	lb, err := b.open(hooks(&gb, lostB))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.close()
	if b.health().Epoch <= a.health().Epoch || b.health().Lease != engineLeaseHeld {
		t.Fatalf("second replica: %+v (first %+v); want its own lease at a later epoch", b.health(), a.health())
	}
	if err := la.append([]byte(`{"t":"probe","n":1}`), commitDurable).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := lb.append([]byte(`{"t":"probe","n":2}`), commitDurable).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := la.append([]byte(`{"t":"probe","n":3}`), commitSoon).Wait(); err != nil {
		t.Fatal(err)
	}
	// The appender is delivered what the other wrote before its own.
	ga.mu.Lock()
	if want := []string{`{"t":"probe","n":1}`, `{"t":"probe","n":2}`, `{"t":"probe","n":3}`}; !slices.Equal(ga.recs, want) {
		t.Errorf("a was delivered %q; want %q", ga.recs, want)
	}
	ga.mu.Unlock()
	// A stall: a's lease runs out without a renewal (its renewer waits an
	// hour, after the one it makes when it opens, which may land after
	// this: so again until b reaps); b's renewer sees it and reaps a.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := pool.Exec(context.Background(), `UPDATE svc_engine.replicas SET lease_until = now() - interval '1 second' WHERE owner = $1`, a.owner); err != nil {
			t.Fatal(err)
		}
		gb.mu.Lock()
		n := len(gb.recs)
		last := ""
		if n > 0 {
			last = gb.recs[n-1]
		}
		gb.mu.Unlock()
		if strings.Contains(last, `"t":"claim"`) && strings.Contains(last, `"fr":"`+a.owner+`"`) && strings.Contains(last, `"by":"`+b.owner+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never claimed a's runs; delivered %q", gb.recs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// a wakes and writes: refused, nothing lands.
	if err := la.append([]byte(`{"t":"probe","n":4}`), commitDurable).Wait(); !errors.Is(err, errEngineLeaseLost) {
		t.Fatalf("stalled replica's write = %v; want errEngineLeaseLost", err)
	}
	if err := <-lostA; !errors.Is(err, errEngineLeaseLost) || a.health().Lease != engineLeaseLost {
		t.Fatalf("stalled replica told %v, health %+v; want the lease lost", err, a.health())
	}
	var n int
	pool.QueryRow(context.Background(), `SELECT count(*) FROM svc_engine.events WHERE convert_from(data, 'UTF8') LIKE '%"n":4%'`).Scan(&n)
	if n != 0 {
		t.Fatal("the stalled replica's write landed")
	}
	la.close()
	if err := lb.append([]byte(`{"t":"probe","n":5}`), commitSoon).Wait(); err != nil {
		t.Fatalf("live replica's write = %v", err)
	}
	// A graceful close appends a release and leaves.
	lb.close()
	var release, rows int
	pool.QueryRow(context.Background(), `SELECT count(*) FROM svc_engine.events WHERE convert_from(data, 'UTF8') LIKE '%"t":"claim"%"fr":"`+b.owner+`"%'`).Scan(&release)
	pool.QueryRow(context.Background(), `SELECT count(*) FROM svc_engine.replicas`).Scan(&rows)
	if release != 1 || rows != 0 || b.health().Lease != engineLeaseReleased {
		t.Fatalf("after a graceful close: %d releases, %d replica rows, %+v; want one release, no rows", release, rows, b.health())
	}
}

// TestEngineStorePGStalledInTx: a replica stalled inside its append
// transaction (here a session that set up its transaction as the store does,
// took the append lock, and then sent nothing) does not hold up the others'
// appends: PostgreSQL ends its session after idleInTx, the lock goes with
// it, and nothing it began lands.
func TestEngineStorePGStalledInTx(t *testing.T) {
	pool := historyTestDB(t)
	nop := func([]byte) error { return nil }
	s := newEngineStorePG(pool, engineTestLease, discardLogger())
	l, err := s.open(engineLogHooks{onFail: func(error) {}, onSnapshot: nop, onRecord: nop, claim: claimRecord, deliver: func([][]byte, int64) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	ctx := context.Background()
	stalled, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Rollback(ctx)
	if err := s.beginTx(ctx, stalled, "on"); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Exec(ctx, engineStorePGOrderSQL, s.part); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Exec(ctx, `INSERT INTO svc_engine.events (data) VALUES ('{"t":"probe","n":0}')`); err != nil {
		t.Fatal(err)
	}
	// The append waits for the lock (its own timeout is engineStorePGWriteTimeout,
	// well past idleInTx), then commits.
	if err := l.append([]byte(`{"t":"probe","n":1}`), commitDurable).Wait(); err != nil {
		t.Fatalf("append while another session stalls holding the append lock = %v; want it to commit once PostgreSQL ends that session", err)
	}
	if _, err := stalled.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("the stalled session still works; want it ended by idle_in_transaction_session_timeout")
	}
	var n int
	pool.QueryRow(ctx, `SELECT count(*) FROM svc_engine.events WHERE convert_from(data, 'UTF8') LIKE '%"n":0%'`).Scan(&n)
	if n != 0 {
		t.Error("the stalled session's insert landed")
	}
}

// engineTestLog is what a log of the PostgreSQL store delivered, by
// engineTestHooks: the records as strings, and the last seq.
type engineTestLog struct {
	mu   sync.Mutex
	recs []string
	upto int64
}

// delivered returns the records delivered so far and the last seq.
func (g *engineTestLog) delivered() ([]string, int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.recs), g.upto
}

// engineTestHooks are the hooks of a log whose deliveries g collects and
// whose replay calls snap and rec.
func engineTestHooks(g *engineTestLog, snap, rec func([]byte) error) engineLogHooks {
	return engineLogHooks{onFail: func(error) {}, onSnapshot: snap, onRecord: rec, claim: claimRecord,
		deliver: func(recs [][]byte, upto int64) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, r := range recs {
				g.recs = append(g.recs, string(r))
			}
			g.upto = upto
		}}
}

// engineTestReplay opens a log of a new replica on s's partition p, and
// returns the snapshot and the records its replay read; the log stays open
// until the test ends (closing it would append its release).
func engineTestReplay(t *testing.T, s *engineStorePG, p int) (snap string, recs []string) {
	t.Helper()
	fresh := newEngineStorePG(s.db, engineTestLease, discardLogger()).partition(p)
	l, err := fresh.open(engineTestHooks(&engineTestLog{},
		func(b []byte) error { snap = string(b); return nil },
		func(b []byte) error { recs = append(recs, string(b)); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.close() })
	return snap, recs
}

// TestEngineStorePGPartitions: the partitions of the PostgreSQL store are
// independent logs on one database. Two replicas append to partitions 0
// and 1 (one of them to both); each log is delivered only its partition's
// events, in their order, and counts only its partition's replicas; a
// compaction of partition 0 writes its snapshot and deletes its events
// and leaves partition 1's alone; a new replica of each partition replays
// exactly that partition's snapshot and events. The number of partitions
// is the one the first process asked for.
func TestEngineStorePGPartitions(t *testing.T) {
	pool := historyTestDB(t)
	ctx := context.Background()
	nop := func([]byte) error { return nil }
	a := newEngineStorePG(pool, engineTestLease, discardLogger())
	b := newEngineStorePG(pool, engineTestLease, discardLogger())
	for _, bad := range []int{0, -1, enginePartitionsMax + 1} {
		if n, err := a.partitions(ctx, bad); err == nil {
			t.Errorf("partitions(%d) = %d; want it refused", bad, n)
		}
	}
	if n, err := a.partitions(ctx, 8); err != nil || n != 8 {
		t.Fatalf("first partitions(8) = %d %v; want 8", n, err)
	}
	if n, err := b.partitions(ctx, 4); err != nil || n != 8 {
		t.Fatalf("a later partitions(4) = %d %v; want the stored 8", n, err)
	}
	a1 := a.partition(1)
	if a.part != 0 || a1.part != 1 || a1.replica() != a.replica() {
		t.Fatalf("partitions %d and %d of replica %s, %s; want 0 and 1 of one replica", a.part, a1.part, a.replica(), a1.replica())
	}
	var g0, g1, gb1 engineTestLog
	open := func(s *engineStorePG, g *engineTestLog) engineLog {
		l, err := s.open(engineTestHooks(g, nop, nop))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.close() })
		return l
	}
	l0, l1, lb1 := open(a, &g0), open(a1, &g1), open(b.partition(1), &gb1)
	if a.health().Epoch == a1.health().Epoch || a1.health().Lease != engineLeaseHeld {
		t.Fatalf("partition 0 %+v, partition 1 %+v; want a lease of each, at its own epoch", a.health(), a1.health())
	}
	write := func(l engineLog, rec string) {
		t.Helper()
		if err := l.append([]byte(rec), commitDurable).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	write(l0, "p0-1")
	write(l1, "p1-1")
	write(lb1, "p1-2")
	write(l0, "p0-2")
	write(l1, "p1-3")
	if got, _ := g0.delivered(); !slices.Equal(got, []string{"p0-1", "p0-2"}) {
		t.Errorf("partition 0's log was delivered %q; want its own two events", got)
	}
	if got, _ := g1.delivered(); !slices.Equal(got, []string{"p1-1", "p1-2", "p1-3"}) {
		t.Errorf("partition 1's log on a was delivered %q; want partition 1's three events, in order", got)
	}
	eventually(t, 10*time.Second, "b's log of partition 1 delivered a's later event", func() bool {
		got, _ := gb1.delivered()
		return slices.Equal(got, []string{"p1-1", "p1-2", "p1-3"})
	})
	eventually(t, 10*time.Second, "each partition's renewal counting its own replicas", func() bool {
		return a.health().Replicas == 1 && a1.health().Replicas == 2
	})
	var listening int
	pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN `+engineStorePGChannel+`1'`).Scan(&listening)
	if listening != 2 {
		t.Errorf("%d sessions listen on partition 1's channel; want its two replicas'", listening)
	}

	// Compacting partition 0 leaves partition 1 whole.
	_, upto := g0.delivered()
	c, err := l0.beginCompact(upto)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish([]byte("snap-0")); err != nil {
		t.Fatal(err)
	}
	var events0, events1, snaps1 int
	pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE part = 0), count(*) FILTER (WHERE part = 1) FROM svc_engine.events`).Scan(&events0, &events1)
	pool.QueryRow(ctx, `SELECT count(*) FROM svc_engine.snapshots WHERE part = 1`).Scan(&snaps1)
	if events0 != 0 || events1 != 3 || snaps1 != 0 {
		t.Errorf("after compacting partition 0: %d events of it, %d of partition 1, %d snapshots of partition 1; want 0, 3, 0", events0, events1, snaps1)
	}
	write(l0, "p0-3")
	if snap, recs := engineTestReplay(t, a, 0); snap != "snap-0" || !slices.Equal(recs, []string{"p0-3"}) {
		t.Errorf("a new replica of partition 0 replayed snapshot %q and %q; want snap-0, then p0-3", snap, recs)
	}
	if snap, recs := engineTestReplay(t, a, 1); snap != "" || !slices.Equal(recs, []string{"p1-1", "p1-2", "p1-3"}) {
		t.Errorf("a new replica of partition 1 replayed snapshot %q and %q; want none, then partition 1's three events", snap, recs)
	}
}

// TestEngineStorePGUpgradesOneLog: a database of the version before
// partitions (events with no partition, one snapshot row, replicas keyed by
// name alone) becomes partition 0 of the partitioned schema: its snapshot
// and later events replay there, partition 1 is empty, the old version's
// replica rows are gone, the number of partitions is the one first asked
// for, and making sure of the schema again changes nothing.
func TestEngineStorePGUpgradesOneLog(t *testing.T) {
	pool := historyTestDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA svc_engine;
CREATE TABLE svc_engine.events (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE svc_engine.snapshot (id int PRIMARY KEY CHECK (id = 1), upto bigint NOT NULL, data bytea NOT NULL);
CREATE TABLE svc_engine.versions (hash text PRIMARY KEY, data bytea NOT NULL, saved_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE svc_engine.replicas (owner text PRIMARY KEY, epoch bigint NOT NULL, lease_until timestamptz NOT NULL,
    applied bigint NOT NULL DEFAULT 0, joined_at timestamptz NOT NULL DEFAULT now());
CREATE SEQUENCE svc_engine.epochs;
INSERT INTO svc_engine.events (data) VALUES ('old-1'), ('old-2'), ('old-3');
INSERT INTO svc_engine.snapshot (id, upto, data) VALUES (1, 1, 'old-snap');
INSERT INTO svc_engine.replicas (owner, epoch, lease_until) VALUES ('old/1/x', nextval('svc_engine.epochs'), now() + interval '1 hour');`); err != nil {
		t.Fatal(err)
	}
	s := newEngineStorePG(pool, engineTestLease, discardLogger())
	if n, err := s.partitions(ctx, 4); err != nil || n != 4 {
		t.Fatalf("partitions(4) on the one-log schema = %d %v; want 4", n, err)
	}
	if snap, recs := engineTestReplay(t, s, 0); snap != "old-snap" || !slices.Equal(recs, []string{"old-2", "old-3"}) {
		t.Errorf("partition 0 after the upgrade replayed snapshot %q and %q; want the old snapshot and events", snap, recs)
	}
	if snap, recs := engineTestReplay(t, s, 1); snap != "" || len(recs) != 0 {
		t.Errorf("partition 1 after the upgrade replayed snapshot %q and %q; want nothing", snap, recs)
	}
	var old, snapshot int
	pool.QueryRow(ctx, `SELECT count(*) FROM svc_engine.replicas WHERE owner = 'old/1/x'`).Scan(&old)
	pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'svc_engine' AND tablename = 'snapshot'`).Scan(&snapshot)
	if old != 0 || snapshot != 0 {
		t.Errorf("after the upgrade: %d rows of the old version's replica, %d old snapshot tables; want none", old, snapshot)
	}
	again := newEngineStorePG(pool, engineTestLease, discardLogger())
	if n, err := again.partitions(ctx, 2); err != nil || n != 4 {
		t.Fatalf("partitions(2) on the upgraded schema = %d %v; want the stored 4", n, err)
	}
	if snap, recs := engineTestReplay(t, again, 0); snap != "old-snap" || !slices.Equal(recs, []string{"old-2", "old-3"}) {
		t.Errorf("partition 0 after making sure of the schema again replayed snapshot %q and %q; want the same", snap, recs)
	}
}

// historyPool is the database of te's run history: its store's on
// PostgreSQL, else a fresh one.
func (te *testEngine) historyPool(t *testing.T) *pgxpool.Pool {
	if te.pool != nil {
		return te.pool
	}
	return historyTestDB(t)
}

// TestEngineSelection checks SVC_ENGINE and its settings as svc serve and
// svc dev read them: file by default, postgres on request, anything else
// refused before anything starts, naming the variable; svc serve refuses
// the PostgreSQL engine with the built-in object storage unless
// SVC_S3_ENDPOINT or SVC_STORAGE_LOCAL_OK=1 says otherwise.
func TestEngineSelection(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if s, err := readEngineSettings(env()); err != nil || s.Kind != engineKindFile || s.Lease != engineLeaseDefault || s.Renew != engineLeaseRenewDefault {
		t.Errorf("defaults = %+v %v; want the file journal, 8s/3s", s, err)
	}
	if s, err := readEngineSettings(env("SVC_ENGINE", "postgres", "SVC_ENGINE_LEASE", "20s", "SVC_ENGINE_LEASE_RENEW", "5s", "SVC_ENGINE_PARTITIONS", "4")); err != nil ||
		s.Kind != engineKindPostgres || s.Lease != 20*time.Second || s.Renew != 5*time.Second || s.Partitions != 4 {
		t.Errorf("postgres 20s/5s, 4 partitions = %+v %v", s, err)
	}
	for _, bad := range [][]string{{"SVC_ENGINE", "Postgres"}, {"SVC_ENGINE", "sqlite"}, {"SVC_ENGINE", strings.Repeat("x", 10000)},
		{"SVC_ENGINE_LEASE", "10"}, {"SVC_ENGINE_LEASE", "-1s"}, {"SVC_ENGINE_LEASE", "2s"}, {"SVC_ENGINE_LEASE_RENEW", "9s"},
		{"SVC_ENGINE_PARTITIONS", "0"}, {"SVC_ENGINE_PARTITIONS", "257"}, {"SVC_ENGINE_PARTITIONS", "4x"}} {
		_, err := readEngineSettings(env(bad...))
		if err == nil || !strings.Contains(err.Error(), bad[0]) || len(err.Error()) > 400 {
			t.Errorf("%s=%.20q: %v; want a bounded refusal naming the variable", bad[0], bad[1], err)
		}
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--json", "serve", "--data", t.TempDir(), dir}, []string{"SVC_ENGINE", "nosuch"}, "SVC_ENGINE"},
		{[]string{"--json", "dev"}, []string{"SVC_ENGINE", "nosuch"}, "SVC_ENGINE"},
		{[]string{"--json", "serve", "--data", t.TempDir(), dir}, []string{"SVC_ENGINE", "postgres"}, "SVC_STORAGE_LOCAL_OK=1"},
	} {
		var out, errOut strings.Builder
		code := run(context.Background(), tc.args, cliIO{stdout: &out, stderr: &errOut, getenv: env(tc.env...), dir: dir})
		if code != 1 || !strings.Contains(out.String(), tc.want) || !strings.Contains(out.String(), `"ok":false`) {
			t.Errorf("%v with %v: exit %d %s; want exit 1 naming %s", tc.args, tc.env, code, out.String(), tc.want)
		}
	}
}

// TestEngineStorePGHidesTheDatabase opens the PostgreSQL store on a
// database that does not answer: the error, which reaches the health
// route and 503 answers, names what failed but not the database's host,
// user or name.
func TestEngineStorePGHidesTheDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	pool, err := pgxpool.New(context.Background(), "postgres://secretuser:pw@"+addr+"/secretdb?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	nop := func([]byte) error { return nil }
	_, err = newEngineStorePG(pool, engineTestLease, discardLogger()).open(engineLogHooks{onSnapshot: nop, onRecord: nop})
	if err == nil || !strings.Contains(err.Error(), "svc_engine") {
		t.Fatalf("open on a database that does not answer = %v; want an error naming what failed", err)
	}
	for _, leak := range []string{"secretuser", "secretdb", addr} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("the error names %q: %v", leak, err)
		}
	}
}

// engineStaleStore is a store whose log, while stale is set, says its lease
// is not surely held (engineLog.fresh), as a replica's does when it stalled
// past its lease.
type engineStaleStore struct {
	engineStore
	stale *atomic.Bool
}

// open opens the store's log, wrapped.
func (s engineStaleStore) open(h engineLogHooks) (engineLog, error) {
	l, err := s.engineStore.open(h)
	if err != nil {
		return nil, err
	}
	return engineStaleLog{engineLog: l, stale: s.stale}, nil
}

// engineStaleLog is engineStaleStore's log.
type engineStaleLog struct {
	engineLog
	stale *atomic.Bool
}

// fresh is false while stale is set.
func (l engineStaleLog) fresh() bool { return !l.stale.Load() && l.engineLog.fresh() }

// TestEngineStaleLeaseStartsNoStep: an execution that finds its lease not
// surely held between two steps (a replica that stalled mid-execution, past
// a sleep that came due meanwhile, while another claimed the run) starts no
// further step. The run suspends and goes on once the lease holds again,
// each step run once. Before, only the start of an execution looked, so
// TestEngineReplicas's stalled replica once ran the stalled run's last step
// after its new owner had ended the run.
func TestEngineStaleLeaseStartsNoStep(t *testing.T) {
	te := newTestEngine(t)
	te.close()
	te.stale = new(atomic.Bool)
	te.open(t)
	rc, err := te.start(startRequest{Workflow: "three", Input: []byte(`{"id":"hold"}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-te.counter.held: // its first step runs
	case <-time.After(20 * time.Second):
		t.Fatal("the first step did not start")
	}
	te.stale.Store(true)
	close(te.counter.unhold)
	eventually(t, 20*time.Second, "the execution to suspend", func() bool {
		te.mu.Lock()
		defer te.mu.Unlock()
		r := te.st.Runs[rc.RunID]
		return r != nil && !r.executing && r.call(1) != nil && r.call(1).EndedAt != nil
	})
	if r, _ := te.get(rc.RunID); terminal(r.Status) || te.counter.count("hold-b") != 0 {
		t.Fatalf("with the lease not surely held: run %s, second step ran %d times; want it not ended, the step not run", r.Status, te.counter.count("hold-b"))
	}
	te.stale.Store(false)
	r := te.await(t, rc.RunID)
	if r.Status != runCompleted || te.counter.count("hold-a") != 1 || te.counter.count("hold-b") != 1 || te.counter.count("hold-c") != 1 {
		t.Fatalf("run %s, steps ran %d, %d, %d times; want completed, once each", r.Status,
			te.counter.count("hold-a"), te.counter.count("hold-b"), te.counter.count("hold-c"))
	}
}
