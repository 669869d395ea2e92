package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Run states (DESIGN §3): queued → pending → running ⇄ waiting → completed | failed | cancelled.
const (
	runQueued    = "queued"
	runPending   = "pending"
	runRunning   = "running"
	runWaiting   = "waiting"
	runCompleted = "completed"
	runFailed    = "failed"
	runCancelled = "cancelled"
)

// Run triggers: how a run was started (the run row's vocabulary, not the route).
const (
	triggerHTTP     = "http"
	triggerCLI      = "cli"
	triggerWorkflow = "workflow"
	triggerAgent    = "agent"
	triggerSchedule = "schedule" // a fire of the workflow's schedule (schedule_engine.go)
)

// Durable call kinds of a run's timeline.
const (
	callStep         = "step"
	callSleep        = "sleep"
	callHook         = "hook"
	callStart        = "start"
	callStartAndWait = "startAndWait"
)

// terminal reports whether a run status is final.
func terminal(status string) bool {
	return status == runCompleted || status == runFailed || status == runCancelled
}

// runError is a failure carried by a run or a step.
type runError struct {
	Name    string `json:"name,omitempty"`
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"` // where user code threw, TypeScript file:line (source-mapped)
}

// runErrorMaxStack bounds the stack kept with an error.
const runErrorMaxStack = 8 << 10

// stepAttempt is one journaled attempt of a step.
type stepAttempt struct {
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt"`
	Error     *runError `json:"error,omitempty"`
}

// durableCall is one entry of a run's timeline: a step, a sleep, a hook or a
// child workflow, numbered by the order the workflow made them (Seq from 1).
// On replay the Nth call of the workflow receives the Nth entry's outcome.
type durableCall struct {
	Seq        int             `json:"seq"`
	Kind       string          `json:"kind"`
	Name       string          `json:"name,omitempty"` // step function or child workflow
	Status     string          `json:"status"`         // running, waiting, completed, failed
	Attempts   []stepAttempt   `json:"attempts,omitempty"`
	Inflight   *stepAttempt    `json:"inflight,omitempty"` // a step attempt begun and not yet ended
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *runError       `json:"error,omitempty"`
	Until      *time.Time      `json:"until,omitempty"`
	Token      string          `json:"token,omitempty"`
	ChildRunID string          `json:"childRunId,omitempty"`
	QueueID    string          `json:"queueId,omitempty"`
	StartedAt  time.Time       `json:"startedAt"`
	EndedAt    *time.Time      `json:"endedAt,omitempty"`
	DurationMs *float64        `json:"durationMs,omitempty"`
	// Reused marks a call a retry from a later step took, outcome and all,
	// from the run it reruns (engine_rerun.go): it did not run again.
	Reused bool `json:"reused,omitempty"`
	// An agent turn's calls (agent.go): a model call's figures; a tool
	// call's arguments, the approval that let it run or refused it, and
	// Handoff (approval or client) when the turn ended handing it over:
	// its outcome is in the session's next turn.
	Model     *modelCallInfo  `json:"model,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Approval  *callApproval   `json:"approval,omitempty"`
	Handoff   string          `json:"handoff,omitempty"`

	resumedBy string // the ID of the resume that settled a hook (engine_replica.go)
}

// runRecord is a durable run as the runs API shows it.
type runRecord struct {
	RunID          string          `json:"runId"`
	TraceID        string          `json:"traceId"`
	WorkflowName   string          `json:"workflowName"`
	Status         string          `json:"status"`
	Trigger        string          `json:"trigger"`
	Input          json.RawMessage `json:"input"`
	Output         json.RawMessage `json:"output,omitempty"`
	Error          *runError       `json:"error,omitempty"`
	Serial         bool            `json:"serial"`                     // admitted under concurrency limit 1 with no key (engine_concurrency.go)
	Limit          int             `json:"concurrencyLimit,omitempty"` // admitted under another limit
	LimitKey       string          `json:"concurrencyKey,omitempty"`   // its key value
	Version        string          `json:"version,omitempty"`          // the compiled workflow it runs (engine_versions.go)
	QueueID        string          `json:"queueId,omitempty"`
	ParentRunID    string          `json:"parentRunId,omitempty"`
	ParentSeq      int             `json:"parentSeq,omitempty"`
	RerunOf        string          `json:"rerunOf,omitempty"`        // run again / retry from a step: the run it reruns (engine_rerun.go)
	RetryFromStep  int             `json:"retryFromStep,omitempty"`  // retry from a step: the first call it ran again; the earlier ones are reused
	Reruns         []string        `json:"reruns,omitempty"`         // read-time only: the runs that rerun this one, newest first (GET /api/runs/{runId})
	TraceParent    string          `json:"traceParent,omitempty"`    // the W3C span its run span is the child of (otel_engine.go)
	Agent          string          `json:"agent,omitempty"`          // agent turns: the agent
	Wire           string          `json:"wire,omitempty"`           // agent turns: openai, openai-responses, anthropic or agui
	SessionID      string          `json:"sessionId,omitempty"`      // agent turns: durable session key
	ConversationID string          `json:"conversationId,omitempty"` // agent turns: grouping key
	ScheduledAt    *time.Time      `json:"scheduledAt,omitempty"`    // trigger schedule: the fire it was started for
	CreatedAt      time.Time       `json:"createdAt"`
	EndedAt        *time.Time      `json:"endedAt,omitempty"`
	Steps          []*durableCall  `json:"steps"`
	Logs           []runLog        `json:"logs,omitempty"`        // console.* of its workflow and step code
	LogsDropped    int             `json:"logsDropped,omitempty"` // lines past runMaxLogs
	Owner          string          `json:"owner,omitempty"`       // PostgreSQL engine: the replica that executes it ("" on the file journal, or released)

	executing bool       // an execution goroutine owns a VM for it
	settling  bool       // just claimed from another replica: not executed before its attempts in flight are settled (engine_replica.go)
	rerun     bool       // something happened while executing: run again
	done      *runSignal // fired when terminal; shared by copies of the record
	stream    *runStream // chunks its steps wrote (engine_stream.go); shared by copies of the record
	cancel    context.CancelFunc
}

// runLog is one console line of a run: from its workflow code (Step empty)
// or from an attempt of one of its steps.
type runLog struct {
	At      time.Time `json:"at"`
	Level   string    `json:"level"` // debug, info, warn, error
	Message string    `json:"message"`
	Step    string    `json:"step,omitempty"`
	Seq     int       `json:"seq,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
}

