package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// serveDefaultAddr is where `svc serve` listens without --addr.
const serveDefaultAddr = ":8080"

// newServeFlags defines the flags of `svc serve` (DESIGN §7).
func newServeFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.String("addr", serveDefaultAddr, "listen address, host:port; the host must be an IP address or empty (all addresses)")
	fs.String("data", "", "state directory: journal, the box's secret store key, built-in object storage and, without DATABASE_URL, the PostgreSQL cluster (default DIR/.svc)")
	return fs
}

// servePayload is what `svc serve` prints once it serves.
type servePayload struct {
	SchemaVersion int    `json:"schema_version"`
	URL           string `json:"url"`
	DataDir       string `json:"data_dir"`
	boxHandshake
}

// parseServeOptions validates the flags and environment of `svc serve`;
// it returns the options and the project directory.
func parseServeOptions(c *cmd, fs *flag.FlagSet) (boxOptions, string, error) {
	o := boxOptions{addr: fs.Lookup("addr").Value.String(), imageTag: c.getenv("SVC_IMAGE_TAG"),
		hmacSecret: c.getenv("HMAC_SECRET"), controlPlane: strings.TrimSuffix(c.getenv("SVC_CONTROL_PLANE_URL"), "/"),
		apiKeys: apiKeysFromEnv(c.getenv("SVC_API_KEYS"))}
	if fs.NArg() > 1 {
		return o, "", fmt.Errorf("serve takes one project directory, got %q: %w", fs.Args(), errUsage)
	}
	dir := c.dir
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return o, "", err
	}
	if data := fs.Lookup("data").Value.String(); data != "" {
		if o.dataDir, err = filepath.Abs(data); err != nil {
			return o, "", err
		}
	} else {
		o.dataDir = filepath.Join(dir, ".svc")
	}
	if _, err := serveBindHost(o.addr); err != nil {
		return o, "", failf(codeGeneric, "pass --addr :8080 or --addr 127.0.0.1:8080", "invalid --addr %q: %v", o.addr, err)
	}
	if o.hmacSecret != "" && len(o.hmacSecret) < signMinSecret {
		return o, "", failf(codeGeneric, "set HMAC_SECRET to at least 16 characters (e.g. 64 hex digits), or unset it to use the minted one", "HMAC_SECRET is too short")
	}
	if o.controlPlane != "" {
		if err := boxCheckURL(o.controlPlane); err != nil {
			return o, "", failf(codeGeneric, "set SVC_CONTROL_PLANE_URL to your control plane, e.g. https://cp.example.com", "invalid SVC_CONTROL_PLANE_URL: %v", err)
		}
	}
	if env := c.getenv("SVC_MASTER_KEY"); env != "" {
		if o.masterKey, err = parseMasterKey(env); err != nil {
			return o, "", failf(codeGeneric, "set SVC_MASTER_KEY to 32 bytes (64 hex digits or base64), e.g. the output of `openssl rand -hex 32`, or unset it to keep the key in --data/master.key",
				"svc serve: %v", err)
		}
	}
	if o.engine, err = readEngineSettings(c.getenv); err != nil {
		return o, "", failf(codeGeneric, "unset SVC_ENGINE or set it to file or postgres; leases are durations such as 10s and 3s", "svc serve: %v", err)
	}
	o.s3Endpoint = c.getenv("SVC_S3_ENDPOINT")
	if o.engine.Kind == engineKindPostgres && o.s3Endpoint == "" && !o.engine.LocalStorageOK {
		return o, "", failf(codeGeneric, "set SVC_S3_ENDPOINT (with SVC_S3_ACCESS_KEY_ID and SVC_S3_SECRET_ACCESS_KEY) to object storage every replica reaches, or SVC_STORAGE_LOCAL_OK=1 if files on this replica's disk are acceptable",
			"svc serve: SVC_ENGINE=postgres shares the engine's state across replicas, but the built-in object storage keeps files on this replica's disk, where another replica would not see them: set SVC_S3_ENDPOINT, or SVC_STORAGE_LOCAL_OK=1 to accept that")
	}
	if o.imageTag == "" {
		o.imageTag = "dev"
	}
	return o, dir, nil
}

// serveBindHost returns the IP address addr binds ("0.0.0.0" for all).
func serveBindHost(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("port %q is not in 0-65535", port)
	}
	if host == "" {
		return "0.0.0.0", nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("host %q is not an IP address", host)
	}
	return a.String(), nil
}

// runServe is `svc serve`: boot the box, print its payload, serve until
// SIGINT/SIGTERM, then stop everything it started.
func runServe(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	opts, dir, err := parseServeOptions(c, fs)
	if err != nil {
		return err
	}
	proj, err := loadProject(dir)
	if err != nil {
		return err
	}
	b, err := bootBox(ctx, c, opts, proj)
	if err != nil {
		return err
	}
	p := servePayload{SchemaVersion: schemaVersion, URL: b.apiURL, DataDir: opts.dataDir, boxHandshake: b.handshake()}
	c.emit(p, func(w io.Writer) {
		fmt.Fprintf(w, "svc serve is up at %s (identity %s, control plane %s)\nPress Ctrl-C to stop.\n", p.URL, p.Identity, p.ControlPlane)
	})
	select {
	case <-ctx.Done():
		b.log.Info("stopping")
	case err = <-b.fatal:
	}
	b.close()
	b.log.Info("stopped")
	return err
}

