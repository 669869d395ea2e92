package main

// OpenTelemetry trace export (docs/operations.md "OpenTelemetry"): spans go to an
// OTLP/HTTP collector as JSON (POST <endpoint>/v1/traces, Content-Type
// application/json), written here on the standard library. Export never
// slows or breaks a run: spans wait in a bounded queue, leave in batches
// from one goroutine, and whatever does not fit or does not arrive is
// dropped and counted. Off (a nil *otelTracer, whose methods do nothing)
// unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the exporter.
const (
	otelQueueSize     = 2048                   // spans waiting for export; more are dropped
	otelBatchSize     = 512                    // spans per request at most
	otelBatchDelay    = 500 * time.Millisecond // a partial batch leaves after this
	otelExportTimeout = 5 * time.Second        // one request, including a slow collector
	otelCloseTimeout  = 2 * time.Second        // how long shutdown waits for the last spans
	otelMaxAttrValue  = 1024                   // bytes of a string attribute kept
)

// Span kinds of OTLP (SpanKind).
const (
	otelKindInternal = 1
	otelKindServer   = 2
	otelKindClient   = 3
)

// otelSettings is the trace export the environment asks for.
type otelSettings struct {
	URL      string      // the traces endpoint; "" turns export off
	Headers  http.Header // sent with every export request
	Resource []otelAttr  // service.name first
}

// readOTelSettings reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is),
// OTEL_EXPORTER_OTLP_ENDPOINT (its /v1/traces), OTEL_EXPORTER_OTLP_HEADERS
// and OTEL_EXPORTER_OTLP_TRACES_HEADERS, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES: the one place they are read. A value that
// cannot be used is an error naming the variable.
func readOTelSettings(getenv func(string) string) (otelSettings, error) {
	var s otelSettings
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); v != "" {
		s.URL = v
	} else if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); v != "" {
		s.URL = strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	if s.URL == "" {
		return s, nil
	}
	if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is %q: it must be an http:// or https:// URL of an OTLP/HTTP collector, such as http://localhost:4318",
			truncateForMessage(s.URL))
	}
	s.Headers = http.Header{}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		pairs, err := otelParseList(getenv(name))
		if err != nil {
			return s, fmt.Errorf("%s: %v: write it as key=value pairs separated by commas, values percent-encoded", name, err)
		}
		for _, kv := range pairs {
			s.Headers.Set(kv[0], kv[1])
		}
	}
	pairs, err := otelParseList(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return s, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %v: write it as key=value pairs separated by commas, values percent-encoded", err)
	}
	service := "svc"
	for _, kv := range pairs {
		if kv[0] == "service.name" {
			service = kv[1]
		}
	}
	if v := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); v != "" {
		service = v
	}
	s.Resource = []otelAttr{otelString("service.name", service), otelString("telemetry.sdk.name", "svc"),
		otelString("telemetry.sdk.language", "go"), otelString("service.version", readBuildVersion().Version)}
	for _, kv := range pairs {
		if kv[0] != "service.name" {
			s.Resource = append(s.Resource, otelString(kv[0], kv[1]))
		}
	}
	return s, nil
}

// otelParseList parses the OTEL list format: key=value pairs separated by
// commas, values percent-decoded.
func otelParseList(v string) ([][2]string, error) {
	var out [][2]string
	for _, item := range strings.Split(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, val, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", truncateForMessage(item))
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("the value of %q is not percent-encoded correctly", k)
		}
		out = append(out, [2]string{k, dec})
	}
	return out, nil
}

// otelAttr is one span or resource attribute; exactly one value is set.
type otelAttr struct {
	Key   string        `json:"key"`
	Value otelAttrValue `json:"value"`
}

// otelAttrValue is OTLP's AnyValue for the types svc sends (64-bit
// integers are strings in OTLP/JSON).
type otelAttrValue struct {
	String *string `json:"stringValue,omitempty"`
	Int    *string `json:"intValue,omitempty"`
	Bool   *bool   `json:"boolValue,omitempty"`
}

// otelString is a string attribute, cut to otelMaxAttrValue bytes.
func otelString(k, v string) otelAttr {
	if len(v) > otelMaxAttrValue {
		v = v[:otelMaxAttrValue]
	}
	return otelAttr{Key: k, Value: otelAttrValue{String: &v}}
}

