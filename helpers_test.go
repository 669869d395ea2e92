package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testBinary is the svc binary built once per test run.
var testBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "svc-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "svc")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// svcBinary returns the path of the built svc binary.
func svcBinary(t testing.TB) string {
	t.Helper()
	bin, err := testBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// freePorts are the port bases freePortBase has handed out in this
// process: tests that run in parallel never get the same ports.
var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// freePortBase returns a port p such that p, p+1 and p+2 are free on
// loopback, below the kernel's ephemeral range (32768 and up, where
// clients' ports come from) and apart from every base handed out before
// in this process.
func freePortBase(t testing.TB) int {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 200 {
		p := 20000 + 4*rand.IntN(3100) // 20000..32396, in steps of 4
		if freePorts.given[p] {
			continue
		}
		ok := true
		for i := range 3 {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+i))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			freePorts.given[p] = true
			return p
		}
	}
	t.Fatal("no three consecutive free ports")
	return 0
}

// projectDir scaffolds a project with `svc init` in a fresh directory and
// returns it.
func projectDir(t testing.TB) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "svc-proj-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "demo")
	// As root, svc dev keeps the project's cluster outside it (postgres.go).
	t.Cleanup(func() { pgTestRemoveRootCluster(dir) })
	var out bytes.Buffer
	if code := run(context.Background(), []string{"init", dir}, cliIO{stdout: &out, stderr: &out, getenv: func(string) string { return "" }, dir: parent}); code != 0 {
		t.Fatalf("svc init: exit %d: %s", code, out.String())
	}
	return dir
}

// writeFile writes a project file, creating directories.
func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// devProcess is a running `svc dev --json` under test.
type devProcess struct {
	t       testing.TB
	cmd     *exec.Cmd
	dir     string
	port    int
	env     []string
	lines   chan string // stdout JSON lines
	stderr  *syncBuffer
	exited  chan struct{}
	payload devPayload
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// baseEnv is the environment of processes under test: PATH and HOME only,
// so the developer's provider keys never leak into a test.
func baseEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extra...)
}

// startDevProcess starts `svc dev --json --port P` in dir without waiting.
func startDevProcess(t testing.TB, dir string, port int, env []string, args ...string) *devProcess {
	t.Helper()
	return startDevProcessVia(t, nil, dir, port, env, args...)
}

// startDevProcessVia is startDevProcess run through the command via (such
// as ip netns exec NAME) when via is not empty.
func startDevProcessVia(t testing.TB, via []string, dir string, port int, env []string, args ...string) *devProcess {
	t.Helper()
	d := &devProcess{t: t, dir: dir, port: port, env: env, lines: make(chan string, 16), stderr: &syncBuffer{}, exited: make(chan struct{})}
	argv := append(append(append([]string(nil), via...), svcBinary(t), "dev", "--json", "--port", fmt.Sprint(port)), args...)
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Dir = dir
	d.cmd.Env = env
	d.cmd.Stderr = d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() { d.kill() })
	return d
}

// startDev starts svc dev in dir and waits for its payload line.
func startDev(t testing.TB, dir string, env []string, args ...string) *devProcess {
	t.Helper()
	d := startDevProcess(t, dir, freePortBase(t), env, args...)
	d.payload = d.nextPayload(60 * time.Second)
	return d
}

// nextPayload waits for the next JSON envelope line and decodes its data.
func (d *devProcess) nextPayload(timeout time.Duration) devPayload {
	d.t.Helper()
	select {
	case line := <-d.lines:
		var env struct {
			OK    bool           `json:"ok"`
			Data  devPayload     `json:"data"`
			Error *envelopeError `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &env); err != nil || !env.OK {
			d.t.Fatalf("dev printed %q (err %v)\nstderr:\n%s", line, err, d.stderr.String())
		}
		return env.Data
	case <-d.exited:
		d.t.Fatalf("svc dev exited early (%v)\nstderr:\n%s", d.cmd.ProcessState, d.stderr.String())
	case <-time.After(timeout):
		d.t.Fatalf("no payload line after %v\nstderr:\n%s", timeout, d.stderr.String())
	}
	return devPayload{}
}

// interrupt sends SIGINT and waits (bounded) for the exit code.
func (d *devProcess) interrupt() int {
	d.t.Helper()
	d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.t.Fatalf("svc dev did not exit within 30s of SIGINT\nstderr:\n%s", d.stderr.String())
	}
	return d.cmd.ProcessState.ExitCode()
}

// kill ends the process with SIGKILL if it still runs.
func (d *devProcess) kill() {
	select {
	case <-d.exited:
	default:
		d.cmd.Process.Kill()
		<-d.exited
	}
}

// url returns the emulator URL joined with path.
func (d *devProcess) url(path string) string { return d.payload.EmulatorURL + path }

// cli runs the svc binary in dir with env and returns stdout, stderr and the exit code.
func cli(t testing.TB, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(svcBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// httpJSON sends a JSON request and decodes the JSON answer into out (when
// non-nil); it returns the status.
func httpJSON(t testing.TB, method, url string, body any, out any) int {
	t.Helper()
	return httpJSONAuth(t, method, url, "", body, out)
}

// httpJSONAuth is httpJSON with the bearer credential cred ("" for none).
func httpJSONAuth(t testing.TB, method, url, cred string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, _ := json.Marshal(b)
		rd = bytes.NewReader(buf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

// eventually polls cond every 50ms for at most d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

// listAllRuns pages through GET /api/runs of the runtime at base (bounded:
// at most 100 pages of 500) and returns every run and the queued triggers.
func listAllRuns(t testing.TB, base string) ([]runRecord, []queuedTrigger) {
	t.Helper()
	var runs []runRecord
	var queued []queuedTrigger
	cursor := ""
	for range 100 {
		var page struct {
			Items      []runRecord     `json:"items"`
			Queued     []queuedTrigger `json:"queued"`
			NextCursor string          `json:"nextCursor"`
		}
		if code := httpJSON(t, "GET", base+"/api/runs?limit=500&cursor="+cursor, nil, &page); code != 200 {
			var e map[string]any
			httpJSON(t, "GET", base+"/api/runs?limit=500&cursor="+cursor, nil, &e)
			t.Fatalf("GET /api/runs = %d %v", code, e)
		}
		runs, queued = append(runs, page.Items...), append(queued, page.Queued...)
		if cursor = page.NextCursor; cursor == "" {
			return runs, queued
		}
	}
	t.Fatal("GET /api/runs: more than 100 pages")
	return nil, nil
}

// discardLogger returns a logger that drops everything.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
