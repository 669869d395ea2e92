package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// scheduleWorkflows are the scheduled workflows of the scheduler tests:
// each fires every minute; those that sleep stay active until cancelled.
var scheduleWorkflows = map[string]string{
	"workflows/tick.workflow.ts": `export const schedule = "* * * * *";
export default async function tick() { "use workflow"; return 1; }`,
	"workflows/nocatch.workflow.ts": `export const schedule = { cron: "* * * * *", catchUp: "none" };
export default async function nocatch() { "use workflow"; return 1; }`,
	"workflows/skipper.workflow.ts": `import { sleep } from "svc";
export const schedule = { cron: "* * * * *", overlap: "skip" };
export default async function skipper() { "use workflow"; await sleep("1h"); return 1; }`,
	"workflows/holder.workflow.ts": `import { sleep } from "svc";
export const schedule = { cron: "* * * * *", overlap: "queue" };
export default async function holder() { "use workflow"; await sleep("1h"); return 1; }`,
	"workflows/allower.workflow.ts": `import { sleep } from "svc";
export const schedule = { cron: "* * * * *", overlap: "allow", timezone: "Europe/Paris" };
export default async function allower() { "use workflow"; await sleep("1h"); return 1; }`,
}

// scheduleTestEngine is a test engine whose catalog also holds the
// scheduled workflows, and a fake clock for its schedulers.
type scheduleTestEngine struct {
	*testEngine
	now time.Time
}

// newScheduleTestEngine opens a test engine on store with the scheduled
// workflows, its clock at now.
func newScheduleTestEngine(t *testing.T, store, now string) *scheduleTestEngine {
	te := newTestEngineOn(t, store)
	for f, src := range scheduleWorkflows {
		writeFile(t, te.dir, f, src)
	}
	cat, cerr := compileCatalog(te.dir, discardLogger())
	if cerr != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", cerr, cat.Failed)
	}
	te.cat = cat
	return &scheduleTestEngine{testEngine: te, now: mustTime(t, now)}
}

// scheduler returns a scheduler of the engine as it is now (a new one
// stands for a process that has just started), on the fake clock.
func (se *scheduleTestEngine) scheduler() *scheduler {
	return newScheduler(soloFleet(se.engine), func() time.Time { return se.now })
}

// at moves the fake clock to the time of day hh:mm:ss of its day.
func (se *scheduleTestEngine) at(t *testing.T, clock string) {
	t.Helper()
	d, err := time.Parse("15:04:05", clock)
	if err != nil {
		t.Fatal(err)
	}
	y, m, day := se.now.Date()
	se.now = time.Date(y, m, day, d.Hour(), d.Minute(), d.Second(), 0, time.UTC)
}

// fires returns the scheduled times of workflow's runs and queued entries,
// "15:04" each, oldest first; runs must have trigger schedule.
func (se *scheduleTestEngine) fires(t *testing.T, workflow string) []string {
	t.Helper()
	runs, queued := se.list()
	var out []string
	add := func(trigger string, at *time.Time, id string) {
		if trigger != triggerSchedule || at == nil {
			t.Fatalf("run %s of %s: trigger %q, scheduledAt %v; want a scheduled run", id, workflow, trigger, at)
		}
		out = append(out, at.UTC().Format("15:04"))
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if r := runs[i]; r.WorkflowName == workflow {
			add(r.Trigger, r.ScheduledAt, r.RunID)
		}
	}
	for _, q := range queued {
		if q.WorkflowName == workflow {
			add(q.Trigger, q.ScheduledAt, q.QueueID)
		}
	}
	return out
}

// expectFires fails unless workflow's fires are want, in order.
func (se *scheduleTestEngine) expectFires(t *testing.T, when, workflow string, want ...string) {
	t.Helper()
	if got := se.fires(t, workflow); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s: fires of %s = %v; want %v", when, workflow, got, want)
	}
}

// TestScheduleFiresOnce: on a fake clock, on both stores, a schedule fires
// once per minute as a run with trigger schedule and its scheduled time;
// ticking again, restarting (also from a snapshot) and restarting with the
// clock moved back never fire a minute twice; after downtime catchUp
// latest starts one run for the missed fires and catchUp none none; a
// pause survives a restart and drops the fires it spans.
func TestScheduleFiresOnce(t *testing.T) { eachEngineStore(t, testScheduleFiresOnce) }

