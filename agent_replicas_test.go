package main

// Agents across replicas (issue 19 item 5), with real processes: three
// `svc serve` replicas on the PostgreSQL engine and one database, the fake
// model provider on loopback, each request sent to a replica of the test's
// choosing.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// agentReplicaKey is the chat wires' credential of the replicas (SVC_API_KEYS).
const agentReplicaKey = "wire-key-replicas"

// agentReplicaHeaders are a chat request's headers: the credential and,
// when session is not "", the durable session.
func agentReplicaHeaders(session string) map[string]string {
	h := map[string]string{"x-api-key": agentReplicaKey}
	if session != "" {
		h[wireHeaderSession] = session
	}
	return h
}

// agentReplicaHistory is the conversation a fake provider request carried,
// as role:text joined by |, tool calls as role:name(arguments).
func agentReplicaHistory(req fakeRequest) string {
	var body fakeProvOpenAIRequest
	json.Unmarshal(req.Raw, &body)
	var parts []string
	for _, m := range body.Messages {
		if m.Role == "system" {
			continue
		}
		parts = append(parts, m.Role+":"+fakeProvText(m.Content))
		for _, c := range m.ToolCalls {
			parts = append(parts, m.Role+":"+c.Function.Name+"("+c.Function.Arguments+")")
		}
	}
	return strings.Join(parts, "|")
}

// agentReplicaLast returns the conversation of the fake's last request.
func agentReplicaLast(t *testing.T, f *fakeProvider) string {
	t.Helper()
	reqs := f.requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	return agentReplicaHistory(reqs[len(reqs)-1])
}

// agentReplicaStream posts a streamed chat request (body) to path on x and
// returns once a line holding until arrived, with a
// function that reads the rest of the stream (until it ends or breaks) and
// returns the status and everything read.
func agentReplicaStream(t *testing.T, x *pgBox, path string, headers map[string]string, body, until string) (rest func() (int, string)) {
	t.Helper()
	req, _ := http.NewRequest("POST", x.url+path, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("streamed turn on %s: %v", x.url, err)
	}
	var read strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		read.WriteString(sc.Text() + "\n")
		if resp.StatusCode != 200 || strings.Contains(sc.Text(), until) {
			break
		}
	}
	return func() (int, string) {
		defer resp.Body.Close()
		for sc.Scan() {
			read.WriteString(sc.Text() + "\n")
		}
		return resp.StatusCode, read.String()
	}
}