// Bounds of the console lines kept with a run.
const (
	runMaxLogs       = 1000
	runMaxLogMessage = 4 << 10
)

// runSignal is fired once when a run ends; waiters select on ch. Firing
// twice is harmless, so no path that ends a run can crash the process.
type runSignal struct {
	once sync.Once
	ch   chan struct{}
}

// newRunSignal returns an unfired signal.
func newRunSignal() *runSignal { return &runSignal{ch: make(chan struct{})} }

// fire wakes every waiter; later calls do nothing.
func (s *runSignal) fire() { s.once.Do(func() { close(s.ch) }) }

// call returns the timeline entry seq, or nil.
func (r *runRecord) call(seq int) *durableCall {
	if seq >= 1 && seq <= len(r.Steps) {
		return r.Steps[seq-1]
	}
	return nil
}

// ensureCall returns entry seq, creating it when missing. Calls run
// concurrently (Promise.all), so a later call can be journaled before an
// earlier one settles: the gap is filled with placeholders (no Kind) that
// the earlier call's own event completes.
func (r *runRecord) ensureCall(seq int, kind, name string, at time.Time) *durableCall {
	for len(r.Steps) < seq {
		r.Steps = append(r.Steps, &durableCall{Seq: len(r.Steps) + 1, Status: runRunning})
	}
	c := r.Steps[seq-1]
	if c.Kind == "" {
		c.Kind, c.Name, c.StartedAt = kind, name, at
	}
	return c
}

// queuedTrigger is a start of a limited workflow waiting for a free slot
// of its key (engine_concurrency.go).
type queuedTrigger struct {
	QueueID      string          `json:"queueId"`
	WorkflowName string          `json:"workflowName"`
	Input        json.RawMessage `json:"input"`
	Trigger      string          `json:"trigger"`
	ParentRunID  string          `json:"parentRunId,omitempty"`
	ParentSeq    int             `json:"parentSeq,omitempty"`
	ParentKind   string          `json:"parentKind,omitempty"`
	ScheduledAt  *time.Time      `json:"scheduledAt,omitempty"` // trigger schedule: the fire it was queued for
	TraceParent  string          `json:"traceParent,omitempty"`
	CreatedAt    time.Time       `json:"createdAt"`
	RerunOf      string          `json:"rerunOf,omitempty"`          // a rerun waiting for its turn: the run it reruns
	RetryFrom    int             `json:"retryFromStep,omitempty"`    // and the step it retries from
	Reuse        []*durableCall  `json:"reuse,omitempty"`            // and the calls its run will reuse
	Limit        int             `json:"concurrencyLimit,omitempty"` // the limit it waits under; 0: serial (limit 1, no key)
	LimitKey     string          `json:"concurrencyKey,omitempty"`   // its key value

	turn chan struct{} // made by waitTurn, closed when it leaves its queue (engine_queue.go)
}

// hookRef locates the run and call waiting on a hook token.
type hookRef struct {
	RunID string `json:"runId"`
	Seq   int    `json:"seq"`
}

// engineState is everything the journal rebuilds: it is also the snapshot
// written by compaction.
type engineState struct {
	Runs   map[string]*runRecord       `json:"runs"`
	Queues map[string][]*queuedTrigger `json:"queues"` // concurrencyBucket (the workflow, for no key) → FIFO
	Hooks  map[string]hookRef          `json:"hooks"`
	Idem   map[string]*idemEntry       `json:"idem,omitempty"`  // idempotency key → its start, within the retention (engine_idem.go)
	Clock  int64                       `json:"clock,omitempty"` // shared log: the latest event time applied, unix µs (apply)
	// Streams are the runs' streams, in a snapshot only (in memory each
	// run holds its own: engine_stream.go).
	Streams map[string][]streamEntry `json:"streams,omitempty"`
	// Schedules are the workflows' schedule states (schedule_engine.go).
	Schedules map[string]*scheduleState `json:"schedules,omitempty"`
}

