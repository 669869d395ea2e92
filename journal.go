package main

// The journal is svc's embedded durable store: an in-process, append-only,
// segmented log in one directory (the engine uses .svc/journal/).
//
// Files. Segments are named by a zero-padded sequence number,
// 00000000000000000001.seg, 00000000000000000002.seg, …, with no gaps. A
// snapshot N.snap replaces every segment numbered below N: open replays the
// newest snapshot, then the segments from N on. Temporary files end in .tmp.
//
// Frames. Every record, and the snapshot, is one frame: a 12-byte header
// then the payload. Header, little-endian: uint32 payload length, whose top
// bit is the commit flag; uint32 CRC32C (Castagnoli) of the payload; uint32
// CRC32C of the first 8 header bytes, so the length can be trusted without
// reading the payload. The committer writes every batch with one write call
// and sets the commit flag on the batch's last frame only; it issues the
// next write only after the previous one was fdatasynced. So only the final
// write in the final segment can be torn by a crash, and a commit flag seen
// before further bytes proves that the write it closes finished before a
// later one began.
//
// Recovery rule. Segments are scanned in order from byte 0. A frame is valid
// when both checksums match and it fits in the file. At the first invalid
// frame, at offset off:
//   - in any segment but the last, it is corruption;
//   - in the last segment, the frames from off on are walked by their
//     headers. The damage is a torn tail, truncated at off (and fsynced), if
//     the walk meets, first, one of: the end of the file; a header cut short
//     by it, or whose length runs past it; a frame with the commit flag (its
//     payload may be bad) followed by nothing but zero bytes; a bad header
//     with no valid header starting at any later offset. It is corruption if
//     it meets a frame with the commit flag followed by non-zero bytes, or a
//     bad header with a valid header somewhere after it.
//
// Preallocation. The committer preallocates the current segment a step
// ahead of its last batch (zeros, journalPreallocStep), so that a batch's
// fdatasync does not also commit a change of the file's size; it cuts the
// zeros off when it starts the next segment or closes. After a crash the
// last segment may end in such zeros: a tail of nothing but zero bytes is
// a torn tail like any other.
//
// Corruption fails open with a *journalCorruptError naming the file and the
// offset of the bad frame, and nothing is modified. In words: the damage must
// lie in the final write, and no trace of a later write may follow it. This
// accepts an incomplete last frame, a bad checksum anywhere in
// the final write, a zero-filled tail (a file system may extend a file
// before its data reaches the disk), and rejects damage to any write that was
// followed by another: that write had been synced, so its loss is not a
// crash's doing. A damaged final write cannot be told from a torn one, so if
// the disk later damages the final batch its records are dropped silently;
// the journal's guarantees are against crashes, not bad media.
//
// Guarantees. Records are written in the order Append was called, and a
// batch is acknowledged only after its fdatasync returned. Because the log is
// append-only and the rule above truncates only from the first damaged frame
// on, a record is never durable, nor replayed, without every record appended
// before it: after any crash, open replays a prefix of the appended records
// that contains every acknowledged one.
//
// Not handled: two processes opening one directory at once (the caller must
// ensure a single owner).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// journalDefaultSegmentSize is the size past which the committer starts
	// a new segment, unless journalOptions.SegmentSize says otherwise.
	journalDefaultSegmentSize = 64 << 20
	// journalDefaultCloseTimeout bounds how long Close waits for pending
	// appends to reach the disk.
	journalDefaultCloseTimeout = 10 * time.Second
	// journalHeaderSize is the size of a frame header.
	journalHeaderSize = 12
	// journalCommitFlag marks the last frame of a write in the length word.
	journalCommitFlag = 1 << 31
	// journalMaxPayload is the largest record or snapshot a frame can hold.
	journalMaxPayload = journalCommitFlag - 1
	// journalDefaultLazyDelay is how long a batch of lazy records only
	// (history, not state: AppendLazy) waits for company before it is
	// committed, unless journalOptions.LazyDelay says otherwise; a record
	// appended with Append takes it along at once.
	journalDefaultLazyDelay = 10 * time.Millisecond
	// journalSpareLimit is the largest batch buffer the committer keeps for
	// reuse; a buffer grown by a huge record is left to the collector.
	journalSpareLimit = 1 << 20
	// journalSeqDigits is the width of the zero-padded sequence in file names.
	journalSeqDigits = 20
	// journalSegmentExt, journalSnapshotExt and journalTempExt are the file
	// name suffixes of segments, snapshots and files being written.
	journalSegmentExt  = ".seg"
	journalSnapshotExt = ".snap"
	journalTempExt     = ".tmp"
)

