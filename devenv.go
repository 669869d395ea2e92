package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Default dev ports; each is shifted by SVC_DEV_PORT_OFFSET. PostgreSQL and
// object storage sit just above the API port (API+1, API+2).
const (
	defaultAPIPort = 4242
	devGCPercent   = 400
)

// newDevFlags defines the flags of `svc dev` (SPEC §4.2).
func newDevFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.String("port", strconv.Itoa(defaultAPIPort), "emulator API port, an integer in 1-65535; PostgreSQL uses port+1 and object storage port+2, all shifted by SVC_DEV_PORT_OFFSET")
	fs.Bool("listen", false, "bind 0.0.0.0 (LAN-reachable) instead of 127.0.0.1")
	fs.Bool("tls", false, "serve the API over HTTPS with a certificate svc makes (.svc/"+devTLSCertFile+"), its SHA-256 fingerprint printed")
	fs.Bool("print-contract", false, "print the contract JSON and exit without booting")
	fs.Bool("auto-migrate", true, "generate and apply a migration when src/schema.ts is edited (overrides dev.autoMigrate in agent.yaml)")
	fs.Bool("no-auto-migrate", false, "turn auto-migrate off for this session")
	return fs
}

// devOptions are the validated flags and environment of `svc dev`.
type devOptions struct {
	apiPort, pgPort, s3Port int
	offset                  int
	host                    string // bind address
	autoMigrate             *bool  // nil: use agent.yaml
	printContract           bool
	tls                     bool // --tls: the API serves HTTPS (dev_tls.go)

	// allowedHosts and allowedOrigins are SVC_ALLOWED_HOSTS and
	// SVC_ALLOWED_ORIGINS, normalized for the HTTP guard.
	allowedHosts, allowedOrigins []string

	// relayAddr and relayName are SVC_RELAY_URL's address and TLS name
	// ("": no tunnel; tunnel.go).
	relayAddr, relayName string

	// s3Endpoint is SVC_S3_ENDPOINT: the external object storage user code
	// uses ("": the built-in one, on s3Port).
	s3Endpoint string

	// engine is SVC_ENGINE and its lease settings (engine_store.go).
	engine engineSettings
}

// parseDevOptions validates the flags and SVC_DEV_PORT_OFFSET before
// anything is started.
func parseDevOptions(c *cmd, fs *flag.FlagSet) (devOptions, error) {
	var o devOptions
	if fs.NArg() > 0 {
		return o, fmt.Errorf("dev takes no arguments, got %q: %w", fs.Arg(0), errUsage)
	}
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	port, err := strconv.Atoi(get("port"))
	if err != nil || port < 1 || port > 65535 {
		return o, failf(codeGeneric, "pass an integer between 1 and 65535, e.g. --port 4242", "invalid --port %q: want an integer in 1-65535", get("port"))
	}
	if v := c.getenv("SVC_DEV_PORT_OFFSET"); v != "" {
		o.offset, err = strconv.Atoi(v)
		if err != nil || o.offset < 0 {
			return o, failf(codeGeneric, "set SVC_DEV_PORT_OFFSET to a small non-negative integer such as 10", "invalid SVC_DEV_PORT_OFFSET %q", v)
		}
	}
	o.apiPort, o.pgPort, o.s3Port = port+o.offset, port+o.offset+1, port+o.offset+2
	if o.s3Port > 65535 {
		return o, failf(codeGeneric, "lower --port or SVC_DEV_PORT_OFFSET", "ports %d-%d exceed 65535", o.apiPort, o.s3Port)
	}
	o.host = "127.0.0.1"
	if get("listen") == "true" {
		o.host = "0.0.0.0"
	}
	if o.allowedHosts, err = httpGuardList(c.getenv("SVC_ALLOWED_HOSTS"), httpGuardHost); err != nil {
		return o, failf(codeGeneric, "set SVC_ALLOWED_HOSTS to comma-separated host names or IP addresses, e.g. devbox.lan,devbox", "invalid SVC_ALLOWED_HOSTS: %v", err)
	}
	if o.allowedOrigins, err = httpGuardList(c.getenv("SVC_ALLOWED_ORIGINS"), httpGuardOriginNormalize); err != nil {
		return o, failf(codeGeneric, "set SVC_ALLOWED_ORIGINS to comma-separated origins, e.g. http://devbox.lan:3000", "invalid SVC_ALLOWED_ORIGINS: %v", err)
	}
	if v := c.getenv("SVC_RELAY_URL"); v != "" {
		if o.relayAddr, o.relayName, err = parseTunnelRelay(v); err != nil {
			return o, failf(codeGeneric, "set SVC_RELAY_URL to the relay's address, e.g. https://relay.example.com", "invalid SVC_RELAY_URL: %v", err)
		}
	}
	o.s3Endpoint = c.getenv("SVC_S3_ENDPOINT")
	if o.engine, err = readEngineSettings(c.getenv); err != nil {
		return o, failf(codeGeneric, "unset SVC_ENGINE or set it to file or postgres; leases are durations such as 10s and 3s", "svc dev: %v", err)
	}
	o.printContract = get("print-contract") == "true"
	o.tls = get("tls") == "true"
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String() == "true"
		switch f.Name {
		case "auto-migrate":
			o.autoMigrate = &v
		case "no-auto-migrate":
			v = !v
			o.autoMigrate = &v
		}
	})
	return o, nil
}

