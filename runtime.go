package main

// The runtime every host shares (DESIGN §7 "one runtime, several hosts";
// STYLE 18): the project's database, secrets, durable engine, compiled
// catalog, boot gate, agents and object storage. `svc dev` (devenv.go)
// and `svc serve` (box.go) each start their database, open a runtime on it
// and add their own services around it; the HTTP server (server.go)
// receives the runtime, never a host.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// runtimeCore is the part of a running host that serves user code. Build it
// with newRuntimeCore and open it with open; fields set by open are read-only
// afterwards; the catalog, gate and provider change atomically. Tests may
// build one by hand with the fields their routes need.
type runtimeCore struct {
	log      *slog.Logger
	proj     *project
	db       *pgxpool.Pool
	secrets  *secretStore
	engine   *fleet
	metrics  *metrics    // what GET /metrics shows (metrics.go)
	sched    *scheduler  // the workflows' schedules (schedule_engine.go)
	agents   *agentHost  // chat wires: model clients, sessions, credentials (wires.go)
	platform *jsPlatform // globals and data of step and tool VMs (js_platform.go)
	s3       *s3Server   // built-in object storage; nil with an external one
	services runtimeServices
	baseEnv  map[string]string   // system secrets and .env, without the model provider
	apiURL   string              // where the host serves the API and console, for messages
	getenv   func(string) string // the host's environment (the model provider)

	catalog  atomic.Pointer[catalog]
	gate     atomic.Pointer[gateState]
	provider atomic.Pointer[modelProvider]

	firstRunMarked atomic.Bool
	// onGateOpen, when set, runs after a stored credential opened a closed
	// gate (dev prints its payload line again).
	onGateOpen func()

	fatal chan error // a service that died ends the session

	tracer *otelTracer // OpenTelemetry trace export (otel_export.go); nil: off

	closers []func(context.Context) error // in start order; run in reverse
	wg      sync.WaitGroup                // servers and the host's goroutines

	// stopping is closed once the servers begin to shut down: responses
	// that never end by themselves (run streams) end then, so the shutdown
	// does not wait out its bound for them.
	stopping     chan struct{}
	stoppingOnce sync.Once
}

// runtimeServices are the addresses of the services user code reaches (the
// dev payload's services).
type runtimeServices struct {
	PostgresURL string `json:"postgres_url"`
	S3Endpoint  string `json:"s3_endpoint"`
	S3Bucket    string `json:"s3_bucket"`
}

// runtimeOptions is what a host gives open.
type runtimeOptions struct {
	// Command names the host in hints ("svc dev", "svc serve").
	Command string
	// PostgresURL is the project's database, already up.
	PostgresURL string
	// StateDir holds the journal, the master key (unless MasterKey) and the built-in object
	// storage: .svc for dev, --data for the box.
	StateDir string
	// MasterKey is the secret store's 32-byte key (svc serve's
	// SVC_MASTER_KEY); nil keeps it in StateDir/master.key (see
	// openSecretStore).
	MasterKey []byte
	// Getenv reads the environment (the command's one place).
	Getenv func(string) string
	// Verbose receives migration and tool output; nil discards it.
	Verbose io.Writer
	// S3Listener serves the built-in object storage; S3Endpoint is the URL
	// user code reaches it at. With S3Listener nil, S3Endpoint is an
	// external endpoint and S3Keys its access key and secret.
	S3Listener net.Listener
	S3Endpoint string
	S3Keys     [2]string
	// FleetAddress is the base URL the other replicas of a fleet reach
	// this process at (SVC_FLEET_ADDRESS, else its listener's address).
	FleetAddress string
	// Engine selects the engine's store (readEngineSettings); the zero
	// value is the file journal under StateDir.
	Engine engineSettings
}

// runtimeBucket and runtimeS3Region are the bucket and region user code
// gets (S3_BUCKET, S3_REGION).
const (
	runtimeBucket   = "svc"
	runtimeS3Region = "us-east-1"
)

// newRuntimeCore returns an unopened runtime core of proj logging to log.
func newRuntimeCore(log *slog.Logger, proj *project) *runtimeCore {
	return &runtimeCore{log: log, proj: proj, metrics: newMetrics(), fatal: make(chan error, 1), stopping: make(chan struct{})}
}

