package main

// A fake model provider on loopback for the package's tests: it speaks
// OpenAI chat completions and Anthropic messages, whole and streamed with
// real SSE framing, records what it receives, validates the tool-call
// bookkeeping both vendors enforce, and answers from a deterministic script
// keyed on the request's last message:
//
//   - tool results (OpenAI tool messages ending the request, or an Anthropic
//     user message of tool_result blocks): "tool <name> said: <content>",
//     one line per result, the name looked up in the request's history;
//   - a user message with lines "call <tool> <json-object>" (for example
//     call add {"a":2,"b":3}): one tool call per such line, ids call_1,
//     call_2, … counted across the fake's life, or the id a line names
//     after the object ("call add {} as dup1", as a hostile model may),
//     stop reason tool_calls / tool_use;
//   - a user message "hang": no answer until the caller hangs up (at
//     most a minute, counted in hungUp), as a provider that never answers;
//   - a user message "json <text>": <text> as the answer, as a model
//     obeying a JSON format (tests read the format from requests());
//   - a conversation whose last user message starts with "slow ": answered
//     by the rules here, but a streamed answer waits f.pace (default
//     fakeProvSlowPace) before each piece of content, so a test can act in
//     the middle of a stream;
//   - an Anthropic request whose tool_choice is "any" or names a tool and
//     whose answer is text: a call of that tool (for "any", the last tool
//     offered) with the text as its input when it is a JSON object, else
//     {"text": <text>}, as a model forced to call a tool;
//   - anything else: "echo: <text of the last user message>".
//
// A text longer than the request's max tokens (max_completion_tokens,
// max_tokens) is cut to that many words with stop reason length /
// max_tokens. Streamed text comes in word-sized deltas, tool arguments in
// two pieces. Usage: input tokens = words in the request's texts, output
// tokens = words answered + 10 per tool call (at least 1 each).
//
// It refuses, in the vendor's error shape, what the vendor refuses: a
// missing model, no messages, tool calls not answered by the next
// message(s), tool results answering no call, and for Anthropic a missing
// max_tokens, anthropic-version or credential (x-api-key, or Authorization
// as the v1 SDKs send). It does not check credentials' values: tests read
// them from requests().
//
// Base URLs: f.URL+"/v1" for OpenAI (and OpenAI-compatible) clients, f.URL
// for Anthropic ones.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeProvCreated is the fixed "created" time of the fake's OpenAI answers.
const fakeProvCreated = 1700000000

// fakeProvSlowPace is the pause before each piece of content of a "slow"
// streamed answer unless the test sets fakeProvider.pace.
const fakeProvSlowPace = 100 * time.Millisecond

// fakeRequest is a request the fake provider received.
type fakeRequest struct {
	Path   string
	Header http.Header
	Body   map[string]any // the decoded JSON body; nil when it was not JSON
	Raw    []byte         // the body as received
	Began  time.Time      // when it arrived
	Ended  time.Time      // when its answer ended (zero while it is answered)
}

// fakeProvider is a fake model provider serving POST /v1/chat/completions
// (OpenAI) and POST /v1/messages (Anthropic) on 127.0.0.1.
type fakeProvider struct {
	*httptest.Server
	mu         sync.Mutex
	recorded   []fakeRequest
	failures   []int         // statuses the next calls answer, in order
	interrupts int           // streamed answers still to cut after their first content
	callIDs    int           // tool calls issued so far
	answerIDs  int           // answers issued so far
	hangups    int           // "hang" requests whose caller hung up
	conns      atomic.Int64  // connections accepted
	pace       time.Duration // the pause before each piece of a "slow" streamed answer (0: fakeProvSlowPace)
}

// newFakeProvider starts a fake provider, closed when the test ends.
func newFakeProvider(t testing.TB) *fakeProvider {
	t.Helper()
	f := &fakeProvider{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", f.handleOpenAI)
	mux.HandleFunc("POST /v1/messages", f.handleAnthropic)
	f.Server = httptest.NewUnstartedServer(mux)
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

// requests returns what the fake received, in order.
func (f *fakeProvider) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.recorded)
}

