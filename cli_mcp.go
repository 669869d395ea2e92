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
//
// As the HTTP client it is, the relay sends each request's metadata
// headers (MCP-Protocol-Version: the request's _meta version, else the one
// initialize negotiated; Mcp-Method; Mcp-Name). notifications/cancelled,
// stdio's cancellation, is not relayed: it ends the HTTP request of the
// request it names (the server stops that work when its client goes), and
// nothing more is written for that request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	r := &mcpRelay{ctx: ctx, c: c, fs: fs, out: bufio.NewWriter(c.stdout), inflight: map[string]*mcpRelayCall{}}
	sc := bufio.NewScanner(c.stdin)
	sc.Buffer(make([]byte, 64<<10), maxRequestBody+1)
	slots := make(chan struct{}, mcpStdioMaxInFlight)
	var wg sync.WaitGroup
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		if len(line) == 0 {
			continue
		}
		req, _ := mcpDecode(line)
		if r.cancelled(req) {
			continue
		}
		// Registered before the next line is read, so a cancellation that
		// follows finds it.
		call := r.start(req)
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			r.relay(call, line, req)
		}()
	}
	err := sc.Err()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("mcp: read stdin: %w", err)
	}
	return nil
}

// errMCPCancelled is the cause of a request's context that the client
// cancelled with notifications/cancelled.
var errMCPCancelled = errors.New("cancelled by the client")

// mcpRelay is one `svc mcp` process: its target, resolved lazily, its
// stdout, written one whole line at a time, the protocol version
// initialize negotiated, and the requests in flight by id.
type mcpRelay struct {
	ctx context.Context
	c   *cmd
	fs  *flag.FlagSet

	mu       sync.Mutex
	target   *target
	out      *bufio.Writer
	version  string                   // negotiated by initialize ("" before, or under 2026-07-28)
	inflight map[string]*mcpRelayCall // by the request's id, compacted
}

// mcpRelayKey is the key of a JSON-RPC id in inflight.
func mcpRelayKey(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// mcpRelayCall is one request in flight: the context of its HTTP request.
type mcpRelayCall struct {
	key    string
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// start returns the call of one message: for a request, registered in
// inflight under its id so notifications/cancelled can end it.
func (r *mcpRelay) start(req *mcpRequest) *mcpRelayCall {
	if req == nil || req.id == nil {
		return &mcpRelayCall{ctx: r.ctx, cancel: func(error) {}}
	}
	ctx, cancel := context.WithCancelCause(r.ctx)
	call := &mcpRelayCall{key: mcpRelayKey(req.id), ctx: ctx, cancel: cancel}
	r.mu.Lock()
	r.inflight[call.key] = call
	r.mu.Unlock()
	return call
}

// cancelled handles notifications/cancelled: the request it names, still
// in flight, is cancelled. It reports whether req was one.
func (r *mcpRelay) cancelled(req *mcpRequest) bool {
	if req == nil || req.id != nil || req.method != "notifications/cancelled" {
		return false
	}
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(req.params, &p) == nil && p.RequestID != nil {
		r.mu.Lock()
		call := r.inflight[mcpRelayKey(p.RequestID)]
		r.mu.Unlock()
		if call != nil {
			call.cancel(errMCPCancelled)
		}
	}
	return true
}

// done forgets call; it reports whether the client cancelled it, when
// nothing more may be written for it.
func (r *mcpRelay) done(call *mcpRelayCall) bool {
	r.mu.Lock()
	if r.inflight[call.key] == call {
		delete(r.inflight, call.key)
	}
	r.mu.Unlock()
	cancelled := errors.Is(context.Cause(call.ctx), errMCPCancelled)
	call.cancel(nil) // releases the context
	return cancelled
}

// relay posts one message and writes the answer, if any: not for a
// request the client cancelled meanwhile.
func (r *mcpRelay) relay(call *mcpRelayCall, msg []byte, req *mcpRequest) {
	header := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	if req != nil && req.id != nil {
		version := req.version
		if version == "" {
			r.mu.Lock()
			version = r.version
			r.mu.Unlock()
		}
		mcpSetHeaders(header, req, version)
	}
	status, body, err := r.post(call.ctx, msg, header)
	if err == nil && status == http.StatusUnauthorized {
		r.forget()
		status, body, err = r.post(call.ctx, msg, header)
	}
	if r.done(call) {
		return
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
	if req != nil && req.method == "initialize" {
		r.negotiated(resp)
	}
	b, _ := json.Marshal(resp)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out.Write(append(b, '\n'))
	r.out.Flush()
}

// negotiated keeps the protocol version an initialize answer chose, which
// every later request's MCP-Protocol-Version carries.
func (r *mcpRelay) negotiated(resp mcpResponse) {
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	b, _ := json.Marshal(resp.Result)
	if json.Unmarshal(b, &res) == nil && res.ProtocolVersion != "" {
		r.mu.Lock()
		r.version = res.ProtocolVersion
		r.mu.Unlock()
	}
}

// post sends msg to the target's POST /mcp, resolving the target first when
// there is none; a target that does not answer is forgotten (not when the
// client cancelled the request).
func (r *mcpRelay) post(ctx context.Context, msg []byte, header http.Header) (int, []byte, error) {
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
	status, body, err := t.do(ctx, http.MethodPost, "/mcp", msg, header)
	if err != nil {
		if ctx.Err() == nil {
			r.forget()
		}
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
