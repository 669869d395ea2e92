package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Error codes of the JSON envelope (DESIGN §8). exitCodes maps each to its exit code.
const (
	codeGeneric          = "generic"
	codeAuth             = "auth"
	codeNoProject        = "no_project"
	codeNoTarget         = "no_target"
	codeDevNotRunning    = "dev_not_running"
	codeNotFound         = "not_found"
	codeWorkflowNotFound = "workflow_not_found"
)

// exitCodes is the error-code ↔ exit-code table of DESIGN §8.
var exitCodes = map[string]int{
	codeGeneric:          1,
	codeAuth:             2,
	codeNoProject:        3,
	codeNoTarget:         3,
	codeDevNotRunning:    3,
	codeNotFound:         4,
	codeWorkflowNotFound: 4,
}

// cliError is an error a verb returns to end the command with a given error
// code; Hint tells a human what to do next.
type cliError struct {
	Code    string
	Message string
	Hint    string
	Err     error

	// Exit, when not 0, is the exit code: a code the runtime gave that the
	// exit-code table does not know keeps the exit code of its status.
	Exit int
	// Violations are the runtime's schema violations (schema_validation).
	Violations []schemaViolation
}

func (e *cliError) Error() string { return e.Message }
func (e *cliError) Unwrap() error { return e.Err }

// exitCode is the process exit code of the error: Exit when set, else
// that of its code; 1 for a code outside the table.
func (e *cliError) exitCode() int {
	if e.Exit != 0 {
		return e.Exit
	}
	if c, ok := exitCodes[e.Code]; ok {
		return c
	}
	return 1
}

// failf returns a *cliError with a formatted message.
func failf(code, hint, format string, args ...any) *cliError {
	return &cliError{Code: code, Hint: hint, Message: fmt.Sprintf(format, args...)}
}

// plural is "1 member", "2 members", "0 audit entries": n and noun, the
// noun made plural (a final "y" after a consonant becomes "ies").
func plural(n int, noun string) string {
	if n != 1 {
		switch {
		case strings.HasSuffix(noun, "y") && !strings.ContainsAny(noun[len(noun)-2:len(noun)-1], "aeiou"):
			noun = noun[:len(noun)-1] + "ies"
		default:
			noun += "s"
		}
	}
	return fmt.Sprintf("%d %s", n, noun)
}

// errUsage marks an error that should print the verb's usage text.
var errUsage = errors.New("usage")

// cliIO is the I/O and environment a command runs with, injected so tests
// run verbs in-process.
type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdinTerminal  bool   // stdin is an interactive terminal
	dir            string // working directory the verbs resolve the project from
	argv0          string // the command as the user typed it (os.Args[0]); "" in-process
	executable     string // absolute path of the running binary; "" in-process or unknown
}

// newProcessIO returns the cliIO of the real process.
func newProcessIO() cliIO {
	dir, _ := os.Getwd()
	exe, _ := os.Executable()
	return cliIO{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, stdinTerminal: cliIsTerminal(os.Stdin), dir: dir,
		argv0: os.Args[0], executable: exe}
}

// selfCommand is how to type this binary in a shell whose working
// directory is from: the name alone when the user ran it from PATH, its
// absolute path when they typed one, else their relative path rebased
// onto from. In-process (no argv0) it is "svc".
func (io cliIO) selfCommand(from string) string {
	switch {
	case io.argv0 == "":
		return "svc"
	case !strings.ContainsRune(io.argv0, filepath.Separator) || filepath.IsAbs(io.argv0):
		return io.argv0
	}
	rel, err := filepath.Rel(from, filepath.Join(io.dir, io.argv0))
	if err != nil {
		return filepath.Join(io.dir, io.argv0)
	}
	if rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		rel = "." + string(filepath.Separator) + rel
	}
	return rel
}

// cmd is one invocation of a verb: its I/O plus the global flags.
type cmd struct {
	cliIO
	json    bool // --json: one envelope line on stdout
	verbose bool // --verbose: every log line
	yes     bool // --yes: never prompt
}