// devPayload is the JSON line `svc dev` prints once the runtime is up (SPEC §4.2).
type devPayload struct {
	SchemaVersion          int             `json:"schema_version"`
	EmulatorURL            string          `json:"emulator_url"`
	AgentURL               string          `json:"agent_url"`
	PublicURL              *string         `json:"public_url"`
	Deeplink               *string         `json:"deeplink"`
	LocalDevInstallationID string          `json:"local_dev_installation_id"`
	Gate                   gateState       `json:"gate"`
	DeepAgents             []string        `json:"deep_agents"`
	Services               runtimeServices `json:"services"`
}

// runDev is `svc dev`: validate, boot the runtime in SPEC order, print the
// payload, serve until SIGINT/SIGTERM, then stop everything it started.
func runDev(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	opts, err := parseDevOptions(c, fs)
	if err != nil {
		return err
	}
	if opts.printContract {
		// With --json the envelope's data is the contract, byte for byte
		// the body of GET /api/contract without its final newline.
		if c.json {
			writeEnvelope(c.stdout, envelope{OK: true, Data: json.RawMessage(bytes.TrimSuffix(contractPayload(), []byte("\n")))})
			return nil
		}
		_, err := c.stdout.Write(contractPayload())
		return err
	}
	proj, err := loadProject(c.dir)
	if err != nil {
		return err
	}
	if err := projectForDev(ctx, c, proj); err != nil {
		return err
	}
	if gi, err := os.ReadFile(filepath.Join(proj.Dir, ".gitignore")); err == nil && gitignoreHidesMigrations(gi) {
		newDevLogger(c).Warn(".gitignore hides .svc/migrations/: the migrations auto-migrate writes never reach git or a deployed box",
			"hint", "replace the line that ignores .svc/ with `.svc/*` followed by `!.svc/migrations/`")
	}
	if c.getenv("GOGC") == "" {
		// Every workflow execution builds a fresh VM: short-lived garbage in
		// volume. A larger heap target roughly halves GC work under load
		// (W2 of docs/benchmarks.md), for a live heap of a few tens of MiB.
		debug.SetGCPercent(devGCPercent)
	}
	rt, err := bootDev(ctx, c, opts, proj)
	if err != nil {
		return err
	}
	rt.announce()
	select {
	case <-ctx.Done():
		rt.log.Info("stopping")
	case err = <-rt.fatal:
	}
	rt.close()
	rt.log.Info("stopped")
	return err
}

