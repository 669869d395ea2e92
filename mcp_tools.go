package main

// The MCP tools (DESIGN §11) over the runtime: the engine for workflows,
// runs and hooks, the agent host for a turn. They sit below HTTP: the
// route (mcp_http.go) only hands them the runtime, the agent lookup of the
// chat wires and who the caller is. Each tool's arguments are checked
// against its input schema before it runs; a failure the caller can fix is
// an isError result saying what to do, never a protocol error.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// mcpMaxWait bounds get_run's wait: MCP clients time requests out at 60 s.
const mcpMaxWait = 25 * time.Second

// mcpWire names MCP on the agent turns it records.
const mcpWire = "mcp"

// mcpTools is what the tools of one request run against.
type mcpTools struct {
	rt *runtimeCore
	// agent finds a compiled agent behind an open gate (the chat wires' lookup).
	agent func(name string) (*agentDef, *wireError)
	// principal is who the caller acts for; it scopes durable sessions.
	principal string
}

// mcpTool is one tool: its description, input schema and implementation.
type mcpTool struct {
	name, title, description string
	input                    string // JSON Schema of the arguments
	readOnly, destructive    bool   // annotations for the client's approval prompts
	run                      func(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error)
	schema                   *jsonSchema
}

// mcpToolFailure is a failure the caller can act on: its text is the result.
type mcpToolFailure struct{ msg string }

func (e *mcpToolFailure) Error() string { return e.msg }

// mcpFail returns an *mcpToolFailure with a formatted message.
func mcpFail(format string, args ...any) error {
	return &mcpToolFailure{msg: fmt.Sprintf(format, args...)}
}

// mcpToolsOnce compiles the tools' input schemas once.
var mcpToolsOnce = sync.OnceValue(func() []*mcpTool {
	tools := mcpToolDefs()
	for _, tl := range tools {
		s, err := compileSchema([]byte(tl.input))
		if err != nil {
			panic("mcp tool " + tl.name + ": input schema: " + err.Error())
		}
		tl.schema = s
	}
	return tools
})

// mcpFindTool returns the tool called name, or nil.
func mcpFindTool(name string) *mcpTool {
	for _, tl := range mcpToolsOnce() {
		if tl.name == name {
			return tl
		}
	}
	return nil
}

// mcpToolNames lists the tools' names in tools/list order.
func mcpToolNames() []string {
	var names []string
	for _, tl := range mcpToolsOnce() {
		names = append(names, tl.name)
	}
	return names
}

// mcpToolList is the tools/list payload.
func mcpToolList() []map[string]any {
	var out []map[string]any
	for _, tl := range mcpToolsOnce() {
		out = append(out, map[string]any{"name": tl.name, "title": tl.title, "description": tl.description,
			"inputSchema": json.RawMessage(tl.input),
			"annotations": map[string]any{"readOnlyHint": tl.readOnly, "destructiveHint": tl.destructive, "openWorldHint": false}})
	}
	return out
}

// call validates args against tl's schema, runs it and returns the
// tools/call result: the value as JSON text and structured content, or
// isError with a message.
func (t *mcpTools) call(ctx context.Context, tl *mcpTool, args json.RawMessage) map[string]any {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var out any
	violations, err := tl.schema.validateJSON(args)
	switch {
	case err != nil:
		err = mcpFail("invalid arguments: %v", err)
	case len(violations) > 0:
		var parts []string
		for _, v := range violations {
			parts = append(parts, orRoot(v.Path)+": "+v.Message)
		}
		err = mcpFail("invalid arguments of %s: %s (tools/list has its input schema)", tl.name, strings.Join(parts, "; "))
	default:
		out, err = tl.run(ctx, t, args)
	}
	if err != nil {
		var f *mcpToolFailure
		if !errors.As(err, &f) {
			t.rt.log.Error("mcp tool", "tool", tl.name, "err", err)
		}
		return map[string]any{"content": []map[string]any{{"type": "text", "text": err.Error()}}, "isError": true}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return map[string]any{"content": []map[string]any{{"type": "text", "text": "encode result: " + err.Error()}}, "isError": true}
	}
	return map[string]any{"content": []map[string]any{{"type": "text", "text": string(b)}}, "structuredContent": json.RawMessage(b)}
}