var (
	// errJournalLocked reports that another process has the journal open.
	errJournalLocked = errors.New("another process (a second svc dev of this project?) has the journal open")
	// errJournalClosed is returned by appends and compactions after Close.
	errJournalClosed = errors.New("journal closed")
	// errJournalCorrupt is wrapped by every *journalCorruptError.
	errJournalCorrupt = errors.New("journal corrupt")
)

// journalCorruptError reports damage that open must not repair: a bad frame
// before the tail, a missing segment or a bad snapshot. Segment is the path
// of the damaged file and Offset the byte offset of the first bad frame.
type journalCorruptError struct {
	Segment string
	Offset  int64
	Reason  string
}

// Error describes the damage and where it is.
func (e *journalCorruptError) Error() string {
	return fmt.Sprintf("journal corrupt: %s in %q at byte offset %d", e.Reason, e.Segment, e.Offset)
}

// Unwrap returns errJournalCorrupt.
func (e *journalCorruptError) Unwrap() error { return errJournalCorrupt }

// journalOptions tunes a journal; the zero value selects the defaults.
type journalOptions struct {
	// SegmentSize is the size past which a new segment is started; zero
	// means journalDefaultSegmentSize. A batch never spans two segments, so
	// a segment exceeds it only when it holds a single larger batch.
	SegmentSize int64
	// CloseTimeout bounds Close's wait for pending appends; zero means
	// journalDefaultCloseTimeout.
	CloseTimeout time.Duration
	// LazyDelay is how long AppendLazy's records may wait for company;
	// zero means journalDefaultLazyDelay.
	LazyDelay time.Duration
	// OnFail, when set, is called once, on a goroutine of its own, with the
	// failure that stopped the journal from writing (see Err).
	OnFail func(error)
	// Metrics records each batch's fdatasync latency, records and bytes;
	// nil records nothing.
	Metrics *metrics
	// syncHook, when set, is called by the committer after writing a batch
	// and before its fdatasync. Tests use it to hold a batch open.
	syncHook func()
}

// journalStats counts the committer's work since open.
type journalStats struct {
	Syncs   int64 // fdatasyncs of batches
	Records int64 // records made durable
}

// journal is an open journal. Its methods are safe for concurrent use. One
// committer goroutine, started by openJournal and stopped by Close, owns the
// current segment file.
type journal struct {
	dir  string
	opts journalOptions
	lock *os.File // holds the exclusive flock on dir/LOCK until Close

	// compactMu serializes Compact and Close.
	compactMu sync.Mutex

	// mu guards open through err: the queue shared by appenders and the
	// committer.
	mu     sync.Mutex
	open   *journalPending // batch collecting appends, nil if none
	sealed *journalPending // batch to write before cut, nil if none
	cut    *journalCut     // requested segment cut, nil if none
	spare  []byte          // buffer for the next batch
	idle   bool            // committer is waiting on wake
	lazy   bool            // open holds lazy records only, waiting for LazyDelay
	closed bool
	err    error // sticky write or sync failure

	wake    chan struct{} // capacity 1; sent to when idle is cleared
	stopped chan struct{} // closed when the committer has exited
	// writer holds the right to write the current segment (capacity 1,
	// full when nobody writes): the committer takes it for each batch, and
	// so does a waiter that commits its own batch (commitWaited).
	writer chan struct{}

	size    atomic.Int64 // bytes appended since the last snapshot
	syncs   atomic.Int64
	records atomic.Int64

	// Owned by the holder of writer (by openJournal before it starts).
	seg     *os.File
	seq     uint64 // sequence number of seg
	segSize int64  // bytes in seg
	// segAlloc is seg's size on disk: segSize and the zeros preallocated
	// after it (journalPreallocate), which its next batches overwrite;
	// noAlloc is set once the file system refused to preallocate.
	segAlloc int64
	noAlloc  bool
	closeErr error // from closing seg; read after stopped is closed
}

// journalPending is a batch of appends: every Append whose record rides the
// same write returns the same *journalPending.
type journalPending struct {
	done chan struct{} // closed once the batch is durable or failed
	err  error         // set before done is closed
	j    *journal      // the journal it is appended to; nil for a batch that failed at once

	// Owned by the journal's queue until written.
	buf  []byte // the encoded frames
	last int    // offset in buf of the last frame
	n    int    // number of frames
}

// journalCut asks the committer to start a new segment after everything
// appended before the request; the committer fills seq and err and closes
// done.
type journalCut struct {
	done chan struct{}
	seq  uint64 // the first segment not covered by the snapshot
	err  error
}