// ensureLocalProject handles a missing .svc/project.json (SPEC §4.2):
// non-interactive runs fail with no_project; in a terminal without a
// control plane the user may create a local-only project here.
func ensureLocalProject(c *cmd, proj *project) error {
	noProject := failf(codeNoProject, "run `svc init` to scaffold a project, `svc link` to link this directory, or `svc dev` in a terminal to pick or create one",
		"no .svc/project.json in %s", proj.Dir)
	if !c.interactive() {
		return noProject
	}
	fmt.Fprintf(c.stderr, "No .svc/project.json in %s.\nCreate a local-only project here? [Y/n] ", proj.Dir)
	var answer string
	fmt.Fscanln(c.stdin, &answer)
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "" && a != "y" && a != "yes" {
		return noProject
	}
	name := proj.Config.Name
	if name == "" {
		name = filepath.Base(proj.Dir)
	}
	pf := &projectFile{SchemaVersion: schemaVersion, OrganizationID: "local", OrganizationSlug: "local",
		Agent: projectAgent{ID: randomID("agt_", 8), Slug: slugify(name), Name: name}, LocalDevInstallationID: randomID("ldi_", 8)}
	b, _ := json.MarshalIndent(pf, "", "  ")
	if err := writeFileAtomic(proj.stateDir("project.json"), append(b, '\n'), privateFileMode); err != nil {
		return err
	}
	proj.Link = pf
	return nil
}

// devRuntime is `svc dev`: the shared runtime (runtime.go) with dev's
// services around it: the local PostgreSQL, editor types, auto-migrate,
// the watcher, .svc/runtime.json and the payload line. Fields set at boot
// are read-only afterwards.
type devRuntime struct {
	*runtimeCore
	c        *cmd
	opts     devOptions
	pg       *pgService
	devToken string // proof of reading .svc/runtime.json, asked by the dev-only routes
	// keys are what every route accepts (devAPIKeys): the dev key first,
	// as read at boot; guardKeys holds them since, the dev key rotated
	// (POST /api/dev/rotate-key).
	keys      []string
	guardKeys *httpGuardKeys
	// console holds the console's sessions; consoleCode is the code of the
	// link last printed, replaced once used (devConsoleLink).
	console     *consoleSessions
	consoleCode string

	announceMu sync.Mutex // serialises payload lines on stdout

	tunnel *tunnelClient // nil: no relay configured (tunnel.go)
	tls    *devTLSCert   // nil: plain HTTP (no --tls; dev_tls.go)
}

// newDevLogger logs to stderr, debug level with --verbose.
func newDevLogger(c *cmd) *slog.Logger {
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}))
}

// portInUse reports a busy port as a generic error naming the port and the
// offset variable.
func portInUse(service string, port, offset int, err error) error {
	msg := fmt.Sprintf("port %d (%s) is busy", port, service)
	if held := (*devHeldError)(nil); errors.As(err, &held) {
		msg += ": " + held.Error()
	}
	return &cliError{Code: codeGeneric, Err: err,
		Message: msg,
		Hint:    fmt.Sprintf("stop whatever listens there (another svc dev?), pass --port, or set SVC_DEV_PORT_OFFSET (now %d) to e.g. %d", offset, offset+10)}
}

