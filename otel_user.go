package main

// The spans of user code's outbound calls (docs/operations.md "OpenTelemetry"): fetch
// (which sends its traceparent on), sql statements and storage requests
// made by a step attempt are client spans, children of the attempt's span.
// The VM's loop carries what they are traced under (jsLoop.trace), set for
// the attempt that uses the VM.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// otelUserTrace is what user code's calls are traced under: the tracer and
// the span of the step attempt using the VM. The zero value traces
// nothing.
type otelUserTrace struct {
	t      *otelTracer
	parent otelContext
}

// client begins a client span under u's parent; nil when u traces nothing.
func (u otelUserTrace) client(name string, attrs ...otelAttr) *otelLive {
	if u.t == nil || !u.parent.valid() {
		return nil
	}
	_, l := u.t.start(context.Background(), u.parent, name, otelKindClient, attrs...)
	return l
}

// fetch begins the span of a fetch and sends its traceparent on with req
// (unless user code set one); end finishes it with the response's status,
// or the failure.
func (u otelUserTrace) fetch(req *http.Request) (end func(*http.Response, error)) {
	l := u.client(req.Method, otelString("http.request.method", req.Method), otelString("url.full", otelRedactURL(req.URL)),
		otelString("server.address", req.URL.Hostname()))
	if l != nil && req.Header.Get("traceparent") == "" {
		req.Header.Set("traceparent", l.context().traceparent())
	}
	return l.endHTTP
}

// endHTTP finishes the span of an outbound HTTP request with its answer's
// status (4xx and 5xx are failures, as for any client span) or its failure.
func (l *otelLive) endHTTP(resp *http.Response, err error) {
	if resp != nil {
		l.set(otelInt("http.response.status_code", int64(resp.StatusCode)))
		if resp.StatusCode >= 400 {
			err = fmt.Errorf("%w: HTTP %d", errOTelStatus, resp.StatusCode)
		}
	}
	l.end(err)
}

// sql begins the span of a statement: named by its operation (its first
// keyword), with its text (parameters are never part of it).
func (u otelUserTrace) sql(text string) *otelLive {
	op := "sql"
	if f := strings.Fields(text); len(f) > 0 {
		op = strings.ToUpper(f[0])
	}
	return u.client(op, otelString("db.system.name", "postgresql"), otelString("db.operation.name", op), otelString("db.query.text", text))
}

// otelUserKey keys an otelUserTrace in a context.Context (storage
// requests run on goroutines of their own).
type otelUserKey struct{}

// withContext returns ctx carrying u.
func (u otelUserTrace) withContext(ctx context.Context) context.Context {
	if u.t == nil {
		return ctx
	}
	return context.WithValue(ctx, otelUserKey{}, u)
}

// otelStorage begins the span of a storage request made under ctx (ended
// by endHTTP).
func otelStorage(ctx context.Context, op, key string) *otelLive {
	u, _ := ctx.Value(otelUserKey{}).(otelUserTrace)
	return u.client("storage "+op, otelString("svc.storage.operation", op), otelString("svc.storage.key", key))
}

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