// testScheduleFiresOnce is TestScheduleFiresOnce on one store.
func testScheduleFiresOnce(t *testing.T, store string) {
	se := newScheduleTestEngine(t, store, "2026-03-02T09:00:30Z")
	s := se.scheduler()
	s.tick() // arms every schedule at 09:00:30: nothing is due
	se.expectFires(t, "armed", "tick")
	se.at(t, "09:01:05")
	s.tick()
	s.tick()
	se.expectFires(t, "first fire", "tick", "09:01")
	se.expectFires(t, "first fire", "nocatch", "09:01")

	restart := func() {
		t.Helper()
		se.close()
		se.open(t)
		s = se.scheduler()
	}
	restart()
	s.tick()
	se.expectFires(t, "after a restart", "tick", "09:01")
	se.at(t, "09:00:50") // a clock moved back passes 09:01 again
	restart()
	s.tick()
	se.at(t, "09:01:30")
	s.tick()
	se.expectFires(t, "after the clock went back", "tick", "09:01")

	se.at(t, "09:05:30") // down from 09:01:30 to 09:05:30: 09:02 to 09:05 were missed
	restart()
	s.tick()
	s.tick()
	se.expectFires(t, "catch-up latest", "tick", "09:01", "09:05")
	se.expectFires(t, "catch-up none", "nocatch", "09:01")
	se.at(t, "09:06:00")
	s.tick()
	se.expectFires(t, "after catch-up", "nocatch", "09:01", "09:06")

	ctx := context.Background()
	if it, err := s.setPaused(ctx, "tick", true); err != nil || !it.Paused || len(it.NextFires) != 0 {
		t.Fatalf("pause = %+v %v", it, err)
	}
	se.at(t, "09:07:10")
	s.tick()
	se.compactBytes = 1 // the next restart's first record compacts: the pause must be in the snapshot
	restart()
	se.startWait(t, "echo", `{}`)
	se.compactBytes = 0
	restart()
	s.tick()
	se.expectFires(t, "paused", "tick", "09:01", "09:05", "09:06")
	if items := s.list(ctx); len(items) != len(scheduleWorkflows) || items[4].Workflow != "tick" || !items[4].Paused {
		t.Fatalf("list after a restart = %+v; want tick paused", items)
	}
	se.at(t, "09:08:30")
	it, err := s.setPaused(ctx, "tick", false)
	if err != nil || it.Paused || len(it.NextFires) != scheduleNextFires || !it.NextFires[0].Equal(mustTime(t, "2026-03-02T09:09:00Z")) {
		t.Fatalf("resume = %+v %v; want the next fire at 09:09", it, err)
	}
	if it.LastRun == nil || !it.LastRun.ScheduledAt.Equal(mustTime(t, "2026-03-02T09:06:00Z")) || it.LastRun.Status != runCompleted {
		t.Errorf("resume: last run = %+v; want the completed run of 09:06", it.LastRun)
	}
	s.tick()
	se.expectFires(t, "resumed: the paused fires are dropped", "tick", "09:01", "09:05", "09:06")
	se.at(t, "09:09:00")
	s.tick()
	se.expectFires(t, "resumed", "tick", "09:01", "09:05", "09:06", "09:09")
	if _, err := s.setPaused(ctx, "echo", true); !errors.Is(err, errScheduleNotFound) {
		t.Errorf("pause of a workflow without a schedule = %v; want errScheduleNotFound", err)
	}
}

// TestScheduleOverlap: while a run of an earlier fire is active, overlap
// skip records the fire as handled and starts nothing, queue holds the
// latest fire until the run ends and then starts one run for it, allow
// starts a run beside it.
func TestScheduleOverlap(t *testing.T) {
	se := newScheduleTestEngine(t, engineKindFile, "2026-03-02T09:00:30Z")
	s := se.scheduler()
	s.tick()
	se.at(t, "09:01:00")
	s.tick()
	for _, wf := range []string{"skipper", "holder", "allower"} {
		se.expectFires(t, "first fire", wf, "09:01")
	}
	se.at(t, "09:02:00")
	s.tick()
	se.at(t, "09:03:00")
	s.tick()
	se.expectFires(t, "skip", "skipper", "09:01")
	if st, _ := se.scheduleSnapshot("skipper"); !st.LastFire.Equal(mustTime(t, "2026-03-02T09:03:00Z")) {
		t.Errorf("skip: last fire = %s; want 09:03 (skipped fires are handled)", st.LastFire)
	}
	se.expectFires(t, "queue", "holder", "09:01")
	se.expectFires(t, "allow", "allower", "09:01", "09:02", "09:03")

	runs, _ := se.list()
	for _, r := range runs {
		if r.WorkflowName == "holder" || r.WorkflowName == "skipper" {
			if _, err := se.cancelRun(r.RunID); err != nil {
				t.Fatal(err)
			}
		}
	}
	se.at(t, "09:03:20")
	s.tick()
	se.expectFires(t, "queue after the run ended", "holder", "09:01", "09:03")
	se.expectFires(t, "skip after the run ended", "skipper", "09:01")
	se.at(t, "09:04:00")
	s.tick()
	se.expectFires(t, "skip: the next fire", "skipper", "09:01", "09:04")
	se.expectFires(t, "queue: the next fire waits", "holder", "09:01", "09:03")
	if items := s.list(context.Background()); items[0].Workflow != "allower" || items[0].NextFires[0].Location().String() != "Europe/Paris" {
		t.Errorf("list: %+v; want allower's next fires in its zone", items[0])
	}
}

