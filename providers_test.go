package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// providerTestKey is the API key the tests' clients send.
const providerTestKey = "sk-test-secret-4242"

// providerTestKinds returns the provider kinds the tests run.
func providerTestKinds() []string {
	return []string{providerOpenAI, providerCompat, providerAnthropic}
}

// providerTestBase returns the base URL of a fake at url for kind.
func providerTestBase(kind, url string) string {
	if kind == providerAnthropic {
		return url
	}
	return url + "/v1"
}

// providerTestClient returns a client of kind for the server at url, with
// retries fast enough for tests.
func providerTestClient(t *testing.T, kind, url string) *providerClient {
	t.Helper()
	return providerTestClientBase(t, kind, providerTestBase(kind, url))
}

// providerTestClientBase is providerTestClient given the base URL.
func providerTestClientBase(t *testing.T, kind, base string) *providerClient {
	t.Helper()
	c, ok := newModelClient(&modelProvider{Kind: kind, APIKey: providerTestKey, BaseURL: base}, nil).(*providerClient)
	if !ok {
		t.Fatalf("newModelClient(%q) is not a *providerClient", kind)
	}
	c.policy = providerPolicy{Timeout: 20 * time.Second, Attempts: 3, Backoff: time.Millisecond, RetryAfterCap: 5 * time.Millisecond}
	return c
}

// providerTestCall calls c, streaming when stream is set, and returns the
// answer and the text deltas received.
func providerTestCall(c modelClient, req modelRequest, stream bool) (modelResponse, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var deltas []string
	var onDelta func(modelDelta)
	if stream {
		onDelta = func(d modelDelta) { deltas = append(deltas, d.Text) }
	}
	resp, err := c.complete(ctx, req, onDelta)
	return resp, deltas, err
}

// providerTestUpstream returns err as an *upstreamError, failing the test
// when it is not one.
func providerTestUpstream(t *testing.T, err error) *upstreamError {
	t.Helper()
	var ue *upstreamError
	if !errors.As(err, &ue) {
		t.Fatalf("error = %v (%T); want an *upstreamError", err, err)
	}
	return ue
}

// providerTestBody returns the decoded body of rec without its stream
// fields, after checking them: stream and, for OpenAI wires,
// stream_options.include_usage when streaming; neither otherwise.
func providerTestBody(t *testing.T, kind string, rec fakeRequest, stream bool) map[string]any {
	t.Helper()
	body := rec.Body
	want := map[string]any{}
	if stream {
		want["stream"] = true
		if kind != providerAnthropic {
			want["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	got := map[string]any{}
	for _, k := range []string{"stream", "stream_options"} {
		if v, ok := body[k]; ok {
			got[k] = v
			delete(body, k)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stream fields = %v; want %v", got, want)
	}
	return body
}

// providerTestJSON decodes a JSON literal of a test's expectations.
func providerTestJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad expectation %s: %v", s, err)
	}
	return v
}

// providerTestSameJSON fails the test unless got and want are equal JSON.
func providerTestSameJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	g, _ := json.Marshal(got)
	var gv, wv any
	json.Unmarshal(g, &gv)
	if err := json.Unmarshal([]byte(want), &wv); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	if !reflect.DeepEqual(gv, wv) {
		t.Errorf("%s = %s\nwant %s", what, g, want)
	}
}

// providerTestHeaders checks the authentication headers of rec for kind.
func providerTestHeaders(t *testing.T, kind string, rec fakeRequest) {
	t.Helper()
	want := map[string]string{"Authorization": "Bearer " + providerTestKey, "X-Api-Key": "", "Anthropic-Version": ""}
	if kind == providerAnthropic {
		want = map[string]string{"Authorization": "", "X-Api-Key": providerTestKey, "Anthropic-Version": "2023-06-01"}
	}
	for h, v := range want {
		if got := rec.Header.Get(h); got != v {
			t.Errorf("header %s = %q; want %q", h, got, v)
		}
	}
	if got := rec.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("header Content-Type = %q; want application/json", got)
	}
}

