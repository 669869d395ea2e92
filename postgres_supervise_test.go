package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pgFaultWorkflow writes a row before and after a sleep and a hook, so a
// run of it has a step with sql, a timer and a hook in flight while the
// database fails underneath.
const pgFaultWorkflow = `import { createHook, sleep, sql } from "svc";
async function record(tag: string, phase: string) {
  "use step";
  const [row] = await sql` + "`insert into greetings (name, greeting) values (${tag}, ${phase}) returning id`" + `;
  return row.id;
}
export default async function outage(input: { tag: string }) {
  "use workflow";
  await record(input.tag, "before");
  await sleep("2s");
  const got = await createHook();
  await record(input.tag, "after");
  return { tag: input.tag, ok: got.ok };
}
`

// pgFaultAgent has a tool that writes a row after a moment, so that a
// chat turn is in flight, inside its tool's sql, while the database fails.
const pgFaultAgent = `import { defineAgent, tool, sql } from "svc";
export default defineAgent({
  instructions: "You keep notes.",
  maxTurns: 3,
  tools: {
    note: tool({
      description: "Write a note after a moment",
      parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      execute: async ({ text }) => {
        await new Promise((resolve) => setTimeout(resolve, 1500));
        const [row] = await sql` + "`insert into greetings (name, greeting) values ('note', ${text}) returning id`" + `;
        return { id: row.id };
      },
    }),
  },
});
`

// pgFaultClient drives a runtime under faults: it starts runs and chat
// turns and remembers what the runtime acknowledged.
type pgFaultClient struct {
	t    *testing.T
	base string
	key  string            // the chat wires' credential
	runs map[string]string // acknowledged run id → "outage" or "greet"
	said []string          // chat messages answered 200
}

// newPgFaultClient is a client of the svc dev serving dir at base, with
// its dev key.
func newPgFaultClient(t *testing.T, dir, base string) *pgFaultClient {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return &pgFaultClient{t: t, base: base, key: strings.TrimSpace(string(key)), runs: map[string]string{}}
}

// post sends body to path and returns the status and the decoded answer.
func (c *pgFaultClient) post(path, body string, header map[string]string) (int, map[string]any) {
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// start starts a run of workflow and remembers it when acknowledged.
func (c *pgFaultClient) start(workflow, input string) {
	st, out := c.post("/api/workflows/"+workflow+"/start", input, nil)
	if st == http.StatusAccepted {
		c.runs[out["runId"].(string)] = workflow
	}
}

// chat sends one turn of session s1 and remembers the message when answered.
func (c *pgFaultClient) chat(say string) int {
	st, _ := c.post("/openai/v1/chat/completions", wiresOpenAIBody("helper", say, false), map[string]string{"x-svc-session": "s1", "Authorization": "Bearer " + c.key})
	if st == http.StatusOK {
		c.said = append(c.said, say)
	}
	return st
}

// health returns GET /api/health's status and body.
func (c *pgFaultClient) health() (int, string) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(c.base + "/api/health")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// resumeHooks resumes every hook the acknowledged runs wait on, until
// every outage run has been resumed once (bounded).
func (c *pgFaultClient) resumeHooks(resumed map[string]bool) {
	c.t.Helper()
	eventually(c.t, 120*time.Second, "every outage run to wait on its hook", func() bool {
		all := true
		for id, wf := range c.runs {
			if wf != "outage" || resumed[id] {
				continue
			}
			var got struct{ Run runRecord }
			if httpJSON(c.t, "GET", c.base+"/api/runs/"+id, nil, &got) != http.StatusOK {
				all = false
				continue
			}
			r := got.Run
			if terminal(r.Status) { // the check at the end says why
				resumed[id] = true
				continue
			}
			token := ""
			for _, s := range r.Steps {
				if s.Kind == "hook" && s.Token != "" {
					token = s.Token
				}
			}
			if token == "" {
				all = false
				continue
			}
			if st, _ := c.post("/api/hooks/"+token, `{"ok":true}`, nil); st == http.StatusAccepted {
				resumed[id] = true
			} else {
				all = false
			}
		}
		return all
	})
}

// waitHealthy waits until GET /api/health answers 200.
func (c *pgFaultClient) waitHealthy(what string) {
	c.t.Helper()
	eventually(c.t, 120*time.Second, what, func() bool {
		st, _ := c.health()
		return st == http.StatusOK
	})
}

// pgTestPostmasterPid is the pid in dataDir's postmaster.pid.
func pgTestPostmasterPid(t *testing.T, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

// pgTestRestartUnderneath runs `pg_ctl restart` on the cluster in dataDir
// as its owner (the postgres OS user when the tests run as root), as an
// operator would.
func pgTestRestartUnderneath(t *testing.T, dataDir string) {
	t.Helper()
	bins, ok := pgFindServerBinaries(exec.LookPath, pgServerBinGlob)
	if !ok {
		t.Fatal("no pg_ctl")
	}
	runAs, _, err := pgServerUser()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pgClusterBinaries(bins, pgServerBinGlob, dataDir).pgCtl, "restart", "-w", "-m", "fast", "-D", dataDir, "-l", os.DevNull)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs, Setsid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl restart: %v\n%s", err, out)
	}
}

