package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// workflowVerbs are the `svc workflows` verbs (SPEC §4.2).
func workflowVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc workflows list", summary: "list the workflows of the target", newFlags: targetFlags("list"), run: runWorkflowsList},
		{name: "schema", example: "svc workflows schema greet", summary: "print a workflow's input/output schema", usage: "<name>", newFlags: targetFlags("schema"), run: runWorkflowsSchema},
		{name: "start", example: "svc workflows start greet --input '{\"name\":\"Ada\"}' --wait 30s", summary: "start a durable run", usage: "<name>", newFlags: newStartFlags, run: runWorkflowsStart},
	}
}

// runVerbs are the `svc runs` verbs.
func runVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc runs list --status failed,cancelled --since 24h --q ord_7F3K", summary: "list runs, newest first, a page at a time", newFlags: newRunsListFlags, run: runRunsList},
		{name: "get", example: "svc runs get 4f0c2a9e --wait 30s", summary: "print a run and its step timeline", usage: "<runId>", newFlags: newRunsGetFlags, run: runRunsGet},
		{name: "cancel", example: "svc runs cancel 4f0c2a9e", summary: "cancel an active run or queued entry", usage: "<runId>", newFlags: targetFlags("cancel"), run: runRunsCancel},
		{name: "rerun", example: "svc runs rerun 4f0c2a9e --from-step 3", summary: "run a run again with its input, or retry it from a step (--from-step N), as a new linked run", usage: "<runId>", newFlags: newRerunFlags, run: runRunsRerun},
		{name: "logs", example: "svc runs logs 4f0c2a9e", summary: "print the console lines of a run's workflow and step code", usage: "<runId>", newFlags: targetFlags("logs"), run: runRunsLogs},
		{name: "stream", example: "svc runs stream 4f0c2a9e", summary: "print the chunks a run's steps write (getWritable()), live until it ends", usage: "<runId>", newFlags: newRunsStreamFlags, run: runRunsStream},
	}
}

// targetFlags returns a constructor of a flag set with --agent only.
func targetFlags(name string) func() *flag.FlagSet {
	return func() *flag.FlagSet {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.String("agent", "", "installation id of a deployed box; default: the local runtime of `svc dev`")
		return fs
	}
}

// newStartFlags defines the flags of `svc workflows start`.
func newStartFlags() *flag.FlagSet {
	fs := targetFlags("start")()
	fs.String("input", "", "inline JSON object as workflow input; wins over --input-file (default {})")
	fs.String("input-file", "", "path to a JSON file holding the input")
	fs.String("idempotency-key", "", "a key that makes a retried start safe: the same key, workflow and input answer the first receipt and start nothing (1 to 255 visible ASCII characters)")
	fs.Var(&optDuration{def: defaultStartWait}, "wait", "wait for the run to end and print it (--wait alone: 30s, or --wait 2m; at most 5m); exit 1 when it failed or was cancelled")
	return fs
}

// defaultStartWait is the wait of a bare `svc workflows start --wait`.
const defaultStartWait = 30 * time.Second

// optDuration is a flag whose value may be left out: `--wait` alone means
// def, `--wait=2m` a duration of its own. Unset, it is 0.
type optDuration struct {
	d, def time.Duration
}

func (o *optDuration) String() string {
	if o == nil || o.d == 0 {
		return ""
	}
	return o.d.String()
}

// Set takes "true" (the flag given alone) as the default.
func (o *optDuration) Set(v string) error {
	if v == "true" {
		o.d = o.def
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("pass a duration such as 30s (--wait 30s or --wait=30s)")
	}
	o.d = d
	return nil
}

// IsBoolFlag lets the flag stand alone.
func (o *optDuration) IsBoolFlag() bool { return true }

// takes reports whether the argument after the flag is its value: a
// positive duration (parseInterleaved).
func (o *optDuration) takes(arg string) bool {
	d, err := time.ParseDuration(arg)
	return err == nil && d > 0
}

