package main

// Fuzz targets for every decoder a remote caller reaches (issue 8): the
// start and hook bodies through the real route table, the three chat wires'
// request decoders and one full chat handler, and the S3 endpoint with its
// SigV4 verification. `go test` runs their seeds (f.Add and
// testdata/fuzz/FuzzXxx) as ordinary tests; bench/fuzz.sh fuzzes each one
// for a while, outside CI.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzRotateEvery is how many journaling iterations share one journal
// directory before the fuzz runtime moves to a fresh one, so that the
// replay after each iteration stays cheap.
const fuzzRotateEvery = 64

// fuzzWaitLimit bounds every wait of the fuzz targets for the engine.
const fuzzWaitLimit = 10 * time.Second

// fuzzProject is the project the fuzz runtime serves: a workflow without an
// inputSchema, one with, one waiting on a hook, and the test agent.
var fuzzProject = map[string]string{
	"workflows/free.workflow.ts": `
export default async function free(input: any) { "use workflow"; return input; }`,
	"workflows/typed.workflow.ts": `
export const inputSchema = { type: "object", properties: { name: { type: "string", maxLength: 64 }, n: { type: "integer", minimum: 0 }, tags: { type: "array", items: { type: "string" } } }, required: ["name"] };
export default async function typed(input: { name: string; n?: number; tags?: string[] }) { "use workflow"; return { hello: input.name }; }`,
	"workflows/hooked.workflow.ts": `
import { createHook } from "svc";
export default async function hooked() { "use workflow"; const hook = createHook(); return { got: await hook }; }`,
	"deep-agents/helper/index.ts": agentTestSource,
}

// fuzzStatuses are the statuses the start and hook routes may answer
// (DESIGN §4); anything else, a 500 above all, is a bug.
var fuzzStatuses = []int{http.StatusAccepted, http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
	http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusServiceUnavailable}

// fuzzRuntime is an in-process runtime for the fuzz targets: one compiled
// project, an engine on a journal directory that rotates, and the real
// route table. One fuzz worker owns it; iterations run one at a time.
type fuzzRuntime struct {
	tb        testing.TB
	cat       *catalog
	parent    string // holds the journal directories
	dir       string // the current journal directory
	journals  int    // journaling iterations on dir
	rotations int    // journal directories given up so far
	rt        *runtimeCore
	srv       *server
}

// newFuzzRuntime compiles fuzzProject and opens the runtime; it is closed
// when tb ends.
func newFuzzRuntime(tb testing.TB) *fuzzRuntime {
	tb.Helper()
	proj := tb.TempDir()
	for name, src := range fuzzProject {
		writeFile(tb, proj, name, src)
	}
	cat, err := compileCatalog(proj, discardLogger())
	if err != nil || len(cat.Failed) > 0 {
		tb.Fatalf("compile the fuzz project: %v %v", err, cat.Failed)
	}
	fr := &fuzzRuntime{tb: tb, cat: cat, parent: tb.TempDir()}
	fr.dir = fr.newDir(tb)
	fr.open(tb)
	tb.Cleanup(func() { fr.rt.engine.close() })
	return fr
}

// newDir returns a fresh journal directory.
func (fr *fuzzRuntime) newDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp(fr.parent, "journal-")
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// open opens the engine on fr.dir and the server over it. The model is the
// agent tests' script, fresh per call so that nothing accumulates.
func (fr *fuzzRuntime) open(tb testing.TB) {
	tb.Helper()
	if err := fr.tryOpen(); err != nil {
		tb.Fatal(err)
	}
}

// tryOpen is open, returning the engine's error.
func (fr *fuzzRuntime) tryOpen() error {
	e, err := openEngine(engineOptions{Dir: fr.dir, Catalog: func() *catalog { return fr.cat },
		Env: func() map[string]string { return nil }, Log: discardLogger()})
	if err != nil {
		return fmt.Errorf("open the engine on %s: %w", fr.dir, err)
	}
	rt := &runtimeCore{log: discardLogger(), engine: soloFleet(e), proj: &project{Dir: fr.parent}, apiURL: "http://127.0.0.1:4242"}
	rt.catalog.Store(fr.cat)
	rt.gate.Store(&gateState{Open: true, Reason: gateProviderEnv})
	rt.provider.Store(&modelProvider{Kind: providerOpenAI, APIKey: "sk-test"})
	rt.agents = agentTestHost(fuzzModel{})
	rt.agents.record = e.recordTurn
	srv, err := newTestServer(rt)
	if err != nil {
		return err
	}
	fr.rt, fr.srv = rt, srv
	return nil
}

// fuzzModel answers as the agent tests' script does, with a fresh script
// per call (the script keeps every request), and "ok" to a request without
// messages, which the script does not expect.
type fuzzModel struct{}

// complete answers req.
func (fuzzModel) complete(ctx context.Context, req modelRequest, onDelta func(modelDelta)) (modelResponse, error) {
	if len(req.Messages) == 0 {
		return modelResponse{Model: req.Model, Text: "ok", StopReason: stopEnd}, nil
	}
	return (&agentScript{}).complete(ctx, req, onDelta)
}

// serve sends one request through the route table.
func (fr *fuzzRuntime) serve(method, target string, header http.Header, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	req.Host = "127.0.0.1" // a Host the guard admits
	for name, values := range header {
		req.Header[name] = values
	}
	rec := httptest.NewRecorder()
	fr.srv.ServeHTTP(rec, req)
	return rec
}

// runs returns the engine's run records by id.
func (fr *fuzzRuntime) runs() map[string]runRecord {
	list, _ := fr.rt.engine.list()
	out := make(map[string]runRecord, len(list))
	for _, r := range list {
		out[r.RunID] = r
	}
	return out
}

// replay closes the engine and reopens it on the same journal: every run it
// had must come back with the same workflow, trigger and input. Every
// fuzzRotateEvery calls, or when the journal did not reopen, the runtime
// then moves to a fresh journal.
func (fr *fuzzRuntime) replay(t *testing.T) {
	t.Helper()
	before := fr.runs()
	if err := fr.rt.engine.close(); err != nil {
		t.Fatalf("close the engine: %v", err)
	}
	err := fr.tryOpen()
	if err != nil {
		fr.rotate(t)
		if !fuzzTooDeep(err) {
			t.Fatalf("what was accepted does not replay: %v", err)
		}
		t.Errorf("what was accepted does not replay: %v", err)
		return
	}
	after := fr.runs()
	if len(after) != len(before) {
		t.Fatalf("after a reopen the journal holds %d runs; want the %d it had", len(after), len(before))
	}
	for id, b := range before {
		a, ok := after[id]
		if !ok || a.WorkflowName != b.WorkflowName || a.Trigger != b.Trigger || !fuzzSameJSON(a.Input, b.Input) {
			t.Fatalf("run %s after a reopen = %q %q input %q; want %q %q input %q", id, a.WorkflowName, a.Trigger, a.Input, b.WorkflowName, b.Trigger, b.Input)
		}
	}
	if fr.journals++; fr.journals >= fuzzRotateEvery {
		if err := fr.rt.engine.close(); err != nil {
			t.Fatalf("close the engine: %v", err)
		}
		fr.rotate(t)
	}
}

