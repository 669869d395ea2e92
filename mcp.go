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
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
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
	mcpHeaderMismatch     = -32020 // 2026-07-28: a standard request header is missing, malformed, or disagrees with the body
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
	status  int    // the HTTP status it is answered with, when the revision names one (0: the transport's default)
}

// mcpHeaders are the Streamable HTTP transport's request metadata headers
// (2026-07-28 "Request Metadata"); nil fields were not sent. The stdio
// relay sends them too, as the HTTP client it is.
type mcpHeaders struct {
	Version      string  // MCP-Protocol-Version
	Method, Name *string // Mcp-Method, Mcp-Name (Name as sent: maybe in the Base64 sentinel form)
}

// Header names of the request metadata.
const (
	mcpHeaderVersion = "MCP-Protocol-Version"
	mcpHeaderMethod  = "Mcp-Method"
	mcpHeaderName    = "Mcp-Name"
)

// mcpBase64Prefix and mcpBase64Suffix frame a header value carried in
// Base64 (the revision's "Value Encoding").
const (
	mcpBase64Prefix = "=?base64?"
	mcpBase64Suffix = "?="
)

// mcpHeadersOf reads the request metadata headers of h.
func mcpHeadersOf(h http.Header) mcpHeaders {
	get := func(name string) *string {
		if v, ok := h[http.CanonicalHeaderKey(name)]; ok && len(v) > 0 {
			return &v[0]
		}
		return nil
	}
	return mcpHeaders{Version: h.Get(mcpHeaderVersion), Method: get(mcpHeaderMethod), Name: get(mcpHeaderName)}
}

// mcpSetHeaders writes the request metadata of req under version into h, as a
// client of the revision must.
func mcpSetHeaders(h http.Header, req *mcpRequest, version string) {
	if version != "" {
		h.Set(mcpHeaderVersion, version)
	}
	h.Set(mcpHeaderMethod, mcpHeaderEncode(req.method))
	if name, ok := req.target(); ok {
		h.Set(mcpHeaderName, mcpHeaderEncode(name))
	}
}

// mcpHeaderSafe reports whether s can travel as a plain header value:
// visible ASCII and inner spaces, and not itself in the sentinel form.
func mcpHeaderSafe(s string) bool {
	if s != strings.Trim(s, " \t") || (strings.HasPrefix(s, mcpBase64Prefix) && strings.HasSuffix(s, mcpBase64Suffix)) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// mcpHeaderEncode is s as a header value: plain when safe, else Base64 of
// its UTF-8 in the sentinel form.
func mcpHeaderEncode(s string) string {
	if mcpHeaderSafe(s) {
		return s
	}
	return mcpBase64Prefix + base64.StdEncoding.EncodeToString([]byte(s)) + mcpBase64Suffix
}

// mcpHeaderDecode is the value a header carries: the sentinel form
// decoded, a plain value as it is; false when it is malformed or holds
// characters a header value may not.
func mcpHeaderDecode(v string) (string, bool) {
	if inner, ok := strings.CutPrefix(v, mcpBase64Prefix); ok && strings.HasSuffix(inner, mcpBase64Suffix) {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(inner, mcpBase64Suffix))
		return string(b), err == nil
	}
	for i := 0; i < len(v); i++ {
		if (v[i] < 0x20 && v[i] != '\t') || v[i] > 0x7e {
			return "", false
		}
	}
	return v, true
}

// validate checks the request metadata headers against req (the
// revision's "Server Validation"): under 2026-07-28 MCP-Protocol-Version,
// Mcp-Method and, for a request naming a target, Mcp-Name are required;
// under any revision a header that is sent must match the body.
func (h *mcpHeaders) validate(req *mcpRequest, version string) *mcpError {
	required := version == mcpVersionStateless
	mismatch := func(format string, args ...any) *mcpError {
		return &mcpError{Code: mcpHeaderMismatch, Message: "header mismatch: " + fmt.Sprintf(format, args...)}
	}
	if required && h.Version == "" {
		return mismatch("the %s header is required under %s", mcpHeaderVersion, mcpVersionStateless)
	}
	name, named := req.target()
	for _, c := range []struct {
		header     string
		sent       *string
		body       string
		inBody     bool
		bodySource string
	}{{mcpHeaderMethod, h.Method, req.method, true, "method"}, {mcpHeaderName, h.Name, name, named, "params.name or params.uri"}} {
		switch {
		case c.sent == nil && required && c.inBody:
			return mismatch("the %s header is required under %s (the body's %s is %q)", c.header, mcpVersionStateless, c.bodySource, c.body)
		case c.sent == nil:
			continue
		}
		v, ok := mcpHeaderDecode(*c.sent)
		switch {
		case !ok:
			return mismatch("the %s header is malformed or holds characters a header may not (send %s<Base64>%s)", c.header, mcpBase64Prefix, mcpBase64Suffix)
		case !c.inBody:
			return mismatch("%s header value %q, but the body has no %s", c.header, v, c.bodySource)
		case v != c.body:
			return mismatch("%s header value %q does not match body value %q", c.header, v, c.body)
		}
	}
	return nil
}

// mcpRequest is one decoded JSON-RPC request or notification.
type mcpRequest struct {
	id      json.RawMessage // nil: a notification
	method  string
	params  json.RawMessage // an object, or nil
	version string          // the request's own protocol version (2026-07-28 _meta), or ""
}

// target is the name the request acts on, which Mcp-Name mirrors:
// params.name of tools/call and prompts/get, params.uri of resources/read.
func (r *mcpRequest) target() (string, bool) {
	field := map[string]string{"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}[r.method]
	if field == "" || r.params == nil {
		return "", false
	}
	var p map[string]json.RawMessage
	var v string
	if json.Unmarshal(r.params, &p) != nil || json.Unmarshal(p[field], &v) != nil {
		return "", false
	}
	return v, true
}

// mcpServerInfo names this server in initialize and 2026-07-28 results.
func mcpServerInfo() map[string]string {
	return map[string]string{"name": "svc", "title": "svc runtime", "version": readBuildVersion().orDevel().Version}
}

// mcpServe answers one message (body) with the tools of t. h holds the
// request metadata headers the transport carried. A notification, or a
// response the client sends, gets nil: nothing to answer.
func mcpServe(ctx context.Context, t *mcpTools, body []byte, h mcpHeaders) *mcpResponse {
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
	resp.Result, resp.Error = mcpDispatch(ctx, t, req, h)
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
func mcpDispatch(ctx context.Context, t *mcpTools, req *mcpRequest, h mcpHeaders) (any, *mcpError) {
	if req.method == "initialize" {
		return mcpInitialize(req.params)
	}
	headerVersion := h.Version
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
	if e := h.validate(req, version); e != nil {
		return nil, e
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
		e := &mcpError{Code: mcpMethodNotFound, Message: fmt.Sprintf("method not found: %q (this server offers tools: tools/list, tools/call)", req.method)}
		if stateless {
			e.status = http.StatusNotFound // 2026-07-28: an unknown method is a 404
		}
		return nil, e
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