// TestDevRestartsItsPostgres injects real faults into the PostgreSQL that
// svc dev started, with runs (greet and a workflow with sql, a sleep and a
// hook) and chat turns going on: the postmaster killed (SIGKILL), paused
// (SIGSTOP, SIGCONT) and restarted underneath (pg_ctl restart). svc dev
// says the death once, restarts the server, health goes 503 then 200, every
// acknowledged run completes with its rows written, and every answered
// chat turn is in the session. Before, svc dev served without its database
// until restarted: health never came back, and the greet runs started
// during the outage failed once their attempts were spent.
func TestDevRestartsItsPostgres(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	dir := projectDir(t)
	writeFile(t, dir, "deep-agents/helper/index.ts", agentTestSource)
	writeFile(t, dir, "workflows/outage.workflow.ts", pgFaultWorkflow)
	writeFile(t, dir, "deep-agents/keeper/index.ts", pgFaultAgent)
	fake := newFakeProvider(t)
	d := startDevProcess(t, dir, freePortBase(t), baseEnv("OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake"))
	d.payload = d.nextPayload(120 * time.Second)
	runAs, _, err := pgServerUser()
	if err != nil {
		t.Fatal(err)
	}
	dataDir, err := pgLocalDataDir(dir, runAs)
	if err != nil {
		t.Fatal(err)
	}
	c := newPgFaultClient(t, dir, d.payload.EmulatorURL)
	if st := c.chat("hello before"); st != http.StatusOK {
		t.Fatalf("chat turn with the database up = %d", st)
	}
	for i := range 3 {
		c.start("outage", fmt.Sprintf(`{"tag":"kill-%d"}`, i))
		c.start("greet", fmt.Sprintf(`{"name":"before-kill-%d"}`, i))
	}

	// Fault 1: the postmaster and its processes are killed, with a chat
	// turn in flight (its tool waits, then writes).
	asked := len(fake.requests())
	inflight := make(chan int, 1)
	go func() {
		st, _ := c.post("/openai/v1/chat/completions", wiresOpenAIBody("keeper", `call note {"text":"in flight"}`, false),
			map[string]string{"x-svc-session": "s2", "Authorization": "Bearer " + c.key})
		inflight <- st
	}()
	eventually(t, 30*time.Second, "the in-flight turn to reach the model", func() bool { return len(fake.requests()) > asked })
	pgTestKillServer(t, dataDir)
	if st, body := c.health(); st != http.StatusServiceUnavailable && !strings.Contains(d.stderr.String(), "PostgreSQL restarted") {
		t.Errorf("health with the postmaster killed = %d %s; want 503 (until it is restarted)", st, body)
	}
	for i := range 2 {
		c.start("greet", fmt.Sprintf(`{"name":"during-kill-%d"}`, i))
		c.start("outage", fmt.Sprintf(`{"tag":"during-kill-%d"}`, i))
	}
	c.chat("hello while killed") // 503 database_unavailable, or answered once it is back
	c.waitHealthy("health to answer 200 once svc dev restarted its PostgreSQL")
	eventually(t, 30*time.Second, "the restart in the log", func() bool { return strings.Contains(d.stderr.String(), "PostgreSQL restarted") })
	if n := strings.Count(d.stderr.String(), "PostgreSQL stopped"); n != 1 {
		t.Errorf("the log says the death %d times; want once:\n%s", n, d.stderr.String())
	}
	if st := c.chat("hello after the kill"); st != http.StatusOK {
		t.Errorf("chat turn after the restart = %d", st)
	}
	if st := <-inflight; st != http.StatusOK {
		t.Errorf("the chat turn in flight during the kill = %d; want 200 once the database is back", st)
	}
	if n := pgTestQuery(t, d.payload.Services.PostgresURL, "SELECT count(*)::text FROM greetings WHERE name = 'note' AND greeting = 'in flight'"); n != "1" {
		t.Errorf("the in-flight turn's tool wrote %s rows; want 1", n)
	}
	resumed := map[string]bool{}
	c.resumeHooks(resumed)

	// Fault 2: the server's processes are paused, then continued; nothing
	// restarts them.
	pid := pgTestPostmasterPid(t, dataDir)
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil { // its process group: pg_ctl starts it in a session of its own
		t.Fatal(err)
	}
	for i := range 2 {
		c.start("greet", fmt.Sprintf(`{"name":"during-pause-%d"}`, i))
		c.start("outage", fmt.Sprintf(`{"tag":"during-pause-%d"}`, i))
	}
	time.Sleep(3 * pgWatchInterval) // the supervisor looks at a paused server a few times
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.waitHealthy("health to answer 200 after SIGCONT")
	if got := pgTestPostmasterPid(t, dataDir); got != pid {
		t.Errorf("the paused server was replaced (pid %d, then %d); want it kept", pid, got)
	}

	// Fault 3: an operator restarts the server underneath.
	logged := len(d.stderr.String())
	for i := range 2 {
		c.start("greet", fmt.Sprintf(`{"name":"before-restart-%d"}`, i))
	}
	pgTestRestartUnderneath(t, dataDir)
	for i := range 2 {
		c.start("greet", fmt.Sprintf(`{"name":"after-restart-%d"}`, i))
		c.start("outage", fmt.Sprintf(`{"tag":"after-restart-%d"}`, i))
	}
	c.waitHealthy("health to answer 200 after pg_ctl restart")
	if st := c.chat("hello after the restart"); st != http.StatusOK {
		t.Errorf("chat turn after pg_ctl restart = %d", st)
	}
	c.resumeHooks(resumed)

	// Every acknowledged run ends as it would have, its rows written.
	if len(c.runs) < 20 {
		t.Errorf("only %d starts were acknowledged: %v", len(c.runs), c.runs)
	}
	for id, wf := range c.runs {
		var got struct{ Run runRecord }
		st := httpJSON(t, "GET", c.base+"/api/runs/"+id+"?wait=60s", nil, &got)
		if r := got.Run; st != http.StatusOK || r.Status != runCompleted {
			t.Errorf("%s run %s = %d %s %+v (input %s); want completed", wf, id, st, r.Status, r.Error, r.Input)
			continue
		}
		if wf == "outage" {
			var in struct{ Tag string }
			json.Unmarshal(got.Run.Input, &in)
			for _, phase := range []string{"before", "after"} {
				if n := pgTestQuery(t, d.payload.Services.PostgresURL,
					fmt.Sprintf("SELECT count(*)::text FROM greetings WHERE name = '%s' AND greeting = '%s'", in.Tag, phase)); n == "0" {
					t.Errorf("run %s (%s): no %q row", id, in.Tag, phase)
				}
			}
		}
	}
	var session map[string]any
	if st := httpJSONAuth(t, "GET", c.base+"/api/agents/helper/sessions/s1", c.key, nil, &session); st != http.StatusOK {
		t.Fatalf("session s1 = %d", st)
	}
	transcript, _ := json.Marshal(session)
	for _, say := range c.said {
		if !strings.Contains(string(transcript), say) {
			t.Errorf("answered turn %q is not in the session: %s", say, transcript)
		}
	}
	// The new server is noticed: adopted, or (seen missing) restarted.
	eventually(t, 30*time.Second, "the restart underneath in the log", func() bool {
		since := d.stderr.String()[logged:]
		return strings.Contains(since, "PostgreSQL was restarted by something else") || strings.Contains(since, "PostgreSQL restarted")
	})
}

