package main

// PostgreSQL for `svc dev` (SPEC §1 boot step 1, DESIGN §6).
//
// startPostgres uses the first provider that is available, in this order:
//
//  1. SVC_DATABASE_URL: an existing database, used as is. svc only checks that
//     it connects and never stops it.
//  2. Local server binaries: initdb and pg_ctl on PATH, or else under
//     /usr/lib/postgresql/<version>/bin (the highest version). svc keeps one
//     cluster per project in .svc/postgres, created once with initdb (superuser
//     "postgres", UTF8, C locale), started with `pg_ctl -w start` on 127.0.0.1 at the
//     PostgreSQL dev port with Unix-domain sockets turned off (clients use the
//     URL; a socket path inside a deep project directory can exceed the 107-byte
//     limit), and stopped with `pg_ctl stop -m fast`. The server log is
//     .svc/postgres.log (rewritten each session). A server found running
//     when a session starts was left by a session that was killed (see the
//     lock below): it is stopped and started again. A stale postmaster.pid
//     left by a server that was killed is ignored by PostgreSQL.
//
//     The cluster requires a password: pg_hba.conf admits only SCRAM-SHA-256
//     password authentication over TCP from 127.0.0.1 and ::1 (no trust, no
//     Unix socket), the superuser to every database and the project's role
//     to the project's database only. The superuser's password is minted
//     once (crypto/rand) and kept in .svc/postgres.password (0600); initdb
//     reads it from a temporary 0600 file deleted afterwards. svc uses it
//     only to set the cluster up at boot: the URL svc uses and hands out
//     logs in as the project's role, which owns the project's database and
//     nothing more (postgres_role.go), with the password kept in
//     .svc/postgres-app.password. A cluster made by an earlier version with trust
//     authentication is converted on boot: the password is set over the
//     still-trusted connection, pg_hba.conf is rewritten, and the server is
//     restarted so that the new rules are in force when startPostgres returns.
//
//     PostgreSQL refuses to run as root. When svc runs as root (containers, CI),
//     initdb and pg_ctl run as the "postgres" OS user, which then owns the data
//     directory. That user cannot enter the private .svc (nor, often, the
//     project's parents, such as /root), so the cluster of a root session
//     lives in /var/lib/svc/postgres/<cluster id> (0700, owned by postgres),
//     the id being minted once per project and kept in .svc: a project made
//     again at the same path gets a cluster of its own, and orphan clusters
//     are removed (postgres_root.go). The password file and the server log
//     stay in .svc.
//
//     When the cluster refuses the password (the password file was replaced
//     or removed), the error says so and names the command that starts over.
//  3. A container runtime, docker or else podman: a container
//     svc-pg-<hash of the project path> from docker.io/library/postgres:16, port
//     5432 published on 127.0.0.1 only at the PostgreSQL dev port, data in
//     .svc/postgres-container, password generated once and kept in
//     .svc/postgres-container.password (passed through the environment so it
//     does not show in the process list), used only to set up the project's
//     role, whose password is .svc/postgres-container-app.password and
//     whose URL svc hands out, as for the local cluster. It is stopped and removed at
//     shutdown. A container left by a killed session is reused if running,
//     started if stopped, and replaced if it publishes another port.
//
// The programs svc runs (initdb, pg_ctl, docker, podman) get the minimal
// environment of childEnv, never svc's own: the postmaster's environment is
// readable by a superuser through /proc, and svc's holds provider keys.
//
// With none of them, startPostgres fails with errNoPostgres. The provider is
// chosen by availability: if the chosen one fails, its error is reported
// rather than masked by trying the next.
//
// For the local and container providers a session holds the lock
// .svc/postgres.lock until Stop, so a second session on the same project
// fails with errPostgresInUse instead of taking over the first one's server.
// The kernel releases the lock however svc exits, which is how a leftover
// server is known to be abandoned.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// pgDatabase is the database svc creates for the user's data.
	pgDatabase = "svc"
	// pgSuperuser is the superuser of the clusters svc creates, and the OS user
	// that runs them when svc runs as root.
	pgSuperuser = "postgres"
	// pgServerBinGlob is where distributions install versioned server binaries.
	pgServerBinGlob = "/usr/lib/postgresql/*/bin"
	// pgFallbackRoot holds the clusters of root sessions: the postgres user
	// cannot enter a project's private .svc.
	pgFallbackRoot = "/var/lib/svc/postgres"
	// pgPasswordFile, under .svc, holds the local cluster's superuser password.
	pgPasswordFile = "postgres.password"
	// pgContainerPasswordFile, under .svc, holds the container's superuser
	// password.
	pgContainerPasswordFile = "postgres-container.password"
	// pgAuthMethod is the only authentication method the local cluster accepts.
	pgAuthMethod = "scram-sha-256"
	// pgContainerImage is fully qualified so podman needs no short-name alias.
	pgContainerImage = "docker.io/library/postgres:16"
	// pgDefaultReadyTimeout bounds the wait for a container to accept
	// connections; the first boot of an image initialises its cluster.
	pgDefaultReadyTimeout = 60 * time.Second
	// pgConnectTimeout bounds one connection attempt.
	pgConnectTimeout = 5 * time.Second
	// pgRetryInterval spaces the readiness attempts on a container.
	pgRetryInterval = 250 * time.Millisecond
	// pgLogTailInterval is how often verbose mode copies new server log lines:
	// the server owns the log file, svc only mirrors it.
	pgLogTailInterval = 250 * time.Millisecond
	// pgOutputTailLines is how many lines of a failing command's output an
	// error quotes.
	pgOutputTailLines = 20
	// pgInvalidPassword is the SQLSTATE of a refused password.
	pgInvalidPassword = "28P01"
)

