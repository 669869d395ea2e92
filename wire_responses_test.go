package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// responsesBody is a Responses request body for the agent "helper": input
// (a string or items) plus the fields of extra.
func responsesBody(input any, extra map[string]any) string {
	b := map[string]any{"model": "helper", "input": input}
	for k, v := range extra {
		b[k] = v
	}
	out, _ := json.Marshal(b)
	return string(out)
}

// responsesCreate posts a whole Responses request and returns the
// response object, failing unless it is 200.
func responsesCreate(t *testing.T, env *wiresEnv, headers map[string]string, body string) map[string]any {
	t.Helper()
	r := env.post(t, "/openai/v1/responses", headers, body)
	if r.Status != http.StatusOK {
		t.Fatalf("responses = %d %s; want 200", r.Status, r.Body)
	}
	return r.json(t)
}

// responsesOutputTypes lists the types of a response's output items.
func responsesOutputTypes(resp map[string]any) string {
	var types []string
	items, _ := resp["output"].([]any)
	for _, it := range items {
		types = append(types, wiresJSONAt(it, "type").(string))
	}
	return strings.Join(types, ",")
}

// TestWiresNoModelProvider checks every chat wire, whole and streamed,
// while the gate is open by a completed run and no provider is configured:
// 503 in the wire's shape with code no_model_provider, a message saying
// how to add one, and x-should-retry: false.
func TestWiresNoModelProvider(t *testing.T) {
	env := newWiresEnv(t, "")
	env.rt.gate.Store(&gateState{Open: true, Reason: gateFirstRun})
	env.rt.provider.Store(nil)
	tests := []struct {
		name, path, body string
		want             map[string]string // JSON path → value
	}{
		{"chat completions", "/openai/v1/chat/completions", wiresOpenAIBody("helper", "hi", false),
			map[string]string{"error.code": wireErrNoModel, "error.type": "server_error"}},
		{"chat completions streamed", "/openai/v1/chat/completions", wiresOpenAIBody("helper", "hi", true), map[string]string{"error.code": wireErrNoModel}},
		{"responses", "/openai/v1/responses", responsesBody("hi", nil), map[string]string{"error.code": wireErrNoModel}},
		{"responses streamed", "/openai/v1/responses", responsesBody("hi", map[string]any{"stream": true}), map[string]string{"error.code": wireErrNoModel}},
		{"anthropic", "/anthropic/v1/messages", wiresAnthropicBody("helper", "hi", true),
			map[string]string{"type": "error", "error.type": "api_error", "error.code": wireErrNoModel}},
		{"agui", "/agui/helper", wiresAGUIBody("t", "hi"), map[string]string{"type": "RUN_ERROR", "code": wireErrNoModel}},
		{"console chat", "/chat", wiresAGUIBody("t", "hi"), map[string]string{"type": "RUN_ERROR", "code": wireErrNoModel}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := env.post(t, tt.path, wiresBearer, tt.body)
			h := r.Header
			if r.Status != http.StatusServiceUnavailable || !strings.HasPrefix(r.ContentType, "application/json") || h.Get("x-should-retry") != "false" {
				t.Fatalf("reply = %d %s x-should-retry %q: %s; want 503 JSON, x-should-retry false", r.Status, r.ContentType, h.Get("x-should-retry"), r.Body)
			}
			body := r.json(t)
			for path, want := range tt.want {
				if got := wiresJSONAt(body, path); got != want {
					t.Errorf("%s = %v; want %q", path, got, want)
				}
			}
			msg := string(r.Body)
			if !strings.Contains(msg, "OPENAI_API_KEY") || !strings.Contains(msg, env.rt.apiURL+"/") {
				t.Errorf("message %s does not say how to add a provider", msg)
			}
		})
	}
	// A closed gate (no provider is its only reason) answers the same code.
	env.rt.gate.Store(&gateState{Open: false, Reason: gateNoProvider})
	if r := env.post(t, "/openai/v1/responses", wiresBearer, responsesBody("hi", nil)); r.Status != 503 || wiresJSONAt(r.json(t), "error.code") != wireErrNoModel {
		t.Errorf("closed gate = %d %s; want 503 no_model_provider", r.Status, r.Body)
	}
}

