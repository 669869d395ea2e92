package main

// The engine's store on PostgreSQL (SVC_ENGINE=postgres, DESIGN §12): the
// events, the snapshots and the pinned versions live in schema svc_engine
// of the runtime's database, so nothing of the engine's state is on the
// replica's disk, and several replicas share them, active/active.
//
// Partitions. The log is split into a fixed number of partitions, as a
// history service splits its history into shards: svc_engine.config holds
// the number, fixed when the schema is first created (partitions). Each
// partition is the shared log described below, scoped by its number part:
// its own order of events, snapshot, replicas' rows (leases, fencing,
// claims, reaping), append lock and notification channel; nothing of one
// partition waits for or reads another's. A process opens one log per
// partition it owns (engine_fleet.go), each on the store partition returns,
// and the engine on it sees that partition as the log.
//
// Tables (created by ensureSchema, idempotent, under an advisory lock so
// that replicas booting together do not race): events (seq from one
// identity sequence across partitions, the partition, the encoded event),
// snapshots (one row per partition: its state as of seq upto; replay reads
// it, then the partition's events after it, so boot time follows active
// work, not history), versions (compiled workflow versions by content
// hash, so a replica on a newer image continues an older run; one set for
// every partition), replicas (one row per live replica of a partition: its
// name, epoch, lease_until and the seq it has applied), config (the number
// of partitions).
//
// One log, one order. Every replica of a partition appends to its events
// and applies every one of them in seq order, its own included, so every
// replica's state is the same function of the same log (engine_replica.go).
// An append transaction takes the partition's advisory lock before it
// inserts, so the partition's seqs become visible in commit order: a reader
// that saw seq n never later finds a smaller one there. In the same
// transaction the appender reads the events others committed since its last
// delivery, and delivers them, then its own, to the engine. The transaction
// is one pipelined batch, one round trip, unless it reaps or leaves. Idle
// replicas learn of new events by LISTEN/NOTIFY (channel svc_engine_<part>,
// the payload naming the writer, which skips its own) and a jittered poll
// about every second.
//
// Leases, fenced. A replica's row is its lease: it renews lease_until every
// Renew in one statement. Every append locks the writer's row FOR SHARE
// and inserts only while it exists at the writer's epoch and has not
// expired. A replica that finds another's lease expired deletes that row
// (which waits for the dead one's append in flight) and, in the same
// transaction, appends the claim by which the runs the dead one owned
// become its own; a stalled replica that wakes finds its row gone, writes
// nothing, and rejoins under a new epoch. A replica that closes gracefully
// appends a release (its runs owned by nobody) and deletes its row; the
// others claim the released runs at once.
//
// Commits: a batch some caller needs on disk commits with
// synchronous_commit on; any other with it off. PostgreSQL's WAL is one
// sequence, so a durable commit also makes every earlier batch durable: a
// crash loses at most a suffix of the non-durable events, as on the file
// journal.
//
// Compaction: any replica writes the snapshot of the state it applied up
// to seq upto (only if newer than the one stored) and deletes the events
// every live replica of the partition has applied.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// engineStorePGSchemaSQL creates the schema; it runs as one implicit
// transaction holding an advisory lock, so concurrent boots do not race.
// It upgrades the one-log schema of the version before partitions: its
// events become partition 0's (the column's default), and so does its
// snapshot; its replicas table is dropped and made again keyed by
// partition, so stop the processes of that version before replicas of this
// one start (as the engine-wide lease of the active/passive version, also
// dropped, needed). The upgrade's steps look at the catalog first, so on a
// schema already up to date it takes no lock on a table, which would hold
// up the running replicas' appends.
const engineStorePGSchemaSQL = `SELECT pg_advisory_xact_lock(hashtext('svc_engine schema'));
CREATE SCHEMA IF NOT EXISTS svc_engine;
CREATE TABLE IF NOT EXISTS svc_engine.config (id int PRIMARY KEY CHECK (id = 1), partitions int NOT NULL);
CREATE TABLE IF NOT EXISTS svc_engine.events (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, part int NOT NULL DEFAULT 0, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS svc_engine.snapshots (part int PRIMARY KEY, upto bigint NOT NULL, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS svc_engine.versions (hash text PRIMARY KEY, data bytea NOT NULL, saved_at timestamptz NOT NULL DEFAULT now());
CREATE SEQUENCE IF NOT EXISTS svc_engine.epochs;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('svc_engine.events') AND attname = 'part' AND NOT attisdropped) THEN
        ALTER TABLE svc_engine.events ADD COLUMN part int NOT NULL DEFAULT 0;
    END IF;
    IF to_regclass('svc_engine.events_part_seq') IS NULL THEN
        CREATE INDEX events_part_seq ON svc_engine.events (part, seq);
    END IF;
    IF to_regclass('svc_engine.snapshot') IS NOT NULL THEN
        EXECUTE 'INSERT INTO svc_engine.snapshots (part, upto, data) SELECT 0, upto, data FROM svc_engine.snapshot ON CONFLICT (part) DO NOTHING';
        EXECUTE 'DROP TABLE svc_engine.snapshot';
    END IF;
    IF to_regclass('svc_engine.replicas') IS NOT NULL
        AND NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('svc_engine.replicas') AND attname = 'part' AND NOT attisdropped) THEN
        EXECUTE 'DROP TABLE svc_engine.replicas';
    END IF;
END
$$;
CREATE TABLE IF NOT EXISTS svc_engine.replicas (part int NOT NULL DEFAULT 0, owner text NOT NULL, epoch bigint NOT NULL, lease_until timestamptz NOT NULL,
    applied bigint NOT NULL DEFAULT 0, joined_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (part, owner));
DROP TABLE IF EXISTS svc_engine.lease;`

