package main

// The server span of every request when trace export is on (README
// "OpenTelemetry"): named by its route, the child of the request's W3C
// traceparent when it carries a valid one. A run started by a request that
// carried one is the child of this span (otelRequestParent).

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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

// otelRedacted replaces what a span must not carry (OpenTelemetry's
// semantic conventions name this value).
const otelRedacted = "REDACTED"

// otelSecretWildcards are the route wildcards that hold a secret: a hook's
// token resumes its run, so it never reaches a trace (issue 36, item 12).
var otelSecretWildcards = map[string]bool{"{token}": true}

// otelRedactRoutePath is path with the segments that route's secret
// wildcards match replaced by REDACTED; without a route (a 404), every
// segment that looks like a secret (otelRedactPath).
func otelRedactRoutePath(route, path string) string {
	if route == "" {
		return otelRedactPath(path)
	}
	rs, ps := strings.Split(route, "/"), strings.Split(path, "/")
	if len(rs) != len(ps) {
		return otelRedactPath(path)
	}
	for i, seg := range rs {
		if otelSecretWildcards[seg] {
			ps[i] = otelRedacted
		}
	}
	return strings.Join(ps, "/")
}

// otelRedactPath replaces each segment of path that looks like a secret
// (a webhook's token or id: 8 or more characters with a digit among them,
// or 20 or more of any kind) by REDACTED.
func otelRedactPath(path string) string {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if len(seg) >= 20 || (len(seg) >= 8 && strings.ContainsAny(seg, "0123456789")) {
			segs[i] = otelRedacted
		}
	}
	return strings.Join(segs, "/")
}

// otelRedactURL is u as a client span records it in url.full: credentials
// as REDACTED:REDACTED (the semantic conventions' form), the path through
// otelRedactPath, every query value REDACTED (the conventions name
// AWSAccessKeyId, Signature, sig and X-Goog-Signature; any other may be a
// key too), no fragment.
func otelRedactURL(u *url.URL) string {
	shown := url.URL{Scheme: u.Scheme, Host: u.Host, Path: otelRedactPath(u.Path)}
	if u.User != nil {
		shown.User = url.UserPassword(otelRedacted, otelRedacted)
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k, vs := range q {
			for i := range vs {
				vs[i] = otelRedacted
			}
			q[k] = vs
		}
		shown.RawQuery = q.Encode()
	}
	return shown.String()
}