// TestScheduleFireIsIdempotent: a fire's start carries the key of its
// workflow and time, so a second start of the same fire (a replica that
// missed the first one's record) answers the first receipt and starts
// nothing.
func TestScheduleFireIsIdempotent(t *testing.T) {
	se := newScheduleTestEngine(t, engineKindFile, "2026-03-02T09:00:30Z")
	s := se.scheduler()
	s.tick()
	se.at(t, "09:01:00")
	s.tick()
	fire := mustTime(t, "2026-03-02T09:01:00Z")
	runs, _ := se.list()
	var first string
	for _, r := range runs {
		if r.WorkflowName == "tick" {
			first = r.RunID
		}
	}
	rc, err := se.start(startRequest{Workflow: "tick", Input: []byte("{}"), Trigger: triggerSchedule, IdemKey: scheduleIdemKey("tick", fire), Fire: fire})
	if err != nil || rc.RunID != first {
		t.Fatalf("second start of the 09:01 fire = %+v %v; want the receipt of run %s", rc, err, first)
	}
	se.expectFires(t, "second start", "tick", "09:01")
}

// TestScheduleReplicas: on the PostgreSQL engine, two replicas tick the
// same schedule at the same moments: every fire starts one run, whichever
// replica's start comes first in the log; when the first replica stops the
// second goes on from its fires (none twice).
func TestScheduleReplicas(t *testing.T) {
	se := newScheduleTestEngine(t, engineKindPostgres, "2026-03-02T09:00:30Z")
	s := se.scheduler()
	second, err := openEngine(engineOptions{Store: newEngineStorePG(se.pool, engineTestLease, discardLogger()),
		Catalog: func() *catalog { return se.cat }, Env: func() map[string]string { return nil }, Log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer second.close()
	s2 := newScheduler(soloFleet(second), func() time.Time { return se.now })
	s.tick()
	s2.tick()
	for _, at := range []string{"09:01:00", "09:01:30", "09:02:00"} {
		se.at(t, at)
		var wg sync.WaitGroup
		for _, x := range []*scheduler{s, s2} {
			wg.Add(1)
			go func() { defer wg.Done(); x.tick() }()
		}
		wg.Wait()
	}
	se.expectFires(t, "two replicas", "tick", "09:01", "09:02")
	se.close() // the first replica stops: the second goes on alone
	se.at(t, "09:03:00")
	s2.tick()
	se.engine = second
	se.expectFires(t, "after the first stopped", "tick", "09:01", "09:02", "09:03")
}

// TestScheduleDeclarationChecked: a bad schedule export fails its
// workflow's compilation with an error naming the workflow, the export and
// what it accepts; a good one compiles with its defaults.
func TestScheduleDeclarationChecked(t *testing.T) {
	dir := t.TempDir()
	for name, decl := range map[string]string{
		"badcron":  `"0 9 * * mon-fry"`,
		"badzone":  `{ cron: "@daily", timezone: "Moon/Base" }`,
		"badopt":   `{ cron: "@daily", overlap: "parallel" }`,
		"badinput": `"@hourly"; export const inputSchema = { type: "object", properties: { id: { type: "string" } }, required: ["id"] }`,
		"good":     `{ cron: "0 9 * * 1-5", timezone: "Europe/Paris" }`,
	} {
		writeFile(t, dir, "workflows/"+name+".workflow.ts", `export const schedule = `+decl+`;
export default async function `+name+`() { "use workflow"; return 1; }`)
	}
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil {
		t.Fatal(cerr)
	}
	for name, want := range map[string]string{
		"badcron":  "day of week",
		"badzone":  `timezone "Moon/Base" is not an IANA time zone`,
		"badopt":   "want skip, queue or allow",
		"badinput": "inputSchema refuses",
	} {
		err := cat.Failed[name]
		if err == nil || !strings.Contains(err.Error(), "workflow "+name+": export const schedule: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: compile error %v; want one naming the workflow, the export and %q", name, err, want)
		}
	}
	if g := cat.Workflows["good"]; g == nil || g.Schedule == nil || g.Schedule.Timezone != "Europe/Paris" || g.Schedule.Overlap != scheduleOverlapSkip {
		t.Errorf("good: %+v; want its schedule with the defaults", g)
	}
}