// failNext makes the next n calls answer status with the vendor's error body.
func (f *fakeProvider) failNext(status, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.failures = append(f.failures, status)
	}
}

// interruptNext makes the next n streamed answers drop the connection right
// after their first piece of content (text or tool arguments).
func (f *fakeProvider) interruptNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.interrupts += n
}

// begin records a request and decodes its body into v; it returns the
// request's index for finish. It answers and returns false when an injected
// failure is due or the body is not JSON.
func (f *fakeProvider) begin(w http.ResponseWriter, r *http.Request, v any, fail func(http.ResponseWriter, int, string)) (int, bool) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	rec := fakeRequest{Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw, Began: time.Now()}
	json.Unmarshal(raw, &rec.Body)
	f.mu.Lock()
	i := len(f.recorded)
	f.recorded = append(f.recorded, rec)
	status := 0
	if len(f.failures) > 0 {
		status, f.failures = f.failures[0], f.failures[1:]
	}
	f.mu.Unlock()
	switch {
	case status != 0:
		fail(w, status, fmt.Sprintf("fake provider: injected failure with status %d", status))
		return i, false
	case err != nil:
		fail(w, http.StatusBadRequest, "fake provider: read body: "+err.Error())
		return i, false
	}
	if err := json.Unmarshal(raw, v); err != nil {
		fail(w, http.StatusBadRequest, "fake provider: the body is not valid JSON: "+err.Error())
		return i, false
	}
	return i, true
}

// finish records that the answer to request i ended.
func (f *fakeProvider) finish(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recorded[i].Ended = time.Now()
}

// slowPace returns the pause before each streamed piece of content of the
// answer to turns: f.pace (or fakeProvSlowPace) when the last user message
// is "slow …", else none.
func (f *fakeProvider) slowPace(turns []fakeProvTurn) time.Duration {
	for i := len(turns) - 1; i >= 0; i-- {
		if t := turns[i]; t.role == "user" && len(t.results) == 0 {
			if !strings.HasPrefix(t.text, "slow ") {
				return 0
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			return cmp.Or(f.pace, fakeProvSlowPace)
		}
	}
	return 0
}

// takeInterrupt reports whether this streamed answer is to be cut.
func (f *fakeProvider) takeInterrupt() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.interrupts == 0 {
		return false
	}
	f.interrupts--
	return true
}

// next increments one of the fake's id counters and returns it.
func (f *fakeProvider) next(counter *int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	*counter++
	return *counter
}

// fakeProvTurn is a message of a request in vendor-neutral form.
type fakeProvTurn struct {
	role    string // "user", "assistant" or "tool"
	text    string
	calls   []fakeProvCall   // an assistant's tool calls
	results []fakeProvResult // tool results this turn carries
}

// fakeProvCall is a tool call.
type fakeProvCall struct {
	ID, Name string
	Args     string // a JSON object
}

// fakeProvResult is a tool result.
type fakeProvResult struct {
	ID, Content string
}

// fakeProvAnswer is the scripted answer.
type fakeProvAnswer struct {
	text         string
	calls        []fakeProvCall
	cut          bool // the text was cut at max tokens
	inputTokens  int
	outputTokens int
}

