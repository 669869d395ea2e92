package main

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// agentHistoryGet reads GET /api/agents/helper/sessions/{thread}{query} from
// env with headers and decodes a 200 into a page.
func agentHistoryGet(t *testing.T, env *wiresEnv, thread, query string, headers map[string]string) (int, agentHistoryPage, wiresReply) {
	t.Helper()
	r := env.post(t, "/api/agents/helper/sessions/"+thread+query, headers, "")
	var page agentHistoryPage
	if r.Status == http.StatusOK {
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatalf("decode %s: %v", r.Body, err)
		}
	}
	return r.Status, page, r
}

// agentHistorySummary is a page's items as "type:text-or-name[=result]".
func agentHistorySummary(items []agentHistoryItem) string {
	var parts []string
	for _, it := range items {
		s := it.Type + ":" + it.Text + it.Name
		if it.Result != nil {
			s += "=" + it.Result.Content
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

// TestAgentSessionHistory reads a durable AG-UI thread back: its shape
// (user text, assistant text, a tool call joined to its result, a call
// pending approval), paging, 404 for an unknown session or another
// credential, 401 without one, 400 for a bad query, and the same transcript
// from a new server over the same database (a restart of svc dev), where
// the pending call is approved and its result appears.
func TestAgentSessionHistory(t *testing.T) {
	dbURL := wiresMigratedDB(t)
	env := newWiresEnv(t, dbURL)
	thread := "thread-1"
	for _, say := range []string{"hello", `call add {"a":2,"b":3}`, `call refund {"orderId":"o9"}`} {
		if r := env.post(t, "/chat", wiresBearer, wiresAGUIBody(thread, say)); r.Status != http.StatusOK {
			t.Fatalf("chat %q = %d %s", say, r.Status, r.Body)
		}
	}
	status, page, raw := agentHistoryGet(t, env, thread, "", wiresBearer)
	if status != http.StatusOK {
		t.Fatalf("GET history = %d %s", status, raw.Body)
	}
	want := `user:hello | assistant:echo: hello | user:call add {"a":2,"b":3} | tool_call:add={"sum":5,` +
		` | assistant:tool add said: {"sum":5, | user:call refund {"orderId":"o9"} | tool_call:refund`
	if got := agentHistorySummary(page.Items); !agentHistoryLike(got, want) {
		t.Errorf("items = %s\nwant    %s", got, want)
	}
	if page.SchemaVersion != 1 || page.Agent != "helper" || page.Session != thread || page.Turns != 3 || page.Total != 7 || page.Start != 0 || page.NextCursor != "" {
		t.Errorf("page = %+v", page)
	}
	refund := page.Items[6]
	if len(page.Pending) != 1 || page.Pending[0].Kind != pendingApproval || page.Pending[0].ID != refund.ID || refund.Result != nil ||
		string(refund.Arguments) != `{"orderId":"o9"}` {
		t.Errorf("pending = %+v, refund item = %+v; want the refund call pending approval", page.Pending, refund)
	}
	if !strings.Contains(string(raw.Body), `"arguments":{"a":2,"b":3}`) || raw.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("body = %s (Cache-Control %q); want arguments as JSON objects, not stored", raw.Body, raw.Header.Get("Cache-Control"))
	}

	// Paging: the newest items first, nextCursor going back.
	_, last, _ := agentHistoryGet(t, env, thread, "?limit=3", wiresBearer)
	if last.Start != 4 || len(last.Items) != 3 || last.NextCursor != "4" || !reflect.DeepEqual(last.Items, page.Items[4:]) {
		t.Errorf("limit=3 page = %+v", last)
	}
	_, prev, _ := agentHistoryGet(t, env, thread, "?limit=3&cursor="+last.NextCursor, wiresBearer)
	if prev.Start != 1 || prev.NextCursor != "1" || !reflect.DeepEqual(prev.Items, page.Items[1:4]) {
		t.Errorf("previous page = %+v", prev)
	}

	refusals := []struct {
		name, thread, query string
		headers             map[string]string
		status              int
		code                string
	}{
		{"unknown session", "nope", "", wiresBearer, http.StatusNotFound, "session_not_found"},
		{"another credential", thread, "", map[string]string{"Authorization": "Bearer tok-b"}, http.StatusNotFound, "session_not_found"},
		{"no credential", thread, "", nil, http.StatusUnauthorized, "auth"},
		{"limit too large", thread, "?limit=501", wiresBearer, http.StatusBadRequest, "invalid_query"},
		{"bad cursor", thread, "?cursor=-1", wiresBearer, http.StatusBadRequest, "invalid_query"},
		{"session id too long", strings.Repeat("x", sessionMaxKeyLength+1), "", wiresBearer, http.StatusBadRequest, "invalid_query"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, _, r := agentHistoryGet(t, env, tt.thread, tt.query, tt.headers)
			if status != tt.status || wiresJSONAt(r.json(t), "error.code") != tt.code {
				t.Errorf("GET = %d %s; want %d %s", status, r.Body, tt.status, tt.code)
			}
		})
	}

	// A new server over the same database reads the same transcript, and
	// the pending call can still be approved from it.
	env2 := newWiresEnv(t, dbURL)
	_, again, _ := agentHistoryGet(t, env2, thread, "", wiresAPIKey)
	if !reflect.DeepEqual(again, page) {
		t.Errorf("after a restart = %+v\nwant %+v", again, page)
	}
	resume := `{"threadId":"` + thread + `","runId":"r2","messages":[],"forwardedProps":{"agent":"helper"},"resume":[{"interruptId":"` +
		again.Pending[0].ID + `","status":"resolved","payload":{"approved":true}}]}`
	if r := env2.post(t, "/chat", wiresBearer, resume); r.Status != http.StatusOK {
		t.Fatalf("resume = %d %s", r.Status, r.Body)
	}
	_, done, _ := agentHistoryGet(t, env2, thread, "", wiresBearer)
	got := agentHistorySummary(done.Items)
	if len(done.Pending) != 0 || !strings.Contains(got, `tool_call:refund={"refunded":"o9"} | assistant:tool refund said: {"refunded":"o9"}`) {
		t.Errorf("after approval: pending %+v, items %s", done.Pending, got)
	}
}

// agentHistoryLike reports whether got matches want, where each "|"-separated
// part of want is a prefix of got's part (results carry generated call ids).
func agentHistoryLike(got, want string) bool {
	g, w := strings.Split(got, " | "), strings.Split(want, " | ")
	if len(g) != len(w) {
		return false
	}
	for i := range w {
		if !strings.HasPrefix(g[i], w[i]) {
			return false
		}
	}
	return true
}

// TestAgentHistoryItems checks the joining of tool results to their calls,
// a result whose call the history lacks (a client-seeded session), and
// assistant messages without text.
func TestAgentHistoryItems(t *testing.T) {
	msgs := []chatMessage{
		{Role: "tool", ToolCallID: "seeded", ToolName: "lookup", Content: "42"},
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []toolCall{{ID: "c1", Name: "add", Arguments: json.RawMessage(`{}`)}}},
		{Role: "tool", ToolCallID: "c1", ToolName: "add", Content: "boom", IsError: true},
		{Role: "assistant", Content: "sorry"},
	}
	items := agentHistoryItems(msgs)
	if got, want := agentHistorySummary(items), "tool_call:lookup=42 | user:hi | tool_call:add=boom | assistant:sorry"; got != want {
		t.Errorf("items = %s; want %s", got, want)
	}
	if !items[2].Result.IsError || items[0].ID != "seeded" {
		t.Errorf("items = %+v", items)
	}
}