// engineOptions configure an engine.
type engineOptions struct {
	Dir          string          // journal directory of the file store, when Store is nil
	Store        engineStore     // where the state lasts (engine_store.go); nil: the file journal in Dir
	Catalog      func() *catalog // the current compiled project (nil while the gate is closed)
	Env          func() map[string]string
	Platform     *jsPlatform // globals and data of step VMs; nil: fetch only
	Log          *slog.Logger
	RetryBase    time.Duration // first retry backoff; doubles per attempt
	MaxAttempts  int           // per step, including the first
	CompactBytes int64         // compact once the live journal exceeds this
	OnRunDone    func(r *runRecord)
	BusyLimit    time.Duration // workflow code that runs this long without yielding fails its run
	History      runHistory    // where ended runs go; nil keeps them in memory
	Retention    time.Duration // ended runs older than this leave the history; 0 keeps them
	// IdemRetention is how long idempotency keys are kept; 0: idemRetentionDefault.
	IdemRetention time.Duration
	Metrics       *metrics    // what GET /metrics shows of runs, steps and the store; nil records nothing
	Tracer        *otelTracer // spans of runs, steps, sleeps and hooks (otel_engine.go); nil: none
	// Partition is the partition of the fleet's log this engine holds, of
	// Partitions (engine_fleet.go); the ids it makes carry it. Zero values:
	// the one partition of the file journal.
	Partition, Partitions int
	// Fleet is the engine of every partition, for a child run whose
	// partition is another's (engine_children.go); nil when this engine
	// holds the whole state.
	Fleet *fleet
}

// engine is the durable workflow engine (DESIGN §3). Every state change is
// an event: appended to the journal and applied to the state under mu, in
// the same order, so replaying the journal rebuilds exactly the live state.
type engine struct {
	opts  engineOptions
	log   *slog.Logger
	self  string    // this replica's name on a shared store; "" on the file journal (engine_replica.go)
	j     engineLog // nil while the store cannot be written
	steps *stepRunner

	mu     sync.Mutex
	st     engineState
	active map[string]int // concurrencyBucket → its active runs
	timers map[string]*time.Timer
	closed bool
	failed error // non-nil while the journal cannot write, or the engine stands by (engine_journal.go)

	versions     map[string]*pinnedVersion // workflow versions of active runs (engine_versions.go)
	versionMu    sync.Mutex                // guards saved
	saved        map[string]bool           // versions already saved in the store
	ended        []string                  // runs whose end is durable, for the archiver (engine_history.go)
	epoch        int                       // bumped when recovery replaces the state (and ended)
	compacting   bool                      // a compaction is being written
	snapBytes    int                       // size of the last snapshot written
	compactRetry time.Time                 // no compaction before this, after one failed
	archiveDown  bool                      // the last archive failed (said once); only the archiver touches it
	idemSweep    time.Time                 // no sweep of expired idempotency keys before this
	idemPending  map[string]chan struct{}  // keys whose start is being written: closed once it is durable or failed
	applied      int64                     // shared log: the seq of the last event applied
	ending       map[string]bool           // shared log: runs whose end this process appended and the log has not yet delivered

	// hooks are the features' hooks by event type (engine_hooks.go).
	hooks map[string][]engineHook
	// reruns is set once any run may have reruns (engine_rerun.go).
	reruns atomic.Bool
	// watching holds the parent calls (run:seq) whose child in another
	// partition is being waited on (engine_children.go).
	watching map[string]bool
	// advancing holds the buckets an advanceQueue call admits from (engine_queue.go).
	advancing map[string]bool
	// pending counts, on a shared log, this process's starts of limited
	// workflows not yet delivered (engine_concurrency.go).
	pending map[string]pendingAdmissions

	wg   sync.WaitGroup // executions
	bg   sync.WaitGroup // journal recovery, compaction, archiver, queue admissions after ends on a shared log
	stop chan struct{}  // closed by close: background work ends
}

// Defaults of engineOptions.
const (
	defaultRetryBase    = 250 * time.Millisecond
	defaultMaxAttempts  = 3
	defaultCompactBytes = 4 << 20         // snapshots hold only what memory holds: cheap to write often
	defaultBusyLimit    = 5 * time.Second // far above what orchestration takes; an endless loop fails instead of holding a core
)

// openEngine opens the store (the file journal in Dir unless Store says
// otherwise), rebuilds the state and resumes every unfinished run. When
// another process owns the store's state (PostgreSQL's lease), the engine
// stands by instead: it refuses changes and takes over once it can.
func openEngine(opts engineOptions) (*engine, error) {
	if opts.RetryBase == 0 {
		opts.RetryBase = defaultRetryBase
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = defaultMaxAttempts
	}
	if opts.CompactBytes == 0 {
		opts.CompactBytes = defaultCompactBytes
	}
	if opts.BusyLimit == 0 {
		opts.BusyLimit = defaultBusyLimit
	}
	if opts.Store == nil {
		opts.Store = engineStoreFile{dir: opts.Dir, metrics: opts.Metrics}
	}
	e := newEngineShell(opts)
	e.stop = make(chan struct{})
	e.steps = newStepRunner(opts.Env, opts.Platform, opts.Log)
	j, poisoned, err := e.replayJournal(e)
	if err != nil {
		return nil, err
	}
	e.mu.Lock() // a shared log may deliver already
	e.j = j
	e.mu.Unlock()
	if opts.Partitions <= 1 {
		// This engine holds every run: what it does not pin, nothing does.
		// (A partition's engine cannot tell: engine_fleet.go removes them.)
		e.opts.Store.removeVersions(func(v string) bool { return e.versions[v] != nil })
	}
	e.settleReplay(poisoned)
	e.resumeAll()
	e.startHistory()
	return e, nil
}

