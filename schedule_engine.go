package main

// Workflow schedules (issue 21): `export const schedule = "0 9 * * 1-5"` or
// { cron, timezone, overlap, catchUp, dst }. The scheduler reads the
// catalog's schedules on every tick of its clock (injected: tests move a
// fake one) and starts each fire as a run with trigger "schedule". A fire
// is recorded in the start's own journal event (its Fire), with an
// idempotency key of workflow and fire time, so it is durable exactly when
// its start is, on either store, and replay rebuilds each schedule's last
// fire: a fire happens once across restarts, and a replica that takes
// over the engine's lease sees the fires of the one before. Pausing,
// resuming, arming a schedule and skipping a fire are evSchedule events.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// evSchedule changes a schedule's state: Status is one of the
// scheduleEv* values, Fire the instant it concerns (on the scheduler's
// clock), Name the declaration a schedule was armed with.
const evSchedule = "schedule"

// The changes evSchedule records.
const (
	scheduleEvArmed   = "armed"   // the schedule (Name) counts its fires from Fire on
	scheduleEvSkipped = "skipped" // the fire at Fire did not start a run (overlap skip, catchUp none)
	scheduleEvPaused  = "paused"  // no fire until resumed
	scheduleEvResumed = "resumed" // fires after Fire count again; those while paused never do
)

// The overlap policies: what a fire does while a run of an earlier fire is
// active.
const (
	scheduleOverlapSkip  = "skip"  // the fire is skipped
	scheduleOverlapQueue = "queue" // the fire waits for the active run to end
	scheduleOverlapAllow = "allow" // the fire starts a run beside it
)

// The catch-up policies: what fires missed while svc was not running do.
const (
	scheduleCatchUpLatest = "latest" // one run, for the latest of them
	scheduleCatchUpNone   = "none"   // nothing
)

// scheduleTick is how often the scheduler looks at its clock.
const scheduleTick = time.Second

// scheduleNextFires is how many upcoming fires a schedule lists.
const scheduleNextFires = 3

// scheduleDecl is a workflow's schedule declaration, validated.
type scheduleDecl struct {
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Overlap  string `json:"overlap"`
	CatchUp  string `json:"catchUp"`
	DST      string `json:"dst"`
	cron     *scheduleCron
}

// parseScheduleDecl reads the JSON of a schedule export: a cron string or
// an object of options, with their defaults filled in.
func parseScheduleDecl(raw json.RawMessage) (*scheduleDecl, error) {
	d := &scheduleDecl{}
	if err := json.Unmarshal(raw, &d.Cron); err != nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(d); err != nil {
			return nil, fmt.Errorf("want a cron string such as \"0 9 * * 1-5\" or an object { cron, timezone, overlap, catchUp, dst }: %v", err)
		}
	}
	if d.Cron == "" {
		return nil, fmt.Errorf("cron is missing: want %s", scheduleCronSyntax)
	}
	d.Timezone = scheduleDefault(d.Timezone, "UTC")
	d.Overlap = scheduleDefault(d.Overlap, scheduleOverlapSkip)
	d.CatchUp = scheduleDefault(d.CatchUp, scheduleCatchUpLatest)
	d.DST = scheduleDefault(d.DST, scheduleDSTOnce)
	for _, o := range []struct{ name, value, want string }{
		{"overlap", d.Overlap, scheduleOverlapSkip + ", " + scheduleOverlapQueue + " or " + scheduleOverlapAllow},
		{"catchUp", d.CatchUp, scheduleCatchUpLatest + " or " + scheduleCatchUpNone},
		{"dst", d.DST, scheduleDSTOnce + " or " + scheduleDSTSkip},
	} {
		if !strings.Contains(", "+strings.ReplaceAll(o.want, " or ", ", ")+",", ", "+o.value+",") {
			return nil, fmt.Errorf("%s %q: want %s", o.name, o.value, o.want)
		}
	}
	if d.Timezone == "Local" {
		return nil, errors.New(`timezone "Local" depends on the machine: name an IANA zone such as "Europe/Paris" or "UTC"`)
	}
	loc, err := time.LoadLocation(d.Timezone)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not an IANA time zone: want a name such as \"America/New_York\", \"Europe/Paris\" or \"UTC\"", d.Timezone)
	}
	if d.cron, err = parseScheduleCron(d.Cron, loc, d.DST); err != nil {
		return nil, fmt.Errorf("cron %v", err)
	}
	return d, nil
}

