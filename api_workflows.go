package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// maxLongPoll bounds the ?wait=… of GET /api/runs/{runId} and of POST
// /api/workflows/{name}/start.
const maxLongPoll = 5 * time.Minute

// parseWait reads the ?wait= of r: 0 when absent, at most maxLongPoll. On a
// malformed value it answers 400 invalid_wait and reports false.
func parseWait(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	wait := r.URL.Query().Get("wait")
	if wait == "" {
		return 0, true
	}
	d, err := time.ParseDuration(wait)
	if err != nil || d < 0 {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_wait", Message: "wait must be a duration such as 30s"})
		return 0, false
	}
	return min(d, maxLongPoll), true
}

// waitRun blocks until run id is terminal, d has passed or the request ends.
func (s *server) waitRun(r *http.Request, id string, d time.Duration) {
	if d <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	s.rt.engine.wait(ctx, id)
	cancel()
}

// workflowItem is a workflow list item (SPEC §2).
type workflowItem struct {
	Name      string `json:"name"`
	Trigger   string `json:"trigger"`
	HasSchema bool   `json:"hasSchema"`
}

// handleListWorkflows serves the workflow list (what `svc workflows list` prints).
func (s *server) handleListWorkflows(w http.ResponseWriter, r *http.Request) {
	items := []workflowItem{}
	if cat := s.rt.catalog.Load(); cat != nil {
		for _, name := range cat.workflowNames() {
			wf := cat.Workflows[name]
			items = append(items, workflowItem{Name: name, Trigger: workflowRoute(name), HasSchema: wf.InputSchema != nil || wf.OutputSchema != nil})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "items": items})
}

// handleWorkflowSchema serves a workflow's input and output schemas.
func (s *server) handleWorkflowSchema(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	cat := s.rt.catalog.Load()
	var wf *workflowDef
	if cat != nil {
		wf = cat.Workflows[name]
	}
	if wf == nil {
		if _, err := s.rt.engine.validateStart(name, nil); err != nil {
			s.writeStartError(w, err)
			return
		}
	}
	orNull := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return json.RawMessage("null")
		}
		return raw
	}
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion,
		"schema": map[string]json.RawMessage{"input": orNull(wf.InputSchema), "output": orNull(wf.OutputSchema)}})
}

// triggerHeader lets the CLI mark the runs it starts (trigger "cli").
const triggerHeader = "x-svc-trigger"

// idemKeyHeader carries a start's idempotency key (engine_idem.go).
const idemKeyHeader = "Idempotency-Key"

// handleStartWorkflow is POST /api/workflows/{name}/start: the body is the
// input (empty = {}); 202 with the receipt once the start is durable. With
// ?wait=30s it answers 200 with the run, as GET /api/runs/{runId} shows it,
// when the run ends within the wait; a queued start, or a run still active
// when the wait ends, answers the receipt.
func (s *server) handleStartWorkflow(w http.ResponseWriter, r *http.Request) {
	wait, ok := parseWait(w, r)
	if !ok {
		return
	}
	body, err := readBody(r)
	if errors.Is(err, errBodyTooLarge) {
		writeAPIError(w, http.StatusRequestEntityTooLarge, apiError{Code: "too_large", Message: "input exceeds 4 MiB"})
		return
	}
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_body", Message: err.Error()})
		return
	}
	trigger := triggerHTTP
	if r.Header.Get(triggerHeader) == triggerCLI {
		trigger = triggerCLI
	}
	rc, err := s.rt.engine.start(startRequest{Workflow: r.PathValue("name"), Input: body, Trigger: trigger, IdemKey: r.Header.Get(idemKeyHeader),
		TraceParent: otelRequestParent(r.Context())})
	if err != nil {
		s.writeStartError(w, err)
		return
	}
	s.answerStart(w, r, rc, wait)
}

