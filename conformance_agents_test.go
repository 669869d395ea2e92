package main

import "testing"

// TestAgentsSDKConformance boots `svc dev` in front of the fake model
// provider and runs OpenAI's Agents SDK (conformance/agents.test.mjs)
// against it: plain runs through both of its models, approvals through
// the hosted MCP tool "svc", streamed and not.
func TestAgentsSDKConformance(t *testing.T) {
	fake := newFakeProvider(t)
	dir := projectDir(t)
	for f, src := range conformanceWireAgents {
		writeFile(t, dir, f, src)
	}
	d := startDev(t, dir, baseEnv("OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake", "SVC_DATABASE_URL="+testPostgresURL(t)))
	runConformance(t, "conformance/agents.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL})
}
