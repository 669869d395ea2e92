package main

// The engine's store on PostgreSQL (SVC_ENGINE=postgres, DESIGN §12): the
// events, the snapshot and the pinned versions live in schema svc_engine
// of the runtime's database, so nothing of the engine's state is on the
// replica's disk.
//
// Tables (created by ensureSchema, idempotent, under an advisory lock so
// that replicas booting together do not race): events (seq from one
// identity sequence, the encoded event), snapshot (one row: the state as of
// seq upto; replay reads it, then the events after it, so boot time follows
// active work, not history), versions (compiled workflow versions by
// content hash), lease (one row: owner, epoch, lease_until).
//
// Ownership, this slice: one engine-wide lease, active/passive. A process
// claims the lease row (bumping epoch, the fencing token), renews it every
// Renew in one statement, and every write of events or of the snapshot
// runs in a statement or transaction that first takes a share lock on the
// lease row matching its owner and epoch, so a holder that stalled past
// its lease and woke after another process claimed it writes nothing: its
// write finds no matching row, and the process steps down to standby. A
// claim waits for a write in flight to commit (the share lock), so the new
// holder's replay sees every event the old one committed. A process that
// finds the lease held stands by (health: standby) and claims it once it
// is released (a graceful close) or has expired (a crash). DESIGN §12's
// per-run leases replace this engine-wide one in the next slice.
//
// Commits: a batch some caller waits on commits with synchronous_commit on;
// a batch nobody waits on commits with it off. PostgreSQL's WAL is one
// sequence, so a durable commit also makes every earlier batch durable: a
// crash loses at most a suffix of the non-durable events, as on the file
// journal.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// engineStorePGSchemaSQL creates the schema; it runs as one implicit
// transaction holding an advisory lock, so concurrent boots do not race.
const engineStorePGSchemaSQL = `SELECT pg_advisory_xact_lock(hashtext('svc_engine schema'));
CREATE SCHEMA IF NOT EXISTS svc_engine;
CREATE TABLE IF NOT EXISTS svc_engine.events (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS svc_engine.snapshot (id int PRIMARY KEY CHECK (id = 1), upto bigint NOT NULL, data bytea NOT NULL);
CREATE TABLE IF NOT EXISTS svc_engine.versions (hash text PRIMARY KEY, data bytea NOT NULL, saved_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS svc_engine.lease (id int PRIMARY KEY CHECK (id = 1), owner text NOT NULL, epoch bigint NOT NULL,
    lease_until timestamptz NOT NULL, claimed_at timestamptz);
INSERT INTO svc_engine.lease (id, owner, epoch, lease_until) VALUES (1, '', 0, '-infinity') ON CONFLICT (id) DO NOTHING;`

// engineStorePGClaimSQL takes the lease when it is free, expired or
// already this owner's, bumping the epoch.
const engineStorePGClaimSQL = `UPDATE svc_engine.lease SET owner = $1, epoch = epoch + 1,
    lease_until = now() + $2 * interval '1 millisecond', claimed_at = now()
WHERE id = 1 AND (owner = '' OR owner = $1 OR lease_until < now()) RETURNING epoch`

// engineStorePGRenewSQL extends the lease while this owner holds it at
// this epoch.
const engineStorePGRenewSQL = `UPDATE svc_engine.lease SET lease_until = now() + $3 * interval '1 millisecond'
WHERE id = 1 AND owner = $1 AND epoch = $2`

// engineStorePGHeldSQL is the fence of every write: a share lock on the
// lease row, which exists only while this owner holds it at this epoch.
const engineStorePGHeldSQL = `SELECT 1 FROM svc_engine.lease WHERE id = 1 AND owner = $2 AND epoch = $3 AND lease_until > now() FOR SHARE`

// engineStorePGAppendSQL inserts a batch, in order, only under the fence;
// it returns how many events it inserted and the last seq.
const engineStorePGAppendSQL = `WITH held AS (` + engineStorePGHeldSQL + `),
ins AS (INSERT INTO svc_engine.events (data)
    SELECT d FROM unnest($1::bytea[]) WITH ORDINALITY AS t(d, n) WHERE EXISTS (SELECT FROM held) ORDER BY n RETURNING seq)
SELECT count(*), coalesce(max(seq), 0) FROM ins`