// TestAgentSessionKeepsHostileOutput: model output reaches a session as the
// model wrote it, so a tool call's arguments holding U+0000 or a lone
// surrogate (which jsonb refuses) must still be saved, and read back as
// they were; before, the save failed and the turn the user saw was gone.
func TestAgentSessionKeepsHostileOutput(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	thread := "hostile"
	args := `{"orderId":"a\u0000b\ud800c"}`
	if r := env.post(t, "/chat", wiresBearer, wiresAGUIBody(thread, "call refund "+args)); r.Status != http.StatusOK {
		t.Fatalf("chat = %d %s", r.Status, r.Body)
	}
	status, page, raw := agentHistoryGet(t, env, thread, "", wiresBearer)
	if status != http.StatusOK {
		t.Fatalf("GET history = %d %s; want the turn kept", status, raw.Body)
	}
	var call *agentHistoryItem
	for i := range page.Items {
		if page.Items[i].Type == "tool_call" {
			call = &page.Items[i]
		}
	}
	if call == nil || string(call.Arguments) != args || len(page.Pending) != 1 {
		t.Fatalf("items = %+v pending %+v; want the refund call with arguments %s, pending", page.Items, page.Pending, args)
	}
	// Approved, the tool's result (and the model's text quoting it) keeps them too.
	resume, _ := json.Marshal(map[string]any{"threadId": thread, "runId": "r2", "state": map[string]any{}, "tools": []any{}, "context": []any{},
		"forwardedProps": map[string]any{"agent": "helper"}, "messages": []any{},
		"resume": []any{map[string]any{"interruptId": call.ID, "status": "resolved", "payload": map[string]any{"approved": true}}}})
	if r := env.post(t, "/chat", wiresBearer, string(resume)); r.Status != http.StatusOK {
		t.Fatalf("resume = %d %s", r.Status, r.Body)
	}
	_, page, raw = agentHistoryGet(t, env, thread, "", wiresBearer)
	if len(page.Pending) != 0 || !strings.Contains(string(raw.Body), `a\u0000b\ufffdc`) && !strings.Contains(string(raw.Body), `a\u0000b\ud800c`) {
		t.Errorf("after approval: %s; want the result holding the arguments' characters", raw.Body)
	}
}

// TestAgentTurnStoppedByClient: a client that ends its request mid-turn
// (it hangs up, or the console's Stop aborts it) stops the turn on the
// server: the model call is cancelled, the turn is recorded as cancelled
// (not failed), and the session keeps the user's message.
func TestAgentTurnStoppedByClient(t *testing.T) {
	env := newWiresEnv(t, wiresMigratedDB(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", env.url+"/chat", strings.NewReader(wiresAGUIBody("stop-me", "hang")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", wiresBearer["Authorization"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// The model is answering (it never will); then the client stops the turn.
	eventually(t, 10*time.Second, "the model called", func() bool { return len(env.script.requests()) == 1 })
	cancel()
	resp.Body.Close()
	var turn runRecord
	eventually(t, 10*time.Second, "the stopped turn recorded", func() bool {
		runs, _ := env.rt.engine.list()
		for _, r := range runs {
			if r.Agent == "helper" && r.SessionID == "stop-me" {
				turn = r
				return true
			}
		}
		return false
	})
	if turn.Status != runCancelled || turn.Error == nil || turn.Error.Name != "Stopped" {
		t.Errorf("turn = %s %+v; want cancelled, Stopped", turn.Status, turn.Error)
	}
	_, page, raw := agentHistoryGet(t, env, "stop-me", "", wiresBearer)
	if len(page.Items) != 1 || page.Items[0].Type != "user" || page.Items[0].Text != "hang" {
		t.Errorf("session after Stop = %s; want the user's message kept", raw.Body)
	}
}
