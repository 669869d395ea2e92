package main

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// maxRequestBody bounds every JSON request body (workflow input, chat turns).
const maxRequestBody = 4 << 20

// route is one entry of the routing table: registered on the mux and
// advertised in the contract.
type route struct {
	method, path, purpose string
	handler               http.HandlerFunc
}

// server is the HTTP surface of a runtime, whichever host runs it. It owns
// its ServeMux and the guard in front of it (http_guard.go).
type server struct {
	rt    *runtimeCore
	log   *slog.Logger
	mux   *http.ServeMux
	guard *httpGuard
}

// newServer builds the server for rt: the shared routes, then the host's
// own (dev's, the box's), all behind one guard built from guard.
func newServer(rt *runtimeCore, guard httpGuardConfig, hostRoutes []route) (*server, error) {
	if rt.metrics == nil { // a runtime built by hand (tests)
		rt.metrics = newMetrics()
	}
	s := &server{rt: rt, log: rt.log, mux: http.NewServeMux()}
	for _, r := range append(routeTable(s), hostRoutes...) {
		s.mux.HandleFunc(r.method+" "+r.path, r.handler)
	}
	// Anything else under a wire's prefix answers in that wire's error shape.
	for _, p := range wireFallbackPatterns() {
		s.mux.HandleFunc(p, s.handleWireUnknown)
	}
	guard.Access = true
	var err error
	if s.guard, err = newHTTPGuard(s.mux, guard); err != nil {
		return nil, err
	}
	return s, nil
}