// TestWiresUnknownPaths checks the JSON catch-all under /openai/ and
// /anthropic/ and the Anthropic models routes.
func TestWiresUnknownPaths(t *testing.T) {
	env := newWiresEnv(t, "")
	tests := []struct {
		method, path string
		status       int
		allow        string
		want         map[string]string
	}{
		{"GET", "/openai/v1/responses", 405, "POST", map[string]string{"error.type": "invalid_request_error", "error.code": wireErrMethod}},
		{"POST", "/openai/v1/models", 405, "GET", map[string]string{"error.code": wireErrMethod}},
		{"POST", "/openai/v1/embeddings", 404, "", map[string]string{"error.type": "invalid_request_error", "error.code": wireErrNoRoute}},
		{"GET", "/openai/", 404, "", map[string]string{"error.code": wireErrNoRoute}},
		{"GET", "/openai/v1/models/helper/x", 404, "", map[string]string{"error.code": wireErrNoRoute}},
		{"GET", "/anthropic/v1/messages", 405, "POST", map[string]string{"type": "error", "error.type": "invalid_request_error"}},
		{"POST", "/anthropic/v1/complete", 404, "", map[string]string{"type": "error", "error.type": "not_found_error"}},
	}
	for _, tt := range tests {
		body := "" // env.post sends GET without a body
		if tt.method == "POST" {
			body = "{}"
		}
		r := env.post(t, tt.path, wiresBearer, body)
		if r.Status != tt.status || !strings.HasPrefix(r.ContentType, "application/json") || r.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d %s Allow %q: %s; want %d JSON, Allow %q", tt.method, tt.path, r.Status, r.ContentType, r.Header.Get("Allow"), r.Body, tt.status, tt.allow)
			continue
		}
		got := r.json(t)
		for path, want := range tt.want {
			if v := wiresJSONAt(got, path); v != want {
				t.Errorf("%s %s: %s = %v; want %q", tt.method, tt.path, path, v, want)
			}
		}
		if msg, _ := wiresJSONAt(got, "error.message").(string); tt.status == 404 && !strings.Contains(msg, "/v1/") {
			t.Errorf("%s %s: message %q does not name the wire's routes", tt.method, tt.path, msg)
		}
	}
	// Without a credential the guard answers first, in the wire's shape too.
	if r := env.post(t, "/anthropic/v1/nothing", nil, ""); r.Status != 401 || wiresJSONAt(r.json(t), "error.type") != "authentication_error" {
		t.Errorf("unknown path without credential = %d %s; want 401 authentication_error", r.Status, r.Body)
	}

	models := env.post(t, "/anthropic/v1/models", wiresAPIKey, "").json(t)
	for path, want := range map[string]any{"data.0.type": "model", "data.0.id": "helper", "data.0.display_name": "helper",
		"has_more": false, "first_id": "helper", "last_id": "helper"} {
		if got := wiresJSONAt(models, path); got != want {
			t.Errorf("anthropic models: %s = %v; want %v", path, got, want)
		}
	}
	if c, _ := wiresJSONAt(models, "data.0.created_at").(string); c == "" {
		t.Errorf("anthropic models: no created_at in %v", models)
	} else if _, err := time.Parse(time.RFC3339, c); err != nil {
		t.Errorf("anthropic models: created_at %q: %v", c, err)
	}
	if one := env.post(t, "/anthropic/v1/models/helper", wiresAPIKey, "").json(t); one["id"] != "helper" || one["type"] != "model" {
		t.Errorf("anthropic model = %v", one)
	}
	if r := env.post(t, "/anthropic/v1/models/nobody", wiresAPIKey, ""); r.Status != 404 || wiresJSONAt(r.json(t), "error.type") != "not_found_error" {
		t.Errorf("anthropic unknown model = %d %s", r.Status, r.Body)
	}
}

