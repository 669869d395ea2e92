package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashWorkflows: steps return {key, n}, n being how often the counter saw
// key when the step ran, so a journaled step that ran again is detectable.
var crashWorkflows = map[string]string{
	"workflows/chain.workflow.ts": `
import { sleep } from "svc";
async function hit(key: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key); return { key, n: (await r.json()).n }; }
export default async function chain(input: { id: string }) {
  "use workflow";
  const a = await hit(input.id + "-1");
  const b = await hit(input.id + "-2");
  await sleep(40);
  const c = await hit(input.id + "-3");
  return { id: input.id, steps: [a.n > 0, b.n > 0, c.n > 0] };
}`,
	"workflows/gated.workflow.ts": `
import { createHook } from "svc";
async function announce(key: string, token: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key + "&token=" + token); return { key, n: (await r.json()).n }; }
export default async function gated(input: { id: string }) {
  "use workflow";
  const hook = createHook();
  await announce(input.id + "-announce", hook.token);
  const p: any = await hook;
  return { id: input.id, ok: p.ok };
}`,
	"workflows/lane.workflow.ts": `
import { sleep } from "svc";
export const serial = true;
async function mark(key: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key); return { key, n: (await r.json()).n }; }
export default async function lane(input: { i: number }) {
  "use workflow";
  await mark("lane-" + input.i + "-1");
  await sleep(15);
  await mark("lane-" + input.i + "-2");
  return { i: input.i };
}`,
}

// TestCrashSafety kills `svc dev` with SIGKILL at random points while
// clients start runs (steps, sleeps, hook waits, a serial queue) and
// restarts it, then checks: every acknowledged start completed exactly once,
// no journaled step ran again, the serial invariant and FIFO order held, and
// the journal reopened cleanly every time.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop skipped in -short mode")
	}
	eachEngineStore(t, testCrashSafety)
}

// testCrashSafety is TestCrashSafety on one store. On PostgreSQL each
// restart waits for the killed process's lease to expire (1 s here).
func testCrashSafety(t *testing.T, store string) {
	dir := projectDir(t)
	for f, src := range crashWorkflows {
		writeFile(t, dir, f, src)
	}
	counter := newStepCounter(t)
	env := baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk", "COUNTER="+counter.URL, "SVC_ENGINE="+store,
		"SVC_ENGINE_LEASE=1s", "SVC_ENGINE_LEASE_RENEW=250ms")
	writeFile(t, dir, ".env", "COUNTER="+counter.URL+"\n")
	port := freePortBase(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	var mu sync.Mutex
	acked := map[string]bool{} // chain/gated ids whose start was acknowledged
	ackedLane := map[int]bool{}
	tokens := map[string]bool{}
	laneNext := 0
	idNext := 0

	const cycles = 6
	for cycle := range cycles + 1 {
		d := startDevProcess(t, dir, port, env)
		d.payload = d.nextPayload(60 * time.Second) // the journal reopened cleanly
		base := d.payload.EmulatorURL
		if cycle == cycles { // on PostgreSQL, once the killed process's lease expired
			eventually(t, 30*time.Second, "the engine to take its state over", func() bool {
				var h struct{ Journal journalHealth }
				httpJSON(t, "GET", base+"/api/health", nil, &h)
				return h.Journal.State == "ok"
			})
		}
		client := &http.Client{Timeout: 5 * time.Second}
		post := func(path, body string) (int, []byte) {
			resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
			if err != nil {
				return 0, nil
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			return resp.StatusCode, b.Bytes()
		}
		last := cycle == cycles
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if !last {
			for w := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 400 {
						select {
						case <-stop:
							return
						default:
						}
						mu.Lock()
						kind := (idNext + w) % 3
						id := fmt.Sprintf("c%d-%d", cycle, idNext)
						idNext++
						i := laneNext
						if kind == 2 {
							laneNext++
						}
						mu.Unlock()
						switch kind {
						case 0, 1:
							wf := []string{"chain", "gated"}[kind]
							if st, _ := post("/api/workflows/"+wf+"/start", `{"id":"`+id+`"}`); st == 202 {
								mu.Lock()
								acked[id] = true
								mu.Unlock()
							}
						case 2:
							// One client owns the lane so its starts are ordered.
							if w != 0 {
								continue
							}
							if st, _ := post("/api/workflows/lane/start", fmt.Sprintf(`{"i":%d}`, i)); st == 202 {
								mu.Lock()
								ackedLane[i] = true
								mu.Unlock()
							}
						}
						time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
					}
				}()
			}
		}
		// Resume every announced hook (again after restarts: a used token is a 409).
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case tok := <-counter.tokens:
					mu.Lock()
					tokens[tok] = true
					mu.Unlock()
					post("/api/hooks/"+tok, `{"ok":true}`)
				case <-time.After(20 * time.Millisecond):
					mu.Lock()
					all := make([]string, 0, len(tokens))
					for tok := range tokens {
						all = append(all, tok)
					}
					mu.Unlock()
					if last {
						for _, tok := range all {
							post("/api/hooks/"+tok, `{"ok":true}`)
						}
					}
				}
			}
		}()
		if !last {
			time.Sleep(time.Duration(200+rng.IntN(900)) * time.Millisecond)
			d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.exited
			close(stop)
			wg.Wait()
			continue
		}
		// Final boot: everything acknowledged must finish.
		var runs []runRecord
		eventually(t, 60*time.Second, "every run to finish after the last restart", func() bool {
			var queued []queuedTrigger
			runs, queued = listAllRuns(t, base)
			for _, r := range runs {
				if !terminal(r.Status) {
					return false
				}
			}
			return len(queued) == 0
		})
		close(stop)
		wg.Wait()
		checkCrashInvariants(t, runs, acked, ackedLane, counter)
		if code := d.interrupt(); code != 0 {
			t.Errorf("final SIGINT exit = %d", code)
		}
	}
}

