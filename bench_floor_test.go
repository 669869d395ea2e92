package main

// The floor of an HTTP hop on this machine (issue 26, items 4 and 5): a bare
// reverse proxy built on net/http, which only copies requests and answers
// between a client and the fake provider, measured beside svc by the chat
// benchmarks (bench_chat_test.go). Whatever any gateway process adds, svc
// included, this adds at least: a process's wake-ups for each request, two
// HTTP connections' system calls, and net/http's goroutines and buffers for
// each open stream.

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// benchProxyEnv, set to an upstream URL, makes the test binary the bare
// proxy of that upstream instead of running the tests (TestMain): it
// listens on a loopback port and prints its URL on a line of its own.
const benchProxyEnv = "SVC_TEST_BENCH_PROXY"

// benchProxyBuffer is the bare proxy's buffer size: its connections' read
// and write buffers and the buffer it copies answers through, the
// smallest that leaves a whole fake answer one read.
const benchProxyBuffer = 1 << 10

// benchProxyMain runs the bare proxy when benchProxyEnv asks for it.
func benchProxyMain() (code int, ok bool) {
	upstream := os.Getenv(benchProxyEnv)
	if upstream == "" {
		return 0, false
	}
	u, err := url.Parse(upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	fmt.Printf("http://%s\n", ln.Addr())
	err = http.Serve(ln, newBareProxy(u))
	fmt.Fprintln(os.Stderr, err)
	return 1, true
}

// newBareProxy is a reverse proxy of upstream with nothing of its own: a
// pool that keeps as many idle connections as svc's model clients do,
// answers passed on as they come (streams flushed at once), every buffer
// benchProxyBuffer.
func newBareProxy(upstream *url.URL) *httputil.ReverseProxy {
	p := httputil.NewSingleHostReverseProxy(upstream)
	p.Transport = &http.Transport{MaxIdleConnsPerHost: providerIdlePerHost, ReadBufferSize: benchProxyBuffer, WriteBufferSize: benchProxyBuffer}
	p.FlushInterval = -1
	p.ErrorLog = log.New(io.Discard, "", 0) // a client hanging up is not news
	p.BufferPool = &benchProxyPool{p: sync.Pool{New: func() any { return make([]byte, benchProxyBuffer) }}}
	return p
}

// benchProxyPool lends the bare proxy its copy buffers.
type benchProxyPool struct{ p sync.Pool }

func (b *benchProxyPool) Get() []byte  { return b.p.Get().([]byte) }
func (b *benchProxyPool) Put(x []byte) { b.p.Put(x) }

// startBareProxy runs the bare proxy of upstream in a process of its own
// (the test binary re-executed) and returns its URL and process id; the
// process is killed when tb ends.
func startBareProxy(tb testing.TB, upstream string) (string, int) {
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), benchProxyEnv+"="+upstream)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		tb.Fatalf("the bare proxy printed %q (%v)", line, err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}