// bootDev starts everything in SPEC §1 order. On failure it stops what it
// had started and returns the error.
func bootDev(ctx context.Context, c *cmd, opts devOptions, proj *project) (_ *devRuntime, err error) {
	began := time.Now()
	rt := &devRuntime{runtimeCore: newRuntimeCore(newDevLogger(c), proj), c: c, opts: opts}
	defer func() {
		if err != nil {
			rt.close()
		}
	}()
	bgctx, stop := context.WithCancel(context.Background())
	rt.closers = append(rt.closers, func(context.Context) error { stop(); rt.wg.Wait(); return nil })

	// Listen first so a busy port fails before anything is started.
	apiLn, err := devListen(opts.host, opts.apiPort)
	if err != nil {
		return nil, portInUse("API", opts.apiPort, opts.offset, err)
	}
	rt.closers = append(rt.closers, func(context.Context) error { apiLn.Close(); return nil })
	// The built-in object storage listens only when it serves: not beside SVC_S3_ENDPOINT.
	var s3Ln net.Listener
	s3Endpoint := opts.s3Endpoint
	if s3Endpoint == "" {
		if s3Ln, err = devListen(opts.host, opts.s3Port); err != nil {
			return nil, portInUse("object storage", opts.s3Port, opts.offset, err)
		}
		rt.closers = append(rt.closers, func(context.Context) error { s3Ln.Close(); return nil })
		s3Endpoint = "http://" + net.JoinHostPort(displayHost(opts.host), strconv.Itoa(opts.s3Port))
	}
	// .svc is the user's alone; a project of an earlier version has 0755 and 0644 there.
	if err := tightenTree(proj.stateDir()); err != nil {
		return nil, err
	}

	// 1. Relational database (object storage starts with the runtime).
	var verbose io.Writer
	if c.verbose {
		verbose = c.stderr
	}
	rt.log.Info("starting PostgreSQL", "port", opts.pgPort)
	rt.pg, err = startPostgres(ctx, pgOptions{ProjectDir: proj.Dir, Port: opts.pgPort, Getenv: c.getenv, LookPath: exec.LookPath, Log: verbose})
	if err != nil {
		var busy *portBusyError
		if errors.As(err, &busy) {
			return nil, portInUse("PostgreSQL", busy.Port, opts.offset, err)
		}
		if errors.Is(err, errNoPostgres) {
			return nil, &cliError{Code: codeGeneric, Message: err.Error(), Err: err}
		}
		if errors.Is(err, errPostgresInUse) {
			return nil, &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "another svc dev serves this project; stop it first"}
		}
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	rt.closers = append(rt.closers, rt.pg.Stop, rt.pg.supervise(rt.log))
	if rt.pg.Initialized {
		rt.log.Info("initialized the project's PostgreSQL cluster: its first boot")
	}
	rt.log.Info("postgres up", "provider", rt.pg.Provider, "url", redactURL(rt.pg.URL))
	rt.pg.logUndid(rt.log)

	// 2. and 3. Migrations, engine, secrets, object storage, agents, gate.
	// Other svc dev processes on the same PostgreSQL engine (rare) reach
	// this one over plain HTTP on its API port.
	fleetAddr, err := fleetAddress("", apiLn.Addr())
	if err != nil {
		return nil, err
	}
	if err := rt.open(ctx, runtimeOptions{Command: "svc dev", PostgresURL: rt.pg.URL, StateDir: proj.stateDir(), Getenv: c.getenv,
		Verbose: verbose, S3Listener: s3Ln, S3Endpoint: s3Endpoint, Engine: opts.engine, FleetAddress: fleetAddr}); err != nil {
		return nil, err
	}
	rt.onGateOpen = rt.announce
	if rt.keys, err = devAPIKeys(c, proj); err != nil {
		return nil, err
	}
	rt.console = &consoleSessions{}

	// 4. Editor types (and the compile they need), then the user's schema.
	rt.recompile()
	rt.autoMigrate(ctx)

	// 5. Serve the endpoints (HTTPS with --tls).
	scheme := "http"
	if opts.tls {
		if rt.tls, err = devTLSLoad(proj.stateDir(), opts.allowedHosts, time.Now()); err != nil {
			return nil, failf(codeGeneric, "make .svc/tls writable, or remove it so that svc dev makes a new certificate", "TLS certificate: %v", err)
		}
		apiLn, scheme = rt.tls.listener(apiLn), "https"
		rt.log.Info("the API serves HTTPS with svc's own certificate", "cert", ".svc/"+devTLSCertFile, "sha256", rt.tls.fingerprint, "minted", rt.tls.minted)
	}
	rt.apiURL = scheme + "://" + net.JoinHostPort(displayHost(opts.host), strconv.Itoa(opts.apiPort))
	api, err := newDevServer(rt)
	if err != nil {
		return nil, err
	}
	rt.devToken = randomID("", devTokenBytes)
	rt.serve(apiLn, api, "API")
	rf, _ := json.Marshal(devRuntimeFile{URL: rt.apiURL, PID: os.Getpid(), Token: rt.devToken})
	if err := writeFileAtomic(proj.stateDir(devRuntimeFileName), append(rf, '\n'), privateFileMode); err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, func(context.Context) error { return os.Remove(proj.stateDir(devRuntimeFileName)) })
	rt.startTunnel(api)

	// 6. Past the gate, agents and workflows start; edits are watched.
	if !rt.gateState().Open {
		rt.log.Warn("boot gate closed: no model provider; agents and workflows are not started",
			"console", rt.apiURL+"/", "hint", "set OPENAI_API_KEY or ANTHROPIC_API_KEY, or store a credential in the console")
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		rt.watch(bgctx)
	}()
	rt.log.Debug("boot complete", "dur", time.Since(began))
	return rt, nil
}

