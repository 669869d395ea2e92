package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamShape renders a stream's entries compactly for comparison:
// "index:kind:seq.attempt:content".
func streamShape(entries []streamEntry) []string {
	out := make([]string, len(entries))
	for i, en := range entries {
		content := string(en.JSON)
		if en.Text != nil {
			content = *en.Text
		}
		out[i] = fmt.Sprintf("%d:%s:%d.%d:%s", en.Index, en.Kind, en.Seq, en.Attempt, content)
	}
	return out
}

// readStream returns the whole stream of run id.
func (te *testEngine) readStream(t *testing.T, id string, after int) streamPage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := te.streamRead(ctx, id, after)
	if err != nil {
		t.Fatalf("read the stream of %s: %v", id, err)
	}
	return p
}

// checkShape fails unless entries render as want.
func checkShape(t *testing.T, what string, entries []streamEntry, want []string) {
	t.Helper()
	if got := streamShape(entries); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEngineStreamOrderRetryReplay: a step's chunks are journaled in
// order with their attempt; a failed attempt's chunks stay, marked
// superseded, beside the retry's; the stream reads the same from any
// index, after a restart, from a snapshot, after an interrupted attempt
// (svc stopping during it), and once its run is archived to the history.
func TestEngineStreamOrderRetryReplay(t *testing.T) {
	eachEngineStore(t, testEngineStreamOrderRetryReplay)
}

// testEngineStreamOrderRetryReplay is TestEngineStreamOrderRetryReplay on one store.
func testEngineStreamOrderRetryReplay(t *testing.T, store string) {
	te := newHistoryEngine(t, store)
	te.counter.failN["s1"] = 1
	r := te.startWait(t, "streamy", `{"key":"s1"}`)
	var out struct {
		N          int
		InWorkflow string
	}
	json.Unmarshal(r.Output, &out)
	if r.Status != runCompleted || out.N != 2 || !strings.Contains(out.InWorkflow, "from steps only") {
		t.Fatalf("run = %s %s %v; want completed on the second attempt, getWritable refused in workflow code", r.Status, r.Output, r.Error)
	}
	want := []string{
		`1:text:1.1:start s1`, `2:json:1.1:{"key":"s1","n":1}`, `3:superseded:1.1:`,
		`4:text:1.2:start s1`, `5:json:1.2:{"key":"s1","n":1}`, `6:text:1.2:done`,
	}
	p := te.readStream(t, r.RunID, 0)
	checkShape(t, "stream after a retried attempt", p.Entries, want)
	if !p.Ended || p.Status != runCompleted || !p.Superseded[streamAttemptKey(1, 1)] || p.Superseded[streamAttemptKey(1, 2)] {
		t.Errorf("page ended=%v status=%s superseded=%v; want ended, completed, attempt 1 only", p.Ended, p.Status, p.Superseded)
	}
	checkShape(t, "stream after index 3", te.readStream(t, r.RunID, 3).Entries, want[3:])
	if got := te.readStream(t, r.RunID, 99).Entries; len(got) != 0 {
		t.Errorf("stream after its end = %v; want nothing", streamShape(got))
	}
	eventually(t, 10*time.Second, "the run is archived", func() bool { _, inMemory := te.get(r.RunID); return !inMemory })
	checkShape(t, "archived stream", te.readStream(t, r.RunID, 2).Entries, want[2:])

	// Interrupted: svc stops while the step waits on I/O after two chunks.
	rc, err := te.start(startRequest{Workflow: "streamy", Input: json.RawMessage(`{"key":"hold-s2"}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-te.counter.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the held step never ran")
	}
	held := te.readStream(t, rc.RunID, 0)
	checkShape(t, "stream while held", held.Entries, []string{`1:text:1.1:start hold-s2`, `2:json:1.1:{"key":"hold-s2","n":1}`})
	te.close()
	close(te.counter.unhold)
	te.compactBytes = 1 // every later state change may write a snapshot: replay from one
	te.open(t)
	r2 := te.await(t, rc.RunID)
	if r2.Status != runCompleted {
		t.Fatalf("interrupted run = %s %v", r2.Status, r2.Error)
	}
	checkShape(t, "stream after an interrupted attempt", te.readStream(t, rc.RunID, 0).Entries, []string{
		`1:text:1.1:start hold-s2`, `2:json:1.1:{"key":"hold-s2","n":1}`, `3:superseded:1.1:`,
		`4:text:1.2:start hold-s2`, `5:json:1.2:{"key":"hold-s2","n":1}`, `6:text:1.2:done`,
	})

	// A run still in memory at a restart replays its stream from the
	// snapshot and the log after it.
	te.close()
	te.history = nil // ended runs stay in memory (and in snapshots)
	te.open(t)
	r3 := te.startWait(t, "streamy", `{"key":"s3"}`)
	live := te.readStream(t, r3.RunID, 0).Entries
	te.close()
	if snap := te.lastSnapshot(t); !strings.Contains(string(snap), `"streams"`) {
		t.Fatalf("no snapshot holds streams: %.300s", snap)
	}
	te.open(t)
	checkShape(t, "stream replayed from a snapshot", te.readStream(t, r3.RunID, 0).Entries, streamShape(live))
	if len(live) != 3 {
		t.Errorf("stream of an untroubled run = %v; want 3 chunks", streamShape(live))
	}
}

// TestEngineStreamLimits: a chunk, a run's chunks and a run's bytes are
// bounded; user code gets a RangeError naming the bound, nothing past it
// is journaled, and the run goes on.
func TestEngineStreamLimits(t *testing.T) { eachEngineStore(t, testEngineStreamLimits) }

// testEngineStreamLimits is TestEngineStreamLimits on one store.
func testEngineStreamLimits(t *testing.T, store string) {
	te := newTestEngineOn(t, store)
	flood := func(size, times int) (int, string) {
		t.Helper()
		r := te.startWait(t, "streamy", fmt.Sprintf(`{"key":"f","size":%d,"times":%d}`, size, times))
		var out struct {
			N     int
			Error string
		}
		json.Unmarshal(r.Output, &out)
		if r.Status != runCompleted {
			t.Fatalf("flood run = %s %v", r.Status, r.Error)
		}
		if p := te.readStream(t, r.RunID, 0); len(p.Entries) != out.N {
			t.Errorf("stream holds %d chunks; the step wrote %d", len(p.Entries), out.N)
		}
		return out.N, out.Error
	}
	if n, msg := flood(streamMaxChunk+1, 1); n != 0 || !strings.HasPrefix(msg, "RangeError: ") || !strings.Contains(msg, fmt.Sprint(streamMaxChunk)) {
		t.Errorf("an oversized chunk: wrote %d, %q; want a RangeError naming %d", n, msg, streamMaxChunk)
	}
	if n, msg := flood(streamMaxChunk, 100); n != streamMaxBytes/streamMaxChunk || !strings.HasPrefix(msg, "RangeError: ") || !strings.Contains(msg, fmt.Sprint(streamMaxBytes)) {
		t.Errorf("bytes past the run's bound: wrote %d, %q; want %d then a RangeError naming %d", n, msg, streamMaxBytes/streamMaxChunk, streamMaxBytes)
	}
	// The chunk count, written from Go (10,000 writes from code would be
	// slow): a run whose step is held accepts streamMaxChunks, then refuses.
	rc, err := te.start(startRequest{Workflow: "streamy", Input: json.RawMessage(`{"key":"hold-lim"}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	<-te.counter.held
	var wg sync.WaitGroup
	errs := make(chan error, streamMaxChunks)
	const writers = 50
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < streamMaxChunks-2; i += writers { // the step wrote 2
				if err := te.streamWrite(rc.RunID, 1, "talk", 1, streamChunk{Text: "."}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a write within the bound failed: %v", err)
	}
	var limit *streamLimitError
	if err := te.streamWrite(rc.RunID, 1, "talk", 1, streamChunk{Text: "."}); !errors.As(err, &limit) || !strings.Contains(err.Error(), fmt.Sprint(streamMaxChunks)) {
		t.Errorf("chunk %d: %v; want the chunk bound", streamMaxChunks+1, err)
	}
	if p := te.readStream(t, rc.RunID, 0); len(p.Entries) != streamMaxChunks {
		t.Errorf("stream holds %d entries; want %d", len(p.Entries), streamMaxChunks)
	}
	close(te.counter.unhold)
}