// mcpToolDefs are the tools, in tools/list order.
func mcpToolDefs() []*mcpTool {
	const runID = `{"type": "string", "minLength": 1, "maxLength": 256, "description": "a run id (start_workflow's runId, or a queued entry's queueId)"}`
	const schedWorkflow = `{"type": "object", "properties": {"workflow": {"type": "string", "minLength": 1, "maxLength": 256, "description": "a workflow that declares a schedule (list_schedules)"}}, "required": ["workflow"], "additionalProperties": false}`
	return []*mcpTool{
		{name: "list_workflows", title: "List workflows and agents", readOnly: true,
			description: "Lists the project's workflows (name, whether they declare schemas, the HTTP route that starts them) and its agents.",
			input:       `{"type": "object", "properties": {}, "additionalProperties": false}`, run: mcpListWorkflows},
		{name: "get_workflow_schema", title: "Get a workflow's schemas", readOnly: true,
			description: "Returns a workflow's input and output JSON Schemas (null when it declares none).",
			input:       `{"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 256}}, "required": ["name"], "additionalProperties": false}`,
			run:         mcpWorkflowSchema},
		{name: "start_workflow", title: "Start a workflow",
			description: "Starts a durable run of a workflow and returns its receipt at once (runId, or queueId for a serial or concurrency-limited workflow that is busy); follow it with get_run. idempotencyKey makes a retried call safe: the same key with the same workflow and input answers the first receipt and starts nothing.",
			input: `{"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 256}, "input": {"description": "the workflow's input (default {}); get_workflow_schema gives its schema"},
  "idempotencyKey": {"type": "string", "minLength": 1, "maxLength": ` + strconv.Itoa(idemKeyMax) + `, "pattern": "^[!-~]+$", "description": "visible ASCII, no spaces; kept for the idempotency retention (24 h by default)"}}, "required": ["name"], "additionalProperties": false}`,
			run: mcpStartWorkflow},
		{name: "get_run", title: "Get a run", readOnly: true,
			description: "Returns a run with its status, output or error, and its step timeline (hooks carry their token). waitSeconds (at most 25) waits for the run to end first.",
			input:       `{"type": "object", "properties": {"runId": ` + runID + `, "waitSeconds": {"type": "number", "minimum": 0, "maximum": 25}}, "required": ["runId"], "additionalProperties": false}`,
			run:         mcpGetRun},
		{name: "read_run_stream", title: "Read a run's stream", readOnly: true,
			description: "Returns what a run's steps wrote with getWritable(), in order: the entries after index after (0: from the start), at most limit. A chunk of an attempt that was retried has superseded: true (the retry's chunks follow). waitSeconds (at most 25) waits for an entry or the run's end when there is none yet. ended: the stream is complete; next is the after of the next call.",
			input: `{"type": "object", "properties": {"runId": ` + runID + `, "after": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "minimum": 1, "maximum": ` + strconv.Itoa(mcpStreamMaxLimit) + `},
  "waitSeconds": {"type": "number", "minimum": 0, "maximum": 25}}, "required": ["runId"], "additionalProperties": false}`,
			run: mcpReadRunStream},
		{name: "list_runs", title: "List runs", readOnly: true,
			description: "Lists runs newest first, a page at a time (nextCursor asks for the next), with the queued entries of serial and concurrency-limited workflows on the first page.",
			input: `{"type": "object", "properties": {"workflow": {"type": "string", "maxLength": 256}, "agent": {"type": "string", "maxLength": 256},
  "status": {"type": "array", "items": {"enum": ["` + strings.Join(runStates, `", "`) + `"]}, "maxItems": 16},
  "limit": {"type": "integer", "minimum": 1, "maximum": ` + strconv.Itoa(runQueryMaxLimit) + `}, "cursor": {"type": "string", "maxLength": 1024}}, "additionalProperties": false}`,
			run: mcpListRuns},
		{name: "cancel_run", title: "Cancel a run", destructive: true,
			description: "Cancels an active run or a queued entry.",
			input:       `{"type": "object", "properties": {"runId": ` + runID + `}, "required": ["runId"], "additionalProperties": false}`,
			run:         mcpCancelRun},
		{name: "list_schedules", title: "List schedules", readOnly: true,
			description: "Lists the workflows that declare a schedule: cron, timezone, overlap, catchUp, dst, whether paused, the next fires and the last run.",
			input:       `{"type": "object", "properties": {}, "additionalProperties": false}`, run: mcpListSchedules},
		{name: "pause_schedule", title: "Pause a schedule",
			description: "Pauses a workflow's schedule, durably: it fires no more until resume_schedule; the fires while paused are dropped.",
			input:       schedWorkflow, run: mcpPauseSchedule},
		{name: "resume_schedule", title: "Resume a schedule",
			description: "Resumes a paused schedule: it fires again from its next fire after now.",
			input:       schedWorkflow, run: mcpResumeSchedule},
		{name: "resume_hook", title: "Resume a hook",
			description: "Resumes a run waiting on createHook(): token is the hook step's token (get_run shows it), payload the value the workflow receives.",
			input:       `{"type": "object", "properties": {"token": {"type": "string", "minLength": 1, "maxLength": 512}, "payload": {"description": "any JSON value (default null)"}}, "required": ["token"], "additionalProperties": false}`,
			run:         mcpResumeHook},
		{name: "message_agent", title: "Message an agent",
			description: "Runs one turn of an agent and returns its answer. session keeps a durable conversation (only the new message is sent each turn); a tool that needs approval comes back in pendingToolCalls and is answered with approvals on the next turn of the same session.",
			input: `{"type": "object", "properties": {"agent": {"type": "string", "minLength": 1, "maxLength": 256}, "message": {"type": "string", "maxLength": 1048576},
  "session": {"type": "string", "minLength": 1, "maxLength": ` + strconv.Itoa(sessionMaxKeyLength) + `},
  "approvals": {"type": "array", "maxItems": 64, "items": {"type": "object", "properties": {"toolCallId": {"type": "string", "minLength": 1, "maxLength": 256}, "approved": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 4096}}, "required": ["toolCallId", "approved"], "additionalProperties": false}}},
  "required": ["agent"], "additionalProperties": false}`,
			run: mcpMessageAgent},
	}
}

