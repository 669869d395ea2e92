package main

// The OpenAI Responses wire (POST /openai/v1/responses): what the Vercel AI
// SDK's default openai("…") provider and OpenAI's Agents SDK call. It drives
// the same agent turn as the other wires (wires.go), in the Responses
// shapes: a response object of output items, or a stream of typed events
// (response.created … response.completed).
//
// Output items: the text of each model call is a "message" item; a tool the
// agent ran on the server is an "mcp_call" item (a tool run for the caller,
// the API's hosted-tool shape, so SDKs do not try to run it); a client tool
// the model called is a "function_call" item the caller answers with a
// "function_call_output"; a tool that needs approval is an
// "mcp_approval_request" item the caller answers with an
// "mcp_approval_response" ({"approve": true|false}).
//
// Storage (store, true by default, and previous_response_id): every kept
// response is a row of its own (session_responses.go) holding the
// messages its turn added and pointing at the response it continues. A
// request naming a previous response (or referring to its output items:
// item_reference, as SDKs send with store) continues that response's
// conversation under the new response's id, so a retry or a branch from
// an older response continues from exactly there. GET and DELETE
// /openai/v1/responses/{id} read back and delete kept responses.
// Ids carry the chain of responses they belong to (resp_<chain>_<self>;
// items <kind>_<chain>_<self>_<n>), and the chain groups its turns in the
// runs API (conversationId responses_<chain>). x-svc-session works as on
// the other wires: one session, whatever ids the responses have.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// wireOpenAIResponses is the Responses wire's name on recorded turns.
const wireOpenAIResponses = "openai-responses"

// responsesIDBytes is the random bytes of each half of a response id.
const responsesIDBytes = 12

// responsesServerLabel is the server_label of the items of the agent's own
// tools (mcp_call, mcp_approval_request).
const responsesServerLabel = "svc"

// responsesID names a response: the chain of responses it belongs to and
// itself, each random hex.
type responsesID struct{ chain, self string }

// newResponsesID returns a new response id in chain, or in a new chain
// when chain is "".
func newResponsesID(chain string) responsesID {
	if chain == "" {
		chain = randomID("", responsesIDBytes)
	}
	return responsesID{chain: chain, self: randomID("", responsesIDBytes)}
}

// String is the response id: resp_<chain>_<self>.
func (id responsesID) String() string { return "resp_" + id.chain + "_" + id.self }

// item is the id of one of the response's output items.
func (id responsesID) item(kind, suffix string) string {
	return kind + "_" + id.chain + "_" + id.self + "_" + suffix
}

// conversation is the key grouping the chain's turns in the runs API.
func (id responsesID) conversation() string { return "responses_" + id.chain }

// responsesHexPart reports whether s is one random half of an id.
func responsesHexPart(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 2*responsesIDBytes
}

// parseResponsesID parses a response id made by String.
func parseResponsesID(s string) (responsesID, bool) {
	rest, ok := strings.CutPrefix(s, "resp_")
	chain, self, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || !responsesHexPart(chain) || !responsesHexPart(self) {
		return responsesID{}, false
	}
	return responsesID{chain: chain, self: self}, true
}

// parseResponsesItem parses an output item id made by item: the response
// it belongs to and its suffix.
func parseResponsesItem(s string) (responsesID, string, bool) {
	_, rest, _ := strings.Cut(s, "_")
	parts := strings.SplitN(rest, "_", 3)
	if len(parts) != 3 || !responsesHexPart(parts[0]) || !responsesHexPart(parts[1]) || parts[2] == "" {
		return responsesID{}, "", false
	}
	return responsesID{chain: parts[0], self: parts[1]}, parts[2], true
}

// responsesRequest is the body of POST /openai/v1/responses. Fields not
// listed are refused unless they ask for what svc does anyway
// (wireParamsResponses), or accepted as hints without effect (docs/agents.md).
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       string            `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	Stream             bool              `json:"stream"`
	PreviousResponseID string            `json:"previous_response_id"`
	Store              *bool             `json:"store"`
	MaxOutputTokens    int               `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Metadata           json.RawMessage   `json:"metadata"`
	Conversation       json.RawMessage   `json:"conversation"`
	Background         bool              `json:"background"`
	Text               struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
}

