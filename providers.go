package main

// The outbound model clients (DESIGN §5): whatever wire the caller used,
// svc answers it by calling the resolved provider over OpenAI chat
// completions (OpenAI itself and OpenAI-compatible servers such as Ollama,
// vLLM and llama.cpp) or Anthropic messages, streaming or not, with tools.
//
// Defaults, when neither the request nor SVC_MODEL names a model:
// providerOpenAI uses gpt-4o-mini, providerAnthropic claude-haiku-4-5 and
// providerCompat llama3.2 (Ollama's common small model; llama.cpp ignores
// the name). A providerCompat without a base URL talks to Ollama on
// http://127.0.0.1:11434/v1.
//
// Every call has a deadline (2 minutes by default, on top of the caller's
// context) and up to 3 attempts: 429, 5xx and connection failures are
// retried with exponential backoff and jitter, or after the provider's
// Retry-After (capped at 20 s); nothing is retried once streamed text has
// reached the caller. The API key travels only in request headers and is
// scrubbed from every error text.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Vendor defaults and protocol constants of the outbound clients.
const (
	providerOpenAIBaseURL    = "https://api.openai.com/v1"
	providerAnthropicBaseURL = "https://api.anthropic.com"
	providerCompatBaseURL    = "http://127.0.0.1:11434/v1" // Ollama's OpenAI-compatible endpoint

	providerOpenAIModel    = "gpt-4o-mini"
	providerAnthropicModel = "claude-haiku-4-5"
	providerCompatModel    = "llama3.2"

	providerAnthropicVersion   = "2023-06-01" // the anthropic-version header
	providerAnthropicMaxTokens = 4096         // max_tokens is required by Anthropic

	providerMaxBody      = 16 << 20 // a complete answer, or one SSE line
	providerMaxErrorBody = 64 << 10 // an error answer; the rest is not read
)

// errProviderTimeout is the cause of a call that ran out of its own deadline
// (providerPolicy.Timeout), as opposed to the caller's context ending.
var errProviderTimeout = errors.New("model provider call timed out")

// errProviderStreamCut reports a provider answer that ended, or failed to
// read, before its end marker.
var errProviderStreamCut = errors.New("answer ended before its end marker")

// errNoModelProvider is returned by the client of a nil or unknown provider.
var errNoModelProvider = errors.New("no model provider configured")

// providerPolicy bounds one call: its deadline and how it retries.
type providerPolicy struct {
	Timeout       time.Duration // the whole call, retries included
	Attempts      int           // attempts in all, the first included
	Backoff       time.Duration // delay before the first retry; doubles each retry, jittered
	RetryAfterCap time.Duration // the most a provider's Retry-After may make us wait
}

// providerDefaultPolicy is the policy of every client newModelClient returns.
func providerDefaultPolicy() providerPolicy {
	return providerPolicy{
		Timeout:       2 * time.Minute,
		Attempts:      3,
		Backoff:       500 * time.Millisecond,
		RetryAfterCap: 20 * time.Second,
	}
}

// providerWire is one vendor's protocol: how a modelRequest is encoded and
// how answers, whole or streamed, are decoded.
type providerWire interface {
	// encode returns the JSON body of the request.
	encode(model string, req modelRequest, stream bool) any
	// setHeaders adds the vendor's authentication and version headers.
	setHeaders(h http.Header, apiKey string)
	// decode reads a complete (non-streamed) answer.
	decode(body []byte) (modelResponse, error)
	// stream reads a streamed answer, passing text to emit as it arrives.
	// A provider error event is returned as an *upstreamError.
	stream(events *providerSSE, emit func(string)) (modelResponse, error)
}

// providerClient is the modelClient of one resolved provider, safe for
// concurrent use. Its zero value is not usable; newModelClient builds it.
type providerClient struct {
	kind    string // providerOpenAI, providerAnthropic or providerCompat
	url     string // the endpoint POSTed to
	safeURL string // url without credentials or query, for error texts
	apiKey  string
	model   string // used when the request names none
	hc      *http.Client
	policy  providerPolicy
	wire    providerWire
}

// providerMissingClient is the modelClient when there is no usable provider:
// every call fails with errNoModelProvider.
type providerMissingClient struct {
	kind string // the unknown kind; empty for no provider at all
}

