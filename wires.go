package main

// The three chat wires (SPEC §4.1, §5, §7; DESIGN §4): OpenAI chat
// completions, Anthropic messages and AG-UI, each in its own request,
// response, streaming and error shapes, all driving the same agent turn.
// Errors found before a stream starts are answered with an HTTP status in
// the wire's error shape (for AG-UI a JSON {"type":"RUN_ERROR",...} body);
// errors after it started are the wire's in-stream error event.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Wire names, as recorded on agent turns.
const (
	wireOpenAI    = "openai"
	wireAnthropic = "anthropic"
	wireAGUI      = "agui"
)

// Session headers (SPEC §4.1).
const (
	wireHeaderSession      = "x-svc-session"
	wireHeaderConversation = "x-svc-conversation"
)

// devAPIKeyFile is where svc dev keeps the project's dev key (.svc, 0600).
const devAPIKeyFile = "dev-api-key"

// Kinds of wireError; each wire maps them to its own error vocabulary.
const (
	wireErrAuth     = "authentication"
	wireErrNotFound = "not_found"
	wireErrInvalid  = "invalid_request"
	wireErrTooLarge = "request_too_large"
	wireErrGate     = "gate_closed"
	wireErrNoModel  = "no_model_provider"
	wireErrPrevious = "previous_response_not_found"
	wireErrResponse = "response_not_found" // GET or DELETE of a response that is not kept for the caller
	wireErrNoRoute  = "unknown_url"
	wireErrMethod   = "method_not_allowed"
	wireErrCompile  = "agent_compile_failed"
	wireErrBusy     = "session_busy"
	wireErrUpstream = "upstream_error"
	wireErrDatabase = "database_unavailable" // the runtime's PostgreSQL cannot be reached: retry
	wireErrInternal = "internal_error"
)

// wireDatabaseRetryAfter is the Retry-After, in seconds, of a turn refused
// while the runtime's database cannot be reached.
const wireDatabaseRetryAfter = "5"

// wireError is a failure answered in the caller's wire shape.
type wireError struct {
	Status  int
	Kind    string
	Message string
	Param   string // the offending request field, when one is
}

// wireErrorFor maps a turn's error to a wire error: a provider failure
// keeps a 429 or 400 and is otherwise a 502; session conflicts are 409.
func wireErrorFor(err error) *wireError {
	var ue *upstreamError
	switch {
	case errors.As(err, &ue):
		status := http.StatusBadGateway
		if ue.Status == http.StatusTooManyRequests || ue.Status == http.StatusBadRequest {
			status = ue.Status
		}
		return &wireError{Status: status, Kind: wireErrUpstream, Message: ue.Error()}
	case errors.Is(err, errReplyFormat):
		return &wireError{Status: http.StatusBadGateway, Kind: wireErrUpstream, Message: err.Error()}
	case errors.Is(err, errSessionBusy):
		return &wireError{Status: http.StatusConflict, Kind: wireErrBusy, Message: err.Error()}
	case errors.Is(err, errNoModelProvider):
		return &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrNoModel, Message: err.Error()}
	case errors.Is(err, errSessionUnavailable):
		return &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrGate, Message: err.Error()}
	case errors.Is(err, errSessionNotFound):
		return &wireError{Status: http.StatusNotFound, Kind: wireErrPrevious, Param: "previous_response_id", Message: err.Error()}
	case pgUnreachable(err):
		return &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrDatabase,
			Message: "the runtime's database is unavailable; retry shortly (the server's log has the detail)"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &wireError{Status: http.StatusGatewayTimeout, Kind: wireErrUpstream, Message: "the turn was cancelled: " + err.Error()}
	}
	// Internal errors carry what a caller must not see (the database's
	// address, user and name, paths): the detail is in the log.
	return &wireError{Status: http.StatusInternalServerError, Kind: wireErrInternal, Message: "the turn failed inside the runtime (the server's log has the detail)"}
}

// wireCodec is one wire's request decoding and response encoding.
type wireCodec interface {
	name() string
	decode(r *http.Request, body []byte) (*agentRequest, *wireError)
	writeError(w http.ResponseWriter, e *wireError)
	// open returns the writer of the answer to wr: streamed or whole.
	open(w http.ResponseWriter, wr *agentRequest) wireAnswer
}

// wireAnswer writes the answer of one turn: its events as they happen,
// then the result or the failure. A streamed answer writes nothing before
// its first event, so a failure before it still gets an HTTP error status.
type wireAnswer interface {
	event(ev agentEvent)
	finish(res *agentResult)
	fail(e *wireError)
}

// wireHeldFlusher is a streamed answer that holds text deltas back
// (wireSSE.sendLater) until its model call is about to wait on the
// provider: flushHeld sends them (providerWithBeforeWait).
type wireHeldFlusher interface {
	flushHeld()
}

// wireWhole is the answer to a request that does not stream: nothing until
// the turn ends, then one JSON response.
type wireWhole struct {
	w          http.ResponseWriter
	wr         *agentRequest
	respond    func(w http.ResponseWriter, wr *agentRequest, res *agentResult)
	writeError func(w http.ResponseWriter, e *wireError)
}

// event ignores the turn's events: the answer is written whole.
func (a wireWhole) event(agentEvent) {}

// finish writes the response.
func (a wireWhole) finish(res *agentResult) { a.respond(a.w, a.wr, res) }

// fail writes the error with its status.
func (a wireWhole) fail(e *wireError) { a.writeError(a.w, e) }

// newAgentHost builds the agents' runtime side for rt: the outbound model
// clients and the session store over rt.db.
func newAgentHost(rt *runtimeCore) *agentHost {
	hc := newProviderHTTPClient()
	return &agentHost{
		log:      rt.log,
		env:      rt.vmEnv,
		platform: rt.platform,
		models:   func(p *modelProvider) modelClient { return newModelClient(p, hc) },
		sessions: newSessionStore(rt.db, rt.engine != nil && rt.engine.shared()),
		record:   rt.engine.recordTurn,
		tracer:   rt.tracer,
	}
}

// devAPIKeys are the keys svc dev accepts on every route (http_guard.go):
// the project's dev key, minted once into .svc/dev-api-key, then those of
// SVC_API_KEYS.
func devAPIKeys(c *cmd, proj *project) ([]string, error) {
	key, err := devAPIKey(proj.stateDir(devAPIKeyFile))
	if err != nil {
		return nil, err
	}
	return append([]string{key}, apiKeysFromEnv(c.getenv("SVC_API_KEYS"))...), nil
}