// newRunsListFlags defines the flags of `svc runs list`.
func newRunsListFlags() *flag.FlagSet {
	fs := targetFlags("list")()
	fs.String("workflow", "", "only runs of this workflow")
	fs.String("status", "", "only runs in these states, comma-separated: "+strings.Join(runStates, ", "))
	fs.String("trigger", "", "only runs started this way: "+strings.Join(runTriggers, ", "))
	fs.String("since", "", "only runs created from this time on: RFC 3339 or an age (90m, 24h, 7d)")
	fs.String("until", "", "only runs created before this time: RFC 3339 or an age")
	fs.String("q", "", "only runs whose input, output or error holds this text (any case), e.g. an order id")
	fs.Int("limit", runQueryDefaultLimit, fmt.Sprintf("runs per page, 1 to %d", runQueryMaxLimit))
	fs.String("cursor", "", "the page after this position: the nextCursor printed by the previous page")
	return fs
}

// newRunsGetFlags defines the flags of `svc runs get`.
func newRunsGetFlags() *flag.FlagSet {
	fs := targetFlags("get")()
	fs.Var(&optDuration{def: defaultStartWait}, "wait", "wait for the run to finish (--wait alone: 30s, or --wait 2m; at most 5m)")
	return fs
}

// target is the runtime a verb talks to.
type target struct {
	baseURL  string
	client   *http.Client
	key      string // sent as Bearer: the project's dev key, or a box's identity token ("" = none)
	devToken string // the session's token from .svc/runtime.json, sent to the dev-only routes
	box      bool   // a deployed box reached through --agent (cli_target.go)
}

// targetHealthTimeout bounds the identity check of the local runtime.
const targetHealthTimeout = 2 * time.Second

// resolveTarget finds the runtime: --agent (a deployed box, which needs a
// registered deployment), or the `svc dev` of the project in the current
// directory, which must be up.
func resolveTarget(ctx context.Context, c *cmd, fs *flag.FlagSet) (*target, error) {
	if agent := fs.Lookup("agent").Value.String(); agent != "" {
		return agentTarget(ctx, c, agent)
	}
	return localTarget(ctx, c)
}

// localTarget is the `svc dev` of the project in the current directory. It
// is found through .svc/runtime.json only, never at a default port, and
// must say on /api/health that it serves this directory and this local-dev
// installation: else another project's runtime would answer (issue 9).
func localTarget(ctx context.Context, c *cmd) (*target, error) {
	proj, err := loadProject(c.dir)
	if err != nil {
		return nil, err
	}
	if proj.Link == nil {
		return nil, failf(codeNoTarget, "run `svc init` or `svc link` here, or pass --agent <installationId>", "no project in %s and no --agent", proj.Dir)
	}
	startHint := "start it with `svc dev` in " + proj.Dir
	var rf devRuntimeFile
	b, err := os.ReadFile(proj.stateDir(devRuntimeFileName))
	if err != nil {
		return nil, failf(codeDevNotRunning, startHint, "svc dev is not running for %s (no .svc/%s)", proj.Dir, devRuntimeFileName)
	}
	if err := json.Unmarshal(b, &rf); err != nil || rf.URL == "" {
		return nil, failf(codeDevNotRunning, startHint, "svc dev is not running for %s (.svc/%s is unreadable)", proj.Dir, devRuntimeFileName)
	}
	t := &target{baseURL: rf.URL, client: &http.Client{}, devToken: rf.Token}
	// Under --tls the runtime serves svc's own certificate; trust it alone.
	if strings.HasPrefix(rf.URL, "https://") {
		if t.client, err = devTLSClient(proj.stateDir()); err != nil {
			return nil, failf(codeGeneric, "restart `svc dev --tls` in "+proj.Dir+" to make it anew", "svc dev serves %s over HTTPS but its certificate is unreadable: %v", rf.URL, err)
		}
	}
	// On loopback, where the kernel says who owns a socket, the CLI sends
	// nothing before it knows the port is served by this account, and then
	// no key: svc dev admits its own account without one. Elsewhere (a
	// --listen address, a system that cannot say) it sends the dev key.
	if devLoopbackURL(rf.URL) && httpPeerKnown() {
		t.client = devOwnedClient(t.client)
	} else if b, err := os.ReadFile(proj.stateDir(devAPIKeyFile)); err == nil {
		t.key = strings.TrimSpace(string(b))
	}
	hctx, cancel := context.WithTimeout(ctx, targetHealthTimeout)
	defer cancel()
	_, body, err := t.do(hctx, http.MethodGet, "/api/health", nil, nil)
	if notOwned := (*devNotOwnedError)(nil); errors.As(err, &notOwned) {
		return nil, failf(codeDevNotRunning, startHint, "svc dev is not running for %s: %v (.svc/%s is left from a svc dev that stopped)", proj.Dir, notOwned, devRuntimeFileName)
	}
	if err != nil {
		return nil, failf(codeDevNotRunning, startHint, "svc dev is not running for %s (%s unreachable)", proj.Dir, rf.URL)
	}
	var h struct {
		ProjectDir             string `json:"project_dir"`
		LocalDevInstallationID string `json:"local_dev_installation_id"`
	}
	if json.Unmarshal(body, &h) != nil || h.ProjectDir == "" {
		return nil, failf(codeDevNotRunning, startHint, "svc dev is not running for %s (%s does not answer as svc dev)", proj.Dir, rf.URL)
	}
	if !sameDir(h.ProjectDir, proj.Dir) || h.LocalDevInstallationID != proj.Link.LocalDevInstallationID {
		return nil, failf(codeDevNotRunning, startHint, "svc dev is not running for %s (local-dev installation %s): %s serves %s (installation %s)",
			proj.Dir, proj.Link.LocalDevInstallationID, rf.URL, h.ProjectDir, orNone([]string{h.LocalDevInstallationID}))
	}
	return t, nil
}