// engineStorePGJoinSQL registers this replica in partition $1 under a new
// epoch.
const engineStorePGJoinSQL = `INSERT INTO svc_engine.replicas (part, owner, epoch, lease_until)
VALUES ($1, $2, nextval('svc_engine.epochs'), now() + $3 * interval '1 millisecond')
ON CONFLICT (part, owner) DO UPDATE SET epoch = excluded.epoch, lease_until = excluded.lease_until, applied = 0, joined_at = now()
RETURNING epoch`

// engineStorePGRenewSQL extends this replica's lease in partition $1 while
// it holds it at its epoch, reports what it applied, counts the
// partition's live replicas, and says in how many milliseconds the first
// other replica's lease there expires (0 or less: already; a day when
// there is none), so its runs are claimed then.
const engineStorePGRenewSQL = `WITH u AS (UPDATE svc_engine.replicas SET lease_until = now() + $4 * interval '1 millisecond', applied = $5
    WHERE part = $1 AND owner = $2 AND epoch = $3 RETURNING 1)
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM svc_engine.replicas WHERE part = $1 AND lease_until > now()),
    coalesce(floor(extract(epoch FROM (SELECT min(lease_until) FROM svc_engine.replicas WHERE part = $1 AND owner <> $2) - now()) * 1000), 86400000)::bigint`

// engineStorePGTxSQL opens every transaction of the store that takes a
// lock: synchronous_commit as its batch needs ($1), and an
// idle_in_transaction_session_timeout ($2, ms) after which PostgreSQL ends
// the session. A replica stalled inside a transaction (SIGSTOP, a paused
// VM, a partition that leaves its socket open) would otherwise hold the
// append lock every replica takes turns on, and the fleet's appends with
// it, until it woke; a healthy replica is never idle in one for more than
// a round trip.
const engineStorePGTxSQL = `SELECT set_config('synchronous_commit', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)`

// engineStorePGOrderSQL makes the appends to partition $1 take turns:
// its seqs become visible in the order they were drawn.
const engineStorePGOrderSQL = `SELECT pg_advisory_xact_lock(hashtext('svc_engine append'), $1)`

// engineStorePGHeldSQL is the fence of every write: a share lock on this
// replica's row in partition $1, which exists only while it holds its lease
// at its epoch.
const engineStorePGHeldSQL = `SELECT 1 FROM svc_engine.replicas WHERE part = $1 AND owner = $3 AND epoch = $4 AND lease_until > now() FOR SHARE`

// engineStorePGAppendSQL inserts a batch ($2) into partition $1, in order,
// only under the fence; it returns how many events it inserted and the
// last seq.
const engineStorePGAppendSQL = `WITH held AS (` + engineStorePGHeldSQL + `),
ins AS (INSERT INTO svc_engine.events (part, data)
    SELECT $1::int, d FROM unnest($2::bytea[]) WITH ORDINALITY AS t(d, n) WHERE EXISTS (SELECT FROM held) ORDER BY n RETURNING seq)
SELECT count(*), coalesce(max(seq), 0) FROM ins`

// engineStorePGReadSQL reads the events of partition $1 after a seq, in
// order.
const engineStorePGReadSQL = `SELECT seq, data FROM svc_engine.events WHERE part = $1 AND seq > $2 ORDER BY seq LIMIT $3`

// engineStorePGNotifySQL tells the other replicas of partition $3 of an
// append; the payload names the writer, whose listener skips it (the
// writer delivers its own events when the append commits). It notifies
// only while another replica of the partition holds a live lease: a
// notifying transaction holds PostgreSQL's cluster-wide notification lock
// from before its commit until its WAL is flushed, so every notifying
// commit of every replica waits for the one before it, one flush each,
// where commits that do not notify share flushes. A partition has one
// replica but during a handover, so most appends need not notify; a
// replica that joins after the check learns of the append by its poll.
const engineStorePGNotifySQL = `SELECT pg_notify($1, $2) WHERE EXISTS (
    SELECT FROM svc_engine.replicas WHERE part = $3 AND owner <> $2 AND lease_until > now())`

// engineStorePGReapSQL deletes the rows of partition $1's replicas whose
// lease expired (waiting for an append of theirs in flight), naming them.
const engineStorePGReapSQL = `DELETE FROM svc_engine.replicas WHERE part = $1 AND lease_until <= now() RETURNING owner`

// engineStorePGLiveSQL names partition $1's live replicas, in order.
const engineStorePGLiveSQL = `SELECT owner FROM svc_engine.replicas WHERE part = $1 AND lease_until > now() ORDER BY owner`

// engineStorePGLeaveSQL deletes this replica's row in partition $1 at its
// epoch, if it is still there.
const engineStorePGLeaveSQL = `DELETE FROM svc_engine.replicas WHERE part = $1 AND owner = $2 AND epoch = $3`

// Bounds of the PostgreSQL store's statements and loops.
const (
	engineStorePGWriteTimeout  = 10 * time.Second
	engineStorePGReplayTimeout = 5 * time.Minute
	engineStorePGCloseTimeout  = 10 * time.Second
	// engineStorePGReadBatch is the most events one read delivers.
	engineStorePGReadBatch = 2000
	// engineStorePGReadAll is the limit of an appender's read: all of them.
	engineStorePGReadAll = 1 << 30
)