// startTunnel publishes api through the relay of SVC_RELAY_URL, waiting a
// bounded time for the first handshake (tunnel.go). Without a relay, or
// for a project linked to no control plane (none to mint its registration
// tokens), it says so and dev runs locally only.
func (rt *devRuntime) startTunnel(api http.Handler) {
	if rt.opts.relayAddr == "" {
		rt.log.Info("tunnel off: public_url and deeplink are null", "hint", "set SVC_RELAY_URL to publish this session through svc relay")
		return
	}
	l := rt.proj.Link
	if l.ControlPlaneURL == "" {
		rt.log.Warn("tunnel: no public URL, public_url and deeplink are null", "err", "this project is local only: the relay admits a session with a registration token of a control plane",
			"hint", "run `svc login`, then `svc link` (or `svc dev` in a terminal without .svc/project.json) to link it to an agent")
		return
	}
	apiHost := net.JoinHostPort(displayHost(rt.opts.host), strconv.Itoa(rt.opts.apiPort)) // rt.apiURL's, whatever its scheme
	rt.tunnel = newTunnelClient(tunnelConfig{Addr: rt.opts.relayAddr, ServerName: rt.opts.relayName, Installation: l.LocalDevInstallationID,
		Token: rt.tunnelToken, Console: l.ControlPlaneURL}, tunnelHandler(api, apiHost), rt.log, rt.announce)
	rt.tunnel.start()
	rt.closers = append(rt.closers, rt.tunnel.close)
}

// tunnelToken asks the project's control plane for a registration token of
// its local-dev installation, with the credentials of `svc login` (read
// afresh: a new sign-in is picked up). Signed out, signed in elsewhere or
// refused wraps errTunnelRefused, saying what to run: an unknown or
// revoked credential (401) is retried, so `svc login` fixes it; another
// 4xx (no such installation of the user's: the agent deleted upstream) is
// final (tunnelFinal). An unreachable control plane is an error to retry.
func (rt *devRuntime) tunnelToken(ctx context.Context) (string, error) {
	l := rt.proj.Link
	cl, _, err := requireSignIn(rt.c)
	if err == nil && cl.url != l.ControlPlaneURL {
		err = failf(codeAuth, "run `svc login --control-plane "+l.ControlPlaneURL+"`", "signed in to %s, not to %s", cl.url, l.ControlPlaneURL)
	}
	var out cpTunnelToken
	if err == nil {
		if err = cl.call(ctx, http.MethodPost, "/api/installations/"+url.PathEscape(l.LocalDevInstallationID)+"/tunnel", nil, &out); err == nil {
			return out.RegistrationToken, nil
		}
	}
	var ce *cliError
	var ae *cpAPIError
	switch {
	case errors.As(err, &ce) && ce.Code == codeAuth:
		return "", fmt.Errorf("%w by the control plane %s: %s (%s)", errTunnelRefused, l.ControlPlaneURL, ce.Message, ce.Hint)
	case errors.As(err, &ae) && ae.Status/100 == 4:
		return "", tunnelFinal{fmt.Errorf("%w by the control plane %s: %w; restart svc dev to check the project's link", errTunnelRefused, l.ControlPlaneURL, ae)}
	}
	return "", fmt.Errorf("get a tunnel registration token: %w", err)
}