// sameDir reports whether a and b name the same directory once cleaned and
// with symlinks resolved (a path that cannot be resolved is compared as is).
func sameDir(a, b string) bool {
	resolve := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	return resolve(a) == resolve(b)
}

// do sends a request and returns the status and body.
func (t *target) do(ctx context.Context, method, path string, body []byte, header http.Header) (int, []byte, error) {
	resp, err := t.send(ctx, method, path, body, header)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// send sends a request with the target's credential and returns the
// response, its body unread (the caller closes it).
func (t *target) send(ctx context.Context, method, path string, body []byte, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return t.client.Do(req)
}

// call sends a request and decodes a 2xx body into out; an error body
// becomes a *cliError with the exit code of its status.
func (t *target) call(ctx context.Context, method, path string, body []byte, header http.Header, out any) error {
	status, b, err := t.do(ctx, method, path, body, header)
	if err != nil {
		return t.unreachable(err)
	}
	if status >= 300 {
		return t.statusError(method, path, status, b)
	}
	return json.Unmarshal(b, out)
}

// statusError turns an error answer into a *cliError that keeps the
// runtime's error code (schema_validation with its violations, invalid_json,
// gate_closed, workflow_compile_failed, …) while the exit code follows the
// table of SPEC §7: a code the table lacks exits 4 on a 404, 2 on a 401,
// else 1.
func (t *target) statusError(method, path string, status int, body []byte) *cliError {
	var eb struct {
		Error apiError `json:"error"`
	}
	json.Unmarshal(body, &eb)
	ce := &cliError{Code: eb.Error.Code, Message: eb.Error.Message, Violations: eb.Error.Violations}
	if ce.Message == "" {
		ce.Message = fmt.Sprintf("%s %s: HTTP %d", method, path, status)
	}
	if _, known := exitCodes[ce.Code]; !known {
		switch status {
		case http.StatusNotFound:
			ce.Exit = exitCodes[codeNotFound]
		case http.StatusUnauthorized:
			ce.Exit = exitCodes[codeAuth]
		}
	}
	if ce.Code == "" {
		ce.Code = codeGeneric
		switch status {
		case http.StatusNotFound:
			ce.Code = codeNotFound
		case http.StatusUnauthorized:
			ce.Code = codeAuth
		}
	}
	if ce.Code == "gate_closed" {
		ce.Hint = "set OPENAI_API_KEY, ANTHROPIC_API_KEY or SVC_MODEL_BASE_URL for svc dev, or store a model provider in its console (" + t.baseURL + "/)"
	}
	return ce
}

// oneArg returns the single positional argument named what.
func oneArg(fs *flag.FlagSet, what string) (string, error) {
	if fs.NArg() != 1 {
		return "", fmt.Errorf("want exactly one %s: %w", what, errUsage)
	}
	return fs.Arg(0), nil
}

// argAndTarget returns the single positional argument (named what) and the
// resolved target of a verb.
func argAndTarget(ctx context.Context, c *cmd, fs *flag.FlagSet, what string) (string, *target, error) {
	arg, err := oneArg(fs, what)
	if err != nil {
		return "", nil, err
	}
	t, err := resolveTarget(ctx, c, fs)
	return arg, t, err
}

// listPage is the answer of a list route: {"schema_version":1,"items":[…]}.
type listPage[T any] struct {
	SchemaVersion int `json:"schema_version"`
	Items         []T `json:"items"`
}

// fetchList is the request of a list verb that takes no arguments: GET
// path of its target.
func fetchList[T any](ctx context.Context, c *cmd, fs *flag.FlagSet, path string) (listPage[T], error) {
	var out listPage[T]
	if fs.NArg() != 0 {
		return out, fmt.Errorf("list takes no arguments: %w", errUsage)
	}
	t, err := resolveTarget(ctx, c, fs)
	if err != nil {
		return out, err
	}
	return out, t.call(ctx, http.MethodGet, path, nil, nil, &out)
}

// runWorkflowsList is `svc workflows list`.
func runWorkflowsList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	out, err := fetchList[workflowItem](ctx, c, fs, "/api/workflows")
	if err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		if len(out.Items) == 0 {
			fmt.Fprintln(w, "No workflows exposed by this installation.")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, it := range out.Items {
			marker := "◇"
			if it.HasSchema {
				marker = "◆"
			}
			fmt.Fprintf(tw, "%s %s\t%s\n", marker, it.Name, it.Trigger)
		}
		tw.Flush()
	})
	return nil
}