// rotate opens the runtime on a fresh journal directory, removing the
// current one; the engine must be closed.
func (fr *fuzzRuntime) rotate(t *testing.T) {
	t.Helper()
	os.RemoveAll(fr.dir)
	fr.dir, fr.journals = fr.newDir(t), 0
	fr.rotations++
	fr.open(t)
}

// fuzzSameJSON reports whether a and b are the same JSON text once both are
// HTML-escaped: the journal stores raw JSON through encoding/json, which
// escapes <, > and & in strings (the same value, other bytes).
func fuzzSameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	json.HTMLEscape(&x, a)
	json.HTMLEscape(&y, b)
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// fuzzTooDeep reports whether err is encoding/json refusing a document
// nested deeper than it reads (10000 levels).
func fuzzTooDeep(err error) bool {
	return err != nil && strings.Contains(err.Error(), "exceeded max depth")
}

// fuzzCheckAPIAnswer checks a start or hook answer: a documented status and
// a JSON body, {"error":{"code","message"}} when it is an error.
func fuzzCheckAPIAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if !slices.Contains(fuzzStatuses, rec.Code) {
		t.Fatalf("status %d (body %q); want one of %v", rec.Code, rec.Body.Bytes(), fuzzStatuses)
	}
	var answer struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		t.Fatalf("answer %q is not JSON: %v", rec.Body.Bytes(), err)
	}
	if rec.Code != http.StatusAccepted && (answer.Error == nil || answer.Error.Code == "" || answer.Error.Message == "") {
		t.Fatalf("error answer %q has no error code and message", rec.Body.Bytes())
	}
}

// fuzzCheckJSON checks that v re-marshals to valid JSON that is valid UTF-8.
func fuzzCheckJSON(t *testing.T, what string, v any) {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s does not re-marshal: %v", what, err)
	}
	var decoded json.RawMessage
	if err := json.Unmarshal(out, &decoded); fuzzTooDeep(err) {
		t.Errorf("%s re-marshals to JSON that does not decode: %v", what, err)
	} else if err != nil {
		t.Fatalf("%s re-marshals to invalid JSON %q: %v", what, out, err)
	}
	if !utf8.Valid(out) {
		t.Errorf("%s re-marshals to invalid UTF-8 %q", what, out)
	}
}

// fuzzNested returns n opening brackets of open, a value, and the closing ones.
func fuzzNested(n int, open, value, closing string) []byte {
	return []byte(strings.Repeat(open, n) + value + strings.Repeat(closing, n))
}

// fuzzJSONSeeds are JSON bodies, realistic and nasty, that the start and
// hook targets share.
func fuzzJSONSeeds() [][]byte {
	return [][]byte{
		nil,
		[]byte(`{}`),
		[]byte(`{"name":"ada","n":3,"tags":["x","y"]}`),
		[]byte(`{"name":"ada","n":-1}`),
		[]byte(`{"n":1}`),
		[]byte(`{"name":"` + strings.Repeat("a", 65) + `"}`),
		[]byte(` {"name" : "spaced" } `),
		[]byte(`[1,2,3]`),
		[]byte(`"just a string"`),
		[]byte(`null`),
		[]byte(`{"approved":true}`),
		[]byte(`{"name":"dup","name":"dup2"}`),
		[]byte(`{"name":"x"} trailing`),
		[]byte(`{"name":"x"`),
		[]byte(`{"name":"\ud800"}`),
		[]byte("{\"name\":\"\xff\xfe\"}"),
		[]byte(`{"name":"x","n":1e400}`),
		[]byte(`{"name":"x","n":123456789012345678901234567890}`),
		[]byte(`{"name":"x","n":-0}`),
		[]byte(`{"name":"x","__proto__":{"polluted":true}}`),
		[]byte(`{"name":"\u0000"}`),
		[]byte("\xef\xbb\xbf{}"),
		fuzzNested(64, `{"a":`, `{"name":"deep"}`, `}`),
		fuzzNested(9990, `[`, `1`, `]`),
		fuzzNested(10000, `[`, `1`, `]`),
		fuzzNested(9999, `{"a":`, `1`, `}`),
		fuzzNested(10001, `[`, ``, `]`),
	}
}

// FuzzStartBody posts fuzzed bodies to POST /api/workflows/{name}/start of a
// workflow without an inputSchema and of one with. The answer must be a
// documented status; a rejected start journals nothing; an accepted one is
// readable, its input re-marshals, and it survives a restart of the engine.
func FuzzStartBody(f *testing.F) {
	for i, body := range fuzzJSONSeeds() {
		f.Add(i%2 == 0, body)
		f.Add(i%2 == 1, body)
	}
	fr := newFuzzRuntime(f)
	f.Fuzz(func(t *testing.T, typed bool, body []byte) {
		name := "free"
		if typed {
			name = "typed"
		}
		before := fr.runs()
		rec := fr.serve(http.MethodPost, "/api/workflows/"+name+"/start", http.Header{"Content-Type": {"application/json"}}, body)
		fuzzCheckAPIAnswer(t, rec)
		after := fr.runs()
		if rec.Code != http.StatusAccepted {
			if len(after) != len(before) {
				t.Fatalf("a rejected start (%d) changed the runs from %d to %d", rec.Code, len(before), len(after))
			}
			return
		}
		var receipt startReceipt
		if err := json.Unmarshal(rec.Body.Bytes(), &receipt); err != nil || receipt.RunID == "" {
			t.Fatalf("receipt %q: %v", rec.Body.Bytes(), err)
		}
		run, ok := after[receipt.RunID]
		if !ok || len(after) != len(before)+1 {
			t.Fatalf("accepted run %s: found %v, runs %d -> %d", receipt.RunID, ok, len(before), len(after))
		}
		fuzzCheckJSON(t, "the accepted run's input", run.Input)
		fuzzCheckJSON(t, "the accepted run", run)
		fr.replay(t)
	})
}