// complete implements modelClient.
func (c providerMissingClient) complete(context.Context, modelRequest, func(modelDelta)) (modelResponse, error) {
	if c.kind == "" {
		return modelResponse{}, fmt.Errorf("model call: %w", errNoModelProvider)
	}
	return modelResponse{}, fmt.Errorf("model call: %w: unknown provider kind %q", errNoModelProvider, c.kind)
}

// newModelClient returns the client for the resolved provider, sending its
// requests through hc (a new newProviderHTTPClient when nil; its Timeout
// should be zero, since a streamed answer may take long: calls have their
// own deadline). A nil provider or an unknown kind yields a client whose calls
// fail with errNoModelProvider.
func newModelClient(p *modelProvider, hc *http.Client) modelClient {
	if p == nil {
		return providerMissingClient{}
	}
	if hc == nil {
		hc = newProviderHTTPClient()
	}
	c := &providerClient{kind: p.Kind, apiKey: p.APIKey, hc: hc, policy: providerDefaultPolicy()}
	var base, path, model string
	switch p.Kind {
	case providerOpenAI:
		base, path, model = providerOpenAIBaseURL, "/chat/completions", providerOpenAIModel
		c.wire = providerOpenAIWire{}
	case providerCompat:
		base, path, model = providerCompatBaseURL, "/chat/completions", providerCompatModel
		c.wire = providerOpenAIWire{legacyMaxTokens: true}
	case providerAnthropic:
		base, path, model = providerAnthropicBaseURL, "/v1/messages", providerAnthropicModel
		c.wire = providerAnthropicWire{}
	default:
		return providerMissingClient{kind: p.Kind}
	}
	c.url = strings.TrimRight(cmp.Or(p.BaseURL, base), "/") + path
	c.safeURL = providerSafeURL(c.url)
	c.model = cmp.Or(p.Model, model)
	return c
}

// providerSafeURL returns raw without user info, query or fragment, so it
// can appear in error texts.
func providerSafeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the provider's base URL"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// providerCause returns the error inside a *url.Error, whose URL may carry
// credentials; other errors unchanged.
func providerCause(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// providerFailure is one failed attempt.
type providerFailure struct {
	err   *upstreamError
	retry bool          // another attempt may succeed
	after time.Duration // the provider's Retry-After; 0 when it gave none
}

// complete implements modelClient: it calls the provider, streaming when
// onDelta is non-nil, retrying as providerPolicy allows.
func (c *providerClient) complete(ctx context.Context, req modelRequest, onDelta func(modelDelta)) (modelResponse, error) {
	model := cmp.Or(req.Model, c.model)
	stream := onDelta != nil
	body, err := json.Marshal(c.wire.encode(model, req, stream))
	if err != nil {
		return modelResponse{}, fmt.Errorf("model call to %s: encode request: %w", c.kind, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.policy.Timeout, errProviderTimeout)
	defer cancel()
	delivered := false
	emit := func(text string) {
		if text != "" && onDelta != nil {
			delivered = true
			onDelta(modelDelta{Text: text})
		}
	}
	for attempt := 1; ; attempt++ {
		resp, f := c.attempt(ctx, body, stream, emit)
		if f == nil {
			resp.Model = cmp.Or(resp.Model, model)
			return providerReplyFrom(req, resp), nil
		}
		if ctx.Err() != nil {
			return modelResponse{}, c.contextError(ctx)
		}
		if !f.retry || delivered || attempt >= c.policy.Attempts {
			return modelResponse{}, f.err
		}
		t := time.NewTimer(c.backoff(attempt, f.after))
		select {
		case <-ctx.Done():
			t.Stop()
			return modelResponse{}, c.contextError(ctx)
		case <-t.C:
		}
	}
}

// contextError is the error of a call whose context ended: an
// *upstreamError when the call's own deadline passed, else the caller's
// cancellation or deadline, wrapped.
func (c *providerClient) contextError(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errProviderTimeout) {
		return &upstreamError{Provider: c.kind, Type: "timeout", Message: fmt.Sprintf("no complete answer within %s", c.policy.Timeout)}
	}
	return fmt.Errorf("model call to %s: %w", c.kind, ctx.Err())
}

// backoff returns the wait before the retry that follows attempt: the
// provider's Retry-After up to the cap, else exponential backoff with jitter
// (between half and all of Backoff·2^(attempt-1)).
func (c *providerClient) backoff(attempt int, after time.Duration) time.Duration {
	if after > 0 {
		return min(after, c.policy.RetryAfterCap)
	}
	d := c.policy.Backoff << (attempt - 1)
	return d/2 + rand.N(d/2+1)
}

// attempt makes one HTTP request and reads its answer.
func (c *providerClient) attempt(ctx context.Context, body []byte, stream bool, emit func(string)) (modelResponse, *providerFailure) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return modelResponse{}, c.failure(0, "invalid_request", fmt.Sprintf("base URL: %v", providerCause(err)), false)
	}
	accept := "application/json"
	if stream {
		accept = "text/event-stream"
	}
	hreq.Header.Set("Accept", accept)
	hreq.Header.Set("Content-Type", "application/json")
	c.wire.setHeaders(hreq.Header, c.apiKey)
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return modelResponse{}, c.failure(0, "connection_error", fmt.Sprintf("POST %s: %v", c.safeURL, providerCause(err)), true)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(hresp.Body, providerMaxErrorBody))
		typ, msg := providerParseError(raw)
		f := c.failure(hresp.StatusCode, typ, cmp.Or(msg, http.StatusText(hresp.StatusCode)), providerRetryable(hresp.StatusCode))
		f.after = providerRetryAfter(hresp.Header, time.Now())
		return modelResponse{}, f
	}
	var resp modelResponse
	var answer io.Reader = hresp.Body
	if before, _ := ctx.Value(providerBeforeWaitKey{}).(func()); stream && before != nil {
		answer = providerBeforeRead{r: hresp.Body, before: before}
		defer before() // what the last reads delivered
	}
	if stream && strings.HasPrefix(hresp.Header.Get("Content-Type"), "text/event-stream") {
		resp, err = c.wire.stream(newProviderSSE(answer), emit)
	} else {
		// A server that ignores stream:true answers whole; its text is
		// then delivered as one delta.
		resp, err = c.readWhole(answer)
		if err == nil {
			emit(resp.Text)
		}
	}
	if err != nil {
		return modelResponse{}, c.classify(hresp.StatusCode, err)
	}
	return resp, nil
}

