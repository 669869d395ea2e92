package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkWires measures what each chat wire adds over calling the fake
// provider directly (p50/p99, whole answers and time to first token when
// streaming) and requests/s at 32 concurrent clients (the memory held per
// open SSE stream: BenchmarkChatStreams):
//
//	go test -run '^$' -bench Wires -benchtime=1x .
func BenchmarkWires(b *testing.B) {
	fake := newFakeProvider(b)
	dir := projectDir(b)
	d := startDev(b, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(b), "OPENAI_API_KEY=sk-bench", "OPENAI_BASE_URL="+fake.URL+"/v1"))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// call sends one request and returns the time to the first body byte
	// (first token when streaming) and to the end of the body.
	call := func(url, body string) (first, total time.Duration) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-bench")
		req.Header.Set("anthropic-version", "2023-06-01")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.Peek(1); err != nil {
			b.Fatal(err)
		}
		first = time.Since(t0)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: %d %s", url, resp.StatusCode, rest)
		}
		return first, time.Since(t0)
	}
	const n = 300
	measure := func(label, url, body string, streaming bool) (p50, p99 float64) {
		var lat []time.Duration
		for range n {
			first, total := call(url, body)
			if streaming {
				lat = append(lat, first)
			} else {
				lat = append(lat, total)
			}
		}
		sort.Slice(lat, func(i, k int) bool { return lat[i] < lat[k] })
		return percentile(lat, 50), percentile(lat, 99)
	}
	msg := `"messages":[{"role":"user","content":"hello there, how are you today?"}]`
	openaiBody := func(model string, stream bool) string {
		return fmt.Sprintf(`{"model":%q,%s,"stream":%t}`, model, msg, stream)
	}
	anthropicBody := func(stream bool) string {
		return fmt.Sprintf(`{"model":"assistant","max_tokens":256,%s,"stream":%t}`, msg, stream)
	}
	aguiBody := `{"threadId":"","runId":"r","messages":[{"id":"m1","role":"user","content":"hello there, how are you today?"}],"tools":[],"context":[],"state":{},"forwardedProps":{}}`
	for range b.N {
		direct50, direct99 := measure("direct", fake.URL+"/v1/chat/completions", openaiBody("gpt-4o-mini", false), false)
		directS50, directS99 := measure("direct stream", fake.URL+"/v1/chat/completions", openaiBody("gpt-4o-mini", true), true)
		for _, w := range []struct {
			name, url, whole, stream string
		}{
			{"openai", d.url("/openai/v1/chat/completions"), openaiBody("assistant", false), openaiBody("assistant", true)},
			{"anthropic", d.url("/anthropic/v1/messages"), anthropicBody(false), anthropicBody(true)},
			{"agui", d.url("/agui/assistant"), "", aguiBody},
		} {
			if w.whole != "" {
				p50, p99 := measure(w.name, w.url, w.whole, false)
				b.ReportMetric(p50-direct50, w.name+"-added-p50-ms")
				b.ReportMetric(p99-direct99, w.name+"-added-p99-ms")
			}
			p50, p99 := measure(w.name+" stream", w.url, w.stream, true)
			b.ReportMetric(p50-directS50, w.name+"-ttft-added-p50-ms")
			b.ReportMetric(p99-directS99, w.name+"-ttft-added-p99-ms")
		}
		// Throughput: 32 concurrent clients on the chat-completions wire.
		var wg sync.WaitGroup
		t0 := time.Now()
		const total = 3200
		work := make(chan struct{}, total)
		for range total {
			work <- struct{}{}
		}
		close(work)
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					call(d.url("/openai/v1/chat/completions"), openaiBody("assistant", false))
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(total/time.Since(t0).Seconds(), "openai-req/s-32-clients")
	}
}