// bootBox starts the box: the listener, PostgreSQL (DATABASE_URL, else a
// local cluster under --data), the shared runtime with its object storage
// (SVC_S3_ENDPOINT, else built in and reachable on loopback only), the
// compiled catalog, the signing secret, the teaching and the identity; then
// it serves. No typegen, watcher or auto-migrate: a box runs what was
// committed. On failure it stops what it had started.
func bootBox(ctx context.Context, c *cmd, opts boxOptions, proj *project) (_ *boxRuntime, err error) {
	b := &boxRuntime{runtimeCore: newRuntimeCore(newDevLogger(c), proj), opts: opts}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	ln, err := net.Listen("tcp", opts.addr)
	if err != nil {
		return nil, failf(codeGeneric, "pick another --addr", "svc serve: listen on %s: %v", opts.addr, err)
	}
	b.closers = append(b.closers, func(context.Context) error { ln.Close(); return nil })
	if err := os.MkdirAll(opts.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("svc serve: create --data: %w", err)
	}
	if err := tightenTree(opts.dataDir); err != nil {
		return nil, err
	}

	var verbose io.Writer
	if c.verbose {
		verbose = c.stderr
	}
	pgURL, err := b.startPostgres(ctx, c, verbose)
	if err != nil {
		return nil, err
	}
	ro := runtimeOptions{Command: "svc serve", PostgresURL: pgURL, StateDir: opts.dataDir, MasterKey: opts.masterKey, Getenv: c.getenv, Verbose: verbose,
		Engine: opts.engine}
	if ro.FleetAddress, err = fleetAddress(c.getenv("SVC_FLEET_ADDRESS"), ln.Addr()); err != nil {
		return nil, failf(codeGeneric, "set SVC_FLEET_ADDRESS to this replica's URL, such as http://10.0.0.5:8080", "svc serve: %v", err)
	}
	if ext := opts.s3Endpoint; ext != "" {
		ro.S3Endpoint = ext
		ro.S3Keys = [2]string{c.getenv("SVC_S3_ACCESS_KEY_ID"), c.getenv("SVC_S3_SECRET_ACCESS_KEY")}
	} else {
		if ro.S3Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("svc serve: object storage: %w", err)
		}
		ro.S3Endpoint = "http://" + ro.S3Listener.Addr().String()
	}
	if err := b.open(ctx, ro); err != nil {
		return nil, err
	}
	b.compile()
	b.warnSchemaDrift(ctx, pgURL)
	if !b.gateState().Open {
		b.log.Warn("boot gate closed: no model provider; agents and workflows are not started",
			"hint", "set OPENAI_API_KEY or ANTHROPIC_API_KEY (or SVC_MODEL_BASE_URL) on the container")
	}

	if b.secret, err = b.boxSigningSecret(ctx); err != nil {
		return nil, err
	}
	if b.signer, err = newSignVerifier(b.secret, b.db, nil); err != nil {
		return nil, err
	}
	if b.keys, err = newHTTPGuardKeys(opts.apiKeys); err != nil {
		return nil, err
	}
	if err := b.loadTeaching(ctx); err != nil {
		return nil, err
	}
	b.armAtBoot()
	if c.getenv("DATABASE_URL") != "" {
		// Other replicas can share only a database the box did not start.
		b.watchTeaching()
	}

	host, _ := serveBindHost(opts.addr)
	b.apiURL = "http://" + net.JoinHostPort(displayHost(host), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	api, err := newServer(b.runtimeCore, httpGuardConfig{BindHost: host, Public: true, Auth: b}, b.routes())
	if err != nil {
		return nil, err
	}
	b.serve(ln, api, "API")
	b.log.Info("serving", "url", b.apiURL, "image_tag", opts.imageTag, "data", opts.dataDir)
	return b, nil
}

// startPostgres returns the box's database: DATABASE_URL when set, else a
// local cluster under --data (the image ships Debian's PostgreSQL), on a
// free loopback port. The cluster stops with the box.
func (b *boxRuntime) startPostgres(ctx context.Context, c *cmd, verbose io.Writer) (string, error) {
	if url := c.getenv("DATABASE_URL"); url != "" {
		if err := pgPing(ctx, url); err != nil {
			return "", failf(codeGeneric, "check DATABASE_URL: the box's PostgreSQL must accept connections", "svc serve: connect to DATABASE_URL: %v", err)
		}
		b.log.Info("postgres", "provider", "DATABASE_URL", "url", redactURL(url))
		return url, nil
	}
	port, err := serveFreePort()
	if err != nil {
		return "", err
	}
	// The local providers keep their state in <dir>/.svc: --data's parent
	// would be the user's; a directory of its own under --data is the box's.
	getenv := func(k string) string {
		if k == "SVC_DATABASE_URL" {
			return ""
		}
		return c.getenv(k)
	}
	b.log.Info("starting PostgreSQL under --data (the first boot also initializes its cluster)", "port", port)
	pg, err := startPostgres(ctx, pgOptions{ProjectDir: filepath.Join(b.opts.dataDir, "postgres"), Port: port, Getenv: getenv, LookPath: exec.LookPath, Log: verbose})
	if err != nil {
		if errors.Is(err, errNoPostgres) {
			return "", &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "set DATABASE_URL to an external PostgreSQL, or install PostgreSQL in the image"}
		}
		return "", fmt.Errorf("svc serve: start PostgreSQL: %w", err)
	}
	b.closers = append(b.closers, pg.Stop, pg.supervise(b.log))
	b.log.Info("postgres up", "provider", pg.Provider, "url", redactURL(pg.URL))
	pg.logUndid(b.log)
	return pg.URL, nil
}

// serveFreePort returns a TCP port free on loopback now.
func serveFreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("svc serve: find a port for PostgreSQL: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
