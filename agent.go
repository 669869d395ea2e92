package main

// The agent loop: a model call, the tool calls it asks for executed
// in-process (arguments validated against each tool's JSON Schema), repeated
// until the model answers without tools or the turn limit is reached. Tools
// the client supplied, and tools that need the user's approval, end the turn
// with the calls pending: the client answers them on its next turn.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/dop251/goja"
)

// Bounds of an agent turn.
const (
	// agentDefaultMaxTurns is how many model calls one turn may make unless
	// the agent sets maxTurns.
	agentDefaultMaxTurns = 10
	// agentMaxTurnsLimit caps maxTurns so a typo cannot make a turn unbounded.
	agentMaxTurnsLimit = 100
	// agentToolTimeout bounds one tool execution, async work included.
	agentToolTimeout = 2 * time.Minute
	// agentVMPoolSize bounds the idle tool VMs kept per compiled agent.
	agentVMPoolSize = 16
)

// callTool and callModel are the timeline kinds of an agent's tool call
// and model call in the runs API.
const (
	callTool  = "tool"
	callModel = "model"
)

// modelCallInfo is what a turn's timeline keeps of one model call (its
// model is the call's name).
type modelCallInfo struct {
	InputTokens  int    `json:"inputTokens"`
	OutputTokens int    `json:"outputTokens"`
	FinishReason string `json:"finishReason,omitempty"` // stopEnd, stopToolCalls or stopLength
}

// callApproval is the answer to a tool call that waited for the user:
// approved, refused, or unanswered (the user went on without answering).
type callApproval struct {
	Decision string    `json:"decision"`
	By       string    `json:"by,omitempty"` // who answered (turnActor)
	At       time.Time `json:"at"`
	Reason   string    `json:"reason,omitempty"`
}

// turnActor names the caller a turn acted for, as its runs may show it: a
// control plane's user or key, or an identity token's subject, as named;
// any other credential (a wire key, the console's) by the first 8 hex
// digits of its SHA-256 alone, never itself.
func turnActor(principal string) string {
	p := strings.TrimPrefix(principal, "signed:")
	for _, prefix := range []string{"cp-user:", "cp-key:", "identity:"} {
		if strings.HasPrefix(p, prefix) {
			return p
		}
	}
	sum := sha256.Sum256([]byte(principal))
	return "credential " + hex.EncodeToString(sum[:4])
}

// agentToolNamePattern is what both outbound providers accept as a tool name.
var agentToolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// agentTool is one tool an agent declared with tool({...}).
type agentTool struct {
	Name          string
	Description   string
	Parameters    json.RawMessage // JSON Schema of the arguments
	NeedsApproval bool
	schema        *jsonSchema // compiled Parameters
}

// agentSpec is what an agent's defineAgent({...}) declared, read once when
// the agent compiles, plus the idle VMs its tools run in. It belongs to one
// compiled catalog and is dropped with it.
type agentSpec struct {
	Instructions string
	Model        string // "" uses the provider's default
	MaxTurns     int
	Tools        []*agentTool // sorted by name
	vms          chan *agentVM
}