// engineStorePGChannel starts the NOTIFY channel of a partition's new
// events: svc_engine_0, svc_engine_1 and so on (engineStorePG.channel).
const engineStorePGChannel = "svc_engine_"

// Lease states of the health route.
const (
	engineLeaseHeld     = "held"
	engineLeaseLost     = "lost"
	engineLeaseReleased = "released"
)

// engineStorePG is the engine's store in db's schema svc_engine: the log
// of partition part. The stores of one process's partitions (partition)
// share everything but the partition and its lease.
type engineStorePG struct {
	db           *pgxpool.Pool
	owner        string // this replica: host, pid and a random suffix
	lease, renew time.Duration
	poll         time.Duration // SVC_ENGINE_POLL
	log          *slog.Logger
	schema       *engineStorePGSchema
	combiner     *engineStorePGCombiner // shared by the process's partitions: their appends commit together
	part         int                    // the partition, in [0, partitions)

	mu       sync.Mutex // guards state, epoch and replicas
	state    string
	epoch    int64
	replicas int

	metrics *metrics // each batch's commit; nil records nothing
}

// engineStorePGSchema is whether this process made sure of svc_engine,
// shared by its partitions' stores: once per process.
type engineStorePGSchema struct {
	mu sync.Mutex
	ok bool
}

// newEngineStorePG returns the store of partition 0 on db with the lease
// settings of s.
func newEngineStorePG(db *pgxpool.Pool, s engineSettings, log *slog.Logger) *engineStorePG {
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
	return &engineStorePG{db: db, owner: owner, lease: s.Lease, renew: s.Renew, poll: cmp.Or(s.Poll, enginePollDefault), log: log,
		schema: &engineStorePGSchema{}, combiner: &engineStorePGCombiner{db: db}, state: engineLeaseReleased}
}

// partition returns the store of partition p (in [0, partitions)) of this
// process: the same database, replica name, settings, logger and metrics,
// a lease of its own.
func (s *engineStorePG) partition(p int) *engineStorePG {
	return &engineStorePG{db: s.db, owner: s.owner, lease: s.lease, renew: s.renew, poll: s.poll, log: s.log,
		schema: s.schema, combiner: s.combiner, part: p, state: engineLeaseReleased, metrics: s.metrics}
}

// partitions returns the number of partitions of the log, making sure of
// the schema first: the stored one, or want when none is stored yet, which
// it stores. The number is fixed when the first process asks for it (a
// schema upgraded from the one-log version included: its events are
// partition 0's, which exists whatever the number); a later one asking
// another is told the stored one.
func (s *engineStorePG) partitions(ctx context.Context, want int) (int, error) {
	if want < 1 || want > enginePartitionsMax {
		return 0, fmt.Errorf("the engine's partitions: %d is not between 1 and %d", want, enginePartitionsMax)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return 0, err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO svc_engine.config (id, partitions) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, want); err != nil {
		return 0, s.fault("store the engine's partitions", err)
	}
	var n int
	if err := s.db.QueryRow(ctx, `SELECT partitions FROM svc_engine.config WHERE id = 1`).Scan(&n); err != nil {
		return 0, s.fault("read the engine's partitions", err)
	}
	return n, nil
}

// channel is the NOTIFY channel of this partition's new events.
func (s *engineStorePG) channel() string { return fmt.Sprint(engineStorePGChannel, s.part) }

// kind names the store.
func (s *engineStorePG) kind() string { return engineKindPostgres }

// replica names this process among the replicas.
func (s *engineStorePG) replica() string { return s.owner }

// health reports the lease as this replica sees it.
func (s *engineStorePG) health() engineStoreHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return engineStoreHealth{Kind: engineKindPostgres, Lease: s.state, Owner: s.owner, Epoch: s.epoch, Replicas: s.replicas}
}

// setState records the lease state (and the epoch, when non-zero).
func (s *engineStorePG) setState(state string, epoch int64) {
	s.mu.Lock()
	s.state = state
	if epoch != 0 {
		s.epoch = epoch
	}
	s.mu.Unlock()
}

// fault logs a driver error (which can name the database's host, user and
// name) and returns one that says what failed without it: the store's
// errors reach the health route and 503 answers.
func (s *engineStorePG) fault(what string, err error) error {
	s.log.Warn("PostgreSQL engine: "+what, "err", err)
	return fmt.Errorf("%s: PostgreSQL did not answer or refused (the log has the cause)", what)
}

// beginTx sets up a transaction of the store (engineStorePGTxSQL), with
// synchronous_commit commitMode.
func (s *engineStorePG) beginTx(ctx context.Context, tx pgx.Tx, commitMode string) error {
	_, err := tx.Exec(ctx, engineStorePGTxSQL, commitMode, s.idleInTxSetting())
	return err
}

// idleInTxSetting is idleInTx as idle_in_transaction_session_timeout's value.
func (s *engineStorePG) idleInTxSetting() string { return fmt.Sprint(s.idleInTx().Milliseconds()) }

// idleInTx is how long a transaction of the store may sit idle before
// PostgreSQL ends its session: a quarter of the lease, within [500ms, 2s],
// so a stalled replica holds up the others' appends for at most that.
func (s *engineStorePG) idleInTx() time.Duration {
	return min(max(s.lease/4, 500*time.Millisecond), 2*time.Second)
}