// errNoPostgres reports that no way to run PostgreSQL was found.
var errNoPostgres = errors.New("no PostgreSQL available: set SVC_DATABASE_URL to an existing database, " +
	"install the PostgreSQL server binaries (e.g. `apt-get install postgresql` or `brew install postgresql`), " +
	"or install docker or podman")

// errPostgresInUse reports that another svc session runs this project's
// PostgreSQL.
var errPostgresInUse = errors.New("another svc session is running PostgreSQL for this project; stop it first")

// portBusyError reports that a dev service's port on 127.0.0.1 is taken.
type portBusyError struct {
	Service string // "postgres"
	Port    int
}

// Error names the service and port and says how to shift the dev ports.
func (e *portBusyError) Error() string {
	return fmt.Sprintf("%s port %d on 127.0.0.1 is already in use: stop what uses it or set SVC_DEV_PORT_OFFSET to shift the dev ports",
		e.Service, e.Port)
}

// pgOptions configures startPostgres.
type pgOptions struct {
	ProjectDir string                       // absolute project root; state under ProjectDir/.svc
	Port       int                          // host port for the local and container providers
	Getenv     func(string) string          // environment lookup; nil means os.Getenv
	LookPath   func(string) (string, error) // executable lookup; nil means exec.LookPath
	Log        io.Writer                    // verbose server/container output; nil or io.Discard when not verbose

	// BinGlob finds versioned server bin directories; "" means pgServerBinGlob.
	BinGlob string
	// ReadyTimeout bounds the wait for a container; 0 means pgDefaultReadyTimeout.
	ReadyTimeout time.Duration
	// NoSync runs initdb with --no-sync. Only for tests: a crash right after
	// initdb could leave a corrupt cluster.
	NoSync bool
}

// pgService is a running PostgreSQL. Stop it with Stop.
type pgService struct {
	URL      string // connection URL of the svc database
	Provider string // "env", "local", "docker" or "podman"
	DataDir  string // where the data lives on this machine; "" for "env"
	// Undid are the settings that stop a boot which this boot reset
	// (pgUndoBootBreakers), for the caller to log.
	Undid []string
	// Initialized says this boot made the cluster (the project's first).
	Initialized bool

	stop func(context.Context) error // nil once stopped, and for "env"
	lock *os.File                    // the project lock held until Stop; nil for "env"
	// watched is the server svc restarts when it dies (postgres_supervise.go);
	// nil where svc does not own the process.
	watched pgWatched
}

// Stop stops what startPostgres started and waits for it. It is a no-op for
// the env provider and after the first call. Give it a fresh context with a
// timeout, not the one cancelled by the shutdown signal.
func (p *pgService) Stop(ctx context.Context) error {
	if p.stop == nil {
		return nil
	}
	stop := p.stop
	p.stop = nil
	err := stop(ctx)
	err = errors.Join(err, p.lock.Close())
	if err != nil {
		return fmt.Errorf("stop postgres (%s): %w", p.Provider, err)
	}
	return nil
}