// providerBeforeWaitKey is the context key of the func a streaming model
// call runs before each read of the provider's answer (one that may wait)
// and after the last: the chat wire's flush of the deltas it holds back
// (wireHeldFlusher), so that the deltas one read delivers leave in one
// write and none waits on the provider.
type providerBeforeWaitKey struct{}

// providerWithBeforeWait returns ctx carrying before (providerBeforeWaitKey).
func providerWithBeforeWait(ctx context.Context, before func()) context.Context {
	return context.WithValue(ctx, providerBeforeWaitKey{}, before)
}

// providerBeforeRead runs before ahead of each Read of r.
type providerBeforeRead struct {
	r      io.Reader
	before func()
}

// Read implements io.Reader.
func (b providerBeforeRead) Read(p []byte) (int, error) {
	b.before()
	return b.r.Read(p)
}

// readWhole reads and decodes a complete answer.
func (c *providerClient) readWhole(r io.Reader) (modelResponse, error) {
	raw, err := io.ReadAll(io.LimitReader(r, providerMaxBody+1))
	if err != nil {
		return modelResponse{}, fmt.Errorf("%w: %v", errProviderStreamCut, err)
	}
	if len(raw) > providerMaxBody {
		return modelResponse{}, fmt.Errorf("answer larger than %d bytes", providerMaxBody)
	}
	return c.wire.decode(raw)
}

// classify turns an error met while reading a 2xx answer into a failure:
// a provider error event keeps its status; an interrupted answer may be
// retried (unless text was delivered); anything else is a malformed answer.
func (c *providerClient) classify(status int, err error) *providerFailure {
	var ue *upstreamError
	switch {
	case errors.As(err, &ue):
		return c.failure(ue.Status, ue.Type, ue.Message, providerRetryable(ue.Status))
	case errors.Is(err, errProviderStreamCut):
		return c.failure(status, "stream_interrupted", err.Error(), true)
	}
	return c.failure(status, "invalid_response", err.Error(), false)
}

// failure builds a providerFailure whose message has the API key scrubbed.
func (c *providerClient) failure(status int, typ, msg string, retry bool) *providerFailure {
	if len(c.apiKey) >= 4 {
		msg = strings.ReplaceAll(msg, c.apiKey, "[redacted]")
	}
	return &providerFailure{err: &upstreamError{Provider: c.kind, Status: status, Type: typ, Message: msg}, retry: retry}
}