// openJournal opens the journal in dir, creating the directory if needed.
// It calls onSnapshot with the newest snapshot, if there is one, then
// onRecord for every record after it, in append order, and starts the
// committer. Neither callback may retain its slice after returning. A torn
// tail is truncated; other damage is a *journalCorruptError and leaves the
// files untouched. A callback's error stops open and is returned wrapped.
func openJournal(dir string, opts journalOptions, onSnapshot func([]byte) error, onRecord func([]byte) error) (*journal, error) {
	if onSnapshot == nil || onRecord == nil {
		return nil, fmt.Errorf("open journal %q: nil replay callback", dir)
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = journalDefaultSegmentSize
	}
	if opts.LazyDelay <= 0 {
		opts.LazyDelay = journalDefaultLazyDelay
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = journalDefaultCloseTimeout
	}
	j := &journal{
		dir:     dir,
		opts:    opts,
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		writer:  make(chan struct{}, 1),
	}
	j.writer <- struct{}{}
	if err := journalMkdir(dir); err != nil {
		return nil, fmt.Errorf("open journal %q: %w", dir, err)
	}
	lock, err := lockFile(filepath.Join(dir, "LOCK"))
	if errors.Is(err, errLocked) {
		err = errJournalLocked
	}
	if err != nil {
		return nil, fmt.Errorf("open journal %q: %w", dir, err)
	}
	j.lock = lock
	if err := j.recover(onSnapshot, onRecord); err != nil {
		lock.Close()
		return nil, fmt.Errorf("open journal %q: %w", dir, err)
	}
	go j.run()
	return j, nil
}

// recover replays the directory and leaves j.seg open for appending.
func (j *journal) recover(onSnapshot, onRecord func([]byte) error) error {
	if err := journalMkdir(j.dir); err != nil {
		return err
	}
	files, err := journalList(j.dir)
	if err != nil {
		return err
	}
	first := uint64(1)
	var buf []byte
	if n := len(files.snapshots); n > 0 {
		first = files.snapshots[n-1]
		path := j.path(first, journalSnapshotExt)
		if buf, err = journalReadFile(path, buf); err != nil {
			return err
		}
		fr := journalDecodeFrame(buf)
		if fr.state != journalFrameOK || fr.size != len(buf) {
			return &journalCorruptError{Segment: path, Offset: 0, Reason: "bad snapshot"}
		}
		if err := onSnapshot(fr.payload); err != nil {
			return fmt.Errorf("replay snapshot %q: %w", path, err)
		}
	}
	var live, obsolete []uint64
	for _, seq := range files.segments {
		if seq < first {
			obsolete = append(obsolete, seq)
		} else {
			live = append(live, seq)
		}
	}
	var end int64 // valid bytes in the last live segment
	for i, seq := range live {
		path := j.path(seq, journalSegmentExt)
		if seq != first+uint64(i) {
			return &journalCorruptError{Segment: j.path(first+uint64(i), journalSegmentExt), Offset: 0, Reason: "missing segment"}
		}
		if buf, err = journalReadFile(path, buf); err != nil {
			return err
		}
		last := i == len(live)-1
		if end, err = journalScan(path, buf, last, onRecord); err != nil {
			return err
		}
		j.size.Add(end)
		if last && end < int64(len(buf)) {
			if err := journalTruncate(path, end); err != nil {
				return err
			}
		}
	}
	// Replay succeeded: now clean up what an interrupted compaction left.
	var removals []string
	for _, seq := range obsolete {
		removals = append(removals, j.path(seq, journalSegmentExt))
	}
	for _, seq := range files.snapshots[:max(len(files.snapshots)-1, 0)] {
		removals = append(removals, j.path(seq, journalSnapshotExt))
	}
	for _, name := range files.temps {
		removals = append(removals, filepath.Join(j.dir, name))
	}
	if err := journalRemove(j.dir, removals); err != nil {
		return err
	}
	if len(live) == 0 {
		return j.createSegment(first)
	}
	j.seq = live[len(live)-1]
	j.segSize, j.segAlloc = end, end
	j.seg, err = os.OpenFile(j.path(j.seq, journalSegmentExt), os.O_WRONLY, 0)
	return err
}

// Append queues payload to be written after every record appended before
// it and returns at once. The payload is copied, so the caller may reuse it.
// The record rides the next batch whether or not anyone waits for it; call
// Wait on the result to block until it is durable. After Close, or once the
// journal has failed, the result carries that error.
func (j *journal) Append(payload []byte) *journalPending { return j.append(payload, journalNow) }