// routeTable is the one list of the routes every host serves. s may be
// nil when only the description is needed (the contract).
func routeTable(s *server) []route {
	return []route{
		{"GET", "/api/contract", "the contract the CLI advertises (same payload as `svc dev --print-contract`)", s.handleContract},
		{"GET", healthLivePath, "liveness for a load balancer or an orchestrator: 200 {\"live\":true} while the process serves; no credential, nothing else said", s.handleLive},
		{"GET", healthReadyPath, "readiness: 200 {\"ready\":true} when the journal, PostgreSQL, object storage and (PostgreSQL engine) this replica's lease are fine, else 503 {\"ready\":false}; no credential, nothing else said", s.handleReady},
		{"GET", "/api/health", "health and identity of the running runtime: project_dir, local_dev_installation_id, gate; each part's state: journal, postgres, storage, model_gate (503 when the journal, PostgreSQL or object storage is down)", s.handleHealth},
		{"PUT", "/api/settings/model-provider", "store a model-provider credential (encrypted); opens a closed boot gate", s.handleStoreProvider},
		{"GET", "/api/workflows", "list workflows (what `svc workflows list` prints)", s.handleListWorkflows},
		{"GET", "/api/workflows/{name}/schema", "a workflow's input and output JSON Schemas", s.handleWorkflowSchema},
		{"POST", "/api/workflows/{name}/start", "start a durable run; body = input JSON (empty = {}); 202 + receipt; ?wait=30s: 200 + the run once it ended", s.handleStartWorkflow},
		{"GET", "/api/runs/stats", "the overview of the runs created since ?since= (an RFC 3339 time or an age, default 1h) in buckets of ?bucket= (default a 60th of the range): counts by status a bucket, each workflow's runs, failure rate and p50/p95 duration, what is active now, the top errors", s.handleRunStats},
		{"GET", "/api/runs", "run records, newest first, and the starts queued behind a concurrency limit; ?workflow, status (several, comma-separated), trigger, agent, session (an agent's durable session), rerunOf (the reruns of a run), since, until, q (text of input, output or error), view=summary, limit, cursor; any other parameter is 400", s.handleListRuns},
		{"GET", "/api/runs/{runId}", "one run with its step timeline; ?wait=30s long-polls until terminal", s.handleGetRun},
		{"POST", "/api/runs/{runId}/cancel", "cancel an active run", s.handleCancelRun},
		{"POST", "/api/runs/{runId}/rerun", `a new run of the run's workflow with its input, linked by rerunOf; {"fromStep": N} reuses the outcomes of the steps before N; answered as a start`, s.handleRerun},
		{"GET", "/api/runs/{runId}/stream", "the chunks a run's steps wrote (getWritable()) as server-sent events, live, from Last-Event-ID", s.handleRunStream},
		{"GET", "/api/schedules", "the workflows' schedules: cron, timezone, overlap, catchUp, dst, paused, nextFires, lastFire, lastRun", s.handleListSchedules},
		{"POST", "/api/schedules/{workflow}/pause", "pause a workflow's schedule, durably (fires while paused are dropped); 404 schedule_not_found", s.handlePauseSchedule},
		{"POST", "/api/schedules/{workflow}/resume", "resume a paused schedule from its next fire; 404 schedule_not_found", s.handleResumeSchedule},
		{"POST", "/api/hooks/{token}", "resume a workflow waiting on createHook() with the JSON body", s.handleResumeHook},
		{"POST", "/openai/v1/chat/completions", "chat-completions wire (OpenAI shape); model = agent name; stream: true = SSE chunks ending data: [DONE]", s.handleOpenAIChat},
		{"POST", "/openai/v1/responses", "OpenAI Responses API; model = agent name; stream: true = Responses SSE events; previous_response_id continues a kept response", s.handleOpenAIResponses},
		{"GET", "/openai/v1/responses/{id}", "a kept response as it was answered, for the credential that made it; 404 unknown, deleted or past SVC_RESPONSE_RETENTION", s.handleOpenAIResponse},
		{"DELETE", "/openai/v1/responses/{id}", "deletes a kept response of the credential (responses continuing it keep their conversation); 404 unknown", s.handleOpenAIResponse},
		{"GET", "/openai/v1/models", "the agents as models (OpenAI list shape)", s.handleOpenAIModels},
		{"GET", "/openai/v1/models/{model}", "one agent as a model (OpenAI shape)", s.handleOpenAIModel},
		{"POST", "/anthropic/v1/messages", "messages wire (Anthropic shape); model = agent name; stream: true = Anthropic SSE events", s.handleAnthropicMessages},
		{"GET", "/anthropic/v1/models", "the agents as models (Anthropic list shape)", s.handleAnthropicModels},
		{"GET", "/anthropic/v1/models/{model}", "one agent as a model (Anthropic shape)", s.handleAnthropicModel},
		{"POST", "/agui/{agent}", "agent-UI wire: AG-UI RunAgentInput body, SSE of AG-UI events; threadId = durable session", s.handleAGUI},
		{"GET", "/api/agents/{agent}/sessions/{id}", "a durable session's transcript for its credential: user messages, assistant text, tool calls with results, pending calls; ?limit=1-500 (default 100), ?cursor= pages back; 404 unknown", s.handleGetSession},
		{"POST", "/chat", "the agent-UI wire with the agent named in forwardedProps.agent (the console's chat)", s.handleChat},
		{"POST", "/mcp", "MCP for coding agents (streamable HTTP, JSON answers): workflows, runs, hooks, agents as tools", s.handleMCP},
		{"GET", "/mcp", "405: MCP without server-initiated streams", s.handleMCPGet},
		{"GET", metricsPath, "the runtime's metrics in the Prometheus text format (docs/operations.md \"Metrics\")", s.handleMetrics},
		{"GET", "/", "the web console: index.html, its files under /console/", consoleHandler("")},
	}
}

// ServeHTTP serves a request through the guard and the mux, logging it
// when verbose.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	w, r, traced := s.otelRequest(w, r)
	mw := &metricsResponse{ResponseWriter: w, m: s.rt.metrics}
	defer mw.served(r, start)
	if strings.HasPrefix(r.URL.Path, fleetRPCPath) && s.rt.engine != nil {
		s.handleFleetCall(mw, r) // its own credential: the fleet's token (api_fleet.go)
	} else {
		s.guard.ServeHTTP(mw, r)
	}
	traced()
	s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "dur", time.Since(start))
}

// Limits of both HTTP servers against slow or greedy clients (issue 8);
// request bodies are paced by the guard (httpGuardBodyMinRate).
const (
	// httpReadHeaderTimeout bounds the wait for a request's headers.
	httpReadHeaderTimeout = 10 * time.Second
	// httpIdleTimeout closes a keep-alive connection idle this long.
	httpIdleTimeout = 60 * time.Second
	// httpMaxHeaderBytes bounds a request's headers (larger: 431).
	httpMaxHeaderBytes = 64 << 10
)

