package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestREADMEWalkthroughs runs the README's "Quick start" and
// its "Deploy a box and link it" from the README's own text, so the README
// cannot drift from the product: every code block marked
// <!-- readme-test: … --> runs in bash, in a fresh directory, as its own
// processes, with only the substitutions the README lists (readmeSession.
// expand). A person's part (approving svc login on the device page) is done
// by the test as a browser would.
func TestREADMEWalkthroughs(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	if testing.Short() {
		t.Skip("runs svc dev, a control plane and a box as processes")
	}
	steps := readmeSteps(t, "README.md")
	// The fleet recipe of docs/engine.md runs on after the deploy
	// walkthrough, in its session: its control plane, sign-in and agent.
	fleet := readmeSteps(t, "docs/engine.md")["A fleet on one machine"]
	if len(fleet) < 5 {
		t.Fatalf("docs/engine.md's fleet recipe has %d blocks marked readme-test; want the recipe", len(fleet))
	}
	for _, section := range []string{"Quick start", "Deploy a box and link it"} {
		t.Run(strings.ReplaceAll(section, " ", "_"), func(t *testing.T) {
			if len(steps[section]) < 3 {
				t.Fatalf("the README's %q has %d blocks marked readme-test; want its walkthrough", section, len(steps[section]))
			}
			s := newReadmeSession(t)
			walk := steps[section]
			if section == "Deploy a box and link it" {
				walk = append(slices.Clip(walk), fleet...)
			}
			for _, st := range walk {
				s.step(st)
			}
			s.stopAll()
			s.checkSecrets()
		})
	}
}

// readmeStep is one code block of the README with its readme-test marker:
//
//	run [until "TEXT"] [capture NAME "REGEXP"]…  runs to exit 0; with until,
//	                                             again (bounded) until its output holds TEXT
//	start NAME until "TEXT" [capture …]          runs in the background until its output holds
//	                                             TEXT; an earlier NAME is stopped first (Ctrl-C, exit 0)
//	once NAME until "TEXT"                       start, then Ctrl-C: it must exit 0
//	login                                        runs svc login in the background; the test approves
//	                                             the code it shows as a signed-in browser would
type readmeStep struct {
	line     int
	verb     string
	name     string
	until    string
	captures [][2]string // placeholder name, regexp with one group
	script   string
}

// readmeMarker finds a readme-test marker line.
var readmeMarker = regexp.MustCompile(`^\s*<!-- readme-test: (.*) -->\s*$`)

// readmeSteps parses the marked blocks of path, by the "## " section they
// are in.
func readmeSteps(t *testing.T, path string) map[string][]readmeStep {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	out := map[string][]readmeStep{}
	section := ""
	for i := 0; i < len(lines); i++ {
		if h, ok := strings.CutPrefix(lines[i], "## "); ok {
			section = h
			continue
		}
		m := readmeMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		st := readmeParseMarker(t, i+1, m[1])
		// The block: the indented lines after the marker (blank lines first skipped).
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j == len(lines) {
			t.Fatalf("README.md:%d: a readme-test marker without a block", i+1)
		}
		indent := lines[j][:len(lines[j])-len(strings.TrimLeft(lines[j], " "))]
		var block []string
		for ; j < len(lines) && strings.HasPrefix(lines[j], indent) && strings.TrimSpace(lines[j]) != ""; j++ {
			block = append(block, strings.TrimPrefix(lines[j], indent))
		}
		st.script = strings.Join(block, "\n")
		out[section] = append(out[section], st)
		i = j - 1
	}
	return out
}

// readmeParseMarker reads a marker's words (see readmeStep).
func readmeParseMarker(t *testing.T, line int, text string) readmeStep {
	t.Helper()
	var words []string
	for rest := strings.TrimSpace(text); rest != ""; rest = strings.TrimSpace(rest) {
		if rest[0] == '"' {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				t.Fatalf("README.md:%d: unterminated quote in %q", line, text)
			}
			words = append(words, rest[1:end+1])
			rest = rest[end+2:]
			continue
		}
		w, r, _ := strings.Cut(rest, " ")
		words, rest = append(words, w), r
	}
	st := readmeStep{line: line, verb: words[0]}
	words = words[1:]
	if st.verb == "start" || st.verb == "once" {
		st.name, words = words[0], words[1:]
	}
	for len(words) > 0 {
		switch {
		case words[0] == "until" && len(words) > 1:
			st.until, words = words[1], words[2:]
		case words[0] == "capture" && len(words) > 2:
			st.captures, words = append(st.captures, [2]string{words[1], words[2]}), words[3:]
		default:
			t.Fatalf("README.md:%d: cannot read the marker %q at %q", line, text, words[0])
		}
	}
	switch st.verb {
	case "run", "login":
	case "start", "once":
		if st.until == "" {
			t.Fatalf("README.md:%d: %s needs until", line, st.verb)
		}
	default:
		t.Fatalf("README.md:%d: unknown readme-test verb %q", line, st.verb)
	}
	return st
}