// apiKeysFromEnv splits a comma-separated key list (SVC_API_KEYS).
func apiKeysFromEnv(s string) []string {
	var keys []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// devAPIKey returns the key stored at path, minting it (0600) on first use.
func devAPIKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read dev API key: %w", err)
	}
	return devAPIKeyRotate(path)
}

// devAPIKeyRotate mints a new dev key into path (0600, atomically) and
// returns it.
func devAPIKeyRotate(path string) (string, error) {
	key := "svc-dev-" + rand.Text()
	if err := writeFileAtomic(path, []byte(key+"\n"), privateFileMode); err != nil {
		return "", fmt.Errorf("mint dev API key: %w", err)
	}
	return key, nil
}

// wireCredential returns the request's credential: the bearer token of
// Authorization, else x-api-key; "" when both are missing or empty.
func wireCredential(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, token, ok := strings.Cut(a, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(token) != "" {
			return strings.TrimSpace(token)
		}
	}
	return strings.TrimSpace(r.Header.Get("x-api-key"))
}

// sessionFromHeaders reads x-svc-session and x-svc-conversation: both sent
// means a durable session (the conversation key is then ignored).
func sessionFromHeaders(r *http.Request, wr *agentRequest) *wireError {
	wr.SessionKey = strings.TrimSpace(r.Header.Get(wireHeaderSession))
	if wr.SessionKey == "" {
		wr.ConversationKey = strings.TrimSpace(r.Header.Get(wireHeaderConversation))
	}
	if len(wr.SessionKey) > sessionMaxKeyLength || len(wr.ConversationKey) > sessionMaxKeyLength {
		return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: fmt.Sprintf("session keys are at most %d bytes", sessionMaxKeyLength)}
	}
	return nil
}

// serveChat is the flow every wire shares: body, decode, gate, agent, then
// the turn, answered whole or streamed. The guard checked the credential
// (http_guard.go); who it stands for scopes durable sessions.
func (s *server) serveChat(w http.ResponseWriter, r *http.Request, c wireCodec) {
	h := s.rt.agents
	cred := httpGuardPrincipal(r)
	body, err := readBody(r)
	if err != nil {
		c.writeError(w, &wireError{Status: http.StatusRequestEntityTooLarge, Kind: wireErrTooLarge, Message: err.Error()})
		return
	}
	wr, e := c.decode(r, body)
	if e != nil {
		c.writeError(w, e)
		return
	}
	ag, e := s.chatAgent(wr.Agent)
	if e == nil {
		e = wireCheckToolPolicy(ag, wr.ToolPolicy)
	}
	p := s.rt.provider.Load()
	if e == nil && p == nil {
		e = &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrNoModel, Message: gateNoProviderMessage(s.rt.apiURL)}
	}
	if e != nil {
		wireNoRetry(w, e)
		c.writeError(w, e)
		return
	}
	wireFillToolNames(wr.Messages)
	answer := c.open(w, wr)
	ctx := r.Context()
	if hf, ok := answer.(wireHeldFlusher); ok {
		ctx = providerWithBeforeWait(ctx, hf.flushHeld)
	}
	res, err := h.runTurn(ctx, ag, p, c.name(), cred, wr, answer.event)
	if err != nil {
		s.log.Warn("agent turn failed", "agent", ag.Name, "wire", c.name(), "err", err)
		e := wireErrorFor(err)
		wireNoRetry(w, e)
		answer.fail(e)
		return
	}
	answer.finish(res)
}

// wireFormat is the reply format a wire carried at param: nil for text
// (or none), else checked; a format svc cannot serve is a 400 naming param.
func wireFormat(param string, f modelFormat) (*modelFormat, *wireError) {
	if f.Type == "" || f.Type == "text" {
		return nil, nil
	}
	f.Param = param
	mf, err := newModelFormat(f)
	if err != nil {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: param, Message: param + ": " + err.Error()}
	}
	return mf, nil
}

// wireStop reads stop sequences at param: a string or a list of strings,
// passed to the agent's model.
func wireStop(param string, raw json.RawMessage) ([]string, *wireError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: param, Message: param + " must be a string or a list of strings"}
	}
	return list, nil
}

// wireCheckToolPolicy refuses a tool policy that names a tool the agent
// does not have, or asks a tool its author requires approval for not to
// wait for it; nil p passes.
func wireCheckToolPolicy(ag *agentDef, p *agentToolPolicy) *wireError {
	if p == nil {
		return nil
	}
	for _, n := range p.Names {
		t := ag.Spec.tool(n.Name)
		switch {
		case t == nil:
			var names []string
			for _, t := range ag.Spec.Tools {
				names = append(names, t.Name)
			}
			return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: n.Param,
				Message: fmt.Sprintf("the agent %q has no tool %q (its tools: %s)", ag.Name, n.Name, strings.Join(names, ", "))}
		case t.NeedsApproval && p.Lift[n.Name]:
			return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: n.Param,
				Message: fmt.Sprintf("the tool %q always waits for the user's approval (its author set needsApproval); a request cannot lift it", n.Name)}
		}
	}
	return nil
}

// wireNoRetry tells SDKs whether to retry: not an error that only the
// developer can fix (x-should-retry: false, honoured by the openai and
// anthropic clients: no model provider is configured), and after
// Retry-After one that passes by itself (the database is unavailable).
func wireNoRetry(w http.ResponseWriter, e *wireError) {
	switch e.Kind {
	case wireErrNoModel:
		w.Header().Set("x-should-retry", "false")
	case wireErrDatabase:
		w.Header().Set("Retry-After", wireDatabaseRetryAfter)
	}
}

// chatAgent finds a compiled agent behind an open gate. A closed gate means
// no model provider (its only reason), so it answers no_model_provider with
// how to add one, as a chat with the gate open but no provider does.
func (s *server) chatAgent(name string) (*agentDef, *wireError) {
	if !s.rt.gateState().Open {
		return nil, &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrNoModel, Message: gateNoProviderMessage(s.rt.apiURL)}
	}
	cat := s.rt.catalog.Load()
	if cat == nil {
		return nil, &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrGate, Message: "agents are still compiling; retry shortly"}
	}
	if ag, ok := cat.Agents[name]; ok {
		return ag, nil
	}
	if ce, ok := cat.Failed[name]; ok {
		return nil, &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrCompile, Message: fmt.Sprintf("agent %q failed to compile: %v", name, ce)}
	}
	known := "none"
	if names := cat.agentNames(); len(names) > 0 {
		known = strings.Join(names, ", ")
	}
	return nil, &wireError{Status: http.StatusNotFound, Kind: wireErrNotFound, Param: "model",
		Message: fmt.Sprintf("the agent %q does not exist (agents: %s); name an agent of deep-agents/ as the model", name, known)}
}

