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
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Default dev ports; each is shifted by SVC_DEV_PORT_OFFSET. PostgreSQL and
// object storage sit just above the API port (API+1, API+2).
const (
	defaultAPIPort = 4242
	devGCPercent   = 400
	devBucketName  = "svc"
	devS3Region    = "us-east-1"
)

// newDevFlags defines the flags of `svc dev` (SPEC §4.2).
func newDevFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.String("port", strconv.Itoa(defaultAPIPort), "emulator API port, an integer in 1-65535; PostgreSQL uses port+1 and object storage port+2, all shifted by SVC_DEV_PORT_OFFSET")
	fs.Bool("listen", false, "bind 0.0.0.0 (LAN-reachable) instead of 127.0.0.1")
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

	// allowedHosts and allowedOrigins are SVC_ALLOWED_HOSTS and
	// SVC_ALLOWED_ORIGINS, normalized for the HTTP guard.
	allowedHosts, allowedOrigins []string
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
	o.printContract = get("print-contract") == "true"
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
	SchemaVersion          int         `json:"schema_version"`
	EmulatorURL            string      `json:"emulator_url"`
	AgentURL               string      `json:"agent_url"`
	PublicURL              *string     `json:"public_url"`
	Deeplink               *string     `json:"deeplink"`
	LocalDevInstallationID string      `json:"local_dev_installation_id"`
	Gate                   gateState   `json:"gate"`
	DeepAgents             []string    `json:"deep_agents"`
	Services               devServices `json:"services"`
}

