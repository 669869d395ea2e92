package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	mrand "math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
)

// schedule starts an execution of the run unless one is under way (then it
// runs again afterwards) or the run is terminal. A run that waits holds no
// goroutine and no VM: only a timer (sleep) or an index entry (hook, child).
func (e *engine) schedule(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.st.Runs[id]
	if r == nil || terminal(r.Status) || e.closed || e.failed != nil || !e.owns(r) || r.settling {
		return
	}
	if !e.j.fresh() {
		// A shared log's lease is not surely held (a renewal is late, or
		// this process stalled): start nothing now, look again shortly. A
		// lease really lost fails the log, and recovery resumes every run.
		if t := e.timers[id]; t != nil {
			t.Stop()
		}
		e.timers[id] = time.AfterFunc(engineStaleRetry, func() { e.schedule(id) })
		return
	}
	if r.executing {
		r.rerun = true
		return
	}
	if t := e.timers[id]; t != nil {
		t.Stop()
		delete(e.timers, id)
	}
	r.executing = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		used := e.execute(ctx, r)
		cancel()
		e.mu.Lock()
		r.executing, r.cancel = false, nil
		again := r.rerun && !terminal(r.Status)
		r.rerun = false
		e.mu.Unlock()
		if used != nil {
			// The run holds nothing now: make the VM a later execution of
			// its workflow will take.
			e.warmWorkflowVM(used)
		}
		if again {
			e.schedule(id)
		}
	}()
}

// engineStaleRetry is how soon a run skipped for a lease not surely held is
// looked at again.
const engineStaleRetry = 250 * time.Millisecond

// execution is one pass of a run through its workflow function in a fresh
// VM: calls already in the journal are answered from it (replay), new ones
// are performed and journaled. It ends when the function settles or nothing
// but outside events (time, hooks, children) can move it (suspend).
type execution struct {
	e    *engine
	r    *runRecord
	def  *workflowDef
	vm   *goja.Runtime
	loop *jsLoop
	seq  int
	now  time.Time // the run's deterministic clock
	rng  *mrand.Rand
	ctx  context.Context // ends when the run is cancelled or the engine closes
	// nondet is set when a replayed call differs from the journal: the run
	// fails with it even if the workflow code caught the rejection.
	nondet error
	// logsJournaled is how many console lines of workflow code the run
	// held when the execution began, and logsSeen how many the code has
	// printed since: replay prints the same lines in the same order, so
	// only lines past logsJournaled are new.
	logsJournaled, logsSeen int
	// runaway is set by the watchdog (busy) that interrupted code that did
	// not yield within the engine's BusyLimit.
	runaway atomic.Bool
	busy    *time.Timer
	// inflight is the commit of the last record pipelined (pipelineLocked)
	// while a shared log may not have delivered it yet; guarded by e.mu.
	inflight engineCommit
	// guidance is the first "cannot be used in workflow code" error the
	// workflow code provoked (fetch, timers: js/workflow_prelude.js). A
	// package may catch it and throw its own ("Request timed out."), so a
	// failed run names it too (withGuidance).
	guidance string
}