// ensureSchema creates svc_engine once per process.
func (s *engineStorePG) ensureSchema(ctx context.Context) error {
	s.schema.mu.Lock()
	defer s.schema.mu.Unlock()
	if s.schema.ok {
		return nil
	}
	if _, err := s.db.Exec(ctx, engineStorePGSchemaSQL); err != nil {
		return s.fault("create schema svc_engine", err)
	}
	s.schema.ok = true
	return nil
}

// open joins the partition's replicas under a new epoch and replays its
// log. The row
// is written before the replay reads, so no compaction deletes an event
// this replica has yet to read.
func (s *engineStorePG) open(h engineLogHooks) (engineLog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGReplayTimeout)
	defer cancel()
	if err := s.ensureSchema(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	var epoch int64
	if err := s.db.QueryRow(ctx, engineStorePGJoinSQL, s.part, s.owner, s.lease.Milliseconds()).Scan(&epoch); err != nil {
		return nil, s.fault("join the engine's replicas", err)
	}
	l := &engineStorePGLog{s: s, epoch: epoch, h: h, wake: make(chan struct{}, 1), stopped: make(chan struct{}), progress: make(chan struct{}),
		stopBg: make(chan struct{}), renewDone: make(chan struct{}), listenDone: make(chan struct{})}
	l.deadline.Store(new(sent.Add(s.lease)))
	if err := l.replay(ctx); err != nil {
		s.leave(epoch)
		return nil, err
	}
	s.setState(engineLeaseHeld, epoch)
	s.log.Debug("engine replica joined: it executes the runs it starts or claims", "owner", s.owner, "partition", s.part, "epoch", epoch)
	go l.run()
	go l.renewLoop()
	go l.listen()
	return l, nil
}

// engineStorePGSessionWait is how long checkSession waits for its
// notification to come back.
const engineStorePGSessionWait = 3 * time.Second

// errEngineNoSession refuses a database connection that does not keep a
// session.
var errEngineNoSession = errors.New("DATABASE_URL does not keep a session: a notification sent on it never came back on the connection that listened " +
	"(a connection pooler in transaction or statement mode, such as PgBouncer's pool_mode = transaction?); svc needs a direct " +
	"connection or session pooling: LISTEN wakes the PostgreSQL engine's replicas and chat sessions hold advisory locks, and both are lost when a pooler hands the connection to another client")

// pgCheckSession makes sure db's connections keep their session, as
// LISTEN and session advisory locks need (the runtime's boot asks, for svc
// dev and svc serve, whatever the engine): it listens on a channel of its
// own on one connection, notifies it on another, and refuses the database
// (errEngineNoSession) when the notification does not come back. Under a
// pooler in transaction mode the listening session is handed to other
// clients, and the notification is lost without an error.
func pgCheckSession(ctx context.Context, db *pgxpool.Pool) error {
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	channel := "svc_session_check_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := conn.Exec(ctx, "LISTEN "+channel, pgx.QueryExecModeSimpleProtocol); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "SELECT pg_notify($1, 'check')", pgx.QueryExecModeSimpleProtocol, channel); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, engineStorePGSessionWait)
	defer cancel()
	if _, err := conn.WaitForNotification(wctx); err != nil {
		return errEngineNoSession
	}
	return nil
}

// leave deletes this replica's row in the partition at epoch, if it is
// still there.
func (s *engineStorePG) leave(epoch int64) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	if _, err := s.db.Exec(ctx, engineStorePGLeaveSQL, s.part, s.owner, epoch); err != nil {
		s.log.Warn("leave the engine's replicas; the others claim this one's runs when its lease expires", "partition", s.part, "err", err)
	}
}

// saveVersion keeps version v. It need not be synchronous: the start that
// pins it commits later with synchronous_commit on, which makes it durable.
func (s *engineStorePG) saveVersion(v string, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	if _, err := s.db.Exec(ctx, `INSERT INTO svc_engine.versions (hash, data) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`, v, data); err != nil {
		return s.fault("save a workflow version", err)
	}
	return nil
}

// loadVersion reads version v.
func (s *engineStorePG) loadVersion(v string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	var data []byte
	err := s.db.QueryRow(ctx, `SELECT data FROM svc_engine.versions WHERE hash = $1`, v).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("version %s is not in svc_engine.versions", v)
	case err != nil:
		return nil, s.fault("load a workflow version", err)
	}
	return data, nil
}