func TestProviderText(t *testing.T) {
	wantBodies := map[string]string{
		providerOpenAI: `{"model":"test-model","messages":[
			{"role":"system","content":"Be brief."},{"role":"user","content":"hello there"}]}`,
		providerAnthropic: `{"model":"test-model","max_tokens":4096,"system":"Be brief.","messages":[
			{"role":"user","content":[{"type":"text","text":"hello there"}]}]}`,
	}
	wantBodies[providerCompat] = wantBodies[providerOpenAI]
	want := modelResponse{Model: "test-model", Text: "echo: hello there", StopReason: stopEnd, Usage: modelUsage{InputTokens: 4, OutputTokens: 3}}
	for _, kind := range providerTestKinds() {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", kind, stream), func(t *testing.T) {
				f := newFakeProvider(t)
				c := providerTestClient(t, kind, f.URL)
				req := modelRequest{Model: "test-model", System: "Be brief.", Messages: []chatMessage{{Role: "user", Content: "hello there"}}}
				resp, deltas, err := providerTestCall(c, req, stream)
				if err != nil {
					t.Fatalf("complete: %v", err)
				}
				if !reflect.DeepEqual(resp, want) {
					t.Errorf("complete = %+v; want %+v", resp, want)
				}
				var wantDeltas []string
				if stream {
					wantDeltas = []string{"echo: ", "hello ", "there"}
				}
				if !slices.Equal(deltas, wantDeltas) {
					t.Errorf("deltas = %q; want %q", deltas, wantDeltas)
				}
				reqs := f.requests()
				if len(reqs) != 1 {
					t.Fatalf("the provider got %d requests; want 1", len(reqs))
				}
				wantPath := map[bool]string{true: "/v1/messages", false: "/v1/chat/completions"}[kind == providerAnthropic]
				if reqs[0].Path != wantPath {
					t.Errorf("path = %q; want %q", reqs[0].Path, wantPath)
				}
				providerTestHeaders(t, kind, reqs[0])
				body := providerTestBody(t, kind, reqs[0], stream)
				if want := providerTestJSON(t, wantBodies[kind]); !reflect.DeepEqual(body, want) {
					t.Errorf("request body = %v\nwant %v", body, want)
				}
			})
		}
	}
}

