package main

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's walkthrough itself runs from its text in
// readme_walkthrough_test.go; these are the person's parts the other
// walkthroughs share.

// walkBrowserClient is a person's browser on the control plane's pages:
// cookies kept, requests sent from the control plane's own origin.
type walkBrowserClient struct {
	t    testing.TB
	base string
	http *http.Client
}

// walkBrowser returns a browser for the control plane at base.
func walkBrowser(t testing.TB, base string) *walkBrowserClient {
	jar, _ := cookiejar.New(nil)
	return &walkBrowserClient{t: t, base: base, http: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

// send sends one request from the control plane's origin and fails the
// test unless it is answered; it returns the status.
func (b *walkBrowserClient) send(method, path, contentType, body string) int {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Origin", b.base)
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// form submits a form of the device page; it must answer 200.
func (b *walkBrowserClient) form(path string, v url.Values) {
	b.t.Helper()
	if status := b.send("POST", path, "application/x-www-form-urlencoded", v.Encode()); status != 200 {
		b.t.Fatalf("POST %s = %d", path, status)
	}
}

// json sends a JSON request as the console does and returns the status.
func (b *walkBrowserClient) json(method, path string, body any) int {
	b.t.Helper()
	raw, _ := json.Marshal(body)
	return b.send(method, path, "application/json", string(raw))
}

// walkLogin runs `svc login --control-plane cpURL` as a process, hands the
// user code it shows to approve, waits (bounded) for it to exit 0 and
// returns the saved credential. Its output is appended to outputs.
func walkLogin(t testing.TB, env []string, cpURL string, approve func(userCode string), outputs *[]string) string {
	t.Helper()
	cmd := exec.Command(svcBinary(t), "login", "--control-plane", cpURL)
	cmd.Env = env
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { *outputs = append(*outputs, stdout.String(), stderr.String()) }()
	var code []string
	eventually(t, 10*time.Second, "svc login showing the code to approve", func() bool {
		code = regexp.MustCompile(`approve the code (\S+)`).FindStringSubmatch(stderr.String())
		return code != nil
	})
	approve(code[1])
	select {
	case err := <-done:
		if err != nil || !strings.Contains(stdout.String(), "signed in to "+cpURL) {
			t.Fatalf("svc login: %v\n%s%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("svc login did not finish within 30s of the approval:\n%s", stderr.String())
	}
	var creds loginCredentials
	for _, kv := range env {
		if dir, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			raw, _ := os.ReadFile(filepath.Join(dir, "svc", "credentials.json"))
			json.Unmarshal(raw, &creds)
		}
	}
	if creds.Credential == "" {
		t.Fatal("svc login saved no credential")
	}
	return creds.Credential
}
