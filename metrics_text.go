package main

// The Prometheus text exposition format (version 0.0.4), written with the
// standard library: counters, gauges and histograms with labels, each family
// with its HELP and TYPE lines. Recording is an atomic add on a series found
// in a read-locked map; a series is created once, on its first label values.
// Callers bound the label values (names from the project, the engine's own
// vocabularies, HTTP status codes): nothing a caller of the API sends
// becomes a label.

import (
	"bufio"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// metricsContentType is the media type of the text exposition.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metricsFamily is one metric family: its name, HELP, TYPE, label names
// and series by label values. It is created by newMetricsFamily and never
// changes shape afterwards; its series are safe for concurrent use.
type metricsFamily[S any] struct {
	name, help, typ string
	labels          []string
	newSeries       func() *S

	mu     sync.RWMutex
	series map[string]*S // by the label values joined with metricsLabelSep
}

// metricsLabelSep joins label values into a series key; it cannot occur
// in the UTF-8 text of a label value.
const metricsLabelSep = "\xff"

// newMetricsFamily returns an empty family whose series newSeries creates.
func newMetricsFamily[S any](name, help, typ string, newSeries func() *S, labels ...string) *metricsFamily[S] {
	return &metricsFamily[S]{name: name, help: help, typ: typ, labels: labels, newSeries: newSeries, series: map[string]*S{}}
}

// with returns the series of the label values (one per label name, in
// order), creating it on first use.
func (f *metricsFamily[S]) with(values ...string) *S {
	key := strings.Join(values, metricsLabelSep)
	f.mu.RLock()
	s := f.series[key]
	f.mu.RUnlock()
	if s != nil {
		return s
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s = f.series[key]; s == nil {
		s = f.newSeries()
		f.series[key] = s
	}
	return s
}

// each calls fn for every series, sorted by label values.
func (f *metricsFamily[S]) each(fn func(values []string, s *S)) {
	f.mu.RLock()
	keys := make([]string, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	f.mu.RUnlock()
	slices.Sort(keys)
	for _, k := range keys {
		f.mu.RLock()
		s := f.series[k]
		f.mu.RUnlock()
		var values []string
		if len(f.labels) > 0 {
			values = strings.Split(k, metricsLabelSep)
		}
		fn(values, s)
	}
}

// writeHeader writes the family's HELP and TYPE lines.
func (f *metricsFamily[S]) writeHeader(w *bufio.Writer) {
	metricsWriteHeader(w, f.name, f.help, f.typ)
}

// writeValues writes a family of one sample per series (a counter's, a
// gauge's), each series' value as text formats it.
func (f *metricsFamily[S]) writeValues(w *bufio.Writer, text func(*S) string) {
	f.writeHeader(w)
	f.each(func(values []string, s *S) {
		w.WriteString(f.name + metricsLabels(f.labels, values) + " " + text(s) + "\n")
	})
}

// metricsWriteHeader writes a family's HELP and TYPE lines.
func metricsWriteHeader(w *bufio.Writer, name, help, typ string) {
	w.WriteString("# HELP " + name + " " + metricsEscapeHelp(help) + "\n")
	w.WriteString("# TYPE " + name + " " + typ + "\n")
}

// metricsCounter is a counter series: a count that only goes up.
type metricsCounter struct{ n atomic.Uint64 }

// inc adds one.
func (c *metricsCounter) inc() { c.n.Add(1) }

// metricsCounterVec is a counter family.
type metricsCounterVec struct {
	*metricsFamily[metricsCounter]
}

// newMetricsCounterVec returns a counter family; its name must end in
// _total.
func newMetricsCounterVec(name, help string, labels ...string) metricsCounterVec {
	return metricsCounterVec{newMetricsFamily(name, help, "counter", func() *metricsCounter { return &metricsCounter{} }, labels...)}
}

// write writes the family.
func (v metricsCounterVec) write(w *bufio.Writer) {
	v.writeValues(w, func(c *metricsCounter) string { return strconv.FormatUint(c.n.Load(), 10) })
}

// metricsGauge is a gauge series: a value that goes up and down.
type metricsGauge struct{ n atomic.Int64 }

// add adds d (negative to lower it).
func (g *metricsGauge) add(d int64) { g.n.Add(d) }

// metricsGaugeVec is a gauge family of integer values.
type metricsGaugeVec struct {
	*metricsFamily[metricsGauge]
}

// newMetricsGaugeVec returns a gauge family.
func newMetricsGaugeVec(name, help string, labels ...string) metricsGaugeVec {
	return metricsGaugeVec{newMetricsFamily(name, help, "gauge", func() *metricsGauge { return &metricsGauge{} }, labels...)}
}

// write writes the family.
func (v metricsGaugeVec) write(w *bufio.Writer) {
	v.writeValues(w, func(g *metricsGauge) string { return strconv.FormatInt(g.n.Load(), 10) })
}

// metricsSample is one series of a gauge read when scraped.
type metricsSample struct {
	labels []string // values of the family's label names, in order
	value  float64
}

// metricsWriteGauge writes a gauge family read when scraped: samples, in
// the order given, with labels named by names.
func metricsWriteGauge(w *bufio.Writer, name, help string, names []string, samples []metricsSample) {
	metricsWriteHeader(w, name, help, "gauge")
	for _, s := range samples {
		w.WriteString(name + metricsLabels(names, s.labels) + " " + metricsFloat(s.value) + "\n")
	}
}

// metricsHistogram is a histogram series: counts per bucket (not
// cumulative; summed when written) and the sum; the count is the sum of
// the buckets.
type metricsHistogram struct {
	bounds []float64       // upper bounds, ascending, shared by the family
	counts []atomic.Uint64 // len(bounds)+1: the last is above every bound (+Inf)
	sum    atomic.Uint64   // float64 bits
}

// observe records one value.
func (h *metricsHistogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound >= v: le is inclusive
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
}

// observeSince records the seconds since start.
func (h *metricsHistogram) observeSince(start time.Time) { h.observe(time.Since(start).Seconds()) }

// metricsHistogramVec is a histogram family; its series share bounds.
type metricsHistogramVec struct {
	*metricsFamily[metricsHistogram]
	bounds []float64
}

// newMetricsHistogramVec returns a histogram family with the upper bounds
// (ascending, without +Inf, which every histogram has).
func newMetricsHistogramVec(name, help string, bounds []float64, labels ...string) metricsHistogramVec {
	newSeries := func() *metricsHistogram {
		return &metricsHistogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
	}
	return metricsHistogramVec{newMetricsFamily(name, help, "histogram", newSeries, labels...), bounds}
}

// write writes the family: cumulative _bucket lines up to +Inf, _sum and
// _count. A scrape racing an observation may see the sum without its
// bucket, as with any lock-free histogram; the next scrape is exact.
func (v metricsHistogramVec) write(w *bufio.Writer) {
	v.writeHeader(w)
	names := append(slices.Clone(v.labels), "le")
	v.each(func(values []string, h *metricsHistogram) {
		labels := metricsLabels(v.labels, values)
		var cum uint64
		for i := range h.counts {
			cum += h.counts[i].Load()
			le := "+Inf"
			if i < len(h.bounds) {
				le = metricsFloat(h.bounds[i])
			}
			w.WriteString(v.name + "_bucket" + metricsLabels(names, append(slices.Clone(values), le)) + " " + strconv.FormatUint(cum, 10) + "\n")
		}
		w.WriteString(v.name + "_sum" + labels + " " + metricsFloat(math.Float64frombits(h.sum.Load())) + "\n")
		w.WriteString(v.name + "_count" + labels + " " + strconv.FormatUint(cum, 10) + "\n")
	})
}

// metricsLabels renders label pairs as {a="x",b="y"}; "" without labels.
func metricsLabels(names, values []string) string {
	if len(names) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n + `="` + metricsEscapeLabel(values[i]) + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

// metricsEscapeLabel escapes a label value: backslash, double quote and
// line feed.
func metricsEscapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// metricsEscapeHelp escapes HELP text: backslash and line feed.
func metricsEscapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// metricsFloat formats a sample value or bucket bound: the shortest
// representation, +Inf, -Inf or NaN.
func metricsFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// metricsWriter is a family the exposition writes.
type metricsWriter interface{ write(w *bufio.Writer) }

// metricsExpose writes families, then extra (families read when scraped),
// to out in the text format.
func metricsExpose(out io.Writer, families []metricsWriter, extra func(w *bufio.Writer)) error {
	w := bufio.NewWriter(out)
	for _, f := range families {
		f.write(w)
	}
	if extra != nil {
		extra(w)
	}
	return w.Flush()
}