// wireFillToolNames names each tool result after the call it answers, for wires
// whose results carry only the call id.
func wireFillToolNames(msgs []chatMessage) {
	names := map[string]string{}
	for i, m := range msgs {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
		}
		if m.Role == "tool" && m.ToolName == "" {
			msgs[i].ToolName = names[m.ToolCallID]
		}
	}
}

// wireSSE writes server-sent events, flushing each.
type wireSSE struct {
	w       http.ResponseWriter
	flusher http.Flusher
	mu      sync.Mutex    // one writer at a time: flushHeld may come from a model call's goroutine
	buf     bytes.Buffer  // the event being written, sent in one Write
	enc     *json.Encoder // encodes into buf; made on the first JSON event
	held    bool          // written by sendLater, not yet flushed
}

// newWireSSE starts an event stream on w.
func newWireSSE(w http.ResponseWriter) *wireSSE {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &wireSSE{w: w, flusher: f}
}

// send writes one event: an `event:` line when name is set, and v as JSON
// (or as is, for a string) on the data line.
func (s *wireSSE) send(name string, v any) { s.sendEvent("", name, v) }

// sendLater is send without the flush: the event leaves with the next
// flush (the next send, or flushHeld before the model call waits), so
// deltas that came from the provider together leave in one write.
func (s *wireSSE) sendLater(name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write("", name, v)
	s.held = true
}

// sendEvent is send with an `id:` line when id is set (what a reader's
// Last-Event-ID names when it reconnects).
func (s *wireSSE) sendEvent(id, name string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(id, name, v)
	s.flush()
}

// write writes one event, built in the stream's buffer, whose encoder
// writes v's JSON there directly (the same bytes as json.Marshal), in one
// Write.
func (s *wireSSE) write(id, name string, v any) {
	s.buf.Reset()
	if id != "" {
		s.buf.WriteString("id: " + id + "\n")
	}
	if name != "" {
		s.buf.WriteString("event: " + name + "\n")
	}
	s.buf.WriteString("data: ")
	if str, ok := v.(string); ok {
		s.buf.WriteString(str)
	} else {
		if s.enc == nil {
			s.enc = json.NewEncoder(&s.buf)
		}
		if s.enc.Encode(v) == nil {
			s.buf.Truncate(s.buf.Len() - 1) // Encode's newline
		}
	}
	s.buf.WriteString("\n\n")
	s.w.Write(s.buf.Bytes())
}

// flushHeld flushes what sendLater wrote, if anything.
func (s *wireSSE) flushHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.flush()
	}
}

// comment writes a comment line (readers ignore it: a keepalive).
func (s *wireSSE) comment(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, ": %s\n\n", text)
	s.flush()
}

// flush sends what was written, when the writer can; s.mu is held.
func (s *wireSSE) flush() {
	s.held = false
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

// wireDecodeJSON unmarshals a request body, answering a wire error.
func wireDecodeJSON(body []byte, v any) *wireError {
	if err := edgeJSON.check(body); err != nil {
		return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: "invalid JSON body: " + err.Error()}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: "invalid JSON body: " + err.Error()}
	}
	return nil
}

// wireTextJoin tracks the blank line wires that stream one text put
// between the texts of a turn's model calls, matching agentResult.text.
type wireTextJoin struct {
	any      bool
	lastStep int
}

// next returns delta, prefixed with the separator when it opens the text
// of a later model call.
func (t *wireTextJoin) next(ev agentEvent) string {
	out := ev.Text
	if t.any && ev.Step != t.lastStep {
		out = agentTextSeparator + out
	}
	t.any, t.lastStep = true, ev.Step
	return out
}

// wireArguments returns a call's arguments as the JSON text wires carry.
func wireArguments(c toolCall) string {
	if len(c.Arguments) == 0 {
		return "{}"
	}
	return string(c.Arguments)
}

// wireJSONObject parses a JSON object, giving {} for anything else.
func wireJSONObject(raw json.RawMessage) json.RawMessage {
	var v map[string]any
	if json.Unmarshal(raw, &v) != nil || v == nil {
		return json.RawMessage("{}")
	}
	return raw
}

// wireText joins the text of a content given as a string or as an array
// of parts with a "text" field (OpenAI, Anthropic and AG-UI all use both;
// the Responses API's parts are input_text and output_text).
func wireText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "input_text" || p.Type == "output_text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// ---- OpenAI chat completions ----

// openAIWire is the chat-completions wire: model = agent name.
type openAIWire struct{}

// name is the wire's name on recorded turns.
func (openAIWire) name() string { return wireOpenAI }