// TestResponsesWhole checks whole responses: text, a server tool as an
// mcp_call item, a client tool as a function_call item, and errors.
func TestResponsesWhole(t *testing.T) {
	env := newWiresEnv(t, "")
	r := responsesCreate(t, env, wiresBearer, responsesBody("hello there", map[string]any{"instructions": "Be brief.", "metadata": map[string]string{"k": "v"}}))
	for path, want := range map[string]any{"object": "response", "status": "completed", "model": "helper", "store": false, "instructions": "Be brief.",
		"metadata.k": "v", "output.0.type": "message", "output.0.role": "assistant", "output.0.status": "completed",
		"output.0.content.0.type": "output_text", "output.0.content.0.text": "echo: hello there",
		"usage.input_tokens": 3.0, "usage.output_tokens": 2.0, "usage.total_tokens": 5.0, "error": nil} {
		if got := wiresJSONAt(r, path); got != want {
			t.Errorf("%s = %v; want %v", path, got, want)
		}
	}
	if id, _ := r["id"].(string); !strings.HasPrefix(id, "resp_") {
		t.Errorf("id = %v", r["id"])
	}
	if sys := env.script.requests()[0].System; !strings.HasSuffix(sys, "Be brief.") {
		t.Errorf("system = %q; want the instructions after the agent's", sys)
	}

	r = responsesCreate(t, env, wiresBearer, responsesBody(`call add {"a":2,"b":3}`, nil))
	if got := responsesOutputTypes(r); got != "mcp_call,message" {
		t.Fatalf("server tool output = %s; want mcp_call,message (%v)", got, r)
	}
	for path, want := range map[string]any{"output.0.name": "add", "output.0.server_label": "svc", "output.0.status": "completed", "output.0.arguments": `{"a":2,"b":3}`} {
		if got := wiresJSONAt(r, path); got != want {
			t.Errorf("%s = %v; want %v", path, got, want)
		}
	}
	if out, _ := wiresJSONAt(r, "output.0.output").(string); !strings.HasPrefix(out, `{"sum":5`) {
		t.Errorf("mcp_call output = %q", out)
	}
	if txt, _ := wiresJSONAt(r, "output.1.content.0.text").(string); !strings.HasPrefix(txt, `tool add said: {"sum":5`) {
		t.Errorf("text = %q", txt)
	}
	r = responsesCreate(t, env, wiresBearer, responsesBody("call boom {}", nil))
	if wiresJSONAt(r, "output.0.status") != "failed" || !strings.Contains(wiresJSONAt(r, "output.0.error").(string), "kaboom") {
		t.Errorf("failed tool = %v", r["output"])
	}

	pick := []map[string]any{{"type": "function", "name": "pick", "description": "Pick", "parameters": map[string]any{"type": "object"}}}
	r = responsesCreate(t, env, wiresBearer, responsesBody([]map[string]any{{"role": "user", "content": []map[string]string{{"type": "input_text", "text": `call pick {"c":1}`}}}},
		map[string]any{"tools": pick}))
	callID, _ := wiresJSONAt(r, "output.0.call_id").(string)
	if responsesOutputTypes(r) != "function_call" || wiresJSONAt(r, "output.0.name") != "pick" || wiresJSONAt(r, "output.0.arguments") != `{"c":1}` || callID == "" ||
		wiresJSONAt(r, "tools.0.name") != "pick" {
		t.Fatalf("client tool = %v", r)
	}
	// Stateless: the client replays the items with its tool's output.
	replay := []any{map[string]any{"role": "user", "content": `call pick {"c":1}`}, r["output"].([]any)[0],
		map[string]any{"type": "function_call_output", "call_id": callID, "output": "red"}}
	r = responsesCreate(t, env, wiresBearer, responsesBody(replay, map[string]any{"tools": pick}))
	if got := wiresJSONAt(r, "output.0.content.0.text"); got != "tool pick said: red" {
		t.Errorf("replayed tool output = %v", r)
	}

	type check struct{ path, want string }
	for _, tt := range []struct {
		name, body string
		status     int
		want       []check
	}{
		{"unknown agent", `{"model":"nobody","input":"hi"}`, 404, []check{{"error.code", "model_not_found"}, {"error.param", "model"}}},
		{"no model", `{"input":"hi"}`, 400, []check{{"error.param", "model"}}},
		{"no input", `{"model":"helper"}`, 400, []check{{"error.param", "input"}}},
		{"hosted tool", responsesBody("hi", map[string]any{"tools": []map[string]string{{"type": "web_search"}}}), 400, []check{{"error.param", "tools[0].type"}}},
		{"unknown item", responsesBody([]map[string]string{{"type": "computer_call_output"}}, nil), 400, []check{{"error.param", "input[0].type"}}},
		{"foreign reference", responsesBody([]map[string]string{{"type": "item_reference", "id": "msg_abc"}}, nil), 400, []check{{"error.param", "input[0].id"}}},
		{"malformed previous id", responsesBody("hi", map[string]any{"previous_response_id": "resp_x"}), 404,
			[]check{{"error.code", wireErrPrevious}, {"error.param", "previous_response_id"}}},
		{"conversation", responsesBody("hi", map[string]any{"conversation": "conv_1"}), 400, []check{{"error.param", "conversation"}}},
		{"upstream 429", responsesBody("fail", nil), 429, []check{{"error.code", "rate_limit_exceeded"}}},
		{"upstream 429 streamed", responsesBody("fail", map[string]any{"stream": true}), 429, []check{{"error.code", "rate_limit_exceeded"}}},
	} {
		r := env.post(t, "/openai/v1/responses", wiresBearer, tt.body)
		if r.Status != tt.status {
			t.Errorf("%s: %d %s; want %d", tt.name, r.Status, r.Body, tt.status)
			continue
		}
		body := r.json(t)
		for _, c := range tt.want {
			if got := wiresJSONAt(body, c.path); got != c.want {
				t.Errorf("%s: %s = %v; want %q", tt.name, c.path, got, c.want)
			}
		}
	}
	// Without a database nothing is kept: previous_response_id cannot be served.
	if r := env.post(t, "/openai/v1/responses", wiresBearer, responsesBody("hi", map[string]any{"previous_response_id": r["id"]})); r.Status != 503 {
		t.Errorf("previous_response_id without a database = %d %s; want 503", r.Status, r.Body)
	}
}