func TestProviderToolRoundTrip(t *testing.T) {
	tools := []toolSpec{
		{Name: "add", Description: "Add two numbers", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)},
		{Name: "mul"},
	}
	prompt := "call add {\"a\":2,\"b\":3}\ncall mul {\"a\":2,\"b\":3}"
	wantCalls := `[{"id":"call_1","name":"add","arguments":{"a":2,"b":3}},{"id":"call_2","name":"mul","arguments":{"a":2,"b":3}}]`
	wantBodies := map[string]string{
		providerOpenAI: `{"model":"test-model","messages":[
			{"role":"system","content":"Use tools."},
			{"role":"user","content":"call add {\"a\":2,\"b\":3}\ncall mul {\"a\":2,\"b\":3}"},
			{"role":"assistant","content":null,"tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"add","arguments":"{\"a\":2,\"b\":3}"}},
				{"id":"call_2","type":"function","function":{"name":"mul","arguments":"{\"a\":2,\"b\":3}"}}]},
			{"role":"tool","content":"5","tool_call_id":"call_1"},
			{"role":"tool","content":"no such op","tool_call_id":"call_2"}],
		"tools":[
			{"type":"function","function":{"name":"add","description":"Add two numbers","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}},
			{"type":"function","function":{"name":"mul","parameters":{"type":"object","properties":{}}}}]}`,
		providerAnthropic: `{"model":"test-model","max_tokens":4096,"system":"Use tools.","messages":[
			{"role":"user","content":[{"type":"text","text":"call add {\"a\":2,\"b\":3}\ncall mul {\"a\":2,\"b\":3}"}]},
			{"role":"assistant","content":[
				{"type":"tool_use","id":"call_1","name":"add","input":{"a":2,"b":3}},
				{"type":"tool_use","id":"call_2","name":"mul","input":{"a":2,"b":3}}]},
			{"role":"user","content":[
				{"type":"tool_result","tool_use_id":"call_1","content":"5"},
				{"type":"tool_result","tool_use_id":"call_2","content":"no such op","is_error":true}]}],
		"tools":[
			{"name":"add","description":"Add two numbers","input_schema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}},
			{"name":"mul","input_schema":{"type":"object","properties":{}}}]}`,
	}
	wantBodies[providerCompat] = wantBodies[providerOpenAI]
	for _, kind := range providerTestKinds() {
		t.Run(kind, func(t *testing.T) {
			var answers [2][]modelResponse // by stream: the two turns' answers
			for i, stream := range []bool{false, true} {
				f := newFakeProvider(t)
				c := providerTestClient(t, kind, f.URL)
				req := modelRequest{Model: "test-model", System: "Use tools.", Tools: tools, Messages: []chatMessage{{Role: "user", Content: prompt}}}
				first, deltas, err := providerTestCall(c, req, stream)
				if err != nil {
					t.Fatalf("stream=%v: turn 1: %v", stream, err)
				}
				if first.StopReason != stopToolCalls || first.Text != "" || len(deltas) != 0 {
					t.Errorf("stream=%v: turn 1 = %+v, deltas %q; want tool calls only", stream, first, deltas)
				}
				providerTestSameJSON(t, fmt.Sprintf("stream=%v: turn 1 tool calls", stream), first.ToolCalls, wantCalls)

				req.Messages = append(req.Messages,
					chatMessage{Role: "assistant", ToolCalls: first.ToolCalls},
					chatMessage{Role: "tool", ToolCallID: "call_1", ToolName: "add", Content: "5"},
					chatMessage{Role: "tool", ToolCallID: "call_2", ToolName: "mul", Content: "no such op", IsError: true},
				)
				second, deltas, err := providerTestCall(c, req, stream)
				if err != nil {
					t.Fatalf("stream=%v: turn 2: %v", stream, err)
				}
				if want := "tool add said: 5\ntool mul said: no such op"; second.Text != want || second.StopReason != stopEnd || len(second.ToolCalls) != 0 {
					t.Errorf("stream=%v: turn 2 = %+v; want text %q, stop", stream, second, want)
				}
				if stream && strings.Join(deltas, "") != second.Text {
					t.Errorf("turn 2 deltas %q do not join into %q", deltas, second.Text)
				}
				reqs := f.requests()
				if len(reqs) != 2 {
					t.Fatalf("stream=%v: the provider got %d requests; want 2", stream, len(reqs))
				}
				body := providerTestBody(t, kind, reqs[1], stream)
				if want := providerTestJSON(t, wantBodies[kind]); !reflect.DeepEqual(body, want) {
					t.Errorf("stream=%v: turn 2 request body = %v\nwant %v", stream, body, want)
				}
				answers[i] = []modelResponse{first, second}
			}
			if !reflect.DeepEqual(answers[0], answers[1]) {
				t.Errorf("streamed answers %+v differ from whole ones %+v", answers[1], answers[0])
			}
		})
	}
}

func TestProviderStopLength(t *testing.T) {
	wantField := map[string]string{providerOpenAI: "max_completion_tokens", providerCompat: "max_tokens", providerAnthropic: "max_tokens"}
	for _, kind := range providerTestKinds() {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", kind, stream), func(t *testing.T) {
				f := newFakeProvider(t)
				c := providerTestClient(t, kind, f.URL)
				req := modelRequest{MaxTokens: 3, Messages: []chatMessage{{Role: "user", Content: "one two three four"}}}
				resp, _, err := providerTestCall(c, req, stream)
				if err != nil {
					t.Fatalf("complete: %v", err)
				}
				if resp.Text != "echo: one two" || resp.StopReason != stopLength {
					t.Errorf("complete = %+v; want text %q, stop %q", resp, "echo: one two", stopLength)
				}
				body := f.requests()[0].Body
				for _, field := range []string{"max_tokens", "max_completion_tokens"} {
					got, ok := body[field]
					if want := field == wantField[kind]; ok != want || (ok && got != float64(3)) {
						t.Errorf("request %s = %v (present %v); want present %v with 3", field, got, ok, want)
					}
				}
			})
		}
	}
}

