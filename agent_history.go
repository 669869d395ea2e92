package main

// The transcript of a durable session (issue 12): what a client that lost
// its copy (the console after a reload) reads back from the stored session
// (session.go), so it can redraw the conversation and answer the calls
// still pending. Read-only: nothing here changes a session.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// Bounds of a transcript page.
const (
	// agentHistoryDefaultLimit is how many items a page holds unless the
	// caller asks for another number.
	agentHistoryDefaultLimit = 100
	// agentHistoryMaxLimit caps the items of one page.
	agentHistoryMaxLimit = 500
)

// Types of agentHistoryItem.
const (
	agentHistoryUser      = "user"      // a user message
	agentHistoryAssistant = "assistant" // the assistant's text
	agentHistoryToolCall  = "tool_call" // a tool call, with its result once answered
)

// agentHistoryItem is one entry of a transcript, oldest first: a user
// message, assistant text, or a tool call with its result (none while it
// is pending).
type agentHistoryItem struct {
	Type      string             `json:"type"`
	Text      string             `json:"text,omitempty"`      // user and assistant
	ID        string             `json:"id,omitempty"`        // tool_call: the call id (an AG-UI interrupt's id)
	Name      string             `json:"name,omitempty"`      // tool_call: the tool
	Arguments json.RawMessage    `json:"arguments,omitempty"` // tool_call: a JSON object
	Result    *agentHistoryValue `json:"result,omitempty"`    // tool_call: its answer
}

// agentHistoryValue is a tool call's result as the model saw it.
type agentHistoryValue struct {
	Content string `json:"content"`
	IsError bool   `json:"isError,omitempty"`
}

// agentHistoryPage is one page of a session's transcript: items
// [start, start+len(Items)) of Total. Pending lists the calls waiting for
// the client (kind approval or client), whatever the page. NextCursor,
// when set, asks for the items before this page.
type agentHistoryPage struct {
	SchemaVersion int                `json:"schema_version"`
	Agent         string             `json:"agent"`
	Session       string             `json:"session"`
	Turns         int                `json:"turns"`
	Total         int                `json:"total"`
	Start         int                `json:"start"`
	Items         []agentHistoryItem `json:"items"`
	Pending       []pendingCall      `json:"pending"`
	NextCursor    string             `json:"nextCursor,omitempty"`
}

// agentHistoryQuery is a page request: the items before Cursor (-1 = the
// newest), at most Limit of them.
type agentHistoryQuery struct {
	Limit  int
	Cursor int
}

// parseAgentHistoryQuery reads limit (1-agentHistoryMaxLimit) and cursor
// (an item index, from a page's nextCursor) from a query's values.
func parseAgentHistoryQuery(limit, cursor string) (agentHistoryQuery, error) {
	q := agentHistoryQuery{Limit: agentHistoryDefaultLimit, Cursor: -1}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > agentHistoryMaxLimit {
			return q, fmt.Errorf("limit must be an integer from 1 to %d, not %q", agentHistoryMaxLimit, limit)
		}
		q.Limit = n
	}
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 {
			return q, fmt.Errorf("cursor must be the nextCursor of a page, not %q", cursor)
		}
		q.Cursor = n
	}
	return q, nil
}

// agentHistory reads the transcript page q of the durable session ref;
// found is false when no such session is stored.
func (s *sessionStore) agentHistory(ctx context.Context, ref sessionRef, q agentHistoryQuery) (page *agentHistoryPage, found bool, err error) {
	sess, err := s.load(ctx, ref)
	if err != nil || !sess.stored {
		return nil, false, err
	}
	items := agentHistoryItems(sess.Messages)
	end := len(items)
	if q.Cursor >= 0 && q.Cursor < end {
		end = q.Cursor
	}
	start := max(0, end-q.Limit)
	page = &agentHistoryPage{SchemaVersion: schemaVersion, Agent: ref.Agent, Session: ref.Key, Turns: sess.Turns, Total: len(items),
		Start: start, Items: sessionNonNil(items[start:end]), Pending: sessionNonNil(sess.Pending)}
	if start > 0 {
		page.NextCursor = strconv.Itoa(start)
	}
	return page, true, nil
}

// agentHistoryItems turns a session's messages into transcript items:
// each tool result joins the call it answers (a result whose call is not
// in the history, which a client may have seeded, stands as its own call).
func agentHistoryItems(msgs []chatMessage) []agentHistoryItem {
	var items []agentHistoryItem
	calls := map[string]int{} // call id → its index in items
	for _, m := range msgs {
		switch m.Role {
		case "user":
			items = append(items, agentHistoryItem{Type: agentHistoryUser, Text: m.Content})
		case "assistant":
			if m.Content != "" {
				items = append(items, agentHistoryItem{Type: agentHistoryAssistant, Text: m.Content})
			}
			for _, c := range m.ToolCalls {
				calls[c.ID] = len(items)
				items = append(items, agentHistoryItem{Type: agentHistoryToolCall, ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
		case "tool":
			i, ok := calls[m.ToolCallID]
			if !ok {
				i = len(items)
				items = append(items, agentHistoryItem{Type: agentHistoryToolCall, ID: m.ToolCallID, Name: m.ToolName})
			}
			items[i].Result = &agentHistoryValue{Content: m.Content, IsError: m.IsError}
		}
	}
	return items
}
