package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// wiresEnv is the HTTP surface over the test agent "helper", answered by
// an agentScript, with durable sessions when it has a database.
type wiresEnv struct {
	rt     *runtimeCore
	url    string
	script *agentScript
}

// newWiresEnv serves the wires on loopback; dbURL "" means no sessions.
func newWiresEnv(t *testing.T, dbURL string) *wiresEnv {
	t.Helper()
	cat := agentTestCompile(t, agentTestSource)
	if cat.Agents["helper"] == nil {
		t.Fatalf("agent not compiled: %v", cat.Failed)
	}
	e, err := openEngine(engineOptions{Dir: t.TempDir(), Catalog: func() *catalog { return cat },
		Env: func() map[string]string { return nil }, Log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	rt := &runtimeCore{log: discardLogger(), engine: soloFleet(e), proj: &project{Dir: t.TempDir()}, apiURL: "http://127.0.0.1:4242"}
	rt.catalog.Store(cat)
	rt.gate.Store(&gateState{Open: true, Reason: gateProviderEnv})
	rt.provider.Store(&modelProvider{Kind: providerOpenAI, APIKey: "sk-test"})
	env := &wiresEnv{rt: rt, script: &agentScript{}}
	rt.agents = agentTestHost(env.script)
	rt.agents.record = e.recordTurn
	if dbURL != "" {
		pool, err := pgxpool.New(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		rt.agents.sessions = newSessionStore(pool, false)
	}
	env.url = wiresServe(t, rt)
	return env
}

// wiresServe serves rt's HTTP surface on loopback until the test ends and
// returns its URL.
func wiresServe(t *testing.T, rt *runtimeCore) string {
	t.Helper()
	srv, err := newTestServer(rt)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL
}

// wiresMigratedDB returns a fresh database with the platform migrations.
func wiresMigratedDB(t *testing.T) string {
	t.Helper()
	url := testPostgresURL(t)
	if _, err := applyMigrations(context.Background(), url, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	return url
}

// wiresReply is an HTTP answer: status, content type, body, and the SSE
// events when it streamed (event name, data).
type wiresReply struct {
	Status      int
	ContentType string
	Header      http.Header
	Body        []byte
	Events      []wiresSSE
}

// wiresSSE is one server-sent event.
type wiresSSE struct {
	Name string
	Data string
}

// json decodes the body.
func (r wiresReply) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %q: %v", r.Body, err)
	}
	return v
}

// post sends a request to the env with headers (name → value) and body.
func (e *wiresEnv) post(t *testing.T, path string, headers map[string]string, body string) wiresReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	method := http.MethodPost
	if body == "" {
		method = http.MethodGet
	}
	req, _ := http.NewRequestWithContext(ctx, method, e.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := wiresReply{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Header: resp.Header, Body: raw}
	if strings.HasPrefix(r.ContentType, "text/event-stream") {
		r.Events = wiresParseSSE(raw)
	}
	return r
}

// wiresParseSSE splits an event stream into events.
func wiresParseSSE(raw []byte) []wiresSSE {
	var out []wiresSSE
	var cur wiresSSE
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Data != "" {
				out = append(out, cur)
			}
			cur = wiresSSE{}
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// wiresJSONAt returns the value at a dotted path ("error.code", "choices.0.delta").
func wiresJSONAt(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i := 0
			for _, c := range k {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// wiresOpenAIBody is a chat-completions body with one user message.
func wiresOpenAIBody(model, say string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "stream_options": map[string]bool{"include_usage": stream},
		"messages": []map[string]string{{"role": "user", "content": say}}})
	return string(b)
}

// wiresAnthropicBody is a messages body with one user message.
func wiresAnthropicBody(model, say string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 100, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": say}}})
	return string(b)
}

// wiresAGUIBody is a RunAgentInput with one user message.
func wiresAGUIBody(threadID, say string) string {
	b, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": "r1", "state": map[string]any{}, "tools": []any{}, "context": []any{},
		"forwardedProps": map[string]string{"agent": "helper"}, "messages": []map[string]string{{"id": "u1", "role": "user", "content": say}}})
	return string(b)
}

// Credentials of the tests, in both forms.
var (
	wiresBearer = map[string]string{"Authorization": "Bearer tok-a"}
	wiresAPIKey = map[string]string{"x-api-key": "tok-a"}
)

// TestWiresErrorShapes checks each wire's own error shapes and statuses.
func TestWiresErrorShapes(t *testing.T) {
	env := newWiresEnv(t, "")
	type check struct{ path, want string }
	tests := []struct {
		name       string
		path       string
		headers    map[string]string
		body       string
		wantStatus int
		want       []check // JSON path → value of the error body
	}{
		{"openai missing credential", "/openai/v1/chat/completions", nil, wiresOpenAIBody("helper", "hi", false), 401,
			[]check{{"error.type", "invalid_request_error"}, {"error.code", "invalid_api_key"}}},
		{"openai streaming missing credential", "/openai/v1/chat/completions", nil, wiresOpenAIBody("helper", "hi", true), 401,
			[]check{{"error.code", "invalid_api_key"}}},
		{"openai empty bearer", "/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer "}, wiresOpenAIBody("helper", "hi", false), 401,
			[]check{{"error.code", "invalid_api_key"}}},
		{"openai models missing credential", "/openai/v1/models", nil, "", 401, []check{{"error.code", "invalid_api_key"}}},
		{"anthropic missing credential", "/anthropic/v1/messages", nil, wiresAnthropicBody("helper", "hi", false), 401,
			[]check{{"type", "error"}, {"error.type", "authentication_error"}}},
		{"anthropic streaming empty key", "/anthropic/v1/messages", map[string]string{"x-api-key": " "}, wiresAnthropicBody("helper", "hi", true), 401,
			[]check{{"type", "error"}, {"error.type", "authentication_error"}}},
		{"agui missing credential", "/agui/helper", nil, wiresAGUIBody("t", "hi"), 401, []check{{"type", "RUN_ERROR"}}},
		{"chat missing credential", "/chat", nil, wiresAGUIBody("t", "hi"), 401, []check{{"type", "RUN_ERROR"}}},
		{"openai unknown agent", "/openai/v1/chat/completions", wiresBearer, wiresOpenAIBody("nobody", "hi", false), 404,
			[]check{{"error.type", "invalid_request_error"}, {"error.code", "model_not_found"}, {"error.param", "model"}}},
		{"openai unknown model retrieve", "/openai/v1/models/nobody", wiresBearer, "", 404, []check{{"error.code", "model_not_found"}}},
		{"anthropic unknown agent", "/anthropic/v1/messages", wiresAPIKey, wiresAnthropicBody("nobody", "hi", true), 404,
			[]check{{"type", "error"}, {"error.type", "not_found_error"}}},
		{"agui unknown agent", "/agui/nobody", wiresBearer, wiresAGUIBody("t", "hi"), 404, []check{{"type", "RUN_ERROR"}, {"code", wireErrNotFound}}},
		{"chat without an agent", "/chat", wiresBearer, `{"threadId":"","runId":"r","messages":[]}`, 400, []check{{"type", "RUN_ERROR"}}},
		{"agui without threadId", "/agui/helper", wiresBearer, `{"runId":"r","messages":[]}`, 400, []check{{"type", "RUN_ERROR"}}},
		{"openai invalid JSON", "/openai/v1/chat/completions", wiresBearer, `{`, 400, []check{{"error.type", "invalid_request_error"}}},
		{"anthropic invalid JSON", "/anthropic/v1/messages", wiresBearer, `{`, 400, []check{{"error.type", "invalid_request_error"}}},
		{"openai upstream 429", "/openai/v1/chat/completions", wiresBearer, wiresOpenAIBody("helper", "fail", false), 429,
			[]check{{"error.code", "rate_limit_exceeded"}}},
		{"openai streaming upstream 429", "/openai/v1/chat/completions", wiresBearer, wiresOpenAIBody("helper", "fail", true), 429,
			[]check{{"error.code", "rate_limit_exceeded"}}},
		{"anthropic upstream 429", "/anthropic/v1/messages", wiresAPIKey, wiresAnthropicBody("helper", "fail", false), 429,
			[]check{{"error.type", "rate_limit_error"}}},
		{"anthropic streaming upstream 429", "/anthropic/v1/messages", wiresAPIKey, wiresAnthropicBody("helper", "fail", true), 429,
			[]check{{"error.type", "rate_limit_error"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := env.post(t, tt.path, tt.headers, tt.body)
			if r.Status != tt.wantStatus || !strings.HasPrefix(r.ContentType, "application/json") {
				t.Fatalf("status = %d (%s) %s; want %d JSON", r.Status, r.ContentType, r.Body, tt.wantStatus)
			}
			body := r.json(t)
			for _, c := range tt.want {
				if got := wiresJSONAt(body, c.path); got != c.want {
					t.Errorf("%s = %v; want %q (body %s)", c.path, got, c.want, r.Body)
				}
			}
			if m, _ := wiresJSONAt(body, "error.message").(string); m == "" {
				if m, _ = wiresJSONAt(body, "message").(string); m == "" {
					t.Errorf("no message in %s", r.Body)
				}
			}
		})
	}
	t.Run("agui upstream error is a RUN_ERROR event", func(t *testing.T) {
		r := env.post(t, "/agui/helper", wiresBearer, wiresAGUIBody("", "fail"))
		if r.Status != 200 || len(r.Events) != 2 || !strings.Contains(r.Events[0].Data, "RUN_STARTED") || !strings.Contains(r.Events[1].Data, `"RUN_ERROR"`) {
			t.Errorf("reply = %d %q; want RUN_STARTED then RUN_ERROR", r.Status, r.Body)
		}
	})
}

// TestWiresGateClosed checks the 503 of every wire while the gate is closed.
func TestWiresGateClosed(t *testing.T) {
	env := newWiresEnv(t, "")
	env.rt.gate.Store(&gateState{Open: false, Reason: gateNoProvider})
	tests := []struct {
		path, body, field, want string
	}{
		{"/openai/v1/chat/completions", wiresOpenAIBody("helper", "hi", true), "error.code", wireErrNoModel},
		{"/anthropic/v1/messages", wiresAnthropicBody("helper", "hi", false), "error.type", "api_error"},
		{"/agui/helper", wiresAGUIBody("t", "hi"), "code", wireErrNoModel},
	}
	for _, tt := range tests {
		r := env.post(t, tt.path, wiresBearer, tt.body)
		if r.Status != http.StatusServiceUnavailable || wiresJSONAt(r.json(t), tt.field) != tt.want {
			t.Errorf("%s with the gate closed = %d %s; want 503 with %s %q", tt.path, r.Status, r.Body, tt.field, tt.want)
		}
		// The body says how to open the gate, and SDKs are told not to retry.
		if !strings.Contains(string(r.Body), "OPENAI_API_KEY") || !strings.Contains(string(r.Body), "console") {
			t.Errorf("%s with the gate closed: %s does not say how to add a model provider", tt.path, r.Body)
		}
		if got := r.Header.Get("x-should-retry"); got != "false" {
			t.Errorf("%s with the gate closed: x-should-retry %q, want false", tt.path, got)
		}
	}
}

// TestWiresListenCredentials checks the keys required from another machine
// (--listen) or another account.
func TestWiresListenCredentials(t *testing.T) {
	env := newWiresEnv(t, "")
	srv, err := newServer(env.rt, httpGuardConfig{APIKeys: []string{"dev-key", "extra"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.guard.auth.(*httpGuardKeys).owner = nil // nobody calling is the developer's account
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	env.url = ts.URL
	tests := []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"wrong key", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"dev key as x-api-key", map[string]string{"x-api-key": "dev-key"}, 200},
		{"SVC_API_KEYS key as wiresBearer", map[string]string{"Authorization": "Bearer extra"}, 200},
	}
	for _, tt := range tests {
		if r := env.post(t, "/openai/v1/chat/completions", tt.headers, wiresOpenAIBody("helper", "hi", false)); r.Status != tt.want {
			t.Errorf("%s: status %d %s; want %d", tt.name, r.Status, r.Body, tt.want)
		}
	}
	dir := t.TempDir()
	k1, err := devAPIKey(dir + "/dev-api-key")
	if err != nil {
		t.Fatal(err)
	}
	if k2, _ := devAPIKey(dir + "/dev-api-key"); k1 == "" || k2 != k1 {
		t.Errorf("devAPIKey minted %q then read %q; want one stable key", k1, k2)
	}
}

// TestWiresOpenAI checks the chat-completions shapes, whole and streamed.
func TestWiresOpenAI(t *testing.T) {
	env := newWiresEnv(t, "")
	r := env.post(t, "/openai/v1/chat/completions", wiresBearer, wiresOpenAIBody("helper", `call add {"a":2,"b":3}`, false))
	body := r.json(t)
	for path, want := range map[string]any{"object": "chat.completion", "model": "helper", "choices.0.finish_reason": "stop",
		"choices.0.message.role": "assistant", "usage.total_tokens": 10.0} {
		if got := wiresJSONAt(body, path); got != want {
			t.Errorf("%s = %v; want %v", path, got, want)
		}
	}
	if c, _ := wiresJSONAt(body, "choices.0.message.content").(string); !strings.HasPrefix(c, `tool add said: {"sum":5`) {
		t.Errorf("content = %q; want the server tool's result", c)
	}

	r = env.post(t, "/openai/v1/chat/completions", wiresBearer, wiresOpenAIBody("helper", "hello there", true))
	var text strings.Builder
	var finish any
	for i, ev := range r.Events {
		if ev.Data == "[DONE]" {
			if i != len(r.Events)-1 {
				t.Errorf("[DONE] at %d of %d", i, len(r.Events))
			}
			continue
		}
		var chunk map[string]any
		json.Unmarshal([]byte(ev.Data), &chunk)
		if chunk["object"] != "chat.completion.chunk" {
			t.Errorf("chunk %s", ev.Data)
		}
		if s, ok := wiresJSONAt(chunk, "choices.0.delta.content").(string); ok {
			text.WriteString(s)
		}
		if f := wiresJSONAt(chunk, "choices.0.finish_reason"); f != nil {
			finish = f
		}
		if u := wiresJSONAt(chunk, "usage.total_tokens"); u != nil && u != 5.0 {
			t.Errorf("usage = %v", u)
		}
	}
	if text.String() != "echo: hello there" || finish != "stop" || r.Events[len(r.Events)-1].Data != "[DONE]" {
		t.Errorf("stream = %q finish %v; events %v", text.String(), finish, r.Events)
	}

	// A client tool is passed through in the native tool_calls shape.
	b := `{"model":"helper","stream":true,"tools":[{"type":"function","function":{"name":"pick","parameters":{"type":"object"}}}],
		"messages":[{"role":"user","content":"call pick {\"color\":\"red\"}"}]}`
	r = env.post(t, "/openai/v1/chat/completions", wiresBearer, b)
	if !strings.Contains(string(r.Body), `"tool_calls":[{"index":0,"id":"call_`) || !strings.Contains(string(r.Body), `"finish_reason":"tool_calls"`) {
		t.Errorf("client tool stream = %s", r.Body)
	}
	models := env.post(t, "/openai/v1/models", wiresBearer, "").json(t)
	if wiresJSONAt(models, "object") != "list" || wiresJSONAt(models, "data.0.id") != "helper" || wiresJSONAt(models, "data.0.object") != "model" {
		t.Errorf("models = %v", models)
	}
}

// TestWiresAnthropic checks the messages shapes, whole and streamed.
func TestWiresAnthropic(t *testing.T) {
	env := newWiresEnv(t, "")
	b := `{"model":"helper","max_tokens":50,"system":[{"type":"text","text":"Be brief."}],
		"tools":[{"name":"pick","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":[{"type":"text","text":"call pick {\"x\":1}"}]}]}`
	body := env.post(t, "/anthropic/v1/messages", wiresAPIKey, b).json(t)
	for path, want := range map[string]any{"type": "message", "role": "assistant", "model": "helper", "stop_reason": "tool_use",
		"content.0.type": "tool_use", "content.0.name": "pick", "content.0.input.x": 1.0, "usage.input_tokens": 3.0} {
		if got := wiresJSONAt(body, path); got != want {
			t.Errorf("%s = %v; want %v", path, got, want)
		}
	}
	if sys := env.script.requests()[0].System; !strings.HasSuffix(sys, "Be brief.") {
		t.Errorf("system = %q", sys)
	}

	r := env.post(t, "/anthropic/v1/messages", wiresAPIKey, wiresAnthropicBody("helper", "hi", true))
	var names []string
	var text strings.Builder
	for _, ev := range r.Events {
		names = append(names, ev.Name)
		var v map[string]any
		json.Unmarshal([]byte(ev.Data), &v)
		if v["type"] != ev.Name {
			t.Errorf("event %s carries type %v", ev.Name, v["type"])
		}
		if s, ok := wiresJSONAt(v, "delta.text").(string); ok {
			text.WriteString(s)
		}
		if ev.Name == "message_delta" && wiresJSONAt(v, "delta.stop_reason") != "end_turn" {
			t.Errorf("message_delta = %s", ev.Data)
		}
	}
	want := "message_start,content_block_start,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if got := strings.Join(names, ","); got != want || text.String() != "echo: hi" {
		t.Errorf("events = %s text %q; want %s", got, text.String(), want)
	}
}

// TestWiresAGUIEvents checks the AG-UI event sequence of a tool turn.
func TestWiresAGUIEvents(t *testing.T) {
	env := newWiresEnv(t, "")
	r := env.post(t, "/agui/helper", wiresBearer, wiresAGUIBody("", `call add {"a":1,"b":1}`))
	var types []string
	for _, ev := range r.Events {
		var v map[string]any
		json.Unmarshal([]byte(ev.Data), &v)
		types = append(types, v["type"].(string))
		if v["type"] == "TOOL_CALL_RESULT" && !strings.Contains(v["content"].(string), `"sum":2`) {
			t.Errorf("result = %s", ev.Data)
		}
	}
	want := "RUN_STARTED,TOOL_CALL_START,TOOL_CALL_ARGS,TOOL_CALL_END,TOOL_CALL_RESULT,TEXT_MESSAGE_START,TEXT_MESSAGE_CONTENT,TEXT_MESSAGE_CONTENT,TEXT_MESSAGE_END,RUN_FINISHED"
	if got := strings.Join(types, ","); got != want {
		t.Errorf("events = %s; want %s", got, want)
	}
}

// TestWiresSessions checks durable sessions, their scoping by credential,
// conversation grouping, approvals across a new server, and the runs.
func TestWiresSessions(t *testing.T) {
	dbURL := wiresMigratedDB(t)
	env := newWiresEnv(t, dbURL)
	lastRequest := func() []chatMessage {
		reqs := env.script.requests()
		return reqs[len(reqs)-1].Messages
	}
	contents := func(msgs []chatMessage) string {
		var parts []string
		for _, m := range msgs {
			parts = append(parts, m.Role+":"+m.Content)
		}
		return strings.Join(parts, "|")
	}
	session := func(cred, key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + cred, wireHeaderSession: key}
	}

	env.post(t, "/openai/v1/chat/completions", session("a", "s1"), wiresOpenAIBody("helper", "hello", false))
	env.post(t, "/openai/v1/chat/completions", session("a", "s1"), wiresOpenAIBody("helper", "again", true))
	if got := contents(lastRequest()); got != "user:hello|assistant:echo: hello|user:again" {
		t.Errorf("durable turn 2 sent the model %q; want the stored history plus the newest turn", got)
	}
	// Another credential under the same key gets a fresh session.
	env.post(t, "/anthropic/v1/messages", map[string]string{"x-api-key": "b", wireHeaderSession: "s1"}, wiresAnthropicBody("helper", "again", false))
	if got := contents(lastRequest()); got != "user:again" {
		t.Errorf("another credential saw %q; want a fresh session", got)
	}
	// Grouping only: the server keeps nothing; both headers: durable.
	env.post(t, "/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer a", wireHeaderConversation: "c1"}, wiresOpenAIBody("helper", "one", false))
	env.post(t, "/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer a", wireHeaderConversation: "c1"}, wiresOpenAIBody("helper", "two", false))
	if got := contents(lastRequest()); got != "user:two" {
		t.Errorf("conversation turn sent %q; want only what the client sent", got)
	}
	env.post(t, "/openai/v1/chat/completions", map[string]string{"Authorization": "Bearer a", wireHeaderConversation: "c2", wireHeaderSession: "s1"}, wiresOpenAIBody("helper", "both", false))
	if got := contents(lastRequest()); !strings.HasPrefix(got, "user:hello|") {
		t.Errorf("both headers sent %q; want the durable session", got)
	}

	// Approve over the OpenAI wire.
	r := env.post(t, "/openai/v1/chat/completions", session("a", "s2"), wiresOpenAIBody("helper", `call refund {"orderId":"o1"}`, false)).json(t)
	callID, _ := wiresJSONAt(r, "choices.0.message.tool_calls.0.id").(string)
	if wiresJSONAt(r, "choices.0.finish_reason") != "tool_calls" || wiresJSONAt(r, "choices.0.message.tool_calls.0.function.name") != "refund" {
		t.Fatalf("approval request = %v", r)
	}
	// A busy session answers 409.
	release, err := env.rt.agents.sessions.acquire(context.Background(), newSessionRef("helper", "a", "s2"))
	if err != nil {
		t.Fatal(err)
	}
	if busy := env.post(t, "/openai/v1/chat/completions", session("a", "s2"), wiresOpenAIBody("helper", "x", false)); busy.Status != http.StatusConflict {
		t.Errorf("busy session = %d %s; want 409", busy.Status, busy.Body)
	}
	release()
	// The answer reaches a new server over the same database (a restart).
	env2 := newWiresEnv(t, dbURL)
	answer := `{"model":"helper","messages":[{"role":"tool","tool_call_id":"` + callID + `","content":"{\"approved\":true}"}]}`
	r = env2.post(t, "/openai/v1/chat/completions", session("a", "s2"), answer).json(t)
	if c, _ := wiresJSONAt(r, "choices.0.message.content").(string); c != `tool refund said: {"refunded":"o1"}` {
		t.Errorf("approved turn = %v; want the tool's result", r)
	}

	// Refuse over the Anthropic wire.
	h := map[string]string{"x-api-key": "a", wireHeaderSession: "s3"}
	if r := env.post(t, "/anthropic/v1/messages", h, wiresAnthropicBody("helper", `call refund {"orderId":"o2"}`, true)); !strings.Contains(string(r.Body), `"stop_reason":"tool_use"`) {
		t.Errorf("streamed approval request = %s", r.Body)
	}
	events := env.post(t, "/anthropic/v1/messages", h, wiresAnthropicBody("helper", `call refund {"orderId":"o3"}`, false)).json(t)
	useID, _ := wiresJSONAt(events, "content.0.id").(string)
	if wiresJSONAt(events, "stop_reason") != "tool_use" {
		t.Fatalf("approval request = %v", events)
	}
	refuse := `{"model":"helper","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + useID + `","content":"{\"approved\":false}"}]}]}`
	r = env.post(t, "/anthropic/v1/messages", h, refuse).json(t)
	if txt, _ := wiresJSONAt(r, "content.0.text").(string); !strings.Contains(txt, "refused") || strings.Contains(txt, "refunded") {
		t.Errorf("refused turn = %v; want the model told of the refusal", r)
	}

	// Every turn is a run with trigger agent, its wire and keys.
	runs, _ := env.rt.engine.list()
	var sawSession, sawConversation bool
	for _, run := range runs {
		if run.Trigger != triggerAgent || run.Agent != "helper" {
			t.Errorf("run %+v; want trigger agent", run)
		}
		sawSession = sawSession || (run.SessionID == "s1" && run.Wire == wireOpenAI)
		sawConversation = sawConversation || run.ConversationID == "c1"
	}
	if !sawSession || !sawConversation {
		t.Errorf("runs lack the session or conversation keys: %+v", runs)
	}
	// The turns' timelines (issue 37, item 5): each model call with its
	// tokens; a call handed over for approval is not left waiting in its
	// ended turn; the next turn's call says who answered, and how.
	runs2, _ := env2.rt.engine.list()
	calls := map[string][]*durableCall{} // session → its turns' calls, in order
	models := 0
	for _, run := range append(runs, runs2...) {
		for _, c := range run.Steps {
			if c.Status == runWaiting {
				t.Errorf("ended turn %s shows call %s waiting", run.RunID, c.Name)
			}
			if c.Kind == callModel && c.Model != nil && c.Model.InputTokens > 0 && c.DurationMs != nil {
				models++
			}
			if c.Kind == callTool && c.Name == "refund" {
				calls[run.SessionID] = append(calls[run.SessionID], c)
			}
		}
	}
	if models == 0 {
		t.Error("no turn recorded a model call with its tokens")
	}
	// s2's first turn ran on env, its second on env2.
	if s2 := calls["s2"]; len(s2) != 2 || s2[0].Handoff != pendingApproval || string(s2[0].Arguments) != `{"orderId":"o1"}` ||
		s2[1].Approval == nil || s2[1].Approval.Decision != "approved" || s2[1].Approval.By != turnActor("a") || s2[1].Status != runCompleted {
		t.Errorf("session s2's refund calls = %s", wiresCallsText(s2))
	}
	decisions := map[string]int{}
	for _, c := range calls["s3"] {
		if c.Approval != nil && c.Status == runFailed {
			decisions[c.Approval.Decision]++
		}
	}
	if len(calls["s3"]) != 4 || decisions["refused"] != 1 || decisions["unanswered"] != 1 {
		t.Errorf("session s3's refund calls = %s; want two handed over, one refused, one unanswered", wiresCallsText(calls["s3"]))
	}
}

// wiresCallsText shows calls for a failure message.
func wiresCallsText(calls []*durableCall) string {
	b, _ := json.Marshal(calls)
	return string(b)
}

// TestWiresAGUIApprovals checks interrupts answered by resume entries.
func TestWiresAGUIApprovals(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	finished := func(r wiresReply) map[string]any {
		t.Helper()
		var v map[string]any
		json.Unmarshal([]byte(r.Events[len(r.Events)-1].Data), &v)
		if v["type"] != "RUN_FINISHED" {
			t.Fatalf("last event = %s", r.Body)
		}
		return v
	}
	tests := []struct {
		name, resume, want string
	}{
		{"resume resolved", `[{"interruptId":"%s","status":"resolved","payload":{"approved":true}}]`, "tool refund said: {"},
		{"resume cancelled", `[{"interruptId":"%s","status":"cancelled"}]`, "refused"},
		{"resume with approved false", `[{"interruptId":"%s","status":"resolved","payload":{"approved":false,"reason":"too much"}}]`, "too much"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			thread := randomID("t", 4)
			first := finished(env.post(t, "/agui/helper", wiresBearer, wiresAGUIBody(thread, `call refund {"orderId":"o1"}`)))
			id, _ := wiresJSONAt(first, "outcome.interrupts.0.id").(string)
			if wiresJSONAt(first, "outcome.type") != "interrupt" || wiresJSONAt(first, "outcome.interrupts.0.toolCallId") != id || id == "" {
				t.Fatalf("RUN_FINISHED = %v; want an interrupt naming the call", first)
			}
			body := `{"threadId":"` + thread + `","runId":"r2","messages":[],"resume":` + strings.ReplaceAll(tt.resume, "%s", id) + `}`
			r := env.post(t, "/agui/helper", wiresBearer, body)
			if wiresJSONAt(finished(r), "outcome.type") != "success" || !strings.Contains(string(r.Body), tt.want) {
				t.Errorf("resumed run = %s; want success mentioning %q", r.Body, tt.want)
			}
		})
	}
}

// TestWiresDatabaseUnavailable: with the runtime's PostgreSQL unreachable
// (a port nothing listens on), a durable turn answers 503
// database_unavailable with Retry-After in each wire's shape, and no
// caller learns the database's address, user or name (the driver's error
// used to be the 500's message).
func TestWiresDatabaseUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := newWiresEnv(t, "postgres://dbuser:dbpass@"+addr+"/secretdb?connect_timeout=2")
	session := map[string]string{"Authorization": wiresBearer["Authorization"], "x-svc-session": "s1"}
	tests := []struct {
		path, body, field, want string
	}{
		{"/openai/v1/chat/completions", wiresOpenAIBody("helper", "hi", false), "error.code", "database_unavailable"},
		{"/anthropic/v1/messages", wiresAnthropicBody("helper", "hi", false), "error.type", "overloaded_error"},
		{"/agui/helper", wiresAGUIBody("t1", "hi"), "", ""},
	}
	for _, tt := range tests {
		r := env.post(t, tt.path, session, tt.body)
		body := string(r.Body)
		for _, leak := range []string{addr, "dbuser", "dbpass", "secretdb"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: the answer shows %q: %s", tt.path, leak, body)
			}
		}
		if tt.field == "" { // AG-UI streams from the start: RUN_ERROR
			if !strings.Contains(body, `"code":"database_unavailable"`) {
				t.Errorf("%s: %s; want a RUN_ERROR database_unavailable", tt.path, body)
			}
			continue
		}
		if r.Status != http.StatusServiceUnavailable || wiresJSONAt(r.json(t), tt.field) != tt.want || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s = %d %s (Retry-After %q); want 503 with %s %q and a Retry-After", tt.path, r.Status, body, r.Header.Get("Retry-After"), tt.field, tt.want)
		}
	}
}

// TestHealthReportsPostgres: GET /api/health pings PostgreSQL: 200 with
// postgres ok while it answers; 503 ok:false with postgres unavailable
// when it does not (it said ok:true with the database down), without the
// database's address in the answer.
func TestHealthReportsPostgres(t *testing.T) {
	env := newWiresEnv(t, "")
	health := func() (int, map[string]any, string) {
		r := env.post(t, "/api/health", nil, "")
		var body map[string]any
		json.Unmarshal(r.Body, &body)
		return r.Status, body, string(r.Body)
	}
	up, err := pgxpool.New(context.Background(), testPostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	env.rt.db = up
	if st, body, raw := health(); st != 200 || body["ok"] != true || wiresJSONAt(body, "postgres.state") != "ok" {
		t.Errorf("health with PostgreSQL up = %d %s; want 200, postgres ok", st, raw)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	down, err := pgxpool.New(context.Background(), "postgres://dbuser:dbpass@"+addr+"/secretdb?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	env.rt.db = down
	st, body, raw := health()
	if st != http.StatusServiceUnavailable || body["ok"] != false || wiresJSONAt(body, "postgres.state") != "unavailable" || body["project_dir"] == "" {
		t.Errorf("health with PostgreSQL down = %d %s; want 503, ok false, postgres unavailable, the project still named", st, raw)
	}
	if strings.Contains(raw, addr) || strings.Contains(raw, "dbuser") {
		t.Errorf("health shows the database's address or user: %s", raw)
	}
}

// TestSessionLockAcrossReplicas: two session stores on one database (two
// replicas of a box) never run turns of one session at once; a replica that
// dies mid-turn (its connections gone) leaves the session usable.
func TestSessionLockAcrossReplicas(t *testing.T) {
	pool := historyTestDB(t)
	a, b := newSessionStore(pool, true), newSessionStore(pool, true)
	defer a.close()
	defer b.close()
	ctx := context.Background()
	ref := newSessionRef("helper", "cred", "s1")
	release, err := a.acquire(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.acquire(ctx, ref); !errors.Is(err, errSessionBusy) {
		t.Fatalf("a turn on the other replica while one runs = %v; want errSessionBusy", err)
	}
	if _, err := a.acquire(ctx, ref); !errors.Is(err, errSessionBusy) {
		t.Fatalf("a second turn on the same replica = %v; want errSessionBusy", err)
	}
	other, err := b.acquire(ctx, newSessionRef("helper", "cred", "s2"))
	if err != nil {
		t.Fatalf("another session on the other replica = %v", err)
	}
	other()
	release()
	release, err = b.acquire(ctx, ref)
	if err != nil {
		t.Fatalf("after the first turn ended = %v", err)
	}
	// b's process dies mid-turn: the server sees its connection drop.
	_ = release // never called: the process is gone
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the dead replica's lock released", func() bool {
		r, err := a.acquire(ctx, ref)
		if err == nil {
			r()
		}
		return err == nil
	})
}

// TestWiresChatDeltaBeforeModelWaits streams a chat whose provider sends
// its first delta and then holds its stream open: the delta reaches the
// client while the provider waits (svc holds deltas back only until its
// model call would wait, never until the answer ends).
func TestWiresChatDeltaBeforeModelWaits(t *testing.T) {
	hold := benchHoldingProvider(t)
	env := newWiresEnv(t, "")
	env.rt.agents.models = func(p *modelProvider) modelClient { return newModelClient(p, nil) }
	env.rt.provider.Store(&modelProvider{Kind: providerOpenAI, APIKey: "sk-test", BaseURL: hold.URL + "/v1"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", env.url+"/openai/v1/chat/completions",
		strings.NewReader(`{"model":"helper","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set("Authorization", wiresBearer["Authorization"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the provider's delta did not come through while it held its stream open: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"content":"hi"`) {
			return
		}
	}
}