// execute runs one execution of r and returns the workflow it ran (nil:
// none), whose VM pool the caller tops up once the run is let go.
func (e *engine) execute(ctx context.Context, r *runRecord) *workflowDef {
	def, err := e.defFor(r)
	if err != nil {
		e.log.Error("run waits: its workflow version cannot be loaded", "run", r.RunID, "workflow", r.WorkflowName, "version", r.Version, "err", err)
		return nil
	}
	if def == nil {
		if e.opts.Catalog() != nil {
			e.log.Warn("run waits for its workflow to compile", "run", r.RunID, "workflow", r.WorkflowName)
		}
		return nil
	}
	e.mu.Lock()
	if terminal(r.Status) { // cancelled between scheduling and now
		e.mu.Unlock()
		return nil
	}
	r.Status = runRunning
	logs := 0
	for _, l := range r.Logs {
		if l.Seq == 0 {
			logs++
		}
	}
	e.mu.Unlock()
	h := fnv.New64a()
	h.Write([]byte(r.RunID))
	x := &execution{e: e, r: r, def: def, now: r.CreatedAt, rng: mrand.New(mrand.NewPCG(h.Sum64(), 0x5356435f52554e)), ctx: ctx, logsJournaled: logs}
	out, err := x.run(ctx)
	e.mu.Lock()
	inflight := x.inflight // under mu: a step's log line may still come
	e.mu.Unlock()
	if inflight != nil {
		// The run's next execution replays what this one journaled: wait
		// until the shared log applied it (a failure fails the log).
		inflight.Wait()
	}
	if x.nondet != nil && !errors.Is(err, context.Canceled) {
		err = x.nondet
		e.log.Error("run failed: its replay made a different call than the journal holds", "run", r.RunID, "workflow", r.WorkflowName, "version", r.Version, "err", err)
	}
	e.mu.Lock()
	switch {
	case terminal(r.Status):
		e.mu.Unlock()
	case errors.Is(err, errLoopIdle):
		r.Status = runWaiting
		e.armTimerLocked(r)
		e.mu.Unlock()
	case errors.Is(err, context.Canceled):
		e.mu.Unlock() // engine closing or run cancelled: nothing to record
	case err != nil:
		e.commitLocked(&journalEvent{Type: evEnd, Run: r.RunID, Status: runFailed, Error: x.withGuidance(toRunError(err))}, true)
	default:
		ev := &journalEvent{Type: evEnd, Run: r.RunID, Status: runCompleted, Result: out}
		if lerr := codeJSON.check(out); lerr != nil {
			ev.Status, ev.Result, ev.Error = runFailed, nil, &runError{Name: "Error", Message: "the workflow's output cannot be journaled: " + lerr.Error()}
		}
		e.commitLocked(ev, true)
	}
	return def
}

// armTimerLocked sets a timer for the earliest unfinished sleep of r.
func (e *engine) armTimerLocked(r *runRecord) {
	var earliest time.Time
	for _, c := range r.Steps {
		if c.Kind == callSleep && c.Status == runWaiting && (earliest.IsZero() || c.Until.Before(earliest)) {
			earliest = *c.Until
		}
	}
	if earliest.IsZero() {
		return
	}
	id := r.RunID
	e.timers[id] = time.AfterFunc(time.Until(earliest), func() { e.schedule(id) })
}

// withGuidance adds to a failed run's error the guidance its workflow code
// provoked, when the error does not already say it: a package that caught
// "fetch cannot be used in workflow code" and threw "Connection error."
// must not hide where the call belongs.
func (x *execution) withGuidance(re *runError) *runError {
	if x.guidance != "" && !strings.Contains(re.Message, x.guidance) {
		re.Message += " (before that, the workflow code was told: " + x.guidance + ")"
	}
	return re
}

// toRunError converts an execution error into the run's error.
func toRunError(err error) *runError {
	var th *jsThrown
	if errors.As(err, &th) {
		return &runError{Name: th.name(), Message: th.Error(), Stack: th.stack()}
	}
	var ce *compileError
	if errors.As(err, &ce) {
		return &runError{Name: "Error", Message: ce.Error()}
	}
	return &runError{Name: "Error", Message: err.Error()}
}

// warmVMs is how many pre-warmed workflow VMs are kept per workflow.
const warmVMs = 4

// workflowVM is a fresh VM with a workflow module evaluated, made ahead of
// need so a run does not wait for it. Its ambient functions act for the
// execution bound to it; each is used by exactly one execution, so no state
// leaks from one run to another.
type workflowVM struct {
	vm      *goja.Runtime
	exports *goja.Object
	loop    *jsLoop
	x       *execution
	// evalRNG is Math.random and crypto.randomUUID of the module's
	// top-level code, which runs before an execution is bound (workflowVMOptions).
	evalRNG *mrand.Rand
}

// workflowEvalSeed seeds the randomness of a workflow module's top-level
// code (workflowVM.evalRNG).
const workflowEvalSeed = 0x5356435f4d4f44