// interactive reports whether the command may prompt (DESIGN §8): not
// --json, not --yes, CI unset and stdin a terminal.
func (c *cmd) interactive() bool {
	return !c.json && !c.yes && c.getenv("CI") == "" && c.stdinTerminal
}

// emit prints a successful result: the JSON envelope, or the human text.
func (c *cmd) emit(data any, human func(w io.Writer)) {
	if c.json {
		writeEnvelope(c.stdout, envelope{OK: true, Data: data})
		return
	}
	human(c.stdout)
}

// envelope is the --json output line (DESIGN §8): ok with data, or an error.
type envelope struct {
	OK    bool           `json:"ok"`
	Data  any            `json:"data,omitempty"`
	Error *envelopeError `json:"error,omitempty"`
}

// envelopeError is the error of a failed command's envelope: the code the
// runtime gave, or the CLI's own, and the violations of a schema_validation.
type envelopeError struct {
	Code       string            `json:"code"`
	Message    string            `json:"message"`
	Violations []schemaViolation `json:"violations,omitempty"`
}

// writeEnvelope writes v as one JSON line.
func writeEnvelope(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"ok":false,"error":{"code":"generic","message":"encode output"}}`)
	}
	w.Write(append(b, '\n'))
}

// humanMessage is the message for a terminal: the runtime's message, which
// names the first violation, becomes a heading over the list of all of
// them, each printed once.
func (e *cliError) humanMessage() string {
	if len(e.Violations) == 0 {
		return e.Message
	}
	first := e.Violations[0]
	msg := strings.TrimSuffix(e.Message, fmt.Sprintf(": %s: %s", orRoot(first.Path), first.Message))
	for _, v := range e.Violations {
		msg += fmt.Sprintf("\n  %s: %s", orRoot(v.Path), v.Message)
	}
	return msg
}

// fail prints err in the command's mode and returns the exit code.
func (c *cmd) fail(err error) int {
	var re reportedExit
	if errors.As(err, &re) {
		return int(re)
	}
	var ce *cliError
	if !errors.As(err, &ce) {
		ce = &cliError{Code: codeGeneric, Message: err.Error()}
	}
	if c.json {
		writeEnvelope(c.stdout, envelope{Error: &envelopeError{Code: ce.Code, Message: ce.Message, Violations: ce.Violations}})
	} else {
		fmt.Fprintf(c.stderr, "error: %s\n", ce.humanMessage())
		if ce.Hint != "" {
			fmt.Fprintf(c.stderr, "hint: %s\n", ce.Hint)
		}
	}
	return ce.exitCode()
}

// reportedExit is returned by a verb that has printed its result and must
// still exit with this code (`runs get --wait` of a run that failed).
type reportedExit int

func (e reportedExit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// verb is one command of the CLI. Its flags are defined by newFlags so the
// same definitions serve parsing, --help and the advertised contract.
type verb struct {
	name     string
	summary  string
	example  string // one command line that uses it (svc --help, docs/cli.md; TestVerbExamples parses each)
	usage    string // argument synopsis after the verb name
	newFlags func() *flag.FlagSet
	run      func(ctx context.Context, c *cmd, fs *flag.FlagSet) error
	subverbs []*verb
}

// verbs lists every verb once, in help order.
func verbs() []*verb {
	return []*verb{
		{name: "init", example: "svc init demo", summary: "scaffold a starter project", usage: "[dir]", newFlags: noFlags("init"), run: runInit},
		{name: "dev", example: "svc dev --port 4242", summary: "boot the local runtime", newFlags: newDevFlags, run: runDev},
		{name: "workflows", summary: "list workflows, read schemas, start runs", subverbs: workflowVerbs()},
		{name: "runs", summary: "inspect and cancel workflow runs", subverbs: runVerbs()},
		{name: "hooks", summary: "resume a workflow waiting on a hook", subverbs: hookVerbs()},
		{name: "schedules", summary: "list the workflows' schedules, pause and resume them", subverbs: scheduleVerbs()},
		{name: "serve", example: "svc serve --addr :8080 --data /var/lib/svc .", summary: "run a project as a box: its wires, workflow routes, runs API and the handshake svc link reads", usage: "[dir]", newFlags: newServeFlags, run: runServe},
		{name: "link", example: "SVC_LINK_SECRET=$SECRET svc link --url https://box.example.com --agent hello", summary: "register a deployed container with a control plane, or (--local) link this directory to an agent for svc dev", newFlags: newLinkFlags, run: runLink},
		{name: "login", example: "svc login --control-plane https://cp.example.com", summary: "sign in to a control plane (device code, --invitation a code you were given, --token for CI; --browser: a code to sign a browser in)", newFlags: newLoginFlags, run: runLogin},
		{name: "logout", example: "svc logout", summary: "sign out: revoke and remove the saved credential", newFlags: noFlags("logout"), run: runLogout},
		{name: "whoami", example: "svc whoami --json", summary: "print the signed-in user and organization", newFlags: noFlags("whoami"), run: runWhoami},
		{name: "orgs", summary: "your organizations: list, create, rename", subverbs: orgsVerbs()},
		{name: "members", summary: "an organization's members: list, invite, change roles, remove", subverbs: membersVerbs()},
		{name: "agents", summary: "an organization's agents: list, create, rename, delete, and a deployment's history", subverbs: agentsVerbs()},
		{name: "keys", summary: "an organization's API keys for the chat wires: list, create (optional expiry), revoke", subverbs: keysVerbs()},
		{name: "devices", summary: "your signed-in devices (CLI credentials and browsers): list, revoke", subverbs: devicesVerbs()},
		{name: "audit", example: "svc audit --since 24h", summary: "read the organization's audit log, or `audit verify` its hash chain (owners and admins)", usage: "[verify]", newFlags: newAuditFlags, run: runAudit},
		{name: "control-plane", example: "DATABASE_URL=postgres://svc@db/svc_cp svc control-plane --addr :4300 --url https://cp.example.com", summary: "serve a control plane: organizations, agents, deployments, sign-in, identity (DATABASE_URL)", newFlags: newCPFlags, run: cpRun},
		{name: "mcp", example: "svc mcp", summary: "MCP over stdio for coding agents, relayed to svc dev (or --agent a box)", newFlags: newMCPFlags, run: runMCP},
		{name: "relay", example: "svc relay --domain example.com --tls-cert cert.pem --tls-key key.pem", summary: "serve the tunnel's public end: https://<sub>.tun.<domain> to svc dev sessions", newFlags: newRelayFlags, run: runRelay},
		{name: "env", example: "eval \"$(svc env)\"", summary: "print the local credentials of the running svc dev (shell exports)", newFlags: noFlags("env"), run: runEnv},
		{name: "console", example: "svc console", summary: "print a new link to the running svc dev's console (each link signs in one browser)", newFlags: noFlags("console"), run: runConsole},
		{name: "rotate-key", example: "svc rotate-key", summary: "mint a new dev key for this project: the old one is refused at once and every console session of the running svc dev ends", newFlags: noFlags("rotate-key"), run: runRotateKey},
		{name: "version", example: "svc version", summary: "print the version, commit and Go version of this binary", newFlags: noFlags("version"), run: runVersion},
	}
}

// noFlags returns a constructor of an empty flag set named name.
func noFlags(name string) func() *flag.FlagSet {
	return func() *flag.FlagSet { return flag.NewFlagSet(name, flag.ContinueOnError) }
}

// globalFlags are accepted anywhere on the command line.
var globalFlags = map[string]string{
	"--json":    "print one JSON envelope line on stdout",
	"--verbose": "stream every log line, including PostgreSQL output",
	"--yes":     "never prompt",
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, io cliIO) int {
	c := &cmd{cliIO: io}
	var rest []string
	for i, a := range args {
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		switch a {
		case "--json", "-json":
			c.json = true
		case "--verbose", "-verbose", "-v":
			c.verbose = true
		case "--yes", "-yes", "-y":
			c.yes = true
		default:
			rest = append(rest, a)
		}
	}
	all := verbs()
	if len(rest) > 0 && (rest[0] == "--version" || rest[0] == "-version") {
		rest[0] = "version"
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "--help" || rest[0] == "-h" {
		if len(rest) == 0 {
			printUsage(c.stderr, "svc", &verb{subverbs: all}, nil)
			return c.fail(failf(codeGeneric, "run `svc --help`", "no verb given"))
		}
		printUsage(c.stdout, "svc", &verb{subverbs: all}, nil)
		return 0
	}
	return dispatch(ctx, c, "svc", all, rest)
}

// dispatch finds the verb named by args[0] among vs and runs it.
func dispatch(ctx context.Context, c *cmd, prefix string, vs []*verb, args []string) int {
	var v *verb
	for _, cand := range vs {
		if cand.name == args[0] {
			v = cand
		}
	}
	if v == nil {
		printUsage(c.stderr, prefix, &verb{subverbs: vs}, nil)
		return c.fail(failf(codeGeneric, fmt.Sprintf("run `%s --help`", prefix), "unknown verb %q", args[0]))
	}
	name := prefix + " " + v.name
	if v.subverbs != nil {
		if len(args) < 2 || args[1] == "--help" || args[1] == "-h" || args[1] == "help" {
			w := c.stdout
			if len(args) < 2 {
				w = c.stderr
			}
			printUsage(w, name, v, nil)
			if len(args) < 2 {
				return c.fail(failf(codeGeneric, fmt.Sprintf("run `%s --help`", name), "%s needs a verb", name))
			}
			return 0
		}
		return dispatch(ctx, c, name, v.subverbs, args[1:])
	}
	fs := v.newFlags()
	fs.SetOutput(io.Discard)
	if err := parseInterleaved(fs, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, name, v, fs)
			return 0
		}
		printUsage(c.stderr, name, v, fs)
		return c.fail(failf(codeGeneric, fmt.Sprintf("run `%s --help`", name), "%s: %v", name, err))
	}
	err := v.run(ctx, c, fs)
	if err == nil {
		return 0
	}
	if errors.Is(err, errUsage) {
		printUsage(c.stderr, name, v, fs)
	}
	return c.fail(err)
}

// parseInterleaved parses flags that may come before or after positional
// arguments (`svc workflows start greet --input '{}'`); a "--" ends flags.
// A flag whose value may be left out (optDuration: --wait) takes the next
// argument as its value when that parses as one (`--wait 30s`), as a flag
// that needs a value would: one rule for every verb's --wait.
func parseInterleaved(fs *flag.FlagSet, args []string) error {
	args = slices.Clone(args)
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--" {
			break
		}
		name := strings.TrimLeft(args[i], "-")
		if !strings.HasPrefix(args[i], "-") || strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if o, ok := f.Value.(*optDuration); ok && o.takes(args[i+1]) {
				args = slices.Replace(args, i, i+2, args[i]+"="+args[i+1])
			}
		}
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}

// printUsage writes the help of command name (v: its verb; the root's has
// only subverbs): its synopsis, sub-verbs or flags and an example, the
// environment variables it reads (config_env.go), and the global flags.
func printUsage(w io.Writer, name string, v *verb, fs *flag.FlagSet) {
	if v.subverbs != nil {
		fmt.Fprintf(w, "usage: %s <verb> [flags]\n\nverbs:\n", name)
		for _, sv := range v.subverbs {
			fmt.Fprintf(w, "  %-13s %s\n", sv.name, sv.summary)
		}
	} else {
		fmt.Fprintf(w, "%s\n", strings.TrimSpace(fmt.Sprintf("usage: %s [flags] %s", name, v.usage)))
		if fs != nil {
			fmt.Fprintf(w, "\nflags:\n")
			fs.VisitAll(func(f *flag.Flag) {
				def := ""
				if f.DefValue != "" && f.DefValue != "false" {
					def = fmt.Sprintf(" (default %s)", f.DefValue)
				}
				fmt.Fprintf(w, "  --%-16s %s%s\n", f.Name, f.Usage, def)
			})
		}
	}
	if v.example != "" {
		fmt.Fprintf(w, "\nexample:\n  %s\n", v.example)
	}
	envHelp(w, name)
	fmt.Fprintf(w, "\nglobal flags:\n")
	names := make([]string, 0, len(globalFlags))
	for n := range globalFlags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-18s %s\n", n, globalFlags[n])
	}
}

// isBoolFlag reports whether f is a boolean flag.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