// Bounds of the PostgreSQL store's statements.
const (
	engineStorePGWriteTimeout  = 10 * time.Second
	engineStorePGReplayTimeout = 5 * time.Minute
	engineStorePGCloseTimeout  = 10 * time.Second
	// engineStorePGStandbyPoll is how often a standby asks for the lease.
	engineStorePGStandbyPoll = time.Second
)

// Lease states of the health route.
const (
	engineLeaseHeld     = "held"
	engineLeaseStandby  = "standby"
	engineLeaseLost     = "lost"
	engineLeaseReleased = "released"
)

// engineStorePG is the engine's store in db's schema svc_engine.
type engineStorePG struct {
	db           *pgxpool.Pool
	owner        string // this process: host, pid and a random suffix
	lease, renew time.Duration
	log          *slog.Logger

	schemaMu sync.Mutex
	schemaOK bool

	mu    sync.Mutex // guards state and epoch
	state string
	epoch int64

	metrics *metrics // each batch's commit; nil records nothing
}

// newEngineStorePG returns the store on db with the lease settings of s.
func newEngineStorePG(db *pgxpool.Pool, s engineSettings, log *slog.Logger) *engineStorePG {
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
	return &engineStorePG{db: db, owner: owner, lease: s.Lease, renew: s.Renew, log: log, state: engineLeaseStandby}
}

// kind names the store.
func (s *engineStorePG) kind() string { return engineKindPostgres }

// health reports the lease as this process sees it.
func (s *engineStorePG) health() engineStoreHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return engineStoreHealth{Kind: engineKindPostgres, Lease: s.state, Owner: s.owner, Epoch: s.epoch}
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

// ensureSchema creates svc_engine once per process.
func (s *engineStorePG) ensureSchema(ctx context.Context) error {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	if s.schemaOK {
		return nil
	}
	if _, err := s.db.Exec(ctx, engineStorePGSchemaSQL); err != nil {
		return s.fault("create schema svc_engine", err)
	}
	s.schemaOK = true
	return nil
}

// open claims the lease and replays the events; a lease held by another
// process is an *engineStandbyError.
func (s *engineStorePG) open(onFail func(error), onSnapshot, onRecord func([]byte) error) (engineLog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGReplayTimeout)
	defer cancel()
	if err := s.ensureSchema(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	var epoch int64
	err := s.db.QueryRow(ctx, engineStorePGClaimSQL, s.owner, s.lease.Milliseconds()).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		sb := &engineStandbyError{Poll: engineStorePGStandbyPoll}
		if err := s.db.QueryRow(ctx, `SELECT owner, lease_until FROM svc_engine.lease WHERE id = 1`).Scan(&sb.Holder, &sb.Until); err != nil {
			return nil, s.fault("read the engine lease", err)
		}
		s.setState(engineLeaseStandby, 0)
		return nil, sb
	}
	if err != nil {
		return nil, s.fault("claim the engine lease", err)
	}
	l := &engineStorePGLog{s: s, epoch: epoch, onFail: onFail, wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		stopRenew: make(chan struct{}), renewDone: make(chan struct{})}
	l.deadline.Store(new(sent.Add(s.lease)))
	if err := l.replay(ctx, onSnapshot, onRecord); err != nil {
		s.release(epoch)
		return nil, err
	}
	s.setState(engineLeaseHeld, epoch)
	s.log.Info("engine lease held: this process executes the runs", "owner", s.owner, "epoch", epoch)
	go l.run()
	go l.renewLoop()
	return l, nil
}

// release gives up the lease held at epoch, so a standby takes over at
// once rather than at its expiry.
func (s *engineStorePG) release(epoch int64) {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	if _, err := s.db.Exec(ctx, `UPDATE svc_engine.lease SET owner = '', lease_until = now() WHERE id = 1 AND owner = $1 AND epoch = $2`, s.owner, epoch); err != nil {
		s.log.Warn("release the engine lease; another process takes over when it expires", "err", err)
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
		if _, err := s.db.Exec(ctx, `DELETE FROM svc_engine.versions WHERE hash = ANY($1)`, drop); err != nil {
			s.log.Warn("remove unused workflow versions", "err", err)
		}
	}
}