// runWorkflowsSchema is `svc workflows schema <name>`.
func runWorkflowsSchema(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	name, t, err := argAndTarget(ctx, c, fs, "workflow name")
	if err != nil {
		return err
	}
	var out struct {
		SchemaVersion int `json:"schema_version"`
		Schema        struct {
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
		} `json:"schema"`
	}
	if err := t.call(ctx, http.MethodGet, "/api/workflows/"+name+"/schema", nil, nil, &out); err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		if isJSONNull(out.Schema.Input) && isJSONNull(out.Schema.Output) {
			fmt.Fprintf(w, "Workflow %s declares no input/output schema; the playground falls back to a raw JSON field.\n", name)
			return
		}
		for _, part := range []struct {
			label string
			raw   json.RawMessage
		}{{"input", out.Schema.Input}, {"output", out.Schema.Output}} {
			var buf bytes.Buffer
			json.Indent(&buf, part.raw, "", "  ")
			fmt.Fprintf(w, "%s:\n%s\n", part.label, buf.String())
		}
	})
	return nil
}

// isJSONNull reports whether raw is absent or null.
func isJSONNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// readStartInput returns the input of `workflows start`: --input wins over
// --input-file; neither is {}. Invalid JSON (invalid_json, the runtime's
// code for it) or an unreadable file (generic) fails here, before anything
// is sent.
func readStartInput(fs *flag.FlagSet) ([]byte, error) {
	input, file := fs.Lookup("input").Value.String(), fs.Lookup("input-file").Value.String()
	var raw []byte
	source := "--input"
	switch {
	case input != "":
		raw = []byte(input)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, failf(codeGeneric, "check the path given to --input-file", "cannot read --input-file: %v", err)
		}
		raw, source = b, "--input-file "+file
	default:
		return []byte("{}"), nil
	}
	if err := checkStartInput(raw); err != nil {
		return nil, failf("invalid_json", `pass a JSON object, e.g. --input '{"name":"Ada"}'`, "%s: %v; nothing was started", source, err)
	}
	return raw, nil
}

