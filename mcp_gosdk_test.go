package main

import (
	"context"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPGoSDK judges svc's MCP server with the official Go SDK (pinned in
// go.mod), in every revision svc advertises, over Streamable HTTP (POST
// /mcp of svc dev) and over `svc mcp` on stdio: it negotiates the version,
// lists the tools, calls one with valid and one with invalid arguments,
// and cancels a message_agent whose model call hangs (over stdio the SDK
// sends notifications/cancelled): the call ends with the caller's error,
// the provider sees its caller leave, and the session goes on.
func TestMCPGoSDK(t *testing.T) {
	d, dir, fake := mcpTestDev(t)
	cancelled := 0
	for _, version := range mcpVersions {
		for _, transport := range []string{"http", "stdio"} {
			t.Run(version+" "+transport, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: d.url("/mcp"), HTTPClient: http.DefaultClient, DisableStandaloneSSE: true, MaxRetries: -1}
				if transport == "stdio" {
					cmd := exec.Command(svcBinary(t), "mcp")
					cmd.Dir, cmd.Env = dir, d.env
					tr = &mcp.CommandTransport{Command: cmd}
				}
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "svc-test", Version: "1"}, nil).Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				defer cs.Close()
				if got := cs.InitializeResult().ProtocolVersion; got != version {
					t.Errorf("negotiated %q; want %q", got, version)
				}
				tools, err := cs.ListTools(ctx, nil)
				if err != nil || len(tools.Tools) != len(mcpToolNames()) {
					t.Fatalf("tools/list: %v %v", tools, err)
				}
				if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_workflows", Arguments: map[string]any{}}); err != nil || res.IsError {
					t.Errorf("list_workflows: %+v %v", res, err)
				}
				if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_workflow", Arguments: map[string]any{}}); err != nil || !res.IsError {
					t.Errorf("start_workflow without a name: %+v %v; want an isError result", res, err)
				}
				hang, stop := context.WithCancel(ctx)
				time.AfterFunc(300*time.Millisecond, stop)
				if _, err := cs.CallTool(hang, &mcp.CallToolParams{Name: "message_agent", Arguments: map[string]any{"agent": "helper", "message": "hang"}}); err == nil {
					t.Errorf("a cancelled message_agent answered")
				}
				cancelled++
				if err := cs.Ping(ctx, nil); err != nil {
					t.Errorf("ping after the cancellation: %v", err)
				}
			})
		}
	}
	for deadline := time.Now().Add(30 * time.Second); fake.hungUp() < cancelled; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the provider saw %d of %d cancelled model calls end", fake.hungUp(), cancelled)
		}
	}
}