// workflowVMOptions are the options of a workflow VM for w with the
// workflow platform of p (nil: the defaults): the deterministic prelude, the
// web platform's globals with I/O replaced by step guidance, and ambient
// functions that act for the execution bound to w. A module's top-level code
// runs before any execution is bound (ahead of time in a pre-warmed VM, and
// again on every replay), so it must see the same values every time: its
// clock reads the Unix epoch, its randomness comes from a fixed seed, and
// the durable calls (steps, sleep, hooks, children) throw saying to call
// them from the workflow function. The catalog evaluates files with the same
// options, so a file compiles exactly when its workflow VM can be made.
func workflowVMOptions(w *workflowVM, p *jsPlatform) vmOptions {
	w.evalRNG = mrand.New(mrand.NewPCG(workflowEvalSeed, workflowEvalSeed))
	bound := func(what string) *execution {
		if w.x == nil {
			panic(w.vm.NewTypeError(what + " cannot be called while the file is evaluated (top-level code): call it from the workflow function"))
		}
		return w.x
	}
	child := func(kind string) func(string, goja.Value, goja.Value) goja.Value {
		return func(name string, input, opts goja.Value) goja.Value {
			return bound("workflows."+kind).child(kind, name, input, opts)
		}
	}
	rng := func() *mrand.Rand {
		if w.x == nil {
			return w.evalRNG
		}
		return w.x.rng
	}
	return vmOptions{
		Workflow: true,
		Setup:    func(vm *goja.Runtime) { w.vm, w.loop = vm, newJSLoop(vm) },
		Install:  func(ambient *goja.Object) { p.installWorkflow(w.vm, ambient) },
		Ambient: map[string]any{
			"sleep":       func(d goja.Value) goja.Value { return bound("sleep").sleep(d) },
			"createHook":  func() (goja.Value, error) { return bound("createHook").createHook() },
			"getWritable": func() goja.Value { panic(w.vm.NewTypeError(errStreamInWorkflow.Error())) },
			"workflows":   map[string]any{"start": child(callStart), "startAndWait": child(callStartAndWait)},
		},
		Globals: map[string]any{
			"__svc_step": func(call goja.FunctionCall) goja.Value {
				name := call.Argument(0).String()
				return w.vm.ToValue(func(call goja.FunctionCall) goja.Value { return bound("step "+name).callStep(name, call.Arguments) })
			},
			"__svc_now": func() int64 {
				if w.x == nil {
					return 0
				}
				return w.x.now.UnixMilli()
			},
			"__svc_random": func() float64 { return rng().Float64() },
			"__svc_uuid":   func() string { return seededUUID(rng()) },
			"__svc_guidance": func(msg string) {
				if w.x != nil && w.x.guidance == "" {
					w.x.guidance = msg
				}
			},
		},
	}
}

// newWorkflowVM evaluates def's module in a deterministic workflow VM.
func (e *engine) newWorkflowVM(def *workflowDef) (*workflowVM, error) {
	w := &workflowVM{}
	log := e.log.With("workflow", def.Name)
	o := workflowVMOptions(w, e.opts.Platform)
	o.Console = func(level slog.Level, msg string) {
		// Workflow code is replayed: a line is logged and kept only
		// the first time the code prints it.
		if w.x == nil {
			return
		}
		if w.x.logsSeen++; w.x.logsSeen > w.x.logsJournaled {
			log.Log(context.Background(), level, msg)
			w.x.keepLog(level, msg, 0, "", 0)
		}
	}
	o.Env = e.opts.Env()
	o.Log = slog.New(slog.DiscardHandler) // the Console hook logs what is new
	_, exports, err := newModuleVM(def.Module, o)
	if err != nil {
		return nil, err
	}
	w.exports = exports
	return w, nil
}

// takeWorkflowVM returns a pre-warmed VM of def (or a new one) and warms
// its replacement in the background.
func (e *engine) takeWorkflowVM(def *workflowDef) (*workflowVM, error) {
	select {
	case w := <-def.vms:
		return w, nil
	default:
		return e.newWorkflowVM(def)
	}
}

// warmWorkflowVM makes a VM of def ahead of the next execution, unless
// enough are waiting. It runs after an execution, off its critical path.
func (e *engine) warmWorkflowVM(def *workflowDef) {
	if len(def.vms) >= cap(def.vms)/2 {
		return
	}
	// The run's end just woke its waiters (a long poll, a parent): let them
	// go first. Making a VM takes a few hundred µs of this goroutine's
	// time, and a waiter it readied would otherwise wait for it, or for an
	// idle thread to wake and take it over (about 85 µs here).
	runtime.Gosched()
	if w, err := e.newWorkflowVM(def); err == nil {
		select {
		case def.vms <- w:
		default:
		}
	}
}