// checkCrashInvariants verifies the outcome of TestCrashSafety.
func checkCrashInvariants(t *testing.T, runs []runRecord, acked map[string]bool, ackedLane map[int]bool, counter *stepCounter) {
	t.Helper()
	byID := map[string][]runRecord{}
	byLane := map[int][]runRecord{}
	var lane []runRecord
	for _, r := range runs {
		var in struct {
			ID string `json:"id"`
			I  *int   `json:"i"`
		}
		json.Unmarshal(r.Input, &in)
		if r.WorkflowName == "lane" {
			byLane[*in.I] = append(byLane[*in.I], r)
			lane = append(lane, r)
		} else {
			byID[in.ID] = append(byID[in.ID], r)
		}
		if r.Status != runCompleted {
			t.Errorf("run %s (%s %s) ended %s: %+v", r.RunID, r.WorkflowName, r.Input, r.Status, r.Error)
		}
		// A step whose completion is in the journal never ran again.
		for _, s := range r.Steps {
			if s.Kind != callStep || s.Status != runCompleted {
				continue
			}
			var res struct {
				Key string `json:"key"`
				N   int    `json:"n"`
			}
			json.Unmarshal(s.Result, &res)
			if got := counter.count(res.Key); got != res.N {
				t.Errorf("step %s of run %s: journaled at execution %d but executed %d times", res.Key, r.RunID, res.N, got)
			}
		}
	}
	for id := range acked {
		if n := len(byID[id]); n != 1 {
			t.Errorf("acknowledged start %s has %d runs; want exactly 1", id, n)
		}
	}
	for i := range ackedLane {
		if n := len(byLane[i]); n != 1 {
			t.Errorf("acknowledged serial start %d has %d runs; want exactly 1", i, n)
		}
	}
	for id, rs := range byID {
		if len(rs) > 1 {
			t.Errorf("start %s has %d runs; want at most 1", id, len(rs))
		}
	}
	sort.Slice(lane, func(a, b int) bool { return lane[a].CreatedAt.Before(lane[b].CreatedAt) })
	prev := -1
	var prevEnd time.Time
	for _, r := range lane {
		var in struct{ I int }
		json.Unmarshal(r.Input, &in)
		if in.I <= prev {
			t.Errorf("serial run for %d started after %d: FIFO broken", in.I, prev)
		}
		if len(r.Steps) > 0 && r.Steps[0].StartedAt.Before(prevEnd) {
			t.Errorf("serial run %d overlapped the previous one", in.I)
		}
		prev = in.I
		if r.EndedAt != nil {
			prevEnd = *r.EndedAt
		}
	}
	t.Logf("crash loop: %d runs (%d serial) all completed exactly once", len(runs), len(lane))
}
