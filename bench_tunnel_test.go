package main

import (
	"bufio"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkTunnel measures what the tunnel adds over calling svc dev
// directly, relay, dev and this client being separate processes on
// loopback: p50/p99 of GET /api/health, of the time to the first byte of
// a streamed chat answer (SSE), and requests/s of 32 concurrent clients
// through the one tunnel:
//
//	go test -run '^$' -bench Tunnel -benchtime=1x .
func BenchmarkTunnel(b *testing.B) {
	f := newRelayFixture(b)
	public := *f.dev.payload.PublicURL
	tok := f.identity(b, f.ldi)
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// call sends one request and returns the time to the first body byte
	// and to the end of the body.
	call := func(client *http.Client, method, url, body string) (first, total time.Duration) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.Peek(1); err != nil {
			b.Fatal(err)
		}
		first = time.Since(t0)
		io.Copy(io.Discard, br)
		if resp.StatusCode != 200 {
			b.Fatalf("%s %s: %d", method, url, resp.StatusCode)
		}
		return first, time.Since(t0)
	}
	// measure returns p50 and p99 in ms of n calls, of the first byte or
	// of the whole answer.
	measure := func(client *http.Client, method, url, body string, firstByte bool) (p50, p99 float64) {
		const n = 300
		lat := make([]time.Duration, 0, n)
		for range n {
			first, total := call(client, method, url, body)
			lat = append(lat, map[bool]time.Duration{true: first, false: total}[firstByte])
		}
		sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
		return percentile(lat, 50), percentile(lat, 99)
	}
	// throughput is requests/s of 32 clients sharing 3200 health calls.
	throughput := func(client *http.Client, url string) float64 {
		const total = 3200
		work := make(chan struct{}, total)
		for range total {
			work <- struct{}{}
		}
		close(work)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range 32 {
			wg.Go(func() {
				for range work {
					call(client, "GET", url, "")
				}
			})
		}
		wg.Wait()
		return total / time.Since(t0).Seconds()
	}
	for range b.N {
		d50, d99 := measure(direct, "GET", f.dev.url("/api/health"), "", false)
		t50, t99 := measure(f.client, "GET", public+"/api/health", "", false)
		b.ReportMetric(d50, "direct-p50-ms")
		b.ReportMetric(d99, "direct-p99-ms")
		b.ReportMetric(t50-d50, "added-p50-ms")
		b.ReportMetric(t99-d99, "added-p99-ms")
		ds50, ds99 := measure(direct, "POST", f.dev.url("/openai/v1/chat/completions"), relayChatBody, true)
		ts50, ts99 := measure(f.client, "POST", public+"/openai/v1/chat/completions", relayChatBody, true)
		b.ReportMetric(ts50, "sse-first-byte-p50-ms")
		b.ReportMetric(ts99, "sse-first-byte-p99-ms")
		b.ReportMetric(ts50-ds50, "sse-first-byte-added-p50-ms")
		b.ReportMetric(ts99-ds99, "sse-first-byte-added-p99-ms")
		b.ReportMetric(throughput(direct, f.dev.url("/api/health")), "direct-req/s-32-clients")
		b.ReportMetric(throughput(f.client, public+"/api/health"), "tunnel-req/s-32-clients")
	}
}