// startPostgres starts PostgreSQL by the first available provider (see the
// comment at the top of this file) and returns once it accepts connections.
func startPostgres(ctx context.Context, o pgOptions) (*pgService, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.BinGlob == "" {
		o.BinGlob = pgServerBinGlob
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = pgDefaultReadyTimeout
	}
	if url := o.Getenv("SVC_DATABASE_URL"); url != "" {
		if err := pgPing(ctx, url); err != nil {
			return nil, fmt.Errorf("start postgres: connect to SVC_DATABASE_URL: %w", err)
		}
		return &pgService{URL: url, Provider: "env"}, nil
	}
	if !filepath.IsAbs(o.ProjectDir) {
		return nil, fmt.Errorf("start postgres: project directory %q is not absolute", o.ProjectDir)
	}
	provider, start := pgChooseProvider(o)
	if start == nil {
		return nil, fmt.Errorf("start postgres: %w", errNoPostgres)
	}
	p, err := pgStartManaged(ctx, o, start)
	if err != nil {
		return nil, fmt.Errorf("start postgres (%s): %w", provider, err)
	}
	return p, nil
}

// pgStartFunc starts a provider that svc manages, with its state in stateDir.
type pgStartFunc func(ctx context.Context, o pgOptions, stateDir string) (*pgService, error)

// pgChooseProvider returns the first available provider that svc manages,
// or a nil start when there is none.
func pgChooseProvider(o pgOptions) (string, pgStartFunc) {
	if bins, ok := pgFindServerBinaries(o.LookPath, o.BinGlob); ok {
		return "local", func(ctx context.Context, o pgOptions, stateDir string) (*pgService, error) {
			return pgStartLocal(ctx, o, stateDir, bins)
		}
	}
	for _, runtime := range []string{"docker", "podman"} {
		if path, err := o.LookPath(runtime); err == nil {
			return runtime, func(ctx context.Context, o pgOptions, stateDir string) (*pgService, error) {
				return pgStartContainer(ctx, o, stateDir, runtime, path)
			}
		}
	}
	return "", nil
}

// pgStartManaged runs start holding the project's PostgreSQL lock, which the
// returned service keeps until Stop.
func pgStartManaged(ctx context.Context, o pgOptions, start pgStartFunc) (*pgService, error) {
	stateDir, err := pgStateDir(o.ProjectDir)
	if err != nil {
		return nil, err
	}
	lock, err := lockFile(filepath.Join(stateDir, "postgres.lock"))
	if errors.Is(err, errLocked) {
		err = errPostgresInUse
	}
	if err != nil {
		return nil, err
	}
	p, err := start(ctx, o, stateDir)
	if err != nil {
		return nil, errors.Join(err, lock.Close())
	}
	p.lock = lock
	return p, nil
}