func TestProviderRetries(t *testing.T) {
	tests := []struct {
		name          string
		status, fails int
		wantRequests  int
		wantErr       bool
		wantType      map[bool]string // by "is Anthropic"
	}{
		{name: "429 then success", status: 429, fails: 2, wantRequests: 3},
		{name: "503 then success", status: 503, fails: 1, wantRequests: 2},
		{name: "529 then success", status: 529, fails: 2, wantRequests: 3},
		{name: "503 exhausted", status: 503, fails: 3, wantRequests: 3, wantErr: true, wantType: map[bool]string{false: "server_error", true: "api_error"}},
		{name: "429 exhausted", status: 429, fails: 5, wantRequests: 3, wantErr: true, wantType: map[bool]string{false: "requests", true: "rate_limit_error"}},
		{name: "400 not retried", status: 400, fails: 1, wantRequests: 1, wantErr: true, wantType: map[bool]string{false: "invalid_request_error", true: "invalid_request_error"}},
		{name: "401 not retried", status: 401, fails: 1, wantRequests: 1, wantErr: true, wantType: map[bool]string{false: "invalid_request_error", true: "authentication_error"}},
	}
	for _, kind := range providerTestKinds() {
		for _, tt := range tests {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/stream=%v", kind, tt.name, stream), func(t *testing.T) {
					f := newFakeProvider(t)
					c := providerTestClient(t, kind, f.URL)
					f.failNext(tt.status, tt.fails)
					resp, _, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}, stream)
					if n := len(f.requests()); n != tt.wantRequests {
						t.Errorf("the provider got %d requests; want %d", n, tt.wantRequests)
					}
					if !tt.wantErr {
						if err != nil || resp.Text != "echo: hi" {
							t.Fatalf("complete = %+v, %v; want echo: hi", resp, err)
						}
						return
					}
					ue := providerTestUpstream(t, err)
					wantMsg := fmt.Sprintf("fake provider: injected failure with status %d", tt.status)
					if ue.Provider != kind || ue.Status != tt.status || ue.Message != wantMsg || ue.Type != tt.wantType[kind == providerAnthropic] {
						t.Errorf("error = %+v; want provider %q, status %d, type %q, message %q", ue, kind, tt.status, tt.wantType[kind == providerAnthropic], wantMsg)
					}
				})
			}
		}
	}
}

func TestProviderInterruptedStream(t *testing.T) {
	for _, kind := range providerTestKinds() {
		t.Run(kind+"/after text: not retried", func(t *testing.T) {
			f := newFakeProvider(t)
			c := providerTestClient(t, kind, f.URL)
			f.interruptNext(1)
			_, deltas, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hello there"}}}, true)
			if ue := providerTestUpstream(t, err); ue.Type != "stream_interrupted" {
				t.Errorf("error = %+v; want type stream_interrupted", ue)
			}
			if want := []string{"echo: "}; !slices.Equal(deltas, want) {
				t.Errorf("deltas = %q; want %q", deltas, want)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("the provider got %d requests; want 1 (no retry once text was delivered)", n)
			}
		})
		t.Run(kind+"/before text: retried", func(t *testing.T) {
			f := newFakeProvider(t)
			c := providerTestClient(t, kind, f.URL)
			f.interruptNext(1) // cuts the first answer inside its tool arguments
			resp, _, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: `call add {"a":1,"b":2}`}}}, true)
			if err != nil {
				t.Fatalf("complete: %v", err)
			}
			providerTestSameJSON(t, "tool calls", resp.ToolCalls, `[{"id":"call_2","name":"add","arguments":{"a":1,"b":2}}]`)
			if n := len(f.requests()); n != 2 {
				t.Errorf("the provider got %d requests; want 2", n)
			}
		})
	}
}

// providerTestStall returns the URL of a server that, for streamed
// requests, sends an OpenAI chunk with text first, then answers nothing
// until the client goes away or the test ends.
func providerTestStall(t *testing.T) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			s := &fakeProvStream{w: w}
			s.start()
			s.send("", `{"model":"m","choices":[{"index":0,"delta":{"content":"partial"},"finish_reason":null}]}`, true)
		}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first: lets a stalled handler end
	return srv.URL
}

func TestProviderTimeout(t *testing.T) {
	url := providerTestStall(t)
	for _, kind := range providerTestKinds() {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", kind, stream), func(t *testing.T) {
				c := providerTestClient(t, kind, url)
				c.policy.Timeout = 100 * time.Millisecond
				_, _, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}, stream)
				if ue := providerTestUpstream(t, err); ue.Type != "timeout" || ue.Status != 0 {
					t.Errorf("error = %+v; want type timeout, status 0", ue)
				}
			})
		}
	}
	t.Run("caller deadline", func(t *testing.T) {
		c := providerTestClient(t, providerOpenAI, url)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := c.complete(ctx, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}, nil)
		var ue *upstreamError
		if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ue) {
			t.Errorf("complete = %v; want the caller's context.DeadlineExceeded", err)
		}
	})
}