// tool returns the agent's tool called name, or nil.
func (s *agentSpec) tool(name string) *agentTool {
	for _, t := range s.Tools {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// readAgentSpec reads the agent definition def (the default export of file)
// and compiles its tools' schemas.
func readAgentSpec(vm *goja.Runtime, def *goja.Object, file string) (*agentSpec, error) {
	spec := &agentSpec{MaxTurns: agentDefaultMaxTurns, vms: make(chan *agentVM, agentVMPoolSize)}
	fail := func(format string, args ...any) error {
		return &compileError{File: file, Message: fmt.Sprintf(format, args...)}
	}
	if v := def.Get("instructions"); v != nil && !goja.IsUndefined(v) {
		s, ok := v.Export().(string)
		if !ok {
			return nil, fail("instructions must be a string")
		}
		spec.Instructions = s
	}
	if v := def.Get("model"); v != nil && !goja.IsUndefined(v) {
		s, ok := v.Export().(string)
		if !ok {
			return nil, fail("model must be a string")
		}
		spec.Model = s
	}
	if v := def.Get("maxTurns"); v != nil && !goja.IsUndefined(v) {
		n := v.ToInteger()
		if n < 1 || n > agentMaxTurnsLimit || float64(n) != v.ToFloat() {
			return nil, fail("maxTurns must be an integer between 1 and %d", agentMaxTurnsLimit)
		}
		spec.MaxTurns = int(n)
	}
	tools, ok := def.Get("tools").(*goja.Object)
	if !ok {
		return spec, nil
	}
	for _, name := range tools.Keys() {
		t, ok := tools.Get(name).(*goja.Object)
		if !ok || !jsTruthy(t.Get("__svcTool")) {
			return nil, fail("tools.%s must be made by tool({ description, parameters, execute })", name)
		}
		if !agentToolNamePattern.MatchString(name) {
			return nil, fail("tool name %q must be 1-64 letters, digits, _ or -", name)
		}
		at := &agentTool{Name: name, Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}
		if d := t.Get("description"); d != nil && !goja.IsUndefined(d) {
			at.Description = d.String()
		}
		if p := t.Get("parameters"); p != nil && !goja.IsUndefined(p) && !goja.IsNull(p) {
			b, err := jsonStringify(vm, p)
			if err != nil {
				return nil, fail("tools.%s.parameters is not JSON: %v", name, err)
			}
			at.Parameters = b
		}
		s, err := compileSchema(at.Parameters)
		if err != nil {
			return nil, fail("tools.%s.parameters: %v", name, err)
		}
		at.schema = s
		at.NeedsApproval = jsTruthy(t.Get("needsApproval"))
		spec.Tools = append(spec.Tools, at)
	}
	sort.Slice(spec.Tools, func(i, j int) bool { return spec.Tools[i].Name < spec.Tools[j].Name })
	return spec, nil
}

// jsTruthy reports whether a property value is truthy; a missing property
// (nil) is not.
func jsTruthy(v goja.Value) bool { return v != nil && v.ToBoolean() }

// agentVM is a VM holding an evaluated agent module, with timers and fetch,
// in which its tools' execute functions run. Idle VMs are pooled per agent.
type agentVM struct {
	vm    *goja.Runtime
	loop  *jsLoop
	tools *goja.Object // the definition's tools object
}

// agentRequest is one chat turn asked of an agent, as a wire decoded it
// (wires.go); the agent loop reads nothing of HTTP.
type agentRequest struct {
	Agent           string
	System          string // the client's system text, after the agent's instructions
	Messages        []chatMessage
	ClientTools     []toolSpec
	Stream          bool
	IncludeUsage    bool // OpenAI stream_options.include_usage
	MaxTokens       int
	Temperature     *float64
	TopP            *float64
	Stop            []string
	SessionKey      string                    // durable session ("" = none)
	SessionFrom     string                    // the stored session a new one continues (Responses: the previous response)
	Responses       bool                      // SessionKey and SessionFrom are kept responses (session_responses.go), not sessions
	ConversationKey string                    // grouping only
	Approvals       map[string]approvalAnswer // AG-UI resume entries, by tool call id
	ThreadID, RunID string                    // AG-UI
	ToolPolicy      *agentToolPolicy          // nil: the agent's tools as its author defined them
	Format          *modelFormat              // nil: the reply is free text
}

// agentToolPolicy is what the client asked of the agent's own tools (the
// Responses wire's mcp tool): which of them the model is offered, and which
// wait for the user's approval besides those the agent's author marked
// needsApproval (a client cannot lift those).
type agentToolPolicy struct {
	Allowed    map[string]bool  // nil: every tool of the agent
	ApproveAll bool             // every tool waits for approval
	Approve    map[string]bool  // these wait for approval
	Lift       map[string]bool  // the client asked these not to wait (refused when the author requires it)
	Names      []agentToolParam // every tool name the client gave, checked against the agent's tools
}

// agentToolParam is a tool name a client gave and the request parameter
// that holds it.
type agentToolParam struct{ Name, Param string }

// allows reports whether the model is offered the agent's tool name.
func (p *agentToolPolicy) allows(name string) bool {
	return p == nil || p.Allowed == nil || p.Allowed[name]
}

// approves reports whether the client asked that name wait for approval.
func (p *agentToolPolicy) approves(name string) bool {
	return p != nil && (p.ApproveAll || p.Approve[name])
}

// agentHost is what the chat wires need to run agents: the outbound model
// clients, tool VMs' environment, durable sessions, the credential check and
// the turn recorder. Built once at boot; its fields are read-only afterwards.
type agentHost struct {
	log      *slog.Logger
	env      func() map[string]string         // process.env of tool VMs
	platform *jsPlatform                      // globals and data of tool VMs
	models   func(*modelProvider) modelClient // the outbound client of a provider
	sessions *sessionStore                    // nil: no database, no durable sessions
	record   func(agentTurn) (string, error)  // records a finished turn as a run
	tracer   *otelTracer                      // spans of turns, model and tool calls (otel_agent.go); nil: none
}

// newToolVM evaluates the agent's module in a fresh VM for its tools.
func (h *agentHost) newToolVM(ag *agentDef) (*agentVM, error) {
	av := &agentVM{}
	_, exports, err := newModuleVM(ag.Module, vmOptions{
		Env:     h.env(),
		Log:     h.log.With("agent", ag.Name),
		Setup:   func(vm *goja.Runtime) { av.vm, av.loop = vm, newJSLoop(vm) },
		Install: func(ambient *goja.Object) { h.platform.install(av.loop, ambient) },
	})
	if err != nil {
		return nil, err
	}
	def, _ := exports.Get("default").(*goja.Object)
	if def == nil {
		return nil, fmt.Errorf("agent %q: no default export", ag.Name)
	}
	av.tools, _ = def.Get("tools").(*goja.Object)
	if av.tools == nil {
		return nil, fmt.Errorf("agent %q: no tools", ag.Name)
	}
	return av, nil
}

// agentToolContext is the second argument of a tool's execute function.
type agentToolContext struct {
	ToolCallID string `json:"toolCallId"`
	Agent      string `json:"agent"`
	SessionID  string `json:"sessionId,omitempty"`
}

// executeTool runs tool t of agent ag with JSON arguments args and returns
// the tool result's content: a returned string as is, anything else as
// JSON. A thrown error, a timeout or a VM failure is returned as an error.
func (h *agentHost) executeTool(ctx context.Context, ag *agentDef, t *agentTool, args json.RawMessage, tc agentToolContext) (string, error) {
	var av *agentVM
	select {
	case av = <-ag.Spec.vms:
	default:
		var err error
		if av, err = h.newToolVM(ag); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, agentToolTimeout)
	defer cancel()
	// A tool stuck in synchronous code is interrupted; its VM is then dropped.
	stopInterrupt := context.AfterFunc(ctx, func() { av.vm.Interrupt("tool execution timed out or was cancelled") })
	av.loop.trace = h.otelToolTrace(ctx)
	out, err := h.callExecute(ctx, av, t.Name, args, tc)
	av.loop.trace = otelUserTrace{}
	av.loop.release()
	if stopInterrupt() && av.loop.pending == 0 && ctx.Err() == nil {
		select {
		case ag.Spec.vms <- av:
		default:
		}
	} else {
		h.platform.abandon(av.loop)
	}
	return out, err
}

// callExecute calls tools[name].execute(args, context) in av and awaits it.
func (h *agentHost) callExecute(ctx context.Context, av *agentVM, name string, args json.RawMessage, tc agentToolContext) (string, error) {
	t, ok := av.tools.Get(name).(*goja.Object)
	if !ok {
		return "", fmt.Errorf("tool %q is not defined", name)
	}
	argv, err := jsonParse(av.vm, args)
	if err != nil {
		return "", fmt.Errorf("parse tool arguments: %w", err)
	}
	meta := av.vm.ToValue(tc)
	v, err := av.loop.await(ctx, callAsync(av.vm, t.Get("execute"), argv, meta))
	switch {
	case errors.Is(err, errLoopIdle):
		return "", errors.New("execute returned a promise that never settles")
	case err != nil:
		return "", err
	}
	if s, ok := v.Export().(string); ok {
		return s, nil
	}
	b, err := jsonStringify(av.vm, v)
	if err != nil {
		return "", fmt.Errorf("tool result is not JSON: %w", err)
	}
	return string(b), nil
}

// Kinds of agentEvent.
const (
	agentEventText       = "text"        // a piece of the model's text
	agentEventStepEnd    = "step_end"    // a model call finished
	agentEventToolResult = "tool_result" // a server-side tool finished
)

// agentEvent is something a turn produced, handed to the wire as it
// happens so streaming wires can forward it.
type agentEvent struct {
	Kind      string
	Step      int    // model call number, from 1
	MessageID string // the assistant message of the step
	Text      string
	Call      *toolCall    // agentEventToolResult: the call
	Result    *chatMessage // agentEventToolResult: its result
}

// Kinds of pendingCall.
const (
	pendingApproval = "approval" // an agent tool waiting for the user's approval
	pendingClient   = "client"   // a client-supplied tool the client must run
)

// pendingCall is a tool call the client must answer on its next turn.
type pendingCall struct {
	toolCall
	Kind string `json:"kind"`
}

// Stop reasons of an agentResult beyond the model's own.
const stopMaxTurns = "max_turns" // the turn limit ended the turn

// agentResult is the outcome of one turn.
type agentResult struct {
	MessageID  string        // the last step's assistant message
	Texts      []string      // the text of each model call, in order
	Pending    []pendingCall // calls the client must answer
	StopReason string        // stopEnd, stopToolCalls, stopLength or stopMaxTurns
	Usage      modelUsage
	Messages   []chatMessage  // every message of the turn, inputs first (for the session)
	Calls      []*durableCall // the tool calls, as the run's timeline
}

// text is the turn's text: each model call's text, blank-line separated.
func (r *agentResult) text() string {
	var parts []string
	for _, t := range r.Texts {
		if t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, agentTextSeparator)
}

// agentTextSeparator joins the texts of a turn's model calls.
const agentTextSeparator = "\n\n"

// agentLoop is one turn of one agent in progress.
type agentLoop struct {
	host        *agentHost
	agent       *agentDef
	client      modelClient
	req         modelRequest // Model, System, Tools, MaxTokens, Temperature; Messages grows
	clientTools map[string]bool
	policy      *agentToolPolicy
	durable     bool
	sessionID   string
	system      string // the provider's kind (gen_ai.system)
	stream      bool
	emit        func(agentEvent)
	res         agentResult
	// checkpoint, when set, keeps the turn's progress each time tools of the
	// agent ran (durable sessions: so a process that dies later in the turn
	// does not take with it what the tools did); ran says some ran since the
	// last one.
	checkpoint func(*agentResult)
	ran        bool
	// actor is who the turn acts for (turnActor); approvals are the
	// answers resolvePending read, by call id, for the timeline.
	actor     string
	approvals map[string]*callApproval
}

// newAgentLoop prepares a turn of ag: the system prompt (the agent's
// instructions, then the client's system text) and the tools offered to the
// model (the agent's, then the client's whose names the agent does not use).
func newAgentLoop(h *agentHost, ag *agentDef, client modelClient, p *modelProvider, wr *agentRequest, emit func(agentEvent)) *agentLoop {
	l := &agentLoop{host: h, agent: ag, client: client, clientTools: map[string]bool{}, policy: wr.ToolPolicy,
		durable: wr.SessionKey != "", sessionID: wr.SessionKey, stream: wr.Stream, emit: emit}
	l.req.Model = ag.Spec.Model
	if p != nil {
		l.system = p.Kind
		if l.req.Model == "" {
			l.req.Model = p.Model
		}
	}
	l.req.System = strings.TrimSpace(strings.Join([]string{ag.Spec.Instructions, wr.System}, "\n\n"))
	l.req.MaxTokens, l.req.Temperature, l.req.Format = wr.MaxTokens, wr.Temperature, wr.Format
	l.req.TopP, l.req.Stop = wr.TopP, wr.Stop
	for _, t := range ag.Spec.Tools {
		if !wr.ToolPolicy.allows(t.Name) {
			continue
		}
		l.req.Tools = append(l.req.Tools, toolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	for _, t := range wr.ClientTools {
		if ag.Spec.tool(t.Name) != nil || l.clientTools[t.Name] {
			continue
		}
		l.clientTools[t.Name] = true
		if len(t.Parameters) == 0 {
			t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		l.req.Tools = append(l.req.Tools, t)
	}
	return l
}

// add appends m to the conversation and to the turn's messages.
func (l *agentLoop) add(m chatMessage) {
	l.req.Messages = append(l.req.Messages, m)
	l.res.Messages = append(l.res.Messages, m)
}

// run continues the conversation history with the turn's new messages:
// answers to the calls pending from the previous turn (resolved first, so
// every call is answered before the conversation moves on), then the rest
// (less answers to calls the history already answered), and loops model
// calls and tools until the model answers, tools are pending, or the turn
// limit is reached. On error the result holds the progress made (tools
// already run), so a session keeps it.
func (l *agentLoop) run(ctx context.Context, history []chatMessage, pending []pendingCall, input []chatMessage, approvals map[string]approvalAnswer) (*agentResult, error) {
	l.req.Messages = append([]chatMessage(nil), history...)
	answered := map[string]bool{}
	for _, m := range history {
		if m.Role == "tool" {
			answered[m.ToolCallID] = true
		}
	}
	answers := map[string]chatMessage{}
	var rest []chatMessage
	for _, m := range input {
		switch {
		case m.Role == "tool" && agentIsPending(pending, m.ToolCallID):
			answers[m.ToolCallID] = m
		case m.Role == "tool" && answered[m.ToolCallID]:
			// An answer sent again to a call the session already answered:
			// a client retrying a turn whose process died after it had run
			// the call. The call does not run twice, nor does the model see
			// a second result.
		default:
			rest = append(rest, m)
		}
	}
	shared := map[string]int{}
	for _, p := range pending {
		shared[p.ID]++
	}
	for _, p := range pending {
		if shared[p.ID] > 1 {
			// Left by a version that kept the provider's ids: an answer cannot
			// tell these calls apart, so none of them runs on it.
			l.answer(p.toolCall, fmt.Sprintf("Another pending call shared this call's id, so the answer could not name it alone; %q was not run.", p.Name), true, nil)
			continue
		}
		l.resolvePending(ctx, p, answers, approvals)
	}
	for _, m := range rest {
		l.add(m)
	}
	l.kept()
	l.res.StopReason = stopEnd
	for step := 1; ; step++ {
		if step > l.agent.Spec.MaxTurns {
			msg := fmt.Sprintf("The agent stopped: it reached its limit of %d model calls for one turn (maxTurns) without a final answer.", l.agent.Spec.MaxTurns)
			l.stepDone(step, randomID("msg_", 12), msg, true)
			l.add(chatMessage{Role: "assistant", Content: msg})
			l.res.StopReason = stopMaxTurns
			return &l.res, nil
		}
		resp, err := l.callModel(ctx, step)
		if err != nil {
			return &l.res, err
		}
		l.add(chatMessage{Role: "assistant", Content: resp.Text, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			if resp.StopReason == stopLength {
				l.res.StopReason = stopLength
			}
			if l.req.Format != nil {
				// The reply is the final call's text alone, in the format asked.
				l.res.Texts = []string{resp.Text}
				return &l.res, l.req.Format.check(resp.Text)
			}
			return &l.res, nil
		}
		for _, c := range resp.ToolCalls {
			l.handleCall(ctx, c)
		}
		if len(l.res.Pending) > 0 {
			l.res.StopReason = stopToolCalls
			return &l.res, nil
		}
		l.kept()
	}
}

// kept hands the turn's progress to checkpoint when tools ran since the
// last time.
func (l *agentLoop) kept() {
	if l.ran && l.checkpoint != nil {
		l.checkpoint(&l.res)
	}
	l.ran = false
}

// stepDone records model call number step (its assistant message id and
// text) and tells the wire it ended; emitText sends the text first when it
// was not streamed.
func (l *agentLoop) stepDone(step int, id, text string, emitText bool) {
	l.res.MessageID = id
	l.res.Texts = append(l.res.Texts, text)
	if emitText && text != "" {
		l.emit(agentEvent{Kind: agentEventText, Step: step, MessageID: id, Text: text})
	}
	l.emit(agentEvent{Kind: agentEventStepEnd, Step: step, MessageID: id})
}

// callModel makes model call number step, streaming its text to the wire
// when the client streams.
func (l *agentLoop) callModel(ctx context.Context, step int) (modelResponse, error) {
	id := randomID("msg_", 12)
	streamed := false
	var onDelta func(modelDelta)
	if l.stream {
		onDelta = func(d modelDelta) {
			if d.Text != "" {
				streamed = true
				l.emit(agentEvent{Kind: agentEventText, Step: step, MessageID: id, Text: d.Text})
			}
		}
	}
	sctx, span := l.otelModelCall(ctx)
	started := time.Now()
	resp, err := l.client.complete(sctx, l.req, onDelta)
	l.otelModelDone(span, resp, err)
	l.recordModel(started, resp, err)
	if err != nil {
		return resp, err
	}
	l.res.Usage.InputTokens += resp.Usage.InputTokens
	l.res.Usage.OutputTokens += resp.Usage.OutputTokens
	l.stepDone(step, id, resp.Text, !streamed)
	for i := range resp.ToolCalls {
		if len(resp.ToolCalls[i].Arguments) == 0 {
			resp.ToolCalls[i].Arguments = json.RawMessage("{}")
		}
		// The provider's id is the model's to choose, so two calls may share
		// one; an approval or a client's result must name exactly one call.
		// Every call gets an id of ours, which the conversation (and so the
		// provider's next round trip) carries from here on.
		resp.ToolCalls[i].ID = agentCallID()
	}
	return resp, nil
}

// recordModel adds a model call that began at started to the timeline.
func (l *agentLoop) recordModel(started time.Time, resp modelResponse, err error) {
	now := time.Now()
	ms := float64(now.Sub(started).Microseconds()) / 1000
	name := cmp.Or(resp.Model, l.req.Model, l.system, "model") // what answered, else what was asked
	dc := &durableCall{Seq: len(l.res.Calls) + 1, Kind: callModel, Name: name, Status: runCompleted, StartedAt: started, EndedAt: &now, DurationMs: &ms,
		Model: &modelCallInfo{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, FinishReason: resp.StopReason}}
	if err != nil {
		dc.Status, dc.Error = runFailed, &runError{Name: "ModelError", Message: err.Error()}
	}
	l.res.Calls = append(l.res.Calls, dc)
}

// agentCallID returns a new tool call id: 96 random bits, so unique in any
// session, in the character set both vendors accept for call ids.
func agentCallID() string { return randomID("call_", 12) }

// handleCall answers one tool call of the model: an agent tool runs (or,
// needing approval, waits in a durable session and is refused otherwise);
// a client tool is passed to the client; anything else is an error result.
func (l *agentLoop) handleCall(ctx context.Context, c toolCall) {
	t := l.agent.Spec.tool(c.Name)
	if t != nil && !l.policy.allows(c.Name) {
		t = nil // not offered: as if it did not exist
	}
	approval := t != nil && (t.NeedsApproval || l.policy.approves(c.Name))
	switch {
	case approval && l.durable:
		l.wait(c, pendingApproval)
	case approval:
		l.answer(c, fmt.Sprintf("Tool %q needs the user's approval, and approvals exist only in a durable session: the client must send an x-svc-session header (or, on the agent-UI wire, a non-empty threadId). The tool was not run.", c.Name), true, nil)
	case t != nil:
		l.runTool(ctx, t, c)
	case l.clientTools[c.Name]:
		l.wait(c, pendingClient)
	default:
		l.answer(c, fmt.Sprintf("There is no tool named %q.", c.Name), true, nil)
	}
}

// wait leaves c for the client to answer. In the timeline the call is
// handed over, not waiting: the turn ends with it, and the session's next
// turn records its outcome.
func (l *agentLoop) wait(c toolCall, kind string) {
	l.res.Pending = append(l.res.Pending, pendingCall{toolCall: c, Kind: kind})
	now := time.Now()
	l.res.Calls = append(l.res.Calls, &durableCall{Seq: len(l.res.Calls) + 1, Kind: callTool, Name: c.Name, Status: runCompleted, StartedAt: now, EndedAt: &now,
		Arguments: c.Arguments, Handoff: kind})
}

// runTool validates c's arguments against t's schema and runs t, answering
// the model with its result, or with the violations or the thrown error.
func (l *agentLoop) runTool(ctx context.Context, t *agentTool, c toolCall) {
	started := time.Now()
	violations, err := t.schema.validateJSON(c.Arguments)
	if err != nil {
		l.answer(c, fmt.Sprintf("The arguments of %q are not valid JSON: %v", c.Name, err), true, &started)
		return
	}
	if len(violations) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "The arguments of %q do not match its parameters schema:", c.Name)
		for _, v := range violations {
			fmt.Fprintf(&b, "\n- %s: %s", orRoot(v.Path), v.Message)
		}
		l.answer(c, b.String(), true, &started)
		return
	}
	tctx, span := l.otelToolCall(ctx, c)
	l.ran = true
	out, err := l.host.executeTool(tctx, l.agent, t, c.Arguments, agentToolContext{ToolCallID: c.ID, Agent: l.agent.Name, SessionID: l.sessionID})
	span.end(err)
	if err != nil {
		l.answer(c, fmt.Sprintf("Tool %q failed: %v", c.Name, err), true, &started)
		return
	}
	l.answer(c, out, false, &started)
}

// answer adds the tool result for c, records it in the timeline (started
// nil: nothing ran) and tells the wire.
func (l *agentLoop) answer(c toolCall, content string, isErr bool, started *time.Time) {
	m := l.record(c, content, isErr, started)
	l.emit(agentEvent{Kind: agentEventToolResult, Call: &c, Result: &m})
}

// record adds the tool result for c to the conversation and the timeline.
func (l *agentLoop) record(c toolCall, content string, isErr bool, started *time.Time) chatMessage {
	m := chatMessage{Role: "tool", Content: content, ToolCallID: c.ID, ToolName: c.Name, IsError: isErr}
	l.add(m)
	now := time.Now()
	dc := &durableCall{Seq: len(l.res.Calls) + 1, Kind: callTool, Name: c.Name, Status: runCompleted, StartedAt: now, EndedAt: &now,
		Arguments: c.Arguments, Approval: l.approvals[c.ID]}
	if started != nil {
		dc.StartedAt = *started
		ms := float64(now.Sub(*started).Microseconds()) / 1000
		dc.DurationMs = &ms
	}
	if isErr {
		dc.Status, dc.Error = runFailed, &runError{Message: content}
	} else {
		dc.Result = agentJSONOrString(content)
	}
	l.res.Calls = append(l.res.Calls, dc)
	return m
}

// agentJSONOrString returns s when it is JSON, else s as a JSON string.
func agentJSONOrString(s string) json.RawMessage {
	if codeJSON.check([]byte(s)) == nil {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// approvalAnswer is the client's answer to a pending approval given outside
// the conversation (an agent-UI resume entry).
type approvalAnswer struct {
	Approved bool
	Reason   string // why, when refused
}

// agentIsPending reports whether id names one of the pending calls.
func agentIsPending(pending []pendingCall, id string) bool {
	for _, p := range pending {
		if p.ID == id {
			return true
		}
	}
	return false
}

// resolvePending answers a call left pending by the previous turn: a
// client tool with the client's result; an approval by running the tool
// when approved ({"approved": true}) or telling the model the user refused.
// An unanswered call is answered as refused or failed, so the conversation
// stays well-formed.
func (l *agentLoop) resolvePending(ctx context.Context, p pendingCall, answers map[string]chatMessage, approvals map[string]approvalAnswer) {
	m, answered := answers[p.ID]
	if p.Kind == pendingClient {
		// The client ran the tool: it already shows the result.
		if !answered {
			l.record(p.toolCall, "The client did not return a result for this tool call.", true, nil)
			return
		}
		l.record(p.toolCall, m.Content, m.IsError, nil)
		return
	}
	a, ok := approvals[p.ID]
	if !ok && answered {
		a, ok = agentParseApproval(m.Content)
	}
	decided := &callApproval{Decision: "unanswered", By: l.actor, At: time.Now()}
	switch {
	case ok && a.Approved:
		decided.Decision = "approved"
	case ok:
		decided.Decision, decided.Reason = "refused", a.Reason
	}
	if l.approvals == nil {
		l.approvals = map[string]*callApproval{}
	}
	l.approvals[p.ID] = decided
	t := l.agent.Spec.tool(p.Name)
	switch {
	case !ok && answered:
		l.answer(p.toolCall, fmt.Sprintf("The user's answer to the approval request was not {\"approved\": true|false}, so the call was treated as refused and %q was not run.", p.Name), true, nil)
	case !ok:
		l.answer(p.toolCall, fmt.Sprintf("The user did not answer the approval request and continued the conversation; %q was not run.", p.Name), true, nil)
	case !a.Approved:
		msg := fmt.Sprintf("The user refused to approve this call; %q was not run.", p.Name)
		if a.Reason != "" {
			msg += " Reason: " + a.Reason
		}
		l.answer(p.toolCall, msg, true, nil)
	case t == nil:
		l.answer(p.toolCall, fmt.Sprintf("Tool %q no longer exists.", p.Name), true, nil)
	default:
		l.runTool(ctx, t, p.toolCall)
	}
}

// agentParseApproval reads a tool result answering an approval: a JSON object
// {"approved": true|false, "reason"?: string}.
func agentParseApproval(content string) (approvalAnswer, bool) {
	var v struct {
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(content), &v); err != nil || v.Approved == nil {
		return approvalAnswer{}, false
	}
	return approvalAnswer{Approved: *v.Approved, Reason: v.Reason}, true
}