// waitingHook starts a run of "hooked" and returns it with the token it
// waits on, once the hook is journaled.
func (fr *fuzzRuntime) waitingHook(t *testing.T) (runID, token string) {
	t.Helper()
	rc, err := fr.rt.engine.start(startRequest{Workflow: "hooked", Input: json.RawMessage(`{}`), Trigger: triggerHTTP})
	if err != nil {
		t.Fatalf("start hooked: %v", err)
	}
	deadline := time.Now().Add(fuzzWaitLimit)
	for time.Now().Before(deadline) {
		e := fr.rt.engine.held(0)
		e.mu.Lock()
		for tok, ref := range e.st.Hooks {
			if ref.RunID == rc.RunID {
				token = tok
			}
		}
		e.mu.Unlock()
		if token != "" {
			return rc.RunID, token
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("run %s did not wait on a hook within %v", rc.RunID, fuzzWaitLimit)
	return "", ""
}

// hookCall returns the hook call of a run of "hooked".
func (fr *fuzzRuntime) hookCall(t *testing.T, runID string) durableCall {
	t.Helper()
	r, ok := fr.rt.engine.get(runID)
	if !ok {
		t.Fatalf("run %s is gone", runID)
	}
	for _, c := range r.Steps {
		if c.Kind == callHook {
			return *c
		}
	}
	t.Fatalf("run %s has no hook call: %+v", runID, r.Steps)
	return durableCall{}
}

// FuzzHookBody posts fuzzed bodies to POST /api/hooks/{token}, with the
// token of a run waiting on its hook (token "") or a fuzzed one. The answer
// must be a documented status; a rejected resume leaves the run waiting; an
// accepted payload is recorded as sent, re-marshals, survives a restart of
// the engine, and the token is refused afterwards.
func FuzzHookBody(f *testing.F) {
	for _, body := range fuzzJSONSeeds() {
		f.Add("", body)
	}
	for _, token := range []string{"hook_nope", "hook_00000000000000000000000000000000", "..", "a%2Fb", "hook_\x00", strings.Repeat("h", 600)} {
		f.Add(token, []byte(`{"approved":true}`))
	}
	fr := newFuzzRuntime(f)
	var runID, live string
	f.Fuzz(func(t *testing.T, token string, body []byte) {
		if _, ok := fr.rt.engine.get(runID); !ok || fr.hookCall(t, runID).Status != runWaiting {
			runID, live = fr.waitingHook(t)
		}
		if token == "" {
			token = live
		}
		before := fr.runs()
		target := "/api/hooks/" + url.PathEscape(token)
		rec := fr.serve(http.MethodPost, target, http.Header{"Content-Type": {"application/json"}}, body)
		if path.Clean(target) != target && rec.Code == http.StatusTemporaryRedirect {
			return // ServeMux redirects a path with "." or ".." segments to its clean form
		}
		fuzzCheckAPIAnswer(t, rec)
		if after := fr.runs(); len(after) != len(before) {
			t.Fatalf("a hook request changed the runs from %d to %d", len(before), len(after))
		}
		call := fr.hookCall(t, runID)
		if rec.Code != http.StatusAccepted {
			if call.Status != runWaiting {
				t.Fatalf("a rejected resume (%d) moved the hook to %q", rec.Code, call.Status)
			}
			return
		}
		if token != live {
			t.Fatalf("token %q resumed the run waiting on %q", token, live)
		}
		want := body
		if len(want) == 0 {
			want = []byte("null")
		}
		if call.Status != runCompleted || !fuzzSameJSON(call.Result, compactJSON(want)) {
			t.Fatalf("hook call after the resume = %s %q; want completed %q", call.Status, call.Result, compactJSON(want))
		}
		fuzzCheckJSON(t, "the hook payload", call.Result)
		rotations := fr.rotations
		fr.replay(t)
		if fr.rotations != rotations {
			return // the journal did not replay (reported) or was retired
		}
		if again := fr.serve(http.MethodPost, target, nil, []byte(`{}`)); again.Code != http.StatusNotFound && again.Code != http.StatusConflict {
			t.Fatalf("the used token answered %d after a restart; want 404 or 409", again.Code)
		}
		if got := fr.hookCall(t, runID).Result; !fuzzSameJSON(got, call.Result) {
			t.Fatalf("hook payload after a restart = %q; want %q", got, call.Result)
		}
	})
}

// fuzzIsJSONObject reports whether raw is one valid JSON object.
func fuzzIsJSONObject(raw json.RawMessage) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(raw, &v) == nil && v != nil
}

// fuzzCheckWireDecode decodes body with c and checks the result: a 4xx
// wire error, or a request naming an agent whose messages have known roles,
// tool calls with object arguments, session keys within their limit, and
// that marshals for a model provider, as valid UTF-8 when the input was.
func fuzzCheckWireDecode(t *testing.T, c wireCodec, r *http.Request, body []byte) {
	t.Helper()
	wr, e := c.decode(r, body)
	if e != nil {
		if e.Status < 400 || e.Status > 499 || e.Kind == "" || e.Message == "" {
			t.Fatalf("decode error = %+v; want a 4xx with a kind and a message", e)
		}
		return
	}
	if wr == nil || wr.Agent == "" {
		t.Fatalf("decode = %+v without an error; want a request naming an agent", wr)
	}
	for i, m := range wr.Messages {
		switch {
		case m.Role == "user" && len(m.ToolCalls) == 0 && m.ToolCallID == "" && !m.IsError:
		case m.Role == "assistant" && m.ToolCallID == "" && !m.IsError:
		case m.Role == "tool" && len(m.ToolCalls) == 0:
		default:
			t.Fatalf("message %d = %+v; want a well-formed user, assistant or tool message", i, m)
		}
		for _, call := range m.ToolCalls {
			if !fuzzIsJSONObject(call.Arguments) {
				t.Fatalf("message %d calls %q with arguments %q; want a JSON object", i, call.Name, call.Arguments)
			}
		}
	}
	for _, tool := range wr.ClientTools {
		if tool.Parameters != nil && !json.Valid(tool.Parameters) {
			t.Fatalf("client tool %q has parameters %q; want JSON", tool.Name, tool.Parameters)
		}
	}
	if len(wr.SessionKey) > sessionMaxKeyLength || len(wr.ConversationKey) > sessionMaxKeyLength {
		t.Fatalf("session keys of %d and %d bytes; limit %d", len(wr.SessionKey), len(wr.ConversationKey), sessionMaxKeyLength)
	}
	out, err := json.Marshal(modelRequest{Model: wr.Agent, System: wr.System, Messages: wr.Messages, Tools: wr.ClientTools})
	if err != nil {
		t.Fatalf("the decoded request does not marshal for a provider: %v", err)
	}
	if utf8.Valid(body) && !utf8.Valid(out) {
		t.Fatalf("valid UTF-8 in, invalid UTF-8 out: %q", out)
	}
}

// fuzzWireRequest is the request a wire decodes: the session headers and,
// for AG-UI, the agent of the path.
func fuzzWireRequest(session, conversation string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set(wireHeaderSession, session)
	r.Header.Set(wireHeaderConversation, conversation)
	r.SetPathValue("agent", "helper")
	return r
}

// fuzzWireSeeds adds the wire targets' seeds: bodies with both session
// headers empty, then a few with headers.
func fuzzWireSeeds(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add(b, "", "")
	}
	f.Add(bodies[0], "sess-1", "")
	f.Add(bodies[0], "", "conv-1")
	f.Add(bodies[0], strings.Repeat("s", sessionMaxKeyLength+1), "")
	f.Add(bodies[0], "", "\xff\xfe")
}