// pgPing connects to url once, within pgConnectTimeout, and disconnects.
func pgPing(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, pgConnectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// pgURL is the URL of database db on 127.0.0.1:port as role with password.
func pgURL(role, password string, port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(role, password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// pgCheckPort reports a *portBusyError when port on 127.0.0.1 is taken.
func pgCheckPort(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if errors.Is(err, syscall.EADDRINUSE) {
		return &portBusyError{Service: "postgres", Port: port}
	}
	if err != nil {
		return err
	}
	return ln.Close()
}

// pgProjectHash is a short stable name for a project: the first 12 hex digits
// of the SHA-256 of its absolute path.
func pgProjectHash(projectDir string) string {
	sum := sha256.Sum256([]byte(projectDir))
	return hex.EncodeToString(sum[:6])
}

// pgStateDir creates and returns ProjectDir/.svc, private to the user.
func pgStateDir(projectDir string) (string, error) {
	dir := filepath.Join(projectDir, ".svc")
	if err := mkdirPrivate(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// pgOutputTail returns the last pgOutputTailLines lines of out, trimmed.
func pgOutputTail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > pgOutputTailLines {
		lines = lines[len(lines)-pgOutputTailLines:]
	}
	return strings.Join(lines, "\n")
}

// pgServerBinaries are the two server programs svc drives.
type pgServerBinaries struct {
	initdb, pgCtl string
}

// pgFindServerBinaries looks for initdb and pg_ctl on PATH, then in the
// highest-versioned directory matching glob that holds both.
func pgFindServerBinaries(lookPath func(string) (string, error), glob string) (pgServerBinaries, bool) {
	initdb, errInitdb := lookPath("initdb")
	pgCtl, errPgCtl := lookPath("pg_ctl")
	if errInitdb == nil && errPgCtl == nil {
		return pgServerBinaries{initdb: initdb, pgCtl: pgCtl}, true
	}
	dirs, _ := filepath.Glob(glob) // the only error is a malformed pattern
	var best pgServerBinaries
	bestVersion := ""
	for _, dir := range dirs {
		bins := pgServerBinaries{initdb: filepath.Join(dir, "initdb"), pgCtl: filepath.Join(dir, "pg_ctl")}
		if !pgIsExecutable(bins.initdb) || !pgIsExecutable(bins.pgCtl) {
			continue
		}
		version := filepath.Base(filepath.Dir(dir))
		if bestVersion == "" || pgVersionLess(bestVersion, version) {
			best, bestVersion = bins, version
		}
	}
	return best, bestVersion != ""
}

// pgIsExecutable reports whether path is a regular file with an execute bit.
func pgIsExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// pgVersionLess reports whether version a ("9.6", "15") sorts before b,
// comparing dot-separated numbers; a part that is not a number counts as 0.
func pgVersionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// pgLocal is one cluster run by the local server binaries.
type pgLocal struct {
	bins    pgServerBinaries
	dataDir string
	logPath string
	// runAs is the postgres OS user when svc runs as root; nil runs the
	// binaries as the current user.
	runAs *syscall.Credential
	// env is the environment of the server commands (see childEnv).
	env []string
}

// pgHBA is the whole pg_hba.conf of the local cluster: password
// (SCRAM-SHA-256) connections over loopback TCP and nothing else (the
// server has no Unix socket), the superuser to any database, the project's
// role (postgres_role.go) to the project database only.
const pgHBA = `# Written by svc: password connections from this machine only.
# TYPE  DATABASE  USER      ADDRESS       METHOD
host    all       ` + pgSuperuser + `  127.0.0.1/32  ` + pgAuthMethod + `
host    all       ` + pgSuperuser + `  ::1/128       ` + pgAuthMethod + `
host    ` + pgDatabase + `       ` + pgAppRole + `   127.0.0.1/32  ` + pgAuthMethod + `
host    ` + pgDatabase + `       ` + pgAppRole + `   ::1/128       ` + pgAuthMethod + `
`

// pgStartLocal initialises the project's cluster if needed, starts it and
// gives the svc database to the project's role (pgProvisionApp). The
// cluster requires the superuser password kept in stateDir; one made by an
// earlier version that trusted local connections is converted first, and
// one whose pg_hba.conf is not pgHBA gets it before it starts.
func pgStartLocal(ctx context.Context, o pgOptions, stateDir string, bins pgServerBinaries) (*pgService, error) {
	runAs, home, err := pgServerUser()
	if err != nil {
		return nil, err
	}
	dataDir, err := pgLocalDataDir(o.ProjectDir, runAs)
	if err != nil {
		return nil, err
	}
	env := childEnv(o.Getenv, []string{"HOME"}) // the server runs as this user
	if runAs != nil {
		env = childEnv(o.Getenv, nil, "HOME="+home)
		pgRemoveOrphanClusters(ctx, o, dataDir, bins, runAs, env, time.Now())
	}
	passwordFile := filepath.Join(stateDir, pgPasswordFile)
	password, err := pgReadOrMint(passwordFile, "the PostgreSQL password")
	if err != nil {
		return nil, err
	}
	appPassword, err := pgReadOrMint(filepath.Join(stateDir, pgAppPasswordFile), "the PostgreSQL password of the project's role")
	if err != nil {
		return nil, err
	}
	l := &pgLocal{
		bins:    pgClusterBinaries(bins, o.BinGlob, dataDir),
		dataDir: dataDir,
		logPath: filepath.Join(stateDir, "postgres.log"),
		runAs:   runAs,
		env:     env,
	}
	if err := l.stopLeftover(ctx); err != nil {
		return nil, err
	}
	if err := pgCheckPort(o.Port); err != nil {
		return nil, err
	}
	fresh := !l.initialized()
	if err := l.initCluster(ctx, o.Log, o.NoSync, password); err != nil {
		return nil, err
	}
	trusts, err := l.trusts()
	if err != nil {
		return nil, err
	}
	if !trusts { // requirePassword rewrites a trusting one once started
		if err := l.updateHBA(); err != nil {
			return nil, err
		}
	}
	if err := l.start(ctx, o.Port); err != nil {
		return nil, err
	}
	if trusts {
		err = l.requirePassword(ctx, o.Port, password)
	}
	var undid []string
	if err == nil {
		undid, err = pgProvisionApp(ctx, password, o.Port, appPassword)
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgInvalidPassword {
		err = fmt.Errorf("the PostgreSQL cluster %s refused the password in %s: the cluster was made with another password, "+
			"and that file was replaced or removed since. To start over with an empty database, run `rm -rf %s` "+
			"(it deletes that cluster and its data) and start svc again (%w)", dataDir, passwordFile, dataDir, err)
	}
	if err != nil {
		return nil, errors.Join(err, l.stop(context.WithoutCancel(ctx)))
	}
	tail := pgStartLogTail(l.logPath, o.Log)
	return &pgService{
		Undid:       undid,
		Initialized: fresh,
		URL:         pgAppURL(appPassword, o.Port),
		Provider:    "local",
		DataDir:     l.dataDir,
		watched:     pgLocalWatch{l: l, port: o.Port},
		stop: func(ctx context.Context) error {
			err := l.stop(ctx)
			tail.close()
			return err
		},
	}, nil
}

// pgClusterBinaries prefers the binaries of the major version that created
// the cluster in dataDir, when glob has them: after an upgrade installs a
// newer version beside it, the old cluster still starts.
func pgClusterBinaries(bins pgServerBinaries, glob, dataDir string) pgServerBinaries {
	version, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return bins
	}
	dir := strings.Replace(glob, "*", strings.TrimSpace(string(version)), 1)
	own := pgServerBinaries{initdb: filepath.Join(dir, "initdb"), pgCtl: filepath.Join(dir, "pg_ctl")}
	if pgIsExecutable(own.initdb) && pgIsExecutable(own.pgCtl) {
		return own
	}
	return bins
}

// command builds a server command run as l.runAs from /, which that user
// can always enter, with l.env. It gets its own process group so that a
// Ctrl-C in the terminal reaches svc, which then stops the server in order.
func (l *pgLocal) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = "/"
	cmd.Env = l.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.runAs, Setpgid: true}
	return cmd
}

// run runs a server command, copying its output to w, and quotes the end of
// that output in the error when it fails.
func (l *pgLocal) run(ctx context.Context, w io.Writer, bin string, args ...string) error {
	var out bytes.Buffer
	cmd := l.command(ctx, bin, args...)
	cmd.Stdout = io.MultiWriter(w, &out)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), args[0], err, pgOutputTail(out.Bytes()))
	}
	return nil
}

