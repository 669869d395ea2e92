package main

// The chat wires at concurrency and the memory of open streams (issue 26,
// items 4 and 5): svc's Chat Completions wire to an agent without tools,
// against the same fast fake provider called directly in the same run.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchChatAgentSource is an agent without tools: a turn is one model call.
const benchChatAgentSource = `import { defineAgent } from "svc";

export default defineAgent({ instructions: "Answer briefly." });
`

// benchChatProject scaffolds a project with the agent "plain" (no tools).
func benchChatProject(tb testing.TB) string {
	dir := projectDir(tb)
	writeFile(tb, dir, "deep-agents/plain/index.ts", benchChatAgentSource)
	return dir
}

// benchChatBody is a Chat Completions request to model (an agent's name
// through svc, the provider's model directly).
func benchChatBody(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello there, how are you today?"}],"stream":%t}`, model, stream)
}

// benchChatSessionTurns is how many turns benchChatRun sends to one durable
// session before its client moves to a new one: the transcript each turn
// threads to the model stays that of a short conversation.
const benchChatSessionTurns = 10

// benchChatCall sends one Chat Completions request and returns the time to
// the first body byte (the first token when streaming) and to its end. A
// non-empty session is sent as x-svc-session: a durable session's turn.
func benchChatCall(tb testing.TB, client *http.Client, url, body, session string) (first, total time.Duration) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	if session != "" {
		req.Header.Set("x-svc-session", session)
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		tb.Fatal(err)
	}
	first = time.Since(t0)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("%s: %d %s", url, resp.StatusCode, rest)
	}
	return first, time.Since(t0)
}

// benchChatLoad is one measured leg: n requests from conc clients.
type benchChatLoad struct {
	lat     []time.Duration // sorted: to the first byte when streaming, else whole
	elapsed time.Duration
}

// benchChatRun sends n requests to url from conc concurrent clients. With a
// sessions prefix, each client's turns go to durable sessions of its own,
// benchChatSessionTurns to each (prefix-client-k); else they are stateless.
func benchChatRun(tb testing.TB, client *http.Client, url, body string, stream bool, conc, n int, sessions string) benchChatLoad {
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	var mu sync.Mutex
	var l benchChatLoad
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turns := 0
			for range work {
				session := ""
				if sessions != "" {
					session = fmt.Sprintf("%s-%d-%d", sessions, c, turns/benchChatSessionTurns)
				}
				turns++
				first, total := benchChatCall(tb, client, url, body, session)
				mu.Lock()
				l.lat = append(l.lat, map[bool]time.Duration{true: first, false: total}[stream])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l.elapsed = time.Since(t0)
	sort.Slice(l.lat, func(i, k int) bool { return l.lat[i] < l.lat[k] })
	return l
}

// procCPU returns the CPU time (user and system, all threads) process pid
// has used, and with children, that of its waited-for children too.
func procCPU(pid int, children bool) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: state is the
	// 3rd field, utime/stime/cutime/cstime the 14th to 17th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 15 {
		return 0
	}
	ticks, end := int64(0), 13
	if children {
		end = 15
	}
	for _, s := range f[11:end] {
		v, _ := strconv.ParseInt(s, 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ is 100 on Linux
}

// pgTestCPU returns the CPU time used so far by the test PostgreSQL the
// package started (see pgServerCPU); false when the tests use
// SVC_DATABASE_URL's server instead.
func pgTestCPU() (time.Duration, bool) {
	if pgTestShared.local == nil {
		return 0, false
	}
	return pgServerCPU(pgTestShared.local.DataDir)
}

// pgServerCPU returns the CPU time used so far by the PostgreSQL server of
// data directory dataDir on this machine: its postmaster, live backends and
// exited ones; false when its postmaster.pid cannot be read.
func pgServerCPU(dataDir string) (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, false
	}
	total := procCPU(pm, true)
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		st, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pm) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			total += procCPU(pid, false)
		}
	}
	return total, true
}

