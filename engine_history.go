package main

// How the engine's memory stays bounded by active work (issue: a long life
// stays small and fast). A run that ends, once its end is durable, is handed
// to the run history (PostgreSQL's svc.runs, workflow_history.go) by the
// archiver and then dropped from memory; reads fall back to the history.
// Snapshots hold what memory holds (active runs, queued triggers, hooks, and
// ended runs not yet archived), and are encoded and written off the engine
// lock. Ended runs are pruned from the history after the retention.

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

const (
	// archiveInterval is how often the archiver moves ended runs to the
	// history.
	archiveInterval = 250 * time.Millisecond
	// archiveBatch is the most runs one archive call carries.
	archiveBatch = 2000
	// archiveForeignDelay is how long a replica leaves a run another
	// replica executed to that replica's archiver before it looks whether
	// the history has it (and archives it if not: its owner died first).
	archiveForeignDelay = 2 * time.Second
	// pruneInterval is how often runs past the retention are deleted.
	pruneInterval = time.Hour
	// historyTimeout bounds one call to the history.
	historyTimeout = 30 * time.Second
	// compactRetryDelay is how long a failed compaction waits before the
	// next try.
	compactRetryDelay = 30 * time.Second
)

// maybeCompactLocked starts a compaction once the live log is large, so
// boot time does not grow with history. Under mu it only cuts the log and
// copies the state (both proportional to what memory holds); encoding and
// writing the snapshot happen on a goroutine, so no start, step or read
// waits for them. mu must be held.
func (e *engine) maybeCompactLocked() {
	// Past the threshold, and past twice the last snapshot, so a large
	// active set is not rewritten over and over.
	if e.compacting || e.j.size() < max(e.opts.CompactBytes, 2*int64(e.snapBytes)) || time.Now().Before(e.compactRetry) {
		return
	}
	c, err := e.j.beginCompact(e.applied)
	if err != nil {
		e.log.Error("journal compaction failed", "err", err)
		e.compactRetry = time.Now().Add(compactRetryDelay)
		return
	}
	st := e.copyStateLocked()
	e.compacting = true
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		b, err := json.Marshal(&st)
		if err != nil {
			panic(err) // state is plain data; failure is a programming error
		}
		err = c.Finish(b)
		e.mu.Lock()
		e.compacting = false
		if err != nil {
			e.compactRetry = time.Now().Add(compactRetryDelay)
		} else {
			e.snapBytes = len(b)
		}
		e.mu.Unlock()
		if err != nil {
			e.log.Error("journal compaction failed", "err", err)
		}
	}()
}

// copyStateLocked returns a copy of the state that later changes do not
// touch. mu must be held.
func (e *engine) copyStateLocked() engineState {
	st := engineState{Runs: make(map[string]*runRecord, len(e.st.Runs)), Queues: make(map[string][]*queuedTrigger, len(e.st.Queues)),
		Hooks: make(map[string]hookRef, len(e.st.Hooks)), Clock: e.st.Clock}
	for id, r := range e.st.Runs {
		c := snapshotRun(r)
		st.Runs[id] = &c
	}
	for wf, q := range e.st.Queues {
		st.Queues[wf] = slices.Clone(q) // triggers are never changed, only removed
	}
	for tok, ref := range e.st.Hooks {
		st.Hooks[tok] = ref
	}
	st.Streams = e.streamsOfLocked()
	if len(e.st.Schedules) > 0 {
		st.Schedules = make(map[string]*scheduleState, len(e.st.Schedules))
		for wf, s := range e.st.Schedules {
			c := *s
			st.Schedules[wf] = &c
		}
	}
	if len(e.st.Idem) > 0 {
		// A snapshot keeps the live keys only: it is as large as the
		// active work and the retention, whatever the history.
		e.dropExpiredIdemLocked(time.Now())
		st.Idem = make(map[string]*idemEntry, len(e.st.Idem))
		for key, k := range e.st.Idem {
			st.Idem[key] = k // entries are never changed, only removed
		}
	}
	return st
}

// endedLocked queues a run whose end is durable for the archiver. mu must
// be held.
func (e *engine) endedLocked(id string) {
	if e.opts.History != nil {
		e.ended = append(e.ended, id)
	}
}

// startHistory starts the archiver and the pruner, when there is a history.
func (e *engine) startHistory() {
	if e.opts.History == nil {
		return
	}
	e.noteArchivedReruns()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		tick := time.NewTicker(archiveInterval)
		defer tick.Stop()
		var prune <-chan time.Time
		if e.opts.Retention > 0 {
			pt := time.NewTicker(pruneInterval)
			defer pt.Stop()
			prune = pt.C
			e.prune()
		}
		for {
			select {
			case <-e.stop:
				e.archive() // what ended before close leaves memory for good
				return
			case <-tick.C:
				e.archive()
			case <-prune:
				e.prune()
			}
		}
	}()
}

