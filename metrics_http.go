package main

// GET /metrics (docs/operations.md "Metrics"): the runtime's metrics in the Prometheus
// text format, behind the guard like every route (svc dev: a key, a
// console session or the developer's own account; the box: an identity
// token, the control plane's signature, or a key of SVC_API_KEYS, the
// static bearer a scraper sends). The server records every request it
// answers through metricsResponse: the chat wires' requests and latency,
// open event streams, and what came through the tunnel or the control
// plane's proxy.

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// metricsPath is the route of the exposition.
const metricsPath = "/metrics"

// metricsScrapeRequest reports whether r asks for the exposition.
func metricsScrapeRequest(r *http.Request) bool {
	return r.URL.Path == metricsPath && (r.Method == http.MethodGet || r.Method == http.MethodHead)
}

// handleMetrics writes the exposition: the recorded families and the
// gauges read now (serial queues, active runs, the PostgreSQL engine's
// lease and partitions).
func (s *server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	sc := metricsScrape{Queues: s.rt.engine.queueDepths(), Store: s.rt.engine.storeHealth(), Active: s.rt.engine.activeByStatus()}
	if cat := s.rt.catalog.Load(); cat != nil {
		for name, def := range cat.Workflows {
			if _, ok := sc.Queues[name]; def.Concurrency.limited() && !ok {
				sc.Queues[name] = 0
			}
		}
	}
	w.Header().Set("Content-Type", metricsContentType)
	w.Header().Set("Cache-Control", "no-store")
	if err := s.rt.metrics.write(w, sc); err != nil {
		s.log.Debug("write metrics", "err", err)
	}
}

// metricsResponse is the response writer a server hands its guard: it
// notes the final status and counts an event stream open from its header
// to the end of the request. Flush and Unwrap keep streaming and
// http.ResponseController working through it.
type metricsResponse struct {
	http.ResponseWriter
	m      *metrics
	status int  // the final status written; 0 before
	stream bool // a text/event-stream answer, counted in sseOpen
}

// WriteHeader notes the first final status and whether it starts a stream.
func (w *metricsResponse) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		if code == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			w.stream = true
			w.m.sseOpen.with().add(1)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes body bytes, after an implicit 200.
func (w *metricsResponse) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush sends what was written, after an implicit 200.
func (w *metricsResponse) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the connection's writer (http.ResponseController).
func (w *metricsResponse) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// served records the request r answered through w, begun at start: a
// chat wire's request and duration, the end of an event stream, a request
// of the tunnel or of the control plane's proxy.
func (w *metricsResponse) served(r *http.Request, start time.Time) {
	m := w.m
	status := w.status
	if status == 0 { // nothing written: net/http answers 200
		status = http.StatusOK
	}
	code := strconv.Itoa(status)
	if w.stream {
		m.sseOpen.with().add(-1)
	}
	if wire := metricsWire(r); wire != "" {
		m.chatRequests.with(wire, code).inc()
		m.chatDuration.with(wire).observeSince(start)
	}
	if httpGuardVouched(r) {
		m.tunnel.with(code).inc()
	}
	if boxSigned(r) {
		m.proxy.with(code).inc()
	}
}

// metricsWire names the chat wire a request is a turn of, "" for any
// other request. The label comes from this fixed list, never from the
// path.
func metricsWire(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	switch p := r.URL.Path; {
	case p == "/openai/v1/chat/completions":
		return wireOpenAI
	case p == "/openai/v1/responses":
		return wireOpenAIResponses
	case p == "/anthropic/v1/messages":
		return wireAnthropic
	case p == "/chat", strings.HasPrefix(p, "/agui/"):
		return wireAGUI
	}
	return ""
}