// devServices are the addresses of the dev services in the payload.
type devServices struct {
	PostgresURL string `json:"postgres_url"`
	S3Endpoint  string `json:"s3_endpoint"`
	S3Bucket    string `json:"s3_bucket"`
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
		// (W2 of the README), for a live heap of a few tens of MiB.
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

// devRuntime is the running local runtime: its services, compiled catalog,
// gate and HTTP server. Fields set at boot are read-only afterwards; the
// catalog and gate change atomically.
type devRuntime struct {
	c        *cmd
	opts     devOptions
	proj     *project
	log      *slog.Logger
	pg       *pgService
	db       *pgxpool.Pool
	secrets  *secretStore
	engine   *engine
	agents   *agentHost  // chat wires: model clients, sessions, credentials (wires.go)
	platform *jsPlatform // globals and data of step and tool VMs (js_platform.go)
	s3       *s3Server
	services devServices
	baseEnv  map[string]string // system secrets and .env, without the model provider
	apiURL   string
	devToken string // proof of reading .svc/runtime.json, asked by the dev-only routes

	catalog  atomic.Pointer[catalog]
	gate     atomic.Pointer[gateState]
	provider atomic.Pointer[modelProvider]

	firstRunMarked atomic.Bool

	announceMu sync.Mutex // serialises payload lines on stdout
	fatal      chan error // a service that died ends the session

	closers []func(context.Context) error // in start order; run in reverse
	wg      sync.WaitGroup                // watcher and servers
	stop    context.CancelFunc
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
	return &cliError{Code: codeGeneric, Err: err,
		Message: fmt.Sprintf("port %d (%s) is busy", port, service),
		Hint:    fmt.Sprintf("stop whatever listens there (another svc dev?), pass --port, or set SVC_DEV_PORT_OFFSET (now %d) to e.g. %d", offset, offset+10)}
}

// bootDev starts everything in SPEC §1 order. On failure it stops what it
// had started and returns the error.
func bootDev(ctx context.Context, c *cmd, opts devOptions, proj *project) (_ *devRuntime, err error) {
	began := time.Now()
	rt := &devRuntime{c: c, opts: opts, proj: proj, log: newDevLogger(c), fatal: make(chan error, 1)}
	defer func() {
		if err != nil {
			rt.close()
		}
	}()
	bgctx, stop := context.WithCancel(context.Background())
	rt.stop = stop
	rt.closers = append(rt.closers, func(context.Context) error { stop(); rt.wg.Wait(); return nil })

	// Listen first so a busy port fails before anything is started.
	apiLn, err := net.Listen("tcp", net.JoinHostPort(opts.host, strconv.Itoa(opts.apiPort)))
	if err != nil {
		return nil, portInUse("API", opts.apiPort, opts.offset, err)
	}
	rt.closers = append(rt.closers, func(context.Context) error { apiLn.Close(); return nil })
	s3Ln, err := net.Listen("tcp", net.JoinHostPort(opts.host, strconv.Itoa(opts.s3Port)))
	if err != nil {
		return nil, portInUse("object storage", opts.s3Port, opts.offset, err)
	}
	rt.closers = append(rt.closers, func(context.Context) error { s3Ln.Close(); return nil })
	// .svc is the user's alone; a project of an earlier version has 0755 and 0644 there.
	if err := tightenTree(proj.stateDir()); err != nil {
		return nil, err
	}

	// 1. Relational database and object storage.
	pgLog := io.Discard
	if c.verbose {
		pgLog = c.stderr
	}
	rt.log.Info("starting PostgreSQL (the first boot of a project also initializes its cluster)", "port", opts.pgPort)
	rt.pg, err = startPostgres(ctx, pgOptions{ProjectDir: proj.Dir, Port: opts.pgPort, Getenv: c.getenv, LookPath: exec.LookPath, Log: pgLog})
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
	rt.closers = append(rt.closers, rt.pg.Stop)
	rt.log.Info("postgres up", "provider", rt.pg.Provider, "url", redactURL(rt.pg.URL))

	// 2. Platform and user migrations.
	applied, err := applyMigrations(ctx, rt.pg.URL, proj.stateDir("migrations"), pgLog)
	if err != nil {
		return nil, &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "fix the migration under .svc/migrations and run svc dev again; nothing of it was applied"}
	}
	if len(applied) > 0 {
		rt.log.Info("migrations applied", "files", strings.Join(applied, ", "))
	}
	rt.db, err = pgxpool.New(ctx, rt.pg.URL)
	if err != nil {
		return nil, fmt.Errorf("connect PostgreSQL: %w", err)
	}
	rt.closers = append(rt.closers, func(context.Context) error { rt.db.Close(); return nil })
	rt.platform = newJSPlatform()
	if rt.platform.sql, err = newSQLHost(rt.pg.URL); err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, func(context.Context) error { rt.platform.sql.close(); return nil })

	// The durable journal (the key-value store the workflow engine replays
	// from); ended runs move to the run history in PostgreSQL.
	retention, err := parseRetention(c.getenv("SVC_RUN_RETENTION"))
	if err != nil {
		return nil, &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "set SVC_RUN_RETENTION to a duration such as 720h or 30d, or 0 to keep ended runs forever"}
	}
	rt.engine, err = openEngine(engineOptions{
		Dir: proj.stateDir("journal"), Catalog: rt.openCatalog, Env: rt.vmEnv, Platform: rt.platform, Log: rt.log,
		OnRunDone: func(*runRecord) { rt.markFirstRun() },
		History:   newPGRunHistory(rt.db), Retention: retention,
	})
	if err != nil {
		hint := "the journal under .svc/journal is damaged before its tail; move it aside to start fresh"
		if errors.Is(err, errJournalLocked) {
			hint = "another svc dev serves this project; stop it first"
		}
		return nil, &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: hint}
	}
	rt.closers = append(rt.closers, func(context.Context) error { return rt.engine.close() })

	// 3. System secrets (object-storage keys minted once, stored encrypted) and .env.
	rt.secrets, err = openSecretStore(rt.db, proj.stateDir("master.key"))
	if err != nil {
		return nil, err
	}
	userEnv, err := readDotEnv(proj)
	if err != nil {
		return nil, err
	}
	s3Key, s3Secret, err := rt.s3Keys(ctx, userEnv)
	if err != nil {
		return nil, err
	}
	rt.services = devServices{PostgresURL: rt.pg.URL, S3Endpoint: "http://" + net.JoinHostPort(displayHost(opts.host), strconv.Itoa(opts.s3Port)), S3Bucket: devBucketName}
	if ext := c.getenv("SVC_S3_ENDPOINT"); ext != "" {
		rt.services.S3Endpoint = ext
	}
	rt.s3, err = newS3Server(proj.stateDir("s3"), s3Key, s3Secret)
	if err == nil {
		err = rt.s3.ensureBucket(devBucketName)
	}
	if err != nil {
		return nil, fmt.Errorf("object storage: %w", err)
	}
	rt.s3.logger = rt.log.With("service", "object storage")
	rt.s3.start()
	rt.closers = append(rt.closers, func(context.Context) error { return rt.s3.Close() })
	s3Guard, err := newHTTPGuard(rt.s3, httpGuardConfig{})
	if err != nil {
		return nil, err
	}
	rt.serve(s3Ln, s3Guard, "object storage")
	rt.baseEnv = map[string]string{
		"DATABASE_URL": rt.pg.URL, "S3_ENDPOINT": rt.services.S3Endpoint, "S3_BUCKET": devBucketName,
		"S3_ACCESS_KEY_ID": s3Key, "S3_SECRET_ACCESS_KEY": s3Secret, "S3_REGION": devS3Region,
	}
	for k, v := range userEnv {
		rt.baseEnv[k] = v
	}
	if err := storageConfigure(rt.platform, storageTargetOf(rt.toolEnv())); err != nil {
		rt.log.Warn("storage of user code is off: fix the S3_* variables of .env", "err", err)
	}

	rt.agents, err = newAgentHost(rt)
	if err != nil {
		return nil, err
	}

	// The gate decides whether agents and workflows start.
	if err := rt.resolveGate(ctx); err != nil {
		return nil, err
	}

	// 4. Editor types (and the compile they need), then the user's schema.
	rt.recompile()
	rt.autoMigrate(ctx)

	// 5. Serve the endpoints.
	rt.apiURL = "http://" + net.JoinHostPort(displayHost(opts.host), strconv.Itoa(opts.apiPort))
	api, err := newServer(rt)
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