// responsesEvents decodes a stream's events, checking that each event's
// name is its type and sequence numbers count from 0; it returns the types
// and the events' data.
func responsesEvents(t *testing.T, r wiresReply) ([]string, []map[string]any) {
	t.Helper()
	var types []string
	var data []map[string]any
	for i, ev := range r.Events {
		var v map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
			t.Fatalf("event %q: %v", ev.Data, err)
		}
		if v["type"] != ev.Name || v["sequence_number"] != float64(i) {
			t.Errorf("event %d %s carries type %v, sequence_number %v", i, ev.Name, v["type"], v["sequence_number"])
		}
		types = append(types, ev.Name)
		data = append(data, v)
	}
	return types, data
}

// TestResponsesStream checks the streamed events of text, server tool and
// client tool turns, and that the final response equals the whole one.
func TestResponsesStream(t *testing.T) {
	env := newWiresEnv(t, "")
	tests := []struct {
		name, body, want string
	}{
		{"text", responsesBody("hello there", map[string]any{"stream": true}),
			"response.created,response.in_progress,response.output_item.added,response.content_part.added,response.output_text.delta,response.output_text.delta," +
				"response.output_text.done,response.content_part.done,response.output_item.done,response.completed"},
		{"server tool", responsesBody(`call add {"a":1,"b":1}`, map[string]any{"stream": true}),
			"response.created,response.in_progress,response.output_item.added,response.output_item.done,response.output_item.added,response.content_part.added," +
				"response.output_text.delta,response.output_text.delta,response.output_text.done,response.content_part.done,response.output_item.done,response.completed"},
		{"client tool", responsesBody(`call pick {"c":2}`, map[string]any{"stream": true, "tools": []map[string]any{{"type": "function", "name": "pick"}}}),
			"response.created,response.in_progress,response.output_item.added,response.function_call_arguments.delta,response.function_call_arguments.done," +
				"response.output_item.done,response.completed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			types, data := responsesEvents(t, env.post(t, "/openai/v1/responses", wiresBearer, tt.body))
			if got := strings.Join(types, ","); got != tt.want {
				t.Fatalf("events = %s; want %s", got, tt.want)
			}
			created, done := data[0]["response"].(map[string]any), data[len(data)-1]["response"].(map[string]any)
			if created["status"] != "in_progress" || done["status"] != "completed" || created["id"] != done["id"] || done["usage"] == nil {
				t.Errorf("created %v, completed %v", created, done)
			}
			var text strings.Builder
			for _, d := range data {
				if d["type"] == "response.output_text.delta" {
					text.WriteString(d["delta"].(string))
				}
				if d["type"] == "response.output_text.done" && d["text"] != text.String() {
					t.Errorf("text.done = %v; deltas %q", d["text"], text.String())
				}
				if d["type"] == "response.function_call_arguments.done" && (d["arguments"] != `{"c":2}` || d["name"] != "pick") {
					t.Errorf("arguments.done = %v", d)
				}
			}
			items := done["output"].([]any)
			last := data[len(data)-2]["item"]
			if wiresJSONAt(last, "id") != wiresJSONAt(items[len(items)-1], "id") || wiresJSONAt(last, "status") != "completed" {
				t.Errorf("last item done %v; response output %v", last, items)
			}
		})
	}
}

