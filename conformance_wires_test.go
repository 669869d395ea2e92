package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// conformanceWireAgents are the agents the chat-wire suites talk to:
// "helper" (the agent tests' tools: add, later, boom, refund needing
// approval) and "brief" (one model call per turn, for the turn limit).
var conformanceWireAgents = map[string]string{
	"deep-agents/helper/index.ts": agentTestSource,
	"deep-agents/brief/index.ts": `import { defineAgent, tool } from "svc";
export default defineAgent({
  instructions: "One model call per turn.",
  maxTurns: 1,
  tools: { add: tool({ description: "Add", parameters: { type: "object" }, execute: () => 42 }) },
});
`,
}

// conformanceWireSuites are the node suites, one per wire.
var conformanceWireSuites = []string{
	"conformance/openai.test.mjs",
	"conformance/responses.test.mjs",
	"conformance/anthropic.test.mjs",
	"conformance/agui.test.mjs",
}

// TestWiresConformance boots `svc dev` in front of the fake model provider,
// once speaking OpenAI and once Anthropic upstream, and runs the official
// openai, @anthropic-ai/sdk and @ag-ui/client clients, and the AI SDK's
// default openai provider (Responses), against every wire.
// With the OpenAI upstream it also restarts svc dev between two phases: the
// first leaves tool approvals pending in durable sessions, the second
// (after the restart) answers them.
func TestWiresConformance(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	tests := []struct {
		name    string
		env     func(f *fakeProvider) []string
		restart bool
	}{
		{"openai upstream", func(f *fakeProvider) []string {
			return []string{"OPENAI_BASE_URL=" + f.URL + "/v1", "OPENAI_API_KEY=sk-fake"}
		}, true},
		{"anthropic upstream", func(f *fakeProvider) []string {
			return []string{"ANTHROPIC_BASE_URL=" + f.URL, "ANTHROPIC_API_KEY=sk-ant-fake"}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeProvider(t)
			dir := projectDir(t)
			for f, src := range conformanceWireAgents {
				writeFile(t, dir, f, src)
			}
			env := baseEnv(append(tt.env(fake), "SVC_DATABASE_URL="+testPostgresURL(t))...)
			d := startDev(t, dir, env)
			state := t.TempDir()
			suiteEnv := func(d *devProcess, phase string) []string {
				return []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_PHASE=" + phase, "SVC_STATE_DIR=" + state}
			}
			for _, suite := range conformanceWireSuites {
				runConformance(t, suite, suiteEnv(d, "all"))
			}
			conformanceUpstreamErrors(t, d, fake)
			if !tt.restart {
				return
			}
			for _, suite := range conformanceWireSuites {
				runConformance(t, suite, suiteEnv(d, "before-restart"))
			}
			if code := d.interrupt(); code != 0 {
				t.Fatalf("svc dev exited %d on SIGINT", code)
			}
			d = startDev(t, dir, env)
			for _, suite := range conformanceWireSuites {
				runConformance(t, suite, suiteEnv(d, "after-restart"))
			}
			if matches, _ := filepath.Glob(filepath.Join(state, "*.json")); len(matches) != len(conformanceWireSuites) {
				t.Errorf("restart phase state files = %v; want one per suite", matches)
			}
		})
	}
}

// conformanceUpstreamErrors checks that provider failures (after the
// client's retries) reach the caller in its wire's shape: a 429 stays a 429,
// a 5xx becomes a 502, streamed requests included.
func conformanceUpstreamErrors(t *testing.T, d *devProcess, fake *fakeProvider) {
	t.Helper()
	tests := []struct {
		name, path, body string
		upstream, want   int
		wantBody         string
	}{
		{"openai wire, upstream 429", "/openai/v1/chat/completions", wiresOpenAIBody("helper", "hi", true), 429, 429, `"code":"rate_limit_exceeded"`},
		{"anthropic wire, upstream 500", "/anthropic/v1/messages", wiresAnthropicBody("helper", "hi", false), 500, 502, `"type":"api_error"`},
		{"responses wire, upstream 500, streamed", "/openai/v1/responses", `{"model":"helper","input":"hi","stream":true}`, 500, 502, `"code":"upstream_error"`},
	}
	for _, tt := range tests {
		fake.failNext(tt.upstream, 3) // every attempt of the outbound client
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url(tt.path), strings.NewReader(tt.body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tt.want || !strings.Contains(string(body), tt.wantBody) {
			t.Errorf("%s: %d %s; want %d with %s", tt.name, resp.StatusCode, body, tt.want, tt.wantBody)
		}
	}
}