// chown gives path to l.runAs, when the server runs as another user, so that
// the server can read it.
func (l *pgLocal) chown(path string) error {
	if l.runAs == nil {
		return nil
	}
	return os.Chown(path, int(l.runAs.Uid), int(l.runAs.Gid))
}

// initialized reports whether the data directory holds a cluster.
func (l *pgLocal) initialized() bool {
	_, err := os.Stat(filepath.Join(l.dataDir, "PG_VERSION"))
	return err == nil
}

// stopLeftover stops a server still running on the cluster. The caller
// holds the project lock, so that server was left by a session that was
// killed; this session starts it again with its own settings.
func (l *pgLocal) stopLeftover(ctx context.Context) error {
	running, err := l.running(ctx)
	if err != nil || !running {
		return err
	}
	return l.stop(ctx)
}

// running reports whether a server runs on the cluster, as pg_ctl status
// tells.
func (l *pgLocal) running(ctx context.Context) (bool, error) {
	if !l.initialized() {
		return false, nil
	}
	err := l.command(ctx, l.bins.pgCtl, "status", "-D", l.dataDir).Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 3: // no server running
		return false, nil
	default:
		return false, fmt.Errorf("pg_ctl status -D %q: %w", l.dataDir, err)
	}
}

// initCluster runs initdb once, with password as the superuser's password
// and pgHBA as pg_hba.conf. It initialises a sibling directory and renames
// it into place, so an initdb that was interrupted never leaves a half-made
// cluster where the next boot would look. The parent directory (.svc, or
// pgFallbackRoot as root) exists and is private.
func (l *pgLocal) initCluster(ctx context.Context, log io.Writer, noSync bool, password string) error {
	if l.initialized() {
		return nil
	}
	tmp := l.dataDir + ".initdb"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, privateDirMode); err != nil {
		return err
	}
	if err := l.chown(tmp); err != nil {
		return err
	}
	pwfile, err := l.writePwfile(filepath.Dir(l.dataDir), password)
	if err != nil {
		return errors.Join(err, os.RemoveAll(tmp))
	}
	defer os.Remove(pwfile)
	args := []string{"-D", tmp, "-U", pgSuperuser, "-A", pgAuthMethod, "--pwfile=" + pwfile, "-E", "UTF8", "--no-locale"}
	if noSync {
		args = append(args, "--no-sync")
	}
	err = l.run(ctx, log, l.bins.initdb, args...)
	if err == nil {
		err = l.writeHBA(tmp)
	}
	if err != nil {
		return errors.Join(err, os.RemoveAll(tmp))
	}
	if err := os.Rename(tmp, l.dataDir); err != nil {
		return fmt.Errorf("%w (if %q is not a PostgreSQL cluster, remove it)", err, l.dataDir)
	}
	return nil
}