// newEngineShell returns an engine with empty state and no journal.
func newEngineShell(opts engineOptions) *engine {
	e := &engine{opts: opts, log: opts.Log, self: opts.Store.replica(), active: map[string]int{}, advancing: map[string]bool{}, pending: map[string]pendingAdmissions{}, ending: map[string]bool{}, timers: map[string]*time.Timer{},
		versions: map[string]*pinnedVersion{}, saved: map[string]bool{}, hooks: map[string][]engineHook{},
		st: engineState{Runs: map[string]*runRecord{}, Queues: map[string][]*queuedTrigger{}, Hooks: map[string]hookRef{}}}
	for _, register := range engineFeatures {
		register(e)
	}
	return e
}

// restoreSnapshot loads the compaction snapshot.
func (e *engine) restoreSnapshot(b []byte) error {
	var st engineState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("decode journal snapshot: %w", err)
	}
	for _, r := range st.Runs {
		r.done = newRunSignal()
	}
	restoreStreams(&st)
	e.st = st
	e.recountActiveLocked()
	e.noteRerunsLocked()
	return nil
}

// resumeAll schedules every unfinished run and starts the queue heads
// whose key has a free slot. Called after replay and when the catalog changes.
func (e *engine) resumeAll() {
	e.mu.Lock()
	var ids []string
	for id, r := range e.st.Runs {
		if !terminal(r.Status) {
			ids = append(ids, id)
		}
	}
	var heads []*queuedTrigger
	for _, q := range e.st.Queues {
		heads = append(heads, q[0])
	}
	parents, seqs := e.watchChildrenLocked()
	e.mu.Unlock()
	for _, id := range ids {
		e.schedule(id)
	}
	for i, id := range parents {
		e.watchChild(id, seqs[i])
	}
	for _, t := range heads {
		e.advanceQueue(t.WorkflowName, t.bucket())
	}
}

// close stops timers, waits for executions to suspend and closes the journal.
func (e *engine) close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.stop)
	for _, t := range e.timers {
		t.Stop()
	}
	for _, r := range e.st.Runs {
		if r.cancel != nil {
			r.cancel()
		}
	}
	e.mu.Unlock()
	e.wg.Wait()
	e.bg.Wait()
	if e.j == nil { // recovery could not reopen it
		return e.failed
	}
	return e.j.close()
}

// startRequest is a request to start a run.
type startRequest struct {
	Workflow   string
	Input      json.RawMessage
	Trigger    string
	ParentRun  string
	ParentSeq  int
	ParentKind string    // callStart or callStartAndWait
	IdemKey    string    // idempotency key (engine_idem.go); "" for none
	Fire       time.Time // trigger schedule: the fire it starts (schedule_engine.go)
	// TraceParent is the W3C traceparent the run's span is the child of
	// (an incoming request's); a child run's is its parent run's span.
	TraceParent string
	// RerunOf, RetryFrom and Reuse make the run a rerun (engine_rerun.go).
	RerunOf   string
	RetryFrom int
	Reuse     []*durableCall
}

// startReceipt is the start receipt (SPEC §2).
type startReceipt struct {
	SchemaVersion int    `json:"schema_version"`
	WorkflowName  string `json:"workflowName"`
	Status        string `json:"status"` // started or queued
	RunID         string `json:"runId,omitempty"`
	WorldRunID    string `json:"worldRunId,omitempty"`
	Trigger       string `json:"trigger"`
	QueueID       string `json:"queueId,omitempty"` // queued: the entry's id (runs get / cancel take it); an addition to SPEC's fields
	// Existing marks the receipt of a start an idempotency key had already
	// made: nothing new was started (an addition to SPEC's fields).
	Existing bool `json:"existing,omitempty"`
	// RerunOf and RetryFromStep mark the receipt of a rerun (engine_rerun.go).
	RerunOf       string `json:"rerunOf,omitempty"`
	RetryFromStep int    `json:"retryFromStep,omitempty"`
}

// workflowRoute is the route string that starts a workflow.
func workflowRoute(name string) string { return "POST /api/workflows/" + name + "/start" }

// Start failures callers branch on.
var (
	errGateClosed       = errors.New("the boot gate is closed")
	errWorkflowNotFound = errors.New("workflow not found")
	errRunNotFound      = errors.New("run not found")
)

// startError is a start rejected before anything was journaled.
type startError struct {
	Code       string // invalid_json, schema_validation, workflow_not_found, workflow_compile_failed, gate_closed, invalid_idempotency_key, idempotency_key_reused, invalid_concurrency_key
	Message    string
	Violations []schemaViolation
	Err        error
}