// removeVersions deletes the versions keep refuses.
func (s *engineStorePG) removeVersions(keep func(string) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT hash FROM svc_engine.versions`)
	if err != nil {
		s.log.Warn("list the saved workflow versions", "err", err)
		return
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		s.log.Warn("list the saved workflow versions", "err", err)
		return
	}
	var drop []string
	for _, h := range hashes {
		if !keep(h) {
			drop = append(drop, h)
		}
	}
	if len(drop) > 0 {
		// Another live replica (of any partition: versions are shared)
		// may have just saved one for a start it is writing: then only
		// versions older than two leases go.
		if _, err := s.db.Exec(ctx, `DELETE FROM svc_engine.versions WHERE hash = ANY($1) AND (saved_at < now() - $2 * interval '1 millisecond'
    OR NOT EXISTS (SELECT FROM svc_engine.replicas WHERE owner <> $3 AND lease_until > now()))`,
			drop, 2*s.lease.Milliseconds(), s.owner); err != nil {
			s.log.Warn("remove unused workflow versions", "err", err)
		}
	}
}

// engineStorePGLog is the event log of this replica while it holds its
// lease at epoch. One committer goroutine writes the batches in append
// order and delivers every event, the others' too, in seq order; one
// renewer extends the lease; one listener turns notifications into reads.
type engineStorePGLog struct {
	s     *engineStorePG
	epoch int64
	h     engineLogHooks

	mu     sync.Mutex // guards open through reap
	open   *engineStorePGBatch
	closed bool
	err    error // sticky failure
	poked  bool  // a notification or the poll asks for a read
	reap   bool  // the renewer saw an expired lease

	wake       chan struct{} // capacity 1: something to do
	stopped    chan struct{} // the committer has exited
	stopBg     chan struct{} // closed by close: renewer and listener stop
	renewDone  chan struct{}
	listenDone chan struct{}

	progress chan struct{} // closed and replaced (under mu) at each delivery

	bytes     atomic.Int64              // delivered since the last snapshot
	deadline  atomic.Pointer[time.Time] // the lease surely holds until then (monotonic)
	delivered atomic.Int64              // the last seq delivered to the engine
}

// engineStorePGBatch is the events one transaction writes.
type engineStorePGBatch struct {
	done    chan struct{}
	err     error
	records [][]byte
	durable bool
}

// Wait blocks until the batch committed and was delivered, or returns why
// it was not.
func (b *engineStorePGBatch) Wait() error {
	<-b.done
	return b.err
}

// engineStorePGFailed returns a batch that already failed with err.
func engineStorePGFailed(err error) *engineStorePGBatch {
	b := &engineStorePGBatch{done: make(chan struct{}), err: err}
	close(b.done)
	return b
}

// replay reads the partition's snapshot and its later events in one
// consistent snapshot of the database.
func (l *engineStorePGLog) replay(ctx context.Context) error {
	return pgx.BeginTxFunc(ctx, l.s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var snap []byte
		var upto int64
		err := tx.QueryRow(ctx, `SELECT upto, data FROM svc_engine.snapshots WHERE part = $1`, l.s.part).Scan(&upto, &snap)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return l.s.fault("read the engine snapshot", err)
		default:
			if err := l.h.onSnapshot(snap); err != nil {
				return fmt.Errorf("replay the engine snapshot: %w", err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT seq, data FROM svc_engine.events WHERE part = $1 AND seq > $2 ORDER BY seq`, l.s.part, upto)
		if err != nil {
			return l.s.fault("read the engine events", err)
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			var data []byte
			if err := rows.Scan(&seq, &data); err != nil {
				return l.s.fault("read the engine events", err)
			}
			if err := l.h.onRecord(data); err != nil {
				return fmt.Errorf("replay event %d: %w", seq, err)
			}
			upto = seq
			l.bytes.Add(int64(len(data)))
		}
		if err := rows.Err(); err != nil {
			return l.s.fault("read the engine events", err)
		}
		l.delivered.Store(upto)
		return nil
	})
}

// append queues payload for the committer.
func (l *engineStorePGLog) append(payload []byte, d engineDurability) engineCommit {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return engineStorePGFailed(errJournalClosed)
	}
	if l.err != nil {
		return engineStorePGFailed(l.err)
	}
	b := l.open
	if b == nil {
		b = &engineStorePGBatch{done: make(chan struct{})}
		l.open = b
		l.wakeLocked()
	}
	b.records = append(b.records, payload)
	b.durable = b.durable || d == commitDurable
	return b
}

// wakeLocked tells the committer there is work; l.mu must be held.
func (l *engineStorePGLog) wakeLocked() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// poke asks the committer to read the log (reap: and to claim the runs of
// expired replicas).
func (l *engineStorePGLog) poke(reap bool) {
	l.mu.Lock()
	l.poked = true
	l.reap = l.reap || reap
	l.wakeLocked()
	l.mu.Unlock()
}

// fresh reports whether the lease surely still holds.
func (l *engineStorePGLog) fresh() bool { return time.Now().Before(*l.deadline.Load()) }

// size is the bytes delivered since the last snapshot.
func (l *engineStorePGLog) size() int64 { return l.bytes.Load() }

// run is the committer: one transaction per batch, in append order, and a
// read of the log when poked or every poll, until close and the queue is
// empty.
func (l *engineStorePGLog) run() {
	defer close(l.stopped)
	poll := time.NewTimer(jitter(l.s.poll))
	defer poll.Stop()
	for {
		l.mu.Lock()
		for l.open == nil && !l.poked && !l.reap && !l.closed {
			l.mu.Unlock()
			select {
			case <-l.wake:
			case <-poll.C:
				poll.Reset(jitter(l.s.poll))
				l.mu.Lock()
				l.poked = true
				l.mu.Unlock()
			}
			l.mu.Lock()
		}
		b, poked, reap, failed := l.open, l.poked, l.reap, l.err
		l.open, l.poked, l.reap = nil, false, false
		if b == nil && !poked && !reap { // closed, and nothing is left
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if failed != nil {
			if b != nil {
				b.err = failed
				close(b.done)
			}
			continue
		}
		switch {
		case b != nil || reap:
			var recs [][]byte
			durable := false
			if b != nil {
				recs, durable = b.records, b.durable
			}
			err := l.fail(l.write(recs, durable, reap, false))
			if b != nil {
				b.err = err
				close(b.done)
			}
		case poked:
			if err := l.read(); err != nil {
				l.s.log.Warn("read the engine's log; retrying at the next poll", "err", err)
			}
		}
	}
}

// jitter returns d ± 25%, so idle replicas do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2)
}