// FuzzOpenAIChatRequest fuzzes openAIWire.decode.
func FuzzOpenAIChatRequest(f *testing.F) {
	fuzzWireSeeds(f,
		wiresOpenAIBody("helper", "hello", false),
		wiresOpenAIBody("helper", "hello", true),
		`{"model":"helper","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":[{"type":"text","text":"dev"}]},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_completion_tokens":5,"temperature":0.2}`,
		`{"model":"helper","messages":[{"role":"user","content":"call add"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"add","arguments":"{\"a\":1,\"b\":2}"}},{"id":"c2","type":"function","function":{"name":"x","arguments":"not json"}}]},{"role":"tool","tool_call_id":"c1","content":"3"}]}`,
		`{"model":"helper","messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"[1,2]"}},{"function":{"arguments":"null"}},{"function":{"arguments":"{\"a\":1} trailing"}}]}]}`,
		`{"model":"helper","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"client","parameters":{"type":"object"}}},{"type":"function","function":{"name":""}},{"type":"other"}]}`,
		`{"model":"helper","messages":[{"role":"wizard","content":"x"}]}`,
		`{"model":"helper","messages":[]}`,
		`{"model":"","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"helper","messages":[{"role":"user","content":{"nested":true}}]}`,
		`{"model":"helper","messages":"nope"}`,
		"{\"model\":\"helper\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		`{"model":"helper","messages":[{"role":"user","content":"x"}],"max_tokens":-1,"temperature":1e400}`,
		`[`,
	)
	f.Fuzz(func(t *testing.T, body, session, conversation string) {
		fuzzCheckWireDecode(t, openAIWire{}, fuzzWireRequest(session, conversation), []byte(body))
	})
}

// FuzzAnthropicMessagesRequest fuzzes anthropicWire.decode.
func FuzzAnthropicMessagesRequest(f *testing.F) {
	fuzzWireSeeds(f,
		wiresAnthropicBody("helper", "hello", false),
		wiresAnthropicBody("helper", "hello", true),
		`{"model":"helper","max_tokens":10,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{}}]}]}`,
		`{"model":"helper","max_tokens":10,"messages":[{"role":"user","content":"add"},{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"add","input":{"a":1,"b":2}},{"type":"tool_use","id":"t2","name":"x","input":[1]}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"3"}],"is_error":false},{"type":"tool_result","tool_use_id":"t2","content":"bad","is_error":true}]}]}`,
		`{"model":"helper","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"client","description":"d","input_schema":{"type":"object"}},{"name":""}]}`,
		`{"model":"helper","messages":[{"role":"system","content":"x"}]}`,
		`{"model":"helper","messages":[{"role":"user","content":42}]}`,
		`{"model":"helper","messages":[{"role":"user","content":[{"type":"tool_use","input":null}]}]}`,
		`{"model":"helper","messages":[]}`,
		`{"messages":[{"role":"user","content":"x"}]}`,
		"{\"model\":\"helper\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}",
		`null`,
	)
	f.Fuzz(func(t *testing.T, body, session, conversation string) {
		fuzzCheckWireDecode(t, anthropicWire{}, fuzzWireRequest(session, conversation), []byte(body))
	})
}

// FuzzAGUIRequest fuzzes aguiWire.decode, with the agent in the path and,
// on odd seeds, in forwardedProps (the /chat route).
func FuzzAGUIRequest(f *testing.F) {
	fuzzWireSeeds(f,
		wiresAGUIBody("", "hello"),
		wiresAGUIBody("thread-1", "hello"),
		`{"threadId":"t","runId":"r","messages":[{"id":"1","role":"user","content":"refund"},{"id":"2","role":"assistant","toolCalls":[{"id":"c1","type":"function","function":{"name":"refund","arguments":"{\"orderId\":\"o1\"}"}}]},{"id":"3","role":"tool","toolCallId":"c1","content":"","error":"denied"}],"resume":[{"interruptId":"c1","status":"resolved","payload":{"approved":false}},{"interruptId":"c2","status":"cancelled"},{"interruptId":"c3","status":"resolved","payload":"yes"}]}`,
		`{"threadId":"t","messages":[{"role":"activity","content":{"x":1}},{"role":"system","content":"sys"}],"context":[{"description":"d","value":"v"}],"tools":[{"name":"client","parameters":{"type":"object"}},{"name":""}],"forwardedProps":{"agent":"helper"}}`,
		`{"threadId":null,"messages":[]}`,
		`{"messages":[]}`,
		`{"threadId":"`+strings.Repeat("t", sessionMaxKeyLength+1)+`"}`,
		`{"threadId":"","forwardedProps":{"agent":""}}`,
		`{"threadId":"","forwardedProps":"helper"}`,
		"{\"threadId\":\"\",\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}",
	)
	f.Fuzz(func(t *testing.T, body, session, conversation string) {
		inBody := len(body)%2 == 1
		fuzzCheckWireDecode(t, aguiWire{agentInBody: inBody}, fuzzWireRequest(session, conversation), []byte(body))
	})
}

// fuzzChatRoutes are the chat routes FuzzChatWires posts to, by its wire
// argument modulo their count.
var fuzzChatRoutes = []string{"/openai/v1/chat/completions", "/anthropic/v1/messages", "/agui/helper", "/chat"}

