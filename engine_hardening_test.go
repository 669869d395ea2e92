package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

// journalEndCounts reads the journal in dir (the engine must be closed) and
// returns how many end records each run has. A record of a run after its
// end fails the test.
func journalEndCounts(t *testing.T, dir string) map[string]int {
	t.Helper()
	ends := map[string]int{}
	j, err := openJournal(dir, journalOptions{}, func([]byte) error { return nil }, func(b []byte) error {
		var ev journalEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			return err
		}
		if ends[ev.Run] > 0 && runScoped(ev.Type) && ev.Type != evEnd {
			t.Errorf("journal: %s record of run %s after its end", ev.Type, ev.Run)
		}
		if ev.Type == evEnd {
			ends[ev.Run]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	return ends
}

// TestEngineCancelRace starts and at once cancels runs from 8 clients, some
// of them parents of children, then recompiles (an edit) and restarts: no
// run executes after its cancel, every run ends exactly once, and the state
// in memory equals the state replayed from the journal.
func TestEngineCancelRace(t *testing.T) {
	te := newTestEngine(t)
	const clients, pairs = 8, 40
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range pairs {
				wf, input := "three", fmt.Sprintf(`{"id":"race-%d-%d"}`, c, i)
				if i%4 == 0 {
					wf = "parent"
				}
				rc, err := te.start(startRequest{Workflow: wf, Input: json.RawMessage(input), Trigger: triggerHTTP})
				if err != nil {
					errs <- err
					return
				}
				if _, err := te.cancelRun(rc.RunID); err != nil {
					errs <- err
					return
				}
				// A second cancel of the same run is harmless.
				if _, err := te.cancelRun(rc.RunID); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids = append(ids, rc.RunID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// An edit reschedules every unfinished run; cancelled ones must stay put.
	te.resumeAll()
	eventually(t, 20*time.Second, "every run ended", func() bool {
		runs, _ := te.list()
		for _, r := range runs {
			if !terminal(r.Status) {
				return false
			}
		}
		return true
	})
	before := map[string]string{}
	runs, _ := te.list()
	for _, r := range runs {
		before[r.RunID] = r.Status
	}
	for _, id := range ids {
		if before[id] != runCancelled {
			t.Errorf("run %s is %s; want cancelled", id, before[id])
		}
	}
	te.close()
	for id, n := range journalEndCounts(t, te.dir+"/.svc/journal") {
		if n != 1 {
			t.Errorf("run %s has %d end records; want 1", id, n)
		}
	}
	te.open(t)
	after, _ := te.list()
	if len(after) != len(before) {
		t.Fatalf("replayed %d runs; want %d", len(after), len(before))
	}
	for _, r := range after {
		if before[r.RunID] != r.Status {
			t.Errorf("run %s replayed as %s; was %s in memory", r.RunID, r.Status, before[r.RunID])
		}
	}
	// A cancelled run never ran a step after its cancel: a step of a
	// cancelled run ran at most once (the one in flight when it landed).
	for c := range clients {
		for i := range pairs {
			for _, s := range []string{"a", "b", "c"} {
				if n := te.counter.count(fmt.Sprintf("race-%d-%d-%s", c, i, s)); n > 1 {
					t.Errorf("step race-%d-%d-%s ran %d times", c, i, s, n)
				}
			}
		}
	}
}
