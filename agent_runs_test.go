package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestAgentTurnsNamedInRunList: a chat turn is listed by GET /api/runs
// under the name of its agent and wire (its workflowName was empty, so the
// Runs page and the list showed a nameless row), the workflow= and agent=
// filters still part workflows from turns, and `svc runs list` and `svc
// runs get` name the turn too.
func TestAgentTurnsNamedInRunList(t *testing.T) {
	dir := projectDir(t)
	writeFile(t, dir, "deep-agents/helper/index.ts", agentTestSource)
	fake := newFakeProvider(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake"))
	c := newPgFaultClient(t, dir, d.payload.EmulatorURL)
	if st := c.chat("hello"); st != http.StatusOK {
		t.Fatalf("chat turn = %d", st)
	}
	c.start("ping", "{}")
	list := func(query string) []runRecord {
		var out struct{ Items []runRecord }
		if st := httpJSON(t, "GET", c.base+"/api/runs"+query, nil, &out); st != http.StatusOK {
			t.Fatalf("GET /api/runs%s = %d", query, st)
		}
		return out.Items
	}
	var turn runRecord
	for _, r := range list("") {
		if r.Trigger == triggerAgent {
			turn = r
		}
	}
	if turn.WorkflowName != "helper (openai)" || turn.Agent != "helper" || turn.Wire != wireOpenAI {
		t.Errorf("the turn is listed as workflowName %q agent %q wire %q; want %q", turn.WorkflowName, turn.Agent, turn.Wire, "helper (openai)")
	}
	for _, r := range list("?workflow=ping") {
		if r.WorkflowName != "ping" {
			t.Errorf("workflow=ping lists %q (%s)", r.WorkflowName, r.Trigger)
		}
	}
	if got := list("?agent=helper"); len(got) != 1 || got[0].RunID != turn.RunID {
		t.Errorf("agent=helper lists %+v; want the turn alone", got)
	}
	out, _, code := cli(t, dir, baseEnv(), "runs", "list")
	if code != 0 || !strings.Contains(out, turn.RunID+"  helper (openai)") {
		t.Errorf("svc runs list = %d:\n%s\nwant the turn named helper (openai)", code, out)
	}
	out, _, code = cli(t, dir, baseEnv(), "runs", "get", turn.RunID)
	if code != 0 || !strings.Contains(out, "agent     helper (openai, session s1)") {
		t.Errorf("svc runs get = %d:\n%s\nwant agent helper (openai, session s1)", code, out)
	}
}