// answerStart answers a durable start: 202 with its receipt, or, when wait
// is set and the run ends within it, 200 with the run.
func (s *server) answerStart(w http.ResponseWriter, r *http.Request, rc startReceipt, wait time.Duration) {
	if wait > 0 && rc.RunID != "" {
		s.waitRun(r, rc.RunID, wait)
		if run, ok, err := s.rt.engine.find(r.Context(), rc.RunID); err == nil && ok && terminal(run.Status) {
			writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "run": run})
			return
		}
	}
	writeJSON(w, http.StatusAccepted, rc)
}

// rerunBody is the body of POST /api/runs/{runId}/rerun; empty: run again
// from the start.
type rerunBody struct {
	FromStep int `json:"fromStep"` // retry from this step, reusing the outcomes of the ones before it
}

// handleRerun is POST /api/runs/{runId}/rerun: a new run of the run's
// workflow with its input (engine_rerun.go), answered as a start is
// (?wait=, Idempotency-Key).
func (s *server) handleRerun(w http.ResponseWriter, r *http.Request) {
	wait, ok := parseWait(w, r)
	if !ok {
		return
	}
	body, err := readBody(r)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_body", Message: err.Error()})
		return
	}
	var b rerunBody
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: `want {"fromStep": N} or an empty body: ` + err.Error()})
			return
		}
		if b.FromStep < 0 {
			writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_step", Message: "fromStep must be a step number, 1 or more"})
			return
		}
	}
	trigger := triggerHTTP
	if r.Header.Get(triggerHeader) == triggerCLI {
		trigger = triggerCLI
	}
	rc, err := s.rt.engine.rerun(r.Context(), rerunRequest{RunID: r.PathValue("runId"), FromStep: b.FromStep, Trigger: trigger,
		IdemKey: r.Header.Get(idemKeyHeader), TraceParent: otelRequestParent(r.Context())})
	if errors.Is(err, errRunNotFound) {
		writeAPIError(w, http.StatusNotFound, apiError{Code: "run_not_found", Message: "run " + r.PathValue("runId") + " not found"})
		return
	}
	var se *startError
	if errors.As(err, &se) || errors.Is(err, errJournalUnavailable) || errors.Is(err, errJournalOutcomeUnknown) {
		s.writeStartError(w, err)
		return
	}
	if s.historyFailed(w, "rerun", err) { // reading the run it reruns
		return
	}
	s.answerStart(w, r, rc, wait)
}

// writeStartError maps a start failure to its status (DESIGN §4).
func (s *server) writeStartError(w http.ResponseWriter, err error) {
	var se *startError
	if writeUnavailable(w, err) {
		return
	}
	if !errors.As(err, &se) {
		s.log.Error("start workflow", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "could not record the start"})
		return
	}
	status := map[string]int{
		"invalid_json": http.StatusBadRequest, "schema_validation": http.StatusUnprocessableEntity,
		"workflow_not_found": http.StatusNotFound, "gate_closed": http.StatusServiceUnavailable,
		"workflow_compile_failed": http.StatusServiceUnavailable,
		"invalid_idempotency_key": http.StatusBadRequest, "invalid_concurrency_key": http.StatusBadRequest, "idempotency_key_reused": http.StatusUnprocessableEntity,
		"invalid_step": http.StatusBadRequest, "step_not_reusable": http.StatusConflict, "rerun_unsupported": http.StatusConflict, "too_large": http.StatusRequestEntityTooLarge,
	}[se.Code]
	msg := se.Message
	if se.Code == "gate_closed" {
		msg += ": " + gateNoProviderMessage(s.rt.apiURL) // says once that no provider is configured
	}
	writeAPIError(w, status, apiError{Code: se.Code, Message: msg, Violations: se.Violations})
}

// journalRetryAfter is the Retry-After, in seconds, of a change refused
// while the journal cannot write.
const journalRetryAfter = "5"

// writeUnavailable answers 503 journal_unavailable with Retry-After when err
// is a change refused because the journal cannot write, and reports
// whether it did.
func writeUnavailable(w http.ResponseWriter, err error) bool {
	if errors.Is(err, errJournalOutcomeUnknown) {
		w.Header().Set("Retry-After", journalRetryAfter)
		writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: "outcome_unknown", Message: err.Error() +
			"; send a start again only with an Idempotency-Key (the same key answers the first start's receipt), or check first"})
		return true
	}
	if !errors.Is(err, errJournalUnavailable) {
		return false
	}
	hint := "free disk space under .svc/journal (or, on the PostgreSQL engine, check the database), then retry (the runtime recovers by itself)"
	w.Header().Set("Retry-After", journalRetryAfter)
	writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: "journal_unavailable", Message: "nothing was recorded: " + err.Error() + "; " + hint})
	return true
}