// otelInt is an integer attribute.
func otelInt(k string, v int64) otelAttr {
	s := strconv.FormatInt(v, 10)
	return otelAttr{Key: k, Value: otelAttrValue{Int: &s}}
}

// otelBool is a boolean attribute.
func otelBool(k string, v bool) otelAttr {
	return otelAttr{Key: k, Value: otelAttrValue{Bool: &v}}
}

// otelContext is a W3C trace context: the span a new span is the child of.
type otelContext struct {
	Trace [16]byte
	Span  [8]byte
}

// valid reports whether c names a span (W3C: neither id all zeros).
func (c otelContext) valid() bool { return c.Trace != [16]byte{} && c.Span != [8]byte{} }

// traceparent formats c as a W3C traceparent header value (sampled).
func (c otelContext) traceparent() string {
	if !c.valid() {
		return ""
	}
	return "00-" + hex.EncodeToString(c.Trace[:]) + "-" + hex.EncodeToString(c.Span[:]) + "-01"
}

// otelParseTraceparent parses a W3C traceparent header value (version 00,
// or a later version's first four fields); ok is false for anything else.
func otelParseTraceparent(v string) (c otelContext, ok bool) {
	v = strings.TrimSpace(v)
	if len(v) < 55 || (len(v) > 55 && v[55] != '-') || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return c, false
	}
	ver := v[:2]
	if ver == "ff" || (ver == "00" && len(v) != 55) || strings.ToLower(v) != v {
		return c, false
	}
	if _, err := hex.Decode(make([]byte, 1), []byte(ver)); err != nil {
		return c, false
	}
	if _, err := hex.Decode(c.Trace[:], []byte(v[3:35])); err != nil {
		return c, false
	}
	if _, err := hex.Decode(c.Span[:], []byte(v[36:52])); err != nil {
		return c, false
	}
	if _, err := hex.Decode(make([]byte, 1), []byte(v[53:55])); err != nil {
		return c, false
	}
	return c, c.valid()
}

// otelSpanID derives a span id from parts, so that a span re-emitted by a
// replay, a restart or another replica has the same id, and children can
// name a parent that is emitted later.
func otelSpanID(parts ...string) (id [8]byte) {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	copy(id[:], sum[:8])
	if id == ([8]byte{}) {
		id[7] = 1
	}
	return id
}

// otelRandomSpanID is the id of a span nothing else needs to name ahead.
func otelRandomSpanID() (id [8]byte) {
	for id == ([8]byte{}) {
		rand.Read(id[:])
	}
	return id
}

// otelSpan is one finished span.
type otelSpan struct {
	Ctx    otelContext // its trace and its own id
	Parent [8]byte     // zero for a root span
	Name   string
	Kind   int
	Start  time.Time
	End    time.Time
	Attrs  []otelAttr
	Err    string // non-empty: status ERROR with this message
}

// otelTracer makes and exports spans. A nil *otelTracer is tracing off:
// every method does nothing.
type otelTracer struct {
	url      string
	headers  http.Header
	resource []otelAttr
	client   *http.Client
	log      *slog.Logger

	queue  chan *otelSpan
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	ctx    context.Context // of export requests; cancelled when close gives up
	cancel context.CancelFunc

	exported atomic.Uint64 // spans the collector accepted
	dropped  atomic.Uint64 // spans lost: queue full, collector down or refusing
	lastWarn atomic.Int64  // unix seconds of the last failure logged
}

// newOTelTracer starts the exporter of s, or returns nil when s turns
// export off.
func newOTelTracer(s otelSettings, log *slog.Logger) *otelTracer {
	if s.URL == "" {
		return nil
	}
	t := &otelTracer{url: s.URL, headers: s.Headers, resource: s.Resource, log: log,
		client: &http.Client{Timeout: otelExportTimeout},
		queue:  make(chan *otelSpan, otelQueueSize), stop: make(chan struct{}), done: make(chan struct{})}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	go t.run()
	return t
}

// emit queues a finished span for export; when the queue is full the span
// is dropped and counted. It never blocks.
func (t *otelTracer) emit(s *otelSpan) {
	if t == nil || !s.Ctx.valid() {
		return
	}
	select {
	case <-t.stop:
		t.dropped.Add(1)
		return
	default:
	}
	select {
	case t.queue <- s:
	default:
		t.dropped.Add(1)
		t.warn("trace export queue full: spans dropped", nil)
	}
}

