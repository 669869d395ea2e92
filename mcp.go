package main

// The Model Context Protocol server (DESIGN §11): JSON-RPC 2.0 messages in,
// answers out, whichever transport carries them (POST /mcp in mcp_http.go;
// `svc mcp` relays stdio to it, cli_mcp.go). Versions 2025-06-18 and
// 2025-11-25 open with initialize; 2026-07-28, the stateless revision, has
// no handshake: every request names its version in params._meta, results
// carry resultType, and server/discover lists what the server speaks.
// The server keeps no session in any version (a 2025 server may go
// without Mcp-Session-Id), so any request can reach any process.
// The tools are in mcp_tools.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Protocol versions, newest first; mcpLegacyVersions open with initialize.
const (
	mcpVersionStateless = "2026-07-28"
	mcpVersionLatest    = "2025-11-25"
	mcpVersionJune2025  = "2025-06-18"
)

var (
	// mcpVersions are every version the server speaks, newest first.
	mcpVersions = []string{mcpVersionStateless, mcpVersionLatest, mcpVersionJune2025}
	// mcpLegacyVersions are the versions negotiated by initialize.
	mcpLegacyVersions = []string{mcpVersionLatest, mcpVersionJune2025}
)

// JSON-RPC and MCP error codes.
const (
	mcpParseError         = -32700
	mcpInvalidRequest     = -32600
	mcpMethodNotFound     = -32601
	mcpInvalidParams      = -32602
	mcpInternalError      = -32603
	mcpHeaderMismatch     = -32020 // 2026-07-28: the MCP-Protocol-Version header and _meta disagree
	mcpUnsupportedVersion = -32022 // 2026-07-28: a version the server does not speak
)

// _meta keys of the 2026-07-28 revision.
const (
	mcpMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion"
	mcpMetaServerInfo      = "io.modelcontextprotocol/serverInfo"
)

// mcpToolsTTLMillis is how long a 2026-07-28 client may cache tools/list:
// the tools are fixed by this binary.
const mcpToolsTTLMillis = 3_600_000

// mcpInstructions tells a coding agent what the server is for.
const mcpInstructions = "svc runs this project's durable workflows and agents. list_workflows shows what can run; " +
	"get_workflow_schema gives a workflow's input schema; start_workflow returns a receipt at once and get_run " +
	"(waitSeconds up to 25) follows the run; a run waiting on a hook is resumed with resume_hook and the token " +
	"from its steps; message_agent sends an agent one turn (session keeps a durable conversation)."

// mcpResponse is a JSON-RPC response: Result or Error.
type mcpResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *mcpError       `json:"error,omitempty"`
}

// mcpError is a JSON-RPC error object.
type mcpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// mcpRequest is one decoded JSON-RPC request or notification.
type mcpRequest struct {
	id      json.RawMessage // nil: a notification
	method  string
	params  json.RawMessage // an object, or nil
	version string          // the request's own protocol version (2026-07-28 _meta), or ""
}

// mcpServerInfo names this server in initialize and 2026-07-28 results.
func mcpServerInfo() map[string]string {
	return map[string]string{"name": "svc", "title": "svc runtime", "version": readBuildVersion().orDevel().Version}
}

// mcpServe answers one message (body) with the tools of t. headerVersion is
// the MCP-Protocol-Version header ("" when the transport has none). A
// notification, or a response the client sends, gets nil: nothing to answer.
func mcpServe(ctx context.Context, t *mcpTools, body []byte, headerVersion string) *mcpResponse {
	req, rerr := mcpDecode(body)
	if rerr != nil {
		id := json.RawMessage("null") // the id when the request had a readable one
		if req != nil {
			if req.id == nil {
				return nil // a notification is never answered, not even with an error
			}
			id = req.id
		}
		return &mcpResponse{JSONRPC: "2.0", ID: id, Error: rerr}
	}
	if req == nil || req.id == nil {
		return nil
	}
	resp := &mcpResponse{JSONRPC: "2.0", ID: req.id}
	resp.Result, resp.Error = mcpDispatch(ctx, t, req, headerVersion)
	return resp
}