// mcpListWorkflows lists the workflows and agents of the compiled catalog.
func mcpListWorkflows(_ context.Context, t *mcpTools, _ json.RawMessage) (any, error) {
	items, agents := []workflowItem{}, []string{}
	if cat := t.rt.catalog.Load(); cat != nil {
		for _, name := range cat.workflowNames() {
			wf := cat.Workflows[name]
			items = append(items, workflowItem{Name: name, Trigger: workflowRoute(name), HasSchema: wf.InputSchema != nil || wf.OutputSchema != nil})
		}
		agents = append(agents, cat.agentNames()...)
	}
	return map[string]any{"workflows": items, "agents": agents}, nil
}

// mcpWorkflowSchema returns a workflow's schemas.
func mcpWorkflowSchema(_ context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct{ Name string }
	json.Unmarshal(args, &a)
	var wf *workflowDef
	if cat := t.rt.catalog.Load(); cat != nil {
		wf = cat.Workflows[a.Name]
	}
	if wf == nil {
		_, err := t.rt.engine.validateStart(a.Name, nil)
		return nil, mcpStartFailure(err)
	}
	orNull := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return json.RawMessage("null")
		}
		return raw
	}
	return map[string]any{"name": a.Name, "input": orNull(wf.InputSchema), "output": orNull(wf.OutputSchema)}, nil
}

// mcpStartWorkflow starts a run and returns its receipt; the run is the
// child of the request's traceparent, if any (otel_http.go).
func mcpStartWorkflow(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct {
		Name           string
		Input          json.RawMessage
		IdempotencyKey string
	}
	json.Unmarshal(args, &a)
	rc, err := t.rt.engine.start(startRequest{Workflow: a.Name, Input: a.Input, Trigger: triggerHTTP, IdemKey: a.IdempotencyKey,
		TraceParent: otelRequestParent(ctx)})
	if err != nil {
		return nil, mcpStartFailure(err)
	}
	return rc, nil
}

// mcpStartFailure turns a start's error into the tool's failure: the
// runtime's message, every schema violation with its JSON pointer.
func mcpStartFailure(err error) error {
	var se *startError
	if errors.As(err, &se) {
		msg := se.Code + ": " + se.Message
		if len(se.Violations) > 1 {
			for _, v := range se.Violations {
				msg += "\n  " + orRoot(v.Path) + ": " + v.Message
			}
		}
		return &mcpToolFailure{msg: msg}
	}
	return mcpEngineFailure(err)
}