// run binds a workflow VM, calls the workflow function with the run's
// input and drives the loop. It returns the output JSON, errLoopIdle to
// suspend, or the failure.
func (x *execution) run(ctx context.Context) (out json.RawMessage, err error) {
	defer func() {
		// goja raises an interrupt as a panic when it lands outside a JS
		// call; a cancelled run must not take the process down with it.
		if p := recover(); p != nil {
			switch {
			case x.runaway.Load():
				out, err = nil, x.runawayError()
			case ctx.Err() != nil:
				out, err = nil, context.Canceled
			default:
				panic(p)
			}
		}
	}()
	w, err := x.e.takeWorkflowVM(x.def)
	if err != nil {
		return nil, err
	}
	w.x, x.vm, x.loop = x, w.vm, w.loop
	input, err := jsonParse(w.vm, x.r.Input)
	if err != nil {
		return nil, err
	}
	// Read the export (an esbuild getter) before interrupts are armed: an
	// interrupt raised outside a JS call would panic instead of returning.
	fn := w.exports.Get(x.def.Export)
	stop := context.AfterFunc(ctx, func() { w.vm.Interrupt(context.Canceled) })
	defer stop()
	// Every stretch of workflow code runs under a watchdog: code that does
	// not yield within BusyLimit is interrupted and fails the run.
	x.busy = time.AfterFunc(time.Hour, func() { x.runaway.Store(true); w.vm.Interrupt(errWorkflowRunaway) })
	x.busy.Stop()
	x.loop.watch = func() func() {
		x.busy.Reset(x.e.opts.BusyLimit)
		return func() { x.busy.Stop() }
	}
	done := x.loop.watch()
	p := callAsync(w.vm, fn, input)
	done()
	v, err := x.loop.await(ctx, p)
	if x.runaway.Load() {
		return nil, x.runawayError()
	}
	if err != nil {
		var ie *goja.InterruptedError
		if errors.As(err, &ie) || ctx.Err() != nil {
			return nil, context.Canceled
		}
		return nil, err
	}
	return jsonStringify(w.vm, v)
}

// errWorkflowRunaway interrupts workflow code that did not yield in time.
var errWorkflowRunaway = errors.New("workflow code did not yield")

// runawayError is the run's failure when its workflow code did not yield.
func (x *execution) runawayError() error {
	return fmt.Errorf("workflow %s ran for more than %v without yielding (an endless loop?): workflow code only orchestrates; move computation into a step", x.def.Name, x.e.opts.BusyLimit)
}

// nextCall numbers the workflow's next durable call and returns the journal
// entry it replays, or nil when it is new. A replayed entry of another kind
// means the workflow code is not deterministic (or was edited mid-run).
func (x *execution) nextCall(kind, name string) (int, *durableCall, error) {
	x.seq++
	x.e.mu.Lock()
	defer x.e.mu.Unlock()
	c := x.r.call(x.seq)
	if c == nil || c.Kind == "" { // new, or in flight when the process stopped
		return x.seq, nil, nil
	}
	if c.Kind != kind || (name != "" && c.Name != name) {
		x.nondet = fmt.Errorf("%w: call %d was %s %q in the journal but is %s %q now", errNonDeterministic, x.seq, c.Kind, c.Name, kind, name)
		return x.seq, nil, x.nondet
	}
	cp := *c
	return x.seq, &cp, nil
}

// commit journals an event of this run (non-waiting: later durable records
// imply it is durable too). A step attempt's start and outcome and its log
// lines are pipelined (pipelineLocked): nothing here reads them back.
func (x *execution) commit(ev *journalEvent) {
	ev.Run = x.r.RunID
	x.e.mu.Lock()
	var err error
	switch ev.Type {
	case evAttempt, evStep, evLog:
		err = x.e.pipelineLocked(ev, &x.inflight)
	default:
		err = x.e.commitLocked(ev, false)
	}
	if err != nil && !errors.Is(err, errRunEnded) {
		x.e.log.Error("journal", "run", x.r.RunID, "err", err)
	}
}

