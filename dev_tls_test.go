package main

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// devTLSTestFingerprintRE finds a SHA-256 fingerprint as svc dev prints it.
var devTLSTestFingerprintRE = regexp.MustCompile(`[0-9A-F]{2}(?::[0-9A-F]{2}){31}`)

// devTLSTestSHA256 is the fingerprint of der computed here, independently
// of the code under test.
func devTLSTestSHA256(der []byte) string {
	sum := sha256.Sum256(der)
	return strings.ReplaceAll(fmt.Sprintf("% X", sum[:]), " ", ":")
}

// devTLSTestLogged returns the fingerprint the log of d names (stderr, in
// both modes) and whether it says the certificate was minted this boot.
func devTLSTestLogged(t *testing.T, d *devProcess) (string, bool) {
	t.Helper()
	for _, line := range strings.Split(d.stderr.String(), "\n") {
		if strings.Contains(line, "serves HTTPS") {
			if fp := devTLSTestFingerprintRE.FindString(line); fp != "" {
				return fp, strings.Contains(line, "minted=true")
			}
		}
	}
	t.Fatalf("svc dev --tls logged no fingerprint:\n%s", d.stderr.String())
	return "", false
}

// devTLSTestPinned is an HTTPS client whose only trusted certificate is
// the one in .svc/tls/cert.pem of dir.
func devTLSTestPinned(t *testing.T, dir string) *http.Client {
	t.Helper()
	b := devTLSTestRead(t, filepath.Join(dir, ".svc", "tls", "cert.pem"))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(b)) {
		t.Fatalf("cert.pem holds no certificate: %q", b)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// devTLSTestGet sends GET url with the bearer key ("" for none) and returns
// the status and body, or the transport error.
func devTLSTestGet(c *http.Client, url, key string) (int, string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}

// TestDevTLSListen runs `svc dev --listen --tls`: the URLs are https, the
// logged fingerprint is the SHA-256 of the certificate the server presents
// (the one in .svc/tls/cert.pem), a client pinning it reaches the API only
// with the dev key, plain HTTP gets no answer from the API, TLS below 1.2
// is refused, and the project's CLI works against it.
func TestDevTLSListen(t *testing.T) {
	dir := projectDir(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t)), "--listen", "--tls")
	t.Cleanup(func() { d.interrupt() })
	addr := fmt.Sprintf("127.0.0.1:%d", d.port)
	if want := "https://" + addr; d.payload.EmulatorURL != want || d.payload.AgentURL != want {
		t.Errorf("payload emulator_url %q agent_url %q; want %s", d.payload.EmulatorURL, d.payload.AgentURL, want)
	}
	fp, minted := devTLSTestLogged(t, d)
	if !minted {
		t.Errorf("first --tls boot of a project logged minted=false:\n%s", d.stderr.String())
	}

	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS handshake with svc dev --tls: %v", err)
	}
	presented := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if got := devTLSTestSHA256(presented.Raw); got != fp {
		t.Errorf("logged fingerprint %s; the server presents %s", fp, got)
	}
	pemBytes, err := os.ReadFile(filepath.Join(dir, ".svc", "tls", "cert.pem"))
	if blk, _ := pem.Decode(pemBytes); err != nil || blk == nil || string(blk.Bytes) != string(presented.Raw) {
		t.Errorf(".svc/tls/cert.pem (err %v) is not the certificate the server presents", err)
	}
	if _, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Errorf("a TLS 1.1 handshake succeeded; want TLS 1.2 or later only")
	}

	keyFile, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyFile))
	pinned := devTLSTestPinned(t, dir)
	if code, body, err := devTLSTestGet(pinned, d.url("/api/health"), key); err != nil || code != 200 || !strings.Contains(body, "project_dir") {
		t.Errorf("pinned GET /api/health with the key = %d %s %v; want 200 from svc dev", code, body, err)
	}
	// Without the key: the developer's own account on loopback passes;
	// through this machine's LAN address (not loopback: as another machine
	// would come) it is refused.
	if code, body, err := devTLSTestGet(pinned, d.url("/api/runs"), ""); err != nil || code != 200 {
		t.Errorf("pinned GET /api/runs from this account on loopback without the key = %d %s %v; want 200", code, body, err)
	}
	if lan := devTLSTestLANAddr(); lan == "" {
		t.Logf("no non-loopback address on this machine: the refusal from the LAN is left to TestListenFromAnotherHost")
	} else if code, body, err := devTLSTestGet(pinned, "https://"+net.JoinHostPort(lan, strconv.Itoa(d.port))+"/api/runs", ""); err != nil || code != 401 {
		t.Errorf("pinned GET /api/runs through %s without the key = %d %s %v; want 401", lan, code, body, err)
	}
	if code, body, err := devTLSTestGet(pinned, d.url("/api/runs"), key); err != nil || code != 200 {
		t.Errorf("pinned GET /api/runs with the key = %d %s %v; want 200", code, body, err)
	}
	if _, _, err := devTLSTestGet(&http.Client{Timeout: 30 * time.Second}, d.url("/api/health"), key); err == nil {
		t.Errorf("a client trusting only the system's roots accepted svc dev's self-signed certificate")
	}
	// Plain HTTP on the same port: net/http's TLS server says 400 in
	// plain text; the API (and its key) never see the request.
	code, body, err := devTLSTestGet(&http.Client{Timeout: 30 * time.Second}, "http://"+addr+"/api/health", key)
	if err == nil && (code == 200 || strings.Contains(body, "project_dir")) {
		t.Errorf("plain HTTP GET /api/health = %d %s; want no answer from the API", code, body)
	}

	for _, args := range [][]string{{"workflows", "list"}, {"runs", "list"}} {
		if out, errOut, code := cli(t, dir, baseEnv(), args...); code != 0 || (args[0] == "workflows" && !strings.Contains(out, "greet")) {
			t.Errorf("svc %s against svc dev --listen --tls = exit %d %q %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestDevTLSCertKept boots `svc dev --tls` (on loopback) three times: the
// second boot, in text mode, serves and prints the same certificate; once
// cert.pem is removed the third mints a new one signed by the same key.
func TestDevTLSCertKept(t *testing.T) {
	dir := projectDir(t)
	env := baseEnv("SVC_DATABASE_URL=" + testPostgresURL(t))
	certPath, keyPath := filepath.Join(dir, ".svc", "tls", "cert.pem"), filepath.Join(dir, ".svc", "tls", "key.pem")

	d := startDev(t, dir, env, "--tls")
	fp1, minted := devTLSTestLogged(t, d)
	if want := fmt.Sprintf("https://127.0.0.1:%d", d.port); d.payload.EmulatorURL != want || !minted {
		t.Errorf("first boot: emulator_url %q, minted %v; want %s, minted", d.payload.EmulatorURL, minted, want)
	}
	if code := d.interrupt(); code != 0 {
		t.Fatalf("svc dev exited %d on SIGINT\n%s", code, d.stderr.String())
	}
	cert1, key1 := devTLSTestRead(t, certPath), devTLSTestRead(t, keyPath)
	for _, p := range []string{certPath, keyPath} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != privateFileMode {
			t.Errorf("%s: mode %v (err %v); want %v", p, fi.Mode().Perm(), err, privateFileMode)
		}
	}

	out := devTLSTestTextBoot(t, dir, env)
	if !strings.Contains(out, "SHA-256 "+fp1) || !strings.Contains(out, "https://127.0.0.1:") {
		t.Errorf("second boot (text mode) printed %q; want the https API and SHA-256 %s", out, fp1)
	}
	if got := devTLSTestRead(t, certPath); got != cert1 {
		t.Errorf("second boot rewrote cert.pem")
	}

	if err := os.Remove(certPath); err != nil {
		t.Fatal(err)
	}
	d = startDev(t, dir, env, "--tls")
	t.Cleanup(func() { d.interrupt() })
	fp3, minted := devTLSTestLogged(t, d)
	if fp3 == fp1 || !minted {
		t.Errorf("boot without cert.pem: fingerprint %s (before %s), minted %v; want a new certificate", fp3, fp1, minted)
	}
	if blk, _ := pem.Decode([]byte(devTLSTestRead(t, certPath))); blk == nil || devTLSTestSHA256(blk.Bytes) != fp3 {
		t.Errorf("cert.pem is not the certificate of fingerprint %s", fp3)
	}
	if devTLSTestRead(t, keyPath) != key1 {
		t.Errorf("minting a certificate replaced the kept key")
	}
	if code, body, err := devTLSTestGet(devTLSTestPinned(t, dir), d.url("/api/health"), ""); err != nil || code != 200 {
		t.Errorf("pinned GET /api/health after the new certificate = %d %s %v", code, body, err)
	}
}

// devTLSTestRead returns a file's content.
func devTLSTestRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// devTLSTestTextBoot runs `svc dev --tls` without --json in dir until it
// prints its TLS line, stops it with SIGINT and returns what it printed.
func devTLSTestTextBoot(t *testing.T, dir string, env []string) string {
	t.Helper()
	cmd := exec.Command(svcBinary(t), "dev", "--port", fmt.Sprint(freePortBase(t)), "--tls")
	cmd.Dir, cmd.Env = dir, env
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, done := make(chan string, 64), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		cmd.Wait()
		close(done)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	var out strings.Builder
	timeout := time.After(90 * time.Second)
	for {
		select {
		case line := <-lines:
			out.WriteString(line + "\n")
			if strings.Contains(line, "SHA-256") {
				return out.String()
			}
		case <-done:
			t.Fatalf("svc dev --tls exited before its TLS line: %q\n%s", out.String(), stderr.String())
		case <-timeout:
			t.Fatalf("svc dev --tls printed no TLS line within 90s: %q\n%s", out.String(), stderr.String())
		}
	}
}

// TestDevTLSRemint checks when devTLSLoad keeps the certificate and when it
// mints one: kept while it covers this machine's names and is far from its
// end; minted, with the same key, for a name it lacks (an address or
// SVC_ALLOWED_HOSTS name added; the old names kept), near its end (the
// current names only), or when cert.pem is garbage.
func TestDevTLSRemint(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	first, err := devTLSLoad(dir, nil, now)
	if err != nil || !first.minted {
		t.Fatalf("first load = %+v, %v; want a minted certificate", first, err)
	}
	keyPEM := devTLSTestRead(t, filepath.Join(dir, devTLSKeyFile))
	leaf, err := x509.ParseCertificate(first.pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range devTLSNames(nil) {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("certificate does not cover %s: %v", name, err)
		}
	}
	if leaf.IsCA || leaf.NotAfter.Sub(now) > 398*24*time.Hour || leaf.NotAfter.Sub(now) < 300*24*time.Hour {
		t.Errorf("certificate: CA %v, valid until %v; want a leaf valid about 397 days", leaf.IsCA, leaf.NotAfter)
	}
	mustLoad := func(what string, extra []string, at time.Time, wantMinted bool) *devTLSCert {
		t.Helper()
		c, err := devTLSLoad(dir, extra, at)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if c.minted != wantMinted {
			t.Errorf("%s: minted %v; want %v", what, c.minted, wantMinted)
		}
		if got := devTLSTestRead(t, filepath.Join(dir, devTLSKeyFile)); got != keyPEM {
			t.Errorf("%s: the key changed", what)
		}
		return c
	}
	if c := mustLoad("second load", nil, now.Add(time.Hour), false); c.fingerprint != first.fingerprint {
		t.Errorf("second load: fingerprint %s; want the kept %s", c.fingerprint, first.fingerprint)
	}
	added := mustLoad("a new name", []string{"devbox.lan", "10.231.7.1"}, now, true)
	if added.fingerprint == first.fingerprint {
		t.Errorf("a new name kept the certificate")
	}
	mustLoad("the same names again", []string{"devbox.lan"}, now, false)
	moved := mustLoad("another network", []string{"10.9.9.9"}, now, true)
	if mustLoad("back on the first network", []string{"10.231.7.1"}, now, false).fingerprint != moved.fingerprint {
		t.Errorf("back on a network seen before: a new certificate; want the one covering both")
	}
	renewed := mustLoad("near its end", []string{"10.9.9.9"}, now.Add(devTLSValidity-devTLSRenewBefore+time.Hour), true)
	if leaf, _ := x509.ParseCertificate(renewed.pair.Certificate[0]); leaf == nil || leaf.VerifyHostname("10.231.7.1") == nil || leaf.VerifyHostname("10.9.9.9") != nil {
		t.Errorf("renewed near its end: want the current names only (10.9.9.9, not 10.231.7.1)")
	}
	writeFile(t, dir, devTLSCertFile, "not a certificate")
	mustLoad("garbage cert.pem", nil, now, true)
	mustLoad("after garbage", nil, now, false)
	if want := devTLSTestSHA256(first.pair.Certificate[0]); first.fingerprint != want {
		t.Errorf("fingerprint %s; want the SHA-256 of the DER, %s", first.fingerprint, want)
	}
}

// TestDevTLSSelfOrigin checks that the console's own page is recognised as
// this server's over HTTPS (its Origin is https://host:port there), so the
// developer's console passes as the developer's own (httpGuardOwner).
func TestDevTLSSelfOrigin(t *testing.T) {
	for _, tt := range []struct {
		name, origin string
		tls          bool
		want         bool
	}{
		{"https page, TLS server", "https://127.0.0.1:4242", true, true},
		{"http page, TLS server", "http://127.0.0.1:4242", true, false},
		{"http page, plain server", "http://127.0.0.1:4242", false, true},
		{"https page, plain server", "https://127.0.0.1:4242", false, false},
	} {
		scheme := "http"
		if tt.tls {
			scheme = "https" // httptest sets r.TLS
		}
		r := httptest.NewRequest("POST", scheme+"://127.0.0.1:4242/api/dev/services/reveal", nil)
		if got := httpGuardSelfOrigin(r, tt.origin); got != tt.want {
			t.Errorf("%s: httpGuardSelfOrigin = %v; want %v", tt.name, got, tt.want)
		}
	}
}

// TestDevTLSTunnel publishes a `svc dev --tls` session through svc relay:
// the tunnel hands requests to the API handler itself, with the Host of
// the API's address (not its https:// URL), so they are answered.
func TestDevTLSTunnel(t *testing.T) {
	f := newRelayFixture(t, "--tls")
	if !strings.HasPrefix(f.dev.payload.EmulatorURL, "https://") {
		t.Fatalf("emulator_url %q; want https", f.dev.payload.EmulatorURL)
	}
	if code, body := f.status(t, "GET", f.relay.publicURL(f.ldi)+"/api/health", f.identity(t, f.ldi), ""); code != 200 || !strings.Contains(body, f.ldi) {
		t.Errorf("GET /api/health through the tunnel of svc dev --tls = %d %s; want 200 naming %s", code, body, f.ldi)
	}
}

// devTLSTestLANAddr is a non-loopback, non-link-local IPv4 address of this
// machine ("" when it has none).
func devTLSTestLANAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