// runWorkflowsStart is `svc workflows start <name>`.
func runWorkflowsStart(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	name, err := oneArg(fs, "workflow name")
	if err != nil {
		return err
	}
	input, err := readStartInput(fs)
	if err != nil {
		return err
	}
	t, err := resolveTarget(ctx, c, fs)
	if err != nil {
		return err
	}
	path := "/api/workflows/" + name + "/start"
	header, wait, err := startHeader(fs)
	if err != nil {
		return err
	}
	return postStart(ctx, c, t, path, input, header, wait, name)
}

// startHeader reads the flags a start and a rerun share: the header that
// marks the CLI's trigger and carries --idempotency-key, and --wait.
func startHeader(fs *flag.FlagSet) (http.Header, time.Duration, error) {
	header := http.Header{triggerHeader: {triggerCLI}}
	if key := fs.Lookup("idempotency-key").Value.String(); key != "" {
		if err := checkIdemKey(key); err != nil {
			return nil, 0, failf("invalid_idempotency_key", "pass a key such as a UUID", "--idempotency-key: %v; nothing was started", err)
		}
		header.Set(idemKeyHeader, key)
	}
	return header, fs.Lookup("wait").Value.(*optDuration).d, nil
}

// postStart sends a start (or a rerun) and prints its receipt, or the run
// when it ended within wait (exit 1 when it did not complete).
func postStart(ctx context.Context, c *cmd, t *target, path string, body []byte, header http.Header, wait time.Duration, name string) error {
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	var rc struct {
		startReceipt
		Run *runRecord `json:"run"` // the ended run, when it ended within --wait
	}
	if err := t.call(ctx, http.MethodPost, path, body, header, &rc); err != nil {
		return err
	}
	if rc.Run != nil {
		r := *rc.Run
		c.emit(map[string]any{"schema_version": schemaVersion, "run": r}, func(w io.Writer) { printEndedRun(w, r) })
		if r.Status == runFailed || r.Status == runCancelled {
			return reportedExit(1) // the run is printed; it did not complete
		}
		return nil
	}
	if name == "" {
		name = rc.WorkflowName
	}
	c.emit(rc.startReceipt, func(w io.Writer) {
		switch {
		case rc.Existing && rc.Status == "queued":
			fmt.Fprintf(w, "Already started: this idempotency key queued %s before (queue entry %s); nothing new was started.\n", name, rc.QueueID)
			return
		case rc.Status == "queued":
			fmt.Fprintf(w, "Workflow %s is queued: an earlier run is still active. It starts automatically when the queue frees.\n", name)
			return
		case rc.Existing:
			fmt.Fprintf(w, "Already started: this idempotency key started %s before; nothing new was started.\n  runId    %s\n  traceId  %s\n", name, rc.RunID, rc.WorldRunID)
		default:
			fmt.Fprintf(w, "Started %s\n  runId    %s\n  traceId  %s\n  trigger  %s\n", name, rc.RunID, rc.WorldRunID, rc.Trigger)
		}
		switch {
		case rc.RetryFromStep > 1:
			fmt.Fprintf(w, "  rerunOf  %s (from step %d: steps 1 to %d reused)\n", rc.RerunOf, rc.RetryFromStep, rc.RetryFromStep-1)
		case rc.RerunOf != "":
			fmt.Fprintf(w, "  rerunOf  %s\n", rc.RerunOf)
		}
		if wait > 0 {
			fmt.Fprintf(w, "It is still running after %s: svc runs get %s --wait 30s\n", wait, rc.RunID)
		}
	})
	return nil
}

// runRunsRerun is `svc runs rerun <runId>`: run it again with the same
// input, or with --from-step N reuse the outcomes of the steps before N.
func runRunsRerun(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	id, t, err := argAndTarget(ctx, c, fs, "run id")
	if err != nil {
		return err
	}
	header, wait, err := startHeader(fs)
	if err != nil {
		return err
	}
	var body []byte
	if from, _ := strconv.Atoi(fs.Lookup("from-step").Value.String()); from != 0 {
		if from < 0 {
			return failf("invalid_step", "pass the number of a step in the run's timeline (svc runs get "+id+")", "--from-step %d: want 1 or more; nothing was started", from)
		}
		body, _ = json.Marshal(rerunBody{FromStep: from})
	}
	return postStart(ctx, c, t, "/api/runs/"+url.PathEscape(id)+"/rerun", body, header, wait, "")
}