// engineStorePGLog is the event log while this process holds the lease at
// epoch. One committer goroutine writes the batches in append order; one
// renewer extends the lease.
type engineStorePGLog struct {
	s      *engineStorePG
	epoch  int64
	onFail func(error)

	compactMu sync.Mutex // serializes compactions and close

	mu     sync.Mutex // guards open through err
	open   *engineStorePGBatch
	sealed *engineStorePGBatch // batch to write before the cut
	cut    *engineStorePGCut
	closed bool
	err    error // sticky failure

	wake      chan struct{} // capacity 1: something to do
	stopped   chan struct{} // the committer has exited
	stopRenew chan struct{}
	renewDone chan struct{}

	bytes    atomic.Int64              // appended since the last snapshot
	deadline atomic.Pointer[time.Time] // the lease surely holds until then (monotonic)
	lastSeq  int64                     // owned by the committer (by open before it starts)
}

// engineStorePGBatch is the events one transaction writes.
type engineStorePGBatch struct {
	done    chan struct{}
	err     error
	records [][]byte
	durable bool
}

// Wait blocks until the batch committed, or returns why it did not.
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

// engineStorePGCut asks the committer for the last seq written before it.
type engineStorePGCut struct {
	done chan struct{}
	seq  int64
	err  error
}

// replay reads the snapshot and the later events in one consistent
// snapshot of the database.
func (l *engineStorePGLog) replay(ctx context.Context, onSnapshot, onRecord func([]byte) error) error {
	return pgx.BeginTxFunc(ctx, l.s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var snap []byte
		err := tx.QueryRow(ctx, `SELECT upto, data FROM svc_engine.snapshot WHERE id = 1`).Scan(&l.lastSeq, &snap)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return l.s.fault("read the engine snapshot", err)
		default:
			if err := onSnapshot(snap); err != nil {
				return fmt.Errorf("replay the engine snapshot: %w", err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT seq, data FROM svc_engine.events WHERE seq > $1 ORDER BY seq`, l.lastSeq)
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
			if err := onRecord(data); err != nil {
				return fmt.Errorf("replay event %d: %w", seq, err)
			}
			l.lastSeq = seq
			l.bytes.Add(int64(len(data)))
		}
		if err := rows.Err(); err != nil {
			return l.s.fault("read the engine events", err)
		}
		return nil
	})
}

// append queues payload for the committer.
func (l *engineStorePGLog) append(payload []byte, durable bool) engineCommit {
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
	b.durable = b.durable || durable
	l.bytes.Add(int64(len(payload)))
	return b
}

// wakeLocked tells the committer there is work; l.mu must be held.
func (l *engineStorePGLog) wakeLocked() {
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// size is the bytes appended since the last snapshot.
func (l *engineStorePGLog) size() int64 { return l.bytes.Load() }

// run is the committer: one transaction per batch, in append order, until
// close and the queue is empty.
func (l *engineStorePGLog) run() {
	defer close(l.stopped)
	for {
		l.mu.Lock()
		for l.open == nil && l.cut == nil && !l.closed {
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		b, cut := l.open, l.cut
		if b == nil && cut == nil { // closed, and nothing is left
			l.mu.Unlock()
			return
		}
		if cut != nil {
			b, l.sealed, l.cut = l.sealed, nil, nil
		} else {
			l.open = nil
		}
		failed := l.err
		l.mu.Unlock()
		if b != nil {
			if failed == nil {
				failed = l.fail(l.write(b))
			}
			b.err = failed
			close(b.done)
		}
		if cut != nil {
			cut.seq, cut.err = l.lastSeq, failed
			close(cut.done)
		}
	}
}

// write commits batch b under the fence.
func (l *engineStorePGLog) write(b *engineStorePGBatch) error {
	if time.Now().After(*l.deadline.Load()) {
		// Renewals failed for a whole lease: another process may hold it.
		return fmt.Errorf("%w (it was not renewed within %v)", errEngineLeaseLost, l.s.lease)
	}
	defer l.s.metrics.pgCommitted(time.Now(), len(b.records))
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	commitMode := "off" // synchronous_commit
	if b.durable {
		commitMode = "on"
	}
	var n, last int64
	err := pgx.BeginFunc(ctx, l.s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', $1, true)`, commitMode); err != nil {
			return err
		}
		return tx.QueryRow(ctx, engineStorePGAppendSQL, b.records, l.s.owner, l.epoch).Scan(&n, &last)
	})
	if err != nil {
		return l.s.fault("append to svc_engine.events", err)
	}
	if n != int64(len(b.records)) {
		return errEngineLeaseLost
	}
	l.lastSeq = last
	return nil
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
			l.s.log.Error("engine lease lost: another process took over; this one writes nothing more and stands by", "owner", l.s.owner, "epoch", l.epoch)
		}
		if l.onFail != nil {
			go l.onFail(err)
		}
	}
	return err
}