// fuzzChatStatuses are the statuses a chat turn may answer with the
// scripted model: a refused credential or request, an unknown agent, a
// body too large, the script's rate limit, or no session store.
var fuzzChatStatuses = []int{http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound,
	http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusServiceUnavailable}

// FuzzChatWires posts fuzzed bodies through the full chat handler
// (serveChat) of each wire, answered by the agent tests' scripted model:
// the status must be an expected one, the answer JSON or an event stream
// of JSON events, and the recorded turns must survive a restart.
func FuzzChatWires(f *testing.F) {
	const openai, anthropic, agui, chat = 0, 1, 2, 3
	seeds := []struct {
		wire uint8
		body string
	}{
		{openai, wiresOpenAIBody("helper", "hello", false)},
		{anthropic, wiresAnthropicBody("helper", "hello", true)},
		{agui, wiresAGUIBody("", "hello")},
		{chat, wiresAGUIBody("", "call add {\"a\":1,\"b\":2}")},
		{openai, wiresOpenAIBody("helper", "call refund {\"orderId\":\"o1\"}", true)},
		{anthropic, wiresAnthropicBody("helper", "call boom {}", false)},
		{openai, wiresOpenAIBody("helper", "call add not-json", false)},
		{chat, wiresAGUIBody("", "call later {}")},
		{anthropic, wiresAnthropicBody("helper", "loop", true)},
		{openai, wiresOpenAIBody("helper", "fail", true)},
		{openai, wiresOpenAIBody("nobody", "hello", false)},
		{openai, `{"model":"helper","messages":[{"role":"system","content":"only a system message"}]}`},
		{openai, `{"model":"helper","messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"add","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}]}`},
		{openai, `{"model":"helper","stream":true,"messages":[{"role":"user","content":"call client {}"}],"tools":[{"type":"function","function":{"name":"client"}}]}`},
		{anthropic, `{"model":"helper","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"x"}]}]}`},
		{agui, `{"threadId":"","messages":[{"role":"user","content":"x"}],"resume":[{"interruptId":"c1","status":"resolved"}]}`},
		{chat, `{"threadId":"","messages":[],"forwardedProps":{"agent":"helper"}}`},
		{agui, `{`},
		{openai, `{"model":"helper","messages":[{"role":"user","content":"call client ` + strings.ReplaceAll(string(fuzzNested(9997, `{"a":`, `1`, `}`)), `"`, `\"`) + `"}],"tools":[{"type":"function","function":{"name":"client"}}]}`},
		{anthropic, `{"model":"helper","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"add","input":` + string(fuzzNested(9994, `{"a":`, `1`, `}`)) + `}]},{"role":"user","content":"y"}]}`},
	}
	for _, s := range seeds {
		f.Add(s.wire, "tok-a", "", s.body)
	}
	f.Add(uint8(openai), "", "", seeds[0].body)
	f.Add(uint8(anthropic), "tok-a", "sess-1", seeds[1].body)
	fr := newFuzzRuntime(f)
	f.Fuzz(func(t *testing.T, wire uint8, credential, session, body string) {
		header := http.Header{"Content-Type": {"application/json"}}
		if credential != "" {
			header.Set("Authorization", "Bearer "+credential)
		}
		if session != "" {
			header.Set(wireHeaderSession, session)
		}
		before := len(fr.runs())
		ctx, cancel := context.WithTimeout(context.Background(), fuzzWaitLimit)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, fuzzChatRoutes[int(wire)%len(fuzzChatRoutes)], strings.NewReader(body))
		req.Host = "127.0.0.1" // a Host the guard admits
		for name, values := range header {
			req.Header[name] = values
		}
		rec := httptest.NewRecorder()
		fr.srv.ServeHTTP(rec, req)
		if !slices.Contains(fuzzChatStatuses, rec.Code) {
			t.Fatalf("status %d (body %q); want one of %v", rec.Code, rec.Body.Bytes(), fuzzChatStatuses)
		}
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			for _, ev := range wiresParseSSE(rec.Body.Bytes()) {
				if ev.Data != "[DONE]" && !json.Valid([]byte(ev.Data)) {
					t.Fatalf("event %q carries %q; want JSON", ev.Name, ev.Data)
				}
			}
		} else if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer %q is not JSON", rec.Body.Bytes())
		}
		if len(fr.runs()) != before {
			fr.replay(t)
		}
	})
}

// fuzzS3Now is the pinned clock of the S3 fuzz targets' servers.
var fuzzS3Now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fuzzS3Secret is the content of the object "bucket/obj" every S3 fuzz
// server holds: no unauthenticated answer may carry it.
const fuzzS3Secret = "object content only a signed request may read"

// fuzzS3RotateEvery is how many requests one S3 fuzz root serves before it
// is replaced by a fresh one, which bounds the tree compared per request.
const fuzzS3RotateEvery = 64