// writePwfile writes password to a new temporary file in dir for initdb
// --pwfile, 0600 and owned by the user initdb runs as, and returns its path.
// The caller removes it.
func (l *pgLocal) writePwfile(dir, password string) (string, error) {
	f, err := os.CreateTemp(dir, ".initdb-pwfile-*") // privateFileMode
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(password + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.chown(f.Name())
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("initdb password file: %w", err)
	}
	return f.Name(), nil
}

// writeHBA replaces the pg_hba.conf of the cluster in dataDir with pgHBA.
func (l *pgLocal) writeHBA(dataDir string) error {
	path := filepath.Join(dataDir, "pg_hba.conf")
	if err := writeFileAtomic(path, []byte(pgHBA), privateFileMode); err != nil {
		return err
	}
	return l.chown(path)
}

// updateHBA writes pgHBA over the pg_hba.conf of the stopped cluster when
// it differs, as those of earlier versions, which admitted every role to
// every database, do.
func (l *pgLocal) updateHBA() error {
	b, err := os.ReadFile(filepath.Join(l.dataDir, "pg_hba.conf"))
	if err != nil {
		return fmt.Errorf("read pg_hba.conf: %w", err)
	}
	if string(b) == pgHBA {
		return nil
	}
	return l.writeHBA(l.dataDir)
}

// trusts reports whether the cluster's pg_hba.conf has a line with the trust
// method, as the clusters of earlier versions of svc had.
func (l *pgLocal) trusts() (bool, error) {
	b, err := os.ReadFile(filepath.Join(l.dataDir, "pg_hba.conf"))
	if err != nil {
		return false, fmt.Errorf("read pg_hba.conf: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if slices.Contains(strings.Fields(line), "trust") {
			return true, nil
		}
	}
	return false, nil
}

// requirePassword converts the running cluster from trust to password
// authentication: it sets the superuser's password over a connection the old
// rules still let in, writes pgHBA and restarts the server. A restart rather
// than a reload, because a reload takes effect a moment later and the boot
// must not hand out a cluster that still trusts.
func (l *pgLocal) requirePassword(ctx context.Context, port int, password string) error {
	conn, err := pgx.Connect(ctx, pgURL(pgSuperuser, "", port, "postgres"))
	if err != nil {
		return fmt.Errorf("set the superuser password of a cluster that trusted local connections: %w", err)
	}
	err = pgSetPassword(ctx, conn, pgx.Identifier{pgSuperuser}.Sanitize(), "", password)
	if err = errors.Join(err, conn.Close(ctx)); err != nil {
		return fmt.Errorf("set the superuser password of a cluster that trusted local connections: %w", err)
	}
	if err := l.stop(ctx); err != nil {
		return err
	}
	if err := l.writeHBA(l.dataDir); err != nil {
		return err
	}
	return l.start(ctx, port)
}

