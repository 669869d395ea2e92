package main

// Real processes on the PostgreSQL engine: several `svc serve` replicas on
// one database, active/active.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgTakeoverWorkflows: steps count their key at the counter; napper sleeps
// long enough to be asleep when its process dies; gated waits on a hook.
var pgTakeoverWorkflows = map[string]string{
	"workflows/chain.workflow.ts": crashWorkflows["workflows/chain.workflow.ts"],
	"workflows/gated.workflow.ts": crashWorkflows["workflows/gated.workflow.ts"],
	"workflows/napper.workflow.ts": `
import { sleep } from "svc";
async function hit(key: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key); return (await r.json()).n; }
export default async function napper(input: { id: string, ms: number }) {
  "use workflow";
  await hit(input.id + "-before");
  await sleep(input.ms);
  await hit(input.id + "-after");
  return { id: input.id };
}`,
}

// perkeyWorkflow is limited to two active runs per input k; each run
// counts two steps around a short sleep.
const perkeyWorkflow = `
import { sleep } from "svc";
export const concurrency = { limit: 2, key: "/k" };
async function mark(key: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key); return (await r.json()).n; }
export default async function perkey(input: { k: string, i: number }) {
  "use workflow";
  await mark("perkey-" + input.i + "-1");
  await sleep(15);
  await mark("perkey-" + input.i + "-2");
  return { i: input.i };
}`

// pgBox is a `svc serve` on the PostgreSQL engine, signed requests with secret.
type pgBox struct {
	*boxProcess
	secret []byte
}

// do sends a signed request and decodes a JSON answer into out (when not nil).
func (b *pgBox) do(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	rep := boxDo(t, method, b.url+path, []byte(body), b.secret, time.Now(), "", nil)
	if out != nil {
		json.Unmarshal(rep.body, out)
	}
	return rep.status
}

// engineHealth returns the journal state and the engine's store as the
// health route reports them.
func (b *pgBox) engineHealth(t *testing.T) (string, engineStoreHealth) {
	t.Helper()
	var h struct {
		Journal journalHealth     `json:"journal"`
		Engine  engineStoreHealth `json:"engine"`
	}
	b.do(t, "GET", "/api/health", "", &h)
	return h.Journal.State, h.Engine
}

// start starts wf on b and returns the receipt.
func (b *pgBox) start(t *testing.T, wf, input string) startReceipt {
	t.Helper()
	var rc startReceipt
	if code := b.do(t, "POST", "/api/workflows/"+wf+"/start", input, &rc); code != 202 || (rc.RunID == "" && rc.QueueID == "") {
		t.Fatalf("start %s on %s = %d %+v", wf, b.url, code, rc)
	}
	return rc
}

// run returns run id as b shows it.
func (b *pgBox) run(t *testing.T, id string) runRecord {
	var got struct{ Run runRecord }
	b.do(t, "GET", "/api/runs/"+id, "", &got)
	return got.Run
}

// await long-polls run id on b until it ends (bounded).
func (b *pgBox) await(t *testing.T, id string) runRecord {
	var got struct{ Run runRecord }
	for range 8 {
		if b.do(t, "GET", "/api/runs/"+id+"?wait=5s", "", &got); terminal(got.Run.Status) {
			break
		}
	}
	return got.Run
}

// pgReplicaProject makes a project of pgTakeoverWorkflows whose steps
// report to the returned counter, on a fresh database, and the
// environment of its `svc serve` replicas (PostgreSQL engine, signed
// requests with secret).
func pgReplicaProject(t *testing.T) (dir string, counter *stepCounter, dbURL string, secret []byte, env []string) {
	dir = projectDir(t)
	for f, src := range pgTakeoverWorkflows {
		writeFile(t, dir, f, src)
	}
	counter = newStepCounter(t)
	writeFile(t, dir, ".env", "COUNTER="+counter.URL+"\n")
	dbURL = testPostgresURL(t)
	secret = []byte(strings.Repeat("ab", 32))
	env = baseEnv("DATABASE_URL="+dbURL, "HMAC_SECRET="+string(secret), "SVC_MASTER_KEY="+strings.Repeat("cd", 32), "OPENAI_API_KEY=sk-test",
		"SVC_ENGINE=postgres", "SVC_STORAGE_LOCAL_OK=1")
	return dir, counter, dbURL, secret, env
}