// pgFaultLaterWorkflow reaches its sql step after a sleep, so that runs
// started before a fault run their statement during it.
const pgFaultLaterWorkflow = `import { sleep, sql } from "svc";
async function read(tag: string) {
  "use step";
  const [row] = await sql` + "`select ${tag}::text as tag`" + `;
  return row.tag;
}
export default async function later(input: { tag: string }) {
  "use workflow";
  await sleep("2s");
  return { tag: await read(input.tag) };
}
`

// pgTestPrivateCluster starts a local cluster of the test's own (not the
// shared test server, which other tests use), stopped and removed when the
// test ends.
func pgTestPrivateCluster(t *testing.T) *pgService {
	t.Helper()
	port, err := pgTestFreePort()
	if err != nil {
		t.Fatal(err)
	}
	pgDir := t.TempDir()
	t.Cleanup(func() { pgTestRemoveRootCluster(pgDir) })
	pg, err := startPostgres(t.Context(), pgOptions{ProjectDir: pgDir, Port: port, Getenv: func(string) string { return "" }, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop(context.Background()) })
	return pg
}

// TestBoxSurvivesDatabaseRestart runs a box (svc serve) on an external
// DATABASE_URL, a cluster the test starts and then restarts underneath
// (pg_ctl restart) and kills and starts again, with runs whose sql step
// falls in the outage: health answers 503 while the database is down and
// 200 once it is back, and every acknowledged run completes. Before, a
// run whose step met the outage failed once its three attempts (within a
// second) were spent.
func TestBoxSurvivesDatabaseRestart(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	pg := pgTestPrivateCluster(t)
	dir, data := projectDir(t), t.TempDir()
	writeFile(t, dir, "workflows/later.workflow.ts", pgFaultLaterWorkflow)
	secret := []byte("box-restart-secret-0123456789abc")
	box := startBox(t, dir, data, baseEnv("DATABASE_URL="+pg.URL, "HMAC_SECRET="+string(secret), "OPENAI_API_KEY=sk-test", "SVC_CONTROL_PLANE_URL=http://127.0.0.1:1"))
	signed := func(method, path, body string) boxReply {
		return boxDo(t, method, box.url+path, []byte(body), secret, time.Now(), "", nil)
	}
	health := func() int { return signed("GET", "/api/health", "").status }
	if st := health(); st != http.StatusOK {
		t.Fatalf("health = %d; want 200", st)
	}
	// The probes a load balancer sends, with no credential (issue 38, item D).
	probe := func(path string) (int, string) {
		rep := boxDo(t, "GET", box.url+path, nil, nil, time.Time{}, "", nil)
		return rep.status, string(rep.body)
	}
	if st, body := probe(healthReadyPath); st != http.StatusOK || strings.TrimSpace(body) != `{"ready":true}` {
		t.Errorf("GET %s without a credential = %d %s; want 200 {\"ready\":true} and nothing else", healthReadyPath, st, body)
	}
	acked := map[string]bool{}
	start := func(tag string) {
		rep := signed("POST", "/api/workflows/later/start", `{"tag":"`+tag+`"}`)
		var rc struct{ RunID string }
		if rep.status == http.StatusAccepted && json.Unmarshal(rep.body, &rc) == nil {
			acked[rc.RunID] = true
		}
	}
	waitHealthy := func(what string) {
		eventually(t, 60*time.Second, what, func() bool { return health() == http.StatusOK })
	}

	// Fault 1: an operator restarts the database underneath.
	for i := range 3 {
		start(fmt.Sprintf("restart-%d", i))
	}
	pgTestRestartUnderneath(t, pg.DataDir)
	waitHealthy("health 200 after pg_ctl restart")
	for i := range 3 {
		start(fmt.Sprintf("after-restart-%d", i))
	}

	// Fault 2: the database dies and stays down past the runs' sleep; the
	// operator brings it back.
	pgTestKillServer(t, pg.DataDir)
	if st := health(); st != http.StatusServiceUnavailable {
		t.Errorf("health with the database killed = %d; want 503", st)
	}
	if st, body := probe(healthReadyPath); st != http.StatusServiceUnavailable || strings.TrimSpace(body) != `{"ready":false}` {
		t.Errorf("GET %s with the database killed = %d %s; want 503 {\"ready\":false}", healthReadyPath, st, body)
	}
	if st, body := probe(healthLivePath); st != http.StatusOK || strings.TrimSpace(body) != `{"live":true}` {
		t.Errorf("GET %s with the database killed = %d %s; want 200: the process serves", healthLivePath, st, body)
	}
	// A signed request meanwhile (what the control plane sends) is told the
	// database is unavailable, and nothing of it (issue 36, item 14).
	if rep := signed("POST", "/api/workflows/later/start", `{"tag":"down"}`); rep.status != http.StatusServiceUnavailable ||
		!strings.Contains(string(rep.body), `"`+boxCodeDatabaseDown+`"`) || rep.header.Get("Retry-After") == "" ||
		strings.Contains(string(rep.body), "127.0.0.1") || strings.Contains(string(rep.body), "database=") || strings.Contains(string(rep.body), "user=") {
		t.Errorf("a signed start with the database down = %d %s %v; want 503 %s with Retry-After, naming nothing", rep.status, rep.body, rep.header, boxCodeDatabaseDown)
	}
	time.Sleep(4 * time.Second) // the runs' sql steps fall in the outage
	if st := health(); st != http.StatusServiceUnavailable {
		t.Errorf("health with the database still down = %d; want 503", st)
	}
	if err := pg.watched.restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitHealthy("health 200 once the database is back")

	if len(acked) != 6 {
		t.Errorf("acknowledged starts = %d; want 6 (the database was up for each)", len(acked))
	}
	for id := range acked {
		rep := signed("GET", "/api/runs/"+id+"?wait=60s", "")
		var got struct{ Run runRecord }
		if json.Unmarshal(rep.body, &got); rep.status != http.StatusOK || got.Run.Status != runCompleted {
			t.Errorf("run %s = %d %s %+v; want completed", id, rep.status, got.Run.Status, got.Run.Error)
		}
	}
}

