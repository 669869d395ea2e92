package main

// `svc mcp` (DESIGN §11): MCP over stdio for coding agents, which start it
// from their config (.mcp.json and the like, agent_setup.go). It holds no
// protocol of its own: each line of stdin, one JSON-RPC message, is posted
// to POST /mcp of the target (this project's `svc dev`, or with --agent a
// box through the control plane), and each answer goes to stdout as one
// line. The target is resolved at the first message and again after it
// stopped answering or refused the credential (a box's identity token
// lasts minutes), so a coding agent may start `svc mcp` before `svc dev`.
// Logs go to stderr only: stdout carries nothing but messages.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"sync"
)

// mcpStdioMaxInFlight bounds the messages relayed at once: a get_run that
// waits must not hold up a ping, and a flood must not open connections
// without end.
const mcpStdioMaxInFlight = 16

// newMCPFlags defines the flags of `svc mcp`.
func newMCPFlags() *flag.FlagSet { return targetFlags("mcp")() }

// runMCP relays stdin to the target's POST /mcp until stdin ends, then
// waits for the answers still due.
func runMCP(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return errUsage
	}
	r := &mcpRelay{ctx: ctx, c: c, fs: fs, out: bufio.NewWriter(c.stdout)}
	sc := bufio.NewScanner(c.stdin)
	sc.Buffer(make([]byte, 64<<10), maxRequestBody+1)
	slots := make(chan struct{}, mcpStdioMaxInFlight)
	var wg sync.WaitGroup
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		if len(line) == 0 {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			r.relay(line)
		}()
	}
	err := sc.Err()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("mcp: read stdin: %w", err)
	}
	return nil
}

// mcpRelay is one `svc mcp` process: its target, resolved lazily, and its
// stdout, written one whole line at a time.
type mcpRelay struct {
	ctx context.Context
	c   *cmd
	fs  *flag.FlagSet

	mu     sync.Mutex
	target *target
	out    *bufio.Writer
}

// relay posts one message and writes the answer, if any.
func (r *mcpRelay) relay(msg []byte) {
	status, body, err := r.post(msg)
	if err == nil && status == http.StatusUnauthorized {
		r.forget()
		status, body, err = r.post(msg)
	}
	var resp mcpResponse
	switch {
	case err != nil:
		resp = mcpRelayError(msg, err.Error())
	case status == http.StatusAccepted:
		return
	case json.Unmarshal(body, &resp) != nil || resp.JSONRPC != "2.0":
		resp = mcpRelayError(msg, fmt.Sprintf("the runtime answered HTTP %d: %s", status, mcpRelayErrorText(body)))
	}
	if resp.ID == nil {
		return // a notification: nothing is answered
	}
	b, _ := json.Marshal(resp)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out.Write(append(b, '\n'))
	r.out.Flush()
}

// post sends msg to the target's POST /mcp, resolving the target first when
// there is none; a target that does not answer is forgotten.
func (r *mcpRelay) post(msg []byte) (int, []byte, error) {
	r.mu.Lock()
	t := r.target
	r.mu.Unlock()
	if t == nil {
		var err error
		if t, err = resolveTarget(r.ctx, r.c, r.fs); err != nil {
			return 0, nil, mcpRelayCause(err)
		}
		r.mu.Lock()
		r.target = t
		r.mu.Unlock()
	}
	status, body, err := t.do(r.ctx, http.MethodPost, "/mcp", msg, http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}})
	if err != nil {
		r.forget()
		return 0, nil, mcpRelayCause(t.unreachable(err))
	}
	return status, body, nil
}

// forget drops the resolved target, so the next message resolves it again.
func (r *mcpRelay) forget() {
	r.mu.Lock()
	r.target = nil
	r.mu.Unlock()
}

// mcpRelayCause is err with the hint a human needs, for a JSON-RPC error.
func mcpRelayCause(err error) error {
	if ce, ok := err.(*cliError); ok && ce.Hint != "" {
		return fmt.Errorf("%s: %s", ce.Message, ce.Hint)
	}
	return err
}

// mcpRelayError is the answer to msg when the runtime could not give one:
// an internal error with msg's id (null when msg has none readable).
func mcpRelayError(msg []byte, text string) mcpResponse {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
	}
	if json.Unmarshal(msg, &m) == nil && m.ID == nil && m.Method != nil {
		return mcpResponse{} // a notification is never answered
	}
	id := m.ID
	if id == nil {
		id = json.RawMessage("null")
	}
	return mcpResponse{JSONRPC: "2.0", ID: id, Error: &mcpError{Code: mcpInternalError, Message: "svc mcp: " + text}}
}

// mcpRelayErrorText is the message of a runtime's error body, or its text.
func mcpRelayErrorText(body []byte) string {
	var eb struct {
		Error apiError `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	return string(body[:min(len(body), 512)])
}