// handleListRuns serves a page of runs, newest first (filters and the
// cursor in the query: see parseRunQuery), and on the first page the queued
// triggers; nextCursor asks for the next page.
func (s *server) handleListRuns(w http.ResponseWriter, r *http.Request) {
	q, err := parseRunQuery(r.URL.Query())
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_query", Message: err.Error()})
		return
	}
	runs, queued, next, err := s.rt.engine.listRuns(r.Context(), q)
	if s.historyFailed(w, "list runs", err) {
		return
	}
	body := map[string]any{"schema_version": schemaVersion, "items": orEmpty(runs), "queued": orEmpty(queued)}
	if q.Summary {
		items := make([]runSummary, len(runs))
		for i := range runs {
			items[i] = runSummaryOf(&runs[i])
		}
		body["items"] = items
	}
	if next != nil {
		body["nextCursor"] = next.String()
	}
	writeJSON(w, http.StatusOK, body)
}

// handleRunStats serves GET /api/runs/stats: the overview of the runs
// created since ?since= (default 1h), in buckets of ?bucket= (workflow_stats.go).
func (s *server) handleRunStats(w http.ResponseWriter, r *http.Request) {
	q, err := parseRunStatsQuery(r.URL.Query(), time.Now())
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_query", Message: err.Error()})
		return
	}
	st, err := s.rt.engine.runStats(r.Context(), q)
	if s.historyFailed(w, "run stats", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "stats": st})
}

// historyFailed answers err, when there is one, as the runtime being
// unavailable (writeUnavailable) or as 503 history_unavailable (logged as
// what), and reports whether it answered.
func (s *server) historyFailed(w http.ResponseWriter, what string, err error) bool {
	if err == nil || writeUnavailable(w, err) {
		return err != nil
	}
	s.log.Error(what, "err", err)
	writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: "history_unavailable", Message: "could not read the run history"})
	return true
}

// orEmpty returns s, or an empty slice for nil (JSON [] rather than null).
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// handleGetRun serves one run; ?wait=30s long-polls until it is terminal.
func (s *server) handleGetRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("runId")
	wait, ok := parseWait(w, r)
	if !ok {
		return
	}
	s.waitRun(r, id, wait)
	run, ok, err := s.rt.engine.find(r.Context(), id)
	if s.historyFailed(w, "get run", err) {
		return
	}
	if !ok {
		writeAPIError(w, http.StatusNotFound, apiError{Code: "run_not_found", Message: "run " + id + " not found"})
		return
	}
	if run.Agent == "" && s.rt.engine.rerunsStarted() {
		reruns, _, _, err := s.rt.engine.listRuns(r.Context(), runQuery{RerunOf: run.RunID, Summary: true, Limit: runRerunsShown})
		if s.historyFailed(w, "get run", err) {
			return
		}
		for _, rr := range reruns {
			run.Reruns = append(run.Reruns, rr.RunID)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "run": run})
}

// runRerunsShown bounds the reruns GET /api/runs/{runId} names; the rest
// are on GET /api/runs?rerunOf=.
const runRerunsShown = 20

// handleCancelRun cancels an active run.
func (s *server) handleCancelRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.rt.engine.cancelRun(r.PathValue("runId"))
	if errors.Is(err, errRunNotFound) {
		writeAPIError(w, http.StatusNotFound, apiError{Code: "run_not_found", Message: "run " + r.PathValue("runId") + " not found"})
		return
	}
	if writeUnavailable(w, err) {
		return
	}
	if errors.Is(err, errRunEnded) {
		writeAPIError(w, http.StatusConflict, apiError{Code: "run_ended", Message: fmt.Sprintf("run %s has already ended (%s): there is nothing to cancel", run.RunID, run.Status)})
		return
	}
	if err != nil {
		s.log.Error("cancel run", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "could not record the cancellation"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "run": run})
}

