package main

// The engine as the rest of the runtime sees it: a fleet of partitions
// (DESIGN §12, "Divide the work"). The PostgreSQL engine's log is split
// into a fixed number of partitions (svc_engine.config, SVC_ENGINE_PARTITIONS
// when the schema is made), each its own ordered log with its own snapshot
// and fenced replicas (engine_store_pg.go). A replica owns a fair share of
// them (engine_fleet_members.go) and opens one engine per partition it
// owns: it applies, keeps in memory and executes only those. The file
// journal is the one-partition case: one engine, this process's.
//
// A run's partition is chosen when it starts and is written into its id
// (partitionOfID), so every later request about it (read, long poll,
// cancel, hook resume, stream, rerun) goes straight to its owner:
//   - a start of a workflow with a concurrency limit (serial, or a key)
//     goes to the partition of its queue's bucket, so a key's queue lives
//     in one partition and its limit holds fleet-wide;
//   - a start with an idempotency key goes where the key's first start
//     went (the key claims its partition in svc_engine.idem_keys: its
//     queue's when limited, else the key's hash), so one key starts one run
//     fleet-wide and is refused for another workflow or input;
//   - any other start, to a partition this replica owns: no hop, the whole
//     cost of an unkeyed start stays on the replica that took the request.
//
// A call for a partition another replica owns is forwarded to it over HTTP
// (engine_fleet_rpc.go). Lists and the overview merge the run history with
// the active runs every replica holds.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// fleet is the engine of a runtime: the engines of the partitions this
// process owns, and the way to the others.
type fleet struct {
	opts  engineOptions // each partition engine's, but Store and Partition
	parts int           // partitions of the log: 1 on the file journal
	log   *slog.Logger
	m     *fleetMembers // nil on the file journal
	sched *scheduler    // the schedules (newScheduler sets it): calls about them are served here

	mu      sync.Mutex
	local   map[int]*engine       // the partitions open here
	opening map[int]chan struct{} // partitions being opened here: closed when open (or given up)
	closed  bool

	rr    atomic.Uint64             // round robin of unkeyed starts over the local partitions
	order atomic.Pointer[[]*engine] // local's engines by partition, rebuilt (under mu) when it changes
}

// Bounds of the partitions.
const (
	enginePartitionsDefault = 16
	enginePartitionsMax     = 256
	// fleetOpenWait bounds how long a call waits for a partition this
	// replica is opening.
	fleetOpenWait = 10 * time.Second
)

// openFleet opens the engine: on the file journal, its one partition; on
// PostgreSQL, this replica joins the members and opens the partitions it
// owns.
func openFleet(opts engineOptions, pg *engineStorePG, addr string, want int) (*fleet, error) {
	if pg == nil {
		e, err := openEngine(opts)
		if err != nil {
			return nil, err
		}
		return soloFleet(e), nil
	}
	f := &fleet{opts: opts, parts: 1, log: opts.Log, local: map[int]*engine{}, opening: map[int]chan struct{}{}}
	ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
	defer cancel()
	parts, err := pg.partitions(ctx, want)
	if err != nil {
		return nil, err
	}
	f.parts = parts
	if f.m, err = joinFleet(ctx, f, pg, addr); err != nil {
		return nil, err
	}
	if err := f.rebalance(f.m.view()); err != nil {
		f.m.leave()
		f.closeLocal()
		return nil, err
	}
	f.m.started = true
	go f.m.run()
	return f, nil
}

// soloFleet is the fleet of one engine that holds the whole state (the
// file journal's).
func soloFleet(e *engine) *fleet {
	f := &fleet{opts: e.opts, parts: 1, log: e.log, local: map[int]*engine{0: e}, opening: map[int]chan struct{}{}}
	f.heldChangedLocked()
	return f
}