// open brings the shared runtime up on its database, in SPEC §1 order:
// platform and user migrations, the durable engine, system secrets and
// .env, object storage, the agents and the boot gate. Whatever it started
// is stopped by close, also when it fails.
func (rt *runtimeCore) open(ctx context.Context, o runtimeOptions) error {
	rt.getenv = o.Getenv
	verbose := o.Verbose
	if verbose == nil {
		verbose = io.Discard
	}
	applied, err := applyMigrations(ctx, o.PostgresURL, rt.proj.stateDir("migrations"), verbose)
	if err != nil {
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "fix the migration under .svc/migrations and run " + o.Command + " again; nothing of it was applied"}
	}
	if len(applied) > 0 {
		rt.log.Info("migrations applied", "files", strings.Join(applied, ", "))
	}
	if rt.db, err = pgxpool.New(ctx, o.PostgresURL); err != nil {
		return fmt.Errorf("connect PostgreSQL: %w", err)
	}
	rt.closers = append(rt.closers, func(context.Context) error { rt.db.Close(); return nil })
	if err := pgCheckSession(ctx, rt.db); errors.Is(err, errEngineNoSession) {
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "point DATABASE_URL at PostgreSQL itself, or at a pool in session mode"}
	} else if err != nil {
		return fmt.Errorf("check the PostgreSQL session: %w", err)
	}
	rt.platform = newJSPlatform()
	if rt.platform.sql, err = newSQLHost(o.PostgresURL); err != nil {
		return err
	}
	rt.closers = append(rt.closers, func(context.Context) error { rt.platform.sql.close(); return nil })

	// The durable journal (the key-value store the workflow engine replays
	// from); ended runs move to the run history in PostgreSQL.
	retention, err := parseRetention(o.Getenv("SVC_RUN_RETENTION"))
	if err != nil {
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "set SVC_RUN_RETENTION to a duration such as 720h or 30d, or 0 to keep ended runs forever"}
	}
	responseRetention, err := parseRetentionOf("SVC_RESPONSE_RETENTION", o.Getenv("SVC_RESPONSE_RETENTION"), responseRetentionDefault)
	if err != nil {
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "set SVC_RESPONSE_RETENTION to a duration such as 720h or 30d, or 0 to keep responses forever"}
	}
	idemRetention, err := parseRetentionOf("SVC_IDEMPOTENCY_RETENTION", o.Getenv("SVC_IDEMPOTENCY_RETENTION"), idemRetentionDefault)
	if err == nil && idemRetention == 0 {
		err = errors.New("SVC_IDEMPOTENCY_RETENTION is 0: idempotency keys cannot be kept forever")
	}
	if err != nil {
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "set SVC_IDEMPOTENCY_RETENTION to a duration such as 24h or 7d"}
	}
	otelSet, err := readOTelSettings(o.Getenv)
	if err != nil {
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "fix the variable, or unset OTEL_EXPORTER_OTLP_ENDPOINT to run without trace export"}
	}
	if rt.tracer = newOTelTracer(otelSet, rt.log); rt.tracer != nil {
		rt.closers = append(rt.closers, func(ctx context.Context) error { rt.tracer.close(ctx); return nil })
		rt.log.Info("trace export on (OTLP/HTTP, JSON)", "endpoint", otelSet.URL)
	}
	journal := filepath.Join(o.StateDir, "journal")
	var store engineStore = engineStoreFile{dir: journal, metrics: rt.metrics}
	var pg *engineStorePG
	hint := "the journal under " + journal + " is damaged before its tail; move it aside to start fresh"
	if o.Engine.Kind == engineKindPostgres {
		// A pool of its own: lease renewals and commits never queue behind
		// the runtime's other queries.
		engineDB, err := pgxpool.New(ctx, o.PostgresURL)
		if err != nil {
			return fmt.Errorf("connect PostgreSQL for the engine: %w", err)
		}
		rt.closers = append(rt.closers, func(context.Context) error { engineDB.Close(); return nil })
		pg = newEngineStorePG(engineDB, o.Engine, rt.log)
		pg.metrics = rt.metrics
		store = pg
		hint = "check that the database accepts connections and that schema svc_engine is the engine's"
		rt.log.Info("engine on PostgreSQL (SVC_ENGINE=postgres): schema svc_engine, replicas active/active", "lease", o.Engine.Lease, "renew", o.Engine.Renew, "poll", o.Engine.Poll)
	}
	rt.engine, err = openFleet(engineOptions{
		Store: store, Catalog: rt.openCatalog, Env: rt.vmEnv, Platform: rt.platform, Log: rt.log,
		OnRunDone: func(*runRecord) { rt.markFirstRun() },
		History:   newPGRunHistory(rt.db), Retention: retention, IdemRetention: idemRetention, Metrics: rt.metrics, Tracer: rt.tracer,
	}, pg, o.FleetAddress, o.Engine.Partitions)
	if err != nil {
		if errors.Is(err, errJournalLocked) {
			hint = "another " + o.Command + " serves this state; stop it first"
		}
		return &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: hint}
	}
	rt.closers = append(rt.closers, func(context.Context) error { return rt.engine.close() })
	// After a crash, a kill or a restart: the runs go on where their journal left them.
	if a := rt.engine.activeByStatus(); a[runPending]+a[runRunning]+a[runWaiting] > 0 || a[runQueued] > 0 {
		n := a[runPending] + a[runRunning] + a[runWaiting]
		rt.log.Info(fmt.Sprintf("resumed %s from the journal", plural(n, "active run")), "queued", a[runQueued])
	}
	// Schedules; SVC_SCHEDULE_CLOCK_OFFSET moves their clock (tests only).
	var clockOffset time.Duration
	if s := o.Getenv("SVC_SCHEDULE_CLOCK_OFFSET"); s != "" {
		if clockOffset, err = time.ParseDuration(s); err != nil {
			return &cliError{Code: codeGeneric, Message: "parse SVC_SCHEDULE_CLOCK_OFFSET: " + err.Error(), Err: err, Hint: "unset it, or set a duration such as -90m (it is for tests)"}
		}
	}
	rt.sched = newScheduler(rt.engine, func() time.Time { return time.Now().Add(clockOffset) })
	go rt.sched.run(scheduleTick)
	rt.closers = append(rt.closers, func(context.Context) error { rt.sched.close(); return nil })

	// System secrets (object-storage keys minted once, stored encrypted) and .env.
	if rt.secrets, err = openSecretStore(ctx, rt.db, filepath.Join(o.StateDir, "master.key"), o.MasterKey); err != nil {
		return err
	}
	userEnv, err := readDotEnv(rt.proj)
	if err != nil {
		return err
	}
	rt.services = runtimeServices{PostgresURL: o.PostgresURL, S3Endpoint: o.S3Endpoint, S3Bucket: runtimeBucket}
	s3Key, s3Secret := o.S3Keys[0], o.S3Keys[1]
	if o.S3Listener != nil {
		if s3Key, s3Secret, err = rt.s3Keys(ctx, userEnv); err != nil {
			return err
		}
		if err := rt.startS3(o.S3Listener, filepath.Join(o.StateDir, "s3"), s3Key, s3Secret); err != nil {
			return err
		}
	}
	rt.baseEnv = map[string]string{
		"DATABASE_URL": o.PostgresURL, "S3_ENDPOINT": o.S3Endpoint, "S3_BUCKET": runtimeBucket,
		"S3_ACCESS_KEY_ID": s3Key, "S3_SECRET_ACCESS_KEY": s3Secret, "S3_REGION": runtimeS3Region,
	}
	for k, v := range userEnv {
		rt.baseEnv[k] = v
	}
	if err := storageConfigure(rt.platform, storageTargetOf(rt.toolEnv())); err != nil {
		rt.log.Warn("storage of user code is off: fix the S3_* variables of .env", "err", err)
	}
	rt.agents = newAgentHost(rt)
	stopTrim := rt.agents.sessions.startResponseTrim(responseRetention, rt.log)
	// Replicas look for the turns a dead replica left every lease (as they
	// take over its runs); a process alone, once at boot.
	var sweepEvery time.Duration
	if o.Engine.Kind == engineKindPostgres {
		sweepEvery = o.Engine.Lease
	}
	stopSweep := rt.agents.startTurnSweep(sweepEvery)
	rt.closers = append(rt.closers, func(context.Context) error { stopTrim(); stopSweep(); rt.agents.sessions.close(); return nil })
	// The gate decides whether agents and workflows start.
	return rt.resolveGate(ctx)
}