// counts reports the spans exported and dropped so far.
func (t *otelTracer) counts() (exported, dropped uint64) {
	if t == nil {
		return 0, 0
	}
	return t.exported.Load(), t.dropped.Load()
}

// run is the export goroutine: it sends a batch when it is full or
// otelBatchDelay after its first span, and on stop drains the queue.
func (t *otelTracer) run() {
	defer close(t.done)
	var batch []*otelSpan
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(batch) > 0 {
			t.send(batch)
			batch = nil
		}
	}
	for {
		select {
		case s := <-t.queue:
			if len(batch) == 0 {
				timer.Reset(otelBatchDelay)
			}
			if batch = append(batch, s); len(batch) >= otelBatchSize {
				timer.Stop()
				flush()
			}
		case <-timer.C:
			flush()
		case <-t.stop:
			timer.Stop()
			for {
				select {
				case s := <-t.queue:
					if batch = append(batch, s); len(batch) >= otelBatchSize {
						flush()
					}
				default:
					flush()
					return
				}
			}
		}
	}
}

// close stops accepting spans and sends those queued, giving up (and
// counting them dropped) when ctx ends or after otelCloseTimeout. It logs
// the drop count if any.
func (t *otelTracer) close(ctx context.Context) {
	if t == nil {
		return
	}
	t.once.Do(func() { close(t.stop) })
	ctx, cancel := context.WithTimeout(ctx, otelCloseTimeout)
	defer cancel()
	select {
	case <-t.done:
	case <-ctx.Done():
		t.cancel() // requests in flight fail at once, and the rest with them
		<-t.done
	}
	t.cancel()
	if exported, dropped := t.counts(); dropped > 0 {
		t.log.Warn("trace export dropped spans", "dropped", dropped, "exported", exported, "endpoint", t.url)
	}
}

// send posts one batch; a failure drops the batch and is counted.
func (t *otelTracer) send(batch []*otelSpan) {
	body, err := json.Marshal(t.request(batch))
	if err == nil {
		err = t.post(body)
	}
	if err != nil {
		t.dropped.Add(uint64(len(batch)))
		t.warn("trace export failed: spans dropped", err)
		return
	}
	t.exported.Add(uint64(len(batch)))
}