// openAIMessage is a chat-completions message, in and out.
type openAIMessage struct {
	Role       string           `json:"role"`
	Content    json.RawMessage  `json:"content"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

// openAIToolCall is a function call of an assistant message.
type openAIToolCall struct {
	Index    *int   `json:"index,omitempty"` // stream chunks only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// appendOpenAIStyle converts one message of the OpenAI-shaped wires (chat
// completions, AG-UI) into wr.Messages; system and developer text goes to
// system. errText marks a failed tool result (AG-UI). It reports whether
// the role is known.
func appendOpenAIStyle(wr *agentRequest, system *[]string, role string, content json.RawMessage, calls []openAIToolCall, toolCallID, errText string) bool {
	text := wireText(content)
	switch role {
	case "system", "developer":
		*system = append(*system, text)
	case "user":
		wr.Messages = append(wr.Messages, chatMessage{Role: "user", Content: text})
	case "assistant":
		cm := chatMessage{Role: "assistant", Content: text}
		for _, c := range calls {
			cm.ToolCalls = append(cm.ToolCalls, toolCall{ID: c.ID, Name: c.Function.Name, Arguments: wireJSONObject(json.RawMessage(c.Function.Arguments))})
		}
		wr.Messages = append(wr.Messages, cm)
	case "tool":
		cm := chatMessage{Role: "tool", Content: text, ToolCallID: toolCallID}
		if errText != "" {
			cm.Content, cm.IsError = errText, true
		}
		wr.Messages = append(wr.Messages, cm)
	default:
		return false
	}
	return true
}

// openAIRequest is the body of POST /openai/v1/chat/completions.
type openAIRequest struct {
	Model         string          `json:"model"`
	Messages      []openAIMessage `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string   `json:"type"`
		Function toolSpec `json:"function"`
	} `json:"tools"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                json.RawMessage `json:"stop"`
	ResponseFormat      struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

// decode reads a chat-completions request: system and developer messages
// join the agent's instructions; content parts keep their text.
func (openAIWire) decode(r *http.Request, body []byte) (*agentRequest, *wireError) {
	var req openAIRequest
	if e := wireDecodeJSON(body, &req); e != nil {
		return nil, e
	}
	if req.Model == "" {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: "model", Message: "model is required: name the agent"}
	}
	if len(req.Messages) == 0 {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: "messages", Message: "messages must not be empty"}
	}
	wr := &agentRequest{Agent: req.Model, Stream: req.Stream, MaxTokens: req.MaxTokens, Temperature: req.Temperature}
	if req.MaxCompletionTokens > 0 {
		wr.MaxTokens = req.MaxCompletionTokens
	}
	wr.IncludeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	wr.TopP = req.TopP
	var e *wireError
	if e = wireCheckParams(body, wireParamsChat); e != nil {
		return nil, e
	}
	if wr.Stop, e = wireStop("stop", req.Stop); e != nil {
		return nil, e
	}
	rf := req.ResponseFormat
	if wr.Format, e = wireFormat("response_format", modelFormat{Type: rf.Type, Name: rf.JSONSchema.Name, Description: rf.JSONSchema.Description,
		Schema: rf.JSONSchema.Schema, Strict: rf.JSONSchema.Strict}); e != nil {
		return nil, e
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: fmt.Sprintf("tools[%d]", i),
				Message: fmt.Sprintf("tools[%d]: only function tools with a name are supported ({\"type\":\"function\",\"function\":{\"name\":…}})", i)}
		}
		wr.ClientTools = append(wr.ClientTools, t.Function)
	}
	var system []string
	for _, m := range req.Messages {
		if !appendOpenAIStyle(wr, &system, m.Role, m.Content, m.ToolCalls, m.ToolCallID, "") {
			return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: "messages", Message: fmt.Sprintf("unsupported message role %q", m.Role)}
		}
	}
	wr.System = strings.Join(system, "\n\n")
	return wr, sessionFromHeaders(r, wr)
}

// openAIErrorBody is {"error":{message,type,param,code}}.
type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// openAIError builds the error body of e.
func openAIError(e *wireError) openAIErrorBody {
	var b openAIErrorBody
	b.Error.Message = e.Message
	code := e.Kind
	switch {
	case e.Kind == wireErrAuth:
		b.Error.Type, code = "invalid_request_error", "invalid_api_key"
	case e.Kind == wireErrNotFound:
		b.Error.Type, code = "invalid_request_error", "model_not_found"
	case e.Status == http.StatusTooManyRequests:
		b.Error.Type, code = "rate_limit_error", "rate_limit_exceeded"
	case e.Status < 500:
		b.Error.Type = "invalid_request_error"
	default:
		b.Error.Type = "server_error"
	}
	b.Error.Code = &code
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	return b
}

// writeError answers {"error":{...}} with e's status.
func (openAIWire) writeError(w http.ResponseWriter, e *wireError) {
	writeJSON(w, e.Status, openAIError(e))
}

// openAIFinishReason maps a turn's stop reason.
func openAIFinishReason(stop string) string {
	switch stop {
	case stopToolCalls:
		return "tool_calls"
	case stopLength:
		return "length"
	}
	return "stop"
}

// openAIUsageBody is the usage object of a completion.
type openAIUsageBody struct {
	CompletionTokens int `json:"completion_tokens"`
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// openAIUsage is the usage object of a completion.
func openAIUsage(u modelUsage) openAIUsageBody {
	return openAIUsageBody{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
}

// openAIToolCalls renders the pending calls as tool_calls.
func openAIToolCalls(pending []pendingCall, indexed bool) []openAIToolCall {
	var out []openAIToolCall
	for i, p := range pending {
		c := openAIToolCall{ID: p.ID, Type: "function"}
		if indexed {
			c.Index = &i
		}
		c.Function.Name, c.Function.Arguments = p.Name, wireArguments(p.toolCall)
		out = append(out, c)
	}
	return out
}

// openAICompletion is a whole chat.completion. The wire types of the
// Chat Completions answers are structs, not maps, for their encoding's
// cost; their fields are in the order json wrote the maps they replaced
// (by name), so the bytes are the same.
type openAICompletion struct {
	Choices []openAIChoice  `json:"choices"`
	Created int64           `json:"created"`
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Object  string          `json:"object"`
	Usage   openAIUsageBody `json:"usage"`
}

// openAIChoice is the one choice of a whole completion.
type openAIChoice struct {
	FinishReason string              `json:"finish_reason"`
	Index        int                 `json:"index"`
	Logprobs     *struct{}           `json:"logprobs"` // always null
	Message      openAIAnswerMessage `json:"message"`
}

// openAIAnswerMessage is the assistant's message of a whole completion.
type openAIAnswerMessage struct {
	Content   *string          `json:"content"` // null without text
	Refusal   *string          `json:"refusal"` // always null
	Role      string           `json:"role"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
}

// openAIRespond writes a whole chat.completion.
func openAIRespond(w http.ResponseWriter, wr *agentRequest, res *agentResult) {
	msg := openAIAnswerMessage{Role: "assistant"}
	if t := res.text(); t != "" {
		msg.Content = &t
	}
	if len(res.Pending) > 0 {
		msg.ToolCalls = openAIToolCalls(res.Pending, false)
	}
	writeJSON(w, http.StatusOK, openAICompletion{
		ID: randomID("chatcmpl-", 12), Object: "chat.completion", Created: time.Now().Unix(), Model: wr.Agent,
		Choices: []openAIChoice{{Message: msg, FinishReason: openAIFinishReason(res.StopReason)}},
		Usage:   openAIUsage(res.Usage),
	})
}

// openAIStream streams chat.completion.chunk events ending data: [DONE].
type openAIStream struct {
	w       http.ResponseWriter
	wr      *agentRequest
	sse     *wireSSE
	id      string
	created int64
	text    wireTextJoin
}

// openAIChunk is one chat.completion.chunk (fields in json's map order,
// as openAICompletion's). Usage is absent unless the request asked for
// it, then null but in the last chunk.
type openAIChunk struct {
	Choices []openAIChunkChoice `json:"choices"`
	Created int64               `json:"created"`
	ID      string              `json:"id"`
	Model   string              `json:"model"`
	Object  string              `json:"object"`
	Usage   json.RawMessage     `json:"usage,omitempty"`
}

