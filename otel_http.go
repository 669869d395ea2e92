package main

// The server span of every request when trace export is on
// (docs/operations.md "OpenTelemetry"): named by its route, the child of the request's W3C
// traceparent when it carries a valid one. A run started by a request that
// carried one is the child of this span (otelRequestParent).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// otelRemoteKey marks a request context whose server span continues the
// caller's trace.
type otelRemoteKey struct{}

// otelRequest begins the server span of r. It returns the writer and the
// request to serve with, and the function that ends the span.
func (s *server) otelRequest(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	if s.rt == nil || s.rt.tracer == nil {
		return w, r, func() {}
	}
	parent, remote := otelParseTraceparent(r.Header.Get("traceparent"))
	route := ""
	if _, pattern := s.mux.Handler(r); pattern != "" {
		route = pattern
		if method, path, ok := strings.Cut(pattern, " "); ok && method == r.Method {
			route = path
		}
	}
	ctx, live := s.rt.tracer.start(r.Context(), parent, r.Method, otelKindServer,
		otelString("http.request.method", r.Method), otelString("url.path", otelRedactRoutePath(route, r.URL.Path)))
	if remote {
		ctx = context.WithValue(ctx, otelRemoteKey{}, true)
	}
	sw := &otelStatusWriter{ResponseWriter: w, status: http.StatusOK}
	return sw, r.WithContext(ctx), func() {
		if route != "" {
			live.span.Name = r.Method + " " + route
			live.set(otelString("http.route", route))
		}
		live.set(otelInt("http.response.status_code", int64(sw.status)))
		var err error
		if sw.status >= 500 {
			err = fmt.Errorf("%w: HTTP %d", errOTelStatus, sw.status)
		}
		live.end(err)
	}
}

// otelRequestParent is the traceparent a run started by the request of
// ctx is the child of: its server span, when the caller sent a
// traceparent; "" otherwise (the run is then the root of its own trace).
func otelRequestParent(ctx context.Context) string {
	c, ok := otelFromContext(ctx)
	if !ok || ctx.Value(otelRemoteKey{}) == nil {
		return ""
	}
	return c.traceparent()
}

// otelStatusWriter records the status a handler answers with. It flushes
// through (streamed answers) and unwraps for http.ResponseController.
type otelStatusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

// WriteHeader records the first status.
func (w *otelStatusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write answers 200 unless a status was written.
func (w *otelStatusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush sends what was written (server-sent events).
func (w *otelStatusWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap is the writer under this one.
func (w *otelStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