// newHTTPServer wraps h in an http.Server with explicit limits: headers
// must arrive promptly and be small, idle connections are closed, and
// bodies are paced by the guard in h. There is no ReadTimeout (a large
// upload that keeps making progress must finish) and no WriteTimeout:
// responses stream for as long as a model answers or a long poll waits.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout, IdleTimeout: httpIdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes,
		ConnContext: httpPeerConnContext}
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// apiError is the error body of the runtime's own routes (DESIGN §4).
type apiError struct {
	Code       string            `json:"code"`
	Message    string            `json:"message"`
	Violations []schemaViolation `json:"violations,omitempty"`
}

// writeAPIError answers {"error":{"code","message"}} with status.
func writeAPIError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, map[string]apiError{"error": e})
}

// errBodyTooLarge is returned by readBody past maxRequestBody.
var errBodyTooLarge = errors.New("request body too large")

// readBody reads at most maxRequestBody bytes of r's body.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRequestBody {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// handleContract serves the contract payload.
func (s *server) handleContract(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(contractPayload())
}

// handleHealth tells CLI verbs that this runtime is up and which project it serves.
func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	jh := s.rt.engine.journalHealth()
	storage := make(chan partHealth, 1) // checked beside PostgreSQL: each is bounded
	go func() { storage <- s.rt.storageHealth(r.Context()) }()
	pg := s.rt.databaseHealth(r.Context())
	st := <-storage
	status := http.StatusOK
	if jh.State != "ok" || pg.State != "ok" || st.State != "ok" {
		status = http.StatusServiceUnavailable
	}
	installation := "" // a project that is not linked has none
	if s.rt.proj.Link != nil {
		installation = s.rt.proj.Link.LocalDevInstallationID
	}
	writeJSON(w, status, map[string]any{"ok": status == http.StatusOK, "project_dir": s.rt.proj.Dir,
		"local_dev_installation_id": installation, "gate": s.rt.gateState(), "journal": jh, "engine": s.rt.engine.storeHealth(), "postgres": pg,
		"storage": st, "model_gate": s.rt.gateHealth()})
}

// The probes' paths (issue 38, item D): a box's /api/health needs a
// credential, which no load balancer or Kubernetes probe has; these answer
// anyone, and say nothing but yes or no.
const (
	healthLivePath  = "/api/live"
	healthReadyPath = "/api/ready"
)

// healthProbe reports whether r is a probe: GET or HEAD of healthLivePath
// or healthReadyPath, which the guards admit without a credential.
func healthProbe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == healthLivePath || r.URL.Path == healthReadyPath)
}

// handleLive serves healthLivePath: this process serves.
func (s *server) handleLive(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]bool{"live": true})
}

// handleReady serves healthReadyPath: 200 when every part /api/health
// checks is ok and, on the PostgreSQL engine, this replica holds its lease;
// else 503 with Retry-After. The parts are in /api/health, for a caller
// with a credential.
func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
	storage := make(chan partHealth, 1)
	go func() { storage <- s.rt.storageHealth(r.Context()) }()
	pg := s.rt.databaseHealth(r.Context())
	st := <-storage
	eng := s.rt.engine.storeHealth()
	ready := s.rt.engine.journalHealth().State == "ok" && pg.State == "ok" && st.State == "ok" && (eng.Kind != engineKindPostgres || eng.Lease == engineLeaseHeld)
	w.Header().Set("Cache-Control", "no-store")
	if !ready {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]bool{"ready": false})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
}

// handleStoreProvider stores a model-provider credential and opens the gate.
func (s *server) handleStoreProvider(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeAPIError(w, http.StatusRequestEntityTooLarge, apiError{Code: "too_large", Message: err.Error()})
		return
	}
	var p storedProvider
	if err := edgeJSON.check(body); err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: err.Error()})
		return
	}
	if err := json.Unmarshal(body, &p); err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: err.Error()})
		return
	}
	if err := p.validate(); err != nil {
		writeAPIError(w, http.StatusUnprocessableEntity, apiError{Code: "invalid_provider", Message: err.Error()})
		return
	}
	if err := s.rt.storeProvider(r.Context(), p); err != nil {
		s.log.Error("store model provider", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "could not store the credential"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"gate": s.rt.gateState()})
}