// scheduleDefault returns v, or def when v is empty.
func scheduleDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// spec is what a schedule's fires depend on: a schedule armed with another
// spec counts its fires afresh.
func (d *scheduleDecl) spec() string { return d.Cron + " " + d.Timezone + " dst=" + d.DST }

// inspectSchedule reads a workflow's `schedule` export v into wf: a bad
// declaration fails the workflow's compilation, naming what is accepted.
// A scheduled run's input is {}, so the inputSchema must accept it.
func inspectSchedule(vm *goja.Runtime, v goja.Value, wf *workflowDef) error {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return nil
	}
	raw, err := jsonStringify(vm, v)
	if err == nil {
		wf.Schedule, err = parseScheduleDecl(raw)
	}
	if err == nil && wf.input != nil {
		if violations, _ := wf.input.validateJSON([]byte("{}")); len(violations) > 0 {
			err = fmt.Errorf("a scheduled run's input is {}, which its inputSchema refuses (%s: %s): make those properties optional", orRoot(violations[0].Path), violations[0].Message)
		}
	}
	if err != nil {
		return &compileError{File: wf.File, Message: fmt.Sprintf("workflow %s: export const schedule: %v", wf.Name, err)}
	}
	return nil
}

// scheduleState is a schedule's durable state in the engine.
type scheduleState struct {
	Spec        string    `json:"spec,omitempty"` // the declaration it was armed with (scheduleDecl.spec)
	Armed       time.Time `json:"armed"`          // fires count from here
	LastFire    time.Time `json:"lastFire"`       // the latest fire handled: started, queued or skipped
	LastRun     string    `json:"lastRun,omitempty"`
	LastRunFire time.Time `json:"lastRunFire"` // the fire LastRun was started for
	Paused      bool      `json:"paused,omitempty"`
	Resumed     time.Time `json:"resumed"` // fires up to here were paused
}

// after is the instant after which the schedule's fires are due.
func (s scheduleState) after() time.Time {
	t := s.Armed
	for _, x := range []time.Time{s.LastFire, s.Resumed} {
		if x.After(t) {
			t = x
		}
	}
	return t
}

// scheduleStateLocked returns workflow's schedule state, created when
// missing. mu must be held.
func (e *engine) scheduleStateLocked(workflow string) *scheduleState {
	if e.st.Schedules == nil {
		e.st.Schedules = map[string]*scheduleState{}
	}
	s := e.st.Schedules[workflow]
	if s == nil {
		s = &scheduleState{}
		e.st.Schedules[workflow] = s
	}
	return s
}

// registerSchedules hangs schedules off the engine (engine_hooks.go): a
// schedule's own events, and the fire a start or queued start carries
// (after the queue took the queued start: engineFeatures' order).
func (e *engine) registerSchedules() {
	e.on(engineHook{apply: e.applySchedule}, evSchedule)
	e.on(engineHook{apply: e.applyScheduleFire}, evStart, evQueue)
}

// applySchedule applies an evSchedule event. mu must be held.
func (e *engine) applySchedule(ev *journalEvent, _ time.Time) []func() {
	s, at := e.scheduleStateLocked(ev.Workflow), micros(ev.Fire)
	switch ev.Status {
	case scheduleEvArmed:
		s.Spec, s.Armed = ev.Name, at
	case scheduleEvSkipped:
		if at.After(s.LastFire) {
			s.LastFire = at
		}
	case scheduleEvPaused:
		s.Paused = true
	case scheduleEvResumed:
		s.Paused, s.Resumed = false, at
	}
	return nil
}