// heldChangedLocked rebuilds order from local. mu must be held.
func (f *fleet) heldChangedLocked() {
	ps := make([]int, 0, len(f.local))
	for p := range f.local {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	es := make([]*engine, len(ps))
	for i, p := range ps {
		es[i] = f.local[p]
	}
	f.order.Store(&es)
}

// openPartition opens the engine of partition p, unless it is open or
// being opened.
func (f *fleet) openPartition(p int) error {
	f.mu.Lock()
	if f.closed || f.local[p] != nil || f.opening[p] != nil {
		f.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	f.opening[p] = done
	f.mu.Unlock()
	opts := f.opts
	opts.Store, opts.Partition, opts.Partitions, opts.Fleet = f.m.pg.partition(p), p, f.parts, f
	e, err := openEngine(opts)
	f.mu.Lock()
	delete(f.opening, p)
	close(done)
	switch {
	case err != nil:
	case f.closed:
		f.mu.Unlock()
		e.close()
		return nil
	default:
		f.local[p] = e
		f.heldChangedLocked()
	}
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("open partition %d: %w", p, err)
	}
	return nil
}

// closePartition hands partition p over: its engine stops taking calls,
// its executions suspend, and its runs are released to the next owner.
func (f *fleet) closePartition(p int) {
	f.mu.Lock()
	e := f.local[p]
	delete(f.local, p)
	f.heldChangedLocked()
	f.mu.Unlock()
	if e == nil {
		return
	}
	if err := e.close(); err != nil {
		f.log.Warn("close partition; its next owner takes its runs when this one's lease expires", "partition", p, "err", err)
	}
}

// rebalance opens the partitions v gives this replica and hands over the
// ones it no longer does. It returns the first failure to open one.
func (f *fleet) rebalance(v fleetView) error {
	var first error
	f.mu.Lock()
	var drop []int
	for p := range f.local {
		if !v.owns(p) {
			drop = append(drop, p)
		}
	}
	f.mu.Unlock()
	for _, p := range drop {
		f.closePartition(p)
	}
	var opened []int
	for p := range f.parts {
		if v.owns(p) && f.held(p) == nil {
			if err := f.openPartition(p); err != nil && first == nil {
				first = err
			} else if err == nil {
				opened = append(opened, p)
			}
		}
	}
	if len(drop)+len(opened) > 0 {
		slices.Sort(drop)
		f.log.Info("engine partitions moved", "opened", fmt.Sprint(opened), "handed_over", fmt.Sprint(drop), "members", len(v.members), "held", len(f.engines()))
	}
	if es := f.engines(); first == nil && len(v.members) == 1 && len(es) == f.parts {
		// Alone with every partition: the versions no local engine pins
		// are pinned by no run at all.
		f.m.pg.removeVersions(func(hash string) bool {
			return slices.ContainsFunc(es, func(e *engine) bool { return e.pins(hash) })
		})
	}
	return first
}

// engineFor returns the engine of partition p when it is open here,
// waiting (within ctx and fleetOpenWait) while it is being opened.
func (f *fleet) engineFor(ctx context.Context, p int) *engine {
	f.mu.Lock()
	e, opening := f.local[p], f.opening[p]
	f.mu.Unlock()
	if e != nil || opening == nil {
		return e
	}
	t := time.NewTimer(fleetOpenWait)
	defer t.Stop()
	select {
	case <-opening:
	case <-ctx.Done():
	case <-t.C:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.local[p]
}

// held returns the engine of partition p when it is open here.
func (f *fleet) held(p int) *engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.local[p]
}

// engines returns the open engines, by partition (the caller must not
// change the slice).
func (f *fleet) engines() []*engine {
	if es := f.order.Load(); es != nil {
		return *es
	}
	return nil
}

// shared reports whether other processes share the engine's state.
func (f *fleet) shared() bool { return f.m != nil }

// newPartitionedID returns a new run or queue id (a UUID) of partition p
// of parts: with more than one partition, an RFC 9562 version 8 UUID whose
// last byte is p; else a random (version 4) one.
func newPartitionedID(p, parts int) string {
	u := uuid.New()
	if parts > 1 {
		u[6] = u[6]&0x0f | 0x80
		u[15] = byte(p)
	}
	return u.String()
}

// newRunID returns a new id of a run or queued start of e's partition.
func (e *engine) newRunID() string { return newPartitionedID(e.opts.Partition, e.opts.Partitions) }

// partitionOfID returns the partition a run id, a queued start's id or a
// hook token (hook_<runId>_…) names: 0 for an id made with one partition,
// or one that is no id at all (which no partition then finds).
func partitionOfID(id string, parts int) int {
	if parts <= 1 {
		return 0
	}
	if rest, ok := strings.CutPrefix(id, hookTokenPrefix); ok {
		if i := strings.LastIndexByte(rest, '_'); i >= 0 {
			id = rest[:i]
		}
	}
	id = strings.TrimPrefix(id, queueIDPrefix)
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 8 {
		return 0
	}
	return int(u[15]) % parts
}

// hashPartition is the partition of a key: a concurrency bucket's or an
// idempotency key's.
func hashPartition(key string, parts int) int {
	if parts <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(parts))
}