// readmeSession is one walkthrough's shell: a fresh directory, the
// environment and working directory carried from block to block (each
// block saves them before every command), its background processes and
// everything they printed.
type readmeSession struct {
	t       *testing.T
	dir     string // where the walkthrough begins (stands for the svc checkout)
	state   string // the file each block leaves its exports and directory in
	env     []string
	subst   []string // old, new pairs applied to every block
	vars    map[string]string
	procs   map[string]*readmeProc
	outputs []string
	cpURL   string
}

// readmeProc is a block running in the background.
type readmeProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// newReadmeSession makes the fresh directory and the substitutions the
// README lists: the test's binary for `go build`, free ports, a fake model
// provider's key for sk-…, a fresh database for $CP_DATABASE_URL.
func newReadmeSession(t *testing.T) *readmeSession {
	dir := t.TempDir()
	base := freePortBase(t)
	cpPort, boxPort, fleetPort := freePortBase(t), freePortBase(t), freePortBase(t)
	model := newFakeProvider(t)
	s := &readmeSession{
		t: t, dir: dir, state: filepath.Join(t.TempDir(), "state.sh"),
		vars: map[string]string{}, procs: map[string]*readmeProc{},
		cpURL: fmt.Sprintf("http://127.0.0.1:%d", cpPort),
	}
	s.env = baseEnv("XDG_CONFIG_HOME="+t.TempDir(), "CP_DATABASE_URL="+testPostgresURL(t), "FLEET_DATABASE_URL="+testPostgresURL(t),
		"OPENAI_BASE_URL="+model.URL+"/v1", fmt.Sprintf("SVC_DEV_PORT_OFFSET=%d", base-4242))
	s.subst = []string{
		"go build -o svc .", "cp " + strconv.Quote(svcBinary(t)) + " svc",
		"sk-…", "sk-readme-test",
		"127.0.0.1:4300", strings.TrimPrefix(s.cpURL, "http://"),
		"127.0.0.1:8080", fmt.Sprintf("127.0.0.1:%d", boxPort),
		// docs/engine.md's fleet: the balancer and its two replicas.
		"127.0.0.1:8090", fmt.Sprintf("127.0.0.1:%d", fleetPort),
		"127.0.0.1:8091", fmt.Sprintf("127.0.0.1:%d", fleetPort+1),
		"127.0.0.1:8092", fmt.Sprintf("127.0.0.1:%d", fleetPort+2),
	}
	// The fleet's balancer runs as a daemon: stopped however the test ends.
	t.Cleanup(func() {
		lb := filepath.Join(dir, "fleet-lb")
		if _, err := os.Stat(filepath.Join(lb, "nginx.pid")); err == nil {
			exec.Command("nginx", "-p", lb, "-c", "nginx.conf", "-e", "error.log", "-s", "stop").Run()
		}
	})
	// As root, svc dev and the box keep their clusters outside the project
	// (postgres.go): remove the walkthroughs' when the test ends.
	for _, d := range []string{filepath.Join(dir, "demo"), filepath.Join(dir, "hello"), filepath.Join(dir, "hello-data", "postgres")} {
		t.Cleanup(func() { pgTestRemoveRootCluster(d) })
	}
	t.Cleanup(s.killAll)
	return s
}

// expand applies the substitutions and the captured <placeholders>.
func (s *readmeSession) expand(st readmeStep) string {
	script := strings.NewReplacer(s.subst...).Replace(st.script)
	for k, v := range s.vars {
		script = strings.ReplaceAll(script, "<"+k+">", v)
	}
	if m := regexp.MustCompile(`<[A-Za-z_]+>`).FindString(script); m != "" {
		s.t.Fatalf("README.md:%d: %s has no value from an earlier step", st.line, m)
	}
	return script
}

// command returns bash running script in the session: the state of the
// previous block restored, and saved again before every command (a DEBUG
// trap) and at its end, so a block whose last command serves still passes
// on its cd.
func (s *readmeSession) command(script string) *exec.Cmd {
	prelude := fmt.Sprintf("cd %s\n[ -f %[2]s ] && . %[2]s\ntrap '{ export -p; printf \"cd %%q\\n\" \"$PWD\"; } > %[2]s' DEBUG EXIT\nset -eo pipefail\n",
		strconv.Quote(s.dir), strconv.Quote(s.state))
	cmd := exec.Command("bash", "-c", prelude+script)
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches the whole block, as in a terminal
	return cmd
}