func (e *startError) Error() string { return e.Message }
func (e *startError) Unwrap() error { return e.Err }

// validateStart resolves the workflow and validates the input against its
// inputSchema. Nothing is written.
func (e *engine) validateStart(name string, input json.RawMessage) (*workflowDef, error) {
	return validateStartIn(e.opts.Catalog, name, input)
}

// validateStartIn is validateStart in the catalog current returns.
func validateStartIn(current func() *catalog, name string, input json.RawMessage) (*workflowDef, error) {
	cat := current()
	if cat == nil {
		return nil, &startError{Code: "gate_closed", Message: errGateClosed.Error(), Err: errGateClosed}
	}
	def, ok := cat.Workflows[name]
	if !ok {
		if ce, failed := cat.Failed[name]; failed {
			return nil, &startError{Code: "workflow_compile_failed", Message: fmt.Sprintf("workflow %q failed to compile: %v", name, ce)}
		}
		return nil, &startError{Code: "workflow_not_found", Message: fmt.Sprintf("workflow %q not found", name), Err: errWorkflowNotFound}
	}
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	if err := checkStartInput(input); err != nil {
		return nil, &startError{Code: "invalid_json", Message: err.Error()}
	}
	if def.input != nil {
		violations, err := def.input.validateJSON(input)
		if err != nil {
			return nil, &startError{Code: "invalid_json", Message: "input is not valid JSON: " + err.Error()}
		}
		if len(violations) > 0 {
			return nil, &startError{Code: "schema_validation", Violations: violations,
				Message: fmt.Sprintf("input does not match the inputSchema of %q: %s: %s", name, orRoot(violations[0].Path), violations[0].Message)}
		}
	}
	return def, nil
}

// checkStartInput reports why input cannot start a run: it must be a JSON
// object (SPEC §4.1) within the edge's JSON limits. The CLI applies the same
// check before it sends anything.
func checkStartInput(input []byte) error {
	if err := edgeJSON.check(input); err != nil {
		return fmt.Errorf("input is not acceptable JSON: %w", err)
	}
	if t := bytes.TrimLeft(input, " \t\r\n"); t[0] != '{' {
		return errors.New("input must be a JSON object")
	}
	return nil
}

// start validates and durably records a start: a new run, or a queued
// trigger when the workflow's limit is reached for the input's key
// (engine_concurrency.go). The receipt
// is returned only once its record is on disk.
func (e *engine) start(req startRequest) (startReceipt, error) {
	if err := checkIdemKey(req.IdemKey); err != nil {
		return startReceipt{}, &startError{Code: "invalid_idempotency_key", Message: err.Error()}
	}
	def, err := e.validateStart(req.Workflow, req.Input)
	if err != nil {
		return startReceipt{}, err
	}
	if len(req.Input) == 0 {
		req.Input = json.RawMessage("{}")
	}
	key, err := def.Concurrency.concurrencyKey(def.Name, req.Input)
	if err != nil {
		return startReceipt{}, &startError{Code: "invalid_concurrency_key", Message: err.Error() + "; nothing was started"}
	}
	if err := e.saveVersion(def); err != nil {
		return startReceipt{}, fmt.Errorf("%w: %v", errJournalUnavailable, err)
	}
	ev := &journalEvent{Workflow: def.Name, Input: compactJSON(req.Input), Trigger: req.Trigger,
		Parent: req.ParentRun, ParentSeq: req.ParentSeq, Kind: req.ParentKind, Idem: req.IdemKey, Fire: scheduleMicros(&req.Fire),
		RerunOf: req.RerunOf, Seq: req.RetryFrom, Calls: req.Reuse}
	ev.setConcurrency(def.Concurrency.Limit, key)
	bucket := concurrencyBucket(def.Name, key)
	if req.IdemKey != "" {
		ev.IdemHash = idemInputHash(req.Input)
		if e.self != "" {
			ev.IdemTTL = e.idemRetention().Milliseconds()
		}
	}
	var rc startReceipt
	for tries := 0; ; tries++ {
		rc = startReceipt{SchemaVersion: schemaVersion, WorkflowName: def.Name, Trigger: workflowRoute(def.Name), RerunOf: req.RerunOf, RetryFromStep: req.RetryFrom}
		e.mu.Lock()
		ev.TraceParent = e.otelStartParentLocked(req)
		var writing chan struct{}
		if ev.Idem != "" {
			if orig, answered, err := e.idemAnswerLocked(req, def.Name, ev.IdemHash); answered {
				return orig, err
			}
			writing = e.idemBeginLocked(ev.Idem)
		}
		ev.Run, ev.WRun, ev.Ver, ev.Queue = "", "", "", ""
		if e.mustQueueLocked(bucket, def.Concurrency.Limit) {
			ev.Type, ev.Queue = evQueue, queueIDPrefix+e.newRunID()
			rc.Status, rc.QueueID = "queued", ev.Queue
		} else {
			ev.Type, ev.Run, ev.WRun, ev.Ver = evStart, e.newRunID(), newWorldRunID(), def.Module.Hash
			rc.Status, rc.RunID, rc.WorldRunID = "started", ev.Run, ev.WRun
		}
		e.pendLocked(ev, bucket, 1)
		err := e.commitLocked(ev, true)
		e.mu.Lock()
		e.pendLocked(ev, bucket, -1)
		e.mu.Unlock()
		if writing != nil {
			e.idemEnd(ev.Idem, writing)
		}
		if errors.Is(err, errJournalOutcomeUnknown) {
			if ev.Run != "" {
				return startReceipt{}, fmt.Errorf("%w: GET /api/runs/%s says whether run %s started", err, ev.Run, ev.Run)
			}
			return startReceipt{}, fmt.Errorf("%w: GET /api/runs/%s says whether the start was queued", err, ev.Queue)
		}
		if err != nil {
			return startReceipt{}, err
		}
		if !e.lostStart(ev) {
			break
		}
		// Another replica changed the state first (engine_replica.go):
		// decide again on the state as it is now.
		if tries == startMaxTries {
			return startReceipt{}, fmt.Errorf("%w: the start lost %d races with other replicas; retry", errJournalUnavailable, tries+1)
		}
	}
	if ev.Type == evStart {
		e.schedule(ev.Run)
		e.log.Info("run started", "workflow", def.Name, "run", ev.Run, "trigger", req.Trigger) // after: the run need not wait for the line
	} else {
		e.log.Info("run queued", "workflow", def.Name, "queue", ev.Queue, "trigger", req.Trigger)
		if e.self != "" {
			// The run it waited for may have ended on another replica
			// before the entry was in the log.
			e.advanceQueue(def.Name, bucket)
		}
	}
	return rc, nil
}