// post sends an encoded ExportTraceServiceRequest.
func (t *otelTracer) post(body []byte) error {
	req, err := http.NewRequestWithContext(t.ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range t.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("collector answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// warn logs an export problem at most once a minute (the drop counter
// keeps the total).
func (t *otelTracer) warn(msg string, err error) {
	now := time.Now().Unix()
	last := t.lastWarn.Load()
	if now-last < 60 || !t.lastWarn.CompareAndSwap(last, now) {
		return
	}
	args := []any{"endpoint", t.url, "dropped", t.dropped.Load()}
	if err != nil {
		args = append(args, "err", err)
	}
	t.log.Warn(msg, args...)
}

// The OTLP/JSON shapes of an ExportTraceServiceRequest (ids in hex, times
// in nanoseconds as strings).
type (
	otelRequest struct {
		ResourceSpans []otelResourceSpans `json:"resourceSpans"`
	}
	otelResourceSpans struct {
		Resource   otelResource     `json:"resource"`
		ScopeSpans []otelScopeSpans `json:"scopeSpans"`
	}
	otelResource struct {
		Attributes []otelAttr `json:"attributes"`
	}
	otelScopeSpans struct {
		Scope otelScope      `json:"scope"`
		Spans []otelJSONSpan `json:"spans"`
	}
	otelScope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	otelJSONSpan struct {
		TraceID      string     `json:"traceId"`
		SpanID       string     `json:"spanId"`
		ParentSpanID string     `json:"parentSpanId,omitempty"`
		Name         string     `json:"name"`
		Kind         int        `json:"kind"`
		Start        string     `json:"startTimeUnixNano"`
		End          string     `json:"endTimeUnixNano"`
		Attributes   []otelAttr `json:"attributes,omitempty"`
		Status       otelStatus `json:"status"`
	}
	otelStatus struct {
		Code    int    `json:"code,omitempty"` // 2: ERROR
		Message string `json:"message,omitempty"`
	}
)

// request encodes a batch as one ExportTraceServiceRequest.
func (t *otelTracer) request(batch []*otelSpan) otelRequest {
	spans := make([]otelJSONSpan, len(batch))
	for i, s := range batch {
		js := otelJSONSpan{TraceID: hex.EncodeToString(s.Ctx.Trace[:]), SpanID: hex.EncodeToString(s.Ctx.Span[:]),
			Name: s.Name, Kind: s.Kind, Attributes: s.Attrs,
			Start: strconv.FormatInt(s.Start.UnixNano(), 10), End: strconv.FormatInt(s.End.UnixNano(), 10)}
		if s.Parent != ([8]byte{}) {
			js.ParentSpanID = hex.EncodeToString(s.Parent[:])
		}
		if s.Err != "" {
			js.Status = otelStatus{Code: 2, Message: s.Err}
		}
		spans[i] = js
	}
	return otelRequest{ResourceSpans: []otelResourceSpans{{Resource: otelResource{Attributes: t.resource},
		ScopeSpans: []otelScopeSpans{{Scope: otelScope{Name: "svc", Version: readBuildVersion().Version}, Spans: spans}}}}}
}

// otelLive is a span in progress, ended by end. A nil *otelLive (tracing
// off) does nothing.
type otelLive struct {
	t    *otelTracer
	span otelSpan
}

// otelCtxKey keys the current span's context in a context.Context.
type otelCtxKey struct{}

// otelFromContext returns the span context ctx carries.
func otelFromContext(ctx context.Context) (otelContext, bool) {
	c, ok := ctx.Value(otelCtxKey{}).(otelContext)
	return c, ok && c.valid()
}

// start begins a span, the child of parent when it is valid (else the
// root of a new trace), and returns it with ctx carrying it.
func (t *otelTracer) start(ctx context.Context, parent otelContext, name string, kind int, attrs ...otelAttr) (context.Context, *otelLive) {
	if t == nil {
		return ctx, nil
	}
	l := &otelLive{t: t, span: otelSpan{Name: name, Kind: kind, Start: time.Now(), Attrs: attrs}}
	l.span.Ctx.Span = otelRandomSpanID()
	if parent.valid() {
		l.span.Ctx.Trace, l.span.Parent = parent.Trace, parent.Span
	} else {
		for l.span.Ctx.Trace == ([16]byte{}) {
			rand.Read(l.span.Ctx.Trace[:])
		}
	}
	return context.WithValue(ctx, otelCtxKey{}, l.span.Ctx), l
}

// child begins a span under the one ctx carries (a new trace when none).
func (t *otelTracer) child(ctx context.Context, name string, kind int, attrs ...otelAttr) (context.Context, *otelLive) {
	parent, _ := otelFromContext(ctx)
	return t.start(ctx, parent, name, kind, attrs...)
}

// context is the span's own context (zero for nil).
func (l *otelLive) context() otelContext {
	if l == nil {
		return otelContext{}
	}
	return l.span.Ctx
}

// set adds attributes.
func (l *otelLive) set(attrs ...otelAttr) {
	if l != nil {
		l.span.Attrs = append(l.span.Attrs, attrs...)
	}
}

// end finishes the span (status ERROR when err is not nil) and queues it.
func (l *otelLive) end(err error) {
	if l == nil {
		return
	}
	l.span.End = time.Now()
	if err != nil {
		l.span.Err = err.Error()
	}
	l.t.emit(&l.span)
}

// errOTelStatus is the error of a span whose outcome is a failure status
// without a Go error (an HTTP 5xx answer).
var errOTelStatus = errors.New("failed")

// otelTraceOf is the trace id a run without a parent context gets: the
// 128 bits of its traceId (wrun_ + a ULID in Crockford base32), so the
// id users see names the trace; any other form is hashed.
func otelTraceOf(traceID string) (id [16]byte) {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	s, ok := strings.CutPrefix(traceID, "wrun_")
	if ok && len(s) == 26 {
		var hi, lo uint64 // 130 bits of input: the top 2 must be zero
		valid := true
		for _, ch := range []byte(s) {
			v := strings.IndexByte(alphabet, ch)
			if v < 0 || hi>>59 != 0 {
				valid = false
				break
			}
			hi = hi<<5 | lo>>59
			lo = lo<<5 | uint64(v)
		}
		if valid {
			binary.BigEndian.PutUint64(id[:8], hi)
			binary.BigEndian.PutUint64(id[8:], lo)
			if id != ([16]byte{}) {
				return id
			}
		}
	}
	sum := sha256.Sum256([]byte(traceID))
	copy(id[:], sum[:16])
	return id
}