// newRerunFlags defines the flags of `svc runs rerun`.
func newRerunFlags() *flag.FlagSet {
	fs := targetFlags("rerun")()
	fs.Int("from-step", 0, "retry from this step: the steps before it are not run again, their journaled outcomes are reused (0: run again from the start)")
	fs.String("idempotency-key", "", "a key that makes a retried rerun safe, as on svc workflows start")
	fs.Var(&optDuration{def: defaultStartWait}, "wait", "wait for the new run to end and print it (--wait alone: 30s); exit 1 when it failed or was cancelled")
	return fs
}

// printEndedRun prints what `svc workflows start --wait` shows of a run that
// ended: its output, or its error with the run id to inspect.
func printEndedRun(w io.Writer, r runRecord) {
	if r.Status == runCompleted {
		fmt.Fprintf(w, "%s\n", r.Output)
		return
	}
	fmt.Fprintf(w, "run %s %s", r.RunID, r.Status)
	if r.Error != nil {
		fmt.Fprintf(w, ": %s: %s", r.Error.Name, r.Error.Message)
	}
	fmt.Fprintf(w, "\n  see the timeline with: svc runs get %s\n", r.RunID)
}

// runsListFlags are the flags of `svc runs list` that become query
// parameters of GET /api/runs, each under its own name.
var runsListFlags = []string{"workflow", "status", "trigger", "since", "until", "q", "limit", "cursor"}

// runsListQuery turns the flags of `svc runs list` into the query of GET
// /api/runs, refusing what the runtime would refuse (parseRunQuery) before
// anything is sent.
func runsListQuery(fs *flag.FlagSet) (url.Values, error) {
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("list takes no arguments: %w", errUsage)
	}
	v := url.Values{}
	for _, name := range runsListFlags {
		if value := fs.Lookup(name).Value.String(); value != "" {
			v.Set(name, value)
		}
	}
	if _, err := parseRunQuery(v); err != nil {
		var qe *runQueryError
		if errors.As(err, &qe) {
			return nil, failf(codeGeneric, "run `svc runs list --help`", "invalid --%s %q: want %s", qe.Param, qe.Value, qe.Want)
		}
		return nil, err
	}
	return v, nil
}

// runsListNext is the command that prints the page after the one shown:
// the same filters, and the cursor.
func runsListNext(self string, fs *flag.FlagSet, cursor string) string {
	cmd := self + " runs list"
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "cursor" {
			cmd += " --" + f.Name + " " + shellWord(f.Value.String())
		}
	})
	return cmd + " --cursor " + cursor
}

// shellWord quotes s for a POSIX shell when it holds more than letters,
// digits and -_.,:/@=.
func shellWord(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,:/@=", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runRunsList is `svc runs list`: one page of runs, newest first, and the
// starts queued behind a concurrency limit.
func runRunsList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	query, err := runsListQuery(fs)
	if err != nil {
		return err
	}
	t, err := resolveTarget(ctx, c, fs)
	if err != nil {
		return err
	}
	var out struct {
		SchemaVersion int             `json:"schema_version"`
		Items         []runRecord     `json:"items"`
		Queued        []queuedTrigger `json:"queued"`
		NextCursor    string          `json:"nextCursor,omitempty"`
	}
	path := "/api/runs"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	if err := t.call(ctx, http.MethodGet, path, nil, nil, &out); err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		if len(out.Items) == 0 && len(out.Queued) == 0 {
			if len(query) > 0 && !(len(query) == 1 && query.Has("limit")) {
				fmt.Fprintln(w, "No matching runs.")
			} else {
				fmt.Fprintln(w, "No runs yet.")
			}
			return
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTATUS\tTRIGGER\tSTEPS\tCREATED")
		for _, q := range out.Queued {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t%s\n", q.QueueID, q.WorkflowName, runQueued, q.Trigger, q.CreatedAt.Local().Format(time.DateTime))
		}
		for _, r := range out.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.RunID, runShownName(r), r.Status, r.Trigger, len(r.Steps), r.CreatedAt.Local().Format(time.DateTime))
		}
		tw.Flush()
		if out.NextCursor != "" {
			fmt.Fprintf(w, "More runs: %s\n", runsListNext(c.selfCommand(c.dir), fs, out.NextCursor))
		}
	})
	return nil
}