// write commits recs in one transaction under the fence and delivers the
// events others committed before them, then recs. reap first deletes the
// rows of expired replicas and appends a claim of each one's runs; leave
// appends a release of this replica's runs and deletes its row.
func (l *engineStorePGLog) write(recs [][]byte, durable, reap, leave bool) error {
	if time.Now().After(*l.deadline.Load()) {
		// Renewals failed for a whole lease: another replica may hold our runs.
		return fmt.Errorf("%w (it was not renewed within %v)", errEngineLeaseLost, l.s.lease)
	}
	defer l.s.metrics.pgCommitted(time.Now(), len(recs))
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	commitMode := "off" // synchronous_commit
	if durable || reap || leave {
		commitMode = "on"
	}
	var foreign [][]byte
	var upto int64
	var err error
	if !reap && !leave {
		after := l.delivered.Load()
		foreign, upto, err = l.appendBatch(recs, after, commitMode == "on")
		if engineStorePGOutcomeUnknown(err) {
			foreign, upto, err = l.resolve(recs, after, err)
		}
	} else {
		recs, foreign, upto, err = l.appendTx(ctx, recs, commitMode, reap, leave)
	}
	if errors.Is(err, errEngineLeaseLost) {
		return errEngineLeaseLost
	}
	if errors.Is(err, errJournalOutcomeUnknown) {
		return err // never "nothing was recorded" for what may have been
	}
	if err != nil && time.Now().After(*l.deadline.Load()) {
		// The lease ran out while the transaction was open (this process
		// stalled in it, and PostgreSQL ended the session): whatever the
		// error, another replica may hold our runs now.
		return fmt.Errorf("%w (%v)", errEngineLeaseLost, l.s.fault("append to svc_engine.events", err))
	}
	if err != nil {
		return l.s.fault("append to svc_engine.events", err)
	}
	if !leave {
		l.deliver(append(foreign, recs...), upto)
	}
	return nil
}

// appendBatch is write's common case, recs with no reap and no leave: the
// partition's part of one transaction the process's partitions share
// (engine_store_pg_combine.go): its order lock, the read of what others
// committed, the fenced insert and the notification. An insert the fence
// refuses inserts nothing, so committing it is harmless; it returns
// errEngineLeaseLost then.
func (l *engineStorePGLog) appendBatch(recs [][]byte, after int64, durable bool) (foreign [][]byte, upto int64, err error) {
	return l.s.combiner.append(&engineStorePGAppend{part: l.s.part, channel: l.s.channel(), owner: l.s.owner, epoch: l.epoch,
		recs: recs, after: after, durable: durable, idleInTx: l.s.idleInTxSetting()})
}

// engineStorePGResolveTimeout bounds how long a commit whose answer was
// lost is looked for in the log: the time a failover takes to serve again
// (a variable for the tests' sake).
var engineStorePGResolveTimeout = 30 * time.Second

// engineStorePGOutcomeUnknown reports whether err leaves an append's commit
// undecided: the connection broke, or the server shut down (SQLSTATE
// classes 57 and 08), after the batch may have reached COMMIT. An error the
// server reported for a statement aborts the transaction (nothing
// committed), and one pgx raised before sending anything is safe.
func engineStorePGOutcomeUnknown(err error) bool {
	if err == nil || errors.Is(err, errEngineLeaseLost) || pgconn.SafeToRetry(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "57") || strings.HasPrefix(pe.Code, "08")
	}
	return true
}

// resolve finds out whether recs, whose commit failed with cause, are in
// the partition's log after seq after: read back on whatever server the pool reaches
// now (the new primary, with a multi-host DATABASE_URL), for up to
// engineStorePGResolveTimeout. In it (appends take turns, so a batch is
// contiguous): they are delivered as committed. Absent from a log that
// answered: they were not committed, and cause stands. Never answered:
// errJournalOutcomeUnknown.
func (l *engineStorePGLog) resolve(recs [][]byte, after int64, cause error) (foreign [][]byte, upto int64, err error) {
	l.s.log.Warn("the database failed while an append was committing: looking for it in the log", "err", cause, "records", len(recs))
	deadline := time.Now().Add(engineStorePGResolveTimeout)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
		rows, qerr := l.s.db.Query(ctx, engineStorePGReadSQL, l.s.part, after, engineStorePGReadAll)
		var seqs []int64
		var datas [][]byte
		if qerr == nil {
			var seq int64
			var data []byte
			_, qerr = pgx.ForEachRow(rows, []any{&seq, &data}, func() error {
				seqs, datas = append(seqs, seq), append(datas, slices.Clone(data))
				return nil
			})
		}
		cancel()
		if qerr == nil {
			for i := range datas {
				if i+len(recs) <= len(datas) && bytes.Equal(datas[i], recs[0]) && bytes.Equal(datas[i+len(recs)-1], recs[len(recs)-1]) {
					l.s.log.Warn("the append had committed before the database failed: it stands", "seq", seqs[i+len(recs)-1])
					return datas[:i], seqs[i+len(recs)-1], nil
				}
			}
			l.s.log.Warn("the append had not committed before the database failed: nothing of it was recorded")
			return nil, 0, cause
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, 0, fmt.Errorf("%w: %v (reading it back: %v)", errJournalOutcomeUnknown, cause, qerr)
		}
		time.Sleep(wait)
	}
}