// script answers a conversation as the package doc describes.
func (f *fakeProvider) script(turns []fakeProvTurn, system string, maxTokens int) fakeProvAnswer {
	var a fakeProvAnswer
	words := len(strings.Fields(system))
	names := map[string]string{}
	lastUser := ""
	for _, t := range turns {
		words += len(strings.Fields(t.text))
		for _, c := range t.calls {
			names[c.ID] = c.Name
		}
		for _, r := range t.results {
			words += len(strings.Fields(r.Content))
		}
		if t.role == "user" {
			lastUser = t.text
		}
	}
	last := turns[len(turns)-1]
	switch calls := fakeProvParseCalls(last.text); {
	case len(last.results) > 0:
		var lines []string
		for _, r := range last.results {
			lines = append(lines, fmt.Sprintf("tool %s said: %s", names[r.ID], r.Content))
		}
		a.text = strings.Join(lines, "\n")
	case last.role == "user" && strings.HasPrefix(last.text, "json "):
		a.text = strings.TrimPrefix(last.text, "json ")
	case last.role == "user" && len(calls) > 0:
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call_%d", f.next(&f.callIDs))
			}
		}
		a.calls = calls
	default:
		a.text = "echo: " + lastUser
	}
	if pieces := fakeProvPieces(a.text); maxTokens > 0 && len(pieces) > maxTokens {
		a.text = strings.TrimRight(strings.Join(pieces[:maxTokens], ""), " ")
		a.cut = true
	}
	a.inputTokens = max(1, words)
	a.outputTokens = max(1, len(fakeProvPieces(a.text))+10*len(a.calls))
	return a
}

// hang holds a request whose last message is the user's "hang" until its
// caller hangs up (counted in hangups) or a minute passes, and reports
// whether it was one.
func (f *fakeProvider) hang(r *http.Request, turns []fakeProvTurn) bool {
	if last := turns[len(turns)-1]; last.role != "user" || strings.TrimSpace(last.text) != "hang" {
		return false
	}
	select {
	case <-r.Context().Done():
		f.mu.Lock()
		f.hangups++
		f.mu.Unlock()
	case <-time.After(time.Minute):
	}
	return true
}

// hungUp returns how many "hang" requests their callers abandoned.
func (f *fakeProvider) hungUp() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hangups
}

// fakeProvParseCalls finds the lines "call <tool> <json-object>" in text.
func fakeProvParseCalls(text string) []fakeProvCall {
	var calls []fakeProvCall
	for line := range strings.SplitSeq(text, "\n") {
		_, rest, ok := strings.Cut(line, "call ")
		if !ok {
			continue
		}
		name, args, ok := strings.Cut(strings.TrimSpace(rest), " ")
		args = strings.TrimSpace(args)
		var id string
		if i := strings.LastIndex(args, "} as "); i >= 0 {
			args, id = args[:i+1], strings.TrimSpace(args[i+len("} as "):])
		}
		if ok && name != "" && strings.HasPrefix(args, "{") && json.Valid([]byte(args)) {
			calls = append(calls, fakeProvCall{ID: id, Name: name, Args: args})
		}
	}
	return calls
}

// fakeProvPieces splits text into word-sized deltas, spaces kept, so the
// pieces join back into text.
func fakeProvPieces(text string) []string {
	if text == "" {
		return nil
	}
	return strings.SplitAfter(text, " ")
}

// fakeProvHalves splits s into two non-empty pieces (one when too short).
func fakeProvHalves(s string) []string {
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}

// fakeProvText returns the text of a content field: a string, or an array
// of parts/blocks whose text ones are joined.
func fakeProvText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// fakeProvStream writes SSE events, flushed one by one, and drops the
// connection after the first content event when cut is set. With a pace,
// it waits that long before each content event (less when the caller hangs
// up, as r's context then says).
type fakeProvStream struct {
	w    http.ResponseWriter
	cut  bool
	r    *http.Request
	pace time.Duration
}