// newDevServer builds dev's API: the shared routes and devRoutes behind a
// guard bound as rt.opts says, with the dev keys and the console's
// sessions.
func newDevServer(rt *devRuntime) (*server, error) {
	cfg := httpGuardConfig{BindHost: rt.opts.host, AllowedHosts: rt.opts.allowedHosts, AllowedOrigins: rt.opts.allowedOrigins,
		APIKeys: rt.keys, Console: rt.console}
	srv, err := newServer(rt.runtimeCore, cfg, devRoutes(rt))
	if err != nil {
		return nil, err
	}
	rt.guardKeys = srv.guard.auth.(*httpGuardKeys)
	return srv, nil
}

// devRoutes are the routes only `svc dev` serves. rt may be nil when only
// the description is needed (the contract).
func devRoutes(rt *devRuntime) []route {
	return []route{
		{"GET", "/api/dev/env", "the local credentials `svc env` prints; loopback only, with the session token of .svc/runtime.json in " + devTokenHeader, rt.handleDevEnv},
		{"POST", "/api/dev/console-link", "a new console link (`svc console`); loopback only, with the session token of .svc/runtime.json in " + devTokenHeader, rt.handleDevConsoleLink},
		{"GET", "/api/dev/services", "the local services for the console's settings (URLs, secrets left out); loopback only", rt.handleDevServices},
		{"POST", "/api/dev/services/reveal", "the values `svc env` prints (without the dev key for a console session), for a console session, the dev key or " + devTokenHeader + "; loopback only", rt.handleDevServicesReveal},
		{"POST", "/api/dev/rotate-key", "a new dev key (`svc rotate-key`): the old one is refused and every console session ends; loopback only, with " + devTokenHeader, rt.handleDevRotateKey},
	}
}

// handleDevEnv serves the session's local credentials to `svc env`, the one
// place that prints them. The guard has checked Host, Origin and the
// caller (the developer's account or a key); on top, the caller must be on this machine and
// show the token of .svc/runtime.json, proof that it can read the
// project's private state, where the keys are kept anyway.
func (rt *devRuntime) handleDevEnv(w http.ResponseWriter, r *http.Request) {
	if !devFromLoopback(w, r) || !rt.devTokenRequired(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "env": rt.devEnv()})
}

// devRuntimeFileName is the file under .svc where a running svc dev says
// where it is; the CLI finds the runtime of its project there and nowhere else.
const devRuntimeFileName = "runtime.json"

// devTokenBytes is the size of the session token in .svc/runtime.json.
const devTokenBytes = 32

// devRuntimeFile is .svc/runtime.json (mode 0600), written once the API
// serves and removed at shutdown.
type devRuntimeFile struct {
	URL string `json:"url"`
	PID int    `json:"pid"`
	// Token proves that a caller could read the project's .svc: the
	// dev-only routes (GET /api/dev/env) ask for it. New each session.
	Token string `json:"token"`
}

// devTokenHeader carries the session token of .svc/runtime.json to the
// dev-only routes.
const devTokenHeader = "X-Svc-Dev-Token"

// readDotEnv reads the project's optional .env (nil when absent).
func readDotEnv(proj *project) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(proj.Dir, ".env"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read .env: %w", err)
	}
	userEnv, err := parseDotEnv(b)
	if err != nil {
		return nil, &cliError{Code: codeGeneric, Message: err.Error(), Hint: "fix .env at the project root"}
	}
	return userEnv, nil
}

// displayHost is the host written into URLs for a bind address.
func displayHost(bind string) string {
	if bind == "0.0.0.0" {
		return "127.0.0.1"
	}
	return bind
}

// redactURL hides the password of a connection URL for logs.
func redactURL(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if at := strings.LastIndex(s, "@"); at > i {
			if colon := strings.Index(s[i+3:at], ":"); colon >= 0 {
				return s[:i+3+colon+1] + "***" + s[at:]
			}
		}
	}
	return s
}

// recompile compiles the catalog (runtime.compile) and regenerates the
// editor types from it.
func (rt *devRuntime) recompile() {
	if cat := rt.compile(); cat != nil {
		if err := writeTypes(rt.proj.stateDir(), cat); err != nil {
			rt.log.Error("generate types", "err", err)
		}
	}
}

