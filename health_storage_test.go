package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHealthReportsObjectStorage: GET /api/health reports object storage
// and the model gate, each with its state. svc dev on SVC_S3_ENDPOINT (a
// versitygw the test runs): 200 with storage ok and the gate open; with
// the storage paused (SIGSTOP) the check is bounded and answers 503
// storage unavailable, never naming the endpoint or its keys; continued,
// 200 again; killed, 503. Before, health said ok:true with object storage
// down.
func TestHealthReportsObjectStorage(t *testing.T) {
	port, err := pgTestFreePort()
	if err != nil {
		t.Fatal(err)
	}
	access, secret := "healthaccess", "health-secret-0123456789"
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	gw := exec.Command(versityGWBinary(t), "--port", "127.0.0.1:"+strconv.Itoa(port), "posix", t.TempDir())
	gw.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+access, "ROOT_SECRET_KEY="+secret)
	if err := gw.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- gw.Wait() }()
	t.Cleanup(func() {
		gw.Process.Signal(syscall.SIGCONT)
		gw.Process.Kill()
		<-exited
	})
	if err := versityGWReady(storageTarget{Endpoint: endpoint, Bucket: runtimeBucket, AccessKey: access, SecretKey: secret}, exited); err != nil {
		t.Fatal(err)
	}
	dir := projectDir(t)
	writeFile(t, dir, ".env", "S3_ACCESS_KEY_ID="+access+"\nS3_SECRET_ACCESS_KEY="+secret+"\n")
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-test", "SVC_S3_ENDPOINT="+endpoint))
	c := newPgFaultClient(t, dir, d.payload.EmulatorURL)
	health := func() (int, map[string]any, string) {
		st, raw := c.health()
		var body map[string]any
		json.Unmarshal([]byte(raw), &body)
		return st, body, raw
	}
	st, body, raw := health()
	if st != http.StatusOK || wiresJSONAt(body, "storage.state") != "ok" || wiresJSONAt(body, "model_gate.state") != "open" || wiresJSONAt(body, "postgres.state") != "ok" {
		t.Errorf("health = %d %s; want 200 with storage ok, model_gate open, postgres ok", st, raw)
	}

	if err := gw.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is sent, not yet taken: on a busy machine a thread of the
	// gateway may answer one more request before it stops.
	eventually(t, 10*time.Second, "every thread of the gateway stopped", func() bool { return processStopped(gw.Process.Pid) })
	st, body, raw = health() // bounded: a paused endpoint does not hold it
	if st != http.StatusServiceUnavailable || body["ok"] != false || wiresJSONAt(body, "storage.state") != "unavailable" || wiresJSONAt(body, "postgres.state") != "ok" {
		t.Errorf("health with object storage paused = %d %s; want 503, storage unavailable, postgres ok", st, raw)
	}
	for _, leak := range []string{strconv.Itoa(port), access, secret} {
		if strings.Contains(raw, leak) {
			t.Errorf("health shows %q: %s", leak, raw)
		}
	}
	if err := gw.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "health 200 once object storage answers again", func() bool {
		st, body, _ := health()
		return st == http.StatusOK && wiresJSONAt(body, "storage.state") == "ok"
	})

	gw.Process.Kill()
	<-exited
	exited <- nil // for the cleanup
	if st, body, raw := health(); st != http.StatusServiceUnavailable || wiresJSONAt(body, "storage.state") != "unavailable" {
		t.Errorf("health with object storage gone = %d %s; want 503 storage unavailable", st, raw)
	}
}

// processStopped reports whether every thread of process pid is stopped
// (state T or t in /proc/pid/task/*/stat).
func processStopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) == 0 || (f[0] != "T" && f[0] != "t") {
			return false
		}
	}
	return len(stats) > 0
}