// AppendLazy is Append for a record that is history, not state (a chat
// turn's record, which nobody waits for): when no batch is due, it waits up
// to LazyDelay for company, so that a stream of them takes one
// fdatasync per delay instead of one each (each also costs the Go runtime's
// monitor a burst of polling while the sync blocks). A record appended with
// Append, a compaction's cut and Close take it along at once.
func (j *journal) AppendLazy(payload []byte) *journalPending { return j.append(payload, journalLazy) }

// AppendWaited is Append for a caller that calls Wait at once: the
// committer is not woken for it, since Wait writes the batch itself unless
// the committer is writing (commitWaited). This spares a durable append the
// two hand-offs between goroutines (to the committer and back), each a
// thread's wake-up when the process was idle: a sequential start-and-wait
// run has two of them.
func (j *journal) AppendWaited(payload []byte) *journalPending {
	return j.append(payload, journalWaited)
}

// journalUrgency is how soon an append's batch is handed to the committer.
type journalUrgency int

const (
	journalNow    journalUrgency = iota // at once (Append)
	journalLazy                         // after LazyDelay, unless company comes (AppendLazy)
	journalWaited                       // never: its caller's Wait writes it (AppendWaited)
)

// append is Append, AppendLazy or AppendWaited, as urgency says.
func (j *journal) append(payload []byte, urgency journalUrgency) *journalPending {
	if len(payload) > journalMaxPayload {
		return journalFailed(fmt.Errorf("journal append: record of %d bytes exceeds the %d-byte limit", len(payload), journalMaxPayload))
	}
	crc := journalChecksum(payload)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return journalFailed(errJournalClosed)
	}
	if j.err != nil {
		return journalFailed(j.err)
	}
	b := j.open
	switch {
	case b == nil:
		b = &journalPending{done: make(chan struct{}), buf: j.spare, j: j}
		j.spare = nil
		j.open = b
		switch urgency {
		case journalLazy:
			j.lazy = true
			time.AfterFunc(j.opts.LazyDelay, func() { j.due(b) })
		case journalNow:
			j.wakeLocked()
		}
	case j.lazy && urgency != journalLazy:
		j.lazy = false
		if urgency == journalNow {
			j.wakeLocked()
		}
	}
	b.last = len(b.buf)
	b.buf = journalAppendFrame(b.buf, payload, crc)
	b.n++
	j.size.Add(int64(journalHeaderSize + len(payload)))
	return b
}

// due hands b, a batch of lazy records whose delay has passed, to the
// committer, unless it already has it.
func (j *journal) due(b *journalPending) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.open == b && j.lazy {
		j.lazy = false
		j.wakeLocked()
	}
}

// AppendDurable appends payload and waits until it is on disk.
func (j *journal) AppendDurable(payload []byte) error {
	return j.AppendWaited(payload).Wait()
}

// Wait blocks until the batch holding the record is durable, and with it
// every record appended before, or returns why it never will be. When the
// committer is not writing, it writes the batch itself (commitWaited).
func (p *journalPending) Wait() error {
	if p.j != nil {
		p.j.commitWaited(p)
	}
	<-p.done
	return p.err
}

// commitWaited writes p, on its waiter's goroutine, once nobody else
// writes, unless p is done by then or is not the open batch any more (the
// committer took it, or it waits behind a compaction's cut, which the
// committer writes first).
func (j *journal) commitWaited(p *journalPending) {
	select {
	case <-p.done:
		return
	case <-j.writer:
	}
	defer func() { j.writer <- struct{}{} }()
	j.mu.Lock()
	if j.open != p || j.cut != nil {
		j.mu.Unlock()
		return
	}
	j.open, j.lazy = nil, false
	failed := j.err
	j.mu.Unlock()
	j.finish(p, failed)
}

// finish writes batch b, unless the journal failed already, tells its
// waiters and returns its failure; the holder of writer calls it.
func (j *journal) finish(b *journalPending, failed error) error {
	if failed == nil {
		failed = j.fail(j.commit(b))
	}
	b.err = failed
	close(b.done)
	if cap(b.buf) <= journalSpareLimit {
		j.mu.Lock()
		if j.spare == nil {
			j.spare = b.buf[:0]
		}
		j.mu.Unlock()
	}
	b.buf = nil
	return failed
}

// journalFailed returns a batch that already failed with err.
func journalFailed(err error) *journalPending {
	p := &journalPending{done: make(chan struct{}), err: err}
	close(p.done)
	return p
}

