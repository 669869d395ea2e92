package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Modes of pgCutProxy.
const (
	pgCutNone   = iota
	pgCutAfter  // forward the append's batch, then cut: it commits, the client never hears
	pgCutBefore // cut instead of forwarding it: nothing commits
	pgCutDown   // refuse every connection: the database is away
	// pgCutAfterDown is pgCutAfter, and then down: the database went away
	// with the answer.
	pgCutAfterDown
)

// pgCutProxy stands between an engine and PostgreSQL on loopback, as a
// failover looks to a client: armed, it cuts the connection that carries
// an append (its record's bytes are in the batch's parameters), after or
// before forwarding it; down, it ends every connection and refuses new
// ones.
type pgCutProxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	marker atomic.Pointer[[]byte] // the bytes that mark the append to cut (its record's)
	cut    chan struct{}          // a cut happened
	live   sync.Map               // the client connections open: a server going down ends them all
}

// arm cuts, in mode, the connection that next sends marker (an append's
// record, in its batch's parameters).
func (p *pgCutProxy) arm(mode int32, marker string) {
	b := []byte(marker)
	p.marker.Store(&b)
	p.mode.Store(mode)
}

// newPGCutProxy forwards a loopback port to target until the test ends.
func newPGCutProxy(t *testing.T, target string) *pgCutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgCutProxy{ln: ln, target: target, cut: make(chan struct{}, 8)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.mode.Load() == pgCutDown {
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			var mute atomic.Bool // the server's answers stop reaching the client
			p.live.Store(c, true)
			wg.Add(2)
			go func() { defer wg.Done(); p.back(c, s, &mute) }()
			go func() { defer wg.Done(); p.forward(c, s, &mute) }()
		}
	}()
	return p
}

