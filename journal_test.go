package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// journalReplay is what openJournal replayed.
type journalReplay struct {
	snapshot    []byte
	hasSnapshot bool
	records     [][]byte
}

// journalTestOpen opens the journal in dir, collecting the replay.
func journalTestOpen(dir string, opts journalOptions) (*journal, journalReplay, error) {
	var r journalReplay
	j, err := openJournal(dir, opts,
		func(b []byte) error {
			r.snapshot, r.hasSnapshot = bytes.Clone(b), true
			return nil
		},
		func(b []byte) error {
			r.records = append(r.records, bytes.Clone(b))
			return nil
		})
	return j, r, err
}

// journalMustOpen is journalTestOpen failing t on error and closing the
// journal at cleanup unless the test closed it.
func journalMustOpen(t testing.TB, dir string, opts journalOptions) (*journal, journalReplay) {
	t.Helper()
	j, r, err := journalTestOpen(dir, opts)
	if err != nil {
		t.Fatalf("openJournal(%q) = %v", dir, err)
	}
	t.Cleanup(func() { j.Close() })
	return j, r
}

// journalMustReplay opens dir, closes it and returns the replay.
func journalMustReplay(t testing.TB, dir string, opts journalOptions) journalReplay {
	t.Helper()
	j, r := journalMustOpen(t, dir, opts)
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	return r
}

// journalRecord is the i-th test record, padded to 20 bytes.
func journalRecord(i int) []byte {
	return fmt.Appendf(nil, "record-%013d", i)
}

// journalRecords returns records first..last.
func journalRecords(first, last int) [][]byte {
	var rs [][]byte
	for i := first; i <= last; i++ {
		rs = append(rs, journalRecord(i))
	}
	return rs
}

// journalCheckRecords fails t unless got equals want.
func journalCheckRecords(t testing.TB, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records; want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d = %q; want %q", i, got[i], want[i])
		}
	}
}

// journalFilesWith returns the sorted paths in dir with extension ext.
func journalFilesWith(t testing.TB, dir, ext string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	return paths
}

// journalAppendAll appends rs durably, one batch each.
func journalAppendAll(t testing.TB, j *journal, rs [][]byte) {
	t.Helper()
	for _, r := range rs {
		if err := j.AppendDurable(r); err != nil {
			t.Fatalf("AppendDurable(%q) = %v", r, err)
		}
	}
}

// journalFileSize returns the size of path.
func journalFileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestJournalRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "journal")
	want := [][]byte{{}, []byte("one"), bytes.Repeat([]byte{0xab}, 100<<10)}
	j, r := journalMustOpen(t, dir, journalOptions{})
	if r.hasSnapshot || len(r.records) != 0 {
		t.Fatalf("fresh journal replayed %d records, snapshot %v", len(r.records), r.hasSnapshot)
	}
	journalAppendAll(t, j, want)
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	// Reopen, append more without waiting, and reopen again.
	j, r = journalMustOpen(t, dir, journalOptions{})
	journalCheckRecords(t, r.records, want)
	var wantSize int64
	for _, w := range want {
		wantSize += int64(journalHeaderSize + len(w))
	}
	if got := j.Size(); got != wantSize {
		t.Errorf("Size() after reopen = %d; want %d", got, wantSize)
	}
	for _, rec := range journalRecords(1, 10) {
		j.Append(rec)
		want = append(want, slices.Clone(rec))
		rec[0] = '!' // Append copied the payload: reusing it is safe
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	r = journalMustReplay(t, dir, journalOptions{})
	journalCheckRecords(t, r.records, want)
	if r.hasSnapshot {
		t.Errorf("replay has a snapshot; want none")
	}
}