// startMaxTries bounds how often a start decides again after losing a race
// with other replicas.
const startMaxTries = 20

// lostStart reports whether the start ev was void when the log delivered
// it: its run does not exist, or its key names another start.
func (e *engine) lostStart(ev *journalEvent) bool {
	if e.self == "" {
		return false // one process decides under mu what apply then sees
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev.Type == evStart {
		return e.st.Runs[ev.Run] == nil
	}
	k := e.st.Idem[ev.Idem]
	return ev.Idem != "" && (k == nil || k.QueueID != ev.Queue)
}

// compactJSON returns raw without insignificant whitespace.
func compactJSON(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return json.RawMessage(b.Bytes())
}

// commitLocked appends ev to the journal and applies it; mu must be held
// and is released. When durable, it returns only once the record is on disk;
// the follow-up actions of the event (waking waiters, scheduling) run after.
// On a shared log it returns once the log delivered (and so applied) ev.
func (e *engine) commitLocked(ev *journalEvent, durable bool) error {
	d := commitSoon
	if durable {
		d = commitDurable
	}
	return e.appendLocked(ev, d, nil)
}

// pipelineLocked appends ev, an event its execution reads nothing back
// from (a step attempt's start, its outcome, its log line), as
// commitLocked without durable, except that on a shared log it does not
// wait for the log to deliver it: the execution goes on while the record
// is in flight, as on the file journal while it is not yet on disk, and
// the run's next waiting commit (a sleep, a hook, its end) is delivered
// after it, in the log's order. The record's commit, until delivered, is
// left in *inflight (nil on the file journal, which applies at once): the
// execution waits for it before it ends, so the run's next execution
// replays what this one journaled. A step's outcome is counted and traced
// when it is delivered (deliver). mu must be held and is released.
func (e *engine) pipelineLocked(ev *journalEvent, inflight *engineCommit) error {
	return e.appendLocked(ev, commitSoon, inflight)
}

// appendLocked is commitLocked with the durability d the log is asked for
// (commitHistory: recordTurn), and pipelineLocked when inflight is not nil.
func (e *engine) appendLocked(ev *journalEvent, d engineDurability, inflight *engineCommit) error {
	if e.closed {
		e.mu.Unlock()
		return errEngineClosed
	}
	if e.failed != nil {
		err := fmt.Errorf("%w: %w", errJournalUnavailable, e.failed)
		e.mu.Unlock()
		return err
	}
	if runScoped(ev.Type) {
		// A run ends once: nothing is journaled for it afterwards (a step
		// in flight when a cancel landed, a second cancel, a late end).
		if r := e.st.Runs[ev.Run]; r == nil || terminal(r.Status) || e.ending[ev.Run] {
			e.mu.Unlock()
			return errRunEnded
		}
	}
	ev.At = time.Now().UnixMicro()
	if ev.Type == evStart || ev.Type == evTurn {
		ev.By = e.self // the writer executes the run it starts, archives the turn it records
	}
	b, err := encodeRecord(ev)
	if err == nil {
		err = journalJSON.check(b)
	}
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("encode journal event: %w", err)
	}
	pending := e.j.append(b, d)
	if e.self != "" {
		// A shared log: applied when the log delivers it, in the log's
		// order (engine_replica.go), which the caller waits for unless
		// pipelined. Until then no record of a run whose end is on its
		// way is appended.
		if inflight != nil {
			*inflight = pending
			e.mu.Unlock()
			return nil
		}
		if ev.Type == evEnd {
			e.ending[ev.Run] = true
		}
		e.mu.Unlock()
		err := pending.Wait()
		e.mu.Lock()
		if ev.Type == evEnd {
			delete(e.ending, ev.Run)
		}
		if err == nil && ev.Type != evStep {
			// Counted and traced by its writer, once the log has it; a
			// step's outcome by the run's owner as it applies it.
			e.committedLocked(ev)
		}
		e.mu.Unlock()
		if errors.Is(err, errJournalOutcomeUnknown) {
			return err
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errJournalUnavailable, err)
		}
		return nil
	}
	after := e.apply(ev)
	e.committedLocked(ev)
	e.maybeCompactLocked()
	e.mu.Unlock()
	if d == commitDurable {
		if err := pending.Wait(); err != nil {
			return fmt.Errorf("%w: %v", errJournalUnavailable, err)
		}
	}
	for _, fn := range after {
		fn()
	}
	return nil
}