// BenchmarkChatConcurrency measures svc's Chat Completions wire to an agent
// without tools against the fast fake provider on loopback, called
// directly in the same run as the baseline: whole and streamed answers,
// stateless, and whole answers in durable sessions (x-svc-session, a new
// session every benchChatSessionTurns turns of a client), at 1 and 32
// concurrent clients. It reports the p50/p99 svc adds (whole answers; the
// first byte when streaming), requests/s both ways, and svc's CPU per
// request (its process, from /proc) and its PostgreSQL's; and the same of
// the bare proxy (bench_floor_test.go) in front of the same provider, the
// floor of any gateway process on this machine (which has no sessions: its
// requests are the stateless ones):
//
//	go test -run '^$' -bench ChatConcurrency -benchtime=1x .
func BenchmarkChatConcurrency(b *testing.B) {
	fake := newFakeProvider(b)
	dir := benchChatProject(b)
	d := startDev(b, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(b), "OPENAI_API_KEY=sk-bench", "OPENAI_BASE_URL="+fake.URL+"/v1"))
	proxy, proxyPid := startBareProxy(b, fake.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	svcPid := d.cmd.Process.Pid
	modes := []struct {
		name            string
		stream, session bool
	}{{"whole", false, false}, {"stream", true, false}, {"session", false, true}}
	for i := range b.N {
		for _, mode := range modes {
			stream := mode.stream
			for _, conc := range []int{1, 32} {
				n := 1000
				if conc > 1 {
					n = 3200
				}
				name := fmt.Sprintf("%s-c%d", mode.name, conc)
				// leg warms the path to url (connections, pools, the
				// agent's VMs), then sends n requests and returns them
				// with the CPU process pid spent meanwhile (none for 0:
				// the direct calls, made by this process). Its turns go
				// to durable sessions when sessions is set.
				leg := func(url, model string, pid int, sessions bool) (benchChatLoad, time.Duration) {
					prefix, warm := "", ""
					if sessions {
						prefix = fmt.Sprintf("bench-%d-%s", i, name)
						warm = prefix + "-warm"
					}
					benchChatRun(b, client, url, benchChatBody(model, stream), stream, conc, 2*conc, warm)
					cpu0 := procCPU(pid, false)
					l := benchChatRun(b, client, url, benchChatBody(model, stream), stream, conc, n, prefix)
					return l, procCPU(pid, false) - cpu0
				}
				base, _ := leg(fake.URL+"/v1/chat/completions", "gpt-4o-mini", 0, false)
				pg0, pgOK := pgTestCPU()
				l, cpu := leg(d.url("/openai/v1/chat/completions"), "plain", svcPid, mode.session)
				pg1, _ := pgTestCPU()
				bare, bareCPU := leg(proxy+"/v1/chat/completions", "gpt-4o-mini", proxyPid, false)
				b.ReportMetric(percentile(l.lat, 50)-percentile(base.lat, 50), name+"-added-p50-ms")
				b.ReportMetric(percentile(l.lat, 99)-percentile(base.lat, 99), name+"-added-p99-ms")
				b.ReportMetric(float64(n)/base.elapsed.Seconds(), name+"-direct-req/s")
				b.ReportMetric(float64(n)/l.elapsed.Seconds(), name+"-svc-req/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(n), name+"-svc-cpu-µs/req")
				if pgOK {
					b.ReportMetric(float64((pg1-pg0).Microseconds())/float64(n), name+"-pg-cpu-µs/req")
				}
				b.ReportMetric(percentile(bare.lat, 50)-percentile(base.lat, 50), name+"-bare-proxy-added-p50-ms")
				b.ReportMetric(float64(n)/bare.elapsed.Seconds(), name+"-bare-proxy-req/s")
				b.ReportMetric(float64(bareCPU.Microseconds())/float64(n), name+"-bare-proxy-cpu-µs/req")
			}
		}
	}
	b.ReportMetric(procStatusMiB(svcPid, "VmRSS:"), "svc-rss-MiB")
	b.ReportMetric(procStatusMiB(proxyPid, "VmRSS:"), "bare-proxy-rss-MiB")
}

// BenchmarkChatOneClient is BenchmarkChatConcurrency's whole answers at one
// client, longer (3,000 requests) and alone, with the file journal's
// fdatasyncs per turn (from svc's /metrics): what the lazy commit of turn
// records (journal.AppendLazy) changes.
//
//	go test -run '^$' -bench ChatOneClient -benchtime=1x .
func BenchmarkChatOneClient(b *testing.B) {
	fake := newFakeProvider(b)
	d := startDev(b, benchChatProject(b), baseEnv("SVC_DATABASE_URL="+testPostgresURL(b), "OPENAI_API_KEY=sk-bench", "OPENAI_BASE_URL="+fake.URL+"/v1"))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	url, body, pid := d.url("/openai/v1/chat/completions"), benchChatBody("plain", false), d.cmd.Process.Pid
	benchChatRun(b, client, url, body, false, 1, 300, "")
	const n = 3000
	for range b.N {
		syncs0, cpu0 := devJournalSyncs(b, d), procCPU(pid, false)
		l := benchChatRun(b, client, url, body, false, 1, n, "")
		cpu, syncs := procCPU(pid, false)-cpu0, devJournalSyncs(b, d)-syncs0
		b.ReportMetric(percentile(l.lat, 50), "p50-ms")
		b.ReportMetric(float64(cpu.Microseconds())/n, "svc-cpu-µs/req")
		b.ReportMetric(n/l.elapsed.Seconds(), "req/s")
		b.ReportMetric(syncs/n, "fdatasyncs/turn")
	}
}

// devJournalSyncs returns the fdatasyncs svc dev's file journal has made
// (svc_journal_fsync_seconds_count on /metrics).
func devJournalSyncs(tb testing.TB, d *devProcess) float64 {
	resp, err := http.Get(d.url("/metrics"))
	if err != nil {
		tb.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		tb.Fatal(err)
	}
	n, ok := metricsParse(tb, string(body))["svc_journal_fsync_seconds_count"]
	if !ok {
		tb.Fatalf("svc dev's /metrics has no svc_journal_fsync_seconds_count")
	}
	return n
}

// benchDevInProcess runs `svc dev` inside the test process, so that its
// heap, goroutines and CPU profile are the test's, on a project whose
// model provider is the OpenAI-compatible one at baseURL; it returns the
// emulator's URL. The dev session stops when tb ends.
func benchDevInProcess(tb testing.TB, dir, baseURL string) string {
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "SVC_DATABASE_URL": testPostgresURL(tb),
		"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": baseURL}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--json", "dev", "--port", strconv.Itoa(freePortBase(tb))}, cliIO{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
			getenv: func(k string) string { return env[k] }, dir: dir})
	}()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			tb.Errorf("the in-process svc dev did not stop within 30 s")
		}
	})
	eventually(tb, 60*time.Second, "the in-process svc dev to print its payload", func() bool {
		return strings.Contains(stdout.String(), "\n") || len(done) > 0
	})
	line, _, _ := strings.Cut(stdout.String(), "\n")
	var envl struct {
		OK   bool       `json:"ok"`
		Data devPayload `json:"data"`
	}
	if err := json.Unmarshal([]byte(line), &envl); err != nil || !envl.OK {
		tb.Fatalf("svc dev printed %q (%v)\nstderr:\n%s", line, err, stderr.String())
	}
	return envl.Data.EmulatorURL
}