// start starts the server on 127.0.0.1:port and waits until it accepts
// connections. The server writes to the log file svc opened, so the log
// works even where the postgres user cannot reach .svc.
func (l *pgLocal) start(ctx context.Context, port int) error {
	logFile, err := os.OpenFile(l.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, privateFileMode)
	if err != nil {
		return err
	}
	defer logFile.Close()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=", port)
	cmd := l.command(ctx, l.bins.pgCtl, "start", "-w", "-t", "60", "-D", l.dataDir, "-o", opts)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(l.logPath)
		return fmt.Errorf("pg_ctl start -D %q: %w\n%s\n(full log: %s)", l.dataDir, err, pgOutputTail(out), l.logPath)
	}
	return nil
}

// stop stops the server with a fast shutdown (sessions are disconnected,
// nothing is lost) and waits for it to exit.
func (l *pgLocal) stop(ctx context.Context) error {
	return l.run(ctx, io.Discard, l.bins.pgCtl, "stop", "-w", "-t", "60", "-m", "fast", "-D", l.dataDir)
}

// pgLogTail mirrors a growing log file to a writer until closed. Its zero
// value (no writer) does nothing.
type pgLogTail struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// pgStartLogTail copies path to w from its start and then as it grows. It
// does nothing when w is io.Discard.
func pgStartLogTail(path string, w io.Writer) *pgLogTail {
	if w == io.Discard {
		return &pgLogTail{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &pgLogTail{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(w, "postgres log: %v\n", err)
			return
		}
		defer f.Close()
		ticker := time.NewTicker(pgLogTailInterval)
		defer ticker.Stop()
		for {
			if pgLogRewritten(f, path) { // a restart rewrote it (postgres_supervise.go)
				f.Seek(0, io.SeekStart)
			}
			io.Copy(w, f) // from where the last copy stopped
			select {
			case <-ctx.Done():
				io.Copy(w, f) // what the server wrote while stopping
				return
			case <-ticker.C:
			}
		}
	}()
	return t
}

// close stops the copying, after a last copy, and waits for it.
func (t *pgLogTail) close() {
	if t.cancel == nil {
		return
	}
	t.cancel()
	<-t.done
}

// pgContainerEnv are the variables of svc's environment that the container
// runtime may need besides childEnvInherited: the user's home and runtime
// directories (its configuration, a rootless runtime's state) and how to
// reach the daemon.
var pgContainerEnv = []string{"HOME", "USER", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "DBUS_SESSION_BUS_ADDRESS",
	"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY",
	"CONTAINER_HOST", "CONTAINER_CONNECTION", "CONTAINERS_CONF", "CONTAINERS_REGISTRIES_CONF", "CONTAINERS_STORAGE_CONF"}

// pgContainer drives one named container through a runtime's CLI.
type pgContainer struct {
	runtime string              // executable path of docker or podman
	name    string              // svc-pg-<project hash>
	log     io.Writer           // verbose output
	getenv  func(string) string // svc's environment, for childEnv
}

// run runs the runtime with args and the extra environment entries env (see
// childEnv), copying the output to the verbose log, and returns the output;
// a failure quotes its end.
func (c *pgContainer) run(ctx context.Context, env []string, args ...string) ([]byte, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.runtime, args...)
	cmd.Env = childEnv(c.getenv, pgContainerEnv, env...)
	cmd.Stdout = io.MultiWriter(c.log, &out)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(c.runtime), args[0], err, pgOutputTail(out.Bytes()))
	}
	return out.Bytes(), nil
}

// pgContainerState is what inspect reports about an existing container.
type pgContainerState struct {
	running  bool
	bindings map[string][]struct{ HostIp, HostPort string }
}

// pgContainerInspectFormat asks for the running flag and the port bindings.
const pgContainerInspectFormat = "{{.State.Running}} {{json .HostConfig.PortBindings}}"

// inspect reports the container's state, or false when it does not exist
// (or cannot be inspected: then the run that follows says why).
func (c *pgContainer) inspect(ctx context.Context) (pgContainerState, bool) {
	out, err := c.run(ctx, nil, "inspect", "--format", pgContainerInspectFormat, c.name)
	if err != nil {
		return pgContainerState{}, false
	}
	running, bindings, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	st := pgContainerState{running: running == "true"}
	json.Unmarshal([]byte(bindings), &st.bindings) // unparsable: no bindings, so it is recreated
	return st, true
}

// publishes reports whether the container publishes PostgreSQL on
// 127.0.0.1:port and nowhere else.
func (st pgContainerState) publishes(port int) bool {
	b := st.bindings["5432/tcp"]
	return len(b) == 1 && b[0].HostIp == "127.0.0.1" && b[0].HostPort == strconv.Itoa(port)
}