// encodeRecord encodes a journal event without escaping <, > and &, so the
// values it carries replay byte for byte as they were accepted.
func encodeRecord(ev *journalEvent) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// errEngineClosed is returned for events committed after close.
var errEngineClosed = errors.New("engine closed")

// errRunEnded is returned for an event of a run that has already ended (or
// is unknown): it is not journaled.
var errRunEnded = errors.New("run has already ended")

// runScoped reports whether events of type t belong to an existing run
// (and so must not follow its end).
func runScoped(t string) bool {
	switch t {
	case evAttempt, evStep, evSleep, evHook, evResume, evEnd, evLog, evStream, evChildEnd:
		return true
	}
	return false
}

// newWorldRunID returns the engine's own run id: wrun_ followed by a ULID
// (48-bit millisecond time, 80 random bits, Crockford base32).
func newWorldRunID() string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	u := uuid.New()
	copy(b[6:], u[6:])
	// 128 bits → 26 base32 characters, most significant first.
	out := make([]byte, 26)
	var acc uint64
	bits, n := 0, 0
	out[n] = alphabet[b[0]>>5]
	n++
	acc, bits = uint64(b[0]&0x1f), 5
	for _, x := range b[1:] {
		acc = acc<<8 | uint64(x)
		bits += 8
		for bits >= 5 {
			bits -= 5
			out[n] = alphabet[(acc>>bits)&0x1f]
			n++
		}
	}
	return "wrun_" + string(out[:n])
}

// get returns a copy of the run record.
func (e *engine) get(id string) (runRecord, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.st.Runs[id]
	if !ok {
		return runRecord{}, false
	}
	return snapshotRun(r), true
}

// snapshotRun copies r for readers outside mu.
func snapshotRun(r *runRecord) runRecord {
	c := *r
	c.Steps = make([]*durableCall, len(r.Steps))
	for i, s := range r.Steps {
		sc := *s
		sc.Attempts = append([]stepAttempt(nil), s.Attempts...)
		if s.EndedAt != nil {
			d := float64(s.EndedAt.Sub(s.StartedAt).Microseconds()) / 1000
			sc.DurationMs = &d
		}
		c.Steps[i] = &sc
	}
	return c
}