// fuzzS3Request turns fuzzed parts into the request a server would hand
// to the handler: built, written in HTTP/1.1 and parsed back as net/http's
// server does. Headers are "Name: value" lines. It reports false for parts
// that are not an HTTP request.
func fuzzS3Request(method, target, headers string, body []byte) (*http.Request, bool) {
	if !strings.HasPrefix(target, "/") {
		target = "/" + target
	}
	req, err := http.NewRequest(method, "http://s3.test"+target, bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	for _, line := range strings.Split(headers, "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok {
			req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
	}
	var wire bytes.Buffer
	if err := req.Write(&wire); err != nil {
		return nil, false
	}
	parsed, err := http.ReadRequest(bufio.NewReader(&wire))
	if err != nil {
		return nil, false
	}
	return parsed, true
}

// fuzzS3Unescape decodes a query name or value, keeping one that does not
// decode as it is (what SigV4 signers see of a malformed escape).
func fuzzS3Unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// fuzzS3StripAuth removes the SigV4 parameters from a query, so that the
// signer's own are the only ones.
func fuzzS3StripAuth(raw string) string {
	var kept []string
	for _, p := range strings.Split(raw, "&") {
		name, _, _ := strings.Cut(p, "=")
		if p != "" && !strings.HasPrefix(fuzzS3Unescape(name), "X-Amz-") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "&")
}

// fuzzS3Sign signs r with SigV4 as the specification describes, written
// apart from the server's code: the decoded path and query re-encoded, the
// query sorted by name then value, header values trimmed with inner
// whitespace collapsed. Header mode signs host, x-amz-*, content-* and
// range; a presigned URL signs host only.
func fuzzS3Sign(r *http.Request, secret string, payload string, presigned bool) s3TestSigning {
	amzDate := fuzzS3Now.Format("20060102T150405Z")
	scope := amzDate[:8] + "/" + s3TestRegion + "/s3/aws4_request"
	r.URL.RawQuery = fuzzS3StripAuth(r.URL.RawQuery)
	r.Header.Del("Authorization")
	names := []string{"host"}
	if presigned {
		payload = s3UnsignedPayload
		auth := "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + s3TestEscape(s3TestAccessKey+"/"+scope, false) +
			"&X-Amz-Date=" + amzDate + "&X-Amz-Expires=300&X-Amz-SignedHeaders=host"
		r.URL.RawQuery = strings.TrimPrefix(r.URL.RawQuery+"&"+auth, "&")
	} else {
		r.Header.Set("X-Amz-Date", amzDate)
		r.Header.Set("X-Amz-Content-Sha256", payload)
		for name := range r.Header {
			lower := strings.ToLower(name)
			if (strings.HasPrefix(lower, "x-amz-") || strings.HasPrefix(lower, "content-") || lower == "range") && !slices.Contains(names, lower) {
				names = append(names, lower)
			}
		}
	}
	slices.Sort(names)
	var headers strings.Builder
	for _, name := range names {
		values := r.Header.Values(name)
		if name == "host" {
			values = []string{r.Host}
		}
		for i, v := range values {
			values[i] = strings.Join(strings.Fields(v), " ")
		}
		headers.WriteString(name + ":" + strings.Join(values, ",") + "\n")
	}
	var query [][2]string
	for _, p := range strings.Split(r.URL.RawQuery, "&") {
		if p != "" {
			name, value, _ := strings.Cut(p, "=")
			query = append(query, [2]string{s3TestEscape(fuzzS3Unescape(name), false), s3TestEscape(fuzzS3Unescape(value), false)})
		}
	}
	slices.SortFunc(query, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	pairs := make([]string, len(query))
	for i, p := range query {
		pairs[i] = p[0] + "=" + p[1]
	}
	signed := strings.Join(names, ";")
	canonical := strings.Join([]string{r.Method, s3TestEscape(r.URL.Path, true), strings.Join(pairs, "&"), headers.String(), signed, payload}, "\n")
	key := s3TestSigningKey(secret, amzDate[:8])
	sig := hex.EncodeToString(s3TestHMAC(key, "AWS4-HMAC-SHA256\n"+amzDate+"\n"+scope+"\n"+s3TestHash([]byte(canonical))))
	if presigned {
		r.URL.RawQuery += "&X-Amz-Signature=" + sig
	} else {
		r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+s3TestAccessKey+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
	}
	return s3TestSigning{key: key, amzDate: amzDate, scope: scope, signature: sig}
}

// fuzzS3Env is an S3 server for a fuzz target, its root inside a parent
// directory that also holds a file the server must never touch.
type fuzzS3Env struct {
	parent, root string
	server       *s3Server
	served       int // requests served by this root
}

// newFuzzS3Env builds the server and a file beside its root.
func newFuzzS3Env(tb testing.TB) *fuzzS3Env {
	tb.Helper()
	env := &fuzzS3Env{parent: tb.TempDir()}
	env.root = filepath.Join(env.parent, "s3")
	writeFile(tb, env.parent, "outside/secret", "must stay as it is")
	env.reset(tb)
	return env
}

// reset replaces the root by a fresh one holding bucket/obj, stored by a
// signed PUT.
func (env *fuzzS3Env) reset(tb testing.TB) {
	tb.Helper()
	os.RemoveAll(env.root)
	s, err := newS3Server(env.root, s3TestAccessKey, s3TestSecretKey)
	if err != nil {
		tb.Fatal(err)
	}
	s.logger, s.now = discardLogger(), func() time.Time { return fuzzS3Now }
	if err := s.ensureBucket("bucket"); err != nil {
		tb.Fatal(err)
	}
	env.server, env.served = s, 0
	req, _ := fuzzS3Request(http.MethodPut, "/bucket/obj", "", []byte(fuzzS3Secret))
	fuzzS3Sign(req, s3TestSecretKey, s3TestHash([]byte(fuzzS3Secret)), false)
	if rec := env.serve(req); rec.Code != http.StatusOK {
		tb.Fatalf("PUT bucket/obj = %d %s", rec.Code, rec.Body.Bytes())
	}
}

// serve answers one request.
func (env *fuzzS3Env) serve(r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	env.server.ServeHTTP(rec, r)
	env.served++
	return rec
}

// fuzzTree returns every file and directory under dir with the SHA-256 of
// each file's content.
func fuzzTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			tree[path] = "dir"
			return nil
		}
		data, err := os.ReadFile(path)
		tree[path] = s3TestHash(data)
		return err
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return tree
}