// autoMigrateOn reports whether auto-migrate is on for this session: the
// flag wins over dev.autoMigrate in agent.yaml.
func (rt *devRuntime) autoMigrateOn() bool {
	if rt.opts.autoMigrate != nil {
		return *rt.opts.autoMigrate
	}
	return rt.proj.Config.DevAutoMigrate
}

// autoMigrate diffs src/schema.ts against the database and applies additive
// changes; destructive ones are written under .svc/migrations/pending and
// the log says what to do.
func (rt *devRuntime) autoMigrate(ctx context.Context) {
	if !rt.autoMigrateOn() {
		return
	}
	log := io.Discard
	if rt.c.verbose {
		log = rt.c.stderr
	}
	res, err := autoMigrate(ctx, rt.proj.Dir, rt.pg.URL, log)
	switch {
	case err != nil:
		rt.log.Error("auto-migrate", "err", err)
	case res.Pending:
		rt.log.Warn("auto-migrate: destructive change not applied", "file", res.File, "what", strings.Join(res.Destructive, "; "), "todo", res.Summary)
	case res.Applied:
		rt.log.Info("auto-migrate applied", "file", res.File, "summary", res.Summary)
	}
}

// payload returns the dev payload for the current state.
func (rt *devRuntime) payload() devPayload {
	agents := []string{}
	g := rt.gateState()
	if cat := rt.catalog.Load(); cat != nil && g.Open {
		agents = cat.agentNames()
	}
	public, deeplink := rt.tunnel.urls()
	return devPayload{
		SchemaVersion: schemaVersion, EmulatorURL: rt.apiURL, AgentURL: rt.apiURL, PublicURL: public, Deeplink: deeplink,
		LocalDevInstallationID: rt.proj.Link.LocalDevInstallationID, Gate: g, DeepAgents: agents, Services: rt.services,
	}
}

// announce prints the payload: one JSON envelope line with --json, a short
// summary otherwise.
func (rt *devRuntime) announce() {
	rt.announceMu.Lock()
	defer rt.announceMu.Unlock()
	p := rt.payload()
	rt.c.emit(p, func(w io.Writer) {
		gate := "open (" + p.Gate.Reason + ")"
		if !p.Gate.Open {
			gate = "closed (" + p.Gate.Reason + "): store a model provider at " + p.EmulatorURL + "/"
		}
		var wfs []string
		if cat := rt.catalog.Load(); cat != nil {
			wfs = cat.workflowNames()
		}
		fmt.Fprintf(w, "svc dev is up\n  API         %s\n  Console     %s (opens one browser; it needs no key after)\n  PostgreSQL  %s\n  S3          %s (bucket %s)\n  Gate        %s\n  Agents      %s\n  Workflows   %s\nPress Ctrl-C to stop.\n",
			p.EmulatorURL, rt.devConsoleLink(), redactURL(p.Services.PostgresURL), p.Services.S3Endpoint, p.Services.S3Bucket, gate,
			orNone(p.DeepAgents), orNone(wfs))
		if p.PublicURL != nil {
			fmt.Fprintf(w, "  Public      %s (console: %s)\n", *p.PublicURL, *p.Deeplink)
		}
		if rt.tls != nil {
			fmt.Fprintf(w, "  TLS         certificate .svc/%s, SHA-256 %s\n", devTLSCertFile, rt.tls.fingerprint)
		}
		if rt.opts.host == "0.0.0.0" {
			fmt.Fprintf(w, "  Other accounts of this machine and other machines need the dev key (.svc/%s; `svc env` prints it as SVC_DEV_KEY),\n  or a console link (`svc console` prints more) with this host's address in place of 127.0.0.1.\n", devAPIKeyFile)
		} else {
			fmt.Fprintf(w, "  Other accounts of this machine need the dev key (.svc/%s; `svc env` prints it as SVC_DEV_KEY).\n", devAPIKeyFile)
		}
	})
}

// orNone joins names, or says "none".
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