// validateStart resolves the workflow and validates the input; nothing is
// written.
func (f *fleet) validateStart(name string, input json.RawMessage) (*workflowDef, error) {
	return validateStartIn(f.opts.Catalog, name, input)
}

// startPartition is the partition req's run goes to (see the file's
// comment), and whether it was chosen by a key (else: any local one).
func (f *fleet) startPartition(req startRequest) (int, bool) {
	if f.parts == 1 {
		return 0, true
	}
	if cat := f.opts.Catalog(); cat != nil && cat.Workflows[req.Workflow] != nil {
		// Not validated here: the engine that records it does that.
		if bucket, ok := limitBucket(cat.Workflows[req.Workflow], req.Input); ok {
			return hashPartition(bucket, f.parts), true
		}
	}
	if req.IdemKey != "" {
		return hashPartition("idem:"+req.IdemKey, f.parts), true
	}
	return 0, false
}

// limitBucket is the concurrency bucket of a start of def with input, when
// def has a limit.
func limitBucket(def *workflowDef, input json.RawMessage) (string, bool) {
	if def.Concurrency.Limit == 0 {
		return "", false
	}
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	key, err := def.Concurrency.concurrencyKey(def.Name, input)
	if err != nil {
		return "", false // the start refuses it, wherever it goes
	}
	return concurrencyBucket(def.Name, key), true
}

// localPartition picks a partition this replica owns for work that may go
// anywhere, in turn; -1 when it owns none.
func (f *fleet) localPartition() int {
	es := f.engines()
	if len(es) == 0 {
		return -1
	}
	return es[f.rr.Add(1)%uint64(len(es))].opts.Partition
}

// start durably records a start in its partition (startPartition).
func (f *fleet) start(req startRequest) (startReceipt, error) {
	p, keyed := f.startPartition(req)
	if !keyed {
		if p = f.localPartition(); p < 0 {
			p = hashPartition(uuid.NewString(), f.parts) // this replica owns none: any will do
		}
	}
	if req.IdemKey != "" && f.parts > 1 && checkIdemKey(req.IdemKey) == nil {
		ctx, cancel := context.WithTimeout(context.Background(), engineStorePGWriteTimeout)
		var err error
		p, err = f.m.claimIdemKey(ctx, req.IdemKey, p, f.opts.idemRetention())
		cancel()
		if err != nil {
			return startReceipt{}, err
		}
	}
	return f.startIn(p, req)
}

// startIn records req in partition p, here or on its holder.
func (f *fleet) startIn(p int, req startRequest) (startReceipt, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fleetCallTimeout)
	defer cancel()
	if e := f.engineFor(ctx, p); e != nil {
		return e.start(req)
	}
	var rc startReceipt
	err := f.m.call(ctx, p, fleetOpStart, fleetStartArgs(req), &rc)
	return rc, err
}

// find returns a run (or queued start) from its partition's memory, else
// from the history.
func (f *fleet) find(ctx context.Context, id string) (runRecord, bool, error) {
	p := partitionOfID(id, f.parts)
	if e := f.engineFor(ctx, p); e != nil {
		return e.find(ctx, id)
	}
	var out fleetFound
	if err := f.m.call(ctx, p, fleetOpFind, fleetIDArgs{ID: id}, &out); err != nil {
		return runRecord{}, false, err
	}
	return out.Run, out.Found, nil
}