// providerRetryable reports whether an answer with this HTTP status may be
// retried: rate limits and server errors (Anthropic's 529 overloaded too).
func providerRetryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// providerRetryAfter returns how long the provider asked us to wait:
// retry-after-ms (OpenAI), else Retry-After in seconds or as an HTTP date.
// 0 when absent, unparsable or past.
func providerRetryAfter(h http.Header, now time.Time) time.Duration {
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// providerParseError extracts the error type and message from an error
// body: OpenAI's {"error":{"message","type","code"}}, Anthropic's
// {"type":"error","error":{"type","message"}}, {"error":"…"} (Ollama) or a
// top-level {"message","type"} (vLLM); else the body's text, shortened.
func providerParseError(body []byte) (typ, msg string) {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Type    string          `json:"type"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		var obj struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
			code, _ := obj.Code.(string)
			return cmp.Or(obj.Type, code), obj.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return "", s
		case v.Message != "":
			return v.Type, v.Message
		}
	}
	text := []rune(strings.TrimSpace(string(body)))
	if len(text) > 300 {
		return "", string(text[:300]) + "…"
	}
	return "", string(text)
}

// providerErrorStatus maps an error type reported inside a stream (after a
// 200) to the HTTP status the vendor gives that type; 500 when unknown.
func providerErrorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error", "rate_limit_exceeded":
		return http.StatusTooManyRequests
	case "overloaded_error":
		return 529
	}
	return http.StatusInternalServerError
}

// providerStreamError is the *upstreamError of an error event in a stream.
func providerStreamError(data []byte) *upstreamError {
	typ, msg := providerParseError(data)
	return &upstreamError{Status: providerErrorStatus(typ), Type: typ, Message: msg}
}

// providerToolArgs normalises a tool call's arguments as received: empty
// means {}; text that is not JSON (a model's slip) is kept as a JSON string,
// so it survives encoding and fails argument validation visibly.
func providerToolArgs(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// providerObject returns raw when it is a JSON object, else orElse: both
// vendors require objects of tool parameters and Anthropic of tool input.
func providerObject(raw json.RawMessage, orElse string) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return raw
	}
	return json.RawMessage(orElse)
}

// providerEmptySchema is the parameters schema of a tool that declares none.
const providerEmptySchema = `{"type":"object","properties":{}}`

// providerSSEBuffer is the first size of an SSE reader's line buffer: a
// vendor's chunk line is a few hundred bytes.
const providerSSEBuffer = 1 << 10

// providerSSE reads Server-Sent Events.
type providerSSE struct {
	sc *bufio.Scanner
}

// newProviderSSE reads events from r; a line may be up to providerMaxBody.
// The scanner's buffer starts at providerSSEBuffer and grows only for a
// longer line: a stream waiting on its model holds only that.
func newProviderSSE(r io.Reader) *providerSSE {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, providerSSEBuffer), providerMaxBody)
	return &providerSSE{sc: sc}
}

// next returns the next event's data (its data lines joined by newlines);
// io.EOF at the end of the stream, or an error wrapping
// errProviderStreamCut when reading fails. Event names are not needed: both
// vendors repeat the type inside the data.
func (s *providerSSE) next() ([]byte, error) {
	var data []byte // nil until the event's first data line
	for s.sc.Scan() {
		line := s.sc.Bytes() // the scanner's, until the next Scan: copied below
		if len(line) == 0 {
			if data != nil {
				return data, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		if data == nil {
			data = make([]byte, 0, len(value))
		} else {
			data = append(data, '\n')
		}
		data = append(data, bytes.TrimPrefix(value, []byte(" "))...)
	}
	if err := s.sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", errProviderStreamCut, err)
	}
	if data != nil {
		return data, nil
	}
	return nil, io.EOF
}

// providerOpenAIWire speaks OpenAI chat completions.
type providerOpenAIWire struct {
	// legacyMaxTokens sends max_tokens, which OpenAI-compatible servers
	// understand, instead of OpenAI's max_completion_tokens.
	legacyMaxTokens bool
}

// providerOpenAIRequest is the body of POST /chat/completions.
type providerOpenAIRequest struct {
	Model               string                       `json:"model"`
	Messages            []providerOpenAIMessage      `json:"messages"`
	Tools               []providerOpenAITool         `json:"tools,omitempty"`
	MaxTokens           int                          `json:"max_tokens,omitempty"`
	MaxCompletionTokens int                          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64                     `json:"temperature,omitempty"`
	TopP                *float64                     `json:"top_p,omitempty"`
	Stop                []string                     `json:"stop,omitempty"`
	ResponseFormat      map[string]any               `json:"response_format,omitempty"`
	Stream              bool                         `json:"stream,omitempty"`
	StreamOptions       *providerOpenAIStreamOptions `json:"stream_options,omitempty"`
}

// providerOpenAIStreamOptions asks for usage in a final streamed chunk.
type providerOpenAIStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// providerOpenAIMessage is a message of a request; Content is null for an
// assistant message that only calls tools.
type providerOpenAIMessage struct {
	Role       string                   `json:"role"`
	Content    *string                  `json:"content"`
	ToolCalls  []providerOpenAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string                   `json:"tool_call_id,omitempty"`
}

// providerOpenAIToolCall is a tool call in a request, an answer, or (with
// Index, and pieces of Arguments) a streamed delta.
type providerOpenAIToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"` // JSON text
	} `json:"function"`
}

