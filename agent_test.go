package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// agentTestSource is the agent the agent and wire tests run: a plain tool,
// an async one, one that throws, and one that needs approval.
const agentTestSource = `import { defineAgent, tool } from "svc";
export default defineAgent({
  instructions: "You are the test agent.",
  maxTurns: 3,
  tools: {
    add: tool({
      description: "Add two numbers",
      parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      execute: async ({ a, b }, ctx) => ({ sum: a + b, call: ctx.toolCallId }),
    }),
    later: tool({
      description: "Answers after a timer",
      execute: () => new Promise((resolve) => setTimeout(() => resolve("done later"), 5)),
    }),
    boom: tool({
      description: "Always throws",
      execute: () => { throw new Error("kaboom"); },
    }),
    refund: tool({
      description: "Refund an order",
      parameters: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
      needsApproval: true,
      execute: async ({ orderId }) => ({ refunded: orderId }),
    }),
  },
});
`

// agentScript is a scripted modelClient with the fake provider's rules: the
// last message decides the answer. A tool result → "tool <name> said:
// <content>"; a user message "call <tool> <json>" → that tool call; "loop"
// anywhere → always call add; "fail" → a 429 from the provider; else
// "echo: <text>". Streamed text arrives in two pieces.
type agentScript struct {
	mu   sync.Mutex
	reqs []modelRequest
}

// complete answers req by the script.
func (m *agentScript) complete(ctx context.Context, req modelRequest, onDelta func(modelDelta)) (modelResponse, error) {
	m.mu.Lock()
	req.Messages = append([]chatMessage(nil), req.Messages...)
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	resp := modelResponse{Model: req.Model, StopReason: stopEnd, Usage: modelUsage{InputTokens: 3, OutputTokens: 2}}
	loop := false
	for _, msg := range req.Messages {
		loop = loop || (msg.Role == "user" && msg.Content == "loop")
	}
	call := func(name, args string) {
		resp.ToolCalls = []toolCall{{ID: randomID("call_", 6), Name: name, Arguments: json.RawMessage(args)}}
		resp.StopReason = stopToolCalls
	}
	switch {
	case loop:
		call("add", `{"a":1,"b":2}`)
	case last.Role == "tool":
		resp.Text = fmt.Sprintf("tool %s said: %s", last.ToolName, last.Content)
	case last.Content == "hang": // a provider that never answers
		<-ctx.Done()
		return modelResponse{}, ctx.Err()
	case last.Content == "fail":
		return modelResponse{}, &upstreamError{Provider: providerOpenAI, Status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Message: "slow down"}
	case strings.HasPrefix(last.Content, "call "):
		name, args, _ := strings.Cut(strings.TrimPrefix(last.Content, "call "), " ")
		call(name, args)
	default:
		resp.Text = "echo: " + last.Content
	}
	if onDelta != nil && resp.Text != "" {
		half := len(resp.Text) / 2
		onDelta(modelDelta{Text: resp.Text[:half]})
		onDelta(modelDelta{Text: resp.Text[half:]})
	}
	return resp, nil
}

// requests returns the requests the script has answered.
func (m *agentScript) requests() []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.reqs...)
}

// agentTestCompile compiles a project holding the agent "helper" with src.
func agentTestCompile(t *testing.T, src string) *catalog {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "deep-agents/helper/index.ts", src)
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil {
		t.Fatalf("compile: %v", cerr)
	}
	return cat
}

// agentTestHost returns a host whose model is script, without sessions.
func agentTestHost(script modelClient) *agentHost {
	return &agentHost{
		log: discardLogger(), env: func() map[string]string { return map[string]string{} },
		models: func(*modelProvider) modelClient { return script },
	}
}

// agentTestTurn runs one stateless turn of "helper" with a user message.
func agentTestTurn(t *testing.T, h *agentHost, ag *agentDef, wr *agentRequest) (*agentResult, []agentEvent) {
	t.Helper()
	var events []agentEvent
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.runTurn(ctx, ag, &modelProvider{Kind: providerOpenAI, Model: "default-model"}, wireOpenAI, "cred", wr, func(ev agentEvent) { events = append(events, ev) })
	if err != nil {
		t.Fatalf("runTurn: %v", err)
	}
	return res, events
}