// Compact replaces every record appended so far with a snapshot. It calls
// snapshot with the append lock held: the snapshot must reflect exactly the
// records whose Append has returned, and Appends that start meanwhile wait
// and land after it. snapshot must not call the journal, nor wait for a
// goroutine that may be blocked in Append. Only snapshot runs under the
// append lock: writing the snapshot file (temp file, fsync, rename,
// directory fsync) and deleting the covered segments happen after it is
// released, while appends go on into a fresh segment. A crash at any point
// leaves either the old snapshot and segments or the new snapshot and the
// later segments, and open replays the same state from either.
func (j *journal) Compact(snapshot func() []byte) error {
	var snap []byte
	c, err := j.beginCompact(func() { snap = snapshot() })
	if err != nil {
		return err
	}
	return c.Finish(snap)
}

// BeginCompact cuts the log for a snapshot and returns at once: the
// snapshot must reflect exactly the records whose Append returned before
// the call, so a caller that updates its state and appends under its own
// mutex calls BeginCompact and copies its state with that mutex held, then
// releases it and encodes the copy and calls Finish off the lock. Until
// Finish, further compactions and Close wait.
func (j *journal) BeginCompact() (*journalCompaction, error) { return j.beginCompact(nil) }

// journalCompaction is a compaction begun and not yet finished.
type journalCompaction struct {
	j       *journal
	cut     *journalCut
	covered int64 // bytes the snapshot replaces
}

// beginCompact seals the open batch, asks the committer for a new segment
// and runs capture, when set, under the append lock.
func (j *journal) beginCompact(capture func()) (*journalCompaction, error) {
	j.compactMu.Lock()
	j.mu.Lock()
	if j.closed || j.err != nil {
		err := j.err
		if j.closed {
			err = errJournalClosed
		}
		j.mu.Unlock()
		j.compactMu.Unlock()
		return nil, fmt.Errorf("compact journal %q: %w", j.dir, err)
	}
	if capture != nil {
		capture()
	}
	c := &journalCompaction{j: j, cut: &journalCut{done: make(chan struct{})}}
	j.sealed, j.open, j.lazy = j.open, nil, false
	j.cut = c.cut
	c.covered = j.size.Swap(0)
	j.wakeLocked()
	j.mu.Unlock()
	return c, nil
}

// Finish writes snap as the snapshot covering every segment before the cut
// and deletes them.
func (c *journalCompaction) Finish(snap []byte) error {
	j := c.j
	defer j.compactMu.Unlock()
	<-c.cut.done
	err := c.cut.err
	if err == nil {
		err = j.writeSnapshot(c.cut.seq, snap)
	}
	if err != nil {
		j.size.Add(c.covered)
		return fmt.Errorf("compact journal %q: %w", j.dir, err)
	}
	files, err := journalList(j.dir)
	if err != nil {
		return fmt.Errorf("compact journal %q: %w", j.dir, err)
	}
	var removals []string
	for _, seq := range files.segments {
		if seq < c.cut.seq {
			removals = append(removals, j.path(seq, journalSegmentExt))
		}
	}
	for _, seq := range files.snapshots {
		if seq < c.cut.seq {
			removals = append(removals, j.path(seq, journalSnapshotExt))
		}
	}
	if err := journalRemove(j.dir, removals); err != nil {
		return fmt.Errorf("compact journal %q: %w", j.dir, err)
	}
	return nil
}

// writeSnapshot makes snap the snapshot covering the segments below seq:
// temp file, fsync, rename, directory fsync.
func (j *journal) writeSnapshot(seq uint64, snap []byte) (err error) {
	if len(snap) > journalMaxPayload {
		return fmt.Errorf("write snapshot: %d bytes exceed the %d-byte limit", len(snap), journalMaxPayload)
	}
	final := j.path(seq, journalSnapshotExt)
	tmp := final + journalTempExt
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, privateFileMode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var hdr [journalHeaderSize]byte
	journalPutHeader(hdr[:], uint32(len(snap))|journalCommitFlag, journalChecksum(snap))
	if _, err := f.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := f.Write(snap); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(j.dir)
}