// providerOpenAITool offers a function tool.
type providerOpenAITool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// providerOpenAIUsage counts tokens.
type providerOpenAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// providerOpenAIResponse is a complete answer.
type providerOpenAIResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   string                   `json:"content"`
			ToolCalls []providerOpenAIToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *providerOpenAIUsage `json:"usage"`
}

// providerOpenAIChunk is one streamed chunk; some servers send an error
// object instead.
type providerOpenAIChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Content   string                   `json:"content"`
			ToolCalls []providerOpenAIToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *providerOpenAIUsage `json:"usage"`
	Error json.RawMessage      `json:"error"`
}

// encode implements providerWire: the system prompt first, then the
// messages; a tool result's IsError has no OpenAI field and is carried by
// its content alone.
func (w providerOpenAIWire) encode(model string, req modelRequest, stream bool) any {
	out := providerOpenAIRequest{Model: model, Temperature: req.Temperature, TopP: req.TopP, Stop: req.Stop, Stream: stream, ResponseFormat: providerOpenAIFormat(req.Format)}
	if stream {
		out.StreamOptions = &providerOpenAIStreamOptions{IncludeUsage: true}
	}
	if w.legacyMaxTokens {
		out.MaxTokens = req.MaxTokens
	} else {
		out.MaxCompletionTokens = req.MaxTokens
	}
	if req.System != "" {
		out.Messages = append(out.Messages, providerOpenAIMessage{Role: "system", Content: &req.System})
	}
	for _, m := range req.Messages {
		om := providerOpenAIMessage{Role: m.Role, Content: &m.Content, ToolCallID: m.ToolCallID}
		if len(m.ToolCalls) > 0 && m.Content == "" {
			om.Content = nil
		}
		for _, tc := range m.ToolCalls {
			call := providerOpenAIToolCall{ID: tc.ID, Type: "function"}
			call.Function.Name = tc.Name
			call.Function.Arguments = cmp.Or(string(bytes.TrimSpace(tc.Arguments)), "{}")
			om.ToolCalls = append(om.ToolCalls, call)
		}
		out.Messages = append(out.Messages, om)
	}
	for _, t := range req.Tools {
		tool := providerOpenAITool{Type: "function"}
		tool.Function.Name, tool.Function.Description = t.Name, t.Description
		tool.Function.Parameters = providerObject(t.Parameters, providerEmptySchema)
		out.Tools = append(out.Tools, tool)
	}
	return out
}

// providerOpenAIFormat is the response_format of f; nil for free text.
func providerOpenAIFormat(f *modelFormat) map[string]any {
	if f == nil {
		return nil
	}
	if f.Type == formatJSONObject {
		return map[string]any{"type": formatJSONObject}
	}
	js := map[string]any{"name": cmp.Or(f.Name, "reply"), "schema": f.Schema}
	if f.Description != "" {
		js["description"] = f.Description
	}
	if f.Strict != nil {
		js["strict"] = *f.Strict
	}
	return map[string]any{"type": formatJSONSchema, "json_schema": js}
}

// setHeaders implements providerWire: a bearer token, when there is a key
// (OpenAI-compatible servers often need none).
func (providerOpenAIWire) setHeaders(h http.Header, apiKey string) {
	if apiKey != "" {
		h.Set("Authorization", "Bearer "+apiKey)
	}
}