// runShownName is what the WORKFLOW column of `svc runs list` shows of a
// run: its workflow, or for an agent's turn the agent and the wire (which
// a turn recorded by an earlier version lacks in its workflowName).
func runShownName(r runRecord) string {
	if r.WorkflowName == "" && r.Agent != "" {
		return agentTurnName(r.Agent, r.Wire)
	}
	return r.WorkflowName
}

// runRunsGet is `svc runs get <runId>`.
func runRunsGet(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	id, t, err := argAndTarget(ctx, c, fs, "run id")
	if err != nil {
		return err
	}
	path := "/api/runs/" + id
	wait := fs.Lookup("wait").Value.String()
	if wait != "" {
		path += "?wait=" + wait
	}
	r, err := showRun(ctx, c, t, http.MethodGet, path)
	if err == nil && wait != "" && (r.Status == runFailed || r.Status == runCancelled) {
		return reportedExit(1) // the run is printed; waiting on it failed
	}
	return err
}

// runRunsLogs is `svc runs logs <runId>`: the console lines kept with the
// run, oldest first, with the step and attempt that wrote them.
func runRunsLogs(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	id, t, err := argAndTarget(ctx, c, fs, "run id")
	if err != nil {
		return err
	}
	r, err := fetchRun(ctx, t, http.MethodGet, "/api/runs/"+id)
	if err != nil {
		return err
	}
	logs := orEmpty(r.Logs)
	c.emit(map[string]any{"schema_version": schemaVersion, "runId": r.RunID, "logs": logs, "logsDropped": r.LogsDropped}, func(w io.Writer) {
		if len(logs) == 0 {
			fmt.Fprintln(w, "No console lines kept for this run.")
		}
		for _, l := range logs {
			where := "workflow"
			if l.Step != "" {
				where = fmt.Sprintf("%s#%d", l.Step, l.Attempt)
			}
			fmt.Fprintf(w, "%s %-5s %-16s %s\n", l.At.Local().Format("15:04:05.000"), l.Level, where, l.Message)
		}
		if r.LogsDropped > 0 {
			fmt.Fprintf(w, "(%d later lines were dropped: a run keeps at most %d)\n", r.LogsDropped, runMaxLogs)
		}
	})
	return nil
}

// runRunsCancel is `svc runs cancel <runId>`.
func runRunsCancel(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	id, t, err := argAndTarget(ctx, c, fs, "run id")
	if err != nil {
		return err
	}
	_, err = showRun(ctx, c, t, http.MethodPost, "/api/runs/"+id+"/cancel")
	return err
}

// showRun requests a run and prints it with its timeline.
// fetchRun reads one run (method GET, or POST for a cancel).
func fetchRun(ctx context.Context, t *target, method, path string) (runRecord, error) {
	var out struct {
		Run runRecord `json:"run"`
	}
	if err := t.call(ctx, method, path, nil, nil, &out); err != nil {
		if ce := (*cliError)(nil); errors.As(err, &ce) && ce.exitCode() == exitCodes[codeNotFound] {
			ce.Hint = "list runs with `svc runs list`"
		}
		return runRecord{}, err
	}
	return out.Run, nil
}