// Err returns the failure that stopped the journal from writing, or nil.
// A failed journal refuses every append; the owner closes and reopens it.
func (j *journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Size returns the bytes appended since the last snapshot (the size of the
// live segments plus pending appends); the caller compacts when it grows.
func (j *journal) Size() int64 { return j.size.Load() }

// Stats returns the committer's counters.
func (j *journal) Stats() journalStats {
	return journalStats{Syncs: j.syncs.Load(), Records: j.records.Load()}
}

// Close writes the pending appends, waiting at most CloseTimeout (and for a
// running Compact), and stops the committer. Later appends fail with
// errJournalClosed. It returns the journal's sticky failure, if any.
func (j *journal) Close() error {
	j.compactMu.Lock()
	defer j.compactMu.Unlock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return fmt.Errorf("close journal %q: %w", j.dir, errJournalClosed)
	}
	j.closed = true
	j.wakeLocked()
	j.mu.Unlock()

	defer j.lock.Close() // releases the flock
	timer := time.NewTimer(j.opts.CloseTimeout)
	defer timer.Stop()
	select {
	case <-j.stopped:
	case <-timer.C:
		return fmt.Errorf("close journal %q: pending appends not flushed within %v", j.dir, j.opts.CloseTimeout)
	}
	j.mu.Lock()
	err := j.err
	j.mu.Unlock()
	if err == nil {
		err = j.closeErr
	}
	if err != nil {
		return fmt.Errorf("close journal %q: %w", j.dir, err)
	}
	return nil
}

// wakeLocked wakes the committer if it is waiting. j.mu must be held.
func (j *journal) wakeLocked() {
	if j.idle {
		j.idle = false
		j.wake <- struct{}{} // cannot block: the committer drained it before idling
	}
}

// run is the committer: it writes one batch at a time, in append order, with
// one write and one fdatasync each, until Close and the queue is empty.
func (j *journal) run() {
	defer close(j.stopped)
	// idle reports whether there is nothing to write yet: a batch of lazy
	// records waits for its delay, unless closing. j.mu must be held.
	idle := func() bool { return j.cut == nil && (j.open == nil || j.lazy && !j.closed) }
	for {
		j.mu.Lock()
		for idle() {
			if j.closed {
				j.mu.Unlock()
				<-j.writer // a waiter writing its own batch finishes first
				j.closeErr = errors.Join(j.trimSegment(), j.seg.Close())
				return
			}
			j.idle = true
			j.mu.Unlock()
			<-j.wake
			j.mu.Lock()
		}
		j.mu.Unlock()
		<-j.writer
		j.mu.Lock()
		if idle() { // a waiter wrote the batch meanwhile
			j.mu.Unlock()
			j.writer <- struct{}{}
			continue
		}
		b, cut := j.open, j.cut
		if cut != nil {
			b, j.sealed, j.cut = j.sealed, nil, nil
		} else {
			j.open, j.lazy = nil, false
		}
		failed := j.err
		j.mu.Unlock()

		if b != nil {
			failed = j.finish(b, failed)
		}
		if cut != nil {
			if failed == nil && j.segSize > 0 {
				failed = j.fail(j.roll())
			}
			cut.seq, cut.err = j.seq, failed
			close(cut.done)
		}
		j.writer <- struct{}{}
	}
}

// fail makes err, if any, the journal's sticky failure and returns it.
func (j *journal) fail(err error) error {
	if err != nil {
		err = fmt.Errorf("journal commit: %w", err)
		j.mu.Lock()
		first := j.err == nil
		j.err = err
		j.mu.Unlock()
		if first && j.opts.OnFail != nil {
			go j.opts.OnFail(err)
		}
	}
	return err
}

// commit writes batch b to the current segment, first starting a new one if
// b would take it past the segment size, and fdatasyncs it.
func (j *journal) commit(b *journalPending) error {
	if j.segSize > 0 && j.segSize+int64(len(b.buf)) > j.opts.SegmentSize {
		if err := j.roll(); err != nil {
			return err
		}
	}
	journalMarkCommit(b.buf[b.last:])
	start := j.segSize
	j.preallocate(start + int64(len(b.buf)))
	_, err := j.seg.WriteAt(b.buf, start)
	var syncStart time.Time
	if err == nil {
		if j.opts.syncHook != nil {
			j.opts.syncHook()
		}
		syncStart = time.Now()
		err = journalFdatasync(j.seg)
	}
	if err != nil {
		// The batch failed (a full disk, an I/O error): cut what it left
		// so the segment holds only acknowledged records. Data whose
		// fdatasync failed may linger in the page cache marked clean; a
		// reopen must not replay it as if it were durable.
		if terr := j.seg.Truncate(start); terr != nil {
			err = fmt.Errorf("%w (and truncating the failed write: %v)", err, terr)
		}
		j.segAlloc = start
		return err
	}
	j.segSize += int64(len(b.buf))
	j.syncs.Add(1)
	j.records.Add(int64(b.n))
	j.opts.Metrics.journalCommit(syncStart, b.n, len(b.buf))
	return nil
}

// journalPreallocStep is how far past a batch's end a segment is
// preallocated at a time: a file-system journal commit per this much of
// log, not per batch; at most this much of zeros to read at the next open
// after a crash.
const journalPreallocStep = 1 << 20

// preallocate makes sure seg has blocks up to end, preallocating a step
// beyond it when it has not (journalPreallocate); the committer calls it
// before writing a batch that ends at end.
func (j *journal) preallocate(end int64) {
	if end <= j.segAlloc || j.noAlloc {
		return
	}
	want := min(end+journalPreallocStep, max(j.opts.SegmentSize, end))
	if err := journalPreallocate(j.seg, j.segAlloc, want); err != nil {
		j.noAlloc = true // the batches extend the file instead
		return
	}
	j.segAlloc = want
}

// trimSegment cuts the zeros preallocated after seg's last batch and
// makes that durable, so that a segment that is not the last, or the last
// after Close, ends with its last record (the recovery rule at the top of
// this file).
func (j *journal) trimSegment() error {
	if j.segAlloc <= j.segSize {
		return nil
	}
	if err := j.seg.Truncate(j.segSize); err != nil {
		return err
	}
	j.segAlloc = j.segSize
	return journalFdatasync(j.seg)
}

// roll closes the current segment, already synced, and starts the next.
func (j *journal) roll() error {
	if err := j.trimSegment(); err != nil {
		return err
	}
	old := j.seg
	if err := j.createSegment(j.seq + 1); err != nil {
		return err
	}
	return old.Close()
}

// createSegment creates segment seq, makes its name durable and makes it the
// current segment.
func (j *journal) createSegment(seq uint64) error {
	f, err := os.OpenFile(j.path(seq, journalSegmentExt), os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFileMode)
	if err != nil {
		return err
	}
	if err := syncDir(j.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	j.seg, j.seq, j.segSize, j.segAlloc = f, seq, 0, 0
	return nil
}

// path returns the path of file seq with extension ext.
func (j *journal) path(seq uint64, ext string) string {
	return filepath.Join(j.dir, fmt.Sprintf("%0*d%s", journalSeqDigits, seq, ext))
}

// journalFiles lists a journal directory: sequence numbers in ascending
// order and the names of temporary files.
type journalFiles struct {
	segments  []uint64
	snapshots []uint64
	temps     []string
}

// journalList reads dir; it ignores files that are not the journal's.
func journalList(dir string) (journalFiles, error) {
	var files journalFiles
	entries, err := os.ReadDir(dir)
	if err != nil {
		return files, err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, journalTempExt) {
			files.temps = append(files.temps, name)
			continue
		}
		for _, kind := range []struct {
			ext  string
			list *[]uint64
		}{{journalSegmentExt, &files.segments}, {journalSnapshotExt, &files.snapshots}} {
			digits, ok := strings.CutSuffix(name, kind.ext)
			if !ok || len(digits) != journalSeqDigits {
				continue
			}
			if seq, err := strconv.ParseUint(digits, 10, 64); err == nil {
				*kind.list = append(*kind.list, seq)
			}
		}
	}
	slices.Sort(files.segments)
	slices.Sort(files.snapshots)
	return files, nil
}

// journalMkdir creates dir if it does not exist and makes its entry durable.
func journalMkdir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// journalRemove deletes paths, then fsyncs dir so the deletions last.
func journalRemove(dir string, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return syncDir(dir)
}

// journalReadFile reads path into buf, growing it if needed.
func journalReadFile(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return buf, err
	}
	buf = slices.Grow(buf[:0], int(st.Size()))[:st.Size()]
	if _, err := io.ReadFull(f, buf); err != nil {
		return buf, fmt.Errorf("read %q: %w", path, err)
	}
	return buf, nil
}

