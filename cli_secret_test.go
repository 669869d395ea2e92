package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSecretsOffTheCommandLine is issue 36, item 4 as the attacker tried
// it: another account reads /proc/PID/cmdline of the developer's `svc
// login` while it runs. Given on standard input ("-"), the credential is
// not there; from a file or $SVC_TOKEN neither; an argument still works
// and warns on stderr. `svc link` takes its signing secret the same ways.
func TestSecretsOffTheCommandLine(t *testing.T) {
	nb := newTestNeighbour(t)
	w := newLinkWorld(t)
	box := w.startLinkBox()
	if code := httpJSONAuth(t, "POST", w.cp.url+"/api/orgs/default/agents", w.admin, map[string]string{"slug": "demo", "name": "Demo"}, nil); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	home := func() []string { return baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CI=1") }
	whoami := func(env []string) {
		t.Helper()
		if out, errOut, code := cli(t, t.TempDir(), env, "whoami"); code != 0 {
			t.Fatalf("whoami after the sign-in = %d %s %s", code, out, errOut)
		}
	}

	// --token -: the process waits on standard input while the neighbour reads its command line.
	env := home()
	cmd := exec.Command(svcBinary(t), "login", "--control-plane", w.cp.url, "--token", "-")
	cmd.Env, cmd.Dir = env, t.TempDir()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	seen, err := nb.command(t.Context(), "cat", "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/cmdline").Output()
	if err != nil || !strings.Contains(string(seen), "login") {
		t.Fatalf("the neighbour reads the command line: %q %v", seen, err)
	}
	if strings.Contains(string(seen), w.admin) {
		t.Fatalf("the neighbour read the credential of svc login --token - in /proc: %q", seen)
	}
	stdin.Write([]byte(w.admin + "\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil || strings.Contains(stderr.String(), "warning") {
		t.Fatalf("svc login --token - = %v %s", err, stderr.String())
	}
	whoami(env)

	// --token-file and $SVC_TOKEN.
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte(w.admin+"\n"), 0o600)
	env = home()
	if out, errOut, code := cli(t, t.TempDir(), env, "login", "--control-plane", w.cp.url, "--token-file", file); code != 0 || strings.Contains(errOut, "warning") {
		t.Fatalf("svc login --token-file = %d %s %s", code, out, errOut)
	}
	whoami(env)
	env = append(home(), "SVC_TOKEN="+w.admin)
	if out, errOut, code := cli(t, t.TempDir(), env, "login", "--control-plane", w.cp.url); code != 0 {
		t.Fatalf("svc login with SVC_TOKEN = %d %s %s", code, out, errOut)
	}
	whoami(env)
	// An argument still works, and says what it costs.
	env = home()
	if _, errOut, code := cli(t, t.TempDir(), env, "login", "--control-plane", w.cp.url, "--token", w.admin); code != 0 || !strings.Contains(errOut, "visible to every account") {
		t.Fatalf("svc login --token <arg> = %d %s; want it signed in, with a warning", code, errOut)
	}
	if _, errOut, code := cli(t, t.TempDir(), env, "login", "--token", w.admin, "--token-file", file); code == 0 || !strings.Contains(errOut, "two ways") {
		t.Fatalf("svc login --token and --token-file = %d %s; want a refusal", code, errOut)
	}

	// svc link: the signing secret from a file, then from $SVC_LINK_SECRET.
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte(box.secret), 0o600)
	dir := t.TempDir()
	if _, env, code := w.link(dir, "--agent", "demo", "--url", box.url, "--secret-file", secretFile, "--tag", "1.2.3", "--no-agents"); code != 0 || !env.OK {
		t.Fatalf("svc link --secret-file = %d %+v", code, env.Error)
	}
	w.env = append(w.env, "SVC_LINK_SECRET="+box.secret)
	if _, env, code := w.link(dir, "--agent", "demo", "--url", box.url, "--tag", "1.2.4", "--no-agents", "--force"); code != 0 || !env.OK {
		t.Fatalf("svc link with SVC_LINK_SECRET = %d %+v", code, env.Error)
	}
	for _, o := range w.outputs {
		if strings.Contains(o, box.secret) {
			t.Fatalf("svc link printed the secret: %s", o)
		}
	}
}