// mcpEngineFailure says what to do about an engine error every tool may
// meet: a journal that cannot write.
func mcpEngineFailure(err error) error {
	if errors.Is(err, errJournalOutcomeUnknown) {
		return mcpFail("outcome_unknown: %v; check before you start it again", err)
	}
	if errors.Is(err, errJournalUnavailable) {
		return mcpFail("journal_unavailable: nothing was recorded: %v; free disk space under .svc/journal, then retry", err)
	}
	return err
}

// mcpGetRun returns a run, after waiting up to waitSeconds for it to end.
func mcpGetRun(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct {
		RunID       string
		WaitSeconds float64
	}
	json.Unmarshal(args, &a)
	if a.WaitSeconds > 0 {
		wctx, cancel := context.WithTimeout(ctx, min(time.Duration(a.WaitSeconds*float64(time.Second)), mcpMaxWait))
		t.rt.engine.wait(wctx, a.RunID)
		cancel()
	}
	run, ok, err := t.rt.engine.find(ctx, a.RunID)
	if err != nil {
		return nil, fmt.Errorf("read the run history: %w", err)
	}
	if !ok {
		return nil, mcpFail("run_not_found: run %s not found; list_runs shows the runs", a.RunID)
	}
	return map[string]any{"run": run, "terminal": terminal(run.Status)}, nil
}

// mcpStreamMaxLimit bounds one read_run_stream answer (and is its default).
const mcpStreamMaxLimit = 1000

// mcpReadRunStream returns a page of a run's stream (engine_stream.go),
// waiting up to waitSeconds for one when none is there yet.
func mcpReadRunStream(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct {
		RunID       string
		After       int
		Limit       int
		WaitSeconds float64
	}
	json.Unmarshal(args, &a)
	wait := time.NewTimer(min(time.Duration(a.WaitSeconds*float64(time.Second)), mcpMaxWait))
	defer wait.Stop()
	for {
		page, err := t.rt.engine.streamRead(ctx, a.RunID, a.After)
		switch {
		case errors.Is(err, errRunNotFound):
			return nil, mcpFail("run_not_found: run %s not found; list_runs shows the runs", a.RunID)
		case err != nil:
			return nil, fmt.Errorf("read the run's stream: %w", err)
		}
		if len(page.Entries) == 0 && !page.Ended && a.WaitSeconds > 0 {
			select {
			case <-page.Wake:
				continue
			case <-page.Done:
				continue
			case <-page.Stop:
			case <-wait.C:
			case <-ctx.Done():
			}
		}
		limit := cmp.Or(a.Limit, mcpStreamMaxLimit)
		entries := make([]streamEvent, 0, min(limit, len(page.Entries)))
		next := a.After
		for _, en := range page.Entries[:min(limit, len(page.Entries))] {
			entries = append(entries, streamEvent{streamEntry: en, Superseded: en.Kind != streamSuperseded && page.Superseded[streamAttemptKey(en.Seq, en.Attempt)]})
			next = en.Index
		}
		return map[string]any{"entries": entries, "next": next, "ended": page.Ended && len(entries) == len(page.Entries), "status": page.Status}, nil
	}
}

// mcpListRuns returns a page of runs; the filters are those of GET /api/runs.
func mcpListRuns(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct {
		Workflow, Agent, Cursor string
		Status                  []string
		Limit                   int
	}
	json.Unmarshal(args, &a)
	v := url.Values{}
	for k, s := range map[string]string{"workflow": a.Workflow, "agent": a.Agent, "cursor": a.Cursor, "status": strings.Join(a.Status, ",")} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if a.Limit > 0 {
		v.Set("limit", strconv.Itoa(a.Limit))
	}
	q, err := parseRunQuery(v)
	if err != nil {
		return nil, mcpFail("invalid arguments: %v", err)
	}
	runs, queued, next, err := t.rt.engine.listRuns(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read the run history: %w", err)
	}
	out := map[string]any{"runs": orEmpty(runs), "queued": orEmpty(queued)}
	if next != nil {
		out["nextCursor"] = next.String()
	}
	return out, nil
}

// mcpCancelRun cancels an active run or a queued entry.
func mcpCancelRun(_ context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct{ RunID string }
	json.Unmarshal(args, &a)
	run, err := t.rt.engine.cancelRun(a.RunID)
	switch {
	case errors.Is(err, errRunNotFound):
		return nil, mcpFail("run_not_found: run %s not found; list_runs shows the runs", a.RunID)
	case errors.Is(err, errRunEnded):
		return nil, mcpFail("run_ended: run %s has already ended (%s): there is nothing to cancel", run.RunID, run.Status)
	case err != nil:
		return nil, mcpEngineFailure(err)
	}
	return map[string]any{"run": run}, nil
}

