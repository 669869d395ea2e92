package main

// POST /mcp, MCP's streamable HTTP transport (DESIGN §11): one JSON-RPC
// message per POST, answered with one JSON body (the server never needs a
// stream: no tool sends progress or asks the client anything), a
// notification with 202 and no body. There is no server-initiated stream,
// so GET /mcp is 405, and no session. The guard has
// checked Host, Origin and the credential before this runs: on the box an
// identity token, under `svc dev --listen` the dev key.

import (
	"errors"
	"net/http"
)

// mcpPrincipalLocal stands for the caller of a `svc dev` bound to loopback,
// which sends no credential: its durable sessions are the local user's.
const mcpPrincipalLocal = "mcp:local"

// handleMCP answers one MCP message.
func (s *server) handleMCP(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		status, msg := http.StatusBadRequest, "invalid request: "+err.Error()
		if errors.Is(err, errBodyTooLarge) {
			status, msg = http.StatusRequestEntityTooLarge, "invalid request: a message is at most 4 MiB"
		}
		writeJSON(w, status, mcpResponse{JSONRPC: "2.0", ID: []byte("null"), Error: &mcpError{Code: mcpInvalidRequest, Message: msg}})
		return
	}
	principal := httpGuardPrincipal(r)
	if principal == "" {
		principal = mcpPrincipalLocal
	}
	tools := &mcpTools{rt: s.rt, agent: s.chatAgent, principal: principal}
	resp := mcpServe(r.Context(), tools, body, mcpHeadersOf(r.Header))
	if resp == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	status := http.StatusOK
	switch {
	case resp.Error != nil && resp.Error.status != 0:
		status = resp.Error.status
	case resp.Error != nil:
		switch resp.Error.Code {
		case mcpParseError, mcpInvalidRequest, mcpHeaderMismatch, mcpUnsupportedVersion:
			status = http.StatusBadRequest
		}
	}
	writeJSON(w, status, resp)
}

// handleMCPGet answers GET /mcp 405: this server opens no stream of its
// own (the transport lets a server decline it).
func (s *server) handleMCPGet(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	writeAPIError(w, http.StatusMethodNotAllowed, apiError{Code: "method_not_allowed", Message: "MCP on this server is POST /mcp only: it sends no server-initiated stream"})
}
