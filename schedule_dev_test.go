package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestScheduleDev: a real `svc dev` whose workflow fires every minute, its
// scheduler clock moved by SVC_SCHEDULE_CLOCK_OFFSET to just before a
// minute so no test waits for wall time. Through the CLI: `svc schedules
// list --json` shows the fire's run; after SIGKILL and a restart whose
// clock has not reached the next minute the fire is not repeated (catch-up
// would start it again were it not durable) and the next one comes once;
// a pause survives SIGKILL; pause and resume answer over the CLI and MCP;
// an unknown schedule exits 4.
func TestScheduleDev(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	dir := projectDir(t)
	writeFile(t, dir, "workflows/minutely.workflow.ts", `export const schedule = { cron: "* * * * *", timezone: "America/New_York" };
export default async function minutely() { "use workflow"; return 1; }`)
	pg := testPostgresURL(t)
	env := baseEnv()
	// boot starts svc dev with its scheduler's clock at clock when it starts.
	boot := func(clock time.Time) *devProcess {
		t.Helper()
		offset := time.Until(clock).Round(time.Millisecond)
		defer func(start time.Time) { t.Logf("booted in %s", time.Since(start)) }(time.Now())
		return startDev(t, dir, baseEnv("SVC_DATABASE_URL="+pg, "OPENAI_API_KEY=sk", "SVC_SCHEDULE_CLOCK_OFFSET="+offset.String()))
	}
	// svcJSON runs a --json verb and decodes its envelope's data into out;
	// it returns the exit code and the error code.
	svcJSON := func(out any, args ...string) (int, string) {
		t.Helper()
		stdout, stderr, code := cli(t, dir, env, append([]string{"--json"}, args...)...)
		var e struct {
			OK    bool            `json:"ok"`
			Data  json.RawMessage `json:"data"`
			Error *envelopeError  `json:"error"`
		}
		if err := json.Unmarshal([]byte(stdout), &e); err != nil {
			t.Fatalf("svc %v: not an envelope: %q %q", args, stdout, stderr)
		}
		if !e.OK {
			return code, e.Error.Code
		}
		if err := json.Unmarshal(e.Data, out); err != nil {
			t.Fatalf("svc %v: %s: %v", args, e.Data, err)
		}
		return code, ""
	}
	schedule := func() scheduleItem {
		t.Helper()
		var out struct{ Items []scheduleItem }
		if code, ec := svcJSON(&out, "schedules", "list"); code != 0 || len(out.Items) != 1 || out.Items[0].Workflow != "minutely" {
			t.Fatalf("schedules list = exit %d %s %+v; want minutely's schedule", code, ec, out.Items)
		}
		return out.Items[0]
	}
	// waitRun waits (bounded) for the last run to be of a fire after
	// after, completed, and returns its fire.
	waitRun := func(after time.Time) time.Time {
		t.Helper()
		var last *scheduleLastRun
		eventually(t, 150*time.Second, "a scheduled run after "+after.String(), func() bool {
			last = schedule().LastRun
			return last != nil && last.ScheduledAt.After(after) && last.Status == runCompleted
		})
		t.Logf("fire %s", last.ScheduledAt)
		return last.ScheduledAt
	}

	d := boot(time.Now().Truncate(time.Minute).Add(45 * time.Second))
	first := waitRun(time.Time{})
	if it := schedule(); it.Timezone != "America/New_York" || it.Paused || len(it.NextFires) != scheduleNextFires || !it.NextFires[0].After(first) {
		t.Errorf("schedules list after the first fire = %+v", it)
	}
	d.kill()
	d = boot(first.Add(50 * time.Second))
	second := waitRun(first)
	var runs struct{ Items []runRecord }
	if code, ec := svcJSON(&runs, "runs", "list", "--workflow", "minutely"); code != 0 {
		t.Fatalf("runs list = %d %s", code, ec)
	}
	fires := map[string]int{}
	for _, r := range runs.Items {
		if r.Trigger != triggerSchedule || r.ScheduledAt == nil {
			t.Fatalf("run %+v: want trigger schedule with its scheduledAt", r)
		}
		fires[r.ScheduledAt.UTC().Format(time.RFC3339)]++
	}
	if want := map[string]int{first.UTC().Format(time.RFC3339): 1, second.UTC().Format(time.RFC3339): 1}; fmt.Sprint(fires) != fmt.Sprint(want) || !second.Equal(first.Add(time.Minute)) {
		t.Fatalf("runs by fire after a restart = %v; want %v (each fire once)", fires, want)
	}

	var paused struct{ Schedule scheduleItem }
	if code, ec := svcJSON(&paused, "schedules", "pause", "minutely"); code != 0 || !paused.Schedule.Paused {
		t.Fatalf("schedules pause = %d %s %+v", code, ec, paused.Schedule)
	}
	if got := mcpCallTool(t, d.url("/mcp"), "list_schedules", `{}`); !strings.Contains(got, `"paused":true`) {
		t.Errorf("MCP list_schedules = %s; want minutely paused", got)
	}
	d.kill()
	d = boot(second.Add(30 * time.Second))
	if it := schedule(); !it.Paused || len(it.NextFires) != 0 {
		t.Fatalf("after SIGKILL and a restart: %+v; want the schedule still paused", it)
	}
	if got := mcpCallTool(t, d.url("/mcp"), "resume_schedule", `{"workflow":"minutely"}`); !strings.Contains(got, `"paused":false`) {
		t.Fatalf("MCP resume_schedule = %s; want the schedule running", got)
	}
	if it := schedule(); it.Paused || len(it.NextFires) == 0 || !it.NextFires[0].After(second) {
		t.Errorf("after resume_schedule: %+v; want it running, the next fire after %s", it, second)
	}
	if got := mcpCallTool(t, d.url("/mcp"), "pause_schedule", `{"workflow":"nope"}`); !strings.Contains(got, "schedule_not_found") {
		t.Errorf("MCP pause_schedule of nope = %s; want schedule_not_found", got)
	}
	if code, ec := svcJSON(&paused, "schedules", "resume", "nope"); code != 4 || ec != "schedule_not_found" {
		t.Errorf("schedules resume nope = exit %d %s; want 4 schedule_not_found", code, ec)
	}
	if stdout, _, code := cli(t, dir, env, "schedules", "list"); code != 0 || !strings.Contains(stdout, "minutely") || !strings.Contains(stdout, "* * * * *") {
		t.Errorf("schedules list = %d %q", code, stdout)
	}
}

// mcpCallTool calls tool with args over POST /mcp at url (protocol
// 2025-11-25) and returns the answer's body.
func mcpCallTool(t *testing.T, url, tool, args string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+`}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcpHeaderVersion, mcpVersionLatest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
