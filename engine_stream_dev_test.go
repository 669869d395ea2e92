package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct{ ID, Event, Data string }

// openSSE reads the event stream at url (from lastID when set) on a
// goroutine; the channel closes when the stream ends or drops.
func openSSE(t *testing.T, url, lastID string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.Data != "":
				out <- ev
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[6:]
			}
		}
	}()
	return out
}

// nextEvents reads n events (bounded by 60 s) and renders each as
// "id event seq.attempt content [superseded]".
func nextEvents(t *testing.T, ch <-chan sseEvent, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended after %v; want %d events", got, n)
			}
			got = append(got, renderEvent(t, ev))
		case <-time.After(60 * time.Second):
			t.Fatalf("no event after %v; want %d", got, n)
		}
	}
	return got
}

// renderEvent renders an event compactly.
func renderEvent(t *testing.T, ev sseEvent) string {
	t.Helper()
	if ev.Event == "end" {
		var end struct{ Status string }
		json.Unmarshal([]byte(ev.Data), &end)
		return "end " + end.Status
	}
	var en streamEvent
	if err := json.Unmarshal([]byte(ev.Data), &en); err != nil {
		t.Fatalf("event data %q: %v", ev.Data, err)
	}
	content := string(en.JSON)
	if en.Text != nil {
		content = *en.Text
	}
	s := fmt.Sprintf("%s %s %d.%d %s", ev.ID, ev.Event, en.Seq, en.Attempt, content)
	if en.Superseded {
		s += " superseded"
	}
	return strings.TrimSpace(s)
}

// expectEvents fails unless got is want.
func expectEvents(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// mcpStreamResult is read_run_stream's structured result.
type mcpStreamResult struct {
	Entries []streamEvent
	Next    int
	Ended   bool
	Status  string
}

// mcpStreamPage decodes a tools/call answer of read_run_stream.
func mcpStreamPage(t *testing.T, body string) mcpStreamResult {
	t.Helper()
	var rpc struct {
		Result struct {
			IsError           bool
			StructuredContent mcpStreamResult
		}
	}
	if err := json.Unmarshal([]byte(body), &rpc); err != nil || rpc.Result.IsError {
		t.Fatalf("read_run_stream = %s", body)
	}
	return rpc.Result.StructuredContent
}

// expectEnd fails unless the stream closes with no further event.
func expectEnd(t *testing.T, ch <-chan sseEvent) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("an event after the end: %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream stayed open after its end event")
	}
}

// streamDevWorkflows: talker streams around a hook wait (readers are live
// while it waits); crashy streams, then waits on the test's server, which
// holds the first call until svc dev is killed.
var streamDevWorkflows = map[string]string{
	"workflows/talker.workflow.ts": `
import { getWritable, createHook } from "svc";
async function say(words: string[]) { "use step"; const w = getWritable().getWriter(); for (const x of words) await w.write(x); w.releaseLock(); return words.length; }
async function emit(v: any) { "use step"; const w = getWritable().getWriter(); await w.write(v); w.releaseLock(); }
export default async function talker() {
  "use workflow";
  await say(["one ", "two "]);
  const hook = createHook();
  await emit({ hook: hook.token });
  await hook;
  await say(["three\n"]);
  return "ok";
}`,
	"workflows/crashy.workflow.ts": `
import { getWritable } from "svc";
async function work() {
  "use step";
  const w = getWritable().getWriter();
  await w.write("a");
  await w.write({ b: 2 });
  const r = await fetch(process.env.HOLD + "/hold");
  await w.write("c " + (await r.text()));
  w.releaseLock();
  return 1;
}
export default async function crashy() { "use workflow"; return await work(); }`,
}

// TestRunStreamDev reads run streams from a real svc dev: live over SSE
// while the run waits and goes on, again from Last-Event-ID, through
// `svc runs stream` (text and --json), and across a SIGKILL of svc dev in
// the middle of a step that streams: after the restart the reader (the CLI,
// reconnecting by itself) gets every chunk once, the interrupted attempt's
// marked superseded and the retry's after them.
func TestRunStreamDev(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	eachEngineStore(t, testRunStreamDev)
}

