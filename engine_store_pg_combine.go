package main

// Group commit across partitions (engine_store_pg.go, engine_fleet.go). A
// process holds several partitions of the log, each with a committer of
// its own; were each to commit alone, a burst of starts spread over them
// would cost a transaction (and a synchronous WAL flush) per partition
// where one log used to batch them all. So their appends meet here: while
// one transaction is in flight, the appends that arrive wait, and the next
// transaction carries every one of them, each partition's part as before
// (its order lock, the read of what others committed, its fenced insert,
// its notification), the partitions in order so that two processes never
// wait on each other's locks. One round trip for the lot. After a round
// that carried several, the next waits engineStorePGLinger for company
// (what commit_delay does in PostgreSQL): on one replica under 32 clients
// 200 µs took W2 from 1.44 to 1.33 transactions per run, at 4 replicas from
// 2.7 to 2.2; 600 µs takes 4 replicas to 1.97-2.03 and their CPU per run
// (replicas and PostgreSQL) from 1,370-1,460 µs to 1,180-1,350, and leaves
// one replica's as it was (two alternated rounds each). A lone client's
// commits never wait. A part the fence refuses inserts nothing and the
// others commit; a failure of the transaction is every part's, and each
// log deals with it as it did alone (a commit whose outcome is unknown is
// looked for in that partition).

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// engineStorePGCombiner commits the appends of a process's partitions
// together. Its goroutine runs while there is work.
type engineStorePGCombiner struct {
	db *pgxpool.Pool

	mu      sync.Mutex
	queue   []*engineStorePGAppend
	running bool
}

// engineStorePGLinger is how long the next round waits for more appends
// after a round that carried several (concurrent work): a round that
// carried one (a lone client) is followed at once.
const engineStorePGLinger = 600 * time.Microsecond

// engineStorePGAppend is one partition's append in a combined transaction:
// what its log asks, and what it gets back.
type engineStorePGAppend struct {
	part           int
	channel, owner string
	epoch          int64
	recs           [][]byte
	after          int64 // the last seq delivered to the log: the read starts after it
	durable        bool
	idleInTx       string // idle_in_transaction_session_timeout, ms

	foreign [][]byte // what others committed to the partition after after
	upto    int64    // the seq of the last of recs
	err     error
	done    chan struct{}
}

// append commits a with the appends that wait with it and returns its
// outcome.
func (c *engineStorePGCombiner) append(a *engineStorePGAppend) ([][]byte, int64, error) {
	a.done = make(chan struct{})
	c.mu.Lock()
	c.queue = append(c.queue, a)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	<-a.done
	return a.foreign, a.upto, a.err
}

// run commits what waits, round after round, until nothing does.
func (c *engineStorePGCombiner) run() {
	last := 0
	for {
		if last > 1 {
			time.Sleep(engineStorePGLinger)
		}
		c.mu.Lock()
		group := c.queue
		c.queue = nil
		if len(group) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		slices.SortStableFunc(group, func(x, y *engineStorePGAppend) int { return x.part - y.part })
		last = len(group)
		err := c.commit(group)
		for _, a := range group {
			if err != nil {
				a.foreign, a.upto, a.err = nil, 0, err
			}
			close(a.done)
		}
	}
}

// commit runs group's parts in one pipelined transaction, synchronous when
// any part needs it, and fills in each part's outcome; the error is the
// transaction's.
func (c *engineStorePGCombiner) commit(group []*engineStorePGAppend) (err error) {
	mode := "off"
	if slices.ContainsFunc(group, func(a *engineStorePGAppend) bool { return a.durable }) {
		mode = "on"
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(engineStorePGTxSQL, mode, group[0].idleInTx)
	for _, a := range group {
		b.Queue(engineStorePGOrderSQL, a.part)
		b.Queue(engineStorePGReadSQL, a.part, a.after, engineStorePGReadAll)
		b.Queue(engineStorePGAppendSQL, a.part, a.recs, a.owner, a.epoch)
		b.Queue(engineStorePGNotifySQL, a.channel, a.owner, a.part)
	}
	b.Queue("COMMIT")
	br := c.db.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, a := range group {
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if a.foreign, _, err = engineStorePGScan(rows, a.after); err != nil {
			return err
		}
		var n int64
		if err := br.QueryRow().Scan(&n, &a.upto); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if n != int64(len(a.recs)) {
			a.foreign, a.upto, a.err = nil, 0, errEngineLeaseLost
		}
	}
	_, err = br.Exec() // COMMIT
	return err
}