// laneParentWorkflow waits on a serial lane run as its child.
const laneParentWorkflow = `
import { workflows } from "svc";
export default async function laneparent(input: { i: number }) {
  "use workflow";
  const child: any = await workflows.startAndWait("lane", { i: input.i });
  return { child };
}`

// streamerWorkflow writes a chunk to its stream, waits on a hook (its
// token to the counter), then writes another.
const streamerWorkflow = `
import { createHook, getWritable } from "svc";
async function say(v: string) { "use step"; const w = getWritable().getWriter(); await w.write(v); w.releaseLock(); }
async function announce(key: string, token: string) { "use step"; await fetch(process.env.COUNTER + "?k=" + key + "&token=" + token); }
export default async function streamer(input: { id: string }) {
  "use workflow";
  await say("first");
  const hook = createHook();
  await announce(input.id + "-announce", hook.token);
  await hook;
  await say("second");
  return { id: input.id };
}`

// TestEngineReplicas runs three `svc serve` replicas with
// SVC_ENGINE=postgres on one database, active/active (DESIGN §12). Each
// executes the runs it starts; any replica reads, long-polls, resumes and
// cancels any run; a serial workflow started on all three at once runs one
// at a time, and a workflow limited to two runs per key never more than two
// of a key; one idempotency key across replicas makes one run. A replica
// SIGKILLed with a run asleep: another claims its runs once its lease
// expires and finishes them. A replica stalled (SIGSTOP) past its lease:
// its runs are claimed; woken, it writes nothing for them, says it lost
// its lease and rejoins. A graceful stop (SIGTERM) releases the runs: they
// are claimed at once, not after the lease.
func TestEngineReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three svc serve processes")
	}
	dir, counter, dbURL, secret, env := pgReplicaProject(t)
	writeFile(t, dir, "workflows/lane.workflow.ts", crashWorkflows["workflows/lane.workflow.ts"])
	writeFile(t, dir, "workflows/laneparent.workflow.ts", laneParentWorkflow)
	writeFile(t, dir, "workflows/streamer.workflow.ts", streamerWorkflow)
	writeFile(t, dir, "workflows/perkey.workflow.ts", perkeyWorkflow)
	const lease = 3 * time.Second
	env = append(env, "SVC_ENGINE_LEASE=3s", "SVC_ENGINE_LEASE_RENEW=1s")
	start := func() *pgBox { return &pgBox{startBox(t, dir, t.TempDir(), env), secret} }
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	boxes := []*pgBox{start(), start(), start()}
	a, b, c := boxes[0], boxes[1], boxes[2]
	owners := map[string]*pgBox{}
	for _, x := range boxes {
		eventually(t, 20*time.Second, "every replica holds its lease and sees the others", func() bool {
			j, h := x.engineHealth(t)
			return j == "ok" && h.Lease == engineLeaseHeld && h.Replicas == 3
		})
		_, h := x.engineHealth(t)
		owners[h.Owner] = x
	}
	if len(owners) != 3 {
		t.Fatalf("replica names %v; want three", owners)
	}
	// The log's partitions are dealt out: each replica holds its share
	// and executes only its partitions' runs (issue 39, items 2 and 3).
	shared := func(live []*pgBox) bool {
		held := map[int]int{}
		for _, x := range live {
			_, h := x.engineHealth(t)
			if len(h.Partitions) > (enginePartitionsDefault+len(live)-1)/len(live) {
				return false
			}
			for _, p := range h.Partitions {
				held[p]++
			}
		}
		for p := range enginePartitionsDefault {
			if held[p] != 1 {
				return false
			}
		}
		return true
	}
	eventually(t, 20*time.Second, "each of the log's partitions held by one replica, a fair share each", func() bool { return shared(boxes) })
	// The route between replicas admits the fleet's token and nothing else.
	var fleetToken string
	if err := db.QueryRow(context.Background(), `SELECT token FROM svc_engine.fleet`).Scan(&fleetToken); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, query string
		want         int
	}{{"", "?p=0", 401}, {"not-the-token", "?p=0", 401}, {fleetToken, "?p=999", 400}, {fleetToken, "?p=x", 400}} {
		req, _ := http.NewRequest("POST", a.url+fleetRPCPath+fleetOpFind+tc.query, strings.NewReader(`{"ID":"x"}`))
		if tc.token != "" {
			req.Header.Set(fleetTokenHeader, tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a call between replicas with token %q, %s = %d; want %d", tc.token, tc.query, resp.StatusCode, tc.want)
		}
	}
	ownerOf := func(x *pgBox) string {
		_, h := x.engineHealth(t)
		return h.Owner
	}

	// Work sharing: each replica executes what it started; the others read
	// it and answer a long poll when it ends.
	c1, c2 := a.start(t, "chain", `{"id":"c1"}`), b.start(t, "chain", `{"id":"c2"}`)
	// Read at once through another replica: it catches up with the log.
	for _, x := range []struct {
		on *pgBox
		id string
	}{{c, c1.RunID}, {a, c2.RunID}} {
		if code := x.on.do(t, "GET", "/api/runs/"+x.id, "", nil); code != 200 {
			t.Errorf("a run read on another replica just after its start = %d; want 200", code)
		}
	}
	if r := c.await(t, c1.RunID); r.Status != runCompleted || r.Owner != ownerOf(a) {
		t.Errorf("run started on a, read on c = %s owner %q; want completed, owned by a (%s)", r.Status, r.Owner, ownerOf(a))
	}
	if r := a.await(t, c2.RunID); r.Status != runCompleted || r.Owner != ownerOf(b) {
		t.Errorf("run started on b, read on a = %s owner %q; want completed, owned by b", r.Status, r.Owner)
	}
	// A hook created on c, resumed through a; resumed again through b: used.
	g := c.start(t, "gated", `{"id":"g1"}`)
	token := <-counter.tokens
	// The hook was in the log before its token reached the counter: a
	// replica that has not been told yet catches up with the log, no 404.
	if code := a.do(t, "POST", "/api/hooks/"+token, `{"ok":true}`, nil); code != 200 && code != 202 {
		t.Errorf("resume on another replica, at once = %d; want it accepted", code)
	}
	if code := b.do(t, "POST", "/api/hooks/"+token, `{"ok":true}`, nil); code != 409 {
		t.Errorf("second resume on a third replica = %d; want 409", code)
	}
	if r := b.await(t, g.RunID); r.Status != runCompleted || string(r.Output) != `{"id":"g1","ok":true}` {
		t.Errorf("hooked run = %s %s", r.Status, r.Output)
	}
	// A live stream read through a replica that does not hold the run:
	// what the run writes after the read began reaches the reader too.
	sr := c.start(t, "streamer", `{"id":"s1"}`)
	streamToken := <-counter.tokens
	streamed := make(chan boxReply, 1)
	go func() {
		streamed <- boxDo(t, "GET", a.url+"/api/runs/"+sr.RunID+"/stream", nil, a.secret, time.Now(), "", nil)
	}()
	time.Sleep(300 * time.Millisecond) // the reader has the first chunk and waits
	if code := b.do(t, "POST", "/api/hooks/"+streamToken, `{}`, nil); code != 202 {
		t.Errorf("resume the streamer = %d", code)
	}
	select {
	case rep := <-streamed:
		if body := string(rep.body); rep.status != 200 || !strings.Contains(body, `"first"`) || !strings.Contains(body, `"second"`) || !strings.Contains(body, "event: end") {
			t.Errorf("a live stream through another replica = %d %q; want both chunks and its end", rep.status, body)
		}
	case <-time.After(30 * time.Second):
		t.Error("a live stream through another replica did not end with its run")
	}

	// A cancel through another replica reaches the owner.
	g2 := c.start(t, "gated", `{"id":"g2"}`)
	<-counter.tokens
	if code := a.do(t, "POST", "/api/runs/"+g2.RunID+"/cancel", "", nil); code != 200 {
		t.Errorf("cancel on another replica = %d", code)
	}
	if r := c.await(t, g2.RunID); r.Status != runCancelled {
		t.Errorf("cancelled run on its owner = %s", r.Status)
	}

	// A serial workflow started on all three at once, and as the child of
	// a run on each (whose partitions are others than the lane's): one at
	// a time, every start acknowledged runs once.
	const lanes, childLanes = 9, 3
	var wg sync.WaitGroup
	for i := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			boxes[i%3].start(t, "lane", fmt.Sprintf(`{"i":%d}`, i))
		}()
	}
	var parents [childLanes]string
	for i := range childLanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parents[i] = boxes[i].start(t, "laneparent", fmt.Sprintf(`{"i":%d}`, lanes+i)).RunID
		}()
	}
	// A workflow limited to two runs per key, started on all three at once.
	const keys, perKey = 3, 6
	for i := range keys * perKey {
		wg.Add(1)
		go func() {
			defer wg.Done()
			boxes[i%3].start(t, "perkey", fmt.Sprintf(`{"k":"k%d","i":%d}`, i%keys, i))
		}()
	}
	// One key on every replica at once: one run.
	keyed := make([]string, 3)
	for i, x := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := boxDo(t, "POST", x.url+"/api/workflows/chain/start", []byte(`{"id":"idem"}`), x.secret, time.Now(), "", func(r *http.Request) { r.Header.Set("Idempotency-Key", "fleet-1") })
			var rc startReceipt
			json.Unmarshal(rep.body, &rc)
			keyed[i] = rc.RunID
		}()
	}
	wg.Wait()
	if keyed[0] == "" || keyed[0] != keyed[1] || keyed[1] != keyed[2] {
		t.Errorf("one idempotency key on three replicas = runs %q; want one", keyed)
	}
	// The key is project-wide: a start of a serial workflow with it (whose
	// queue lives in another partition than the key's first start) is a
	// reuse.
	reuse := boxDo(t, "POST", b.url+"/api/workflows/lane/start", []byte(`{"i":99}`), b.secret, time.Now(), "", func(r *http.Request) { r.Header.Set("Idempotency-Key", "fleet-1") })
	if reuse.status != 422 || !strings.Contains(string(reuse.body), "idempotency_key_reused") {
		t.Errorf("the key of a chain run, reused for a lane run = %d %s; want 422 idempotency_key_reused", reuse.status, reuse.body)
	}
	eventually(t, 60*time.Second, "every lane run ended", func() bool {
		var active int
		db.QueryRow(context.Background(), `SELECT count(*) FROM svc.runs WHERE workflow_name = 'lane' AND status = 'completed'`).Scan(&active)
		return active == lanes+childLanes
	})
	for i, id := range parents {
		if r := c.await(t, id); r.Status != runCompleted || string(r.Output) != fmt.Sprintf(`{"child":{"i":%d}}`, lanes+i) {
			t.Errorf("a parent of a lane = %s %s; want completed with its child's output", r.Status, r.Output)
		}
	}
	type span struct{ from, to time.Time }
	var spans []span
	var list struct{ Items []runRecord }
	a.do(t, "GET", "/api/runs?workflow=lane&limit=100", "", &list)
	seen := map[string]bool{}
	for _, r := range list.Items {
		if r.Status != runCompleted || r.EndedAt == nil {
			t.Fatalf("lane %s = %s", r.Input, r.Status)
		}
		seen[string(r.Input)] = true
		spans = append(spans, span{r.CreatedAt, *r.EndedAt})
	}
	for i := range lanes + childLanes {
		if n := counter.count(fmt.Sprintf("lane-%d-2", i)); n != 1 || !seen[fmt.Sprintf(`{"i":%d}`, i)] {
			t.Errorf("lane %d: listed %v, its last step ran %d times; want listed, once", i, seen[fmt.Sprintf(`{"i":%d}`, i)], n)
		}
	}
	slices.SortFunc(spans, func(x, y span) int { return x.from.Compare(y.from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from.Before(spans[i-1].to) {
			t.Errorf("serial runs overlap: one ran %v–%v, the next began %v", spans[i-1].from, spans[i-1].to, spans[i].from)
		}
	}
	// The limited workflow: every start ran once, never more than two of a
	// key at once, whichever replica admitted them.
	eventually(t, 60*time.Second, "every perkey run ended", func() bool {
		var done int
		db.QueryRow(context.Background(), `SELECT count(*) FROM svc.runs WHERE workflow_name = 'perkey' AND status = 'completed'`).Scan(&done)
		return done == keys*perKey
	})
	list.Items = nil
	a.do(t, "GET", "/api/runs?workflow=perkey&limit=100", "", &list)
	byKey := checkConcurrencySpans(t, list.Items, "perkey", 2, false)
	for k := range keys {
		if n := len(byKey[fmt.Sprintf("k%d", k)]); n != perKey {
			t.Errorf("key k%d has %d runs; want %d", k, n, perKey)
		}
	}
	for i := range keys * perKey {
		if n := counter.count(fmt.Sprintf("perkey-%d-2", i)); n != 1 {
			t.Errorf("perkey %d: its last step ran %d times; want once", i, n)
		}
	}

	// SIGKILL with runs asleep on a: the other replicas claim them after
	// the lease, dealt out over both (issue 39, item 3), and finish them.
	nap := a.start(t, "napper", `{"id":"nap","ms":1500}`)
	naps := []string{nap.RunID}
	for i := range 5 {
		naps = append(naps, a.start(t, "napper", fmt.Sprintf(`{"id":"nap%d","ms":1500}`, i)).RunID)
	}
	eventually(t, 20*time.Second, "the nappers asleep on a", func() bool {
		n := counter.count("nap-before")
		for i := range 5 {
			n += counter.count(fmt.Sprintf("nap%d-before", i))
		}
		return n == 6
	})
	killed := time.Now()
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	dealt := map[string]int{}
	eventually(t, 30*time.Second, "a's runs claimed by the other replicas", func() bool {
		clear(dealt)
		for _, id := range naps {
			dealt[b.run(t, id).Owner]++
		}
		return dealt[ownerOf(b)]+dealt[ownerOf(c)] == len(naps)
	})
	t.Logf("takeover after SIGKILL: %v (lease %v); runs dealt out %v", time.Since(killed).Round(time.Millisecond), lease, dealt)
	if dealt[ownerOf(b)] != 3 || dealt[ownerOf(c)] != 3 {
		t.Errorf("a's six runs were dealt out %v; want three to each survivor", dealt)
	}
	eventually(t, 20*time.Second, "a's partitions spread over the two survivors", func() bool { return shared([]*pgBox{b, c}) })
	for _, id := range naps {
		if r := b.await(t, id); r.Status != runCompleted {
			t.Fatalf("a napper after its replica died = %s %+v", r.Status, r.Error)
		}
	}
	if counter.count("nap-after") != 1 {
		t.Fatalf("nap-after ran %d times; want once", counter.count("nap-after"))
	}

	// A stall: b stops past its lease with a run asleep; c claims it.
	// (Asleep long enough that the stop lands in the sleep: a step that ran
	// on b but was not journaled before the stop would run again on c, as
	// steps are at least once.)
	_, bHealth := b.engineHealth(t)
	stall := b.start(t, "napper", `{"id":"stall","ms":4000}`)
	eventually(t, 20*time.Second, "the napper asleep on b", func() bool { return counter.count("stall-before") == 1 })
	t.Cleanup(func() { b.cmd.Process.Signal(syscall.SIGCONT) }) // before its stop, should the test end here
	b.cmd.Process.Signal(syscall.SIGSTOP)
	if r := c.await(t, stall.RunID); r.Status != runCompleted || r.Owner != ownerOf(c) {
		t.Fatalf("the stalled replica's run on c = %s owner %q", r.Status, r.Owner)
	}
	b.cmd.Process.Signal(syscall.SIGCONT)
	eventually(t, 20*time.Second, "the stalled replica says it lost its lease", func() bool {
		return strings.Contains(b.stderr.String(), "engine lease lost")
	})
	eventually(t, 20*time.Second, "the stalled replica rejoins under a new epoch", func() bool {
		j, h := b.engineHealth(t)
		return j == "ok" && h.Lease == engineLeaseHeld && h.Owner == bHealth.Owner && h.Epoch > bHealth.Epoch
	})
	var ends int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM svc_engine.events WHERE convert_from(data, 'UTF8') LIKE $1`,
		fmt.Sprintf(`{"t":"end",%%"r":"%s"%%`, stall.RunID)).Scan(&ends); err != nil {
		t.Fatal(err)
	}
	if ends > 1 || counter.count("stall-after") != 1 {
		t.Errorf("the stalled run has %d end events and its last step ran %d times; want one each", ends, counter.count("stall-after"))
	}

	// A graceful stop releases c's runs: claimed well before a lease.
	rest := c.start(t, "napper", `{"id":"rest","ms":3000}`)
	eventually(t, 20*time.Second, "the napper asleep on c", func() bool { return counter.count("rest-before") == 1 })
	stopped := time.Now()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("c did not stop within 30s of SIGTERM")
	}
	eventually(t, 20*time.Second, "c's run claimed by b", func() bool { return b.run(t, rest.RunID).Owner == ownerOf(b) })
	if d := time.Since(stopped); d >= lease {
		t.Errorf("after a graceful stop the run was claimed in %v, not before the lease (%v) would have expired", d, lease)
	}
	if r := b.await(t, rest.RunID); r.Status != runCompleted {
		t.Errorf("the released run = %s", r.Status)
	}
	eventually(t, 20*time.Second, "b alone holds every partition", func() bool { return shared([]*pgBox{b}) })

	// A replica that joins takes its share, and runs started on it are its
	// own (issue 39, item 3).
	joined := time.Now()
	d := start()
	eventually(t, 30*time.Second, "the joining replica took its share of the partitions", func() bool { return shared([]*pgBox{b, d}) })
	t.Logf("a joining replica held its share %v after its process started", time.Since(joined).Round(time.Millisecond))
	late := d.start(t, "chain", `{"id":"late"}`)
	if r := b.await(t, late.RunID); r.Status != runCompleted || r.Owner != ownerOf(d) {
		t.Errorf("a run started on the joined replica, read on b = %s owner %q; want completed, owned by it", r.Status, r.Owner)
	}
}

// TestEnginePostgresDev runs svc dev with SVC_ENGINE=postgres: a run
// completes, the health route names the engine and its lease, and the
// events are in the database, not in a journal on disk.
func TestEnginePostgresDev(t *testing.T) {
	if testing.Short() {
		t.Skip("runs svc dev")
	}
	dir := projectDir(t)
	writeFile(t, dir, "workflows/chain.workflow.ts", crashWorkflows["workflows/chain.workflow.ts"])
	counter := newStepCounter(t)
	writeFile(t, dir, ".env", "COUNTER="+counter.URL+"\n")
	dbURL := testPostgresURL(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk", "SVC_ENGINE=postgres"))
	var rc startReceipt
	if code := httpJSON(t, "POST", d.url("/api/workflows/chain/start"), map[string]string{"id": "dev"}, &rc); code != 202 {
		t.Fatalf("start = %d", code)
	}
	var got struct{ Run runRecord }
	httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=20s"), nil, &got)
	if got.Run.Status != runCompleted || counter.count("dev-3") != 1 {
		t.Fatalf("run = %s %s; want completed", got.Run.Status, got.Run.Output)
	}
	var h struct {
		Engine engineStoreHealth `json:"engine"`
	}
	if code := httpJSON(t, "GET", d.url("/api/health"), nil, &h); code != 200 || h.Engine.Kind != engineKindPostgres || h.Engine.Lease != engineLeaseHeld {
		t.Errorf("health = %d %+v; want the postgres engine holding its lease", code, h.Engine)
	}
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var n int
	db.QueryRow(context.Background(), `SELECT count(*) FROM svc_engine.events WHERE convert_from(data, 'UTF8') LIKE $1`, "%"+rc.RunID+"%").Scan(&n)
	if n == 0 {
		t.Error("no event of the run in svc_engine.events")
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, ".svc", "journal", "*.seg")); len(segs) != 0 {
		t.Errorf("journal segments on disk with the PostgreSQL engine: %v", segs)
	}
}

// deployWorkflow is a workflow whose output names its code's version.
func deployWorkflow(version string) string {
	return `
import { sleep, createHook } from "svc";
async function hit(key: string, token: string) { "use step"; const r = await fetch(process.env.COUNTER + "?k=" + key + "&token=" + token); return (await r.json()).n; }
export default async function deploy(input: { id: string, ms: number, hook: boolean }) {
  "use workflow";
  let token = "";
  let hook: any = null;
  if (input.hook) { hook = createHook(); token = hook.token; }
  await hit(input.id + "-before", token);
  if (hook) await hook; else await sleep(input.ms);
  await hit(input.id + "-after-` + version + `", "");
  return { id: input.id, version: "` + version + `" };
}`
}

// TestEngineRollingDeploy restarts two replicas one by one onto a new
// version of the project (each replica its own project directory, as each
// image carries its code) while runs of the old version sleep or wait on a
// hook: every run finishes on the code it started with, on whichever
// replica holds it, and new runs take the new code.
func TestEngineRollingDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four svc serve processes")
	}
	counter := newStepCounter(t)
	dirs := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		dirs[v] = projectDir(t)
		writeFile(t, dirs[v], "workflows/deploy.workflow.ts", deployWorkflow(v))
		writeFile(t, dirs[v], ".env", "COUNTER="+counter.URL+"\n")
	}
	dbURL := testPostgresURL(t)
	secret := strings.Repeat("ab", 32)
	env := baseEnv("DATABASE_URL="+dbURL, "HMAC_SECRET="+secret, "SVC_MASTER_KEY="+strings.Repeat("cd", 32), "OPENAI_API_KEY=sk-test",
		"SVC_ENGINE=postgres", "SVC_STORAGE_LOCAL_OK=1", "SVC_ENGINE_LEASE=3s", "SVC_ENGINE_LEASE_RENEW=1s")
	start := func(v string) *pgBox { return &pgBox{startBox(t, dirs[v], t.TempDir(), env), []byte(secret)} }
	stop := func(b *pgBox) {
		b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("a replica did not stop within 30s of SIGTERM")
		}
	}
	a, b := start("v1"), start("v1")
	old := []string{
		a.start(t, "deploy", `{"id":"a-nap","ms":8000}`).RunID,
		b.start(t, "deploy", `{"id":"b-nap","ms":8000}`).RunID,
		a.start(t, "deploy", `{"id":"a-hook","hook":true}`).RunID,
	}
	token := <-counter.tokens
	eventually(t, 20*time.Second, "the old runs asleep or waiting", func() bool {
		return counter.count("a-nap-before") == 1 && counter.count("b-nap-before") == 1 && counter.count("a-hook-before") == 1
	})
	// The rolling deploy: a onto v2, then b.
	stop(a)
	a = start("v2")
	stop(b)
	b = start("v2")
	eventually(t, 20*time.Second, "the hook resumed on a new replica", func() bool {
		code := a.do(t, "POST", "/api/hooks/"+token, `{"ok":true}`, nil)
		return code == 200 || code == 202
	})
	for _, id := range old {
		if r := b.await(t, id); r.Status != runCompleted || !strings.Contains(string(r.Output), `"version":"v1"`) {
			t.Errorf("old run %s after the deploy = %s %s; want completed on v1", id, r.Status, r.Output)
		}
	}
	for _, k := range []string{"a-nap-after-v1", "b-nap-after-v1", "a-hook-after-v1"} {
		if n := counter.count(k); n != 1 {
			t.Errorf("step %s ran %d times; want once", k, n)
		}
	}
	for _, x := range []*pgBox{a, b} {
		id := x.start(t, "deploy", `{"id":"new","ms":10}`).RunID
		if r := x.await(t, id); r.Status != runCompleted || !strings.Contains(string(r.Output), `"version":"v2"`) {
			t.Errorf("new run after the deploy = %s %s; want v2", r.Status, r.Output)
		}
	}
}

// TestReplicaCatchUp: a replica that hears nothing of the log (its
// listener's session ended, its poll ten minutes away) still finds what
// another replica made and acknowledged an instant ago: a run read and
// cancelled through it, a hook resumed, a stream read. A lookup that
// misses catches up with the log first; before, each was a 404 until a
// notification or the poll arrived. (What it already knows it shows as
// delivered: a long poll there ends when the end reaches it.)
func TestReplicaCatchUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two svc serve processes")
	}
	dir, counter, dbURL, secret, env := pgReplicaProject(t)
	deaf := &pgBox{startBox(t, dir, t.TempDir(), append(env, "SVC_ENGINE_POLL=10m")), secret}
	other := &pgBox{startBox(t, dir, t.TempDir(), env), secret}
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	// End every listener's session: the deaf replica listens again only
	// after its poll interval.
	if _, err := db.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE query LIKE 'LISTEN `+engineStorePGChannel+`%' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the deaf replica says it lost its listener", func() bool {
		return strings.Contains(deaf.stderr.String(), "listen for the engine's events")
	})

	done := other.start(t, "chain", `{"id":"c1"}`)
	if r := other.await(t, done.RunID); r.Status != runCompleted {
		t.Fatalf("chain on the other replica = %s", r.Status)
	}
	if code := deaf.do(t, "GET", "/api/runs/"+done.RunID+"/stream", "", nil); code != 200 {
		t.Errorf("the stream of a run of the other replica, on the deaf one = %d; want 200", code)
	}
	done = other.start(t, "chain", `{"id":"c2"}`)
	other.await(t, done.RunID)
	if r := deaf.run(t, done.RunID); r.Status != runCompleted {
		t.Errorf("a run ended on the other replica, read on the deaf one = %q; want completed", r.Status)
	}
	gated := other.start(t, "gated", `{"id":"g1"}`)
	token := <-counter.tokens
	if code := deaf.do(t, "POST", "/api/hooks/"+token, `{"ok":true}`, nil); code != 200 && code != 202 {
		t.Errorf("a hook of the other replica's run, resumed on the deaf one = %d; want accepted", code)
	}
	if r := other.await(t, gated.RunID); r.Status != runCompleted {
		t.Errorf("the run resumed through the deaf replica = %s; want completed", r.Status)
	}
	cancelled := other.start(t, "gated", `{"id":"g2"}`)
	<-counter.tokens
	if code := deaf.do(t, "POST", "/api/runs/"+cancelled.RunID+"/cancel", "", nil); code != 200 {
		t.Errorf("cancel on the deaf replica = %d; want 200", code)
	}
	if r := other.await(t, cancelled.RunID); r.Status != runCancelled {
		t.Errorf("the run cancelled through the deaf replica = %s", r.Status)
	}
}

// TestEnginePGReplayedClaimResumes: a run this replica claimed from
// another still runs after this replica's own log fails without releasing
// anything (a dropped connection, a database failover) and recovery
// reopens it. Replaying the claim must not leave the run waiting to be
// settled, which nothing would then do: it stayed pending for good.
func TestEnginePGReplayedClaimResumes(t *testing.T) {
	a := newTestEngineOn(t, engineKindPostgres)
	b := &testEngine{dir: a.dir, cat: a.cat, counter: a.counter, store: engineKindPostgres, pool: a.pool}
	b.open(t)
	rc, err := b.start(startRequest{Workflow: "hooked", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatal(err)
	}
	token := <-a.counter.tokens
	b.close() // it releases its runs, and a claims them
	eventually(t, 10*time.Second, "a owns b's run", func() bool {
		r, ok := a.get(rc.RunID)
		return ok && r.Owner == a.self && r.Status == runWaiting
	})
	a.mu.Lock()
	l := a.j.(*engineStorePGLog)
	a.mu.Unlock()
	l.fail(errors.New("injected: the connection to the database dropped"))
	eventually(t, 20*time.Second, "a's log reopened", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.failed == nil && a.j != nil && a.j != engineLog(l)
	})
	if _, err := a.resumeHook(token, json.RawMessage(`{"approved":true}`)); err != nil {
		t.Fatalf("resume after the reopen: %v", err)
	}
	if r := a.await(t, rc.RunID); r.Status != runCompleted || string(r.Output) != `{"approved":true}` {
		t.Fatalf("the claimed run after a's log was reopened = %s %s; want completed", r.Status, r.Output)
	}
}