// journalTruncate cuts a torn tail off segment path at size and fsyncs it.
func journalTruncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("truncate torn tail of %q: %w", path, err)
	}
	return nil
}

// journalScan calls onRecord for each valid frame of segment data, stored at
// path, and returns the offset where the valid frames end. last reports
// whether this is the last segment, where a torn tail ends the scan (see the
// recovery rule at the top of this file); other damage is a
// *journalCorruptError.
func journalScan(path string, data []byte, last bool, onRecord func([]byte) error) (int64, error) {
	off := 0
	for off < len(data) {
		fr := journalDecodeFrame(data[off:])
		if fr.state != journalFrameOK {
			if last && journalTornTail(data[off:]) {
				break
			}
			return 0, &journalCorruptError{Segment: path, Offset: int64(off), Reason: fr.state.String()}
		}
		if err := onRecord(fr.payload); err != nil {
			return 0, fmt.Errorf("replay record at byte offset %d of %q: %w", off, path, err)
		}
		off += fr.size
	}
	return int64(off), nil
}

// journalTornTail reports whether tail, which starts with a damaged frame,
// is the remains of the final write (see the recovery rule at the top of
// this file).
func journalTornTail(tail []byte) bool {
	if journalAllZero(tail) { // the zeros preallocated after the last batch
		return true
	}
	for pos := 0; pos < len(tail); {
		fr := journalDecodeFrame(tail[pos:])
		switch {
		case fr.state == journalFrameShort:
			return true
		case fr.state == journalFrameBadHeader:
			return !journalHeaderAfter(tail[pos:])
		case fr.commit:
			return journalAllZero(tail[pos+fr.size:])
		}
		pos += fr.size
	}
	return true
}