// settled returns a promise already resolved with JSON or rejected with e.
func (x *execution) settled(result json.RawMessage, e *runError) goja.Value {
	p, resolve, reject := x.vm.NewPromise()
	if e != nil {
		reject(x.newError(e))
	} else if v, err := jsonParse(x.vm, result); err != nil {
		reject(err)
	} else {
		resolve(v)
	}
	return x.vm.ToValue(p)
}

// newError builds a JS Error (FatalError keeps its name) for e.
func (x *execution) newError(e *runError) goja.Value {
	o, _ := x.vm.New(x.vm.Get("Error"), x.vm.ToValue(e.Message))
	if e.Name != "" {
		o.Set("name", e.Name)
	}
	if e.Stack != "" { // a step's error keeps where the step threw
		o.Set("stack", e.Stack)
	}
	return o
}

// pending returns a promise that this execution never settles: the
// workflow waits on it and the loop goes idle, suspending the run.
func (x *execution) pending() goja.Value {
	p, _, _ := x.vm.NewPromise()
	return x.vm.ToValue(p)
}

// rejected returns a promise rejected with err (a workflow-visible error).
func (x *execution) rejected(err error) goja.Value {
	return x.settled(nil, &runError{Name: "Error", Message: err.Error()})
}

// advance moves the deterministic clock to t (never backwards).
func (x *execution) advance(t time.Time) {
	if t.After(x.now) {
		x.now = t
	}
}

// callStep is a call of a "use step" function in a workflow VM: answered
// from the journal on replay, performed and journaled otherwise.
func (x *execution) callStep(name string, arguments []goja.Value) goja.Value {
	seq, c, err := x.nextCall(callStep, name)
	if err != nil {
		return x.rejected(err)
	}
	if c != nil && c.EndedAt != nil {
		x.advance(*c.EndedAt)
		return x.settled(c.Result, c.Error)
	}
	args, err := jsonStringify(x.vm, x.vm.ToValue(arguments))
	if err != nil {
		return x.rejected(fmt.Errorf("step %s: arguments must be JSON-serialisable: %w", name, err))
	}
	attempt := 1
	if c != nil {
		attempt = len(c.Attempts) + 1
	}
	p, resolve, reject := x.vm.NewPromise()
	x.runStep(&stepAttemptState{seq: seq, name: name, args: args, attempt: attempt, resolve: resolve, reject: reject})
	return x.vm.ToValue(p)
}

// stepAttemptState is one attempt of a step in flight.
type stepAttemptState struct {
	seq             int
	name            string
	args            json.RawMessage
	attempt         int
	started         time.Time
	resolve, reject func(any) error
}

// runStep performs one attempt of a step in a step VM. A step that settles
// at once is handled inline; one that waits on I/O or timers finishes on
// another goroutine and hands its outcome back to the loop.
func (x *execution) runStep(st *stepAttemptState) {
	x.e.mu.Lock() // e.j changes on recovery
	stale := !x.e.j.fresh()
	if stale {
		// A shared log's lease is not surely held: this process may have
		// stalled mid-execution (past a sleep that came due meanwhile)
		// while another replica claimed the run. Start no step: the
		// attempt's promise stays pending, so the execution suspends, and
		// the run executes again once the lease is surely held (schedule
		// looks again shortly) or, if it was lost, recovery resumes it.
		x.r.rerun = true
	}
	x.e.mu.Unlock()
	if stale {
		return
	}
	st.started = time.Now()
	// A step that settles inline runs under its own timeout, not the
	// workflow's watchdog.
	paused := x.busy != nil && x.busy.Stop()
	seq, attempt := st.seq, st.attempt
	out := &stepOutputs{
		keep:  func(level slog.Level, msg string) { x.keepLog(level, msg, seq, st.name, attempt) },
		write: func(ch streamChunk) error { return x.e.streamWrite(x.r.RunID, seq, st.name, attempt, ch) },
	}
	trace := otelUserTrace{t: x.e.opts.Tracer, parent: otelStepContext(x.r, st.seq, st.attempt)}
	result, finish, err := x.e.steps.start(x.def, st.name, st.args, out, trace)
	if paused {
		x.busy.Reset(x.e.opts.BusyLimit)
	}
	if finish == nil {
		x.stepDone(st, result, err)
		return
	}
	// The attempt outlives this call: journal that it began, so a crash or
	// a shutdown during it is recorded as such at the next boot.
	x.commit(&journalEvent{Type: evAttempt, Seq: st.seq, Name: st.name, Attempt: st.attempt, StartedAt: st.started.UnixMicro()})
	x.loop.begin()
	x.e.wg.Add(1) // the engine waits for it on close; the run's ctx ends it
	go func() {
		defer x.e.wg.Done()
		result, err := finish(x.ctx)
		if x.ctx.Err() != nil {
			return // the execution is gone: nothing reads the loop any more
		}
		x.loop.post(func() { x.stepDone(st, result, err) })
	}()
}