// wait blocks until the run is terminal or ctx ends; a queued entry's id
// waits for its turn and then for its run.
func (e *engine) wait(ctx context.Context, id string) error {
	e.knows(ctx, id)
	if isQueueID(id) {
		if err := e.waitTurn(ctx, id); err != nil {
			return err
		}
		if r, ok := e.findQueued(id); ok {
			id = r.RunID
		}
	}
	e.mu.Lock()
	r, ok := e.st.Runs[id]
	e.mu.Unlock()
	if !ok {
		if _, found, err := e.find(ctx, id); err != nil || found { // ended and archived
			return err
		}
		return errRunNotFound
	}
	for {
		select {
		case <-r.done.ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		// done fires when the run ends, and when recovery replaces its
		// record by one rebuilt from the log, which may not have ended:
		// then wait for that one.
		e.mu.Lock()
		cur := e.st.Runs[id]
		e.mu.Unlock()
		if cur == nil || cur == r || terminal(cur.Status) {
			return nil
		}
		r = cur
	}
}

// cancelRun cancels an active run durably, and then the active runs it
// started. A run that has already ended is returned unchanged with
// errRunEnded.
func (e *engine) cancelRun(id string) (runRecord, error) {
	e.knows(context.Background(), id)
	if isQueueID(id) {
		return e.cancelQueued(id)
	}
	e.mu.Lock()
	r, ok := e.st.Runs[id]
	if !ok {
		e.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
		defer cancel()
		old, found, err := e.find(ctx, id)
		switch {
		case err != nil:
			return runRecord{}, err
		case found: // ended and archived
			return old, errRunEnded
		}
		return runRecord{}, errRunNotFound
	}
	if terminal(r.Status) {
		e.mu.Unlock()
		return e.mustGet(id), errRunEnded
	}
	var children, elsewhere []string
	for _, c := range r.Steps {
		switch {
		case c.ChildRunID != "" && e.elsewhere(c.ChildRunID):
			elsewhere = append(elsewhere, c.ChildRunID)
		case c.ChildRunID != "":
			children = append(children, c.ChildRunID)
		case c.QueueID != "" && e.elsewhere(c.QueueID):
			elsewhere = append(elsewhere, c.QueueID, queuedRunID(c.QueueID)) // queued there, or started since
		case c.QueueID != "" && e.queuedLocked(c.QueueID) != nil:
			children = append(children, c.QueueID)
		}
	}
	if err := e.commitLocked(&journalEvent{Type: evEnd, Run: id, Status: runCancelled, Error: &runError{Name: "Cancelled", Message: "cancelled"}}, true); err != nil {
		return e.mustGet(id), err
	}
	if rec, ok := e.get(id); ok && rec.Status != runCancelled {
		return rec, errRunEnded // it ended on its replica before the cancel reached the log
	}
	for _, child := range children {
		if _, err := e.cancelRun(child); err != nil && !errors.Is(err, errRunEnded) {
			return runRecord{}, err
		}
	}
	for _, child := range elsewhere {
		if _, err := e.opts.Fleet.cancelRun(child); err != nil && !errors.Is(err, errRunEnded) && !errors.Is(err, errRunNotFound) {
			return runRecord{}, err
		}
	}
	return e.mustGet(id), nil
}

// mustGet returns the record of a run known to exist.
func (e *engine) mustGet(id string) runRecord {
	r, _ := e.get(id)
	return r
}

// errHookNotFound and errHookUsed are the failures of resuming a hook.
var (
	errHookNotFound = errors.New("hook not found")
	errHookUsed     = errors.New("hook already resumed or its run has ended")
)

// hookTokenPrefix starts every hook token: hook_<runId>_<32 random hex>.
// The run id lets a token that was used, or whose run has ended, be told
// from one that never existed after the hook has left the index.
const hookTokenPrefix = "hook_"

// resumeHook delivers payload to the run waiting on token, durably.
func (e *engine) resumeHook(token string, payload json.RawMessage) (string, error) {
	e.seen(context.Background(), func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		_, ok := e.st.Hooks[token]
		return ok
	})
	e.mu.Lock()
	ref, ok := e.st.Hooks[token]
	if !ok {
		e.mu.Unlock()
		return "", e.spentHook(token)
	}
	r := e.st.Runs[ref.RunID]
	if c := r.call(ref.Seq); r == nil || terminal(r.Status) || c == nil || c.Status == runCompleted {
		e.mu.Unlock()
		return "", errHookUsed
	}
	ev := &journalEvent{Type: evResume, Run: ref.RunID, Seq: ref.Seq, Token: token, Result: compactJSON(payload)}
	if e.self != "" {
		ev.ID = uuid.NewString() // another replica may resume it at once: the first in the log wins
	}
	if err := e.commitLocked(ev, true); err != nil {
		return ref.RunID, err
	}
	if e.self != "" {
		e.mu.Lock()
		won := true // a run that ended since and left memory: it was ours
		if r := e.st.Runs[ref.RunID]; r != nil {
			won = r.call(ref.Seq).resumedBy == ev.ID
		}
		e.mu.Unlock()
		if !won {
			return ref.RunID, errHookUsed
		}
	}
	return ref.RunID, nil
}

// spentHook tells errHookUsed (the token belongs to a run, in memory or
// in the history, whose timeline holds it: it was resumed or its run ended)
// from errHookNotFound.
func (e *engine) spentHook(token string) error {
	rest, ok := strings.CutPrefix(token, hookTokenPrefix)
	i := strings.LastIndexByte(rest, '_')
	if !ok || i < 0 {
		return errHookNotFound
	}
	ctx, cancel := context.WithTimeout(context.Background(), historyTimeout)
	defer cancel()
	r, found, err := e.find(ctx, rest[:i])
	if err != nil || !found {
		return errHookNotFound
	}
	for _, c := range r.Steps {
		if c.Kind == callHook && c.Token == token {
			return errHookUsed
		}
	}
	return errHookNotFound
}

// agentTurn is one chat turn of an agent, recorded in the runs API as a
// finished run with trigger "agent" and its tool calls as the timeline.
type agentTurn struct {
	Agent          string
	Wire           string // "openai", "openai-responses", "anthropic" or "agui"
	SessionID      string // durable session key, "" when stateless
	ConversationID string // grouping-only key
	Input          json.RawMessage
	Output         json.RawMessage
	Error          *runError // nil when the turn succeeded
	Stopped        bool      // the client stopped the turn (it hung up, or pressed Stop): cancelled, not failed
	StartedAt      time.Time
	ToolCalls      []*durableCall
}

// recordTurn journals a finished agent turn and returns its run id. The
// record is history, not state (commitHistory): on the file journal it
// rides a later commit, at most journalDefaultLazyDelay away.
func (e *engine) recordTurn(t agentTurn) (string, error) {
	status := runCompleted
	switch {
	case t.Stopped:
		status = runCancelled
	case t.Error != nil:
		status = runFailed
	}
	ev := &journalEvent{Type: evTurn, Run: e.newRunID(), WRun: newWorldRunID(), Status: status, Input: t.Input, Result: t.Output,
		Error: t.Error, Agent: t.Agent, Wire: t.Wire, Session: t.SessionID, Conv: t.ConversationID,
		StartedAt: t.StartedAt.UnixMicro(), Calls: t.ToolCalls}
	e.mu.Lock()
	if err := e.appendLocked(ev, commitHistory, nil); err != nil {
		return "", err
	}
	return ev.Run, nil
}