// TestAgentReplicas runs three `svc serve` replicas on one PostgreSQL with
// the fake model provider. A durable session continues on whichever
// replica each turn reaches, on every wire that has one (x-svc-session,
// AG-UI threadId, Responses previous_response_id): the model is sent the
// whole conversation every time. An approval asked on one replica is
// answered on another (OpenAI tool result, AG-UI resume, Responses
// mcp_approval_response) and the tool's result answers it. Turns of one session sent
// to several replicas at once never run at the same time: a turn that finds
// its session busy anywhere is refused (409), and the model calls of those
// that ran never overlap. A replica SIGKILLed in the middle of a streamed
// turn, after the turn's tool ran, leaves the session usable: the next
// turn, on another replica, runs on the transcript as it was before the
// interrupted turn plus the tool's call and result (once), and the
// interrupted turn is in the runs once, failed with the error Interrupted;
// a Responses turn killed mid-stream, which no turn continues, is recorded
// so by the replica left, and the response before it continues there.
func TestAgentReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three svc serve processes")
	}
	model := newFakeProvider(t)
	dir := projectDir(t)
	writeFile(t, dir, "deep-agents/helper/index.ts", agentTestSource)
	dbURL := testPostgresURL(t)
	secret := strings.Repeat("ab", 32)
	env := baseEnv("DATABASE_URL="+dbURL, "HMAC_SECRET="+secret, "SVC_MASTER_KEY="+strings.Repeat("cd", 32),
		"OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL="+model.URL+"/v1", "SVC_API_KEYS="+agentReplicaKey,
		"SVC_ENGINE=postgres", "SVC_STORAGE_LOCAL_OK=1", "SVC_ENGINE_LEASE=3s", "SVC_ENGINE_LEASE_RENEW=1s")
	boxes := make([]*pgBox, 3)
	for i := range boxes {
		boxes[i] = &pgBox{startBox(t, dir, t.TempDir(), env), []byte(secret)}
	}
	a, b, c := boxes[0], boxes[1], boxes[2]
	wire := func(x *pgBox) *wiresEnv { return &wiresEnv{url: x.url} }

	// x-svc-session: three turns on three replicas, then one back on the first.
	for i, x := range []*pgBox{a, b, c, a} {
		say := fmt.Sprintf("hop-%d", i)
		if r := wire(x).post(t, "/openai/v1/chat/completions", agentReplicaHeaders("s-hop"), wiresOpenAIBody("helper", say, i%2 == 1)); r.Status != 200 {
			t.Fatalf("turn %d on replica %d = %d %s", i, i%3, r.Status, r.Body)
		}
	}
	if got, want := agentReplicaLast(t, model), "user:hop-0|assistant:echo: hop-0|user:hop-1|assistant:echo: hop-1|user:hop-2|assistant:echo: hop-2|user:hop-3"; got != want {
		t.Errorf("x-svc-session turn 4 sent the model %q; want %q", got, want)
	}
	// AG-UI threadId: the client sends only its newest message each time.
	for i, x := range []*pgBox{b, c, a} {
		r := wire(x).post(t, "/agui/helper", agentReplicaHeaders(""), wiresAGUIBody("thread-hop", fmt.Sprintf("ag-%d", i)))
		if r.Status != 200 || !strings.Contains(string(r.Body), "RUN_FINISHED") {
			t.Fatalf("AG-UI turn %d = %d %s", i, r.Status, r.Body)
		}
	}
	if got, want := agentReplicaLast(t, model), "user:ag-0|assistant:echo: ag-0|user:ag-1|assistant:echo: ag-1|user:ag-2"; got != want {
		t.Errorf("AG-UI turn 3 sent the model %q; want %q", got, want)
	}
	// Responses: each turn continues the previous response, on another replica.
	prev := ""
	for i, x := range []*pgBox{c, a, b} {
		extra := map[string]any{}
		if prev != "" {
			extra["previous_response_id"] = prev
		}
		prev, _ = responsesCreate(t, wire(x), agentReplicaHeaders(""), responsesBody(fmt.Sprintf("re-%d", i), extra))["id"].(string)
	}
	if got, want := agentReplicaLast(t, model), "user:re-0|assistant:echo: re-0|user:re-1|assistant:echo: re-1|user:re-2"; got != want {
		t.Errorf("Responses turn 3 sent the model %q; want %q", got, want)
	}

	// Approvals asked on one replica, answered on another.
	ask := wire(a).post(t, "/openai/v1/chat/completions", agentReplicaHeaders("s-approve"), wiresOpenAIBody("helper", `call refund {"orderId":"o1"}`, false)).json(t)
	callID, _ := wiresJSONAt(ask, "choices.0.message.tool_calls.0.id").(string)
	if wiresJSONAt(ask, "choices.0.finish_reason") != "tool_calls" || callID == "" {
		t.Fatalf("approval request on a = %v", ask)
	}
	answer := `{"model":"helper","messages":[{"role":"tool","tool_call_id":"` + callID + `","content":"{\"approved\":true}"}]}`
	got := wire(b).post(t, "/openai/v1/chat/completions", agentReplicaHeaders("s-approve"), answer).json(t)
	if text, _ := wiresJSONAt(got, "choices.0.message.content").(string); text != `tool refund said: {"refunded":"o1"}` {
		t.Errorf("approval answered on b = %v; want the tool's result", got)
	}
	interrupt := wire(b).post(t, "/agui/helper", agentReplicaHeaders(""), wiresAGUIBody("thread-approve", `call refund {"orderId":"o2"}`))
	var finished map[string]any
	if n := len(interrupt.Events); n > 0 {
		json.Unmarshal([]byte(interrupt.Events[n-1].Data), &finished)
	}
	interruptID, _ := wiresJSONAt(finished, "outcome.interrupts.0.id").(string)
	if wiresJSONAt(finished, "outcome.type") != "interrupt" || interruptID == "" {
		t.Fatalf("AG-UI approval request on b = %s", interrupt.Body)
	}
	resume := `{"threadId":"thread-approve","runId":"r2","messages":[],"resume":[{"interruptId":"` + interruptID + `","status":"resolved","payload":{"approved":true}}]}`
	if r := wire(c).post(t, "/agui/helper", agentReplicaHeaders(""), resume); !strings.Contains(string(r.Body), `tool refund said: {\"refunded\":\"o2\"}`) {
		t.Errorf("AG-UI resume on c = %s; want the tool's result", r.Body)
	}
	req := responsesCreate(t, wire(c), agentReplicaHeaders(""), responsesBody(`call refund {"orderId":"o3"}`, nil))
	approvalID, _ := wiresJSONAt(req, "output.0.id").(string)
	if responsesOutputTypes(req) != "mcp_approval_request" {
		t.Fatalf("Responses approval request on c = %v", req)
	}
	approved := responsesCreate(t, wire(a), agentReplicaHeaders(""), responsesBody([]any{map[string]any{"type": "mcp_approval_response", "approval_request_id": approvalID, "approve": true}},
		map[string]any{"previous_response_id": req["id"]}))
	if responsesOutputTypes(approved) != "mcp_call,message" || wiresJSONAt(approved, "output.0.output") != `{"refunded":"o3"}` {
		t.Errorf("Responses approval answered on a = %v; want the call's result, then the text", approved)
	}

	// One turn streams slowly on a, for longer than a lease (every replica
	// sweeps for turns left by dead ones meanwhile, and must not take it
	// for one): the same session on b and c is busy.
	before := len(model.requests())
	slow := agentReplicaStream(t, a, "/openai/v1/chat/completions", agentReplicaHeaders("s-race"), wiresOpenAIBody("helper", "slow race-0 "+strings.Repeat("word ", 40), true), "echo:")
	for _, x := range []*pgBox{b, c} {
		if r := wire(x).post(t, "/openai/v1/chat/completions", agentReplicaHeaders("s-race"), wiresOpenAIBody("helper", "race-1", false)); r.Status != http.StatusConflict {
			t.Errorf("a turn on another replica while one runs = %d %s; want 409 session_busy", r.Status, r.Body)
		}
	}
	if code, body := slow(); code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("the slow turn = %d %s", code, body)
	}
	// Six turns of one session at once over three replicas: each runs whole
	// or is refused, and no two model calls of the session overlap.
	var burst sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		burst.Add(1)
		go func() {
			defer burst.Done()
			// Not t's helpers: they may end the test, which only its own goroutine may.
			req, _ := http.NewRequest("POST", boxes[i%3].url+"/openai/v1/chat/completions", strings.NewReader(wiresOpenAIBody("helper", fmt.Sprintf("slow burst-%d", i), true)))
			for k, v := range agentReplicaHeaders("s-race") {
				req.Header.Set(k, v)
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}
		}()
	}
	burst.Wait()
	type span struct {
		say      string
		from, to time.Time
	}
	var spans []span
	for _, r := range model.requests()[before:] {
		h := agentReplicaHistory(r)
		spans = append(spans, span{h[strings.LastIndex(h, "|")+1:], r.Began, r.Ended})
	}
	ran := 0
	for i, code := range codes {
		switch code {
		case 200:
			ran++
		case http.StatusConflict:
		default:
			t.Errorf("burst turn %d = %d; want 200 or 409", i, code)
		}
	}
	if ran == 0 || len(spans) != 1+ran {
		t.Errorf("%d burst turns ran and the model was called %d times for the session; want at least one, and one call per turn that ran (plus the slow one)", ran, len(spans))
	}
	slices.SortFunc(spans, func(x, y span) int { return x.from.Compare(y.from) })
	for i := 1; i < len(spans); i++ {
		if spans[i].from.Before(spans[i-1].to) {
			t.Errorf("two turns of one session ran at once: %q until %v, %q from %v", spans[i-1].say, spans[i-1].to, spans[i].say, spans[i].from)
		}
	}

	// A replica killed in the middle of a streamed turn, after the tool it
	// was approved to run ran (the answer to the tool's result streams
	// slowly); the client sends its approval again, to another replica.
	model.mu.Lock()
	model.pace = 400 * time.Millisecond
	model.mu.Unlock()
	ask = wire(b).post(t, "/openai/v1/chat/completions", agentReplicaHeaders("s-kill"), wiresOpenAIBody("helper", `slow call refund {"orderId":"k1"}`, false)).json(t)
	callID, _ = wiresJSONAt(ask, "choices.0.message.tool_calls.0.id").(string)
	if callID == "" {
		t.Fatalf("approval request of s-kill = %v", ask)
	}
	answer = `{"model":"helper","messages":[{"role":"tool","tool_call_id":"` + callID + `","content":"{\"approved\":true}"}]}`
	cut := agentReplicaStream(t, a, "/openai/v1/chat/completions", agentReplicaHeaders("s-kill"), strings.Replace(answer, "{", `{"stream":true,`, 1), "said:")
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	if code, body := cut(); strings.Contains(body, "[DONE]") {
		t.Fatalf("the killed replica's stream ended whole (%d): %s", code, body)
	}
	var next wiresReply
	eventually(t, 20*time.Second, "the session usable on another replica", func() bool {
		next = wire(b).post(t, "/openai/v1/chat/completions", agentReplicaHeaders("s-kill"), answer)
		return next.Status != http.StatusConflict
	})
	if text, _ := wiresJSONAt(next.json(t), "choices.0.message.content").(string); next.Status != 200 || text != `tool refund said: {"refunded":"k1"}` {
		t.Fatalf("the approval sent again after the kill = %d %s; want the answer to the tool's result", next.Status, next.Body)
	}
	if got, want := agentReplicaLast(t, model), `user:slow call refund {"orderId":"k1"}|assistant:|assistant:refund({"orderId":"k1"})|tool:{"refunded":"k1"}`; got != want {
		t.Errorf("the turn after the kill sent the model %q; want %q (the tool's call and result kept from the interrupted turn, once)", got, want)
	}
	transcript := wire(c).post(t, "/api/agents/helper/sessions/s-kill", agentReplicaHeaders(""), "")
	var page struct {
		Items []struct{ Type, Text string }
	}
	json.Unmarshal(transcript.Body, &page)
	var items []string
	for _, it := range page.Items {
		items = append(items, it.Type+":"+it.Text)
	}
	if got, want := strings.Join(items, "|"), `user:slow call refund {"orderId":"k1"}|tool_call:|assistant:tool refund said: {"refunded":"k1"}`; transcript.Status != 200 || got != want {
		t.Errorf("transcript of s-kill on c = %d %q; want %q", transcript.Status, got, want)
	}
	// The interrupted turn is recorded by the replica that takes over the
	// killed one's runs once its lease expires: under load, a while after
	// the answer above (bounded).
	var turns []runRecord
	deadline := time.Now().Add(30 * time.Second)
	for {
		turns = agentReplicaTurns(t, c, "s-kill")
		if len(turns) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := agentReplicaInterrupted(turns, "approved"); len(turns) != 3 || n != 1 {
		t.Errorf("runs of s-kill = %+v; want the approval request, its answer, and the interrupted turn between them recorded once (failed, %s, with its input)", turns, turnInterrupted)
	}
	// A Responses turn killed on b, continuing a response made on c, and
	// not continued itself (the client has no response to continue): c
	// records it as interrupted all the same. The response before it
	// continues on c as if the interrupted turn had not been.
	first := responsesCreate(t, wire(c), agentReplicaHeaders(""), responsesBody("left-0", nil))
	cut = agentReplicaStream(t, b, "/openai/v1/responses", agentReplicaHeaders(""),
		responsesBody("slow left "+strings.Repeat("word ", 100), map[string]any{"previous_response_id": first["id"], "stream": true}), "echo:")
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.exited
	cut()
	eventually(t, 20*time.Second, "the turn interrupted on b recorded by c", func() bool {
		return agentReplicaInterrupted(agentReplicaTurns(t, c, ""), "slow left") == 1
	})
	if n := agentReplicaInterrupted(agentReplicaTurns(t, c, ""), ""); n != 2 {
		t.Errorf("%d turns recorded as interrupted; want the two killed", n)
	}
	responsesCreate(t, wire(c), agentReplicaHeaders(""), responsesBody("left-1", map[string]any{"previous_response_id": first["id"]}))
	if got, want := agentReplicaLast(t, model), "user:left-0|assistant:echo: left-0|user:left-1"; got != want {
		t.Errorf("the response continued after the kill sent the model %q; want %q", got, want)
	}
}

// agentReplicaTurns returns the runs of session's turns (every turn when
// session is "") as x lists them.
func agentReplicaTurns(t *testing.T, x *pgBox, session string) []runRecord {
	t.Helper()
	var list struct{ Items []runRecord }
	x.do(t, "GET", "/api/runs?agent=helper&limit=500", "", &list)
	var turns []runRecord
	for _, r := range list.Items {
		if session == "" || r.SessionID == session {
			turns = append(turns, r)
		}
	}
	return turns
}

// agentReplicaInterrupted counts the turns recorded as interrupted (failed
// with the error Interrupted) whose input holds say.
func agentReplicaInterrupted(turns []runRecord, say string) int {
	n := 0
	for _, r := range turns {
		if r.Status == runFailed && r.Error != nil && r.Error.Name == turnInterrupted && strings.Contains(string(r.Input), say) {
			n++
		}
	}
	return n
}