// openAIChunkChoice is the one choice of a chunk.
type openAIChunkChoice struct {
	Delta        openAIDelta `json:"delta"`
	FinishReason *string     `json:"finish_reason"` // null until the last
	Index        int         `json:"index"`
}

// openAIDelta is what a chunk adds to the message.
type openAIDelta struct {
	Content   *string          `json:"content,omitempty"`
	Role      string           `json:"role,omitempty"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
}

// open answers whole, or streams chunks when the request streams.
func (c openAIWire) open(w http.ResponseWriter, wr *agentRequest) wireAnswer {
	if !wr.Stream {
		return wireWhole{w: w, wr: wr, respond: openAIRespond, writeError: c.writeError}
	}
	return &openAIStream{w: w, wr: wr, id: randomID("chatcmpl-", 12), created: time.Now().Unix()}
}

// chunk sends one chunk with the given choices (and usage, null when
// nil, when asked for); a later one is held until the next flush.
func (s *openAIStream) chunk(choices []openAIChunkChoice, usage json.RawMessage, later bool) {
	if s.sse == nil {
		s.sse = newWireSSE(s.w)
		empty := ""
		s.chunk([]openAIChunkChoice{{Delta: openAIDelta{Role: "assistant", Content: &empty}}}, nil, false)
	}
	c := openAIChunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.wr.Agent, Choices: choices}
	if c.Usage = usage; s.wr.IncludeUsage && usage == nil {
		c.Usage = json.RawMessage("null")
	}
	if later {
		s.sse.sendLater("", c)
		return
	}
	s.sse.send("", c)
}

// event sends text as content deltas.
func (s *openAIStream) event(ev agentEvent) {
	if ev.Kind != agentEventText {
		return
	}
	text := s.text.next(ev)
	s.chunk([]openAIChunkChoice{{Delta: openAIDelta{Content: &text}}}, nil, true)
}

// flushHeld implements wireHeldFlusher.
func (s *openAIStream) flushHeld() {
	if s.sse != nil {
		s.sse.flushHeld()
	}
}

// finish sends the pending tool calls, the finish reason, the usage when
// asked for, and [DONE].
func (s *openAIStream) finish(res *agentResult) {
	if len(res.Pending) > 0 {
		s.chunk([]openAIChunkChoice{{Delta: openAIDelta{ToolCalls: openAIToolCalls(res.Pending, true)}}}, nil, false)
	}
	reason := openAIFinishReason(res.StopReason)
	s.chunk([]openAIChunkChoice{{FinishReason: &reason}}, nil, false)
	if s.wr.IncludeUsage {
		usage, _ := json.Marshal(openAIUsage(res.Usage))
		s.chunk([]openAIChunkChoice{}, usage, false)
	}
	s.sse.send("", "[DONE]")
}

// fail answers the error with its status before the stream started, else
// as an error chunk.
func (s *openAIStream) fail(e *wireError) {
	if s.sse == nil {
		writeJSON(s.w, e.Status, openAIError(e))
		return
	}
	s.sse.send("", openAIError(e))
}

// handleOpenAIChat serves POST /openai/v1/chat/completions.
func (s *server) handleOpenAIChat(w http.ResponseWriter, r *http.Request) {
	s.serveChat(w, r, openAIWire{})
}

// openAIModel is an agent in the OpenAI models list shape.
func openAIModel(name string, created int64) map[string]any {
	return map[string]any{"id": name, "object": "model", "created": created, "owned_by": "svc"}
}

// wireModelNames are the agents the wires list as models: none while the
// gate is closed or the project compiles.
func (s *server) wireModelNames() []string {
	if cat := s.rt.catalog.Load(); cat != nil && s.rt.gateState().Open {
		return cat.agentNames()
	}
	return nil
}

// handleOpenAIModels serves GET /openai/v1/models: the agents as models.
func (s *server) handleOpenAIModels(w http.ResponseWriter, r *http.Request) {
	data := []map[string]any{}
	for _, name := range s.wireModelNames() {
		data = append(data, openAIModel(name, time.Now().Unix()))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// handleOpenAIModel serves GET /openai/v1/models/{model}.
func (s *server) handleOpenAIModel(w http.ResponseWriter, r *http.Request) {
	ag, e := s.chatAgent(r.PathValue("model"))
	if e != nil {
		openAIWire{}.writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, openAIModel(ag.Name, time.Now().Unix()))
}

// ---- Anthropic messages ----

// anthropicWire is the messages wire: model = agent name.
type anthropicWire struct{}

// name is the wire's name on recorded turns.
func (anthropicWire) name() string { return wireAnthropic }

// anthropicBlock is a content block, in and out.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// anthropicRequest is the body of POST /anthropic/v1/messages.
type anthropicRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	TopP          *float64         `json:"top_p"`
	StopSequences json.RawMessage  `json:"stop_sequences"`
	Stream        bool             `json:"stream"`
	Temperature   *float64         `json:"temperature"`
	OutputFormat  *anthropicFormat `json:"output_format"` // structured outputs (beta)
	OutputConfig  struct {
		Format *anthropicFormat `json:"format"`
	} `json:"output_config"` // structured outputs
}

// anthropicFormat is a structured-output format of the messages wire.
type anthropicFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema"`
}

// anthropicBlocks reads a message content: a string or an array of blocks.
func anthropicBlocks(raw json.RawMessage) ([]anthropicBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthropicBlock
	err := json.Unmarshal(raw, &blocks)
	return blocks, err
}

