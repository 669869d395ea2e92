package main

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// otelTestSpan is a valid finished span for the exporter tests.
func otelTestSpan(i int) *otelSpan {
	now := time.Now()
	return &otelSpan{Ctx: otelContext{Trace: otelTraceOf("t"), Span: otelSpanID("s", string(rune(i)))}, Name: "x", Kind: otelKindInternal, Start: now, End: now}
}

// TestOTelExportCollectorDown: with the collector refusing connections,
// and then with one that accepts a request and never answers, emitting
// spans never blocks (a blocking emit would hang this test, not slow it):
// what does not fit in the queue or does not arrive is dropped and
// counted, and every span is either exported or counted dropped.
func TestOTelExportCollectorDown(t *testing.T) {
	const n = 5000
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/v1/traces"
	ln.Close()
	tr := newOTelTracer(otelSettings{URL: down}, log)
	for i := range n {
		tr.emit(otelTestSpan(i))
	}
	tr.close(context.Background())
	if exported, dropped := tr.counts(); exported != 0 || dropped != n {
		t.Fatalf("collector down: exported %d, dropped %d; want 0 and %d", exported, dropped, n)
	}

	release := make(chan struct{})
	got := make(chan string, 16)
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type") + " " + r.Header.Get("X-Team")
		<-release
	}))
	defer hung.Close()
	tr = newOTelTracer(otelSettings{URL: hung.URL + "/v1/traces", Headers: http.Header{"X-Team": {"blue"}}}, log)
	tr.client = &http.Client{} // no timeout: the request hangs until release
	tr.emit(otelTestSpan(0))
	// The exporter is now stuck in a request that does not answer.
	if req := <-got; req != "POST /v1/traces application/json blue" {
		t.Errorf("the export request was %q; want POST /v1/traces, Content-Type application/json and the configured header", req)
	}
	emitted := make(chan struct{})
	go func() {
		for i := 1; i < n; i++ {
			tr.emit(otelTestSpan(i))
		}
		close(emitted)
	}()
	select {
	case <-emitted:
	case <-time.After(time.Minute): // a bound against a hang, not a measure
		close(release)
		t.Fatal("emit blocked while the collector did not answer")
	}
	_, dropped := tr.counts()
	if min := uint64(n - 1 - otelQueueSize - otelBatchSize); dropped < min {
		t.Fatalf("with the collector hanging, %d spans were dropped; want at least %d (queue %d, batch %d)", dropped, min, otelQueueSize, otelBatchSize)
	}
	close(release)
	tr.close(context.Background())
	exported, dropped := tr.counts()
	if exported+dropped != n || exported == 0 {
		t.Fatalf("exported %d + dropped %d != %d emitted (or nothing exported once the collector answered)", exported, dropped, n)
	}
}

// TestOTelSettings reads the standard variables as the OpenTelemetry SDKs
// do, and refuses what cannot be used, naming the variable.
func TestOTelSettings(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	s, err := readOTelSettings(env(map[string]string{}))
	if err != nil || s.URL != "" {
		t.Fatalf("unset: %+v %v; want export off", s, err)
	}
	s, err = readOTelSettings(env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc, x-team = blue",
		"OTEL_SERVICE_NAME": "shop", "OTEL_RESOURCE_ATTRIBUTES": "service.name=ignored,deployment.environment=prod%2Ceu",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.URL != "http://collector:4318/v1/traces" || s.Headers.Get("Authorization") != "Bearer abc" || s.Headers.Get("X-Team") != "blue" {
		t.Fatalf("endpoint or headers: %+v", s)
	}
	attrs := map[string]string{}
	for _, a := range s.Resource {
		attrs[a.Key] = *a.Value.String
	}
	if attrs["service.name"] != "shop" || attrs["deployment.environment"] != "prod,eu" {
		t.Fatalf("resource: %v", attrs)
	}
	s, _ = readOTelSettings(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/custom"}))
	if s.URL != "https://b/custom" {
		t.Fatalf("the traces endpoint is used as is: %q", s.URL)
	}
	for k, v := range map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"} {
		m := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://ok:4318", k: v}
		if _, err := readOTelSettings(env(m)); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%q: err %v; want one naming the variable", k, v, err)
		}
	}
}

// TestOTelIDs: a run's trace id is the 128 bits of its traceId, and
// traceparent values round-trip and refuse malformed ones.
func TestOTelIDs(t *testing.T) {
	id := otelTraceOf("wrun_00000000000000000000000001")
	if hex.EncodeToString(id[:]) != "00000000000000000000000000000001" {
		t.Fatalf("trace id of a ULID: %x", id)
	}
	w := newWorldRunID()
	if a, b := otelTraceOf(w), otelTraceOf(w); a != b || a == ([16]byte{}) {
		t.Fatalf("trace id of %s not stable: %x %x", w, a, b)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c, ok := otelParseTraceparent(tp)
	if !ok || c.traceparent() != tp {
		t.Fatalf("parse %s: %v %s", tp, ok, c.traceparent())
	}
	for _, bad := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "00-xyz"} {
		if _, ok := otelParseTraceparent(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestOTelRedact checks what spans record of URLs (issue 36, item 12):
// credentials, query values and secret-looking path segments of an
// outgoing URL are REDACTED; a route's {token} is, and nothing else of it.
func TestOTelRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pw@hooks.example.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx?x=1#frag": "https://REDACTED:REDACTED@hooks.example.com/services/REDACTED/REDACTED/REDACTED?x=REDACTED",
		"https://api.example.com/v1/users/me":                        "https://api.example.com/v1/users/me",
		"https://s3.example.com/b/k?AWSAccessKeyId=AKIA&Signature=x": "https://s3.example.com/b/k?AWSAccessKeyId=REDACTED&Signature=REDACTED",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := otelRedactURL(u); got != want {
			t.Errorf("otelRedactURL(%s) = %s; want %s", in, got, want)
		}
	}
	if got := otelRedactRoutePath("/api/hooks/{token}", "/api/hooks/abc"); got != "/api/hooks/REDACTED" {
		t.Errorf("a hook's path = %s", got)
	}
	if got := otelRedactRoutePath("/api/workflows/{name}/start", "/api/workflows/order2024x/start"); got != "/api/workflows/order2024x/start" {
		t.Errorf("a workflow's path = %s; want it kept (its route names no secret)", got)
	}
}