// TestResponsesSessions checks kept responses: previous_response_id and
// item references continue (and branch) them, per credential; store: false
// keeps nothing; x-svc-session is one session; approvals are
// mcp_approval_request items answered by mcp_approval_response; turns are
// runs of the wire openai-responses, grouped by chain.
func TestResponsesSessions(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	history := func() string {
		reqs := env.script.requests()
		var parts []string
		for _, m := range reqs[len(reqs)-1].Messages {
			parts = append(parts, m.Role+":"+m.Content)
		}
		return strings.Join(parts, "|")
	}
	cred := func(c string) map[string]string { return map[string]string{"Authorization": "Bearer " + c} }

	first := responsesCreate(t, env, cred("a"), responsesBody("hello", nil))
	id1, _ := first["id"].(string)
	if first["store"] != true {
		t.Errorf("store = %v; want true by default", first["store"])
	}
	second := responsesCreate(t, env, cred("a"), responsesBody("again", map[string]any{"previous_response_id": id1}))
	if got := history(); got != "user:hello|assistant:echo: hello|user:again" || second["previous_response_id"] != id1 {
		t.Errorf("continued turn sent %q (previous %v); want the kept history plus the new input", got, second["previous_response_id"])
	}
	// A branch from the first response does not see the second.
	env.post(t, "/openai/v1/responses", cred("a"), responsesBody("other", map[string]any{"previous_response_id": id1, "stream": true}))
	if got := history(); got != "user:hello|assistant:echo: hello|user:other" {
		t.Errorf("branch sent %q", got)
	}
	// Item references (SDKs replaying with store) continue the referenced response.
	ref := wiresJSONAt(second, "output.0.id")
	responsesCreate(t, env, cred("a"), responsesBody([]any{map[string]any{"role": "user", "content": "hello"}, map[string]any{"type": "item_reference", "id": ref},
		map[string]any{"role": "user", "content": "third"}}, nil))
	if got := history(); got != "user:hello|assistant:echo: hello|user:again|assistant:echo: again|user:third" {
		t.Errorf("referencing turn sent %q", got)
	}
	// Another credential, an unknown id, or a response not kept: 404.
	unkept := responsesCreate(t, env, cred("a"), responsesBody("x", map[string]any{"store": false}))
	for name, tt := range map[string]struct{ cred, prev string }{"other credential": {"b", id1}, "unknown": {"a", newResponsesID("").String()}, "store false": {"a", unkept["id"].(string)}} {
		r := env.post(t, "/openai/v1/responses", cred(tt.cred), responsesBody("hi", map[string]any{"previous_response_id": tt.prev}))
		if r.Status != 404 || wiresJSONAt(r.json(t), "error.code") != wireErrPrevious {
			t.Errorf("%s: %d %s; want 404 previous_response_not_found", name, r.Status, r.Body)
		}
	}

	// A client tool answered through previous_response_id.
	pick := []map[string]any{{"type": "function", "name": "pick"}}
	ask := responsesCreate(t, env, cred("a"), responsesBody(`call pick {}`, map[string]any{"tools": pick}))
	answer := responsesCreate(t, env, cred("a"), responsesBody([]map[string]any{{"type": "function_call_output", "call_id": wiresJSONAt(ask, "output.0.call_id"), "output": "blue"}},
		map[string]any{"previous_response_id": ask["id"], "tools": pick}))
	if got := wiresJSONAt(answer, "output.0.content.0.text"); got != "tool pick said: blue" {
		t.Errorf("client tool answer = %v", answer)
	}

	// Approvals: approved through previous_response_id, refused through
	// item references as the AI SDK sends them, streamed.
	for _, approve := range []bool{true, false} {
		req := responsesCreate(t, env, cred("a"), responsesBody(`call refund {"orderId":"o1"}`, nil))
		approvalID, _ := wiresJSONAt(req, "output.0.id").(string)
		if responsesOutputTypes(req) != "mcp_approval_request" || wiresJSONAt(req, "output.0.name") != "refund" || wiresJSONAt(req, "output.0.server_label") != "svc" ||
			wiresJSONAt(req, "output.0.arguments") != `{"orderId":"o1"}` {
			t.Fatalf("approval request = %v", req)
		}
		response := map[string]any{"type": "mcp_approval_response", "approval_request_id": approvalID, "approve": approve, "reason": "not today"}
		var got map[string]any
		if approve {
			got = responsesCreate(t, env, cred("a"), responsesBody([]any{response}, map[string]any{"previous_response_id": req["id"]}))
		} else {
			_, data := responsesEvents(t, env.post(t, "/openai/v1/responses", cred("a"),
				responsesBody([]any{map[string]any{"type": "item_reference", "id": approvalID}, response}, map[string]any{"stream": true})))
			got = data[len(data)-1]["response"].(map[string]any)
		}
		if responsesOutputTypes(got) != "mcp_call,message" || wiresJSONAt(got, "output.0.approval_request_id") != approvalID {
			t.Fatalf("approve %v: answer = %v; want the call, naming its approval, then the text", approve, got)
		}
		text, _ := wiresJSONAt(got, "output.1.content.0.text").(string)
		if approve && (wiresJSONAt(got, "output.0.output") != `{"refunded":"o1"}` || text != `tool refund said: {"refunded":"o1"}`) {
			t.Errorf("approved: %v", got)
		}
		if !approve && (wiresJSONAt(got, "output.0.status") != "failed" || !strings.Contains(text, "refused") || !strings.Contains(text, "not today")) {
			t.Errorf("refused: %v", got)
		}
	}

	// x-svc-session: one session whatever the response ids.
	session := map[string]string{"Authorization": "Bearer a", wireHeaderSession: "s1"}
	responsesCreate(t, env, session, responsesBody("one", nil))
	responsesCreate(t, env, session, responsesBody("two", map[string]any{"previous_response_id": id1}))
	if got := history(); got != "user:one|assistant:echo: one|user:two" {
		t.Errorf("x-svc-session turn sent %q", got)
	}

	runs, _ := env.rt.engine.list()
	conv := "responses_" + strings.Split(id1, "_")[1]
	grouped, named := 0, false
	for _, run := range runs {
		if run.Wire != wireOpenAIResponses || run.Trigger != triggerAgent {
			t.Errorf("run %+v; want wire %s", run, wireOpenAIResponses)
		}
		if run.ConversationID == conv {
			grouped++
		}
		named = named || run.SessionID == id1
	}
	if grouped != 4 || !named { // the first response, the second, the branch, the referencing turn
		t.Errorf("runs of the first chain = %d (a run with session %s: %v); want its 4 turns grouped under %s", grouped, id1, named, conv)
	}
}