// renewLoop extends the lease every Renew. A renewal that finds the lease
// taken, or renewals failing for a whole lease, fail the log.
func (l *engineStorePGLog) renewLoop() {
	defer close(l.renewDone)
	t := time.NewTicker(l.s.renew)
	defer t.Stop()
	for {
		select {
		case <-l.stopRenew:
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), l.s.renew)
		tag, err := l.s.db.Exec(ctx, engineStorePGRenewSQL, l.s.owner, l.epoch, l.s.lease.Milliseconds())
		cancel()
		switch {
		case err == nil && tag.RowsAffected() == 1:
			l.deadline.Store(new(sent.Add(l.s.lease)))
		case err == nil:
			l.fail(errEngineLeaseLost)
			return
		case time.Now().After(*l.deadline.Load()):
			l.fail(fmt.Errorf("%w (%v)", errEngineLeaseLost, l.s.fault("renew the engine lease", err)))
			return
		default:
			l.s.log.Warn("renew the engine lease; retrying", "err", err)
		}
	}
}

// beginCompact seals the open batch and asks the committer for a cut.
func (l *engineStorePGLog) beginCompact() (engineCompaction, error) {
	l.compactMu.Lock()
	l.mu.Lock()
	if l.closed || l.err != nil {
		err := l.err
		if l.closed {
			err = errJournalClosed
		}
		l.mu.Unlock()
		l.compactMu.Unlock()
		return nil, fmt.Errorf("compact svc_engine.events: %w", err)
	}
	c := &engineStorePGCompaction{l: l, cut: &engineStorePGCut{done: make(chan struct{})}}
	l.sealed, l.open = l.open, nil
	l.cut = c.cut
	c.covered = l.bytes.Swap(0)
	l.wakeLocked()
	l.mu.Unlock()
	return c, nil
}

// engineStorePGCompaction is a compaction begun.
type engineStorePGCompaction struct {
	l       *engineStorePGLog
	cut     *engineStorePGCut
	covered int64
}

// Finish writes snap as the state as of the cut and deletes the events it
// covers, in one transaction under the fence.
func (c *engineStorePGCompaction) Finish(snap []byte) error {
	l := c.l
	defer l.compactMu.Unlock()
	<-c.cut.done
	err := c.cut.err
	if err == nil {
		err = l.writeSnapshot(c.cut.seq, snap)
	}
	if err != nil {
		l.bytes.Add(c.covered)
		if errors.Is(err, errEngineLeaseLost) {
			l.fail(err)
		} else {
			err = l.s.fault("write the engine snapshot", err)
		}
		return fmt.Errorf("compact svc_engine.events: %w", err)
	}
	return nil
}

// writeSnapshot replaces the snapshot with snap, as of seq upto.
func (l *engineStorePGLog) writeSnapshot(upto int64, snap []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGReplayTimeout)
	defer cancel()
	return pgx.BeginFunc(ctx, l.s.db, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM svc_engine.lease WHERE id = 1 AND owner = $1 AND epoch = $2 FOR SHARE`, l.s.owner, l.epoch).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return errEngineLeaseLost
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO svc_engine.snapshot (id, upto, data) VALUES (1, $1, $2)
ON CONFLICT (id) DO UPDATE SET upto = excluded.upto, data = excluded.data`, upto, snap); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM svc_engine.events WHERE seq <= $1`, upto)
		return err
	})
}

// close writes the pending batches (bounded), stops renewing and releases
// the lease. It returns the log's sticky failure, if any.
func (l *engineStorePGLog) close() error {
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
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
	close(l.stopRenew)
	<-l.renewDone
	l.s.release(l.epoch)
	l.mu.Lock()
	if l.err != nil {
		err = l.err
	}
	l.mu.Unlock()
	if !errors.Is(err, errEngineLeaseLost) {
		l.s.setState(engineLeaseReleased, 0)
	}
	if err != nil {
		return fmt.Errorf("close svc_engine: %w", err)
	}
	return nil
}