// decode reads a messages request: tool_result blocks become tool results,
// tool_use blocks the assistant's calls.
func (anthropicWire) decode(r *http.Request, body []byte) (*agentRequest, *wireError) {
	var req anthropicRequest
	if e := wireDecodeJSON(body, &req); e != nil {
		return nil, e
	}
	if req.Model == "" {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: "model: field required (name the agent)"}
	}
	if len(req.Messages) == 0 {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: "messages: at least one message is required"}
	}
	wr := &agentRequest{Agent: req.Model, Stream: req.Stream, MaxTokens: req.MaxTokens, Temperature: req.Temperature, System: wireText(req.System)}
	wr.TopP = req.TopP
	var e *wireError
	if e = wireCheckParams(body, wireParamsAnthropic); e != nil {
		return nil, e
	}
	if wr.Stop, e = wireStop("stop_sequences", req.StopSequences); e != nil {
		return nil, e
	}
	param, format := "output_config.format", req.OutputConfig.Format
	if req.OutputFormat != nil {
		param, format = "output_format", req.OutputFormat
	}
	if format != nil {
		if wr.Format, e = wireFormat(param, modelFormat{Type: format.Type, Schema: format.Schema}); e != nil {
			return nil, e
		}
	}
	for i, t := range req.Tools {
		if (t.Type != "" && t.Type != "custom") || t.Name == "" {
			return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: fmt.Sprintf("tools.%d", i),
				Message: fmt.Sprintf("tools.%d: only client tools with a name are supported (type %q is a server tool svc does not have)", i, t.Type)}
		}
		wr.ClientTools = append(wr.ClientTools, toolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	for i, m := range req.Messages {
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: fmt.Sprintf("messages.%d.content: %v", i, err)}
		}
		var text strings.Builder
		var calls []toolCall
		for _, b := range blocks {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				calls = append(calls, toolCall{ID: b.ID, Name: b.Name, Arguments: wireJSONObject(b.Input)})
			case "tool_result":
				wr.Messages = append(wr.Messages, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: wireText(b.Content), IsError: b.IsError})
			}
		}
		switch m.Role {
		case "user":
			if text.Len() > 0 {
				wr.Messages = append(wr.Messages, chatMessage{Role: "user", Content: text.String()})
			}
		case "assistant":
			wr.Messages = append(wr.Messages, chatMessage{Role: "assistant", Content: text.String(), ToolCalls: calls})
		default:
			return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Message: fmt.Sprintf("messages.%d.role: unsupported role %q", i, m.Role)}
		}
	}
	return wr, sessionFromHeaders(r, wr)
}

// anthropicError builds {"type":"error","error":{type,message}} for e. The
// no_model_provider error keeps Anthropic's type vocabulary (api_error) and
// adds its code.
func anthropicError(e *wireError) map[string]any {
	body := map[string]string{"type": "api_error", "message": e.Message}
	switch {
	case e.Kind == wireErrAuth:
		body["type"] = "authentication_error"
	case e.Status == http.StatusNotFound:
		body["type"] = "not_found_error"
	case e.Kind == wireErrTooLarge:
		body["type"] = "request_too_large"
	case e.Status == http.StatusTooManyRequests:
		body["type"] = "rate_limit_error"
	case e.Kind == wireErrNoModel:
		body["code"] = e.Kind
	case e.Kind == wireErrDatabase:
		body["type"], body["code"] = "overloaded_error", e.Kind
	case e.Status == http.StatusServiceUnavailable:
		body["type"] = "overloaded_error"
	case e.Status < 500:
		body["type"] = "invalid_request_error"
	}
	return map[string]any{"type": "error", "error": body}
}

// writeError answers {"type":"error","error":{...}} with e's status.
func (anthropicWire) writeError(w http.ResponseWriter, e *wireError) {
	writeJSON(w, e.Status, anthropicError(e))
}

// anthropicStopReason maps a turn's stop reason.
func anthropicStopReason(stop string) string {
	switch stop {
	case stopToolCalls:
		return "tool_use"
	case stopLength:
		return "max_tokens"
	}
	return "end_turn"
}

// anthropicToolUse renders a pending call as a tool_use block.
func anthropicToolUse(p pendingCall) anthropicBlock {
	return anthropicBlock{Type: "tool_use", ID: p.ID, Name: p.Name, Input: wireJSONObject(p.Arguments)}
}

// anthropicMessage is the message object, without content and stop reason
// when streaming starts.
func anthropicMessage(id, model string) map[string]any {
	return map[string]any{"id": id, "type": "message", "role": "assistant", "model": model, "content": []anthropicBlock{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 0, "output_tokens": 0}}
}

// anthropicRespond writes a whole message.
func anthropicRespond(w http.ResponseWriter, wr *agentRequest, res *agentResult) {
	msg := anthropicMessage(randomID("msg_", 12), wr.Agent)
	content := []anthropicBlock{}
	if t := res.text(); t != "" {
		content = append(content, anthropicBlock{Type: "text", Text: t})
	}
	for _, p := range res.Pending {
		content = append(content, anthropicToolUse(p))
	}
	msg["content"] = content
	msg["stop_reason"] = anthropicStopReason(res.StopReason)
	msg["usage"] = map[string]int{"input_tokens": res.Usage.InputTokens, "output_tokens": res.Usage.OutputTokens}
	writeJSON(w, http.StatusOK, msg)
}

// anthropicStream streams message_start … message_stop with event: lines.
type anthropicStream struct {
	w        http.ResponseWriter
	wr       *agentRequest
	sse      *wireSSE
	block    int  // index of the open content block, or of the next one
	textOpen bool // the text block at index block is open
	text     wireTextJoin
}

// open answers whole, or streams events when the request streams.
func (c anthropicWire) open(w http.ResponseWriter, wr *agentRequest) wireAnswer {
	if !wr.Stream {
		return wireWhole{w: w, wr: wr, respond: anthropicRespond, writeError: c.writeError}
	}
	return &anthropicStream{w: w, wr: wr}
}

// start sends message_start once.
func (s *anthropicStream) start() {
	if s.sse != nil {
		return
	}
	s.sse = newWireSSE(s.w)
	s.sse.send("message_start", map[string]any{"type": "message_start", "message": anthropicMessage(randomID("msg_", 12), s.wr.Agent)})
}

// closeText ends the open text block.
func (s *anthropicStream) closeText() {
	if s.textOpen {
		s.sse.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.block})
		s.textOpen = false
		s.block++
	}
}

// event sends text as text_delta events of one text block.
func (s *anthropicStream) event(ev agentEvent) {
	if ev.Kind != agentEventText {
		return
	}
	s.start()
	if !s.textOpen {
		s.sse.send("content_block_start", map[string]any{"type": "content_block_start", "index": s.block, "content_block": map[string]string{"type": "text", "text": ""}})
		s.textOpen = true
	}
	s.sse.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.block, "delta": map[string]string{"type": "text_delta", "text": s.text.next(ev)}})
}