// showRun reads a run and prints it: the envelope, or the record and its
// timeline (hook tokens, wake times, every attempt's error) for a person.
func showRun(ctx context.Context, c *cmd, t *target, method, path string) (runRecord, error) {
	r, err := fetchRun(ctx, t, method, path)
	if err != nil {
		return r, err
	}
	c.emit(map[string]any{"schema_version": schemaVersion, "run": r}, func(w io.Writer) {
		label, name := "workflow", runShownName(r)
		if r.Agent != "" {
			label, name = "agent", r.Agent+" ("+r.Wire
			if r.SessionID != "" {
				name += ", session " + r.SessionID
			}
			name += ")"
		}
		fmt.Fprintf(w, "run       %s\ntrace     %s\n%-9s %s\nstatus    %s\ntrigger   %s\ninput     %s\n", r.RunID, r.TraceID, label, name, r.Status, r.Trigger, r.Input)
		if len(r.Output) > 0 {
			fmt.Fprintf(w, "output    %s\n", r.Output)
		}
		if r.Error != nil {
			fmt.Fprintf(w, "error     %s: %s\n", r.Error.Name, r.Error.Message)
		}
		if r.RerunOf != "" {
			fmt.Fprintf(w, "rerunOf   %s", r.RerunOf)
			if r.RetryFromStep > 1 {
				fmt.Fprintf(w, " (from step %d)", r.RetryFromStep)
			}
			fmt.Fprintln(w)
		}
		if len(r.Reruns) > 0 {
			fmt.Fprintf(w, "reruns    %s\n", strings.Join(r.Reruns, ", "))
		}
		for _, s := range r.Steps {
			line := fmt.Sprintf("  #%d %-12s %-20s %s", s.Seq, s.Kind, s.Name, s.Status)
			if s.DurationMs != nil {
				line += fmt.Sprintf(" %.2fms", *s.DurationMs)
			}
			if len(s.Attempts) > 1 {
				line += fmt.Sprintf(" (%d attempts)", len(s.Attempts))
			}
			if s.Reused {
				line += " (reused from " + r.RerunOf + ")"
			}
			switch {
			case s.Token != "":
				line += "  token " + s.Token
			case s.Until != nil && s.Status == runWaiting:
				line += "  wakes " + s.Until.Local().Format(time.DateTime)
			case s.ChildRunID != "":
				line += "  child " + s.ChildRunID
			}
			fmt.Fprintln(w, strings.TrimRight(line, " "))
			for _, a := range s.Attempts {
				if a.Error != nil {
					fmt.Fprintf(w, "      attempt %d: %s: %s\n", a.Attempt, a.Error.Name, a.Error.Message)
				}
			}
		}
		if n := len(r.Logs); n > 0 {
			fmt.Fprintf(w, "logs      %d console lines: svc runs logs %s\n", n, r.RunID)
		}
	})
	return r, nil
}

// hookVerbs are the sub-verbs of `svc hooks`.
func hookVerbs() []*verb {
	return []*verb{
		{name: "resume", example: `svc hooks resume hook_4f0c2a9e_9b1d --payload '{"approved":true}'`, summary: "deliver a JSON payload to the run waiting on a hook token (what createHook() returned; svc runs get shows it)",
			usage: "<token>", newFlags: newHookResumeFlags, run: runHooksResume},
	}
}

// newHookResumeFlags defines the flags of `svc hooks resume`.
func newHookResumeFlags() *flag.FlagSet {
	fs := targetFlags("resume")()
	fs.String("payload", "", "the JSON the hook resolves with; wins over --payload-file (default null)")
	fs.String("payload-file", "", "path to a file holding the JSON payload")
	return fs
}

// runHooksResume is `svc hooks resume <token>`: POST /api/hooks/{token}
// with the payload, which is checked as the runtime checks it before
// anything is sent.
func runHooksResume(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	token, err := oneArg(fs, "hook token")
	if err != nil {
		return err
	}
	payload := []byte(fs.Lookup("payload").Value.String())
	if len(payload) == 0 {
		if file := fs.Lookup("payload-file").Value.String(); file != "" {
			if payload, err = os.ReadFile(file); err != nil {
				return failf(codeGeneric, "check the path given to --payload-file", "cannot read --payload-file: %v", err)
			}
		}
	}
	if len(payload) == 0 {
		payload = []byte("null")
	}
	if err := edgeJSON.check(payload); err != nil {
		return failf("invalid_json", `pass JSON, e.g. --payload '{"approved":true}'`, "the payload is not acceptable JSON: %v; nothing was sent", err)
	}
	t, err := resolveTarget(ctx, c, fs)
	if err != nil {
		return err
	}
	var out struct {
		SchemaVersion int    `json:"schema_version"`
		RunID         string `json:"runId"`
	}
	if err := t.call(ctx, http.MethodPost, "/api/hooks/"+url.PathEscape(token), payload, nil, &out); err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "Resumed run %s: it goes on from its hook.\n  svc runs get %s --wait 30s\n", out.RunID, out.RunID)
	})
	return nil
}