// decode implements providerWire.
func (providerOpenAIWire) decode(body []byte) (modelResponse, error) {
	var r providerOpenAIResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return modelResponse{}, fmt.Errorf("decode chat completion: %w", err)
	}
	if len(r.Choices) == 0 {
		return modelResponse{}, errors.New("decode chat completion: no choices")
	}
	ch := r.Choices[0]
	return providerOpenAIResult(r.Model, ch.Message.Content, ch.Message.ToolCalls, ch.FinishReason, r.Usage), nil
}

// stream implements providerWire: text deltas are emitted as they come,
// tool-call pieces are joined by their index, usage comes in the last chunk
// (stream_options.include_usage), and data: [DONE] ends the answer.
func (providerOpenAIWire) stream(events *providerSSE, emit func(string)) (modelResponse, error) {
	var (
		model  string
		text   strings.Builder
		calls  []providerOpenAIToolCall
		slots  = map[int]int{} // delta index → position in calls
		finish string
		usage  *providerOpenAIUsage
	)
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) && finish != "" {
			break // servers that end without [DONE]
		}
		if errors.Is(err, io.EOF) {
			return modelResponse{}, errProviderStreamCut
		}
		if err != nil {
			return modelResponse{}, err
		}
		if string(data) == "[DONE]" {
			break
		}
		var chunk providerOpenAIChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			return modelResponse{}, fmt.Errorf("decode chat completion chunk: %w", err)
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			return modelResponse{}, providerStreamError(data)
		}
		model = cmp.Or(model, chunk.Model)
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Delta.Content)
			emit(ch.Delta.Content)
			for i, d := range ch.Delta.ToolCalls {
				idx := i
				if d.Index != nil {
					idx = *d.Index
				}
				pos, ok := slots[idx]
				if !ok {
					pos = len(calls)
					slots[idx] = pos
					calls = append(calls, providerOpenAIToolCall{})
				}
				c := &calls[pos]
				c.ID = cmp.Or(c.ID, d.ID)
				c.Function.Name = cmp.Or(c.Function.Name, d.Function.Name)
				c.Function.Arguments += d.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return providerOpenAIResult(model, text.String(), calls, finish, usage), nil
}

// providerOpenAIResult builds the modelResponse of an answer, whole or
// streamed. A server that reports "stop" with tool calls (some
// OpenAI-compatible ones do) still yields stopToolCalls.
func providerOpenAIResult(model, text string, calls []providerOpenAIToolCall, finish string, usage *providerOpenAIUsage) modelResponse {
	resp := modelResponse{Model: model, Text: text}
	for _, c := range calls {
		resp.ToolCalls = append(resp.ToolCalls, toolCall{ID: c.ID, Name: c.Function.Name, Arguments: providerToolArgs(c.Function.Arguments)})
	}
	switch {
	case finish == "tool_calls" || finish == "function_call" || len(resp.ToolCalls) > 0:
		resp.StopReason = stopToolCalls
	case finish == "length":
		resp.StopReason = stopLength
	default:
		resp.StopReason = stopEnd
	}
	if usage != nil {
		resp.Usage = modelUsage{InputTokens: usage.PromptTokens, OutputTokens: usage.CompletionTokens}
	}
	return resp
}

// providerAnthropicWire speaks Anthropic messages.
type providerAnthropicWire struct{}

// providerAnthropicRequest is the body of POST /v1/messages.
type providerAnthropicRequest struct {
	Model         string                     `json:"model"`
	MaxTokens     int                        `json:"max_tokens"`
	System        string                     `json:"system,omitempty"`
	Messages      []providerAnthropicMessage `json:"messages"`
	Tools         []providerAnthropicTool    `json:"tools,omitempty"`
	ToolChoice    map[string]string          `json:"tool_choice,omitempty"`
	Temperature   *float64                   `json:"temperature,omitempty"`
	TopP          *float64                   `json:"top_p,omitempty"`
	StopSequences []string                   `json:"stop_sequences,omitempty"`
	Stream        bool                       `json:"stream,omitempty"`
}

// providerReplyTool is the tool through which an Anthropic model gives a
// reply in a requested format: offered last, its input is the reply, and
// tool_choice makes the model call a tool (this one when the agent has no
// other), so the reply is JSON its input schema shaped.
const providerReplyTool = "svc_reply"