// step runs one block.
func (s *readmeSession) step(st readmeStep) {
	t := s.t
	t.Helper()
	script := s.expand(st)
	t.Logf("README.md:%d (%s %s):\n%s", st.line, st.verb, st.name, script)
	switch st.verb {
	case "run":
		var out string
		for attempt := 0; ; attempt++ {
			cmd := s.command(script)
			raw, err := readmeRun(cmd, 2*time.Minute)
			out = string(raw)
			s.outputs = append(s.outputs, out)
			if err != nil {
				t.Fatalf("README.md:%d: %v\n%s", st.line, err, out)
			}
			if strings.Contains(out, st.until) || attempt == 60 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !strings.Contains(out, st.until) {
			t.Fatalf("README.md:%d: the output never held %q:\n%s", st.line, st.until, out)
		}
		s.capture(st, out)
	case "start", "once":
		if prev := s.procs[st.name]; prev != nil {
			s.interrupt(st.name, prev)
		}
		p := s.background(st)
		s.procs[st.name] = p
		s.waitFor(st, p, func() bool { return strings.Contains(p.out.String(), st.until) })
		s.capture(st, p.out.String())
		if st.verb == "once" {
			s.interrupt(st.name, p)
		}
	case "login":
		p := s.background(st)
		var code []string
		s.waitFor(st, p, func() bool {
			code = regexp.MustCompile(`approve the code (\S+)`).FindStringSubmatch(p.out.String())
			return code != nil
		})
		browser := walkBrowser(t, s.cpURL)
		browser.form("/device/sign-in", url.Values{"user_code": {code[1]}, "sign_in_code": {s.vars["sign_in_code"]}})
		browser.form("/device/approve", url.Values{"user_code": {code[1]}, "confirm": {"yes"}})
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Fatalf("README.md:%d: svc login did not finish after the approval:\n%s", st.line, p.out.String())
		}
		s.outputs = append(s.outputs, p.out.String())
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("README.md:%d: exit %d:\n%s", st.line, code, p.out.String())
		}
	}
}

// readmeRun runs cmd to its end (killed after limit) and returns its output.
func readmeRun(cmd *exec.Cmd, limit time.Duration) ([]byte, error) {
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(limit, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	timer.Stop()
	return []byte(out.String()), err
}

// background starts a block that keeps running.
func (s *readmeSession) background(st readmeStep) *readmeProc {
	p := &readmeProc{cmd: s.command(s.expand(st)), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	return p
}

// waitFor waits (bounded) for ok, failing if the block ends first.
func (s *readmeSession) waitFor(st readmeStep, p *readmeProc, ok func() bool) {
	s.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.done:
			if ok() {
				return
			}
			s.t.Fatalf("README.md:%d: ended (%v) before %q:\n%s", st.line, p.cmd.ProcessState, st.until, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("README.md:%d: no %q after 2 minutes:\n%s", st.line, st.until, p.out.String())
		}
	}
}

// capture records the step's <placeholders> from its output.
func (s *readmeSession) capture(st readmeStep, out string) {
	s.t.Helper()
	for _, c := range st.captures {
		m := regexp.MustCompile(c[1]).FindStringSubmatch(out)
		if m == nil {
			s.t.Fatalf("README.md:%d: no %s (%s) in:\n%s", st.line, c[0], c[1], out)
		}
		s.vars[c[0]] = m[1]
	}
}

// interrupt presses Ctrl-C on a background block: it must exit 0.
func (s *readmeSession) interrupt(name string, p *readmeProc) {
	s.t.Helper()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("%s did not stop within 30s of Ctrl-C:\n%s", name, p.out.String())
	}
	s.outputs = append(s.outputs, p.out.String())
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		s.t.Fatalf("%s exited %d on Ctrl-C:\n%s", name, code, p.out.String())
	}
	delete(s.procs, name)
}

// stopAll presses Ctrl-C on every block still running.
func (s *readmeSession) stopAll() {
	for name, p := range s.procs {
		s.interrupt(name, p)
	}
}

// killAll kills what a failed test left running.
func (s *readmeSession) killAll() {
	for _, p := range s.procs {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// checkSecrets: the box logs its signing secret once, on its first boot,
// and no process prints the saved credential.
func (s *readmeSession) checkSecrets() {
	t := s.t
	if secret := s.vars["signing_secret"]; secret != "" {
		n := 0
		for _, o := range s.outputs {
			n += strings.Count(o, secret)
		}
		if n != 1 {
			t.Errorf("the signing secret is printed %d times; want once, in the box's first boot log", n)
		}
	}
	for _, kv := range s.env {
		if cfg, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			f, err := os.Open(filepath.Join(cfg, "svc", "credentials.json"))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if _, cred, ok := strings.Cut(sc.Text(), `"credential": "`); ok {
					cred, _, _ = strings.Cut(cred, `"`)
					for _, o := range s.outputs {
						if strings.Contains(o, cred) {
							t.Errorf("a command printed the saved credential:\n%s", o)
						}
					}
				}
			}
			f.Close()
		}
	}
}