// appendTx is write's transaction when it reaps or leaves, statement by
// statement, since what it appends depends on what the reap finds: it
// returns recs with the claims it appended, the others' events before
// them and the last seq; errEngineLeaseLost when the fence refused them.
func (l *engineStorePGLog) appendTx(ctx context.Context, recs [][]byte, commitMode string, reap, leave bool) (all, foreign [][]byte, upto int64, err error) {
	lost := false
	err = pgx.BeginFunc(ctx, l.s.db, func(tx pgx.Tx) error {
		if err := l.s.beginTx(ctx, tx, commitMode); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, engineStorePGOrderSQL, l.s.part); err != nil {
			return err
		}
		if reap {
			rows, err := tx.Query(ctx, engineStorePGReapSQL, l.s.part)
			if err != nil {
				return err
			}
			dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			var live []string
			if len(dead) > 0 {
				rows, err := tx.Query(ctx, engineStorePGLiveSQL, l.s.part)
				if err != nil {
					return err
				}
				if live, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
					return err
				}
			}
			for _, d := range dead {
				l.s.log.Warn("engine replica's lease expired: its runs are dealt out over the live replicas", "expired", d, "owner", l.s.owner, "partition", l.s.part, "live", len(live))
				recs = append(recs, l.h.claim(d, l.s.owner, live))
			}
		}
		if leave {
			recs = append(recs, l.h.claim(l.s.owner, "", nil))
		}
		after := l.delivered.Load()
		rows, err := tx.Query(ctx, engineStorePGReadSQL, l.s.part, after, engineStorePGReadAll)
		if err != nil {
			return err
		}
		if foreign, upto, err = engineStorePGScan(rows, after); err != nil {
			return err
		}
		if len(recs) == 0 {
			return nil
		}
		var n int64
		if err := tx.QueryRow(ctx, engineStorePGAppendSQL, l.s.part, recs, l.s.owner, l.epoch).Scan(&n, &upto); err != nil {
			return err
		}
		if n != int64(len(recs)) {
			lost = true
			return errEngineLeaseLost
		}
		if leave {
			if _, err := tx.Exec(ctx, engineStorePGLeaveSQL, l.s.part, l.s.owner, l.epoch); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, engineStorePGNotifySQL, l.s.channel(), l.s.owner, l.s.part)
		return err
	})
	if lost {
		return nil, nil, 0, errEngineLeaseLost
	}
	return recs, foreign, upto, err
}

// read delivers the events committed since the last delivery.
func (l *engineStorePGLog) read() error {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	for {
		after := l.delivered.Load()
		rows, err := l.s.db.Query(ctx, engineStorePGReadSQL, l.s.part, after, engineStorePGReadBatch)
		var recs [][]byte
		var upto int64
		if err == nil {
			recs, upto, err = engineStorePGScan(rows, after)
		}
		if err != nil {
			return l.s.fault("read svc_engine.events", err)
		}
		l.deliver(recs, upto)
		if len(recs) < engineStorePGReadBatch {
			return nil
		}
	}
}

// engineStorePGScan reads events rows (seq, data), after seq after, and
// closes them: the events and the last one's seq (after, when none).
func engineStorePGScan(rows pgx.Rows, after int64) ([][]byte, int64, error) {
	defer rows.Close()
	var recs [][]byte
	upto := after
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&upto, &data); err != nil {
			return nil, after, err
		}
		recs = append(recs, data)
	}
	if err := rows.Err(); err != nil {
		return nil, after, err
	}
	return recs, upto, nil
}

// deliver hands recs, ending at seq upto, to the engine.
func (l *engineStorePGLog) deliver(recs [][]byte, upto int64) {
	if upto <= l.delivered.Load() {
		return
	}
	for _, r := range recs {
		l.bytes.Add(int64(len(r)))
	}
	l.h.deliver(recs, upto)
	l.delivered.Store(upto)
	l.mu.Lock()
	close(l.progress)
	l.progress = make(chan struct{})
	l.mu.Unlock()
}