// providerReplyFrom turns a call of providerReplyTool into the answer's
// text: the reply, as a final answer.
func providerReplyFrom(req modelRequest, resp modelResponse) modelResponse {
	if req.Format == nil {
		return resp
	}
	for _, c := range resp.ToolCalls {
		if c.Name == providerReplyTool {
			resp.Text, resp.ToolCalls, resp.StopReason = string(c.Arguments), nil, stopEnd
			return resp
		}
	}
	return resp
}

// providerAnthropicMessage is a message of a request.
type providerAnthropicMessage struct {
	Role    string                   `json:"role"` // "user" or "assistant"
	Content []providerAnthropicBlock `json:"content"`
}

// providerAnthropicBlock is a content block: text, tool_use or tool_result
// (thinking and other blocks of answers are ignored).
type providerAnthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// providerAnthropicTool offers a tool.
type providerAnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// providerAnthropicUsage counts tokens; cached input is counted apart.
type providerAnthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// merge takes the counts v reports: message_delta's are cumulative.
func (u *providerAnthropicUsage) merge(v providerAnthropicUsage) {
	u.InputTokens = cmp.Or(v.InputTokens, u.InputTokens)
	u.OutputTokens = cmp.Or(v.OutputTokens, u.OutputTokens)
	u.CacheCreationInputTokens = cmp.Or(v.CacheCreationInputTokens, u.CacheCreationInputTokens)
	u.CacheReadInputTokens = cmp.Or(v.CacheReadInputTokens, u.CacheReadInputTokens)
}

// providerAnthropicResponse is a complete answer, and the message of a
// message_start event.
type providerAnthropicResponse struct {
	Model      string                   `json:"model"`
	Content    []providerAnthropicBlock `json:"content"`
	StopReason string                   `json:"stop_reason"`
	Usage      providerAnthropicUsage   `json:"usage"`
}