// finish closes the text block, sends a tool_use block per pending call,
// then message_delta (stop reason, usage) and message_stop.
func (s *anthropicStream) finish(res *agentResult) {
	s.start()
	s.closeText()
	for _, p := range res.Pending {
		s.sse.send("content_block_start", map[string]any{"type": "content_block_start", "index": s.block,
			"content_block": map[string]any{"type": "tool_use", "id": p.ID, "name": p.Name, "input": map[string]any{}}})
		s.sse.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.block,
			"delta": map[string]string{"type": "input_json_delta", "partial_json": string(wireJSONObject(p.Arguments))}})
		s.sse.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.block})
		s.block++
	}
	s.sse.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStopReason(res.StopReason), "stop_sequence": nil},
		"usage": map[string]int{"input_tokens": res.Usage.InputTokens, "output_tokens": res.Usage.OutputTokens}})
	s.sse.send("message_stop", map[string]string{"type": "message_stop"})
}

// fail answers the error with its status before the stream started, else
// as an error event.
func (s *anthropicStream) fail(e *wireError) {
	if s.sse == nil {
		writeJSON(s.w, e.Status, anthropicError(e))
		return
	}
	s.sse.send("error", anthropicError(e))
}

// handleAnthropicMessages serves POST /anthropic/v1/messages.
func (s *server) handleAnthropicMessages(w http.ResponseWriter, r *http.Request) {
	s.serveChat(w, r, anthropicWire{})
}

// anthropicModel is an agent in the Anthropic models shape.
func anthropicModel(name string, created time.Time) map[string]any {
	return map[string]any{"type": "model", "id": name, "display_name": name, "created_at": created.UTC().Format(time.RFC3339)}
}

// handleAnthropicModels serves GET /anthropic/v1/models: the agents as
// models, in one page.
func (s *server) handleAnthropicModels(w http.ResponseWriter, r *http.Request) {
	data := []map[string]any{}
	for _, name := range s.wireModelNames() {
		data = append(data, anthropicModel(name, time.Now()))
	}
	body := map[string]any{"data": data, "has_more": false, "first_id": nil, "last_id": nil}
	if len(data) > 0 {
		body["first_id"], body["last_id"] = data[0]["id"], data[len(data)-1]["id"]
	}
	writeJSON(w, http.StatusOK, body)
}

// handleAnthropicModel serves GET /anthropic/v1/models/{model}.
func (s *server) handleAnthropicModel(w http.ResponseWriter, r *http.Request) {
	ag, e := s.chatAgent(r.PathValue("model"))
	if e != nil {
		anthropicWire{}.writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, anthropicModel(ag.Name, time.Now()))
}

// wireFallbackMethods are the methods handleWireUnknown answers, and tries
// a path with.
var wireFallbackMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// wireFallbackPatterns are the mux patterns of handleWireUnknown: each
// usual method under each wire prefix (a pattern per method, as the
// console's "GET /" would conflict with a method-less one).
func wireFallbackPatterns() []string {
	var out []string
	for _, prefix := range []string{"/openai/", "/anthropic/"} {
		for _, m := range wireFallbackMethods {
			out = append(out, m+" "+prefix)
		}
	}
	return out
}

// handleWireUnknown answers what no route under /openai/ or /anthropic/
// serves, in that wire's error shape: 405 with Allow when the path is
// served with other methods, else 404 naming the wire's routes.
func (s *server) handleWireUnknown(w http.ResponseWriter, r *http.Request) {
	c := httpGuardWire(r.URL.Path)
	fallbacks := wireFallbackPatterns()
	var allow []string
	for _, m := range wireFallbackMethods {
		if _, pattern := s.mux.Handler(&http.Request{Method: m, URL: r.URL, Host: r.Host}); !slices.Contains(fallbacks, pattern) {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		c.writeError(w, &wireError{Status: http.StatusMethodNotAllowed, Kind: wireErrMethod,
			Message: fmt.Sprintf("%s %s is not supported: this path answers %s", r.Method, r.URL.Path, strings.Join(allow, ", "))})
		return
	}
	prefix := strings.SplitAfterN(r.URL.Path, "/", 3)[1] // "openai/" or "anthropic/"
	var served []string
	for _, rt := range routeTable(nil) {
		if strings.HasPrefix(rt.path, "/"+prefix) {
			served = append(served, rt.method+" "+rt.path)
		}
	}
	c.writeError(w, &wireError{Status: http.StatusNotFound, Kind: wireErrNoRoute,
		Message: fmt.Sprintf("unknown path %s %s; this wire serves %s", r.Method, r.URL.Path, strings.Join(served, ", "))})
}

// ---- AG-UI ----

// aguiWire is the agent-UI wire: a RunAgentInput body answered with an SSE
// stream of AG-UI events. The agent is named by the path (/agui/{agent}) or,
// on /chat, by forwardedProps.agent.
type aguiWire struct {
	agentInBody bool
}

// name is the wire's name on recorded turns.
func (aguiWire) name() string { return wireAGUI }

// aguiMessage is a message of RunAgentInput.
type aguiMessage struct {
	ID         string           `json:"id"`
	Role       string           `json:"role"`
	Content    json.RawMessage  `json:"content"`
	ToolCalls  []openAIToolCall `json:"toolCalls"` // same shape as OpenAI's
	ToolCallID string           `json:"toolCallId"`
	Error      string           `json:"error"`
}

// aguiInput is the RunAgentInput body.
type aguiInput struct {
	ThreadID *string       `json:"threadId"`
	RunID    string        `json:"runId"`
	Messages []aguiMessage `json:"messages"`
	Tools    []toolSpec    `json:"tools"`
	Context  []struct {
		Description string `json:"description"`
		Value       string `json:"value"`
	} `json:"context"`
	ForwardedProps struct {
		Agent string `json:"agent"`
	} `json:"forwardedProps"`
	Resume []struct {
		InterruptID string          `json:"interruptId"`
		Status      string          `json:"status"`
		Payload     json.RawMessage `json:"payload"`
	} `json:"resume"`
}

// decode reads a RunAgentInput: threadId is the durable session (empty:
// stateless), context entries join the instructions, resume entries answer
// pending approvals (resolved = approved unless the payload says
// {"approved": false}; cancelled = refused).
func (a aguiWire) decode(r *http.Request, body []byte) (*agentRequest, *wireError) {
	var in aguiInput
	if e := wireDecodeJSON(body, &in); e != nil {
		return nil, e
	}
	if e := wireCheckParams(body, wireParamsAGUI); e != nil {
		return nil, e
	}
	if in.ThreadID == nil {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: "threadId", Message: "threadId is required (an empty threadId runs one stateless turn)"}
	}
	if len(*in.ThreadID) > sessionMaxKeyLength {
		return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: "threadId", Message: fmt.Sprintf("threadId is at most %d bytes", sessionMaxKeyLength)}
	}
	wr := &agentRequest{Agent: r.PathValue("agent"), Stream: true, ThreadID: *in.ThreadID, RunID: in.RunID, SessionKey: *in.ThreadID, ClientTools: in.Tools}
	if a.agentInBody {
		wr.Agent = in.ForwardedProps.Agent
		if wr.Agent == "" {
			return nil, &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: "forwardedProps.agent", Message: "name the agent in forwardedProps.agent"}
		}
	}
	if wr.RunID == "" {
		wr.RunID = randomID("run_", 12)
	}
	var system []string
	for _, c := range in.Context {
		system = append(system, c.Description+": "+c.Value)
	}
	for _, m := range in.Messages {
		appendOpenAIStyle(wr, &system, m.Role, m.Content, m.ToolCalls, m.ToolCallID, m.Error) // other roles (activity…) carry no turn
	}
	wr.System = strings.Join(system, "\n")
	if len(in.Resume) > 0 {
		wr.Approvals = map[string]approvalAnswer{}
		for _, e := range in.Resume {
			ans := approvalAnswer{Approved: e.Status == "resolved"}
			if p, ok := agentParseApproval(string(e.Payload)); ok && ans.Approved {
				ans = p
			}
			wr.Approvals[e.InterruptID] = ans
		}
	}
	return wr, nil
}

