package main

// Real processes on the PostgreSQL engine: two `svc serve` on one
// database, active/passive behind the engine-wide lease.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
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

// engineHealth returns the journal state and the engine's lease as the
// health route reports them.
func (b *pgBox) engineHealth(t *testing.T) (journal, lease string) {
	t.Helper()
	var h struct {
		Journal journalHealth     `json:"journal"`
		Engine  engineStoreHealth `json:"engine"`
	}
	b.do(t, "GET", "/api/health", "", &h)
	return h.Journal.State, h.Engine.Lease
}

// TestEnginePostgresTakeover runs two `svc serve` replicas with
// SVC_ENGINE=postgres on one database. The second stands by; runs started
// on the first (steps, a sleeping run, a run waiting on a hook) survive its
// SIGKILL: the second takes over once the lease expires and finishes them,
// the hook resumed through it. Then a third replica stands by, the holder
// is stalled (SIGSTOP) past its lease, the third takes over and finishes
// the run that slept through the stall; the stalled one, woken (SIGCONT),
// writes nothing, steps down and says so. A graceful stop (SIGTERM)
// releases the lease: the next holder claims it before it would have
// expired.
func TestEnginePostgresTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three svc serve processes")
	}
	dir := projectDir(t)
	for f, src := range pgTakeoverWorkflows {
		writeFile(t, dir, f, src)
	}
	counter := newStepCounter(t)
	writeFile(t, dir, ".env", "COUNTER="+counter.URL+"\n")
	dbURL := testPostgresURL(t)
	secret := strings.Repeat("ab", 32)
	env := baseEnv("DATABASE_URL="+dbURL, "HMAC_SECRET="+secret, "SVC_MASTER_KEY="+strings.Repeat("cd", 32), "OPENAI_API_KEY=sk-test",
		"SVC_ENGINE=postgres", "SVC_STORAGE_LOCAL_OK=1", "SVC_ENGINE_LEASE=3s", "SVC_ENGINE_LEASE_RENEW=1s")
	start := func() *pgBox { return &pgBox{startBox(t, dir, t.TempDir(), env), []byte(secret)} }
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	a := start()
	eventually(t, 20*time.Second, "the first replica holds the lease", func() bool { j, l := a.engineHealth(t); return j == "ok" && l == engineLeaseHeld })
	b := start()
	if j, l := b.engineHealth(t); j != "standby" || l != engineLeaseStandby {
		t.Fatalf("second replica: journal %q lease %q; want standby while the first holds the lease", j, l)
	}
	var refused struct{ Error apiError }
	if code := b.do(t, "POST", "/api/workflows/chain/start", `{"id":"on-standby"}`, &refused); code != 503 || refused.Error.Code != "journal_unavailable" ||
		!strings.Contains(refused.Error.Message, "standby") || strings.Contains(refused.Error.Message, "disk") {
		t.Errorf("start on the standby = %d %+v; want 503 journal_unavailable saying it stands by", code, refused)
	}

	startRun := func(b *pgBox, wf, input string) string {
		t.Helper()
		var rc startReceipt
		if code := b.do(t, "POST", "/api/workflows/"+wf+"/start", input, &rc); code != 202 || rc.RunID == "" {
			t.Fatalf("start %s on %s = %d %+v", wf, b.url, code, rc)
		}
		return rc.RunID
	}
	runOf := func(b *pgBox, id string) runRecord {
		var got struct{ Run runRecord }
		b.do(t, "GET", "/api/runs/"+id, "", &got)
		return got.Run
	}
	// waitRun long-polls run id on b until it ends (bounded).
	waitRun := func(b *pgBox, id string) runRecord {
		var got struct{ Run runRecord }
		for range 6 {
			if b.do(t, "GET", "/api/runs/"+id+"?wait=5s", "", &got); terminal(got.Run.Status) {
				break
			}
		}
		return got.Run
	}
	ids := []string{startRun(a, "chain", `{"id":"c1"}`), startRun(a, "chain", `{"id":"c2"}`),
		startRun(a, "napper", `{"id":"nap","ms":1500}`), startRun(a, "gated", `{"id":"g1"}`)}
	token := <-counter.tokens
	eventually(t, 20*time.Second, "the napper asleep on the first replica", func() bool { return counter.count("nap-before") == 1 })

	// The standby knows no active run: it says so rather than "not found".
	for _, req := range [][2]string{{"GET", "/api/runs/" + ids[0]}, {"GET", "/api/runs"}, {"POST", "/api/hooks/" + token}, {"POST", "/api/runs/" + ids[3] + "/cancel"}} {
		if code := b.do(t, req[0], req[1], `{}`, nil); code != 503 {
			t.Errorf("%s %s on the standby = %d; want 503", req[0], req[1], code)
		}
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	eventually(t, 30*time.Second, "the second replica takes over once the lease expires", func() bool {
		j, l := b.engineHealth(t)
		return j == "ok" && l == engineLeaseHeld
	})
	if !strings.Contains(b.stderr.String(), "engine lease held") {
		t.Errorf("the second replica's log does not say it took over:\n%s", b.stderr.String())
	}
	// The hook's record may not have been committed when the first replica
	// died (it is not waited on); then the second runs the announcing step
	// again, with a new token. Resume whichever the run waits on.
	tokens := []string{token}
	eventually(t, 30*time.Second, "the hook resumed through the second replica", func() bool {
		select {
		case tok := <-counter.tokens:
			tokens = append(tokens, tok)
		default:
		}
		for _, tok := range tokens {
			if code := b.do(t, "POST", "/api/hooks/"+tok, `{"ok":true}`, nil); code == 200 || code == 202 {
				return true
			}
		}
		return false
	})
	for _, id := range ids {
		if r := waitRun(b, id); r.Status != runCompleted {
			t.Fatalf("run %s on the second replica = %s %s %+v", id, r.Status, r.Output, r.Error)
		}
	}
	for _, k := range []string{"c1-1", "c1-2", "c1-3", "c2-1", "c2-2", "c2-3", "nap-after", "g1-announce"} {
		if n := counter.count(k); n < 1 {
			t.Errorf("step %s ran %d times; want it run", k, n)
		}
	}

	// A stall: the holder stops past its lease while a run sleeps on it.
	c := start()
	napper := startRun(b, "napper", `{"id":"stall","ms":1000}`)
	eventually(t, 20*time.Second, "the napper asleep on the holder", func() bool { return counter.count("stall-before") == 1 })
	b.cmd.Process.Signal(syscall.SIGSTOP)
	eventually(t, 30*time.Second, "the third replica takes over from the stalled one", func() bool {
		j, l := c.engineHealth(t)
		return j == "ok" && l == engineLeaseHeld
	})
	if r := waitRun(c, napper); r.Status != runCompleted {
		t.Fatalf("the napper on the third replica = %s %+v", r.Status, r.Error)
	}
	b.cmd.Process.Signal(syscall.SIGCONT)
	eventually(t, 20*time.Second, "the stalled replica steps down", func() bool {
		j, l := b.engineHealth(t)
		return j == "standby" && (l == engineLeaseStandby || l == engineLeaseLost)
	})
	if !strings.Contains(b.stderr.String(), "engine lease lost") {
		t.Errorf("the stalled replica's log does not say it lost the lease:\n%s", b.stderr.String())
	}
	if code := b.do(t, "POST", "/api/workflows/chain/start", `{"id":"stalled"}`, nil); code != 503 {
		t.Errorf("start on the stepped-down replica = %d; want 503", code)
	}
	var ends int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM svc_engine.events WHERE convert_from(data, 'UTF8') LIKE $1`,
		fmt.Sprintf(`{"t":"end",%%"r":"%s"%%`, napper)).Scan(&ends); err != nil {
		t.Fatal(err)
	}
	if ends > 1 {
		t.Errorf("the napper has %d end events; want one", ends)
	}
	if r := runOf(c, napper); string(r.Output) != `{"id":"stall"}` {
		t.Errorf("napper = %s %s", r.Status, r.Output)
	}

	// A graceful stop releases the lease: once the holder has exited, its
	// lease is no longer live (a holder that only stopped renewing would
	// leave it live for up to SVC_ENGINE_LEASE), and the standby takes over.
	var h struct {
		Engine engineStoreHealth `json:"engine"`
	}
	c.do(t, "GET", "/api/health", "", &h)
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not stop within 30s of SIGTERM")
	}
	var live bool
	if err := db.QueryRow(context.Background(), `SELECT owner = $1 AND lease_until > now() FROM svc_engine.lease`, h.Engine.Owner).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if h.Engine.Owner == "" || live {
		t.Errorf("after a graceful stop, the lease of %q is still live: the stop did not release it", h.Engine.Owner)
	}
	eventually(t, 30*time.Second, "the standby takes over after the graceful stop", func() bool {
		j, l := b.engineHealth(t)
		return j == "ok" && l == engineLeaseHeld
	})
	if r := runOf(b, startRun(b, "chain", `{"id":"after"}`)); r.RunID == "" {
		t.Error("the new holder does not start runs")
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