// catchUp asks the committer to read the log and waits (within ctx) until
// it has delivered every event committed before the call.
func (l *engineStorePGLog) catchUp(ctx context.Context) bool {
	var head int64
	if err := l.s.db.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM svc_engine.events WHERE part = $1`, l.s.part).Scan(&head); err != nil {
		return false
	}
	from := l.delivered.Load()
	if head <= from {
		return false
	}
	l.poke(false)
	for {
		l.mu.Lock()
		progress := l.progress
		l.mu.Unlock()
		if l.delivered.Load() >= head {
			return true
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return l.delivered.Load() > from
		}
	}
}

// fail makes err, if any, the log's sticky failure and returns it; the
// first failure is reported to onFail.
func (l *engineStorePGLog) fail(err error) error {
	if err == nil {
		return nil
	}
	l.mu.Lock()
	first := l.err == nil
	if first {
		l.err = err
	}
	err = l.err
	l.mu.Unlock()
	if first {
		if errors.Is(err, errEngineLeaseLost) {
			l.s.setState(engineLeaseLost, 0)
			l.s.log.Error("engine lease lost: another replica took over this one's runs; it writes nothing more and rejoins", "owner", l.s.owner, "partition", l.s.part, "epoch", l.epoch)
		}
		if l.h.onFail != nil {
			go l.h.onFail(err)
		}
	}
	return err
}

// renewLoop extends the lease every Renew and asks for a claim when
// another replica's lease expires: at once when it has, or at the moment it
// will when that comes before the next renewal (so a dead replica's runs
// are claimed a lease after its last renewal, not up to a renew interval
// later). A renewal that finds the row gone, or renewals failing for a
// whole lease, fail the log.
func (l *engineStorePGLog) renewLoop() {
	defer close(l.renewDone)
	t := time.NewTicker(l.s.renew)
	defer t.Stop()
	reap := time.AfterFunc(time.Hour, func() { l.poke(true) })
	defer reap.Stop()
	for first := true; ; first = false {
		if !first { // the first renewal is at once: a replica that just took the partition over learns when the last holder's lease expires
			select {
			case <-l.stopBg:
				return
			case <-t.C:
			}
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), l.s.renew)
		var held, live, expiresMs int64
		err := l.s.db.QueryRow(ctx, engineStorePGRenewSQL, l.s.part, l.s.owner, l.epoch, l.s.lease.Milliseconds(), l.delivered.Load()).Scan(&held, &live, &expiresMs)
		cancel()
		switch {
		case err == nil && held == 1:
			l.deadline.Store(new(sent.Add(l.s.lease)))
			l.s.mu.Lock()
			l.s.replicas = int(live)
			l.s.mu.Unlock()
			if next := time.Duration(expiresMs) * time.Millisecond; next <= 0 {
				l.poke(true)
			} else if next < l.s.renew {
				reap.Reset(next + 20*time.Millisecond) // past it by a little: the claim checks it in the database
			}
		case err == nil:
			l.fail(errEngineLeaseLost)
			return
		case time.Now().After(*l.deadline.Load()):
			l.fail(fmt.Errorf("%w (%v)", errEngineLeaseLost, l.s.fault("renew the engine lease", err)))
			return
		default:
			l.s.log.Warn("renew the engine lease; retrying", "partition", l.s.part, "err", err)
		}
	}
}

// listen turns notifications on the partition's channel into reads, on a
// connection of its own, reconnecting after a failure; the poll covers what it misses.
func (l *engineStorePGLog) listen() {
	defer close(l.listenDone)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-l.stopBg; cancel() }()
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, l.s.db.Config().ConnConfig.Copy())
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+l.s.channel())
			for err == nil {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(ctx); err == nil && n.Payload != l.s.owner {
					l.poke(false)
				}
			}
			conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			return
		}
		l.s.log.Warn("listen for the engine's events; polling until it works again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(l.s.poll):
		}
	}
}

// beginCompact starts a compaction of the state delivered up to seq upto.
func (l *engineStorePGLog) beginCompact(upto int64) (engineCompaction, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.err != nil {
		err := l.err
		if l.closed {
			err = errJournalClosed
		}
		return nil, fmt.Errorf("compact svc_engine.events: %w", err)
	}
	return &engineStorePGCompaction{l: l, upto: upto, covered: l.bytes.Swap(0)}, nil
}

// engineStorePGCompaction is a compaction begun.
type engineStorePGCompaction struct {
	l       *engineStorePGLog
	upto    int64
	covered int64
}

// Finish writes snap as the partition's state as of seq upto, unless a
// newer snapshot of it is stored, and deletes the partition's events every
// live replica of it has applied. It
// needs no fence: every replica's state at upto is the same function of
// the same events, so even a replica that lost its lease writes a true
// snapshot, and holding a lock on its row would hold up its renewals.
func (c *engineStorePGCompaction) Finish(snap []byte) error {
	l := c.l
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGReplayTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, l.s.db, func(tx pgx.Tx) error {
		if err := l.s.beginTx(ctx, tx, "on"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO svc_engine.snapshots (part, upto, data) VALUES ($1, $2, $3)
ON CONFLICT (part) DO UPDATE SET upto = excluded.upto, data = excluded.data WHERE svc_engine.snapshots.upto < excluded.upto`, l.s.part, c.upto, snap); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM svc_engine.events WHERE part = $1 AND seq <= LEAST($2,
    (SELECT min(applied) FROM svc_engine.replicas WHERE part = $1 AND lease_until > now() AND owner <> $3),
    (SELECT upto FROM svc_engine.snapshots WHERE part = $1))`, l.s.part, c.upto, l.s.owner)
		return err
	})
	if err != nil {
		l.bytes.Add(c.covered)
		return fmt.Errorf("compact svc_engine.events: %w", l.s.fault("write the engine snapshot", err))
	}
	return nil
}

// close writes the pending batches (bounded), releases this replica's runs
// to the others, stops renewing and listening. It returns the log's sticky
// failure, if any.
func (l *engineStorePGLog) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errJournalClosed
	}
	l.closed = true
	l.wakeLocked()
	l.mu.Unlock()
	timer := time.NewTimer(engineStorePGCloseTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-l.stopped:
	case <-timer.C:
		err = fmt.Errorf("close svc_engine: pending events not committed within %v", engineStorePGCloseTimeout)
	}
	l.mu.Lock()
	if l.err != nil {
		err = l.err
	}
	l.mu.Unlock()
	if err == nil {
		if rerr := l.write(nil, true, false, true); rerr != nil {
			l.s.log.Warn("release this replica's runs; the others claim them when its lease expires", "err", rerr)
		} else {
			l.s.setState(engineLeaseReleased, 0)
		}
	}
	close(l.stopBg)
	<-l.renewDone
	<-l.listenDone
	if err != nil {
		return fmt.Errorf("close svc_engine: %w", err)
	}
	return nil
}
