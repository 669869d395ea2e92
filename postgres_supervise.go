package main

// Supervision of the PostgreSQL cluster that svc starts itself (issue 28).
//
// svc owns the local cluster's server (postgres.go): when its postmaster
// dies (killed, crashed, stopped by hand), svc notices within
// pgWatchInterval by reading the cluster's postmaster.pid, says so once in
// the log, and starts it again with `pg_ctl start`, as at boot. A failed
// start is retried after pgRestartFirstDelay, doubling up to
// pgRestartMaxDelay, pgRestartAttempts times in all (about three minutes);
// then svc logs an error saying to restart it, and stops supervising. A
// server missing for less than one interval (an operator's `pg_ctl
// restart`) is not restarted: the new server is noticed instead.
//
// Only the clusters svc starts are supervised: not SVC_DATABASE_URL, a
// box's DATABASE_URL or a container (its runtime owns the process).
//
// Work that waits on the database resumes by itself once it is back: the
// pools reconnect, and sql in user code waits for the database to accept
// connections (sqlHost.acquire) instead of failing, so that an outage costs
// a run at most the attempt of a step whose statement was in flight.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// pgWatchInterval is how often the supervisor checks that the server runs.
	pgWatchInterval = time.Second
	// pgRestartFirstDelay is the wait after the first failed restart; it
	// doubles after each failure up to pgRestartMaxDelay.
	pgRestartFirstDelay = time.Second
	pgRestartMaxDelay   = 30 * time.Second
	// pgRestartAttempts bounds the restarts of one outage.
	pgRestartAttempts = 10
	// pgRestartTimeout bounds one restart (pg_ctl waits up to 60 s).
	pgRestartTimeout = 90 * time.Second
)

// pgWatched is a server the supervisor can check and start again.
type pgWatched interface {
	// alive reports the server's process id and whether it runs.
	alive() (pid int, ok bool)
	// restart starts the server again and waits until it accepts connections.
	restart(ctx context.Context) error
}

// pgLocalWatch watches a local cluster serving on port.
type pgLocalWatch struct {
	l    *pgLocal
	port int
}

// alive reads the postmaster's pid from postmaster.pid and checks that
// the process exists and is not a zombie (a postmaster nobody reaped, as
// under a container's init that does not reap).
func (w pgLocalWatch) alive() (int, bool) {
	b, err := os.ReadFile(filepath.Join(w.l.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false // removed by a clean shutdown
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, pgProcessRuns(pid)
}

// restart starts the cluster as at boot.
func (w pgLocalWatch) restart(ctx context.Context) error { return w.l.start(ctx, w.port) }

// pgProcessRuns reports whether process pid exists and, where /proc tells,
// is not a zombie.
func pgProcessRuns(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || !pgHasProc()
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return true
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

// pgHasProc reports whether this system has a /proc of processes.
func pgHasProc() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// supervise watches the server svc started and restarts it when it dies
// (see the top of this file), logging to log. The returned function stops
// the supervision and waits for it; run it before Stop. For a server svc
// does not own it does nothing.
func (p *pgService) supervise(log *slog.Logger) func(context.Context) error {
	if p.watched == nil {
		return func(context.Context) error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pgSupervise(ctx, p.watched, log)
	}()
	return func(context.Context) error {
		cancel()
		<-done
		return nil
	}
}

// pgSupervise is the supervision loop; it returns when ctx ends or after
// a restart gave up.
func pgSupervise(ctx context.Context, w pgWatched, log *slog.Logger) {
	pid, _ := w.alive()
	for pgSleep(ctx, pgWatchInterval) {
		now, ok := w.alive()
		if ok {
			if now != pid {
				log.Info("PostgreSQL was restarted by something else; svc uses the new server", "pid", now)
				pid = now
			}
			continue
		}
		// A restart by hand passes through a moment without a server.
		if !pgSleep(ctx, pgWatchInterval) {
			return
		}
		if now, ok = w.alive(); ok {
			continue // noticed as a new pid on the next round
		}
		log.Warn("PostgreSQL stopped: its server process is gone; svc restarts it, and work that needs it waits", "pid", pid)
		if pid, ok = pgRestart(ctx, w, log); !ok {
			return
		}
	}
}

// pgRestart starts the server again with backoff, bounded by
// pgRestartAttempts, and returns its new pid; false when it gave up or ctx
// ended.
func pgRestart(ctx context.Context, w pgWatched, log *slog.Logger) (int, bool) {
	down := time.Now()
	delay := pgRestartFirstDelay
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, pgRestartTimeout)
		err := w.restart(rctx)
		cancel()
		if ctx.Err() != nil {
			return 0, false
		}
		if pid, ok := w.alive(); ok {
			log.Info("PostgreSQL restarted", "pid", pid, "attempt", attempt, "down", time.Since(down).Round(time.Millisecond))
			return pid, true
		}
		if attempt == pgRestartAttempts {
			log.Error("PostgreSQL could not be restarted: stop svc and start it again (the server's log, postgres.log, says why)",
				"attempts", attempt, "err", err)
			return 0, false
		}
		level := slog.LevelDebug
		if attempt == 1 {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "restart PostgreSQL failed; retrying with backoff", "attempt", attempt, "next_in", delay, "err", err)
		if !pgSleep(ctx, delay) {
			return 0, false
		}
		delay = min(2*delay, pgRestartMaxDelay)
	}
}

// pgSleep waits d and reports false when ctx ended first.
func pgSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pgUnreachable reports whether err is a failure to reach PostgreSQL
// (refused or reset connection, a timeout, a connection lost mid-query,
// a server starting up or shutting down) rather than an answer of it.
func pgUnreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		// The database answered, even if with an error. Its
		// admin_shutdown and cannot_connect_now are it going away.
		return pe.Code == "57P01" || pe.Code == "57P03"
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.Timeout(err):
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// pgLogRewritten reports whether the server log at path, read through f,
// was truncated since (each start rewrites it), so that the mirror starts
// over.
func pgLogRewritten(f *os.File, path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	off, err := f.Seek(0, io.SeekCurrent)
	return err == nil && fi.Size() < off
}