// pgStartContainer starts (or restarts) the project's container and waits
// until PostgreSQL accepts connections through the published port.
func pgStartContainer(ctx context.Context, o pgOptions, stateDir, runtime, path string) (*pgService, error) {
	volume := filepath.Join(stateDir, "postgres-container")
	if err := os.MkdirAll(volume, privateDirMode); err != nil { // podman refuses a missing bind source
		return nil, err
	}
	password, err := pgReadOrMint(filepath.Join(stateDir, pgContainerPasswordFile), "the PostgreSQL password")
	if err != nil {
		return nil, err
	}
	appPassword, err := pgReadOrMint(filepath.Join(stateDir, pgContainerAppPasswordFile), "the PostgreSQL password of the project's role")
	if err != nil {
		return nil, err
	}
	c := &pgContainer{runtime: path, name: "svc-pg-" + pgProjectHash(o.ProjectDir), log: o.Log, getenv: o.Getenv}
	if err := c.up(ctx, o.Port, volume, password); err != nil {
		return nil, err
	}
	if err := pgWaitReady(ctx, pgURL(pgSuperuser, password, o.Port, pgDatabase), o.ReadyTimeout); err != nil {
		logs, _ := c.run(ctx, nil, "logs", "--tail", strconv.Itoa(pgOutputTailLines), c.name)
		_, rmErr := c.run(context.WithoutCancel(ctx), nil, "rm", "-f", c.name)
		return nil, errors.Join(fmt.Errorf("container %q is not accepting connections after %s: %w\ncontainer log:\n%s",
			c.name, o.ReadyTimeout, err, pgOutputTail(logs)), rmErr)
	}
	undid, err := pgProvisionApp(ctx, password, o.Port, appPassword)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", c.name, err)
	}
	return &pgService{
		Undid:    undid,
		URL:      pgAppURL(appPassword, o.Port),
		Provider: runtime,
		DataDir:  volume,
		stop: func(ctx context.Context) error {
			_, stopErr := c.run(ctx, nil, "stop", c.name)
			_, rmErr := c.run(ctx, nil, "rm", c.name)
			return errors.Join(stopErr, rmErr)
		},
	}, nil
}

// up brings the container up: a running one left by a killed session is
// kept, a stopped one publishing the same port is started, anything else is
// replaced by a new container.
func (c *pgContainer) up(ctx context.Context, port int, volume, password string) error {
	st, exists := c.inspect(ctx)
	if exists && st.publishes(port) {
		if st.running {
			return nil
		}
		if err := pgCheckPort(port); err != nil {
			return err
		}
		_, err := c.run(ctx, nil, "start", c.name)
		return err
	}
	if exists {
		if _, err := c.run(ctx, nil, "rm", "-f", c.name); err != nil {
			return err
		}
	}
	if err := pgCheckPort(port); err != nil {
		return err
	}
	_, err := c.run(ctx, []string{"POSTGRES_PASSWORD=" + password},
		"run", "-d", "--name", c.name,
		"-p", fmt.Sprintf("127.0.0.1:%d:5432", port),
		"-e", "POSTGRES_PASSWORD", // value from the environment, not the command line
		"-e", "POSTGRES_DB="+pgDatabase,
		"-v", volume+":/var/lib/postgresql/data",
		pgContainerImage)
	return err
}

// pgReadOrMint reads the token (a password, a cluster id) kept in path,
// minting one (crypto/rand) and saving it with privateFileMode on first use,
// or when the file is empty; what names it in errors. A cluster keeps the
// password it was created with (the container image sets it only when it
// initialises the volume), so the file must stay the same across sessions.
func pgReadOrMint(path, what string) (string, error) {
	token, err := pgReadToken(path, what)
	if err != nil || token != "" {
		return token, err
	}
	token = rand.Text()
	if err := writeFileAtomic(path, []byte(token+"\n"), privateFileMode); err != nil {
		return "", fmt.Errorf("save %s: %w", what, err)
	}
	return token, nil
}

// pgReadToken reads the token kept in path, "" when the file (or its
// directory) does not exist or is empty; what names it in errors.
func pgReadToken(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", what, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// pgWaitReady connects to url until it succeeds, for at most timeout.
func pgWaitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := pgPing(ctx, url)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-time.After(pgRetryInterval):
		}
	}
}