// devToolEnvVars are the variables `svc env` prints: what a tool (aws,
// rclone, psql) needs to reach the session's database and object storage.
var devToolEnvVars = []string{"DATABASE_URL", "S3_ENDPOINT", "S3_BUCKET", "S3_REGION", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"}

// toolEnv returns devToolEnvVars as agents and workflows see them (.env
// included, which the object storage adopts).
func (rt *devRuntime) toolEnv() map[string]string {
	env := make(map[string]string, len(devToolEnvVars))
	for _, k := range devToolEnvVars {
		env[k] = rt.baseEnv[k]
	}
	return env
}

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

// devS3KeyVars are the variables holding the object-storage keys, access
// key first, with the length in bytes of a minted one.
var devS3KeyVars = []struct {
	name   string
	length int
}{{"S3_ACCESS_KEY_ID", 10}, {"S3_SECRET_ACCESS_KEY", 20}}

// s3Keys returns the object-storage keys: those minted once into the
// secret store, each replaced by the value .env sets. The server adopts
// the keys of .env so that what process.env carries is what it accepts;
// a value it cannot accept fails the boot naming .env and the variable.
func (rt *devRuntime) s3Keys(ctx context.Context, userEnv map[string]string) (key, secret string, err error) {
	keys := make([]string, len(devS3KeyVars))
	for i, v := range devS3KeyVars {
		if keys[i], err = rt.secrets.getOrMint(ctx, v.name, v.length); err != nil {
			return "", "", err
		}
		set, ok := userEnv[v.name]
		if !ok {
			continue
		}
		if set == "" || strings.ContainsAny(set, "/ \t\r\n") {
			return "", "", failf(codeGeneric, "set it to a non-empty value without '/' or spaces, or remove it from .env to use the minted one (`svc env` prints it)",
				".env sets %s to a value object storage cannot accept: empty, or holding '/' or white space", v.name)
		}
		keys[i] = set
		rt.log.Info("object storage adopts the key of .env", "var", v.name)
	}
	return keys[0], keys[1], nil
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

// serve runs h on ln until the runtime closes; an unexpected serve error
// ends the session.
func (rt *devRuntime) serve(ln net.Listener, h http.Handler, name string) {
	srv := newHTTPServer(h)
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case rt.fatal <- fmt.Errorf("%s server: %w", name, err):
			default:
			}
		}
	}()
	rt.closers = append(rt.closers, srv.Shutdown)
}

// close stops everything bootDev started, in reverse order, each with a
// fresh bounded context.
func (rt *devRuntime) close() {
	for i := len(rt.closers) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := rt.closers[i](ctx); err != nil && !errors.Is(err, fs.ErrNotExist) {
			rt.log.Warn("shutdown", "err", err)
		}
		cancel()
	}
	rt.closers = nil
}

// gateState returns the current boot gate.
func (rt *devRuntime) gateState() gateState {
	if g := rt.gate.Load(); g != nil {
		return *g
	}
	return gateState{Reason: gateNoProvider}
}

// firstRunKey is the svc.kv key set once a run completes in this project.
const firstRunKey = "first_run_completed"