// applyScheduleFire records the fire a start or queue event carries: on
// its run or queued entry, and as its schedule's last fire. mu must be
// held.
func (e *engine) applyScheduleFire(ev *journalEvent, _ time.Time) []func() {
	if ev.Fire == 0 {
		return nil
	}
	fire := micros(ev.Fire)
	id := ev.Run
	if r := e.st.Runs[ev.Run]; r != nil && ev.Type == evStart {
		r.ScheduledAt = &fire
	} else if q := e.st.Queues[concurrencyBucket(ev.Workflow, ev.Key)]; ev.Type == evQueue && len(q) > 0 {
		q[len(q)-1].ScheduledAt, id = &fire, ev.Queue
	}
	s := e.scheduleStateLocked(ev.Workflow)
	if fire.After(s.LastFire) {
		s.LastFire = fire
	}
	if !fire.Before(s.LastRunFire) {
		s.LastRun, s.LastRunFire = id, fire
	}
	return nil
}

// scheduleMicros is the Fire of an event for t: 0 for the zero time.
func scheduleMicros(t *time.Time) int64 {
	if t == nil || t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// scheduleSnapshot returns a copy of workflow's schedule state.
func (e *engine) scheduleSnapshot(workflow string) (scheduleState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.st.Schedules[workflow]; s != nil {
		return *s, true
	}
	return scheduleState{}, false
}

// scheduleActive reports whether a run or queued entry started by a fire of
// workflow has not ended.
func (e *engine) scheduleActive(workflow string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.st.Runs {
		if r.WorkflowName == workflow && r.Trigger == triggerSchedule && !terminal(r.Status) {
			return true
		}
	}
	for _, q := range e.st.Queues {
		for _, t := range q {
			if t.WorkflowName == workflow && t.Trigger == triggerSchedule {
				return true
			}
		}
	}
	return false
}

// recordSchedule durably records a change of workflow's schedule.
func (e *engine) recordSchedule(workflow, status, spec string, at time.Time) error {
	e.mu.Lock()
	return e.commitLocked(&journalEvent{Type: evSchedule, Workflow: workflow, Status: status, Name: spec, Fire: at.UnixMicro()}, true)
}

// scheduleIdemKey is the idempotency key of workflow's fire at fire: a
// second start of the same fire answers the first one's receipt. It is a
// hash, so any workflow name makes a valid key.
func scheduleIdemKey(workflow string, fire time.Time) string {
	sum := sha256.Sum256([]byte(workflow + "@" + fire.UTC().Format(time.RFC3339Nano)))
	return "schedule:" + hex.EncodeToString(sum[:])
}

// scheduler starts the fires of the catalog's schedules. A workflow's
// schedule lives in one partition (schedulePartition): the replica that
// owns it fires it, and the others forward pauses and reads to it.
type scheduler struct {
	f    *fleet
	now  func() time.Time // the scheduler's clock
	boot time.Time        // fires before this were missed while svc was down
	log  *slog.Logger

	mu     sync.Mutex        // serializes ticks with pause and resume
	said   map[string]string // workflow → the last failure logged, said once
	stop   chan struct{}
	done   chan struct{}
	closer sync.Once
}

// newScheduler returns a scheduler of f on the clock now; run starts it.
func newScheduler(f *fleet, now func() time.Time) *scheduler {
	s := &scheduler{f: f, now: now, boot: now(), log: f.log, said: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	f.sched = s
	return s
}

// schedulePartition is the partition of def's schedule: its queue's when
// it has a limit (a fire input is {}), so held fires queue where its other
// starts do.
func (s *scheduler) schedulePartition(def *workflowDef) int {
	bucket, ok := limitBucket(def, nil)
	if !ok {
		bucket = concurrencyBucket(def.Name, "")
	}
	return hashPartition(bucket, s.f.parts)
}

// run ticks every interval until close.
func (s *scheduler) run(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.tick()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// close stops a running scheduler and waits for its tick to end.
func (s *scheduler) close() {
	s.closer.Do(func() {
		close(s.stop)
		<-s.done
	})
}

// scheduled returns the workflows of the current catalog that declare a
// schedule, by name.
func (s *scheduler) scheduled() []*workflowDef {
	cat := s.f.opts.Catalog()
	if cat == nil {
		return nil
	}
	var defs []*workflowDef
	for _, name := range cat.workflowNames() {
		if def := cat.Workflows[name]; def.Schedule != nil {
			defs = append(defs, def)
		}
	}
	return defs
}

// tick handles every schedule's due fire at the clock's now.
func (s *scheduler) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, def := range s.scheduled() {
		e := s.f.held(s.schedulePartition(def))
		if e == nil {
			continue // another replica owns it
		}
		err := s.handle(e, def, now)
		if msg := fmt.Sprint(err); err != nil && s.said[def.Name] != msg {
			s.log.Warn("schedule", "workflow", def.Name, "err", err)
			s.said[def.Name] = msg
		} else if err == nil {
			delete(s.said, def.Name)
		}
	}
}

// handle arms def's schedule, in e, when its declaration is new, then
// starts, skips or holds its due fire: the latest one not yet handled. mu
// must be held.
func (s *scheduler) handle(e *engine, def *workflowDef, now time.Time) error {
	d := def.Schedule
	st, ok := e.scheduleSnapshot(def.Name)
	if !ok || st.Spec != d.spec() {
		if err := e.recordSchedule(def.Name, scheduleEvArmed, d.spec(), now); err != nil {
			return err
		}
		st, _ = e.scheduleSnapshot(def.Name)
	}
	after := st.after()
	if st.Paused {
		return nil
	}
	if next := d.cron.next(after); next.IsZero() || next.After(now) {
		return nil
	}
	fire, ok := d.cron.latest(after, now)
	if !ok {
		return nil
	}
	if d.CatchUp == scheduleCatchUpNone && fire.Before(s.boot) {
		return e.recordSchedule(def.Name, scheduleEvSkipped, "", fire)
	}
	if d.Overlap != scheduleOverlapAllow && e.scheduleActive(def.Name) {
		if d.Overlap == scheduleOverlapQueue {
			return nil // held until the active run ends
		}
		s.log.Info("schedule fire skipped: a run of an earlier fire is active", "workflow", def.Name, "fire", fire)
		return e.recordSchedule(def.Name, scheduleEvSkipped, "", fire)
	}
	rc, err := e.start(startRequest{Workflow: def.Name, Input: json.RawMessage("{}"), Trigger: triggerSchedule,
		IdemKey: scheduleIdemKey(def.Name, fire), Fire: fire})
	if err != nil {
		return err
	}
	s.log.Debug("schedule fired", "workflow", def.Name, "fire", fire, "run", rc.RunID+rc.QueueID)
	return nil
}

// errScheduleNotFound is the failure of naming a workflow without a
// schedule.
var errScheduleNotFound = errors.New("schedule not found")

// scheduleItem is a schedule as `svc schedules list` shows it.
type scheduleItem struct {
	Workflow  string           `json:"workflow"`
	Cron      string           `json:"cron"`
	Timezone  string           `json:"timezone"`
	Overlap   string           `json:"overlap"`
	CatchUp   string           `json:"catchUp"`
	DST       string           `json:"dst"`
	Paused    bool             `json:"paused"`
	NextFires []time.Time      `json:"nextFires"` // in the schedule's zone; none while paused
	LastFire  *time.Time       `json:"lastFire,omitempty"`
	LastRun   *scheduleLastRun `json:"lastRun,omitempty"`
}

// scheduleLastRun is the run of a schedule's last started fire.
type scheduleLastRun struct {
	RunID       string    `json:"runId"`
	ScheduledAt time.Time `json:"scheduledAt"`
	Status      string    `json:"status,omitempty"` // "" when the run history cannot be read
}

// list returns every schedule of the catalog, by workflow.
func (s *scheduler) list(ctx context.Context) []scheduleItem {
	items := []scheduleItem{}
	for _, def := range s.scheduled() {
		it, err := s.at(ctx, def, nil)
		if err != nil {
			s.log.Warn("read a schedule's state from the replica that holds it; shown without it", "workflow", def.Name, "err", err)
			it = s.item(ctx, nil, def)
		}
		items = append(items, it)
	}
	return items
}

// at describes def's schedule, pausing or resuming it first when paused
// says so, where it lives: here, or on the replica that holds its
// partition.
func (s *scheduler) at(ctx context.Context, def *workflowDef, paused *bool) (scheduleItem, error) {
	p := s.schedulePartition(def)
	a := fleetScheduleArgs{Workflow: def.Name, Paused: paused}
	if e := s.f.engineFor(ctx, p); e != nil {
		return s.serveLocal(ctx, e, a)
	}
	var it scheduleItem
	err := s.f.m.call(ctx, p, fleetOpSchedule, a, &it)
	return it, err
}

// item describes def's schedule, as e holds it (nil: its declaration
// only), at the clock's now.
func (s *scheduler) item(ctx context.Context, e *engine, def *workflowDef) scheduleItem {
	d := def.Schedule
	it := scheduleItem{Workflow: def.Name, Cron: d.Cron, Timezone: d.Timezone, Overlap: d.Overlap, CatchUp: d.CatchUp, DST: d.DST, NextFires: []time.Time{}}
	var st scheduleState
	if e != nil {
		st, _ = e.scheduleSnapshot(def.Name)
	}
	it.Paused = st.Paused
	loc := d.cron.loc
	if !st.Paused {
		at := s.now()
		if after := st.after(); after.After(at) {
			at = after
		}
		for range scheduleNextFires {
			if at = d.cron.next(at); at.IsZero() {
				break
			}
			it.NextFires = append(it.NextFires, at.In(loc))
		}
	}
	if !st.LastFire.IsZero() {
		last := st.LastFire.In(loc)
		it.LastFire = &last
	}
	if st.LastRun != "" {
		it.LastRun = &scheduleLastRun{RunID: st.LastRun, ScheduledAt: st.LastRunFire.In(loc)}
		if isQueueID(st.LastRun) {
			if r, ok := e.findQueued(st.LastRun); ok {
				it.LastRun.RunID, it.LastRun.Status = r.RunID, r.Status
			}
		} else if r, ok, err := e.find(ctx, st.LastRun); err == nil && ok {
			it.LastRun.Status = r.Status
		}
	}
	return it
}

// setPaused pauses or resumes workflow's schedule, durably, and returns it.
// Resuming drops the fires of the pause: the next fire is the first after
// now. Pausing a paused schedule (or resuming a running one) records
// nothing.
func (s *scheduler) setPaused(ctx context.Context, workflow string, paused bool) (scheduleItem, error) {
	def := s.declared(workflow)
	if def == nil {
		return scheduleItem{}, fmt.Errorf("%w: workflow %q declares no schedule (or is not compiled)", errScheduleNotFound, workflow)
	}
	return s.at(ctx, def, &paused)
}

// declared returns workflow's definition when it declares a schedule.
func (s *scheduler) declared(workflow string) *workflowDef {
	for _, d := range s.scheduled() {
		if d.Name == workflow {
			return d
		}
	}
	return nil
}

// serveLocal describes a schedule e holds, pausing or resuming it first
// when a.Paused says so: for this replica, or for another that asked.
func (s *scheduler) serveLocal(ctx context.Context, e *engine, a fleetScheduleArgs) (scheduleItem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	def := s.declared(a.Workflow)
	if def == nil {
		return scheduleItem{}, fmt.Errorf("%w: workflow %q declares no schedule (or is not compiled)", errScheduleNotFound, a.Workflow)
	}
	if st, _ := e.scheduleSnapshot(a.Workflow); a.Paused != nil && st.Paused != *a.Paused {
		status := scheduleEvResumed
		if *a.Paused {
			status = scheduleEvPaused
		}
		if err := e.recordSchedule(a.Workflow, status, "", s.now()); err != nil {
			return scheduleItem{}, err
		}
	}
	return s.item(ctx, e, def), nil
}