// testRunStreamDev is TestRunStreamDev on one engine store. On PostgreSQL
// the restarted svc dev takes over once the killed one's lease expired.
func testRunStreamDev(t *testing.T, store string) {
	dir := projectDir(t)
	for f, src := range streamDevWorkflows {
		writeFile(t, dir, f, src)
	}
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var calls atomic.Int32
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			held <- struct{}{}
			select { // the first call outlives the svc dev that made it
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(func() { close(release); hold.Close() })
	writeFile(t, dir, ".env", "HOLD="+hold.URL+"\n")
	env := baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk", "SVC_ENGINE="+store,
		"SVC_ENGINE_LEASE=1s", "SVC_ENGINE_LEASE_RENEW=250ms")
	port := freePortBase(t)
	d := startDevProcess(t, dir, port, env)
	d.payload = d.nextPayload(60 * time.Second)
	start := func(wf string) string {
		t.Helper()
		var rc startReceipt
		if code := httpJSON(t, "POST", d.url("/api/workflows/"+wf+"/start"), map[string]any{}, &rc); code != http.StatusAccepted || rc.RunID == "" {
			t.Fatalf("start %s = %d %+v", wf, code, rc)
		}
		return rc.RunID
	}

	// Live: the reader gets the chunks as they are written, waits with the
	// run, and the stream ends with the run.
	id := start("talker")
	live := openSSE(t, d.url("/api/runs/"+id+"/stream"), "")
	got := nextEvents(t, live, 3)
	var tok struct{ Hook string }
	json.Unmarshal([]byte(strings.Fields(got[2])[3]), &tok)
	expectEvents(t, "live before the hook", got, []string{"1 chunk 1.1 one", "2 chunk 1.1 two", fmt.Sprintf(`3 chunk 3.1 {"hook":"%s"}`, tok.Hook)})
	// Over MCP: read_run_stream waits for the next entry.
	mcpNext := make(chan string, 1)
	go func() {
		mcpNext <- mcpCallTool(t, d.url("/mcp"), "read_run_stream", `{"runId":"`+id+`","after":3,"waitSeconds":20}`)
	}()
	if code := httpJSON(t, "POST", d.url("/api/hooks/"+tok.Hook), map[string]any{}, nil); code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("resume the hook = %d", code)
	}
	expectEvents(t, "live after the hook", nextEvents(t, live, 2), []string{"4 chunk 4.1 three", "end completed"})
	if page := mcpStreamPage(t, <-mcpNext); len(page.Entries) != 1 || page.Entries[0].Index != 4 || page.Entries[0].Text == nil || *page.Entries[0].Text != "three\n" || page.Next != 4 {
		t.Errorf("MCP read_run_stream after 3, waiting = %+v; want entry 4, three", page)
	}
	expectEnd(t, live)
	// Resumed: from Last-Event-ID, once the run has ended.
	again := openSSE(t, d.url("/api/runs/"+id+"/stream"), "2")
	expectEvents(t, "from Last-Event-ID 2", nextEvents(t, again, 3), []string{fmt.Sprintf(`3 chunk 3.1 {"hook":"%s"}`, tok.Hook), "4 chunk 4.1 three", "end completed"})
	expectEnd(t, again)
	resp, err := http.Get(d.url("/api/runs/" + id + "/stream?after=x"))
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad resume point = %v %v; want 400", resp.StatusCode, err)
	}

	// The CLI prints the stream: text as is, JSON on its own line.
	out, stderr, code := cli(t, dir, baseEnv(), "runs", "stream", id)
	if want := fmt.Sprintf("one two \n{\"hook\":\"%s\"}\nthree\n", tok.Hook); code != 0 || out != want || !strings.Contains(stderr, "completed") {
		t.Errorf("svc runs stream = %d %q %q; want %q", code, out, stderr, want)
	}
	out, _, code = cli(t, dir, baseEnv(), "--json", "runs", "stream", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		OK   bool
		Data map[string]any
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if code != 0 || len(lines) != 5 || !strings.Contains(lines[0], `"event":"chunk"`) || !strings.Contains(lines[0], `"index":1`) || !last.OK || last.Data["status"] != runCompleted {
		t.Errorf("svc --json runs stream = %d %q; want 4 chunk envelopes and the end", code, out)
	}
	if _, stderr, code := cli(t, dir, baseEnv(), "runs", "stream", "no-such-run"); code != 4 || !strings.Contains(stderr, "not found") {
		t.Errorf("svc runs stream of an unknown run = %d %q; want exit 4, not found", code, stderr)
	}

	// SIGKILL in the middle of a streaming step, with the CLI reading.
	id = start("crashy")
	reader := exec.Command(svcBinary(t), "runs", "stream", id)
	reader.Dir, reader.Env = dir, baseEnv()
	var rout, rerr syncBuffer
	reader.Stdout, reader.Stderr = &rout, &rerr
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan error, 1)
	go func() { readerDone <- reader.Wait() }()
	t.Cleanup(func() { reader.Process.Kill() })
	first := openSSE(t, d.url("/api/runs/"+id+"/stream"), "")
	expectEvents(t, "before the kill", nextEvents(t, first, 2), []string{"1 chunk 1.1 a", `2 chunk 1.1 {"b":2}`})
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the step never called the held server")
	}
	eventually(t, 30*time.Second, "the CLI prints the chunks before the kill", func() bool { return rout.String() == "a\n{\"b\":2}\n" })
	d.kill()
	d = startDevProcess(t, dir, port, env)
	d.payload = d.nextPayload(60 * time.Second)
	eventually(t, 30*time.Second, "the engine to take its state over", func() bool {
		var h struct{ Journal journalHealth }
		httpJSON(t, "GET", d.url("/api/health"), nil, &h)
		return h.Journal.State == "ok"
	})
	resumed := openSSE(t, d.url("/api/runs/"+id+"/stream"), "2")
	expectEvents(t, "after the restart, from Last-Event-ID 2", nextEvents(t, resumed, 5), []string{
		"3 superseded 1.1", "4 chunk 1.2 a", `5 chunk 1.2 {"b":2}`, "6 chunk 1.2 c ok", "end completed"})
	whole := openSSE(t, d.url("/api/runs/"+id+"/stream"), "")
	expectEvents(t, "the whole stream", nextEvents(t, whole, 7), []string{
		"1 chunk 1.1 a superseded", `2 chunk 1.1 {"b":2} superseded`, "3 superseded 1.1",
		"4 chunk 1.2 a", `5 chunk 1.2 {"b":2}`, "6 chunk 1.2 c ok", "end completed"})
	// Over MCP, a page at a time: the interrupted attempt's chunks marked.
	first2 := mcpStreamPage(t, mcpCallTool(t, d.url("/mcp"), "read_run_stream", `{"runId":"`+id+`","limit":2}`))
	rest := mcpStreamPage(t, mcpCallTool(t, d.url("/mcp"), "read_run_stream", fmt.Sprintf(`{"runId":"%s","after":%d}`, id, first2.Next)))
	if len(first2.Entries) != 2 || !first2.Entries[0].Superseded || !first2.Entries[1].Superseded || first2.Ended || first2.Next != 2 ||
		len(rest.Entries) != 4 || rest.Entries[0].Kind != streamSuperseded || rest.Entries[1].Superseded || !rest.Ended || rest.Next != 6 || rest.Status != runCompleted {
		t.Errorf("MCP read_run_stream of the crashed run = %+v then %+v; want 2 superseded chunks, then the marker, 3 chunks and the end", first2, rest)
	}
	if got := mcpCallTool(t, d.url("/mcp"), "read_run_stream", `{"runId":"no-such-run"}`); !strings.Contains(got, "run_not_found") || !strings.Contains(got, `"isError":true`) {
		t.Errorf("MCP read_run_stream of an unknown run = %s; want a run_not_found tool error", got)
	}
	select {
	case err := <-readerDone:
		if want := "a\n{\"b\":2}\na\n{\"b\":2}\nc ok\n"; err != nil || rout.String() != want || !strings.Contains(rerr.String(), "superseded") {
			t.Errorf("svc runs stream across the kill = %v %q %q; want %q and a note of the superseded attempt", err, rout.String(), rerr.String(), want)
		}
	case <-time.After(90 * time.Second):
		t.Errorf("svc runs stream did not end after the restart: %q %q", rout.String(), rerr.String())
	}

	// A stream open while svc dev stops does not hold up its shutdown.
	id = start("talker")
	open := openSSE(t, d.url("/api/runs/"+id+"/stream"), "")
	nextEvents(t, open, 3) // the run waits on its hook
	if code := d.interrupt(); code != 0 || strings.Contains(d.stderr.String(), "deadline exceeded") {
		t.Errorf("svc dev stopped with a run stream open: exit %d, stderr:\n%s", code, d.stderr.String())
	}
	expectEnd(t, open)
}