// BenchmarkChatProfile is BenchmarkChatConcurrency's load at 32 clients
// (whole and streamed) against svc dev running in the test process, for
// its profiles. Before that load it measures the p50 svc adds to whole
// answers at one client in this process, where no request wakes another
// process, and reports it with the rest:
//
//	go test -run '^$' -bench ChatProfile -benchtime=1x -cpuprofile cpu.out -memprofile mem.out .
//	go tool pprof -top svc.test cpu.out
func BenchmarkChatProfile(b *testing.B) {
	fake := newFakeProvider(b)
	url := benchDevInProcess(b, benchChatProject(b), fake.URL+"/v1") + "/openai/v1/chat/completions"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, stream := range []bool{false, true} {
		benchChatRun(b, client, url, benchChatBody("plain", stream), stream, 32, 64, "")
	}
	base := benchChatRun(b, client, fake.URL+"/v1/chat/completions", benchChatBody("gpt-4o-mini", false), false, 1, 1000, "")
	l := benchChatRun(b, client, url, benchChatBody("plain", false), false, 1, 1000, "")
	added := percentile(l.lat, 50) - percentile(base.lat, 50)
	b.ResetTimer() // which drops metrics reported so far
	for range b.N {
		for _, stream := range []bool{false, true} {
			l := benchChatRun(b, client, url, benchChatBody("plain", stream), stream, 32, 3200, "")
			b.ReportMetric(3200/l.elapsed.Seconds(), map[bool]string{false: "whole", true: "stream"}[stream]+"-req/s")
		}
	}
	b.ReportMetric(added, "in-process-whole-c1-added-p50-ms")
}