// resolveGate resolves the model provider (DESIGN §5) and sets the gate.
func (rt *devRuntime) resolveGate(ctx context.Context) error {
	var stored *storedProvider
	if b, ok, err := rt.secrets.get(ctx, "model_provider"); err != nil {
		return err
	} else if ok {
		stored = new(storedProvider)
		if err := json.Unmarshal(b, stored); err != nil {
			return fmt.Errorf("stored model provider: %w", err)
		}
	}
	var firstRun bool
	err := rt.db.QueryRow(ctx, `select exists(select 1 from svc.kv where key = $1)`, firstRunKey).Scan(&firstRun)
	if err != nil {
		return fmt.Errorf("read first-run marker: %w", err)
	}
	p, g := resolveGate(providerFromEnv(rt.c.getenv), stored, firstRun)
	rt.provider.Store(p)
	rt.gate.Store(&g)
	return nil
}

// storeProvider stores a model-provider credential; a closed gate opens
// without a restart and the payload line is printed again.
func (rt *devRuntime) storeProvider(ctx context.Context, p storedProvider) error {
	b, _ := json.Marshal(p)
	if err := rt.secrets.put(ctx, "model_provider", b); err != nil {
		return err
	}
	wasOpen := rt.gateState().Open
	if err := rt.resolveGate(ctx); err != nil {
		return err
	}
	if !wasOpen && rt.gateState().Open {
		rt.log.Info("boot gate opened", "reason", rt.gateState().Reason)
		rt.engine.resumeAll()
		rt.announce()
	}
	return nil
}

// vmEnv is process.env for agents and workflows: system secrets, the
// resolved model provider, then the user's .env (which wins).
func (rt *devRuntime) vmEnv() map[string]string {
	env := map[string]string{}
	if p := rt.provider.Load(); p != nil {
		for k, v := range p.env() {
			env[k] = v
		}
	}
	for k, v := range rt.baseEnv {
		env[k] = v
	}
	return env
}

// recompile compiles the catalog, swaps it in and regenerates the editor
// types, logging every file that failed with file:line. While the gate is
// closed the catalog is compiled (for types and errors) but nothing runs.
func (rt *devRuntime) recompile() {
	began := time.Now()
	cat, cerr := compileCatalog(rt.proj.Dir, rt.log)
	if cerr != nil {
		rt.log.Error("compile failed", "err", cerr.Error())
		return
	}
	for _, name := range sortedKeys(cat.Failed) {
		rt.log.Error("compile failed", "name", name, "err", cat.Failed[name].Error())
	}
	rt.catalog.Store(cat)
	if err := writeTypes(rt.proj.stateDir(), cat); err != nil {
		rt.log.Error("generate types", "err", err)
	}
	if rt.engine != nil && rt.gateState().Open {
		rt.engine.resumeAll()
	}
	rt.log.Info("compiled", "workflows", len(cat.Workflows), "agents", len(cat.Agents), "failed", len(cat.Failed), "dur", time.Since(began).Round(time.Millisecond))
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

// openCatalog is the catalog the engine may run: nil while the gate is closed.
func (rt *devRuntime) openCatalog() *catalog {
	if !rt.gateState().Open {
		return nil
	}
	return rt.catalog.Load()
}

// markFirstRun records once that a run completed in this project (a later
// boot opens the gate with reason first-run-completed).
func (rt *devRuntime) markFirstRun() {
	if rt.firstRunMarked.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rt.db.Exec(ctx, `insert into svc.kv(key, value) values($1, to_jsonb(now())) on conflict do nothing`, firstRunKey); err != nil {
		rt.log.Warn("record first run", "err", err)
	}
}

// payload returns the dev payload for the current state.
func (rt *devRuntime) payload() devPayload {
	agents := []string{}
	g := rt.gateState()
	if cat := rt.catalog.Load(); cat != nil && g.Open {
		agents = cat.agentNames()
	}
	return devPayload{
		SchemaVersion: schemaVersion, EmulatorURL: rt.apiURL, AgentURL: rt.apiURL,
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
		fmt.Fprintf(w, "svc dev is up\n  API         %s\n  PostgreSQL  %s\n  S3          %s (bucket %s)\n  Gate        %s\n  Agents      %s\n  Workflows   %s\nPress Ctrl-C to stop.\n",
			p.EmulatorURL, redactURL(p.Services.PostgresURL), p.Services.S3Endpoint, p.Services.S3Bucket, gate,
			orNone(p.DeepAgents), orNone(wfs))
		if rt.agents != nil && len(rt.agents.apiKeys) > 0 {
			fmt.Fprintf(w, "  Every route requires the dev key %s (.svc/%s) or a key of SVC_API_KEYS (--listen); console: %s/?key=%s\n", rt.agents.apiKeys[0], devAPIKeyFile, p.EmulatorURL, rt.agents.apiKeys[0])
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
