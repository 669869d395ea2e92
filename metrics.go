package main

// What svc counts for GET /metrics (docs/operations.md "Metrics"): the engine's runs,
// steps and store, the chat wires, SSE streams, the tunnel and the
// control plane's proxy. The engine and the stores call the recording
// methods below (one line each, cheap: atomic adds); the HTTP side
// (metrics_http.go) records requests and writes the exposition
// (metrics_text.go). A nil *metrics records nothing, so an engine or a
// journal built without one (tests, tools) needs no guard at its hooks.

import (
	"bufio"
	"io"
	"time"
)

// Bucket upper bounds of the histograms, in seconds, records or bytes.
var (
	metricsStepBounds   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	metricsSyncBounds   = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
	metricsCommitBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}
	metricsRecordBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
	metricsByteBounds   = []float64{256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	metricsChatBounds   = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// Step attempt outcomes (the outcome label of svc_step_attempts_total).
const (
	metricsStepCompleted = "completed" // the attempt succeeded
	metricsStepRetried   = "retried"   // it failed and the step is retried
	metricsStepFailed    = "failed"    // it failed and so did the step
)

// metrics is one runtime's metric families. Built by newMetrics; its
// families are safe for concurrent use.
type metrics struct {
	runsStarted  metricsCounterVec   // workflow, trigger
	runsEnded    metricsCounterVec   // workflow, status
	stepAttempts metricsCounterVec   // workflow, outcome
	stepDuration metricsHistogramVec // workflow

	journalSync       metricsHistogramVec // the file journal's fdatasync of a batch
	journalBatch      metricsHistogramVec // records per batch
	journalBatchBytes metricsHistogramVec // bytes per batch
	pgCommit          metricsHistogramVec // the PostgreSQL engine's commit of a batch
	pgBatch           metricsHistogramVec // records per batch

	chatRequests metricsCounterVec   // wire, code
	chatDuration metricsHistogramVec // wire
	sseOpen      metricsGaugeVec     // no labels
	tunnel       metricsCounterVec   // code
	proxy        metricsCounterVec   // code
}

// newMetrics returns the families, every series at zero.
func newMetrics() *metrics {
	m := &metrics{
		runsStarted:  newMetricsCounterVec("svc_runs_started_total", "Workflow runs started (a queued start counts when it starts), by workflow and trigger.", "workflow", "trigger"),
		runsEnded:    newMetricsCounterVec("svc_runs_ended_total", "Workflow runs ended, by workflow and final status.", "workflow", "status"),
		stepAttempts: newMetricsCounterVec("svc_step_attempts_total", "Step attempts ended, by workflow and outcome (completed, retried, failed).", "workflow", "outcome"),
		stepDuration: newMetricsHistogramVec("svc_step_duration_seconds", "Duration of step attempts, by workflow.", metricsStepBounds, "workflow"),

		journalSync:       newMetricsHistogramVec("svc_journal_fsync_seconds", "Latency of the file journal's fdatasync of one batch.", metricsSyncBounds),
		journalBatch:      newMetricsHistogramVec("svc_journal_batch_records", "Records per batch the file journal made durable together.", metricsRecordBounds),
		journalBatchBytes: newMetricsHistogramVec("svc_journal_batch_bytes", "Bytes per batch the file journal wrote.", metricsByteBounds),
		pgCommit:          newMetricsHistogramVec("svc_engine_pg_commit_seconds", "Latency of the PostgreSQL engine's transaction appending one batch of events.", metricsCommitBounds),
		pgBatch:           newMetricsHistogramVec("svc_engine_pg_batch_records", "Events per batch the PostgreSQL engine appended in one transaction.", metricsRecordBounds),

		chatRequests: newMetricsCounterVec("svc_chat_requests_total", "Chat wire requests answered, by wire (openai, openai-responses, anthropic, agui) and HTTP status.", "wire", "code"),
		chatDuration: newMetricsHistogramVec("svc_chat_request_duration_seconds", "Duration of chat wire requests, to the end of the answer (streams included), by wire.", metricsChatBounds, "wire"),
		sseOpen:      newMetricsGaugeVec("svc_sse_streams_open", "Server-sent event streams being answered now."),
		tunnel:       newMetricsCounterVec("svc_tunnel_requests_total", "Requests that arrived through svc dev's tunnel, by HTTP status.", "code"),
		proxy:        newMetricsCounterVec("svc_proxy_requests_total", "Requests signed by the control plane (its proxy to this box), by HTTP status.", "code"),
	}
	m.sseOpen.with() // a gauge is 0 before its first stream
	return m
}

// families is every family recorded in memory, in exposition order.
func (m *metrics) families() []metricsWriter {
	return []metricsWriter{m.runsStarted, m.runsEnded, m.stepAttempts, m.stepDuration,
		m.journalSync, m.journalBatch, m.journalBatchBytes, m.pgCommit, m.pgBatch,
		m.chatRequests, m.chatDuration, m.sseOpen, m.tunnel, m.proxy}
}

// engineEvent records a live engine event (never a replayed one): run
// starts and ends, step attempts. r is the event's run after the event
// applied, nil for events of no run. Agent turns are counted by the chat
// wires, not here.
func (m *metrics) engineEvent(ev *journalEvent, r *runRecord) {
	if m == nil || r == nil || r.Trigger == triggerAgent {
		return
	}
	switch ev.Type {
	case evStart:
		m.runsStarted.with(r.WorkflowName, r.Trigger).inc()
	case evEnd:
		m.runsEnded.with(r.WorkflowName, r.Status).inc()
	case evStep:
		outcome := metricsStepCompleted
		switch {
		case ev.Error != nil && ev.Final:
			outcome = metricsStepFailed
		case ev.Error != nil:
			outcome = metricsStepRetried
		}
		m.stepAttempts.with(r.WorkflowName, outcome).inc()
		m.stepDuration.with(r.WorkflowName).observe(micros(ev.At).Sub(micros(ev.StartedAt)).Seconds())
	}
}

// journalCommit records one batch of the file journal: its fdatasync
// begun at syncStart, its records and bytes.
func (m *metrics) journalCommit(syncStart time.Time, records, bytes int) {
	if m == nil {
		return
	}
	m.journalSync.with().observeSince(syncStart)
	m.journalBatch.with().observe(float64(records))
	m.journalBatchBytes.with().observe(float64(bytes))
}

// pgCommitted records one batch of the PostgreSQL engine: its commit
// attempt begun at start (a failed one too), and its events.
func (m *metrics) pgCommitted(start time.Time, records int) {
	if m == nil {
		return
	}
	m.pgCommit.with().observeSince(start)
	m.pgBatch.with().observe(float64(records))
}

// metricsScrape is what a scrape reads from the runtime at that moment.
type metricsScrape struct {
	// Queues is the depth of each limited workflow's queues, all keys together (0 included).
	Queues map[string]int
	// Store is the engine's store; its lease is exposed on PostgreSQL.
	Store engineStoreHealth
	// Active is how many runs this process holds that have not ended, by
	// status (pending, running, waiting, queued).
	Active map[string]int
}

// metricsActiveStatuses are the series of svc_runs_active.
var metricsActiveStatuses = []string{runPending, runRunning, runWaiting, runQueued}

// Lease states of the PostgreSQL engine, each a series of
// svc_engine_lease_state.
var metricsLeaseStates = []string{engineLeaseHeld, engineLeaseLost, engineLeaseReleased}

// write writes the exposition: the recorded families, then the gauges of
// sc.
func (m *metrics) write(out io.Writer, sc metricsScrape) error {
	return metricsExpose(out, m.families(), func(w *bufio.Writer) {
		queues := make([]metricsSample, 0, len(sc.Queues))
		for _, wf := range sortedKeys(sc.Queues) {
			queues = append(queues, metricsSample{labels: []string{wf}, value: float64(sc.Queues[wf])})
		}
		metricsWriteGauge(w, "svc_queue_depth", "Starts of a serial or concurrency-limited workflow waiting for their turn, by workflow.", []string{"workflow"}, queues)
		if sc.Active != nil { // nil: a runtime with no engine (tests)
			active := make([]metricsSample, 0, len(metricsActiveStatuses))
			for _, st := range metricsActiveStatuses {
				active = append(active, metricsSample{labels: []string{st}, value: float64(sc.Active[st])})
			}
			metricsWriteGauge(w, "svc_runs_active", "Runs this process holds in memory that have not ended, by status (on the PostgreSQL engine: of the partitions it holds).", []string{"status"}, active)
		}
		if sc.Store.Kind != engineKindPostgres {
			return
		}
		states := make([]metricsSample, 0, len(metricsLeaseStates))
		for _, s := range metricsLeaseStates {
			v := 0.0
			if s == sc.Store.Lease {
				v = 1
			}
			states = append(states, metricsSample{labels: []string{s}, value: v})
		}
		metricsWriteGauge(w, "svc_engine_lease_state", "The PostgreSQL engine's lease as this process sees it: 1 for the current state.", []string{"state"}, states)
		metricsWriteGauge(w, "svc_engine_lease_epoch", "The fencing token of the PostgreSQL engine's lease held or last held by this process.", nil,
			[]metricsSample{{value: float64(sc.Store.Epoch)}})
		metricsWriteGauge(w, "svc_engine_replicas", "Replicas of the box holding a lease on the PostgreSQL engine, as of this replica's last renewal.", nil,
			[]metricsSample{{value: float64(sc.Store.Replicas)}})
		metricsWriteGauge(w, "svc_engine_partitions_held", "Partitions of the PostgreSQL engine's log this replica holds: it executes their runs.", nil,
			[]metricsSample{{value: float64(len(sc.Store.Partitions))}})
	})
}