// agentToolResults returns the tool messages of the turn.
func agentToolResults(res *agentResult) []chatMessage {
	var out []chatMessage
	for _, m := range res.Messages {
		if m.Role == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// TestAgentLoopTools runs turns through the loop: server tools, schema
// violations, throws, approvals without a session, the turn limit and
// client tools.
func TestAgentLoopTools(t *testing.T) {
	cat := agentTestCompile(t, agentTestSource)
	ag := cat.Agents["helper"]
	if ag == nil {
		t.Fatalf("agent not compiled: %v", cat.Failed)
	}
	tests := []struct {
		name      string
		say       string
		clientFn  string // a client tool offered with the request
		wantText  string // substring of the turn's text
		wantTool  string // substring of the tool result ("" = no tool ran)
		wantErr   bool   // the tool result is an error
		wantStop  string
		wantCalls int // model calls
	}{
		{"plain answer", "hi", "", "echo: hi", "", false, stopEnd, 1},
		{"tool runs", `call add {"a":2,"b":3}`, "", `tool add said: {"sum":5`, `"sum":5`, false, stopEnd, 2},
		{"async tool", `call later {}`, "", "tool later said: done later", "done later", false, stopEnd, 2},
		{"schema-invalid arguments", `call add {"a":"x"}`, "", "do not match its parameters schema", "/a", true, stopEnd, 2},
		{"arguments not an object", `call add [1]`, "", "do not match", "(root)", true, stopEnd, 2},
		{"thrown error", `call boom {}`, "", "kaboom", "kaboom", true, stopEnd, 2},
		{"unknown tool", `call nope {}`, "", `no tool named "nope"`, "There is no tool", true, stopEnd, 2},
		{"approval without a session is refused", `call refund {"orderId":"o1"}`, "", "x-svc-session", "x-svc-session", true, stopEnd, 2},
		{"turn limit", "loop", "", "limit of 3 model calls", `"sum":3`, false, stopMaxTurns, 3},
		{"client tool passes through", `call pick {"color":"red"}`, "pick", "", "", false, stopToolCalls, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script := &agentScript{}
			wr := &agentRequest{Agent: "helper", Messages: []chatMessage{{Role: "user", Content: tt.say}}}
			if tt.clientFn != "" {
				wr.ClientTools = []toolSpec{{Name: tt.clientFn, Parameters: json.RawMessage(`{"type":"object"}`)}}
			}
			res, _ := agentTestTurn(t, agentTestHost(script), ag, wr)
			if !strings.Contains(res.text(), tt.wantText) {
				t.Errorf("text = %q; want it to contain %q", res.text(), tt.wantText)
			}
			if res.StopReason != tt.wantStop {
				t.Errorf("stop = %q; want %q", res.StopReason, tt.wantStop)
			}
			if n := len(script.requests()); n != tt.wantCalls {
				t.Errorf("model calls = %d; want %d", n, tt.wantCalls)
			}
			results := agentToolResults(res)
			if tt.wantTool == "" {
				if len(results) > 0 {
					t.Errorf("tool results = %+v; want none", results)
				}
			} else if len(results) == 0 || !strings.Contains(results[0].Content, tt.wantTool) || results[0].IsError != tt.wantErr {
				t.Errorf("tool results = %+v; want the first to contain %q with isError %v", results, tt.wantTool, tt.wantErr)
			}
			if tt.clientFn != "" && (len(res.Pending) != 1 || res.Pending[0].Kind != pendingClient || string(res.Pending[0].Arguments) != `{"color":"red"}`) {
				t.Errorf("pending = %+v; want the client call to %s", res.Pending, tt.clientFn)
			}
		})
	}
}

// TestAgentCallIDsAreOurs: the model chooses its calls' ids, so two calls
// may share one (a hostile model does it on purpose). Every call gets an id
// of ours; pending calls left sharing an id (by a version that kept the
// provider's) are refused on any answer, never run together.
func TestAgentCallIDsAreOurs(t *testing.T) {
	cat := agentTestCompile(t, agentTestSource)
	ag := cat.Agents["helper"]
	h := agentTestHost(&agentScript{})
	dup := []toolCall{{ID: "dup1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":1}`)}, {ID: "dup1", Name: "add", Arguments: json.RawMessage(`{"a":2,"b":2}`)}}
	script := agentModelFunc(func(req modelRequest) modelResponse {
		if req.Messages[len(req.Messages)-1].Role == "tool" {
			return modelResponse{Text: "done", StopReason: stopEnd}
		}
		return modelResponse{ToolCalls: append([]toolCall(nil), dup...), StopReason: stopToolCalls}
	})
	l := newAgentLoop(h, ag, script, nil, &agentRequest{Agent: "helper"}, func(agentEvent) {})
	res, err := l.run(context.Background(), nil, nil, []chatMessage{{Role: "user", Content: "go"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res.Messages {
		for _, c := range m.ToolCalls {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) != 2 || ids[0] == ids[1] || ids[0] == "dup1" || !strings.HasPrefix(ids[0], "call_") {
		t.Fatalf("call ids = %v; want two distinct ids of ours", ids)
	}

	// A session saved with two pending approvals under one id.
	pending := []pendingCall{{toolCall: dup[0], Kind: pendingApproval}, {toolCall: dup[1], Kind: pendingApproval}}
	history := []chatMessage{{Role: "user", Content: "go"}, {Role: "assistant", ToolCalls: dup}}
	l = newAgentLoop(h, ag, script, nil, &agentRequest{Agent: "helper", SessionKey: "s"}, func(agentEvent) {})
	res, err = l.run(context.Background(), history, pending, nil, map[string]approvalAnswer{"dup1": {Approved: true}})
	if err != nil {
		t.Fatal(err)
	}
	results := agentToolResults(res)
	if len(results) != 2 {
		t.Fatalf("results = %+v; want both calls answered", results)
	}
	for _, r := range results {
		if !r.IsError || !strings.Contains(r.Content, "was not run") {
			t.Errorf("result %+v; want the call refused, not run", r)
		}
	}
}

// agentModelFunc is a model client answering every request with f.
type agentModelFunc func(modelRequest) modelResponse

func (f agentModelFunc) complete(_ context.Context, req modelRequest, _ func(modelDelta)) (modelResponse, error) {
	return f(req), nil
}

// TestAgentRequestShape checks the system prompt, model and tools offered.
func TestAgentRequestShape(t *testing.T) {
	cat := agentTestCompile(t, agentTestSource)
	script := &agentScript{}
	wr := &agentRequest{Agent: "helper", System: "Answer in French.", Messages: []chatMessage{{Role: "user", Content: "hi"}},
		ClientTools: []toolSpec{{Name: "pick"}, {Name: "add", Description: "a client tool shadowed by the agent's"}}}
	agentTestTurn(t, agentTestHost(script), cat.Agents["helper"], wr)
	req := script.requests()[0]
	if req.System != "You are the test agent.\n\nAnswer in French." {
		t.Errorf("system = %q; want the instructions, then the client's system text", req.System)
	}
	if req.Model != "default-model" {
		t.Errorf("model = %q; want the provider default", req.Model)
	}
	var names []string
	for _, tool := range req.Tools {
		names = append(names, tool.Name)
		if tool.Name == "add" && tool.Description != "Add two numbers" {
			t.Errorf("tool add = %+v; want the agent's own", tool)
		}
	}
	if got := strings.Join(names, ","); got != "add,boom,later,refund,pick" {
		t.Errorf("tools offered = %s; want the agent's (sorted) then the client's", got)
	}
}

// TestAgentStreamingEvents checks the events a streamed turn emits.
func TestAgentStreamingEvents(t *testing.T) {
	cat := agentTestCompile(t, agentTestSource)
	wr := &agentRequest{Agent: "helper", Stream: true, Messages: []chatMessage{{Role: "user", Content: `call add {"a":1,"b":1}`}}}
	res, events := agentTestTurn(t, agentTestHost(&agentScript{}), cat.Agents["helper"], wr)
	var kinds []string
	var text strings.Builder
	for _, ev := range events {
		kinds = append(kinds, ev.Kind)
		text.WriteString(ev.Text)
	}
	want := "step_end,tool_result,text,text,step_end"
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("events = %s; want %s", got, want)
	}
	if text.String() != res.text() {
		t.Errorf("streamed text %q != result text %q", text.String(), res.text())
	}
	// The timeline: each model call with its figures, the tool call between them with its arguments.
	var calls []string
	for _, c := range res.Calls {
		calls = append(calls, c.Kind+":"+c.Name)
	}
	if len(res.Calls) != 3 || strings.Join(calls, ",") != callModel+":"+res.Calls[0].Name+","+callTool+":add,"+callModel+":"+res.Calls[0].Name {
		t.Fatalf("timeline = %v; want a model call, add, a model call", calls)
	}
	if add := res.Calls[1]; add.Status != runCompleted || string(add.Arguments) == "" || add.Handoff != "" {
		t.Errorf("add = %+v; want completed with its arguments", add)
	}
	for _, m := range []*durableCall{res.Calls[0], res.Calls[2]} {
		if m.Model == nil || m.DurationMs == nil || m.Status != runCompleted || m.Model.FinishReason == "" {
			t.Errorf("model call = %+v %+v; want its figures", m, m.Model)
		}
	}
	if res.Calls[0].Model.FinishReason != stopToolCalls {
		t.Errorf("first model call finished %q; want %q", res.Calls[0].Model.FinishReason, stopToolCalls)
	}
}

// TestAgentUpstreamError checks provider failures reach the caller.
func TestAgentUpstreamError(t *testing.T) {
	cat := agentTestCompile(t, agentTestSource)
	h := agentTestHost(&agentScript{})
	_, err := h.runTurn(context.Background(), cat.Agents["helper"], &modelProvider{Kind: providerOpenAI}, wireOpenAI, "c",
		&agentRequest{Agent: "helper", Messages: []chatMessage{{Role: "user", Content: "fail"}}}, func(agentEvent) {})
	var ue *upstreamError
	if !errors.As(err, &ue) || ue.Status != http.StatusTooManyRequests {
		t.Fatalf("err = %v; want the provider's 429", err)
	}
	if _, err := h.runTurn(context.Background(), cat.Agents["helper"], nil, wireOpenAI, "c", &agentRequest{}, func(agentEvent) {}); !errors.Is(err, errNoModelProvider) {
		t.Errorf("no provider: err = %v; want errNoModelProvider", err)
	}
}

// TestReadAgentSpec checks what defineAgent may declare.
func TestReadAgentSpec(t *testing.T) {
	tests := []struct {
		name, src, wantErr string
	}{
		{"minimal", `import { defineAgent } from "svc"; export default defineAgent({ instructions: "x" });`, ""},
		{"model and maxTurns", `import { defineAgent } from "svc"; export default defineAgent({ model: "m", maxTurns: 5 });`, ""},
		{"maxTurns zero", `import { defineAgent } from "svc"; export default defineAgent({ maxTurns: 0 });`, "maxTurns must be an integer"},
		{"maxTurns fraction", `import { defineAgent } from "svc"; export default defineAgent({ maxTurns: 1.5 });`, "maxTurns must be an integer"},
		{"instructions not a string", `import { defineAgent } from "svc"; export default defineAgent({ instructions: 3 });`, "instructions must be a string"},
		{"tool not made by tool()", `import { defineAgent } from "svc"; export default defineAgent({ tools: { t: { execute() {} } } });`, "tools.t must be made by tool"},
		{"bad tool name", `import { defineAgent, tool } from "svc"; export default defineAgent({ tools: { "a b": tool({ execute() {} }) } });`, "tool name \"a b\""},
		{"invalid schema", `import { defineAgent, tool } from "svc"; export default defineAgent({ tools: { t: tool({ parameters: { type: "nope" }, execute() {} }) } });`, "tools.t.parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat := agentTestCompile(t, tt.src)
			ce := cat.Failed["helper"]
			switch {
			case tt.wantErr == "" && ce != nil:
				t.Fatalf("compile failed: %v", ce)
			case tt.wantErr != "" && (ce == nil || !strings.Contains(ce.Error(), tt.wantErr)):
				t.Fatalf("compile error = %v; want one containing %q", ce, tt.wantErr)
			case tt.wantErr != "" && !strings.HasPrefix(ce.Error(), "deep-agents/helper/index.ts"):
				t.Errorf("compile error %q does not name the file", ce)
			}
		})
	}
	spec := agentTestCompile(t, agentTestSource).Agents["helper"].Spec
	if spec.MaxTurns != 3 || !spec.tool("refund").NeedsApproval || spec.tool("add").NeedsApproval || spec.Instructions != "You are the test agent." {
		t.Errorf("spec = %+v; want maxTurns 3, refund needing approval", spec)
	}
}