// aguiError is the RUN_ERROR event of e.
func aguiError(e *wireError) map[string]string {
	return map[string]string{"type": "RUN_ERROR", "message": e.Message, "code": e.Kind}
}

// writeError answers a RUN_ERROR body with e's status.
func (aguiWire) writeError(w http.ResponseWriter, e *wireError) {
	writeJSON(w, e.Status, aguiError(e))
}

// aguiStream writes the run's AG-UI events.
type aguiStream struct {
	wr      *agentRequest
	sse     *wireSSE
	openMsg string // the text message in progress
	lastMsg string // the assistant message of the latest model call
}

// open starts the event stream at once with RUN_STARTED: the agent-UI wire
// always streams, and reports later failures as RUN_ERROR events.
func (aguiWire) open(w http.ResponseWriter, wr *agentRequest) wireAnswer {
	s := &aguiStream{wr: wr, sse: newWireSSE(w)}
	s.sse.send("", map[string]string{"type": "RUN_STARTED", "threadId": wr.ThreadID, "runId": wr.RunID})
	return s
}

// toolCallEvents sends TOOL_CALL_START, _ARGS and _END for c.
func (s *aguiStream) toolCallEvents(c toolCall, parent string) {
	start := map[string]string{"type": "TOOL_CALL_START", "toolCallId": c.ID, "toolCallName": c.Name}
	if parent != "" {
		start["parentMessageId"] = parent
	}
	s.sse.send("", start)
	s.sse.send("", map[string]string{"type": "TOOL_CALL_ARGS", "toolCallId": c.ID, "delta": wireArguments(c)})
	s.sse.send("", map[string]string{"type": "TOOL_CALL_END", "toolCallId": c.ID})
}

// event sends text messages per model call and server-side tool calls with
// their results.
func (s *aguiStream) event(ev agentEvent) {
	switch ev.Kind {
	case agentEventText:
		if s.openMsg != ev.MessageID {
			s.sse.send("", map[string]string{"type": "TEXT_MESSAGE_START", "messageId": ev.MessageID, "role": "assistant"})
			s.openMsg = ev.MessageID
		}
		s.sse.send("", map[string]string{"type": "TEXT_MESSAGE_CONTENT", "messageId": ev.MessageID, "delta": ev.Text})
	case agentEventStepEnd:
		if s.openMsg == ev.MessageID {
			s.sse.send("", map[string]string{"type": "TEXT_MESSAGE_END", "messageId": ev.MessageID})
			s.openMsg = ""
		}
		s.lastMsg = ev.MessageID
	case agentEventToolResult:
		// A call of this run is shown whole; an approved call resumed from
		// the previous run only gets its result (the client has the call).
		if s.lastMsg != "" {
			s.toolCallEvents(*ev.Call, s.lastMsg)
		}
		s.sse.send("", map[string]string{"type": "TOOL_CALL_RESULT", "messageId": randomID("msg_", 12), "toolCallId": ev.Call.ID, "content": ev.Result.Content, "role": "tool"})
	}
}

// finish sends the pending calls, then RUN_FINISHED: an interrupt outcome
// naming the calls awaiting approval, else success (with the client tool
// calls left to answer in pendingToolCallIds).
func (s *aguiStream) finish(res *agentResult) {
	var interrupts []map[string]any
	clientCalls := []string{}
	for _, p := range res.Pending {
		s.toolCallEvents(p.toolCall, res.MessageID)
		if p.Kind == pendingClient {
			clientCalls = append(clientCalls, p.ID)
			continue
		}
		interrupts = append(interrupts, map[string]any{
			"id": p.ID, "reason": "tool_call", "toolCallId": p.ID,
			"message":        fmt.Sprintf("Approve running the tool %q with these arguments? %s", p.Name, wireArguments(p.toolCall)),
			"responseSchema": json.RawMessage(`{"type":"object","properties":{"approved":{"type":"boolean"},"reason":{"type":"string"}},"required":["approved"]}`),
			"metadata":       map[string]any{"toolName": p.Name, "arguments": wireJSONObject(p.Arguments)},
		})
	}
	outcome := map[string]any{"type": "success"}
	if len(interrupts) > 0 {
		outcome = map[string]any{"type": "interrupt", "interrupts": interrupts}
	} else if len(clientCalls) > 0 {
		outcome["pendingToolCallIds"] = clientCalls
	}
	s.sse.send("", map[string]any{"type": "RUN_FINISHED", "threadId": s.wr.ThreadID, "runId": s.wr.RunID, "outcome": outcome,
		"result": map[string]any{"text": res.text(), "stopReason": res.StopReason}})
}

// fail sends RUN_ERROR.
func (s *aguiStream) fail(e *wireError) {
	s.sse.send("", aguiError(e))
}

// handleAGUI serves POST /agui/{agent}.
func (s *server) handleAGUI(w http.ResponseWriter, r *http.Request) {
	s.serveChat(w, r, aguiWire{})
}

// handleChat serves POST /chat: the agent-UI wire with the agent named in
// forwardedProps.agent (the console's chat).
func (s *server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serveChat(w, r, aguiWire{agentInBody: true})
}