// back copies the server's answers to the client until muted.
func (p *pgCutProxy) back(c, s net.Conn, mute *atomic.Bool) {
	defer p.live.Delete(c)
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && !mute.Load() {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forward copies the client's bytes to the server, cutting both at the
// armed append: after, the whole batch reaches the server (what follows
// within 300 ms too) while none of its answers reach the client.
func (p *pgCutProxy) forward(c, s net.Conn, mute *atomic.Bool) {
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			mode := p.mode.Load()
			armed := mode == pgCutAfter || mode == pgCutBefore || mode == pgCutAfterDown
			if armed && bytes.Contains(chunk, *p.marker.Load()) && p.mode.CompareAndSwap(mode, pgCutNone) {
				mute.Store(true)
				if mode == pgCutAfterDown {
					p.mode.Store(pgCutDown)            // before anyone reconnects
					p.live.Range(func(k, _ any) bool { // and every other session dies with the server
						if k != c {
							k.(net.Conn).Close()
						}
						return true
					})
				}
				if mode != pgCutBefore {
					s.Write(chunk)
					c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
					for {
						n, err := c.Read(buf)
						s.Write(buf[:n])
						if err != nil {
							break
						}
					}
					time.Sleep(200 * time.Millisecond) // the server runs the batch to its COMMIT
				}
				c.Close()
				p.cut <- struct{}{}
				return
			}
			if _, werr := s.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestEnginePGCommitOutcomeUnknown: when the database's answer to an
// append's commit is lost (issue 39, item 5), the engine reads the log
// back before it answers: a start whose append committed stands (its
// receipt, not a 503 saying nothing was recorded, and one run), one whose
// append never reached the server is refused as not recorded, and one
// whose log cannot be read back in time is answered "outcome unknown",
// never "nothing was recorded"; its run is there once the database is.
func TestEnginePGCommitOutcomeUnknown(t *testing.T) {
	direct := historyTestDB(t)
	cfg := direct.Config().ConnConfig
	proxy := newPGCutProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	pcfg := direct.Config().Copy()
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.ln.Addr().(*net.TCPAddr).Port)
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	te := newTestEngineOn(t, engineKindPostgres, func(te *testEngine) { te.pool = pool })
	start := func(id string) (startReceipt, error) {
		return te.start(startRequest{Workflow: "three", Input: json.RawMessage(`{"id":"` + id + `"}`), Trigger: triggerHTTP})
	}
	runsOf := func(id string) int {
		n := 0
		runs, _ := te.list()
		for _, r := range runs {
			if string(r.Input) == `{"id":"`+id+`"}` {
				n++
			}
		}
		return n
	}

	// Committed, then the answer lost: the start stands.
	proxy.arm(pgCutAfter, `"id":"after"`)
	rc, err := start("after")
	<-proxy.cut
	if err != nil || rc.RunID == "" {
		t.Fatalf("a start whose commit's answer was lost = %+v %v; want its receipt (it committed)", rc, err)
	}
	if r := te.await(t, rc.RunID); r.Status != runCompleted || runsOf("after") != 1 {
		t.Fatalf("the run = %s, %d runs; want completed, one", r.Status, runsOf("after"))
	}

	// Never reached the server: refused, truthfully, as not recorded.
	proxy.arm(pgCutBefore, `"id":"before"`)
	_, err = start("before")
	<-proxy.cut
	if !errors.Is(err, errJournalUnavailable) || errors.Is(err, errJournalOutcomeUnknown) {
		t.Fatalf("a start cut before it reached the server = %v; want journal unavailable (nothing recorded)", err)
	}
	eventually(t, 20*time.Second, "the engine to write again", func() bool { _, err := start("again"); return err == nil })
	if n := runsOf("before"); n != 0 {
		t.Errorf("the start cut before the server has %d runs; want none", n)
	}

	// The log cannot be read back in time: outcome unknown; the run is
	// there once the database is back.
	defer func(d time.Duration) { engineStorePGResolveTimeout = d }(engineStorePGResolveTimeout)
	engineStorePGResolveTimeout = time.Second
	proxy.arm(pgCutAfterDown, `"id":"unknown"`)
	go func() {
		<-proxy.cut
		time.Sleep(3 * time.Second)
		proxy.mode.Store(pgCutNone)
	}()
	_, err = start("unknown")
	if !errors.Is(err, errJournalOutcomeUnknown) || errors.Is(err, errJournalUnavailable) {
		t.Fatalf("a start whose outcome could not be read back = %v; want outcome unknown", err)
	}
	eventually(t, 30*time.Second, "the run of the unknown start, once the database is back", func() bool { return runsOf("unknown") == 1 })
}

// TestEnginePGRefusesTransactionPooling puts PgBouncer in transaction mode
// (Debian's pgbouncer) in front of a database: the session check that svc
// dev's and svc serve's boot makes refuses it, saying why (a notification
// never comes back: LISTEN and session advisory locks need a session),
// where the engine used to run with its wake-ups and chat session locks
// silently broken.
func TestEnginePGRefusesTransactionPooling(t *testing.T) {
	bouncer, err := exec.LookPath("pgbouncer")
	if err != nil {
		t.Fatalf("this test needs Debian's pgbouncer (apt-get install pgbouncer; .ci/run installs it): %v", err)
	}
	u, err := url.Parse(testPostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	port := freePortBase(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755) // pgbouncer drops root for nobody, who reads its files
	conf := filepath.Join(dir, "pgbouncer.ini")
	writeFile(t, dir, "pgbouncer.ini", fmt.Sprintf(`[databases]
svc = host=%s port=%s dbname=%s user=%s password=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
ignore_startup_parameters = extra_float_digits,application_name,search_path
`, u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/"), u.User.Username(), pw, port))
	os.Chmod(conf, 0o644)
	cmd := exec.Command(bouncer, "-u", "nobody", conf)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pooled := fmt.Sprintf("postgres://%s@127.0.0.1:%d/svc", u.User.Username(), port)
	var pool *pgxpool.Pool
	eventually(t, 10*time.Second, "pgbouncer to serve", func() bool {
		pool, err = pgxpool.New(context.Background(), pooled)
		if err == nil && pool.Ping(context.Background()) != nil {
			pool.Close()
			err = errors.New("not yet")
		}
		return err == nil
	})
	defer pool.Close()
	if err := pgCheckSession(context.Background(), pool); !errors.Is(err, errEngineNoSession) {
		t.Fatalf("the session check through pgbouncer in transaction mode = %v; want errEngineNoSession\npgbouncer:\n%s", err, out.String())
	}
	if err := pgCheckSession(context.Background(), historyTestDB(t)); err != nil {
		t.Fatalf("the session check on PostgreSQL itself = %v", err)
	}
}