// stepDone journals an attempt and settles the workflow's promise, or
// schedules a retry with exponential backoff. FatalError fails at once.
func (x *execution) stepDone(st *stepAttemptState, result json.RawMessage, err error) {
	x.e.log.Debug("step attempt", "run", x.r.RunID, "step", st.name, "attempt", st.attempt, "dur", time.Since(st.started).Round(time.Microsecond), "err", err)
	ev := &journalEvent{Type: evStep, Seq: st.seq, Name: st.name, Attempt: st.attempt, StartedAt: st.started.UnixMicro()}
	if err != nil {
		ev.Error = toRunError(err)
	} else if lerr := codeJSON.check(result); lerr != nil {
		ev.Error = &runError{Name: "FatalError", Message: fmt.Sprintf("step %s returned a value that cannot be journaled: %v", st.name, lerr)}
	}
	if ev.Error == nil {
		ev.Final, ev.Result = true, result
		x.commit(ev)
		x.advance(time.Now())
		if v, perr := jsonParse(x.vm, result); perr != nil {
			st.reject(perr)
		} else {
			st.resolve(v)
		}
		return
	}
	if ev.Error.Name == "FatalError" || st.attempt >= x.e.opts.MaxAttempts {
		ev.Final = true
		x.commit(ev)
		x.advance(time.Now())
		st.reject(x.newError(ev.Error))
		return
	}
	x.commit(ev)
	backoff := x.e.opts.RetryBase << (st.attempt - 1)
	st.attempt++
	x.loop.begin()
	time.AfterFunc(backoff, func() { x.loop.post(func() { x.runStep(st) }) })
}

// sleep is the ambient sleep(duration): a durable timer. The run suspends
// (no goroutine, no VM) until it is due.
func (x *execution) sleep(d goja.Value) goja.Value {
	dur, err := parseSleepDuration(d)
	if err != nil {
		return x.rejected(err)
	}
	seq, c, err := x.nextCall(callSleep, "")
	if err != nil {
		return x.rejected(err)
	}
	var until time.Time
	if c != nil {
		until = *c.Until
	} else {
		until = time.Now().Add(dur)
		x.commit(&journalEvent{Type: evSleep, Seq: seq, Until: until.UnixMicro()})
	}
	if time.Now().Before(until) {
		return x.pending()
	}
	x.e.mu.Lock()
	if live := x.r.call(seq); live != nil && live.Status == runWaiting {
		live.Status, live.EndedAt = runCompleted, &until
		x.e.otelSleepOverLocked(x.r, live)
	}
	x.e.mu.Unlock()
	x.advance(until)
	return x.settled(json.RawMessage("null"), nil)
}