// archive moves the runs whose end is durable to the history, then drops
// them from memory. A failed call keeps them in memory (and in snapshots)
// for the next tick; the log says so once per outage, and when it ends.
// On a shared log each replica archives the runs it executed; another's
// runs it leaves to their owner for archiveForeignDelay, then archives only
// those the history still lacks, so N replicas write each run once.
func (e *engine) archive() {
	for {
		e.mu.Lock()
		epoch := e.epoch
		n := min(len(e.ended), archiveBatch)
		var runs []runRecord
		var foreign, later []string
		young := time.Now().Add(-archiveForeignDelay)
		for _, id := range e.ended[:n] {
			r := e.st.Runs[id]
			switch {
			case r == nil || !terminal(r.Status):
			case e.self == "" || r.Owner == e.self:
				runs = append(runs, snapshotRun(r))
			case r.EndedAt.After(young):
				later = append(later, id)
			default:
				foreign = append(foreign, id)
			}
		}
		e.mu.Unlock()
		if n == 0 {
			return
		}
		err := e.archiveForeign(foreign, &runs)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
			err = e.opts.History.archive(ctx, runs)
			cancel()
		}
		if err != nil {
			if !e.archiveDown { // said once per outage, not every tick
				e.log.Warn("archive ended runs to the run history; they stay in memory until it works", "runs", len(runs)+len(foreign), "err", err)
			}
			e.archiveDown = true
			return
		}
		if e.archiveDown {
			e.log.Info("the run history works again: archiving the ended runs kept in memory")
			e.archiveDown = false
		}
		e.mu.Lock()
		for _, r := range runs {
			foreign = append(foreign, r.RunID) // now all in the history
		}
		for _, id := range foreign {
			if cur := e.st.Runs[id]; cur != nil && terminal(cur.Status) {
				delete(e.st.Runs, id)
			}
		}
		if e.epoch == epoch { // else recovery queued the rebuilt state's ended runs afresh
			e.ended = append(later, e.ended[n:]...)
		}
		e.mu.Unlock()
		if len(later) == n {
			return // only runs left to their owners: look again next tick
		}
	}
}

// archiveForeign adds to runs those of foreign, runs other replicas
// executed, that the history does not hold.
func (e *engine) archiveForeign(foreign []string, runs *[]runRecord) error {
	if len(foreign) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
	held, err := e.opts.History.archived(ctx, foreign)
	cancel()
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range foreign {
		if r := e.st.Runs[id]; r != nil && !held[id] {
			*runs = append(*runs, snapshotRun(r))
		}
	}
	return nil
}

// prune deletes the runs that ended before the retention.
func (e *engine) prune() {
	ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
	defer cancel()
	n, err := e.opts.History.prune(ctx, time.Now().Add(-e.opts.Retention))
	if err != nil {
		e.log.Warn("prune the run history", "err", err)
	} else if n > 0 {
		e.log.Info("pruned ended runs past the retention", "runs", n, "retention", e.opts.Retention)
	}
}

// find returns a run from memory, else from the history.
func (e *engine) find(ctx context.Context, id string) (runRecord, bool, error) {
	e.knows(ctx, id)
	if isQueueID(id) {
		if r, ok := e.findQueued(id); ok {
			return r, true, nil
		}
		return runRecord{}, false, nil
	}
	if r, ok := e.get(id); ok {
		return r, true, nil
	}
	if e.opts.History == nil {
		return runRecord{}, false, nil
	}
	return e.opts.History.get(ctx, id)
}

// memoryRuns returns the runs in memory that match q and, on the first
// page, the queued starts of the matching workflows.
func (e *engine) memoryRuns(q runQuery) (page []runRecord, queued []queuedTrigger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.st.Runs {
		if q.matches(r) {
			page = append(page, snapshotRun(r))
		}
	}
	if q.After == nil {
		for _, b := range sortedKeys(e.st.Queues) {
			for _, t := range e.st.Queues[b] {
				if q.Workflow == "" || q.Workflow == t.WorkflowName {
					queued = append(queued, *t)
				}
			}
		}
	}
	return page, queued
}

// mergeRunPages merges the runs in memory that match q (of one engine, or
// of every replica's) with the history's (nil: none), each run once,
// newest first, and cuts the page at q.Limit: next is the cursor of the
// following page, or nil on the last.
func mergeRunPages(ctx context.Context, h runHistory, q runQuery, page []runRecord, queued []queuedTrigger) ([]runRecord, []queuedTrigger, *runCursor, error) {
	seen := make(map[string]bool, len(page))
	mem := page
	page = page[:0:0]
	for _, r := range mem {
		if !seen[r.RunID] {
			seen[r.RunID] = true
			page = append(page, r)
		}
	}
	if h != nil {
		hq := q
		hq.Limit++ // one more than the page tells whether another follows
		hist, err := h.list(ctx, hq)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, r := range hist {
			if !seen[r.RunID] { // a run that ended while we read is in both
				page = append(page, r)
			}
		}
	}
	slices.SortFunc(page, func(a, b runRecord) int {
		if runCursorOf(&a).before(runCursorOf(&b)) {
			return -1
		}
		return 1
	})
	var next *runCursor
	if len(page) > q.Limit {
		page = page[:q.Limit]
		c := runCursorOf(&page[len(page)-1])
		next = &c
	}
	return page, queued, next, nil
}

// activeByStatus is how many runs the engine holds that have not ended, by
// status (pending, running, waiting), and how many starts wait in its
// queues (queued): what a boot resumed, what the overview shows as now.
func (e *engine) activeByStatus() map[string]int {
	active := map[string]int{runPending: 0, runRunning: 0, runWaiting: 0, runQueued: 0}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.st.Runs {
		if !terminal(r.Status) {
			active[r.Status]++
		}
	}
	for _, q := range e.st.Queues {
		active[runQueued] += len(q)
	}
	return active
}
