package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStartWait starts runs synchronously against a real svc dev: over HTTP
// (?wait= answers the ended run as GET /api/runs/{id} shows it, a run still
// active or a queued start the 202 receipt, a bad wait 400 before anything
// starts) and through `svc workflows start --wait` (the output printed, exit
// 1 on a failed run, the envelope with --json).
func TestStartWait(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	dir := projectDir(t)
	writeFile(t, dir, "workflows/slow.workflow.ts", `import { sleep } from "svc";
export const serial = true;
export default async function slow() { "use workflow"; await sleep("1h"); return 1; }`)
	writeFile(t, dir, "workflows/boom.workflow.ts", `async function explode() { "use step"; throw new Error("boom"); }
export default async function boom() { "use workflow"; return await explode(); }`)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk"))
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(d.url(path), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("POST %s: %d %q", path, resp.StatusCode, b)
		}
		return resp.StatusCode, out
	}
	code, got := post("/api/workflows/greet/start?wait=30s", `{"name":"Ada"}`)
	run, _ := got["run"].(map[string]any)
	if code != http.StatusOK || run["status"] != runCompleted || !strings.Contains(fmt.Sprint(run["output"]), "Hello, Ada!") || run["steps"] == nil {
		t.Fatalf("start?wait of greet = %d %v; want 200 with the completed run and its output", code, got)
	}
	code, got = post("/api/workflows/boom/start?wait=30s", `{}`)
	if run, _ := got["run"].(map[string]any); code != http.StatusOK || run["status"] != runFailed || !strings.Contains(fmt.Sprint(run["error"]), "boom") {
		t.Errorf("start?wait of boom = %d %v; want 200 with the failed run and its error", code, got)
	}
	code, got = post("/api/workflows/slow/start?wait=200ms", `{}`)
	if code != http.StatusAccepted || got["status"] != "started" || got["runId"] == nil {
		t.Errorf("start?wait of a run that outlives the wait = %d %v; want the 202 receipt", code, got)
	}
	code, got = post("/api/workflows/slow/start?wait=30s", `{}`)
	if code != http.StatusAccepted || got["status"] != "queued" || got["queueId"] == nil {
		t.Errorf("start?wait of a queued start = %d %v; want the 202 queued receipt at once", code, got)
	}
	code, got = post("/api/workflows/greet/start?wait=soon", `{"name":"Bad"}`)
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(got["error"]), "invalid_wait") {
		t.Errorf("start?wait=soon = %d %v; want 400 invalid_wait", code, got)
	}
	if list, _ := http.Get(d.url("/api/runs?workflow=greet")); list != nil {
		b, _ := io.ReadAll(list.Body)
		list.Body.Close()
		if strings.Contains(string(b), "Bad") {
			t.Errorf("a start with a bad wait ran: %s", b)
		}
	}

	env := baseEnv()
	out, stderr, exit := cli(t, dir, env, "workflows", "start", "greet", "--input", `{"name":"Cli"}`, "--wait")
	if exit != 0 || !strings.Contains(out, "Hello, Cli!") || strings.Contains(out, "runId") {
		t.Errorf("workflows start --wait = %d %q %q; want the output", exit, out, stderr)
	}
	out, stderr, exit = cli(t, dir, env, "--json", "workflows", "start", "boom", "--wait=30s")
	var env1 struct {
		OK   bool `json:"ok"`
		Data struct {
			Run runRecord `json:"run"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &env1); err != nil || exit != 1 || env1.Data.Run.Status != runFailed {
		t.Errorf("--json workflows start boom --wait = %d %q %q; want exit 1 and the failed run's envelope", exit, out, stderr)
	}
	out, _, exit = cli(t, dir, env, "workflows", "start", "boom", "--wait")
	if exit != 1 || !strings.Contains(out, "failed") || !strings.Contains(out, "boom") {
		t.Errorf("workflows start boom --wait = %d %q; want exit 1 naming the error", exit, out)
	}
	out, _, exit = cli(t, dir, env, "workflows", "start", "slow", "--wait=300ms")
	if exit != 0 || !strings.Contains(out, "queued") {
		t.Errorf("workflows start slow --wait = %d %q; want the queued sentence, exit 0", exit, out)
	}
	if _, stderr, exit = cli(t, dir, env, "workflows", "start", "greet", "--wait=soon"); exit == 0 || !strings.Contains(stderr, "30s") {
		t.Errorf("--wait=soon = %d %q; want a refusal naming the form", exit, stderr)
	}
	// One rule for --wait on start and on runs get (issue 38, item B): a
	// duration after it is its value, --wait alone is 30s.
	var rc struct {
		Data struct {
			Run runRecord `json:"run"`
		} `json:"data"`
	}
	out, stderr, exit = cli(t, dir, env, "--json", "workflows", "start", "greet", "--wait", "30s", "--input", `{"name":"Spaced"}`)
	if json.Unmarshal([]byte(out), &rc); exit != 0 || rc.Data.Run.Status != runCompleted {
		t.Fatalf("workflows start greet --wait 30s = %d %q %q; want the completed run", exit, out, stderr)
	}
	for _, args := range [][]string{{"runs", "get", rc.Data.Run.RunID, "--wait", "30s"}, {"runs", "get", rc.Data.Run.RunID, "--wait"}, {"runs", "get", "--wait", "5s", rc.Data.Run.RunID}} {
		if out, stderr, exit := cli(t, dir, env, args...); exit != 0 || !strings.Contains(out, "completed") {
			t.Errorf("svc %s = %d %q %q; want the completed run", strings.Join(args, " "), exit, out, stderr)
		}
	}
}

// TestStartIdempotencyKeyCLI: `svc workflows start --idempotency-key`
// against a real svc dev answers the first receipt when resent, also after
// the runtime was killed (SIGKILL) and started again; the key with another
// input fails idempotency_key_reused; a malformed key fails before
// anything is sent.
func TestStartIdempotencyKeyCLI(t *testing.T) {
	dir := projectDir(t)
	writeFile(t, dir, "workflows/slow.workflow.ts", `import { sleep } from "svc";
export default async function slow(input: { n?: number }) { "use workflow"; await sleep("1h"); return input.n ?? 0; }`)
	devEnv := baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk")
	d := startDev(t, dir, devEnv)
	env := baseEnv()
	start := func(args ...string) (map[string]any, int) {
		t.Helper()
		out, stderr, code := cli(t, dir, env, append([]string{"--json", "workflows", "start", "slow"}, args...)...)
		var e struct {
			OK    bool           `json:"ok"`
			Data  map[string]any `json:"data"`
			Error *envelopeError `json:"error"`
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatalf("svc workflows start %v: not an envelope: %q %q", args, out, stderr)
		}
		if !e.OK {
			return map[string]any{"code": e.Error.Code, "message": e.Error.Message}, code
		}
		return e.Data, code
	}
	first, code := start("--idempotency-key", "deploy-42", "--input", `{"n":1}`)
	if code != 0 || first["runId"] == nil || first["existing"] != nil {
		t.Fatalf("first start = %d %v; want a run, not marked existing", code, first)
	}
	if again, code := start("--idempotency-key", "deploy-42", "--input", `{ "n": 1 }`); code != 0 || again["runId"] != first["runId"] || again["existing"] != true {
		t.Errorf("resent start = %d %v; want runId %v and existing: true", code, again, first["runId"])
	}
	if out, _, code := cli(t, dir, env, "workflows", "start", "slow", "--idempotency-key", "deploy-42", "--input", `{"n":1}`); code != 0 || !strings.HasPrefix(out, "Already started") {
		t.Errorf("resent start, for a person = %d %q; want it said that nothing new started", code, out)
	}
	d.kill()
	d2 := startDev(t, dir, devEnv)
	eventually(t, 10*time.Second, "the boot after the kill saying what it resumed", func() bool {
		return strings.Contains(d2.stderr.String(), "resumed 1 active run from the journal")
	})
	if strings.Contains(d2.stderr.String(), "first boot") {
		t.Errorf("the boot after a kill calls itself a first boot:\n%s", d2.stderr.String())
	}
	if again, code := start("--idempotency-key", "deploy-42", "--input", `{"n":1}`); code != 0 || again["runId"] != first["runId"] {
		t.Errorf("resent start after a SIGKILL and restart = %d %v; want runId %v", code, again, first["runId"])
	}
	if got, code := start("--idempotency-key", "deploy-42", "--input", `{"n":2}`); code != 1 || got["code"] != "idempotency_key_reused" {
		t.Errorf("another input = %d %v; want exit 1 idempotency_key_reused", code, got)
	}
	if got, code := start("--idempotency-key", "two words"); code != 1 || got["code"] != "invalid_idempotency_key" {
		t.Errorf("a key with a space = %d %v; want exit 1 invalid_idempotency_key", code, got)
	}
	out, _, _ := cli(t, dir, env, "--json", "runs", "list", "--workflow", "slow")
	if n := strings.Count(out, `"runId"`); n != 1 {
		t.Errorf("runs of slow = %d; want 1: %s", n, out)
	}
}