// mcpResumeHook delivers a payload to the run waiting on a hook token.
func mcpResumeHook(_ context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct {
		Token   string
		Payload json.RawMessage
	}
	json.Unmarshal(args, &a)
	if a.Payload == nil {
		a.Payload = json.RawMessage("null")
	}
	runID, err := t.rt.engine.resumeHook(a.Token, compactJSON(a.Payload))
	switch {
	case errors.Is(err, errHookNotFound):
		return nil, mcpFail("hook_not_found: no run waits on this hook token; get_run shows a waiting run's hook step and its token")
	case errors.Is(err, errHookUsed):
		return nil, mcpFail("hook_used: %v", err)
	case err != nil:
		return nil, mcpEngineFailure(err)
	}
	return map[string]any{"runId": runID, "resumed": true}, nil
}

// mcpMessageAgent runs one turn of an agent for the caller.
func mcpMessageAgent(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	var a struct {
		Agent, Message, Session string
		Approvals               []struct {
			ToolCallID string
			Approved   bool
			Reason     string
		}
	}
	json.Unmarshal(args, &a)
	if a.Message == "" && len(a.Approvals) == 0 {
		return nil, mcpFail("invalid arguments: send a message, or approvals answering pending tool calls")
	}
	if len(a.Approvals) > 0 && a.Session == "" {
		return nil, mcpFail("invalid arguments: approvals answer a durable session's pending calls: pass its session")
	}
	ag, werr := t.agent(a.Agent)
	if werr != nil {
		return nil, mcpFail("%s: %s", werr.Kind, werr.Message)
	}
	p := t.rt.provider.Load()
	if p == nil {
		return nil, mcpFail("%s: %s", wireErrNoModel, gateNoProviderMessage(t.rt.apiURL))
	}
	wr := &agentRequest{Agent: ag.Name, SessionKey: a.Session}
	if a.Message != "" {
		wr.Messages = []chatMessage{{Role: "user", Content: a.Message}}
	}
	if len(a.Approvals) > 0 {
		wr.Approvals = map[string]approvalAnswer{}
		for _, ap := range a.Approvals {
			wr.Approvals[ap.ToolCallID] = approvalAnswer{Approved: ap.Approved, Reason: ap.Reason}
		}
	}
	res, err := t.rt.agents.runTurn(ctx, ag, p, mcpWire, t.principal, wr, func(agentEvent) {})
	if err != nil {
		e := wireErrorFor(err)
		return nil, mcpFail("%s: %s", e.Kind, e.Message)
	}
	out := map[string]any{"agent": ag.Name, "text": res.text(), "stopReason": res.StopReason, "usage": res.Usage,
		"pendingToolCalls": orEmpty(res.Pending)}
	if a.Session != "" {
		out["session"] = a.Session
	}
	return out, nil
}

// mcpListSchedules lists the workflows' schedules.
func mcpListSchedules(ctx context.Context, t *mcpTools, _ json.RawMessage) (any, error) {
	return map[string]any{"schedules": t.rt.sched.list(ctx)}, nil
}

// mcpPauseSchedule pauses a workflow's schedule.
func mcpPauseSchedule(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	return mcpSetSchedulePaused(ctx, t, args, true)
}

// mcpResumeSchedule resumes a workflow's schedule.
func mcpResumeSchedule(ctx context.Context, t *mcpTools, args json.RawMessage) (any, error) {
	return mcpSetSchedulePaused(ctx, t, args, false)
}

// mcpSetSchedulePaused pauses or resumes a workflow's schedule.
func mcpSetSchedulePaused(ctx context.Context, t *mcpTools, args json.RawMessage, paused bool) (any, error) {
	var a struct{ Workflow string }
	json.Unmarshal(args, &a)
	it, err := t.rt.sched.setPaused(ctx, a.Workflow, paused)
	if errors.Is(err, errScheduleNotFound) {
		return nil, mcpFail("schedule_not_found: %v; list_schedules lists the schedules", err)
	}
	if err != nil {
		return nil, mcpEngineFailure(err)
	}
	return map[string]any{"schedule": it}, nil
}