func TestProviderRetryAfterCapped(t *testing.T) {
	f := newFakeProvider(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "3600")
			fakeProvOpenAIError(w, http.StatusTooManyRequests, "slow down")
			return
		}
		f.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := providerTestClient(t, providerOpenAI, srv.URL)
	// The test's own 15 s deadline fails the call if the hour is waited.
	resp, _, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}, false)
	if err != nil || resp.Text != "echo: hi" {
		t.Fatalf("complete = %+v, %v; want echo: hi after one capped wait", resp, err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the provider got %d requests; want 2", n)
	}
}

func TestProviderRetryAfterHeader(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{"milliseconds first", map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{"http date", map[string]string{"Retry-After": now.Add(30 * time.Second).Format(http.TimeFormat)}, 30 * time.Second},
		{"past date", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := providerRetryAfter(h, now); got != tt.want {
				t.Errorf("providerRetryAfter(%v) = %v; want %v", tt.header, got, tt.want)
			}
		})
	}
}

func TestProviderBackoff(t *testing.T) {
	c := &providerClient{policy: providerDefaultPolicy()}
	tests := []struct {
		name     string
		attempt  int
		after    time.Duration
		min, max time.Duration
	}{
		{"first retry", 1, 0, 250 * time.Millisecond, 500 * time.Millisecond},
		{"second retry doubles", 2, 0, 500 * time.Millisecond, time.Second},
		{"retry-after honoured", 1, 3 * time.Second, 3 * time.Second, 3 * time.Second},
		{"retry-after capped", 1, time.Hour, 20 * time.Second, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 50 {
				if got := c.backoff(tt.attempt, tt.after); got < tt.min || got > tt.max {
					t.Fatalf("backoff(%d, %v) = %v; want within [%v, %v]", tt.attempt, tt.after, got, tt.min, tt.max)
				}
			}
		})
	}
}

func TestProviderParseError(t *testing.T) {
	tests := []struct {
		name, body        string
		wantType, wantMsg string
	}{
		{"openai", `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, "requests", "Rate limit reached"},
		{"openai code only", `{"error":{"message":"bad key","type":null,"code":"invalid_api_key"}}`, "invalid_api_key", "bad key"},
		{"anthropic", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "overloaded_error", "Overloaded"},
		{"ollama", `{"error":"model \"llama9\" not found"}`, "", `model "llama9" not found`},
		{"vllm", `{"object":"error","message":"context too long","type":"BadRequestError","code":400}`, "BadRequestError", "context too long"},
		{"text", "upstream connect error\n", "", "upstream connect error"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ, msg := providerParseError([]byte(tt.body))
			if typ != tt.wantType || msg != tt.wantMsg {
				t.Errorf("providerParseError(%q) = %q, %q; want %q, %q", tt.body, typ, msg, tt.wantType, tt.wantMsg)
			}
		})
	}
}

func TestProviderStreamErrorEvent(t *testing.T) {
	f := newFakeProvider(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			s := &fakeProvStream{w: w}
			s.start()
			s.send("message_start", `{"type":"message_start","message":{"model":"m","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`, false)
			s.send("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false)
			return
		}
		f.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := providerTestClient(t, providerAnthropic, srv.URL)
	req := modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}
	_, _, err := providerTestCall(c, req, true)
	if ue := providerTestUpstream(t, err); ue.Status != 529 || ue.Type != "overloaded_error" || ue.Message != "Overloaded" {
		t.Errorf("error = %+v; want 529 overloaded_error Overloaded", ue)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the provider got %d requests; want 3 (retried, nothing was delivered)", n)
	}
	if resp, _, err := providerTestCall(c, req, true); err != nil || resp.Text != "echo: hi" {
		t.Errorf("after the errors: complete = %+v, %v; want echo: hi", resp, err)
	}
}

func TestProviderStreamAnsweredWhole(t *testing.T) {
	f := newFakeProvider(t)
	// A server that ignores stream:true: the body is forwarded without it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		delete(body, "stream")
		b, _ := json.Marshal(body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		f.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := providerTestClient(t, providerCompat, srv.URL)
	resp, deltas, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hello there"}}}, true)
	if err != nil || resp.Text != "echo: hello there" || !slices.Equal(deltas, []string{"echo: hello there"}) {
		t.Errorf("complete = %+v, deltas %q, %v; want the whole text as one delta", resp, deltas, err)
	}
}

func TestProviderNoSecretInErrors(t *testing.T) {
	// A provider that quotes the credential back in its error message.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages" {
			fakeProvAnthropicError(w, http.StatusUnauthorized, "invalid x-api-key "+r.Header.Get("x-api-key"))
			return
		}
		fakeProvOpenAIError(w, http.StatusUnauthorized, "Incorrect API key provided: "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	tests := []struct {
		name, kind, base string
		wantStatus       int
	}{
		{"openai echoes the key", providerOpenAI, srv.URL + "/v1", 401},
		{"anthropic echoes the key", providerAnthropic, srv.URL, 401},
		{"unreachable, password in the URL", providerCompat, "http://user:hunter2-password@" + closed + "/v1?api-key=" + providerTestKey, 0},
		{"bad base URL with a password", providerCompat, "http://user:hunter2-password@127.0.0.1:notaport/v1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := providerTestClientBase(t, tt.kind, tt.base)
			_, _, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}, false)
			ue := providerTestUpstream(t, err)
			if ue.Status != tt.wantStatus {
				t.Errorf("status = %d; want %d", ue.Status, tt.wantStatus)
			}
			for _, secret := range []string{providerTestKey, "hunter2-password"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error text %q contains a secret", err)
				}
			}
		})
	}
}