// wait blocks until run id ends or ctx ends.
func (f *fleet) wait(ctx context.Context, id string) error {
	p := partitionOfID(id, f.parts)
	if e := f.engineFor(ctx, p); e != nil {
		return e.wait(ctx, id)
	}
	return f.m.call(ctx, p, fleetOpWait, fleetIDArgs{ID: id}, nil)
}

// awaitEnd waits until run id ends (a queued start's id: the run it
// becomes, queuedRunID) and returns it as it ended, or as it is when ctx
// ends first, or why it could not be read. A queued start cancelled
// before its turn comes back as cancelled.
func (f *fleet) awaitEnd(ctx context.Context, id string) (runRecord, error) {
	if err := f.wait(ctx, id); err != nil && !errors.Is(err, errRunNotFound) {
		return runRecord{}, err
	}
	r, ok, err := f.find(ctx, queuedRunID(id))
	if err != nil || ok || !isQueueID(id) {
		if err == nil && !ok {
			err = errRunNotFound
		}
		return r, err
	}
	if r, ok, err = f.find(ctx, id); err != nil || ok {
		return r, err // still queued (ctx ended)
	}
	return runRecord{RunID: id, Status: runCancelled, Error: &runError{Name: "Cancelled", Message: "cancelled before its turn"}}, nil
}

// cancelRun cancels run id durably in its partition.
func (f *fleet) cancelRun(id string) (runRecord, error) {
	p := partitionOfID(id, f.parts)
	ctx, cancel := context.WithTimeout(context.Background(), fleetCallTimeout)
	defer cancel()
	if e := f.engineFor(ctx, p); e != nil {
		return e.cancelRun(id)
	}
	var out runRecord
	err := f.m.call(ctx, p, fleetOpCancel, fleetIDArgs{ID: id}, &out)
	return out, err
}

// resumeHook delivers payload to the run waiting on token, in its run's
// partition.
func (f *fleet) resumeHook(token string, payload json.RawMessage) (string, error) {
	p := partitionOfID(token, f.parts)
	ctx, cancel := context.WithTimeout(context.Background(), fleetCallTimeout)
	defer cancel()
	if e := f.engineFor(ctx, p); e != nil {
		return e.resumeHook(token, payload)
	}
	var out string
	err := f.m.call(ctx, p, fleetOpResume, fleetResumeArgs{Token: token, Payload: payload}, &out)
	return out, err
}

// rerun starts a rerun of a run, in the partition of the run it reruns
// (whose limit bucket, if any, is the rerun's too).
func (f *fleet) rerun(ctx context.Context, req rerunRequest) (startReceipt, error) {
	p := partitionOfID(req.RunID, f.parts)
	if e := f.engineFor(ctx, p); e != nil {
		return e.rerun(ctx, req)
	}
	var rc startReceipt
	err := f.m.call(ctx, p, fleetOpRerun, fleetRerunArgs(req), &rc)
	return rc, err
}

// streamRead reads run id's stream after index after. A page read from
// another replica comes with a Wake that a long poll there closes when the
// stream grows or the run ends (or after fleetStreamPoll).
func (f *fleet) streamRead(ctx context.Context, id string, after int) (streamPage, error) {
	p := partitionOfID(id, f.parts)
	if e := f.engineFor(ctx, p); e != nil {
		return e.streamRead(ctx, id, after)
	}
	var out fleetStreamPage
	if err := f.m.call(ctx, p, fleetOpStream, fleetStreamArgs{ID: id, After: after}, &out); err != nil {
		return streamPage{}, err
	}
	page := out.page()
	if !page.Ended {
		wake := make(chan struct{})
		page.Wake = wake
		last := after
		if n := len(page.Entries); n > 0 {
			last = page.Entries[n-1].Index
		}
		go func() {
			defer close(wake)
			f.m.call(ctx, p, fleetOpStreamWait, fleetStreamArgs{ID: id, After: last}, nil)
		}()
	}
	return page, nil
}