// FuzzS3Request sends fuzzed requests (method, path, query, headers, body)
// to the S3 server, unsigned as fuzzed, signed with a wrong key, signed
// right, or presigned right. Nothing may answer 5xx but a NotImplemented;
// nothing outside the root may change; the root holds only buckets and the
// server's own directories, and no temporary file outlives a request; an
// unsigned or wrongly signed request changes nothing and reads nothing.
func FuzzS3Request(f *testing.F) {
	const unsigned, wrongKey, signed, presigned = 0, 1, 2, 3
	put := "Content-Type: text/plain\nx-amz-meta-color: blue"
	for _, mode := range []uint8{unsigned, wrongKey, signed, presigned} {
		f.Add(mode, "GET", "/bucket/obj", "", []byte(nil))
		f.Add(mode, "PUT", "/bucket/new", put, []byte("data"))
	}
	seeds := []struct {
		method, target, headers string
		body                    []byte
	}{
		{"GET", "/", "", nil},
		{"GET", "/bucket?list-type=2&prefix=o&delimiter=/&max-keys=1&encoding-type=url", "", nil},
		{"GET", "/bucket?list-type=2&continuation-token=%%%", "", nil},
		{"HEAD", "/bucket/obj", "Range: bytes=0-3", nil},
		{"GET", "/bucket/obj?response-content-type=x%2Fy", "Range: bytes=-5", nil},
		{"PUT", "/bucket2", "", []byte("<CreateBucketConfiguration><LocationConstraint>x</LocationConstraint></CreateBucketConfiguration>")},
		{"PUT", "/bucket/copy", "X-Amz-Copy-Source: /bucket/obj\nX-Amz-Metadata-Directive: REPLACE", nil},
		{"PUT", "/bucket/copy", "X-Amz-Copy-Source: /bucket/%2E%2E%2Foutside%2Fsecret", nil},
		{"POST", "/bucket?delete", "", []byte("<Delete><Object><Key>obj</Key></Object><Object><Key>../x</Key></Object></Delete>")},
		{"POST", "/bucket/big?uploads", "", nil},
		{"PUT", "/bucket/big?partNumber=1&uploadId=00000000000000000000000000000000", "", []byte("part")},
		{"POST", "/bucket/big?uploadId=../../outside", "", []byte("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>")},
		{"DELETE", "/bucket/obj", "", nil},
		{"DELETE", "/bucket", "", nil},
		{"GET", "/bucket/../outside/secret", "", nil},
		{"GET", "/bucket/%2E%2E%2F%2E%2E%2Foutside%2Fsecret", "", nil},
		{"PUT", "/%2E%2E/outside", "", []byte("x")},
		{"PUT", "/.tmp/x", "", []byte("x")},
		{"PUT", "/bucket//etc/passwd", "", []byte("x")},
		{"PUT", "/bucket/%FF", "", []byte("x")},
		{"PUT", "/bucket/chunked", "Content-Encoding: aws-chunked\nX-Amz-Decoded-Content-Length: 4\nX-Amz-Content-Sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER\nX-Amz-Trailer: x-amz-checksum-crc32", []byte("4\r\ndata\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n")},
		{"PUT", "/bucket/chunked", "X-Amz-Decoded-Content-Length: 99\nX-Amz-Content-Sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD", []byte("ffffffffffffffff;chunk-signature=00\r\n")},
		{"PUT", "/bucket/md5", "Content-MD5: AAAA", []byte("x")},
		{"PUT", "/bucket/sum", "x-amz-checksum-sha256: AAAA", []byte("x")},
		{"GET", "/bucket/obj?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a/b/c/s3/aws4_request&X-Amz-Date=x&X-Amz-Expires=-1&X-Amz-SignedHeaders=host&X-Amz-Signature=00", "", nil},
		{"GET", "/bucket/obj", "Authorization: AWS4-HMAC-SHA256 Credential=AKIDSVCTEST/20250601/r/s3/aws4_request,SignedHeaders=host,Signature=00\nX-Amz-Date: 20250601T120000Z\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD", nil},
		{"GET", "/bucket/obj", "Authorization: AWS4-HMAC-SHA256 Credential=/,", nil},
		{"GET", "/bucket/obj?acl&tagging", "", nil},
	}
	for i, s := range seeds {
		f.Add(uint8(signed), s.method, s.target, s.headers, s.body)
		f.Add(uint8([]int{unsigned, wrongKey, presigned}[i%3]), s.method, s.target, s.headers, s.body)
	}
	env := newFuzzS3Env(f)
	f.Fuzz(func(t *testing.T, mode uint8, method, target, headers string, body []byte) {
		if env.served >= fuzzS3RotateEvery {
			env.reset(t)
		}
		r, ok := fuzzS3Request(method, target, headers, body)
		if !ok {
			return
		}
		mode %= 4
		payload := r.Header.Get("X-Amz-Content-Sha256")
		if payload == "" {
			payload = s3TestHash(body)
		}
		switch mode {
		case wrongKey:
			fuzzS3Sign(r, "not-the-secret", payload, false)
		case signed, presigned:
			fuzzS3Sign(r, s3TestSecretKey, payload, mode == presigned)
		}
		before := fuzzTree(t, env.parent)
		rec := env.serve(r)
		if rec.Code >= 500 && !(rec.Code == http.StatusNotImplemented && strings.Contains(rec.Body.String(), "<Code>NotImplemented</Code>")) {
			t.Fatalf("%s %s = %d %s; want no server error", r.Method, r.URL, rec.Code, rec.Body.Bytes())
		}
		after := fuzzTree(t, env.parent)
		for path, sum := range after {
			rel, _ := filepath.Rel(env.root, path)
			first, _, _ := strings.Cut(rel, string(filepath.Separator))
			switch {
			case strings.HasPrefix(rel, ".."):
				if before[path] != sum {
					t.Fatalf("%s %s wrote %s outside the root", r.Method, r.URL, path)
				}
			case first == s3TmpDir && rel != s3TmpDir:
				t.Fatalf("%s %s left %s behind", r.Method, r.URL, path)
			case first != "." && first != s3TmpDir && first != s3UploadsDir && s3CheckBucketName(first) != nil:
				t.Fatalf("%s %s created %s in the root", r.Method, r.URL, path)
			}
		}
		for path := range before {
			if _, ok := after[path]; !ok && !strings.HasPrefix(path, env.root) {
				t.Fatalf("%s %s removed %s outside the root", r.Method, r.URL, path)
			}
		}
		if mode == signed || mode == presigned {
			return
		}
		if rec.Code < 400 || rec.Code > 499 {
			t.Fatalf("unauthenticated %s %s = %d %s; want a 4xx", r.Method, r.URL, rec.Code, rec.Body.Bytes())
		}
		if strings.Contains(rec.Body.String(), fuzzS3Secret) {
			t.Fatalf("unauthenticated %s %s read the object", r.Method, r.URL)
		}
		if len(after) != len(before) {
			t.Fatalf("unauthenticated %s %s changed the files: %d before, %d after", r.Method, r.URL, len(before), len(after))
		}
		for path, sum := range before {
			if after[path] != sum {
				t.Fatalf("unauthenticated %s %s changed %s", r.Method, r.URL, path)
			}
		}
	})
}

// fuzzMutateAlphabet is what a tampered byte becomes: lower-case letters
// past the hex digits and digits, so that no tampering is a mere change of
// case of a hex digit (which some encodings ignore).
const fuzzMutateAlphabet = "ghijklmnopqrstuvwxyz0123456789"

// fuzzMutate replaces the byte at pos (modulo the length) of s by another
// byte of fuzzMutateAlphabet; it reports false for an empty s.
func fuzzMutate(s string, pos int) (string, bool) {
	if s == "" {
		return s, false
	}
	i := pos % len(s)
	for k := range len(fuzzMutateAlphabet) {
		if c := fuzzMutateAlphabet[(pos+k)%len(fuzzMutateAlphabet)]; c != s[i] {
			return s[:i] + string(c) + s[i+1:], true
		}
	}
	return s, false
}