// mcpDecode checks a message against the edge's JSON limits and JSON-RPC
// 2.0. It returns nil, nil for a response the client sent, and the request
// with its error when only its params are wrong (so the answer keeps its id).
func mcpDecode(body []byte) (*mcpRequest, *mcpError) {
	if err := edgeJSON.check(body); err != nil {
		return nil, &mcpError{Code: mcpParseError, Message: "parse error: " + err.Error()}
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		return nil, &mcpError{Code: mcpInvalidRequest, Message: "invalid request: JSON-RPC batches are not supported by MCP since 2025-06-18; send one message at a time"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, &mcpError{Code: mcpInvalidRequest, Message: "invalid request: a JSON-RPC message is a JSON object"}
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		return nil, &mcpError{Code: mcpInvalidRequest, Message: `invalid request: "jsonrpc" must be "2.0"`}
	}
	id, hasID := m["id"]
	if hasID && (len(id) == 0 || (id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9'))) {
		return nil, &mcpError{Code: mcpInvalidRequest, Message: "invalid request: id must be a string or a number"}
	}
	rawMethod, hasMethod := m["method"]
	if !hasMethod {
		if _, ok := m["result"]; ok && hasID {
			return nil, nil
		}
		if _, ok := m["error"]; ok && hasID {
			return nil, nil
		}
		return nil, &mcpError{Code: mcpInvalidRequest, Message: `invalid request: "method" is missing`}
	}
	req := &mcpRequest{id: id}
	if err := json.Unmarshal(rawMethod, &req.method); err != nil || req.method == "" {
		return nil, &mcpError{Code: mcpInvalidRequest, Message: `invalid request: "method" must be a non-empty string`}
	}
	if p := m["params"]; len(p) > 0 && string(p) != "null" {
		if p[0] != '{' {
			return &mcpRequest{id: id, method: req.method}, &mcpError{Code: mcpInvalidParams, Message: "invalid params: params must be an object"}
		}
		req.params = p
		var meta struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		json.Unmarshal(p, &meta)
		if v, ok := meta.Meta[mcpMetaProtocolVersion]; ok {
			if json.Unmarshal(v, &req.version) != nil || req.version == "" {
				return &mcpRequest{id: id, method: req.method}, &mcpError{Code: mcpInvalidParams, Message: "invalid params: _meta." + mcpMetaProtocolVersion + " must be a version string"}
			}
		}
	}
	return req, nil
}

// mcpDispatch runs one request and returns its result or its error.
func mcpDispatch(ctx context.Context, t *mcpTools, req *mcpRequest, headerVersion string) (any, *mcpError) {
	if req.method == "initialize" {
		return mcpInitialize(req.params)
	}
	version := req.version
	if headerVersion != "" && version != "" && headerVersion != version {
		return nil, &mcpError{Code: mcpHeaderMismatch, Message: fmt.Sprintf("header mismatch: MCP-Protocol-Version %q differs from _meta %q", headerVersion, version)}
	}
	if version == "" {
		version = headerVersion
	}
	if version != "" && !slices.Contains(mcpVersions, version) {
		return nil, &mcpError{Code: mcpUnsupportedVersion, Message: fmt.Sprintf("unsupported protocol version %q: this server speaks %s", version, strings.Join(mcpVersions, ", ")),
			Data: map[string]any{"supported": mcpVersions, "requested": version}}
	}
	stateless := version == mcpVersionStateless
	var result map[string]any
	switch req.method {
	case "server/discover":
		stateless = true
		result = map[string]any{"supportedVersions": mcpVersions, "capabilities": mcpCapabilities(), "instructions": mcpInstructions}
	case "ping":
		result = map[string]any{}
	case "tools/list":
		result = map[string]any{"tools": mcpToolList()}
		if stateless {
			result["ttlMs"], result["cacheScope"] = mcpToolsTTLMillis, "public"
		}
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(req.params, &p); err != nil || p.Name == "" {
			return nil, &mcpError{Code: mcpInvalidParams, Message: `invalid params: tools/call takes {"name": <tool>, "arguments": {…}}`}
		}
		tool := mcpFindTool(p.Name)
		if tool == nil {
			return nil, &mcpError{Code: mcpInvalidParams, Message: fmt.Sprintf("unknown tool %q: the tools are %s", p.Name, strings.Join(mcpToolNames(), ", "))}
		}
		result = t.call(ctx, tool, p.Arguments)
	default:
		return nil, &mcpError{Code: mcpMethodNotFound, Message: fmt.Sprintf("method not found: %q (this server offers tools: tools/list, tools/call)", req.method)}
	}
	if stateless {
		result["resultType"] = "complete"
		result["_meta"] = map[string]any{mcpMetaServerInfo: mcpServerInfo()}
	}
	return result, nil
}

// mcpCapabilities are the server's capabilities: tools, whose list never
// changes while it runs.
func mcpCapabilities() map[string]any {
	return map[string]any{"tools": map[string]any{"listChanged": false}}
}

// mcpInitialize negotiates a 2025 version: the client's when the server
// speaks it, else the newest the server has (the client then decides).
func mcpInitialize(params json.RawMessage) (any, *mcpError) {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if params == nil || json.Unmarshal(params, &p) != nil || p.ProtocolVersion == "" {
		return nil, &mcpError{Code: mcpInvalidParams, Message: "invalid params: initialize needs protocolVersion, capabilities and clientInfo"}
	}
	version := mcpVersionLatest
	if slices.Contains(mcpLegacyVersions, p.ProtocolVersion) {
		version = p.ProtocolVersion
	}
	return map[string]any{"protocolVersion": version, "capabilities": mcpCapabilities(), "serverInfo": mcpServerInfo(), "instructions": mcpInstructions}, nil
}