// providerAnthropicEvent is one streamed event.
type providerAnthropicEvent struct {
	Type         string                     `json:"type"`
	Index        int                        `json:"index"`
	Message      *providerAnthropicResponse `json:"message"`
	ContentBlock *providerAnthropicBlock    `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *providerAnthropicUsage `json:"usage"`
}

// encode implements providerWire: the system prompt top-level, tool results
// as user-role tool_result blocks, and consecutive messages of one role
// (several tool results in particular) merged into one message.
func (providerAnthropicWire) encode(model string, req modelRequest, stream bool) any {
	out := providerAnthropicRequest{
		Model:         model,
		MaxTokens:     cmp.Or(req.MaxTokens, providerAnthropicMaxTokens),
		System:        req.System,
		Temperature:   req.Temperature,
		TopP:          req.TopP,
		StopSequences: req.Stop,
		Stream:        stream,
	}
	for _, m := range req.Messages {
		role, blocks := providerAnthropicBlocks(m)
		if len(blocks) == 0 {
			continue // Anthropic refuses empty content
		}
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			out.Messages[n-1].Content = append(out.Messages[n-1].Content, blocks...)
			continue
		}
		out.Messages = append(out.Messages, providerAnthropicMessage{Role: role, Content: blocks})
	}
	for _, t := range req.Tools {
		out.Tools = append(out.Tools, providerAnthropicTool{Name: t.Name, Description: t.Description, InputSchema: providerObject(t.Parameters, providerEmptySchema)})
	}
	if f := req.Format; f != nil {
		schema := json.RawMessage(`{"type":"object"}`)
		if f.Type == formatJSONSchema {
			schema = f.Schema
		}
		desc := "Give your final reply by calling this tool: its input is the reply."
		if f.Description != "" {
			desc += " The reply: " + f.Description
		}
		out.Tools = append(out.Tools, providerAnthropicTool{Name: providerReplyTool, Description: desc, InputSchema: schema})
		out.ToolChoice = map[string]string{"type": "any"}
		if len(req.Tools) == 0 {
			out.ToolChoice = map[string]string{"type": "tool", "name": providerReplyTool}
		}
	}
	return out
}

// providerAnthropicBlocks maps one message to its Anthropic role and blocks.
func providerAnthropicBlocks(m chatMessage) (string, []providerAnthropicBlock) {
	switch m.Role {
	case "tool":
		return "user", []providerAnthropicBlock{{Type: "tool_result", ToolUseID: m.ToolCallID, Content: m.Content, IsError: m.IsError}}
	case "assistant":
		var blocks []providerAnthropicBlock
		if m.Content != "" {
			blocks = append(blocks, providerAnthropicBlock{Type: "text", Text: m.Content})
		}
		for _, tc := range m.ToolCalls {
			blocks = append(blocks, providerAnthropicBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: providerObject(tc.Arguments, "{}")})
		}
		return "assistant", blocks
	}
	if m.Content == "" {
		return "user", nil
	}
	return "user", []providerAnthropicBlock{{Type: "text", Text: m.Content}}
}

// setHeaders implements providerWire.
func (providerAnthropicWire) setHeaders(h http.Header, apiKey string) {
	h.Set("x-api-key", apiKey)
	h.Set("anthropic-version", providerAnthropicVersion)
}

// decode implements providerWire.
func (providerAnthropicWire) decode(body []byte) (modelResponse, error) {
	var r providerAnthropicResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return modelResponse{}, fmt.Errorf("decode message: %w", err)
	}
	return providerAnthropicResult(r), nil
}

// stream implements providerWire: message_start gives the model and input
// usage, content_block_start/delta build text and tool_use blocks
// (input_json_delta pieces joined), message_delta gives the stop reason and
// cumulative usage, message_stop ends the answer and error reports a
// failure.
func (providerAnthropicWire) stream(events *providerSSE, emit func(string)) (modelResponse, error) {
	var msg providerAnthropicResponse
	var inputs []strings.Builder // partial JSON per block index
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			return modelResponse{}, errProviderStreamCut
		}
		if err != nil {
			return modelResponse{}, err
		}
		var ev providerAnthropicEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return modelResponse{}, fmt.Errorf("decode message event: %w", err)
		}
		if ev.Index < 0 || ev.Index > len(msg.Content) {
			return modelResponse{}, fmt.Errorf("decode message event: content block index %d out of order", ev.Index)
		}
		switch ev.Type {
		case "message_start":
			if ev.Message != nil {
				msg.Model = ev.Message.Model
				msg.Usage.merge(ev.Message.Usage)
			}
		case "content_block_start":
			if ev.ContentBlock == nil || ev.Index != len(msg.Content) {
				return modelResponse{}, fmt.Errorf("decode message event: content_block_start without a new block")
			}
			msg.Content = append(msg.Content, *ev.ContentBlock)
			inputs = append(inputs, strings.Builder{})
			emit(ev.ContentBlock.Text)
		case "content_block_delta":
			if ev.Index == len(msg.Content) {
				return modelResponse{}, fmt.Errorf("decode message event: content_block_delta before its block started")
			}
			switch ev.Delta.Type {
			case "text_delta":
				msg.Content[ev.Index].Text += ev.Delta.Text
				emit(ev.Delta.Text)
			case "input_json_delta":
				inputs[ev.Index].WriteString(ev.Delta.PartialJSON)
			}
		case "message_delta":
			msg.StopReason = cmp.Or(ev.Delta.StopReason, msg.StopReason)
			if ev.Usage != nil {
				msg.Usage.merge(*ev.Usage)
			}
		case "message_stop":
			for i := range msg.Content {
				if msg.Content[i].Type == "tool_use" && inputs[i].Len() > 0 {
					msg.Content[i].Input = json.RawMessage(inputs[i].String())
				}
			}
			return providerAnthropicResult(msg), nil
		case "error":
			return modelResponse{}, providerStreamError(data)
		}
	}
}

// providerAnthropicResult builds the modelResponse of an answer, whole or
// streamed: text blocks joined, tool_use blocks as tool calls, stop_reason
// mapped (end_turn, stop_sequence, refusal, pause_turn → stopEnd).
func providerAnthropicResult(r providerAnthropicResponse) modelResponse {
	resp := modelResponse{Model: r.Model}
	var text strings.Builder
	for _, b := range r.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			resp.ToolCalls = append(resp.ToolCalls, toolCall{ID: b.ID, Name: b.Name, Arguments: providerToolArgs(string(b.Input))})
		}
	}
	resp.Text = text.String()
	switch {
	case r.StopReason == "tool_use" || (r.StopReason == "" && len(resp.ToolCalls) > 0):
		resp.StopReason = stopToolCalls
	case r.StopReason == "max_tokens" || r.StopReason == "model_context_window_exceeded":
		resp.StopReason = stopLength
	default:
		resp.StopReason = stopEnd
	}
	u := r.Usage
	resp.Usage = modelUsage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
	return resp
}