func TestJournalConcurrentOrder(t *testing.T) {
	const writers, perWriter = 32, 50
	tests := []struct {
		name string
		// serial makes the Append calls one at a time, in a known global
		// order, while the waits overlap.
		serial bool
	}{
		{"independent appenders", false},
		{"serialized appends, concurrent waits", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := journalMustOpen(t, dir, journalOptions{})
			var (
				orderMu sync.Mutex
				next    int
				wg      sync.WaitGroup
				failed  atomic.Int64
			)
			for w := range writers {
				wg.Go(func() {
					for i := range perWriter {
						rec := fmt.Appendf(nil, "%02d/%04d", w, i)
						if tt.serial {
							orderMu.Lock()
							rec = fmt.Appendf(nil, "%06d", next)
							next++
						}
						p := j.Append(rec)
						if tt.serial {
							orderMu.Unlock()
						}
						if err := p.Wait(); err != nil {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := failed.Load(); n != 0 {
				t.Fatalf("%d appends failed", n)
			}
			if err := j.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			r := journalMustReplay(t, dir, journalOptions{})
			if len(r.records) != writers*perWriter {
				t.Fatalf("replayed %d records; want %d", len(r.records), writers*perWriter)
			}
			nextOf := make([]int, writers)
			for i, rec := range r.records {
				if tt.serial {
					if want := fmt.Sprintf("%06d", i); string(rec) != want {
						t.Fatalf("record %d = %q; want %q", i, rec, want)
					}
					continue
				}
				var w, n int
				if _, err := fmt.Sscanf(string(rec), "%d/%d", &w, &n); err != nil || n != nextOf[w] {
					t.Fatalf("record %d = %q; want writer %d's record %d", i, rec, w, nextOf[w])
				}
				nextOf[w]++
			}
		})
	}
}

func TestJournalSegmentRolling(t *testing.T) {
	const segmentSize = 1024
	dir := t.TempDir()
	opts := journalOptions{SegmentSize: segmentSize}
	j, _ := journalMustOpen(t, dir, opts)
	want := journalRecords(1, 100) // 32-byte frames: 32 per segment
	big := bytes.Repeat([]byte("x"), 3*segmentSize)
	want = append(want, big, journalRecord(101))
	journalAppendAll(t, j, want)
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	segs := journalFilesWith(t, dir, journalSegmentExt)
	if len(segs) != 6 {
		t.Fatalf("%d segments: %q; want 6", len(segs), segs)
	}
	for i, seg := range segs {
		if want := fmt.Sprintf("%020d.seg", i+1); filepath.Base(seg) != want {
			t.Errorf("segment %d is %q; want %q", i, filepath.Base(seg), want)
		}
		size := journalFileSize(t, seg)
		if size > segmentSize && size != int64(journalHeaderSize+len(big)) {
			t.Errorf("segment %q has %d bytes; want at most %d unless it holds one big record", seg, size, segmentSize)
		}
	}
	journalCheckRecords(t, journalMustReplay(t, dir, opts).records, want)
}

// journalTestBatch returns frames of payloads written as one write: the last
// one carries the commit flag.
func journalTestBatch(payloads ...[]byte) []byte {
	var buf []byte
	last := 0
	for _, p := range payloads {
		last = len(buf)
		buf = journalAppendFrame(buf, p, journalChecksum(p))
	}
	journalMarkCommit(buf[last:])
	return buf
}

// journalTestFrameSize is the size of a journalRecord frame.
const journalTestFrameSize = journalHeaderSize + 20

// journalEdit changes a segment file: it flips the byte at off (negative:
// from the end), or truncates or extends the file.
type journalEdit func(t testing.TB, path string)

// journalFlip flips the bits of byte off of a segment (negative: from the end).
func journalFlip(off int64) journalEdit {
	return func(t testing.TB, path string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if off < 0 {
			off += int64(len(data))
		}
		data[off] ^= 0xff
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// journalTruncateTo truncates a segment to size (negative: from the end).
func journalTruncateTo(size int64) journalEdit {
	return func(t testing.TB, path string) {
		if size < 0 {
			size += journalFileSize(t, path)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
	}
}

// journalAppendBytes appends data to a segment.
func journalAppendBytes(data []byte) journalEdit {
	return func(t testing.TB, path string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
	}
}

// journalZero zeroes n bytes of a segment from off.
func journalZero(off, n int64) journalEdit {
	return func(t testing.TB, path string) {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(make([]byte, n), off); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJournalRecovery(t *testing.T) {
	// The fixture: records 1..15 in three segments of five frames each,
	// every frame its own committed write.
	const perSegment = 5
	opts := journalOptions{SegmentSize: perSegment * journalTestFrameSize}
	frame := func(i int64) int64 { return i * journalTestFrameSize }
	full := frame(perSegment)
	garbage := bytes.Repeat([]byte{0x5a, 0xc3, 0x17}, 100)
	tests := []struct {
		name    string
		segment int // which segment the edits change
		edits   []journalEdit
		// For a torn tail: the records kept and the last segment's size.
		wantRecords int
		wantSize    int64
		// For corruption: the segment and offset reported.
		wantCorrupt bool
		wantOffset  int64
	}{
		{name: "intact", segment: 2, wantRecords: 15, wantSize: full},
		{name: "cut inside the last payload", segment: 2, edits: []journalEdit{journalTruncateTo(-5)}, wantRecords: 14, wantSize: frame(4)},
		{name: "cut inside the last header", segment: 2, edits: []journalEdit{journalTruncateTo(frame(4) + 5)}, wantRecords: 14, wantSize: frame(4)},
		{name: "cut after the last header", segment: 2, edits: []journalEdit{journalTruncateTo(frame(4) + journalHeaderSize)}, wantRecords: 14, wantSize: frame(4)},
		{name: "bad checksum in the last payload", segment: 2, edits: []journalEdit{journalFlip(-1)}, wantRecords: 14, wantSize: frame(4)},
		{name: "bad last header", segment: 2, edits: []journalEdit{journalFlip(frame(4) + 1)}, wantRecords: 14, wantSize: frame(4)},
		{name: "zeros appended", segment: 2, edits: []journalEdit{journalAppendBytes(make([]byte, 4096))}, wantRecords: 15, wantSize: full},
		{name: "fewer zeros than a header", segment: 2, edits: []journalEdit{journalAppendBytes(make([]byte, 7))}, wantRecords: 15, wantSize: full},
		{name: "last frame zeroed", segment: 2, edits: []journalEdit{journalZero(frame(4), journalTestFrameSize)}, wantRecords: 14, wantSize: frame(4)},
		{name: "bad checksum in the last payload, zeros after", segment: 2, edits: []journalEdit{journalAppendBytes(make([]byte, 100)), journalFlip(frame(4) + 20)}, wantRecords: 14, wantSize: frame(4)},
		{name: "garbage appended", segment: 2, edits: []journalEdit{journalAppendBytes(garbage)}, wantRecords: 15, wantSize: full},
		{
			name: "torn final batch: bad frame, rest of the batch intact", segment: 2,
			edits:       []journalEdit{journalAppendBytes(journalTestBatch(journalRecords(16, 19)...)), journalFlip(full + journalHeaderSize + 3)},
			wantRecords: 15, wantSize: full,
		},
		{
			name: "torn final batch: valid frames kept before the bad one", segment: 2,
			edits:       []journalEdit{journalAppendBytes(journalTestBatch(journalRecords(16, 19)...)), journalFlip(full + frame(2) + journalHeaderSize)},
			wantRecords: 17, wantSize: full + frame(2),
		},
		{name: "bad payload before the tail", segment: 2, edits: []journalEdit{journalFlip(frame(1) + 15)}, wantCorrupt: true, wantOffset: frame(1)},
		{name: "bad header before the tail", segment: 2, edits: []journalEdit{journalFlip(frame(1) + 2)}, wantCorrupt: true, wantOffset: frame(1)},
		{name: "bad header of the last but one frame", segment: 2, edits: []journalEdit{journalFlip(frame(3) + 9)}, wantCorrupt: true, wantOffset: frame(3)},
		{name: "zeroed frame before the tail", segment: 2, edits: []journalEdit{journalZero(frame(2), journalTestFrameSize)}, wantCorrupt: true, wantOffset: frame(2)},
		{
			name: "bad frame in a batch followed by another write", segment: 2,
			edits: []journalEdit{
				journalAppendBytes(journalTestBatch(journalRecords(16, 19)...)),
				journalAppendBytes(journalTestBatch(journalRecord(20))),
				journalFlip(full + journalHeaderSize + 3),
			},
			wantCorrupt: true, wantOffset: full,
		},
		{name: "bad last frame of a non-last segment", segment: 1, edits: []journalEdit{journalFlip(-1)}, wantCorrupt: true, wantOffset: frame(4)},
		{name: "non-last segment cut short", segment: 0, edits: []journalEdit{journalTruncateTo(-3)}, wantCorrupt: true, wantOffset: frame(4)},
		{name: "zeros after a non-last segment", segment: 0, edits: []journalEdit{journalAppendBytes(make([]byte, 64))}, wantCorrupt: true, wantOffset: full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := journalMustOpen(t, dir, opts)
			journalAppendAll(t, j, journalRecords(1, 15))
			if err := j.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			segs := journalFilesWith(t, dir, journalSegmentExt)
			if len(segs) != 3 {
				t.Fatalf("fixture has %d segments; want 3", len(segs))
			}
			for _, edit := range tt.edits {
				edit(t, segs[tt.segment])
			}
			before, err := os.ReadFile(segs[tt.segment])
			if err != nil {
				t.Fatal(err)
			}

			j, r, err := journalTestOpen(dir, opts)
			if tt.wantCorrupt {
				var ce *journalCorruptError
				if !errors.As(err, &ce) || !errors.Is(err, errJournalCorrupt) {
					t.Fatalf("openJournal() = %v; want a *journalCorruptError", err)
				}
				if ce.Segment != segs[tt.segment] || ce.Offset != tt.wantOffset {
					t.Errorf("corruption reported in %q at %d; want %q at %d", ce.Segment, ce.Offset, segs[tt.segment], tt.wantOffset)
				}
				after, err := os.ReadFile(segs[tt.segment])
				if err != nil || !bytes.Equal(after, before) {
					t.Errorf("failed open modified %q (err %v)", segs[tt.segment], err)
				}
				return
			}
			if err != nil {
				t.Fatalf("openJournal() = %v", err)
			}
			journalCheckRecords(t, r.records, journalRecords(1, tt.wantRecords))
			if got := journalFileSize(t, segs[2]); got != tt.wantSize {
				t.Errorf("last segment has %d bytes after open; want %d", got, tt.wantSize)
			}
			// The repaired journal takes appends after its good prefix.
			journalAppendAll(t, j, [][]byte{journalRecord(99)})
			if err := j.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			want := append(journalRecords(1, tt.wantRecords), journalRecord(99))
			journalCheckRecords(t, journalMustReplay(t, dir, opts).records, want)
		})
	}
}

func TestJournalMissingSegment(t *testing.T) {
	dir := t.TempDir()
	opts := journalOptions{SegmentSize: 2 * journalTestFrameSize}
	j, _ := journalMustOpen(t, dir, opts)
	journalAppendAll(t, j, journalRecords(1, 6))
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	segs := journalFilesWith(t, dir, journalSegmentExt)
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	_, _, err := journalTestOpen(dir, opts)
	var ce *journalCorruptError
	if !errors.As(err, &ce) || ce.Segment != segs[1] {
		t.Fatalf("openJournal() = %v; want a *journalCorruptError naming %q", err, segs[1])
	}
}

func TestJournalCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := journalOptions{SegmentSize: 4 * journalTestFrameSize}
	j, _ := journalMustOpen(t, dir, opts)
	journalAppendAll(t, j, journalRecords(1, 10))
	j.Append(journalRecord(11)) // pending at the cut: covered by the snapshot
	if err := j.Compact(func() []byte { return []byte("state@11") }); err != nil {
		t.Fatalf("Compact() = %v", err)
	}
	if got := j.Size(); got != 0 {
		t.Errorf("Size() after Compact = %d; want 0", got)
	}
	journalAppendAll(t, j, journalRecords(12, 15))
	if got, want := j.Size(), int64(4*journalTestFrameSize); got != want {
		t.Errorf("Size() = %d; want %d", got, want)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	snaps := journalFilesWith(t, dir, journalSnapshotExt)
	segs := journalFilesWith(t, dir, journalSegmentExt)
	if len(snaps) != 1 || len(segs) != 1 || filepath.Base(snaps[0])[:20] != filepath.Base(segs[0])[:20] {
		t.Fatalf("after Compact: snapshots %q, segments %q; want one of each with the same number", snaps, segs)
	}
	r := journalMustReplay(t, dir, opts)
	if string(r.snapshot) != "state@11" {
		t.Fatalf("snapshot = %q; want %q", r.snapshot, "state@11")
	}
	journalCheckRecords(t, r.records, journalRecords(12, 15))

	// A second compaction replaces the first snapshot, with no record after.
	j, _ = journalMustOpen(t, dir, opts)
	if err := j.Compact(func() []byte { return []byte("state@15") }); err != nil {
		t.Fatalf("Compact() = %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if snaps := journalFilesWith(t, dir, journalSnapshotExt); len(snaps) != 1 {
		t.Fatalf("snapshots after the second Compact: %q; want one", snaps)
	}
	r = journalMustReplay(t, dir, opts)
	if string(r.snapshot) != "state@15" || len(r.records) != 0 {
		t.Fatalf("replay = snapshot %q and %d records; want %q and none", r.snapshot, len(r.records), "state@15")
	}
}

// TestJournalCompactionConcurrent compacts while appenders run, the way the
// engine does: state changes and appends happen under the caller's mutex,
// which it also holds around Compact.
func TestJournalCompactionConcurrent(t *testing.T) {
	const writers, perWriter, compactions = 8, 100, 5
	dir := t.TempDir()
	opts := journalOptions{SegmentSize: 16 * journalTestFrameSize}
	j, _ := journalMustOpen(t, dir, opts)
	var (
		stateMu sync.Mutex
		state   int // records appended so far
		wg      sync.WaitGroup
		failed  atomic.Int64
	)
	for range writers {
		wg.Go(func() {
			for range perWriter {
				stateMu.Lock()
				state++
				p := j.Append([]byte(strconv.Itoa(state)))
				stateMu.Unlock()
				if err := p.Wait(); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	for range compactions {
		stateMu.Lock()
		err := j.Compact(func() []byte { return []byte(strconv.Itoa(state)) })
		stateMu.Unlock()
		if err != nil {
			t.Fatalf("Compact() = %v", err)
		}
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d appends failed", n)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	r := journalMustReplay(t, dir, opts)
	covered, err := strconv.Atoi(string(r.snapshot))
	if !r.hasSnapshot || err != nil {
		t.Fatalf("snapshot = %q (present %v); want a count", r.snapshot, r.hasSnapshot)
	}
	var want [][]byte
	for i := covered + 1; i <= writers*perWriter; i++ {
		want = append(want, []byte(strconv.Itoa(i)))
	}
	journalCheckRecords(t, r.records, want)
}

// journalCopyDir copies the journal files of src into dst (not the LOCK
// file, which every journal directory holds).
func journalCopyDir(t testing.TB, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestJournalCrashDuringCompaction(t *testing.T) {
	opts := journalOptions{SegmentSize: 4 * journalTestFrameSize}
	// Each case starts from the files before a compaction of records 1..10
	// and after it plus records 11..15, and builds the state a crash could
	// leave.
	tests := []struct {
		name         string
		build        func(t testing.TB, dir, before, after string)
		wantSnapshot bool // replay snapshot "state@10" then 11..15, else 1..15
	}{
		{
			name: "temp snapshot written, not renamed",
			build: func(t testing.TB, dir, before, after string) {
				journalCopyDir(t, after, dir)
				journalCopyDir(t, before, dir) // old segments were never deleted
				snap := journalFilesWith(t, dir, journalSnapshotExt)[0]
				if err := os.Rename(snap, snap+journalTempExt); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "temp snapshot cut short",
			build: func(t testing.TB, dir, before, after string) {
				journalCopyDir(t, after, dir)
				journalCopyDir(t, before, dir)
				snap := journalFilesWith(t, dir, journalSnapshotExt)[0]
				if err := os.Rename(snap, snap+journalTempExt); err != nil {
					t.Fatal(err)
				}
				journalTruncateTo(5)(t, snap+journalTempExt)
			},
		},
		{
			name: "snapshot renamed, old segments not deleted",
			build: func(t testing.TB, dir, before, after string) {
				journalCopyDir(t, after, dir)
				journalCopyDir(t, before, dir)
			},
			wantSnapshot: true,
		},
		{
			name: "some old segments deleted",
			build: func(t testing.TB, dir, before, after string) {
				journalCopyDir(t, after, dir)
				journalCopyDir(t, before, dir)
				if err := os.Remove(journalFilesWith(t, dir, journalSegmentExt)[0]); err != nil {
					t.Fatal(err)
				}
			},
			wantSnapshot: true,
		},
		{
			name: "older snapshot not deleted",
			build: func(t testing.TB, dir, before, after string) {
				journalCopyDir(t, after, dir)
				stale := journalTestBatch([]byte("stale"))
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d.snap", 1)), stale, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantSnapshot: true,
		},
	}
	// Build the old and new states once.
	before, after := t.TempDir(), t.TempDir()
	j, _ := journalMustOpen(t, before, opts)
	journalAppendAll(t, j, journalRecords(1, 10))
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	journalCopyDir(t, before, after)
	j, _ = journalMustOpen(t, after, opts)
	if err := j.Compact(func() []byte { return []byte("state@10") }); err != nil {
		t.Fatalf("Compact() = %v", err)
	}
	journalAppendAll(t, j, journalRecords(11, 15))
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.build(t, dir, before, after)
			r := journalMustReplay(t, dir, opts)
			if tt.wantSnapshot {
				if string(r.snapshot) != "state@10" {
					t.Fatalf("snapshot = %q; want %q", r.snapshot, "state@10")
				}
				journalCheckRecords(t, r.records, journalRecords(11, 15))
			} else {
				if r.hasSnapshot {
					t.Fatalf("replay has snapshot %q; want none", r.snapshot)
				}
				journalCheckRecords(t, r.records, journalRecords(1, 15))
			}
			// Open cleaned up: one snapshot at most, no temp files, and
			// only the segments the replay used.
			if tmps := journalFilesWith(t, dir, journalTempExt); len(tmps) != 0 {
				t.Errorf("temp files left: %q", tmps)
			}
			snaps := journalFilesWith(t, dir, journalSnapshotExt)
			segs := journalFilesWith(t, dir, journalSegmentExt)
			if tt.wantSnapshot && (len(snaps) != 1 || filepath.Base(segs[0])[:20] != filepath.Base(snaps[0])[:20]) {
				t.Errorf("after open: snapshots %q, segments %q; want one snapshot and no segment before it", snaps, segs)
			}
		})
	}
}

func TestJournalClose(t *testing.T) {
	t.Run("flushes pending appends", func(t *testing.T) {
		dir := t.TempDir()
		j, _ := journalMustOpen(t, dir, journalOptions{})
		want := journalRecords(1, 200)
		var pending []*journalPending
		for _, rec := range want {
			pending = append(pending, j.Append(rec))
		}
		if err := j.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		for i, p := range pending {
			if err := p.Wait(); err != nil {
				t.Fatalf("append %d: Wait() = %v", i, err)
			}
		}
		journalCheckRecords(t, journalMustReplay(t, dir, journalOptions{}).records, want)
	})
	t.Run("calls after close fail", func(t *testing.T) {
		j, _ := journalMustOpen(t, t.TempDir(), journalOptions{})
		if err := j.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		calls := []struct {
			name string
			call func() error
		}{
			{"Append", func() error { return j.Append([]byte("x")).Wait() }},
			{"AppendDurable", func() error { return j.AppendDurable([]byte("x")) }},
			{"Compact", func() error { return j.Compact(func() []byte { return nil }) }},
			{"Close", j.Close},
		}
		for _, c := range calls {
			if err := c.call(); !errors.Is(err, errJournalClosed) {
				t.Errorf("%s after Close = %v; want errJournalClosed", c.name, err)
			}
		}
	})
	t.Run("bounded when the disk hangs", func(t *testing.T) {
		release := make(chan struct{})
		opts := journalOptions{CloseTimeout: 20 * time.Millisecond, syncHook: func() { <-release }}
		j, _, err := journalTestOpen(t.TempDir(), opts)
		if err != nil {
			t.Fatal(err)
		}
		p := j.Append([]byte("stuck"))
		if err := j.Close(); err == nil {
			t.Errorf("Close() with a hung fdatasync = nil; want a timeout error")
		}
		close(release)
		if err := p.Wait(); err != nil {
			t.Errorf("Wait() after the disk recovered = %v", err)
		}
		<-j.stopped
	})
}

func TestJournalGroupCommit(t *testing.T) {
	const waiters = 31
	entered := make(chan struct{})
	release := make(chan struct{})
	var hooked atomic.Bool
	opts := journalOptions{syncHook: func() {
		if hooked.CompareAndSwap(false, true) { // hold the first batch only
			close(entered)
			<-release
		}
	}}
	dir := t.TempDir()
	j, _ := journalMustOpen(t, dir, opts)

	first := j.Append(journalRecord(0))
	<-entered // the committer wrote the first batch and has not synced it
	var appended, done sync.WaitGroup
	results := make(chan error, waiters)
	for i := range waiters {
		appended.Add(1)
		done.Go(func() {
			p := j.Append(journalRecord(i + 1))
			appended.Done()
			results <- p.Wait()
		})
	}
	appended.Wait()
	select {
	case <-first.done:
		t.Fatal("the first append was acknowledged before its fdatasync")
	case err := <-results:
		t.Fatalf("an append was acknowledged (%v) before its batch was written", err)
	default:
	}
	close(release)
	if err := first.Wait(); err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	done.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Fatalf("Wait() = %v", err)
		}
	}
	if got, want := j.Stats(), (journalStats{Syncs: 2, Records: waiters + 1}); got != want {
		t.Errorf("Stats() = %+v; want %+v: the %d waiting appends should share one fdatasync", got, want, waiters)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	r := journalMustReplay(t, dir, journalOptions{})
	if len(r.records) != waiters+1 || !bytes.Equal(r.records[0], journalRecord(0)) {
		t.Fatalf("replayed %d records starting %q; want %d starting %q", len(r.records), r.records[0], waiters+1, journalRecord(0))
	}
}

func TestJournalStickyError(t *testing.T) {
	j, _ := journalMustOpen(t, t.TempDir(), journalOptions{})
	journalAppendAll(t, j, journalRecords(1, 3))
	// Make the next write fail: the committer is idle, its last batch done.
	if err := j.seg.Close(); err != nil {
		t.Fatal(err)
	}
	err := j.AppendDurable(journalRecord(4))
	if err == nil {
		t.Fatal("AppendDurable() on a failed file = nil; want an error")
	}
	if err2 := j.AppendDurable(journalRecord(5)); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("AppendDurable() after a failure = %v; want the sticky %v", err2, err)
	}
	if err := j.Compact(func() []byte { return nil }); err == nil {
		t.Errorf("Compact() after a failure = nil; want an error")
	}
	if err := j.Close(); err == nil {
		t.Errorf("Close() after a failure = nil; want an error")
	}
}

// FuzzJournalOpen opens a journal of two segments whose bytes come from the
// fuzzer: open must not panic, must report any damage as corruption, and
// must replay only records stored as valid frames, in order, from the start
// of the segments.
func FuzzJournalOpen(f *testing.F) {
	valid := journalTestBatch(journalRecord(1))
	batch := journalTestBatch(journalRecords(2, 4)...)
	f.Add([]byte{}, []byte{})
	f.Add(valid, batch)
	f.Add(valid, append(slices.Clone(batch), make([]byte, 30)...))
	f.Add(valid, batch[:len(batch)-3])
	f.Add(append(slices.Clone(valid), 1), batch)
	f.Add([]byte{}, append(slices.Clone(batch), valid...))
	f.Fuzz(func(t *testing.T, seg1, seg2 []byte) {
		dir := t.TempDir()
		segs := [][]byte{seg1, seg2}
		for i, data := range segs {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d.seg", i+1)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		j, r, err := journalTestOpen(dir, journalOptions{})
		if err != nil {
			if !errors.Is(err, errJournalCorrupt) {
				t.Fatalf("openJournal() = %v; want a corruption error", err)
			}
			return
		}
		if err := j.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		// Match the records against the input, frame by frame.
		rest := r.records
		for i, data := range segs {
			pos := 0
			for len(rest) > 0 && pos < len(data) {
				rec := rest[0]
				end := pos + journalHeaderSize + len(rec)
				if end > len(data) ||
					binary.LittleEndian.Uint32(data[pos:])&^journalCommitFlag != uint32(len(rec)) ||
					binary.LittleEndian.Uint32(data[pos+4:]) != crc32.Checksum(rec, crc32.MakeTable(crc32.Castagnoli)) ||
					binary.LittleEndian.Uint32(data[pos+8:]) != crc32.Checksum(data[pos:pos+8], crc32.MakeTable(crc32.Castagnoli)) ||
					!bytes.Equal(data[journalHeaderSize+pos:end], rec) {
					t.Fatalf("segment %d offset %d: replayed %q, not a valid frame of the input", i+1, pos, rec)
				}
				rest, pos = rest[1:], end
			}
			path := filepath.Join(dir, fmt.Sprintf("%020d.seg", i+1))
			if i == 0 && pos != len(data) {
				t.Fatalf("open succeeded with %d unreplayed bytes in a non-last segment", len(data)-pos)
			}
			if size := journalFileSize(t, path); i == 1 && size != int64(pos) {
				t.Fatalf("last segment is %d bytes after open; want the %d replayed", size, pos)
			}
		}
		if len(rest) != 0 {
			t.Fatalf("%d replayed records not found in the input", len(rest))
		}
		// The repaired journal replays the same records again.
		journalCheckRecords(t, journalMustReplay(t, dir, journalOptions{}).records, r.records)
	})
}

// journalPercentiles reports the p50 and p99 of samples in milliseconds.
func journalPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1e6
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// journalBenchRecordSize is the size of the benchmarks' records.
const journalBenchRecordSize = 200

// BenchmarkJournalFsyncFloor measures the disk's floor: one 200-byte write
// and fdatasync on a raw file, appended (the file grows) and into blocks
// preallocated ahead (as the journal writes: journalPreallocate).
func BenchmarkJournalFsyncFloor(b *testing.B) {
	for _, prealloc := range []bool{false, true} {
		b.Run(map[bool]string{false: "append", true: "preallocated"}[prealloc], func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rec := make([]byte, journalBenchRecordSize)
			var samples []time.Duration
			var off, alloc int64
			for b.Loop() {
				if prealloc && off+int64(len(rec)) > alloc {
					if err := journalPreallocate(f, alloc, alloc+journalPreallocStep); err != nil {
						b.Skipf("no preallocation here: %v", err)
					}
					alloc += journalPreallocStep
				}
				start := time.Now()
				if _, err := f.WriteAt(rec, off); err != nil {
					b.Fatal(err)
				}
				if err := journalFdatasync(f); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
				off += int64(len(rec))
			}
			journalPercentiles(b, samples)
		})
	}
}

// BenchmarkJournalAppendDurable measures serial durable appends through the
// journal.
func BenchmarkJournalAppendDurable(b *testing.B) {
	j, _ := journalMustOpen(b, b.TempDir(), journalOptions{})
	rec := make([]byte, journalBenchRecordSize)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := j.AppendDurable(rec); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	journalPercentiles(b, samples)
}

// BenchmarkJournalGroupCommit measures 32 goroutines appending durably at
// once.
func BenchmarkJournalGroupCommit(b *testing.B) {
	const writers = 32
	j, _ := journalMustOpen(b, b.TempDir(), journalOptions{})
	rec := make([]byte, journalBenchRecordSize)
	var claimed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range writers {
		wg.Go(func() {
			for claimed.Add(1) <= int64(b.N) {
				if err := j.AppendDurable(rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	st := j.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(st.Records)/float64(st.Syncs), "records/fsync")
}

func TestJournalLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir, journalOptions{}, func([]byte) error { return nil }, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openJournal(dir, journalOptions{}, func([]byte) error { return nil }, func([]byte) error { return nil }); !errors.Is(err, errJournalLocked) {
		t.Fatalf("second open = %v; want errJournalLocked", err)
	}
	j.Close()
	j2, err := openJournal(dir, journalOptions{}, func([]byte) error { return nil }, func([]byte) error { return nil })
	if err != nil {
		t.Fatalf("open after Close = %v", err)
	}
	j2.Close()
}

// TestJournalLazyAppends checks AppendLazy's records: with a delay longer
// than the test, a batch of them is written only when a record appended
// with Append joins it (in the same batch, one fdatasync), a compaction's
// cut or Close; with a short delay, a lone one reaches the disk by itself.
func TestJournalLazyAppends(t *testing.T) {
	dir := t.TempDir()
	opts := journalOptions{LazyDelay: time.Hour}
	j, _ := journalMustOpen(t, dir, opts)
	lazy := j.AppendLazy(journalRecord(1))
	j.AppendLazy(journalRecord(2))
	select {
	case <-lazy.done:
		t.Fatalf("a batch of lazy records was committed before its delay, with nothing else appended (err %v)", lazy.err)
	default:
	}
	durable := j.Append(journalRecord(3))
	if err := durable.Wait(); err != nil {
		t.Fatalf("Append(3).Wait() = %v", err)
	}
	if lazy != durable || j.Stats().Syncs != 1 {
		t.Errorf("lazy records 1-2 and record 3: same batch %v, %d fdatasyncs; want one batch, one fdatasync", lazy == durable, j.Stats().Syncs)
	}
	// A lazy record after a durable one joins its batch: nothing waits.
	// (The durable one is appended as the engine does, for a waiter that
	// writes it, once the committer is idle: so it takes nothing meanwhile.)
	journalWaitIdle(t, j)
	durable = j.AppendWaited(journalRecord(4))
	if lazy = j.AppendLazy(journalRecord(5)); lazy != durable {
		t.Errorf("a lazy record appended to an open batch made a batch of its own")
	}
	if err := lazy.Wait(); err != nil {
		t.Fatalf("AppendLazy(5).Wait() = %v", err)
	}
	// A compaction's cut takes a waiting lazy batch along.
	lazy = j.AppendLazy(journalRecord(6))
	if err := j.Compact(func() []byte { return []byte("state@6") }); err != nil {
		t.Fatalf("Compact() = %v", err)
	}
	if err := lazy.Wait(); err != nil {
		t.Fatalf("AppendLazy(6).Wait() after the cut = %v", err)
	}
	// Close writes a waiting lazy batch.
	j.AppendLazy(journalRecord(7))
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	r := journalMustReplay(t, dir, opts)
	if string(r.snapshot) != "state@6" {
		t.Fatalf("snapshot = %q; want %q", r.snapshot, "state@6")
	}
	journalCheckRecords(t, r.records, journalRecords(7, 7))

	// With a short delay a lone lazy record is written by itself.
	j, _ = journalMustOpen(t, t.TempDir(), journalOptions{LazyDelay: time.Millisecond})
	if err := j.AppendLazy(journalRecord(8)).Wait(); err != nil {
		t.Fatalf("AppendLazy(8).Wait() = %v", err)
	}
	if got := j.Stats().Syncs; got != 1 {
		t.Errorf("fdatasyncs after one lazy record = %d; want 1", got)
	}
}

// TestJournalAppendWaited: a record appended with AppendWaited is written by
// its waiter, not the committer (which is not even woken for it); one
// nobody waits for rides the next batch the committer writes, or Close;
// waited and plain appends from many goroutines keep their order.
func TestJournalAppendWaited(t *testing.T) {
	dir := t.TempDir()
	j, _ := journalMustOpen(t, dir, journalOptions{})
	journalWaitIdle(t, j)
	p := j.AppendWaited(journalRecord(1))
	time.Sleep(50 * time.Millisecond) // time for a committer woken by mistake to write it
	if got := j.Stats().Syncs; got != 0 {
		t.Fatalf("%d fdatasyncs before the waiter waited; want none: the committer wrote the waited record", got)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	if got := j.Stats(); got != (journalStats{Syncs: 1, Records: 1}) {
		t.Fatalf("Stats() after Wait = %+v; want one fdatasync of one record", got)
	}
	j.AppendWaited(journalRecord(2)) // nobody waits: the next plain append's batch takes it
	if err := j.Append(journalRecord(3)).Wait(); err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	j.AppendWaited(journalRecord(4)) // nobody waits: Close writes it
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	journalCheckRecords(t, journalMustReplay(t, dir, journalOptions{}).records, journalRecords(1, 4))

	// Many goroutines, each alternating waited and plain appends, with
	// compactions under way: every acknowledged record is replayed, each
	// writer's in its order.
	dir = t.TempDir()
	j, _ = journalMustOpen(t, dir, journalOptions{SegmentSize: 4 << 10})
	const writers, perWriter = 16, 100
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				rec := fmt.Appendf(nil, "%02d/%04d", w, i)
				var p *journalPending
				if i%2 == 0 {
					p = j.AppendWaited(rec)
				} else {
					p = j.Append(rec)
				}
				if err := p.Wait(); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if err := j.Compact(func() []byte { return []byte("snapshot") }); err != nil {
				failed.Add(1)
			}
		}
	})
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d appends or compactions failed", n)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	r := journalMustReplay(t, dir, journalOptions{SegmentSize: 4 << 10})
	last := make([]int, writers)
	for i := range last {
		last[i] = -1
	}
	for _, rec := range r.records {
		var w, n int
		if _, err := fmt.Sscanf(string(rec), "%d/%d", &w, &n); err != nil || n <= last[w] {
			t.Fatalf("record %q out of its writer's order (after %d)", rec, last[w])
		}
		last[w] = n
	}
	for w, n := range last {
		if n != perWriter-1 {
			t.Errorf("writer %d's last record replayed is %d; want %d", w, n, perWriter-1)
		}
	}
}

// TestJournalPreallocatedSegments: the current segment is preallocated
// ahead of its last batch, and a crash image taken then replays every
// durable record and cuts the zeros; Close, and every roll to a new
// segment, leave segments that end with their last record.
func TestJournalPreallocatedSegments(t *testing.T) {
	dir := t.TempDir()
	const segmentSize = 8 << 10
	j, _ := journalMustOpen(t, dir, journalOptions{SegmentSize: segmentSize})
	want := journalRecords(1, 1000) // 32-byte frames: about 31 segments
	journalAppendAll(t, j, want)
	segs := journalFilesWith(t, dir, journalSegmentExt)
	current := segs[len(segs)-1]
	if size := journalFileSize(t, current); size <= j.segSize {
		if j.noAlloc {
			t.Skip("this file system does not preallocate (fallocate): segments grow by their writes")
		}
		t.Fatalf("the current segment has %d bytes with %d written; want zeros preallocated after them", size, j.segSize)
	}
	for _, seg := range segs[:len(segs)-1] {
		if size := journalFileSize(t, seg); size%32 != 0 || size > segmentSize {
			t.Errorf("segment %s has %d bytes; want whole frames only, at most %d: a rolled segment ends with its last record", filepath.Base(seg), size, segmentSize)
		}
	}
	// A crash now: a copy of the files as they are.
	crash := t.TempDir()
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crash, filepath.Base(seg)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	journalCheckRecords(t, journalMustReplay(t, crash, journalOptions{SegmentSize: segmentSize}).records, want)
	if size := journalFileSize(t, filepath.Join(crash, filepath.Base(current))); size%32 != 0 {
		t.Errorf("the crash image's last segment has %d bytes after replay; want its zeros cut", size)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if size := journalFileSize(t, current); size != j.segSize {
		t.Errorf("the last segment has %d bytes after Close; want %d, its records' only", size, j.segSize)
	}
	journalCheckRecords(t, journalMustReplay(t, dir, journalOptions{SegmentSize: segmentSize}).records, want)
}

// journalWaitIdle waits until j's committer waits for work.
func journalWaitIdle(t testing.TB, j *journal) {
	eventually(t, 10*time.Second, "the committer idle", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.idle
	})
}