// responsesFormat is text.format: text, json_object or json_schema.
type responsesFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

// responsesTool is a tool of the request: a function tool the client runs,
// or the mcp tool declaring the agent's own tools (server_label "svc", what
// the Agents SDK's hostedMcpTool sends; its server_url, headers and
// authorization say how to reach a server, and svc is that server).
type responsesTool struct {
	Type            string          `json:"type"`
	Name            string          `json:"name"`
	Description     string          `json:"description"`
	Parameters      json.RawMessage `json:"parameters"`
	ServerLabel     string          `json:"server_label"`
	RequireApproval json.RawMessage `json:"require_approval"`
	AllowedTools    json.RawMessage `json:"allowed_tools"`
	AllowedCallers  json.RawMessage `json:"allowed_callers"`
	DeferLoading    bool            `json:"defer_loading"`
}

// responsesToolFilter is the object form of allowed_tools and of
// require_approval's always and never.
type responsesToolFilter struct {
	ToolNames []string `json:"tool_names"`
	ReadOnly  *bool    `json:"read_only"`
}

// decodeTools reads the request's tools: function tools become the
// client's tools; the mcp tool labelled svc becomes the policy over the
// agent's own tools. Any other tool is refused, naming it.
func (c *responsesWire) decodeTools(wr *agentRequest) *wireError {
	for i, raw := range c.req.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		var t responsesTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return responsesInvalid(param, "a tool must be an object: %v", err)
		}
		switch {
		case t.Type == "function" && t.Name != "":
			wr.ClientTools = append(wr.ClientTools, toolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		case t.Type == "function":
			return responsesInvalid(param+".name", "a function tool needs a name")
		case t.Type == "mcp" && t.ServerLabel != responsesServerLabel:
			return responsesInvalid(param+".server_label", "the only MCP server of this wire is the agent's own tools, server_label %q; got %q (svc does not call other MCP servers)", responsesServerLabel, t.ServerLabel)
		case t.Type == "mcp" && wr.ToolPolicy != nil:
			return responsesInvalid(param, "the mcp tool %q is declared twice", responsesServerLabel)
		case t.Type == "mcp" && t.DeferLoading:
			return responsesInvalid(param+".defer_loading", "defer_loading is not supported: the agent's tools are always loaded")
		case t.Type == "mcp" && len(t.AllowedCallers) > 0 && string(t.AllowedCallers) != "null":
			return responsesInvalid(param+".allowed_callers", "allowed_callers is not supported: the agent's model calls its tools directly")
		case t.Type == "mcp":
			wr.ToolPolicy = &agentToolPolicy{}
			if e := responsesAllowedTools(wr.ToolPolicy, t.AllowedTools, param+".allowed_tools"); e != nil {
				return e
			}
			if e := responsesRequireApproval(wr.ToolPolicy, t.RequireApproval, param+".require_approval"); e != nil {
				return e
			}
		default:
			return responsesInvalid(param+".type", "unsupported tool type %q: send function tools ({\"type\":\"function\",\"name\":…,\"parameters\":…}) and the mcp tool of the agent's own tools ({\"type\":\"mcp\",\"server_label\":%q})", t.Type, responsesServerLabel)
		}
	}
	return nil
}

// responsesToolNames reads a list of tool names or a filter object
// ({"tool_names": […]}) at param; read_only is refused, as svc does not
// know which of the agent's tools only read.
func responsesToolNames(p *agentToolPolicy, raw json.RawMessage, param string) ([]string, *wireError) {
	var names []string
	if json.Unmarshal(raw, &names) != nil {
		var f responsesToolFilter
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, responsesInvalid(param, "must be a list of tool names or {\"tool_names\": [...]}: %v", err)
		}
		if f.ReadOnly != nil && *f.ReadOnly {
			return nil, responsesInvalid(param+".read_only", "read_only is not supported: svc does not know which of the agent's tools only read; list them in tool_names")
		}
		names, param = f.ToolNames, param+".tool_names"
	}
	for j, n := range names {
		p.Names = append(p.Names, agentToolParam{Name: n, Param: fmt.Sprintf("%s[%d]", param, j)})
	}
	return names, nil
}