// Parts of a signed request FuzzSigV4 tampers with, by its part argument.
const (
	fuzzPartMethod = iota
	fuzzPartPath
	fuzzPartQuery
	fuzzPartHeader
	fuzzPartHost
	fuzzPartAuthorization
	fuzzPartBody
	fuzzParts
)

// fuzzS3Tamper changes one byte of one signed part of r (whose body, as
// sent, is wire): the method, the decoded path, a decoded query name or
// value, a signed header's value, the host, the Authorization header, or
// the body when the signature covers it. It reports false when the part
// is empty or not signed.
func fuzzS3Tamper(r *http.Request, wire []byte, presigned bool, part, pos int) bool {
	var ok bool
	switch part {
	case fuzzPartMethod:
		r.Method, ok = fuzzMutate(r.Method, pos)
	case fuzzPartPath:
		r.URL.Path, ok = fuzzMutate(r.URL.Path, pos)
		r.URL.RawPath = ""
	case fuzzPartQuery:
		params := strings.Split(r.URL.RawQuery, "&")
		i := pos % len(params)
		name, value, _ := strings.Cut(params[i], "=")
		name, value = fuzzS3Unescape(name), fuzzS3Unescape(value)
		if value, ok = fuzzMutate(value, pos); !ok {
			name, ok = fuzzMutate(name, pos)
		}
		params[i] = url.QueryEscape(name) + "=" + url.QueryEscape(value)
		r.URL.RawQuery = strings.Join(params, "&")
	case fuzzPartHeader:
		var signed []string
		for name := range r.Header {
			lower := strings.ToLower(name)
			if !presigned && (strings.HasPrefix(lower, "x-amz-") || strings.HasPrefix(lower, "content-") || lower == "range") {
				signed = append(signed, name)
			}
		}
		if len(signed) == 0 {
			r.Host, ok = fuzzMutate(r.Host, pos)
			break
		}
		slices.Sort(signed)
		name := signed[pos%len(signed)]
		r.Header[name][0], ok = fuzzMutate(r.Header[name][0], pos/len(signed))
	case fuzzPartHost:
		r.Host, ok = fuzzMutate(r.Host, pos)
	case fuzzPartAuthorization:
		if presigned {
			return false
		}
		var auth string
		auth, ok = fuzzMutate(r.Header.Get("Authorization"), pos)
		r.Header.Set("Authorization", auth)
	case fuzzPartBody:
		if presigned || len(wire) == 0 {
			return false
		}
		tampered, _ := fuzzMutate(string(wire), pos)
		r.Body, ok = io.NopCloser(strings.NewReader(tampered)), true
	}
	return ok
}

// FuzzSigV4 signs fuzzed requests (Authorization header with a hex SHA-256
// or an aws-chunked body, or a presigned URL) as the specification says,
// then checks s3Server.authenticate: the request as signed verifies, body
// included, while the same request with one byte of one signed part
// changed does not (or its body fails as it is read).
func FuzzSigV4(f *testing.F) {
	f.Add(false, false, "GET", "/bucket/obj", "", []byte(nil), uint8(fuzzPartAuthorization), uint16(100))
	f.Add(false, false, "PUT", "/bucket/a%20b/c?x=1&y=%2F&y=a+b&z", "Content-Type: text/plain\nx-amz-meta-a:  spaced   value \nx-amz-meta-a: again", []byte("body"), uint8(fuzzPartBody), uint16(2))
	f.Add(false, true, "PUT", "/bucket/streamed", "x-amz-meta-k: v", []byte(strings.Repeat("chunk data ", 5)), uint8(fuzzPartBody), uint16(40))
	f.Add(true, false, "GET", "/bucket/obj?response-content-type=text%2Fplain", "", []byte(nil), uint8(fuzzPartQuery), uint16(7))
	f.Add(true, false, "PUT", "/bucket/%E2%9C%93", "", []byte("up"), uint8(fuzzPartPath), uint16(3))
	f.Add(false, false, "DELETE", "/bucket/obj", "Range: bytes=0-1", []byte(nil), uint8(fuzzPartHeader), uint16(5))
	f.Add(false, false, "HEAD", "/bucket/%ZZ?%zz=%", "", []byte(nil), uint8(fuzzPartMethod), uint16(0))
	f.Add(false, false, "GET", "/", "x-amz-meta-tab: a\tb", []byte(nil), uint8(fuzzPartHost), uint16(1))
	f.Add(false, true, "PUT", "/bucket/empty", "", []byte(nil), uint8(fuzzPartBody), uint16(9))
	f.Add(true, false, "POST", "/bucket?X-Amz-Signature=forged&delete", "", []byte("<Delete/>"), uint8(fuzzPartQuery), uint16(4))
	env := newFuzzS3Env(f)
	f.Fuzz(func(t *testing.T, presigned, chunked bool, method, target, header string, body []byte, part uint8, pos uint16) {
		chunked = chunked && !presigned
		// build returns the request signed right, and its body as sent.
		build := func() (*http.Request, []byte, bool) {
			headers, sent, payload := header, body, s3TestHash(body)
			if chunked {
				headers += "\nContent-Encoding: aws-chunked\nX-Amz-Decoded-Content-Length: " + fmt.Sprint(len(body))
				sent = s3TestChunked(body, 16, &s3TestSigning{signature: strings.Repeat("0", 64)}, "")
				payload = s3StreamingSigned
			}
			r, ok := fuzzS3Request(method, target, headers, sent)
			if !ok {
				return nil, nil, false
			}
			sig := fuzzS3Sign(r, s3TestSecretKey, payload, presigned)
			if chunked {
				sent = s3TestChunked(body, 16, &sig, "")
				r.Body = io.NopCloser(bytes.NewReader(sent))
			}
			return r, sent, true
		}
		r, _, ok := build()
		if !ok {
			return
		}
		if err := env.server.authenticate(r); err != nil {
			t.Fatalf("%s %s signed right does not verify: %v\n%v", r.Method, r.URL, err, r.Header)
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Fatalf("%s %s signed right: its body does not verify: %v", r.Method, r.URL, err)
		}
		tampered, wire, _ := build()
		if !fuzzS3Tamper(tampered, wire, presigned, int(part)%fuzzParts, int(pos)) {
			return
		}
		err := env.server.authenticate(tampered)
		if err == nil {
			_, err = io.ReadAll(tampered.Body)
		}
		if err == nil {
			t.Fatalf("%s %s verifies with part %d tampered (host %q, headers %v)", tampered.Method, tampered.URL, int(part)%fuzzParts, tampered.Host, tampered.Header)
		}
	})
}