// TestPgSuperviseBacksOff kills a cluster svc started whose next start
// fails (a bad setting in postgresql.auto.conf) until the setting is
// fixed: the supervisor says the death once and the first failure once,
// retries with backoff, and restarts the server once it can. Before, a
// dead server stayed dead.
func TestPgSuperviseBacksOff(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	pg := pgTestPrivateCluster(t)
	logs := &syncBuffer{}
	stop := pg.supervise(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { stop(context.Background()) })

	auto := filepath.Join(pg.DataDir, "postgresql.auto.conf")
	good, err := os.ReadFile(auto)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(auto, append(append([]byte(nil), good...), "max_connections = 'many'\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	pgTestKillServer(t, pg.DataDir)
	eventually(t, 60*time.Second, "a failed restart in the log", func() bool { return strings.Contains(logs.String(), "restart PostgreSQL failed") })
	if err := os.WriteFile(auto, good, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second, "the restart in the log", func() bool { return strings.Contains(logs.String(), "PostgreSQL restarted") })
	if err := pgPing(t.Context(), pg.URL); err != nil {
		t.Errorf("the restarted server does not answer: %v", err)
	}
	out := logs.String()
	restarted := regexp.MustCompile(`msg="PostgreSQL restarted" pid=\d+ attempt=(\d+)`).FindStringSubmatch(out)
	if strings.Count(out, "PostgreSQL stopped") != 1 || strings.Count(out, "restart PostgreSQL failed") != 1 || restarted == nil || restarted[1] == "1" {
		t.Errorf("want the death and the first failure once each, then a restart after it:\n%s", out)
	}
}