// start sends the event-stream headers.
func (s *fakeProvStream) start() {
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.Header().Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

// send writes one event (no event line when name is empty) whose data is v
// as JSON, or v itself when it is a string.
func (s *fakeProvStream) send(name string, v any, content bool) {
	data, ok := v.(string)
	if !ok {
		b, _ := json.Marshal(v)
		data = string(b)
	}
	if content && s.pace > 0 {
		select {
		case <-time.After(s.pace):
		case <-s.r.Context().Done():
		}
	}
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	http.NewResponseController(s.w).Flush()
	if content && s.cut {
		panic(http.ErrAbortHandler) // closes the connection mid-answer, without a log line
	}
}

// fakeProvJSON answers v as JSON with status.
func fakeProvJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// fakeProvOpenAIError answers OpenAI's error body.
func fakeProvOpenAIError(w http.ResponseWriter, status int, msg string) {
	typ, code := "invalid_request_error", any(nil)
	switch {
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	fakeProvJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// fakeProvAnthropicError answers Anthropic's error body.
func fakeProvAnthropicError(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error",
	}[status]
	switch {
	case typ != "":
	case status >= 500:
		typ = "api_error"
	default:
		typ = "invalid_request_error"
	}
	w.Header().Set("request-id", "req_fake")
	fakeProvJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// fakeProvOpenAIRequest is what the fake reads of a chat completions body.
type fakeProvOpenAIRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	MaxTokens           int  `json:"max_tokens"`
	MaxCompletionTokens int  `json:"max_completion_tokens"`
	Stream              bool `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// turns converts the request to neutral turns, checking what OpenAI
// checks: a model, messages, and tool calls answered by tool messages.
func (req *fakeProvOpenAIRequest) turns() (turns []fakeProvTurn, system string, err error) {
	if req.Model == "" {
		return nil, "", fmt.Errorf("you must provide a model parameter")
	}
	if len(req.Messages) == 0 {
		return nil, "", fmt.Errorf("'messages' must contain at least one message")
	}
	pending := map[string]bool{}
	for i, m := range req.Messages {
		if m.Role != "tool" && len(pending) > 0 {
			return nil, "", fmt.Errorf("messages.[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", i)
		}
		switch m.Role {
		case "system", "developer":
			system += fakeProvText(m.Content) + "\n"
		case "tool":
			if !pending[m.ToolCallID] {
				return nil, "", fmt.Errorf("messages.[%d]: messages with role 'tool' must be a response to a preceding message with 'tool_calls'", i)
			}
			delete(pending, m.ToolCallID)
			r := fakeProvResult{ID: m.ToolCallID, Content: fakeProvText(m.Content)}
			if n := len(turns); n > 0 && turns[n-1].role == "tool" {
				turns[n-1].results = append(turns[n-1].results, r)
				continue
			}
			turns = append(turns, fakeProvTurn{role: "tool", results: []fakeProvResult{r}})
		case "user", "assistant":
			t := fakeProvTurn{role: m.Role, text: fakeProvText(m.Content)}
			for _, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || !json.Valid([]byte(c.Function.Arguments)) {
					return nil, "", fmt.Errorf("messages.[%d].tool_calls: each needs an id, type 'function' and JSON arguments", i)
				}
				pending[c.ID] = true
				t.calls = append(t.calls, fakeProvCall{ID: c.ID, Name: c.Function.Name, Args: c.Function.Arguments})
			}
			turns = append(turns, t)
		default:
			return nil, "", fmt.Errorf("messages.[%d].role: unknown role %q", i, m.Role)
		}
	}
	if len(pending) > 0 {
		return nil, "", fmt.Errorf("the tool calls of the last assistant message have no tool messages")
	}
	if len(turns) == 0 {
		return nil, "", fmt.Errorf("'messages' must contain a user message")
	}
	return turns, system, nil
}

// handleOpenAI serves POST /v1/chat/completions.
func (f *fakeProvider) handleOpenAI(w http.ResponseWriter, r *http.Request) {
	var req fakeProvOpenAIRequest
	i, ok := f.begin(w, r, &req, fakeProvOpenAIError)
	defer f.finish(i)
	if !ok {
		return
	}
	turns, system, err := req.turns()
	if err != nil {
		fakeProvOpenAIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if f.hang(r, turns) {
		return
	}
	a := f.script(turns, system, cmp.Or(req.MaxCompletionTokens, req.MaxTokens))
	id := fmt.Sprintf("chatcmpl-fake-%d", f.next(&f.answerIDs))
	finish := "stop"
	switch {
	case len(a.calls) > 0:
		finish = "tool_calls"
	case a.cut:
		finish = "length"
	}
	usage := map[string]any{"prompt_tokens": a.inputTokens, "completion_tokens": a.outputTokens, "total_tokens": a.inputTokens + a.outputTokens}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if a.text != "" {
			msg["content"] = a.text
		}
		if len(a.calls) > 0 {
			var calls []any
			for _, c := range a.calls {
				calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
			}
			msg["tool_calls"] = calls
		}
		fakeProvJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": fakeProvCreated, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":   usage,
		})
		return
	}
	s := &fakeProvStream{w: w, cut: f.takeInterrupt(), r: r, pace: f.slowPace(turns)}
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": fakeProvCreated, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if req.StreamOptions.IncludeUsage {
			c["usage"] = nil
		}
		return c
	}
	s.start()
	s.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil), false)
	for _, p := range fakeProvPieces(a.text) {
		s.send("", chunk(map[string]any{"content": p}, nil), true)
	}
	for i, c := range a.calls {
		first := map[string]any{"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""}}
		s.send("", chunk(map[string]any{"tool_calls": []any{first}}, nil), false)
		for _, part := range fakeProvHalves(c.Args) {
			more := map[string]any{"index": i, "function": map[string]any{"arguments": part}}
			s.send("", chunk(map[string]any{"tool_calls": []any{more}}, nil), true)
		}
	}
	s.send("", chunk(map[string]any{}, finish), false)
	if req.StreamOptions.IncludeUsage {
		last := chunk(nil, nil)
		last["choices"], last["usage"] = []any{}, usage
		s.send("", last, false)
	}
	s.send("", "[DONE]", false)
}

// fakeProvAnthropicRequest is what the fake reads of a messages body.
type fakeProvAnthropicRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream bool `json:"stream"`
	Tools  []struct {
		Name string `json:"name"`
	} `json:"tools"`
	ToolChoice struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

// forced turns a text answer into the call of the tool tool_choice forces
// (for "any", the last tool offered), as a model that must call a tool.
func (req *fakeProvAnthropicRequest) forced(f *fakeProvider, a *fakeProvAnswer) {
	name := req.ToolChoice.Name
	if req.ToolChoice.Type == "any" && len(req.Tools) > 0 {
		name = req.Tools[len(req.Tools)-1].Name
	}
	if name == "" || len(a.calls) > 0 || a.text == "" {
		return
	}
	input := a.text
	var obj map[string]any
	if json.Unmarshal([]byte(input), &obj) != nil || obj == nil {
		b, _ := json.Marshal(map[string]string{"text": a.text})
		input = string(b)
	}
	a.calls, a.text = []fakeProvCall{{ID: fmt.Sprintf("call_%d", f.next(&f.callIDs)), Name: name, Args: input}}, ""
}

// fakeProvAnthropicBlock is a content block of a request.
type fakeProvAnthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// turns converts the request to neutral turns, checking what Anthropic
// checks: model, max_tokens, messages, every tool_use answered by a
// tool_result in the next message and every tool_result answering one.
func (req *fakeProvAnthropicRequest) turns() ([]fakeProvTurn, error) {
	switch {
	case req.Model == "":
		return nil, fmt.Errorf("model: Field required")
	case req.MaxTokens <= 0:
		return nil, fmt.Errorf("max_tokens: Field required")
	case len(req.Messages) == 0:
		return nil, fmt.Errorf("messages: at least one message is required")
	}
	var turns []fakeProvTurn
	var open []string // tool_use ids of the previous assistant message
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" && m.Role != "system" {
			return nil, fmt.Errorf("messages.%d.role: must be user, assistant or system; got %q", i, m.Role)
		}
		var blocks []fakeProvAnthropicBlock
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			blocks = []fakeProvAnthropicBlock{{Type: "text", Text: s}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		t := fakeProvTurn{role: m.Role}
		var texts []string
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == "" {
					return nil, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
				}
				texts = append(texts, b.Text)
			case "tool_use":
				if m.Role != "assistant" || b.ID == "" || !strings.HasPrefix(strings.TrimSpace(string(b.Input)), "{") {
					return nil, fmt.Errorf("messages.%d.content.%d: a tool_use block needs an assistant message, an id and an object input", i, j)
				}
				t.calls = append(t.calls, fakeProvCall{ID: b.ID, Name: b.Name, Args: string(b.Input)})
			case "tool_result":
				if m.Role != "user" || !slices.Contains(open, b.ToolUseID) {
					return nil, fmt.Errorf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				t.results = append(t.results, fakeProvResult{ID: b.ToolUseID, Content: fakeProvText(b.Content)})
			default:
				return nil, fmt.Errorf("messages.%d.content.%d.type: unknown block type %q", i, j, b.Type)
			}
		}
		for _, id := range open {
			if !slices.ContainsFunc(t.results, func(r fakeProvResult) bool { return r.ID == id }) {
				return nil, fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i-1, id)
			}
		}
		open = nil
		for _, c := range t.calls {
			open = append(open, c.ID)
		}
		t.text = strings.Join(texts, "\n")
		turns = append(turns, t)
	}
	return turns, nil
}

// handleAnthropic serves POST /v1/messages.
func (f *fakeProvider) handleAnthropic(w http.ResponseWriter, r *http.Request) {
	var req fakeProvAnthropicRequest
	i, ok := f.begin(w, r, &req, fakeProvAnthropicError)
	defer f.finish(i)
	if !ok {
		return
	}
	switch {
	case r.Header.Get("x-api-key") == "" && r.Header.Get("Authorization") == "":
		fakeProvAnthropicError(w, http.StatusUnauthorized, "x-api-key or Authorization header is required")
		return
	case r.Header.Get("anthropic-version") == "":
		fakeProvAnthropicError(w, http.StatusBadRequest, "anthropic-version: header is required")
		return
	}
	turns, err := req.turns()
	if err != nil {
		fakeProvAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	if f.hang(r, turns) {
		return
	}
	a := f.script(turns, fakeProvText(req.System), req.MaxTokens)
	req.forced(f, &a)
	id := fmt.Sprintf("msg_fake_%d", f.next(&f.answerIDs))
	stop := "end_turn"
	switch {
	case len(a.calls) > 0:
		stop = "tool_use"
	case a.cut:
		stop = "max_tokens"
	}
	if !req.Stream {
		content := []any{}
		if a.text != "" {
			content = append(content, map[string]any{"type": "text", "text": a.text})
		}
		for _, c := range a.calls {
			content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": json.RawMessage(c.Args)})
		}
		fakeProvJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": content,
			"stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": a.inputTokens, "output_tokens": a.outputTokens},
		})
		return
	}
	s := &fakeProvStream{w: w, cut: f.takeInterrupt(), r: r, pace: f.slowPace(turns)}
	s.start()
	s.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": a.inputTokens, "output_tokens": 1},
	}}, false)
	s.send("ping", map[string]any{"type": "ping"}, false)
	index := 0
	block := func(start map[string]any, deltas []map[string]any) {
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start}, false)
		for _, d := range deltas {
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d}, true)
		}
		s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}, false)
		index++
	}
	if a.text != "" {
		var deltas []map[string]any
		for _, p := range fakeProvPieces(a.text) {
			deltas = append(deltas, map[string]any{"type": "text_delta", "text": p})
		}
		block(map[string]any{"type": "text", "text": ""}, deltas)
	}
	for _, c := range a.calls {
		var deltas []map[string]any
		for _, part := range fakeProvHalves(c.Args) {
			deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": part})
		}
		block(map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}, deltas)
	}
	s.send("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.outputTokens},
	}, false)
	s.send("message_stop", map[string]any{"type": "message_stop"}, false)
}