// handleResumeHook delivers the JSON body to the run waiting on the token.
func (s *server) handleResumeHook(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeAPIError(w, http.StatusRequestEntityTooLarge, apiError{Code: "too_large", Message: err.Error()})
		return
	}
	if len(body) == 0 {
		body = []byte("null")
	}
	if err := edgeJSON.check(body); err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: "hook payload is not acceptable JSON: " + err.Error()})
		return
	}
	runID, err := s.rt.engine.resumeHook(r.PathValue("token"), body)
	switch {
	case errors.Is(err, errHookNotFound):
		writeAPIError(w, http.StatusNotFound, apiError{Code: "hook_not_found", Message: "no run waits on this hook token"})
	case errors.Is(err, errHookUsed):
		writeAPIError(w, http.StatusConflict, apiError{Code: "hook_used", Message: err.Error()})
	case writeUnavailable(w, err):
	case err != nil:
		s.log.Error("resume hook", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "could not record the resume"})
	default:
		writeJSON(w, http.StatusAccepted, map[string]any{"schema_version": schemaVersion, "runId": runID})
	}
}

// streamKeepalive is how often an idle run stream sends a comment line, so
// proxies keep it open and a reader sees the connection is alive.
const streamKeepalive = 15 * time.Second

// handleRunStream serves a run's stream (engine_stream.go) as server-sent
// events: each entry after Last-Event-ID (or ?after=N; from the start
// without either) as `id: <index>` with event `chunk` (its data the entry,
// with superseded: true when its attempt is already known to have been
// retried) or `superseded` (an attempt's chunks are superseded from now
// on); live while the run is active, and once it has ended an `end` event
// with its status, after which the stream closes.
func (s *server) handleRunStream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("runId")
	after, err := streamResumePoint(r)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_last_event_id", Message: err.Error()})
		return
	}
	page, err := s.rt.engine.streamRead(r.Context(), id, after)
	switch {
	case errors.Is(err, errRunNotFound):
		writeAPIError(w, http.StatusNotFound, apiError{Code: "run_not_found", Message: "run " + id + " not found"})
		return
	case s.historyFailed(w, "read run stream", err):
		return
	}
	sse := newWireSSE(w)
	keepalive := time.NewTicker(streamKeepalive)
	defer keepalive.Stop()
	for {
		for _, en := range page.Entries {
			if en.Kind == streamSuperseded {
				sse.sendEvent(strconv.Itoa(en.Index), streamSuperseded, en)
				continue
			}
			sse.sendEvent(strconv.Itoa(en.Index), "chunk", streamEvent{streamEntry: en, Superseded: page.Superseded[streamAttemptKey(en.Seq, en.Attempt)]})
		}
		if n := len(page.Entries); n > 0 {
			after = page.Entries[n-1].Index
		}
		if page.Ended {
			sse.send("end", map[string]string{"runId": id, "status": page.Status})
			return
		}
		select {
		case <-page.Wake:
		case <-page.Done:
		case <-keepalive.C:
			sse.comment("keepalive")
		case <-page.Stop:
			return // svc is stopping: the reader reconnects with Last-Event-ID
		case <-s.rt.stopping:
			return // likewise, and the server's shutdown need not wait for it
		case <-r.Context().Done():
			return
		}
		if page, err = s.rt.engine.streamRead(r.Context(), id, after); err != nil {
			return // the reader reconnects and is told why
		}
	}
}

// streamEvent is a chunk as the stream's SSE data carries it.
type streamEvent struct {
	streamEntry
	Superseded bool `json:"superseded,omitempty"`
}

// streamResumePoint reads where a stream reader resumes: the index of the
// last entry it has (Last-Event-ID, else ?after=), 0 for the start.
func streamResumePoint(r *http.Request) (int, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("Last-Event-ID (or after) is %q: want the id of the last event received, a whole number", truncateForMessage(v))
	}
	return n, nil
}