// recordTurn journals a finished agent turn in a partition this replica
// owns (or, owning none, any).
func (f *fleet) recordTurn(t agentTurn) (string, error) {
	p := f.localPartition()
	if p < 0 {
		p = hashPartition(uuid.NewString(), f.parts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetCallTimeout)
	defer cancel()
	if e := f.engineFor(ctx, p); e != nil {
		return e.recordTurn(t)
	}
	var id string
	err := f.m.call(ctx, p, fleetOpTurn, t, &id)
	return id, err
}

// listRuns returns one page of the runs matching q, newest first: the
// runs in memory (active, and ended ones not yet archived) of every
// replica merged with the history, each run once; next is the cursor of
// the following page, or nil on the last. The queued starts of the
// matching workflows come with the first page.
func (f *fleet) listRuns(ctx context.Context, q runQuery) (page []runRecord, queued []queuedTrigger, next *runCursor, err error) {
	for _, e := range f.engines() {
		runs, qs := e.memoryRuns(q)
		page, queued = append(page, runs...), append(queued, qs...)
	}
	if f.m != nil {
		var outs []fleetRuns
		if outs, err = fleetFanOut[fleetRuns](ctx, f.m, fleetOpRuns, q); err != nil {
			return nil, nil, nil, err
		}
		for _, o := range outs {
			page, queued = append(page, o.Runs...), append(queued, o.Queued...)
		}
	}
	return mergeRunPages(ctx, f.opts.History, q, page, queued)
}

// runStats is the overview: every replica's runs in memory and the
// history's.
func (f *fleet) runStats(ctx context.Context, q runStatsQuery) (runStats, error) {
	active := f.activeByStatus()
	var mem []runRecord
	for _, e := range f.engines() {
		mem = append(mem, e.memoryRunsSince(q.Since)...)
	}
	if f.m != nil {
		outs, err := fleetFanOut[fleetStats](ctx, f.m, fleetOpStats, q.Since)
		if err != nil {
			return runStats{}, err
		}
		for _, o := range outs {
			mem = append(mem, o.Runs...)
			addCounts(active, o.Active)
		}
	}
	return runStatsFrom(ctx, f.opts.History, q, active, mem)
}

// addCounts adds the counts of src to dst's.
func addCounts(dst, src map[string]int) {
	for k, n := range src {
		dst[k] += n
	}
}

// rerunsStarted reports whether any run may have reruns: with other
// replicas, always (one of them may have started one).
func (f *fleet) rerunsStarted() bool {
	if f.m != nil {
		return true
	}
	return slices.ContainsFunc(f.engines(), (*engine).rerunsStarted)
}

// queueDepths is the queued starts per workflow in this replica's
// partitions.
func (f *fleet) queueDepths() map[string]int {
	out := map[string]int{}
	for _, e := range f.engines() {
		addCounts(out, e.queueDepths())
	}
	return out
}

// activeByStatus is how many runs of this replica's partitions have not
// ended, by status, and how many starts wait in their queues.
func (f *fleet) activeByStatus() map[string]int {
	out := map[string]int{runPending: 0, runRunning: 0, runWaiting: 0, runQueued: 0}
	for _, e := range f.engines() {
		addCounts(out, e.activeByStatus())
	}
	return out
}

// journalHealth is the health of this replica's logs: the first failed
// one's, else ok.
func (f *fleet) journalHealth() journalHealth {
	for _, e := range f.engines() {
		if h := e.journalHealth(); h.State != "ok" {
			return h
		}
	}
	return journalHealth{State: "ok"}
}

// storeHealth reports the store: on PostgreSQL, this replica's membership
// and the partitions it owns.
func (f *fleet) storeHealth() engineStoreHealth {
	if f.m == nil {
		return f.opts.Store.health()
	}
	return f.m.health()
}

// resumeAll schedules the unfinished runs of every local partition.
func (f *fleet) resumeAll() {
	for _, e := range f.engines() {
		e.resumeAll()
	}
}

// close leaves the members and hands every local partition over.
func (f *fleet) close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	if f.m != nil {
		f.m.leave()
	}
	return f.closeLocal()
}

// closeLocal closes every local partition at once, returning their
// failures.
func (f *fleet) closeLocal() error {
	es := f.engines()
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Go(func() { errs[i] = e.close() })
	}
	wg.Wait()
	f.mu.Lock()
	clear(f.local)
	f.heldChangedLocked()
	f.mu.Unlock()
	return errors.Join(errs...)
}