func TestProviderDefaults(t *testing.T) {
	tests := []struct {
		name               string
		p                  modelProvider
		wantURL, wantModel string
	}{
		{"openai", modelProvider{Kind: providerOpenAI, APIKey: "k"}, "https://api.openai.com/v1/chat/completions", "gpt-4o-mini"},
		{"anthropic", modelProvider{Kind: providerAnthropic, APIKey: "k"}, "https://api.anthropic.com/v1/messages", "claude-haiku-4-5"},
		{"compat", modelProvider{Kind: providerCompat}, "http://127.0.0.1:11434/v1/chat/completions", "llama3.2"},
		{"base and SVC_MODEL", modelProvider{Kind: providerCompat, BaseURL: "http://gpu:8000/v1/", Model: "qwen"}, "http://gpu:8000/v1/chat/completions", "qwen"},
		{"anthropic base", modelProvider{Kind: providerAnthropic, APIKey: "k", BaseURL: "http://proxy:9/"}, "http://proxy:9/v1/messages", "claude-haiku-4-5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := newModelClient(&tt.p, nil).(*providerClient)
			if !ok || c.url != tt.wantURL || c.model != tt.wantModel {
				t.Errorf("newModelClient(%+v) = %+v; want url %q, model %q", tt.p, c, tt.wantURL, tt.wantModel)
			}
		})
	}
	t.Run("no provider", func(t *testing.T) {
		for _, p := range []*modelProvider{nil, {Kind: "gemini"}} {
			_, err := newModelClient(p, nil).complete(context.Background(), modelRequest{}, nil)
			if !errors.Is(err, errNoModelProvider) {
				t.Errorf("newModelClient(%v).complete = %v; want errNoModelProvider", p, err)
			}
		}
	})
	t.Run("SVC_MODEL used, no key sent", func(t *testing.T) {
		f := newFakeProvider(t)
		c := newModelClient(&modelProvider{Kind: providerCompat, BaseURL: f.URL + "/v1", Model: "svc-model"}, f.Client())
		resp, _, err := providerTestCall(c, modelRequest{Messages: []chatMessage{{Role: "user", Content: "hi"}}}, false)
		if err != nil || resp.Model != "svc-model" {
			t.Fatalf("complete = %+v, %v; want model svc-model", resp, err)
		}
		rec := f.requests()[0]
		if rec.Body["model"] != "svc-model" || rec.Header.Get("Authorization") != "" {
			t.Errorf("request model %v, Authorization %q; want svc-model and none", rec.Body["model"], rec.Header.Get("Authorization"))
		}
	})
}