// responsesAllowedTools reads allowed_tools: the only agent tools the
// model is offered.
func responsesAllowedTools(p *agentToolPolicy, raw json.RawMessage, param string) *wireError {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	names, e := responsesToolNames(p, raw, param)
	if e != nil {
		return e
	}
	p.Allowed = map[string]bool{}
	for _, n := range names {
		p.Allowed[n] = true
	}
	return nil
}

// responsesRequireApproval reads require_approval: "always" makes every
// agent tool wait for approval, {"always": {"tool_names": […]}} those;
// "never" (the Agents SDK's default) asks for none beyond the agent's own
// (a tool its author marked needsApproval still waits), and naming such a
// tool under {"never": …} is refused.
func responsesRequireApproval(p *agentToolPolicy, raw json.RawMessage, param string) *wireError {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "always":
			p.ApproveAll = true
		case "never":
		default:
			return responsesInvalid(param, "require_approval must be \"always\", \"never\" or {\"always\": {\"tool_names\": [...]}, \"never\": {...}}; got %q", mode)
		}
		return nil
	}
	var v struct {
		Always json.RawMessage `json:"always"`
		Never  json.RawMessage `json:"never"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return responsesInvalid(param, "require_approval must be \"always\", \"never\" or {\"always\": {\"tool_names\": [...]}, \"never\": {...}}: %v", err)
	}
	for _, side := range []struct {
		raw  json.RawMessage
		name string
		set  *map[string]bool
	}{{v.Always, "always", &p.Approve}, {v.Never, "never", &p.Lift}} {
		if len(side.raw) == 0 || string(side.raw) == "null" {
			continue
		}
		names, e := responsesToolNames(p, side.raw, param+"."+side.name)
		if e != nil {
			return e
		}
		*side.set = map[string]bool{}
		for _, n := range names {
			(*side.set)[n] = true
		}
	}
	return nil
}

// responsesItem is an input item, of any type.
type responsesItem struct {
	Type              string          `json:"type"`
	ID                string          `json:"id"`
	Role              string          `json:"role"`
	Content           json.RawMessage `json:"content"`
	CallID            string          `json:"call_id"`
	Name              string          `json:"name"`
	Arguments         string          `json:"arguments"`
	Output            json.RawMessage `json:"output"`
	ApprovalRequestID string          `json:"approval_request_id"`
	Approve           *bool           `json:"approve"`
	Reason            string          `json:"reason"`
}

// responsesWire is the Responses wire, one per request: decode keeps what
// the answer echoes and names.
type responsesWire struct {
	sessions    *sessionStore // nil: no database, responses are not kept
	log         *slog.Logger
	credential  string // the caller's, which its kept responses belong to
	req         responsesRequest
	id          responsesID
	stored      bool              // this response is kept: previous_response_id may name it
	kept        bool              // it is kept as a response of its own (not in an x-svc-session session): GET serves it
	approvalIDs map[string]string // call id → the mcp_approval_request id the input answered
}

// name is the wire's name on recorded turns.
func (*responsesWire) name() string { return wireOpenAIResponses }

// responsesInvalid is a 400 about param.
func responsesInvalid(param, format string, args ...any) *wireError {
	return &wireError{Status: http.StatusBadRequest, Kind: wireErrInvalid, Param: param, Message: fmt.Sprintf(format, args...)}
}

// decode reads a Responses request: instructions and system or developer
// messages join the agent's instructions; the input items become the
// turn's messages and approvals; previous_response_id (or the response the
// input's references name) is the kept response the turn continues.
func (c *responsesWire) decode(r *http.Request, body []byte) (*agentRequest, *wireError) {
	if e := wireDecodeJSON(body, &c.req); e != nil {
		return nil, e
	}
	c.credential = httpGuardPrincipal(r)
	req := &c.req
	switch {
	case req.Model == "":
		return nil, responsesInvalid("model", "model is required: name the agent")
	case req.Background:
		return nil, responsesInvalid("background", "background responses are not supported: stream the response instead")
	case len(req.Conversation) > 0 && string(req.Conversation) != "null":
		return nil, responsesInvalid("conversation", "conversations are not supported: continue with previous_response_id or an x-svc-session header")
	}
	wr := &agentRequest{Agent: req.Model, Stream: req.Stream, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature, TopP: req.TopP}
	if e := wireCheckParams(body, wireParamsResponses); e != nil {
		return nil, e
	}
	if f := req.Text.Format; len(f) > 0 && string(f) != "null" {
		var rf responsesFormat
		if err := json.Unmarshal(f, &rf); err != nil {
			return nil, responsesInvalid("text.format", "text.format must be an object: %v", err)
		}
		var e *wireError
		if wr.Format, e = wireFormat("text.format", modelFormat{Type: rf.Type, Name: rf.Name, Description: rf.Description, Schema: rf.Schema, Strict: rf.Strict}); e != nil {
			return nil, e
		}
	}
	var system []string
	if req.Instructions != "" {
		system = append(system, req.Instructions)
	}
	if e := c.decodeTools(wr); e != nil {
		return nil, e
	}
	base, e := c.decodeInput(wr, &system)
	if e != nil {
		return nil, e
	}
	wr.System = strings.Join(system, "\n\n")
	if req.PreviousResponseID != "" {
		id, ok := parseResponsesID(req.PreviousResponseID)
		if !ok {
			return nil, &wireError{Status: http.StatusNotFound, Kind: wireErrPrevious, Param: "previous_response_id",
				Message: fmt.Sprintf("previous response %q not found: it is not an id of a response of svc", req.PreviousResponseID)}
		}
		base = &id
	}
	if len(wr.Messages) == 0 && len(wr.Approvals) == 0 && base == nil {
		return nil, responsesInvalid("input", "input is required: a string, or a list of input items")
	}
	if e := sessionFromHeaders(r, wr); e != nil {
		return nil, e
	}
	var chain string
	if base != nil {
		chain = base.chain
	}
	c.id = newResponsesID(chain)
	switch {
	case wr.SessionKey != "": // x-svc-session: that session, as on the other wires
		return wr, nil
	case base != nil:
		wr.SessionKey, wr.SessionFrom = c.id.String(), base.String()
	case (req.Store == nil || *req.Store) && c.sessions != nil:
		wr.SessionKey = c.id.String()
	default:
		return wr, nil // stateless
	}
	c.stored, c.kept, wr.Responses = true, true, true
	if wr.ConversationKey == "" {
		wr.ConversationKey = c.id.conversation()
	}
	return wr, nil
}

// decodeInput reads the input: a string is one user message; items become
// messages and approvals. It returns the kept response the input refers to
// (the last item_reference, replayed mcp_call or mcp_approval_request, or
// mcp_approval_response); messages before such a reference are already in
// that response's session and are dropped.
func (c *responsesWire) decodeInput(wr *agentRequest, system *[]string) (*responsesID, *wireError) {
	raw := c.req.Input
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		wr.Messages = append(wr.Messages, chatMessage{Role: "user", Content: text})
		return nil, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, responsesInvalid("input", "input must be a string or a list of input items: %v", err)
	}
	var base *responsesID
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		if it.Type == "" && it.Role != "" {
			it.Type = "message"
		}
		switch it.Type {
		case "message":
			if it.Role == "tool" || !appendOpenAIStyle(wr, system, it.Role, it.Content, nil, "", "") {
				return nil, responsesInvalid(param+".role", "unsupported message role %q: use user, assistant, system or developer", it.Role)
			}
		case "function_call":
			call := toolCall{ID: it.CallID, Name: it.Name, Arguments: wireJSONObject(json.RawMessage(it.Arguments))}
			if n := len(wr.Messages); n > 0 && wr.Messages[n-1].Role == "assistant" {
				wr.Messages[n-1].ToolCalls = append(wr.Messages[n-1].ToolCalls, call)
			} else {
				wr.Messages = append(wr.Messages, chatMessage{Role: "assistant", ToolCalls: []toolCall{call}})
			}
		case "function_call_output":
			wr.Messages = append(wr.Messages, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: wireText(it.Output)})
		case "mcp_approval_response":
			id, callID, ok := parseResponsesItem(it.ApprovalRequestID)
			if !ok || it.Approve == nil {
				return nil, responsesInvalid(param, "an mcp_approval_response needs the approval_request_id of an mcp_approval_request of this agent and approve: true or false")
			}
			if wr.Approvals == nil {
				wr.Approvals, c.approvalIDs = map[string]approvalAnswer{}, map[string]string{}
			}
			wr.Approvals[callID] = approvalAnswer{Approved: *it.Approve, Reason: it.Reason}
			c.approvalIDs[callID] = it.ApprovalRequestID
			base = &id
		case "item_reference", "mcp_call", "mcp_approval_request":
			id, _, ok := parseResponsesItem(it.ID)
			if !ok {
				return nil, responsesInvalid(param+".id", "item %q is not an output item of a response of svc", it.ID)
			}
			base = &id
			wr.Messages = nil
		case "reasoning": // svc produces none; a replayed one carries nothing to keep
		default:
			return nil, responsesInvalid(param+".type", "unsupported input item type %q: send message, function_call, function_call_output, mcp_approval_response or item_reference items", it.Type)
		}
	}
	return base, nil
}

// writeError answers {"error":{...}} with e's status, as chat completions.
func (*responsesWire) writeError(w http.ResponseWriter, e *wireError) {
	openAIWire{}.writeError(w, e)
}

// open returns the answer: whole, or a stream of events once the turn
// produces its first one.
func (c *responsesWire) open(w http.ResponseWriter, wr *agentRequest) wireAnswer {
	return &responsesAnswer{w: w, c: c, agent: wr.Agent, stream: wr.Stream, created: time.Now().Unix(), output: []map[string]any{}}
}

// responsesAnswer builds the response's output items from the turn's
// events, and streams them as Responses events when the request streams.
type responsesAnswer struct {
	w       http.ResponseWriter
	c       *responsesWire
	agent   string
	stream  bool
	sse     *wireSSE // started by the first event
	seq     int      // sequence_number of the next event
	created int64
	output  []map[string]any // finished output items
	msg     map[string]any   // the message item in progress (its step's text)
	msgStep string           // the assistant message id of the step msg holds
	text    strings.Builder  // msg's text so far
}

// send streams one event of type typ with fields; whole answers send none.
func (a *responsesAnswer) send(typ string, fields map[string]any) {
	if !a.stream {
		return
	}
	if a.sse == nil {
		a.sse = newWireSSE(a.w)
		a.send("response.created", map[string]any{"response": a.response("in_progress", nil)})
		a.send("response.in_progress", map[string]any{"response": a.response("in_progress", nil)})
	}
	fields["type"], fields["sequence_number"] = typ, a.seq
	a.seq++
	a.sse.send(typ, fields)
}

// response is the response object with status and the output so far.
func (a *responsesAnswer) response(status string, res *agentResult) map[string]any {
	req := &a.c.req
	tools := []json.RawMessage{}
	if req.Tools != nil {
		tools = req.Tools
	}
	resp := map[string]any{"id": a.c.id.String(), "object": "response", "created_at": a.created, "status": status, "model": a.agent,
		"output": a.output, "error": nil, "incomplete_details": nil, "instructions": nil, "max_output_tokens": nil,
		"parallel_tool_calls": true, "previous_response_id": nil, "store": a.c.stored, "temperature": req.Temperature,
		"tool_choice": "auto", "tools": tools, "top_p": req.TopP, "truncation": "disabled", "text": map[string]any{"format": map[string]string{"type": "text"}},
		"metadata": map[string]any{}, "usage": nil}
	if f := req.Text.Format; len(f) > 0 && string(f) != "null" {
		resp["text"] = map[string]any{"format": f} // the format the reply obeyed (checked before answering)
	}
	if req.Instructions != "" {
		resp["instructions"] = req.Instructions
	}
	if req.MaxOutputTokens > 0 {
		resp["max_output_tokens"] = req.MaxOutputTokens
	}
	if req.PreviousResponseID != "" {
		resp["previous_response_id"] = req.PreviousResponseID
	}
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		resp["metadata"] = req.Metadata
	}
	if res != nil {
		u := res.Usage
		resp["usage"] = map[string]any{"input_tokens": u.InputTokens, "input_tokens_details": map[string]int{"cached_tokens": 0},
			"output_tokens": u.OutputTokens, "output_tokens_details": map[string]int{"reasoning_tokens": 0}, "total_tokens": u.InputTokens + u.OutputTokens}
		resp["completed_at"] = time.Now().Unix()
	}
	return resp
}

// add appends a finished item, streamed as output_item.added then
// output_item.done. It joins the output after its added event: when it is
// the answer's first event, response.created (sent first) lists no output
// yet, as OpenAI's does.
func (a *responsesAnswer) add(item map[string]any) {
	index := len(a.output)
	a.send("response.output_item.added", map[string]any{"output_index": index, "item": item})
	a.output = append(a.output, item)
	a.send("response.output_item.done", map[string]any{"output_index": index, "item": item})
}

// responsesOutputText is an output_text content part.
func responsesOutputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// event adds the turn's events to the output: text to the message item of
// its model call, a server tool's result as an mcp_call item.
func (a *responsesAnswer) event(ev agentEvent) {
	switch ev.Kind {
	case agentEventText:
		if a.msg == nil || a.msgStep != ev.MessageID {
			a.closeMessage()
			a.msgStep = ev.MessageID
			a.msg = map[string]any{"id": a.c.id.item("msg", strconv.Itoa(len(a.output))), "type": "message", "role": "assistant", "status": "in_progress", "content": []any{}}
			a.send("response.output_item.added", map[string]any{"output_index": len(a.output), "item": a.msg})
			a.send("response.content_part.added", a.part(map[string]any{"part": responsesOutputText("")}))
		}
		a.text.WriteString(ev.Text)
		a.send("response.output_text.delta", a.part(map[string]any{"delta": ev.Text, "logprobs": []any{}}))
	case agentEventStepEnd:
		a.closeMessage()
	case agentEventToolResult:
		a.closeMessage()
		item := map[string]any{"id": a.c.id.item("mcp", strconv.Itoa(len(a.output))), "type": "mcp_call", "server_label": responsesServerLabel,
			"name": ev.Call.Name, "arguments": wireArguments(*ev.Call), "status": "completed", "output": ev.Result.Content, "error": nil}
		if ev.Result.IsError {
			item["status"], item["output"], item["error"] = "failed", nil, ev.Result.Content
		}
		if id := a.c.approvalIDs[ev.Call.ID]; id != "" {
			item["approval_request_id"] = id
		}
		a.add(item)
	}
}

// part adds the message in progress's position to a content event's fields.
func (a *responsesAnswer) part(fields map[string]any) map[string]any {
	fields["item_id"], fields["output_index"], fields["content_index"] = a.msg["id"], len(a.output), 0
	return fields
}

// closeMessage finishes the message item in progress.
func (a *responsesAnswer) closeMessage() {
	if a.msg == nil {
		return
	}
	text := a.text.String()
	a.send("response.output_text.done", a.part(map[string]any{"text": text, "logprobs": []any{}}))
	a.send("response.content_part.done", a.part(map[string]any{"part": responsesOutputText(text)}))
	a.msg = map[string]any{"id": a.msg["id"], "type": "message", "role": "assistant", "status": "completed", "content": []any{responsesOutputText(text)}}
	a.send("response.output_item.done", map[string]any{"output_index": len(a.output), "item": a.msg})
	a.output = append(a.output, a.msg)
	a.msg, a.msgStep = nil, ""
	a.text.Reset()
}

// finish adds the pending calls (function_call items for client tools,
// mcp_approval_request items for approvals) and ends the response:
// completed, or incomplete when the output hit max_output_tokens.
func (a *responsesAnswer) finish(res *agentResult) {
	a.closeMessage()
	for _, p := range res.Pending {
		args := wireArguments(p.toolCall)
		if p.Kind == pendingApproval {
			a.add(map[string]any{"id": a.c.id.item("mcpr", p.ID), "type": "mcp_approval_request", "server_label": responsesServerLabel, "name": p.Name, "arguments": args})
			continue
		}
		item := map[string]any{"id": a.c.id.item("fc", strconv.Itoa(len(a.output))), "type": "function_call", "status": "completed", "call_id": p.ID, "name": p.Name, "arguments": args}
		index := len(a.output)
		a.send("response.output_item.added", map[string]any{"output_index": index,
			"item": map[string]any{"id": item["id"], "type": "function_call", "status": "in_progress", "call_id": p.ID, "name": p.Name, "arguments": ""}})
		a.send("response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": index, "delta": args})
		a.send("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": index, "name": p.Name, "arguments": args})
		a.send("response.output_item.done", map[string]any{"output_index": index, "item": item})
		a.output = append(a.output, item)
	}
	status, event := "completed", "response.completed"
	if res.StopReason == stopLength {
		status, event = "incomplete", "response.incomplete"
	}
	resp := a.response(status, res)
	if status == "incomplete" {
		resp["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
	}
	a.c.keep(resp)
	if !a.stream {
		writeJSON(a.w, http.StatusOK, resp)
		return
	}
	a.send(event, map[string]any{"response": resp})
}

// keep stores resp as the kept response's body, which GET serves; a
// failure is logged (the turn itself is kept and can be continued).
func (c *responsesWire) keep(resp map[string]any) {
	if !c.kept {
		return
	}
	body, err := json.Marshal(resp)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = c.sessions.setResponseBody(ctx, c.id.String(), newSessionRef("", c.credential, "").CredentialHash, body)
		cancel()
	}
	if err != nil {
		c.log.Warn("keep the response body", "response", c.id.String(), "err", err)
	}
}

// fail answers the error with its status before anything streamed, else
// as an error event followed by response.failed.
func (a *responsesAnswer) fail(e *wireError) {
	if a.sse == nil {
		openAIWire{}.writeError(a.w, e)
		return
	}
	body := openAIError(e)
	a.send("error", map[string]any{"code": body.Error.Code, "message": e.Message, "param": body.Error.Param})
	resp := a.response("failed", nil)
	resp["error"] = map[string]any{"code": body.Error.Code, "message": e.Message}
	a.c.keep(resp)
	a.send("response.failed", map[string]any{"response": resp})
}

// handleOpenAIResponses serves POST /openai/v1/responses.
func (s *server) handleOpenAIResponses(w http.ResponseWriter, r *http.Request) {
	s.serveChat(w, r, &responsesWire{sessions: s.responseStore(), log: s.log})
}

// responseStore is where responses are kept; nil without a database.
func (s *server) responseStore() *sessionStore {
	if s.rt.agents == nil {
		return nil
	}
	return s.rt.agents.sessions
}

// handleOpenAIResponse serves GET and DELETE /openai/v1/responses/{id}
// (the openai SDK's responses.retrieve and responses.delete): the kept
// response as it was answered, or its deletion. Responses belong to the
// credential that made them; another credential, like an unknown or
// deleted id, gets 404.
func (s *server) handleOpenAIResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	store := s.responseStore()
	if store == nil {
		openAIWire{}.writeError(w, &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrInternal, Message: errSessionUnavailable.Error()})
		return
	}
	hash := newSessionRef("", httpGuardPrincipal(r), "").CredentialHash
	var body []byte
	var err error
	if r.Method == http.MethodDelete {
		if err = store.deleteResponse(r.Context(), id, hash); err == nil {
			body, err = json.Marshal(map[string]any{"id": id, "object": "response", "deleted": true})
		}
	} else {
		body, err = store.responseBody(r.Context(), id, hash)
	}
	switch {
	case errors.Is(err, errResponseNotFound):
		openAIWire{}.writeError(w, &wireError{Status: http.StatusNotFound, Kind: wireErrResponse, Param: "response_id",
			Message: fmt.Sprintf("response %q not found: responses are kept for the credential that made them, with store (the default), until deleted or past the retention", id)})
	case err != nil:
		s.log.Error("kept response", "response", id, "method", r.Method, "err", err)
		openAIWire{}.writeError(w, &wireError{Status: http.StatusServiceUnavailable, Kind: wireErrInternal, Message: "could not read the kept responses; retry shortly"})
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(body)
	}
}