// responsesAt sends method (GET or DELETE) to /openai/v1/responses/{id}
// with credential cred and returns the status and the decoded body.
func responsesAt(t *testing.T, env *wiresEnv, method, id, cred string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, env.url+"/openai/v1/responses/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, id, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// responsesChain makes a chain of n responses of credential tok-a, each
// continuing the one before, with inputs of the same size, and returns
// their ids.
func responsesChain(t *testing.T, env *wiresEnv, tag string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		extra := map[string]any{}
		if i > 0 {
			extra["previous_response_id"] = ids[i-1]
		}
		r := responsesCreate(t, env, wiresBearer, responsesBody(fmt.Sprintf("%s %03d %s", tag, i, strings.Repeat("x", 200)), extra))
		ids = append(ids, r["id"].(string))
	}
	return ids
}

// responsesStoredBytes is the size of every conversation message stored,
// in sessions and in kept responses.
func responsesStoredBytes(t *testing.T, env *wiresEnv) int64 {
	t.Helper()
	var n int64
	if err := env.rt.agents.sessions.db.QueryRow(context.Background(), `SELECT
  (SELECT coalesce(sum(octet_length(messages::text)), 0) FROM svc.agent_sessions) +
  (SELECT coalesce(sum(octet_length(messages::text)), 0) FROM svc.agent_responses)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestResponsesStoredOnce: a chain of responses keeps its history once.
// A chain twice as long stores about twice the bytes (each response used
// to keep a full copy of its conversation: four times the bytes), and its
// last response still sends the model the whole conversation.
func TestResponsesStoredOnce(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	const n = 8
	responsesChain(t, env, "short", n)
	short := responsesStoredBytes(t, env)
	responsesChain(t, env, "long", 2*n)
	long := responsesStoredBytes(t, env) - short
	if ratio := float64(long) / float64(short); ratio > 2.5 {
		t.Errorf("a chain of %d responses stores %d bytes, one of %d stores %d (×%.1f); want linear growth (×2)", n, short, 2*n, long, ratio)
	}
	reqs := env.script.requests()
	last := reqs[len(reqs)-1].Messages
	if len(last) != 4*n-1 || !strings.HasPrefix(last[0].Content, "long 000") || !strings.HasPrefix(last[len(last)-1].Content, fmt.Sprintf("long %03d", 2*n-1)) {
		t.Errorf("the last response of the chain sent %d messages (first %.8q); want its whole conversation of %d", len(last), last[0].Content, 4*n-1)
	}
}

// TestResponsesRetrieveDeleteTrim: GET and DELETE of kept responses are
// scoped to their credential; deleting or trimming (past the retention) a
// response its chain continues keeps the later responses' conversations
// whole.
func TestResponsesRetrieveDeleteTrim(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	ids := responsesChain(t, env, "m", 5)
	if st, body := responsesAt(t, env, "GET", ids[1], "tok-a"); st != 200 || body["id"] != ids[1] || body["previous_response_id"] != ids[0] ||
		!strings.HasPrefix(wiresJSONAt(body, "output.0.content.0.text").(string), "echo: m 001") {
		t.Errorf("GET %s = %d %v; want the response as answered", ids[1], st, body)
	}
	for _, method := range []string{"GET", "DELETE"} {
		if st, body := responsesAt(t, env, method, ids[1], "tok-b"); st != 404 || wiresJSONAt(body, "error.code") != wireErrResponse {
			t.Errorf("%s by another credential = %d %v; want 404 %s", method, st, body, wireErrResponse)
		}
	}
	// ids[0] and ids[1] are past the retention; ids[2] is deleted.
	db := env.rt.agents.sessions.db
	if _, err := db.Exec(context.Background(), `UPDATE svc.agent_responses SET created_at = now() - interval '40 days' WHERE response_id = ANY($1)`, ids[:2]); err != nil {
		t.Fatal(err)
	}
	if n, err := env.rt.agents.sessions.trimResponses(context.Background(), time.Now().Add(-responseRetentionDefault)); err != nil || n != 2 {
		t.Errorf("trim = %d, %v; want the 2 responses past the retention", n, err)
	}
	if st, body := responsesAt(t, env, "DELETE", ids[2], "tok-a"); st != 200 || body["deleted"] != true || body["id"] != ids[2] {
		t.Errorf("DELETE %s = %d %v; want deleted", ids[2], st, body)
	}
	for i, id := range ids[:3] {
		if st, _ := responsesAt(t, env, "GET", id, "tok-a"); st != 404 {
			t.Errorf("GET of trimmed or deleted response %d = %d; want 404", i, st)
		}
		if r := env.post(t, "/openai/v1/responses", wiresBearer, responsesBody("x", map[string]any{"previous_response_id": id})); r.Status != 404 {
			t.Errorf("continuing trimmed or deleted response %d = %d; want 404", i, r.Status)
		}
	}
	if st, _ := responsesAt(t, env, "DELETE", ids[2], "tok-a"); st != 404 {
		t.Errorf("DELETE twice = %d; want 404", st)
	}
	responsesCreate(t, env, wiresBearer, responsesBody("after", map[string]any{"previous_response_id": ids[4]}))
	reqs := env.script.requests()
	sent := reqs[len(reqs)-1].Messages
	if len(sent) != 11 || !strings.HasPrefix(sent[0].Content, "m 000") || sent[10].Content != "after" {
		t.Errorf("continuing the last response sent %d messages; want its whole conversation of 10 and the new input", len(sent))
	}
	var rows int
	db.QueryRow(context.Background(), `SELECT count(*) FROM svc.agent_responses`).Scan(&rows)
	if rows != 3 {
		t.Errorf("%d responses stored; want 3 (two of the chain and the last turn)", rows)
	}
}

// TestResponsesMigrationMovesKeptSessions: responses kept before migration
// 0005 (each a session of its own in svc.agent_sessions) move to
// svc.agent_responses and can still be continued; other sessions stay.
func TestResponsesMigrationMovesKeptSessions(t *testing.T) {
	url := testPostgresURL(t)
	ctx := context.Background()
	files, err := migrateLoad("")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, migrateBootstrapSQL); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.name >= "platform/0005" {
			break
		}
		if err := migrateApply(ctx, conn, f); err != nil {
			t.Fatal(err)
		}
	}
	old := newResponsesID("")
	ref := newSessionRef("helper", "tok-a", old.String())
	msgs := `[{"role":"user","content":"kept before"},{"role":"assistant","content":"echo: kept before"}]`
	for _, key := range []string{old.String(), "my-session"} {
		if _, err := conn.Exec(ctx, `INSERT INTO svc.agent_sessions (agent, credential_hash, session_key, messages, pending, turns) VALUES ($1, $2, $3, $4, '[]', 1)`,
			ref.Agent, ref.CredentialHash, key, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := applyMigrations(ctx, url, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	var sessions []string
	rows, _ := conn.Query(ctx, `SELECT session_key FROM svc.agent_sessions`)
	if sessions, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(sessions) != 1 || sessions[0] != "my-session" {
		t.Errorf("sessions after the migration = %v, %v; want only my-session", sessions, err)
	}
	env := newWiresEnv(t, url)
	responsesCreate(t, env, wiresBearer, responsesBody("next", map[string]any{"previous_response_id": old.String()}))
	reqs := env.script.requests()
	if sent := reqs[len(reqs)-1].Messages; len(sent) != 3 || sent[0].Content != "kept before" {
		t.Errorf("continuing a response kept before the migration sent %+v; want its conversation then the input", sent)
	}
}

// TestResponsesMCPTool drives the agent's own tools through the mcp tool
// the Agents SDK's hostedMcpTool({serverLabel: "svc"}) declares: its URL
// and headers are ignored; require_approval "never" (the SDK's default)
// keeps the author's approvals, "always" and tool_names add some;
// allowed_tools narrows what the model is offered; anything svc cannot
// serve is a 400 naming the parameter.
func TestResponsesMCPTool(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	cred := map[string]string{"Authorization": "Bearer a"}
	mcp := func(fields map[string]any) []map[string]any {
		tool := map[string]any{"type": "mcp", "server_label": "svc", "server_url": "https://example.invalid/mcp", "headers": map[string]string{"x": "y"}}
		for k, v := range fields {
			tool[k] = v
		}
		return []map[string]any{tool}
	}
	pending := func(say string, fields map[string]any) map[string]any {
		t.Helper()
		resp := responsesCreate(t, env, cred, responsesBody(say, map[string]any{"tools": mcp(fields)}))
		return resp
	}

	// The SDK's default declaration: the author's approval is asked, and an
	// approval through previous_response_id runs the tool.
	req := pending(`call refund {"orderId":"o1"}`, map[string]any{"require_approval": "never"})
	if responsesOutputTypes(req) != "mcp_approval_request" || wiresJSONAt(req, "tools.0.type") != "mcp" {
		t.Fatalf("refund with the mcp tool declared = %v; want an mcp_approval_request", req)
	}
	got := responsesCreate(t, env, cred, responsesBody([]any{map[string]any{"type": "mcp_approval_response", "approval_request_id": wiresJSONAt(req, "output.0.id"), "approve": true}},
		map[string]any{"previous_response_id": req["id"], "tools": mcp(nil)}))
	if wiresJSONAt(got, "output.0.output") != `{"refunded":"o1"}` {
		t.Errorf("approved refund = %v", got)
	}
	// require_approval "always", or naming a tool, makes it wait too.
	for name, fields := range map[string]map[string]any{
		"always":     {"require_approval": "always"},
		"tool_names": {"require_approval": map[string]any{"always": map[string]any{"tool_names": []string{"add"}}}},
	} {
		req := pending(`call add {"a":1,"b":2}`, fields)
		if responsesOutputTypes(req) != "mcp_approval_request" || wiresJSONAt(req, "output.0.name") != "add" {
			t.Errorf("%s: add = %v; want it waiting for approval", name, req)
		}
	}
	// allowed_tools: the model is offered only those, and a call of another
	// agent tool runs nothing.
	r := pending(`call add {"a":1,"b":2}`, map[string]any{"allowed_tools": map[string]any{"tool_names": []string{"add"}}})
	if out, _ := wiresJSONAt(r, "output.0.output").(string); !strings.Contains(out, `"sum":3`) {
		t.Errorf("allowed add = %v", r)
	}
	reqs := env.script.requests()
	if tools := reqs[len(reqs)-1].Tools; len(tools) != 1 || tools[0].Name != "add" {
		t.Errorf("allowed_tools [add]: model offered %+v", tools)
	}
	r = pending(`call boom {}`, map[string]any{"allowed_tools": []string{"add"}})
	if msg, _ := wiresJSONAt(r, "output.0.error").(string); wiresJSONAt(r, "output.0.status") != "failed" || !strings.Contains(msg, `no tool named "boom"`) {
		t.Errorf("boom outside allowed_tools = %v", r)
	}

	// What svc cannot serve: 400 naming the parameter.
	for name, tt := range map[string]struct {
		tools any
		param string
	}{
		"another server":      {[]map[string]any{{"type": "mcp", "server_label": "github", "server_url": "https://x"}}, "tools[0].server_label"},
		"a hosted tool":       {[]map[string]any{{"type": "function", "name": "pick"}, {"type": "web_search"}}, "tools[1].type"},
		"twice":               {append(mcp(nil), mcp(nil)...), "tools[1]"},
		"unknown allowed":     {mcp(map[string]any{"allowed_tools": []string{"add", "nope"}}), "tools[0].allowed_tools[1]"},
		"read_only":           {mcp(map[string]any{"allowed_tools": map[string]any{"read_only": true}}), "tools[0].allowed_tools.read_only"},
		"approval mode":       {mcp(map[string]any{"require_approval": "sometimes"}), "tools[0].require_approval"},
		"lift author's":       {mcp(map[string]any{"require_approval": map[string]any{"never": map[string]any{"tool_names": []string{"refund"}}}}), "tools[0].require_approval.never.tool_names[0]"},
		"unknown approval":    {mcp(map[string]any{"require_approval": map[string]any{"always": map[string]any{"tool_names": []string{"nope"}}}}), "tools[0].require_approval.always.tool_names[0]"},
		"defer_loading":       {mcp(map[string]any{"defer_loading": true}), "tools[0].defer_loading"},
		"allowed_callers":     {mcp(map[string]any{"allowed_callers": []string{"code"}}), "tools[0].allowed_callers"},
		"function needs name": {[]map[string]any{{"type": "function"}}, "tools[0].name"},
	} {
		r := env.post(t, "/openai/v1/responses", cred, responsesBody("hi", map[string]any{"tools": tt.tools}))
		if body := r.json(t); r.Status != 400 || wiresJSONAt(body, "error.param") != tt.param {
			t.Errorf("%s: %d %s; want 400 naming %s", name, r.Status, r.Body, tt.param)
		}
	}
}