// startS3 serves the built-in object storage from dir on ln.
func (rt *runtimeCore) startS3(ln net.Listener, dir, key, secret string) error {
	var err error
	rt.s3, err = newS3Server(dir, key, secret)
	if err == nil {
		err = rt.s3.ensureBucket(runtimeBucket)
	}
	if err != nil {
		return fmt.Errorf("object storage: %w", err)
	}
	rt.s3.logger = rt.log.With("service", "object storage")
	rt.s3.start()
	rt.closers = append(rt.closers, func(context.Context) error { return rt.s3.Close() })
	guard, err := newHTTPGuard(rt.s3, httpGuardConfig{})
	if err != nil {
		return err
	}
	rt.serve(ln, guard, "object storage")
	return nil
}

// runtimeS3KeyVars are the variables holding the object-storage keys,
// access key first, with the length in bytes of a minted one.
var runtimeS3KeyVars = []struct {
	name   string
	length int
}{{"S3_ACCESS_KEY_ID", 10}, {"S3_SECRET_ACCESS_KEY", 20}}

// s3Keys returns the object-storage keys: those minted once into the
// secret store, each replaced by the value .env sets. The server adopts
// the keys of .env so that what process.env carries is what it accepts;
// a value it cannot accept fails the boot naming .env and the variable.
func (rt *runtimeCore) s3Keys(ctx context.Context, userEnv map[string]string) (key, secret string, err error) {
	keys := make([]string, len(runtimeS3KeyVars))
	for i, v := range runtimeS3KeyVars {
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

// serve runs h on ln until the runtime closes; an unexpected serve error
// ends the session.
func (rt *runtimeCore) serve(ln net.Listener, h http.Handler, name string) {
	srv := newHTTPServer(h)
	srv.RegisterOnShutdown(func() { rt.stoppingOnce.Do(func() { close(rt.stopping) }) })
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

// close stops everything the host and open started, in reverse order,
// each with a fresh bounded context.
func (rt *runtimeCore) close() {
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
func (rt *runtimeCore) gateState() gateState {
	if g := rt.gate.Load(); g != nil {
		return *g
	}
	return gateState{Reason: gateNoProvider}
}

// firstRunKey is the svc.kv key set once a run completes in this project.
const firstRunKey = "first_run_completed"

// runtimeStoredProvider is the secret holding the credential stored
// through the console.
const runtimeStoredProvider = "model_provider"

// resolveGate resolves the model provider (DESIGN §5) and sets the gate.
func (rt *runtimeCore) resolveGate(ctx context.Context) error {
	var stored *storedProvider
	if b, ok, err := rt.secrets.get(ctx, runtimeStoredProvider); err != nil {
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
	var fromEnv *modelProvider
	if rt.getenv != nil { // nil in runtimes tests build by hand: no environment
		fromEnv = providerFromEnv(rt.getenv)
	}
	p, g := resolveGate(fromEnv, stored, firstRun)
	rt.provider.Store(p)
	rt.gate.Store(&g)
	return nil
}

// storeProvider stores a model-provider credential; a closed gate opens
// without a restart and onGateOpen runs.
func (rt *runtimeCore) storeProvider(ctx context.Context, p storedProvider) error {
	b, _ := json.Marshal(p)
	if err := rt.secrets.put(ctx, runtimeStoredProvider, b); err != nil {
		return err
	}
	wasOpen := rt.gateState().Open
	if err := rt.resolveGate(ctx); err != nil {
		return err
	}
	if !wasOpen && rt.gateState().Open {
		rt.log.Info("boot gate opened", "reason", rt.gateState().Reason)
		rt.engine.resumeAll()
		if rt.onGateOpen != nil {
			rt.onGateOpen()
		}
	}
	return nil
}

// vmEnv is process.env for agents and workflows: system secrets, the
// resolved model provider, then the user's .env (which wins).
func (rt *runtimeCore) vmEnv() map[string]string {
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

// compile compiles the catalog and swaps it in, logging every file that
// failed with file:line, and resumes the runs waiting for it. While the
// gate is closed the catalog is compiled (for types and errors) but
// nothing runs. It returns the new catalog, nil when compiling failed.
func (rt *runtimeCore) compile() *catalog {
	began := time.Now()
	cat, cerr := compileCatalog(rt.proj.Dir, rt.log)
	if cerr != nil {
		rt.log.Error("compile failed", "err", cerr.Error())
		return nil
	}
	for _, name := range sortedKeys(cat.Failed) {
		rt.log.Error("compile failed", "name", name, "err", cat.Failed[name].Error())
	}
	rt.catalog.Store(cat)
	if rt.engine != nil && rt.gateState().Open {
		rt.engine.resumeAll()
	}
	rt.log.Info("compiled", "workflows", len(cat.Workflows), "agents", len(cat.Agents), "failed", len(cat.Failed), "dur", time.Since(began).Round(time.Millisecond))
	return cat
}

// openCatalog is the catalog the engine may run: nil while the gate is closed.
func (rt *runtimeCore) openCatalog() *catalog {
	if !rt.gateState().Open {
		return nil
	}
	return rt.catalog.Load()
}

// markFirstRun records once that a run completed in this project (a later
// boot opens the gate with reason first-run-completed).
func (rt *runtimeCore) markFirstRun() {
	if rt.firstRunMarked.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rt.db.Exec(ctx, `insert into svc.kv(key, value) values($1, to_jsonb(now())) on conflict do nothing`, firstRunKey); err != nil {
		rt.log.Warn("record first run", "err", err)
	}
}

// devToolEnvVars are the variables `svc env` prints: what a tool (aws,
// rclone, psql) needs to reach the session's database and object storage;
// user code's storage is configured from them too.
var devToolEnvVars = []string{"DATABASE_URL", "S3_ENDPOINT", "S3_BUCKET", "S3_REGION", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"}

// toolEnv returns devToolEnvVars as agents and workflows see them (.env
// included, which the object storage adopts).
func (rt *runtimeCore) toolEnv() map[string]string {
	env := make(map[string]string, len(devToolEnvVars))
	for _, k := range devToolEnvVars {
		env[k] = rt.baseEnv[k]
	}
	return env
}

// runtimeHealthTimeout bounds each part's check in the health report (the
// parts are checked at once), under the CLI's targetHealthTimeout: a part
// that hangs (a paused server) must not make svc dev look gone.
const runtimeHealthTimeout = 1500 * time.Millisecond

// runtimeHealthKey is the object the health check asks object storage
// about; it need not exist (not found is an answer).
const runtimeHealthKey = ".svc-health"

// partHealth is one part's state in the health report: "ok", or
// "unavailable" with what to know (never the cause's detail, which names
// the database's address: that is logged).
type partHealth struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// databaseHealth pings the runtime's PostgreSQL, bounded.
func (rt *runtimeCore) databaseHealth(ctx context.Context) partHealth {
	if rt.db == nil {
		return partHealth{State: "ok"}
	}
	ctx, cancel := context.WithTimeout(ctx, runtimeHealthTimeout)
	defer cancel()
	if err := rt.db.Ping(ctx); err != nil {
		rt.log.Debug("health: PostgreSQL does not answer", "err", err)
		return partHealth{State: "unavailable", Message: "PostgreSQL does not answer: runs that use sql, chat sessions and the run history wait for it (the log has the cause)"}
	}
	return partHealth{State: "ok"}
}

// storageHealth asks the object storage of user code (the built-in one, or
// SVC_S3_ENDPOINT's) about one object, bounded: any answer but a refusal
// of the keys or the bucket is "ok" (not found included). The answer
// never names the endpoint or the keys: the log has the cause.
func (rt *runtimeCore) storageHealth(ctx context.Context) partHealth {
	if rt.platform == nil {
		return partHealth{State: "ok"} // a runtime without user code
	}
	c := rt.platform.storage.Load()
	if c == nil {
		return partHealth{State: "unavailable", Message: "object storage is not configured: fix the S3_* variables of .env (the log has the cause)"}
	}
	ctx, cancel := context.WithTimeout(ctx, runtimeHealthTimeout)
	defer cancel()
	if _, err := c.head(ctx, runtimeHealthKey); err != nil && !storageIsNotFound(err) {
		rt.log.Debug("health: object storage does not answer", "err", err)
		return partHealth{State: "unavailable", Message: "object storage does not answer or refuses the runtime's keys: storage in steps and tools fails until it does (the log has the cause)"}
	}
	return partHealth{State: "ok"}
}

// gateHealth is the model gate as a part of the health report: "open" or
// "closed", with the gate's reason. A closed gate does not make the
// runtime unhealthy: it serves, and its settings open the gate.
func (rt *runtimeCore) gateHealth() partHealth {
	g := rt.gateState()
	if g.Open {
		return partHealth{State: "open", Message: g.Reason}
	}
	return partHealth{State: "closed", Message: g.Reason}
}