// parseSleepDuration accepts a number of milliseconds or a string such as
// "500ms", "1s", "2m", "1h", "1d".
func parseSleepDuration(v goja.Value) (time.Duration, error) {
	switch d := v.Export().(type) {
	case int64:
		return time.Duration(d) * time.Millisecond, nil
	case float64:
		return time.Duration(d * float64(time.Millisecond)), nil
	case string:
		if n, ok := strings.CutSuffix(d, "d"); ok {
			days, err := strconv.ParseFloat(n, 64)
			if err == nil {
				return time.Duration(days * 24 * float64(time.Hour)), nil
			}
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur < 0 {
			return 0, fmt.Errorf("sleep(%q): want a duration such as \"1s\" or a number of milliseconds", d)
		}
		return dur, nil
	}
	return 0, fmt.Errorf("sleep: want a duration such as \"1s\" or a number of milliseconds")
}

// createHook is the ambient createHook(): it returns { token } that is also
// awaitable; awaiting it suspends the run until POST /api/hooks/{token}
// delivers a JSON payload.
func (x *execution) createHook() (goja.Value, error) {
	seq, c, err := x.nextCall(callHook, "")
	if err != nil {
		return nil, err
	}
	var token string
	var p goja.Value
	if c != nil {
		token = c.Token
	} else {
		b := make([]byte, 16)
		rand.Read(b)
		token = hookTokenPrefix + x.r.RunID + "_" + hex.EncodeToString(b)
		x.commit(&journalEvent{Type: evHook, Seq: seq, Token: token})
	}
	if c != nil && c.Status == runCompleted {
		x.advance(*c.EndedAt)
		p = x.settled(c.Result, nil)
	} else {
		p = x.pending()
	}
	hook := x.vm.NewObject()
	hook.Set("token", token)
	then, _ := goja.AssertFunction(p.ToObject(x.vm).Get("then"))
	hook.Set("then", func(call goja.FunctionCall) goja.Value {
		v, err := then(p, call.Arguments...)
		if err != nil {
			panic(err)
		}
		return v
	})
	return hook, nil
}

// child is the ambient workflows.start / workflows.startAndWait (kind).
// start resolves with the receipt; startAndWait with the child's output,
// suspending the parent (no goroutine, no VM) until the child ends. opts
// of start may carry an idempotencyKey (engine_idem.go).
func (x *execution) child(kind, name string, input, opts goja.Value) goja.Value {
	seq, c, err := x.nextCall(kind, name)
	if err != nil {
		return x.rejected(err)
	}
	key, err := childIdemKey(kind, opts)
	if err != nil {
		return x.rejected(err)
	}
	if c == nil {
		raw := json.RawMessage("{}")
		if input != nil && !goja.IsUndefined(input) {
			if raw, err = jsonStringify(x.vm, input); err != nil {
				return x.rejected(err)
			}
		}
		if err := x.e.startChild(startRequest{Workflow: name, Input: raw, Trigger: triggerWorkflow, ParentRun: x.r.RunID, ParentSeq: seq, ParentKind: kind, IdemKey: key}); err != nil {
			return x.rejected(err)
		}
		x.e.mu.Lock()
		cp := *x.r.call(seq)
		x.e.mu.Unlock()
		c = &cp
	}
	// The call settles with the receipt (start) or with the child's outcome
	// (startAndWait), both recorded on the call itself (events.go).
	if c.EndedAt == nil {
		return x.pending()
	}
	if kind == callStartAndWait {
		x.advance(*c.EndedAt)
	}
	return x.settled(c.Result, c.Error)
}

// childIdemKey reads the idempotencyKey of workflows.start's options
// (absent: ""); startAndWait takes none.
func childIdemKey(kind string, opts goja.Value) (string, error) {
	if opts == nil || goja.IsUndefined(opts) || goja.IsNull(opts) {
		return "", nil
	}
	o, ok := opts.(*goja.Object)
	if !ok || kind != callStart {
		return "", fmt.Errorf("workflows.%s takes no options here: workflows.start(name, input, { idempotencyKey: \"…\" }) is the one that does", kind)
	}
	v := o.Get("idempotencyKey")
	if v == nil || goja.IsUndefined(v) {
		return "", nil
	}
	key, ok := v.Export().(string)
	if !ok {
		return "", errors.New("workflows.start: idempotencyKey must be a string")
	}
	return key, nil
}

// keepLog journals a console line of the run: from workflow code (seq 0)
// or from attempt of step name at seq.
func (x *execution) keepLog(level slog.Level, msg string, seq int, name string, attempt int) {
	if len(msg) > runMaxLogMessage {
		msg = msg[:runMaxLogMessage]
	}
	x.commit(&journalEvent{Type: evLog, Seq: seq, Name: name, Attempt: attempt, Level: strings.ToLower(level.String()), Message: msg})
}

// seededUUID is the deterministic crypto.randomUUID() of workflow code: a
// version-4 UUID drawn from rng (the run's seeded generator).
func seededUUID(rng *mrand.Rand) string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rng.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rng.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