// benchHoldingProvider is an OpenAI-compatible upstream that sends each
// streamed answer's first chunk and then holds the stream open until the
// caller hangs up or the test ends.
func benchHoldingProvider(tb testing.TB) *httptest.Server {
	release := make(chan struct{})
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	tb.Cleanup(hold.Close)
	tb.Cleanup(func() { close(release) })
	return hold
}

// heldStreamBytes opens n streamed chats at url, each read to its first
// event and held open, and returns the growth of the process's live heap
// and goroutine stacks (after a GC) per stream; then it closes them and
// waits for the goroutines they held to end.
func heldStreamBytes(tb testing.TB, url, model string, n int) float64 {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	inUse := func() (uint64, int) {
		runtime.GC()
		runtime.GC() // the second empties the pools (net/http's buffers) the first kept
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse, runtime.NumGoroutine()
	}
	before, goroutines := inUse()
	var bodies []io.Closer
	for range n {
		req, _ := http.NewRequest("POST", url, strings.NewReader(benchChatBody(model, true)))
		req.Header.Set("Authorization", "Bearer sk-bench")
		resp, err := client.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		// svc answers its first chunk before calling the model: the stream
		// is held once the upstream's chunk ("hi") has come through.
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		for err == nil && !strings.Contains(line, `"hi"`) {
			line, err = br.ReadString('\n')
		}
		if err != nil || resp.StatusCode != 200 {
			tb.Fatalf("stream %d: status %d (%v)", len(bodies), resp.StatusCode, err)
		}
		bodies = append(bodies, resp.Body)
	}
	after, _ := inUse()
	for _, body := range bodies {
		body.Close()
	}
	client.CloseIdleConnections()
	eventually(tb, time.Minute, "the held streams' goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines+8 })
	return (float64(after) - float64(before)) / float64(n)
}

// svcHeldStreamBytes is what svc itself holds per open SSE chat stream whose
// upstream is waiting: the growth of heap and stacks with n streams held
// through an in-process svc dev, less the same n streams held directly
// (the client's and the upstream's part, in this process too).
func svcHeldStreamBytes(tb testing.TB, n int) (perStream, direct float64) {
	hold := benchHoldingProvider(tb)
	url := benchDevInProcess(tb, benchChatProject(tb), hold.URL+"/v1") + "/openai/v1/chat/completions"
	heldStreamBytes(tb, url, "plain", 20) // warm: pools, the agent's first VMs
	heldStreamBytes(tb, hold.URL+"/v1/chat/completions", "m", 20)
	direct = heldStreamBytes(tb, hold.URL+"/v1/chat/completions", "m", n)
	return heldStreamBytes(tb, url, "plain", n) - direct, direct
}

// bareProxyHeldStreamBytes is svcHeldStreamBytes of the bare proxy
// (bench_floor_test.go) in this process instead of svc.
func bareProxyHeldStreamBytes(tb testing.TB, n int) float64 {
	hold := benchHoldingProvider(tb)
	upstream, err := neturl.Parse(hold.URL)
	if err != nil {
		tb.Fatal(err)
	}
	proxy := httptest.NewServer(newBareProxy(upstream))
	tb.Cleanup(proxy.Close)
	heldStreamBytes(tb, proxy.URL+"/v1/chat/completions", "m", 20)
	heldStreamBytes(tb, hold.URL+"/v1/chat/completions", "m", 20)
	direct := heldStreamBytes(tb, hold.URL+"/v1/chat/completions", "m", n)
	return heldStreamBytes(tb, proxy.URL+"/v1/chat/completions", "m", n) - direct
}

// BenchmarkChatStreams holds b.N streamed chats open through svc (2,000
// with the command below; 10,000 needs about 40,000 file descriptors in
// one process) and reports what svc holds per open stream, beside what the
// bare proxy holds:
//
//	go test -run '^$' -bench ChatStreams -benchtime=2000x .
func BenchmarkChatStreams(b *testing.B) {
	per, direct := svcHeldStreamBytes(b, b.N)
	b.ReportMetric(per/1024, "svc-KiB/open-stream")
	b.ReportMetric(bareProxyHeldStreamBytes(b, b.N)/1024, "bare-proxy-KiB/open-stream")
	b.ReportMetric(direct/1024, "client+upstream-KiB/stream")
	b.ReportMetric(0, "ns/op")
}