// journalHeaderAfter reports whether a valid frame header starts anywhere in
// b after its first byte. It costs one 8-byte checksum per offset, and runs
// only on damaged segments.
func journalHeaderAfter(b []byte) bool {
	for i := 1; i+journalHeaderSize <= len(b); i++ {
		if binary.LittleEndian.Uint32(b[i+8:]) == journalChecksum(b[i:i+8]) {
			return true
		}
	}
	return false
}

// journalAllZero reports whether every byte of b is zero.
func journalAllZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// journalFrameState is the outcome of decoding a frame.
type journalFrameState int

const (
	journalFrameOK         journalFrameState = iota
	journalFrameShort                        // the file ends inside the frame
	journalFrameBadHeader                    // the header checksum does not match
	journalFrameBadPayload                   // the payload checksum does not match
)

// String describes a damaged frame for journalCorruptError.Reason.
func (s journalFrameState) String() string {
	switch s {
	case journalFrameOK:
		return "valid record"
	case journalFrameShort:
		return "truncated record"
	case journalFrameBadHeader:
		return "bad record header checksum"
	default:
		return "bad record checksum"
	}
}

// journalFrame is a decoded frame. size is the frame's length in bytes,
// header included, and commit its commit flag; both are meaningful unless
// the header is short or bad.
type journalFrame struct {
	payload []byte
	size    int
	commit  bool
	state   journalFrameState
}

// journalDecodeFrame decodes the frame at the start of b.
func journalDecodeFrame(b []byte) journalFrame {
	if len(b) < journalHeaderSize {
		return journalFrame{state: journalFrameShort}
	}
	if binary.LittleEndian.Uint32(b[8:]) != journalChecksum(b[:8]) {
		return journalFrame{state: journalFrameBadHeader}
	}
	word := binary.LittleEndian.Uint32(b)
	fr := journalFrame{
		size:   journalHeaderSize + int(word&^journalCommitFlag),
		commit: word&journalCommitFlag != 0,
	}
	if fr.size > len(b) {
		fr.state = journalFrameShort
		return fr
	}
	fr.payload = b[journalHeaderSize:fr.size]
	if binary.LittleEndian.Uint32(b[4:]) != journalChecksum(fr.payload) {
		fr.state = journalFrameBadPayload
	}
	return fr
}

// journalAppendFrame appends to buf the frame of payload, whose CRC32C is
// crc, without the commit flag.
func journalAppendFrame(buf, payload []byte, crc uint32) []byte {
	var hdr [journalHeaderSize]byte
	journalPutHeader(hdr[:], uint32(len(payload)), crc)
	buf = append(buf, hdr[:]...)
	return append(buf, payload...)
}

// journalMarkCommit sets the commit flag in the header at the start of frame.
func journalMarkCommit(frame []byte) {
	word := binary.LittleEndian.Uint32(frame)
	journalPutHeader(frame, word|journalCommitFlag, binary.LittleEndian.Uint32(frame[4:]))
}

// journalPutHeader encodes a frame header into hdr: word is the payload
// length with the flags, crc the payload's CRC32C.
func journalPutHeader(hdr []byte, word, crc uint32) {
	binary.LittleEndian.PutUint32(hdr[0:], word)
	binary.LittleEndian.PutUint32(hdr[4:], crc)
	binary.LittleEndian.PutUint32(hdr[8:], journalChecksum(hdr[:8]))
}

// journalChecksum returns the CRC32C (Castagnoli) of b.
func journalChecksum(b []byte) uint32 {
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}
