package main

// The relay (DESIGN §7 tunnel): the public end of `svc dev`'s tunnel. One
// TLS port serves both sides, told apart by ALPN: a tunnel client asks for
// relayTunnelALPN, browsers and HTTP clients for h2 or http/1.1.
//
// A tunnel is one TLS connection from svc dev. Its first exchange is a
// length-prefixed JSON hello (installation, registration token) and the
// relay's welcome; then the roles reverse: over the same connection the
// relay is the HTTP/2 client and svc dev the HTTP/2 server, so concurrent
// requests are HTTP/2 streams with HTTP/2's flow control, and SSE and long
// polls stream frame by frame.
//
// Registration: the relay admits a tunnel only with a registration token
// of the control plane it trusts (identKindTunnel: minted by
// POST /api/installations/{id}/tunnel for the caller's own local-dev
// installation, a minute long), verified with the control plane's JWKS
// like identity tokens, for the installation the hello names; the
// organization is the token's. A token registers once: its jti is
// remembered until it expires, in memory and in a file of the relay's
// state directory (relaySpentFile), fsynced before the registration is
// accepted, so a restarted relay still refuses a replay. The subdomain is
// derived from the installation id by the relay (a tunnel cannot pick
// another's). Relayed
// requests must carry an identity token of that control plane, for the
// tunnel's organization and installation; anything else (a registration
// token included) is 401 at the relay.
//
// CORS: the console (a page at the origin of the control plane URL the
// relay trusts) calls tunnels from the browser. Its preflights are
// answered 204 by the relay, Authorization allowed, before any token is
// asked for, and every answer to it carries Access-Control-Allow-Origin;
// other origins get no CORS header (their preflights are 401: no token).
// svc dev sees no Origin on tunnel traffic (tunnelHandler).

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Names and limits of the tunnel protocol.
const (
	// relayTunnelALPN is the TLS protocol a tunnel client asks for.
	relayTunnelALPN = "svc-tunnel/1"
	// relayHelloMaxBytes bounds the hello and the welcome.
	relayHelloMaxBytes = 8 << 10
	// relayHelloTimeout bounds the registration exchange.
	relayHelloTimeout = 10 * time.Second
	// relayPingEvery is how often the relay pings an idle tunnel, so a
	// dead one (a laptop gone to sleep) is dropped and its slot freed.
	relayPingEvery = 30 * time.Second
	// relaySpentFile, in the relay's state directory, holds the jti of the
	// registration tokens used and not yet expired, with their expiry.
	relaySpentFile = "spent-registrations.json"
	// relayLockFile, in the relay's state directory, is locked while a
	// relay uses the directory: two relays on one file would each forget
	// the other's tokens.
	relayLockFile = "relay.lock"
)

// relayHello is the tunnel client's first message.
type relayHello struct {
	Installation string `json:"installation"`
	Token        string `json:"token"`
}

// relayWelcome is the relay's answer to a hello: Error set means refused
// (and the connection is closed); Retry then says the fault was the
// relay's (it could not reach the control plane's keys), not the token's.
type relayWelcome struct {
	Subdomain string `json:"subdomain,omitempty"`
	PublicURL string `json:"public_url,omitempty"`
	Error     string `json:"error,omitempty"`
	Retry     bool   `json:"retry,omitempty"`
}

// relayWriteFrame writes v as one length-prefixed JSON message (4 bytes
// big-endian length, then the JSON). A prefix, not a line, so the reader
// never buffers past the message into the HTTP/2 bytes that follow it.
func relayWriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	_, err = w.Write(append(frame, b...))
	return err
}

// relayReadFrame reads one message of relayWriteFrame into v.
func relayReadFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > relayHelloMaxBytes {
		return fmt.Errorf("message of %d bytes exceeds %d", size, relayHelloMaxBytes)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// relaySubdomain is the stable subdomain of an installation: 16 hex digits
// of its SHA-256, a valid DNS label whatever the id's alphabet, the same
// after every reconnect and relay restart.
func relaySubdomain(installation string) string {
	sum := sha256.Sum256([]byte(installation))
	return hex.EncodeToString(sum[:8])
}

// relayTunnel is one registered, connected tunnel.
type relayTunnel struct {
	conn     net.Conn
	proxy    *httputil.ReverseProxy
	verifier *identVerifier // identity tokens for the tunnel's organization and installation
}

// relayConfig is what a relay serves and trusts; all but Port are
// required.
type relayConfig struct {
	Domain       string // the tunnel domain D: hosts are <sub>.tun.D
	ControlPlane string // issuer of the registration and identity tokens
	State        string // directory of relaySpentFile, created 0700 if missing
	Port         string // the port the relay listens on, in its public URLs unless 443
}

// relayServer routes https://<sub>.tun.<domain> to the tunnel registered
// under <sub>. Built by newRelayServer; tunnels is guarded by mu, spent
// by spentMu (held while the file is written, which public requests do
// not wait for).
type relayServer struct {
	domain       string          // the tunnel domain D: hosts are <sub>.tun.D
	port         string          // the listening port, in public URLs unless 443
	controlPlane string          // issuer of the registration and identity tokens
	keys         *identKeySource // controlPlane's JWKS, shared by every check
	console      string          // origin of controlPlane: the browser origin answered CORS
	log          *slog.Logger
	guard        *httpGuard // paces public request bodies, then route
	spentPath    string     // relaySpentFile in the state directory
	lock         *os.File   // relayLockFile, locked until close

	mu      sync.Mutex
	tunnels map[string]*relayTunnel // by subdomain
	closing bool                    // close was called: no more tunnels
	wg      sync.WaitGroup          // tunnel goroutines, counted under mu

	spentMu sync.Mutex
	spent   map[string]time.Time // jti of the registration tokens used, until their expiry
}

// newRelayServer returns the relay of cfg: it locks cfg.State and reads
// the registration tokens used before a restart from it.
func newRelayServer(cfg relayConfig, log *slog.Logger) (*relayServer, error) {
	if cfg.Domain == "" || cfg.ControlPlane == "" || cfg.State == "" || log == nil {
		return nil, errors.New("new relay: want a domain, a control plane URL, a state directory and a logger")
	}
	s := &relayServer{domain: strings.ToLower(cfg.Domain), port: cfg.Port, controlPlane: strings.TrimSuffix(cfg.ControlPlane, "/"), log: log,
		tunnels: map[string]*relayTunnel{}, spentPath: filepath.Join(cfg.State, relaySpentFile)}
	var err error
	if s.console, err = corsConsoleOrigin(s.controlPlane); err != nil {
		return nil, fmt.Errorf("new relay: %w", err)
	}
	if s.keys, err = newIdentKeySource(s.controlPlane, nil, nil); err != nil {
		return nil, err
	}
	if s.guard, err = newHTTPGuard(http.HandlerFunc(s.route), httpGuardConfig{}); err != nil {
		return nil, err
	}
	if err := mkdirPrivate(cfg.State); err != nil {
		return nil, fmt.Errorf("new relay: %w", err)
	}
	if s.lock, err = lockFile(filepath.Join(cfg.State, relayLockFile)); err != nil {
		if errors.Is(err, errLocked) {
			err = fmt.Errorf("another svc relay uses the state directory %s: give each relay its own --state", cfg.State)
		}
		return nil, fmt.Errorf("new relay: %w", err)
	}
	if s.spent, err = relayLoadSpent(s.spentPath, time.Now()); err != nil {
		s.lock.Close()
		return nil, fmt.Errorf("new relay: %w", err)
	}
	return s, nil
}

// relaySpentState is the content of relaySpentFile.
type relaySpentState struct {
	Spent map[string]time.Time `json:"spent"` // jti: expiry (identLeeway added)
}

// relayLoadSpent reads the registration tokens used from relaySpentFile
// at path, those expired at now left out; no file is none used.
func relayLoadSpent(path string, now time.Time) (map[string]time.Time, error) {
	var state relaySpentState
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]time.Time{}, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &state)
	}
	if err != nil {
		return nil, fmt.Errorf("read the registration tokens used from %s: %w (it lists the last minute's only: stop the relay, wait a minute and remove it)", path, err)
	}
	if state.Spent == nil {
		state.Spent = map[string]time.Time{}
	}
	relayForgetExpired(state.Spent, now)
	return state.Spent, nil
}

// relayForgetExpired drops from spent the tokens expired at now: they
// verify no more, so cannot be replayed.
func relayForgetExpired(spent map[string]time.Time, now time.Time) {
	maps.DeleteFunc(spent, func(_ string, exp time.Time) bool { return now.After(exp) })
}

// publicURL is the public URL of subdomain sub.
func (s *relayServer) publicURL(sub string) string {
	return relayURLWithPort("https://"+sub+".tun."+s.domain, s.port)
}

// relayURLWithPort is the URL raw with port in its host, or none when
// port is "" or 443 (https's own): a relay serves tunnels and public
// requests on one port, so a public URL without it would reach another.
func relayURLWithPort(raw, port string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = u.Hostname()
	if port != "" && port != "443" {
		u.Host = net.JoinHostPort(u.Host, port)
	}
	return u.String()
}

// httpServer returns the relay's HTTP server: public requests over h2 or
// http/1.1, tunnels over relayTunnelALPN, on one TLS listener.
func (s *relayServer) httpServer(cert tls.Certificate) *http.Server {
	srv := newHTTPServer(s)
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		relayTunnelALPN: func(_ *http.Server, c *tls.Conn, _ http.Handler) { s.serveTunnel(c) },
	}
	// Explicit protocols: a non-nil TLSNextProto alone turns HTTP/2 off.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1", relayTunnelALPN}}
	return srv
}

// register verifies a hello: a registration token of the trusted control
// plane for the installation it names. It returns the verifier of the
// identity tokens relayed to that tunnel (the token's organization and
// installation).
func (s *relayServer) register(ctx context.Context, hello relayHello) (*identVerifier, error) {
	c, err := s.keys.check(ctx, hello.Token, identKindTunnel)
	if err != nil {
		return nil, err
	}
	if c.Aud != hello.Installation {
		return nil, identKindTunnel.refuse(errIdentAudience, "aud %q; the hello names %q", c.Aud, hello.Installation)
	}
	if c.Org == "" || c.Jti == "" {
		return nil, identKindTunnel.refuse(errIdentMalformed, "want org and jti claims")
	}
	if fresh, err := s.spend(c); err != nil {
		return nil, err
	} else if !fresh {
		return nil, identKindTunnel.refuse(errRelayTokenSpent, "jti %q", c.Jti)
	}
	return newIdentVerifierOn(s.keys, c.Org, c.Aud)
}

// errRelayTokenSpent is a registration token shown twice: svc dev fetches
// a fresh one for each dial, so a second use is a replay.
var errRelayTokenSpent = errors.New("token already used")

// spend records the registration token of c as used and reports whether
// it was unused. The record is on disk (relaySpentFile, written
// atomically and fsynced) before it returns true; an error writing it
// leaves the token unused. Tokens past their expiry (when they verify no
// more) are forgotten, so the file holds a minute of registrations.
func (s *relayServer) spend(c *identClaims) (bool, error) {
	s.spentMu.Lock()
	defer s.spentMu.Unlock()
	relayForgetExpired(s.spent, time.Now())
	if _, ok := s.spent[c.Jti]; ok {
		return false, nil
	}
	next := maps.Clone(s.spent)
	next[c.Jti] = time.Unix(c.Exp, 0).Add(identLeeway)
	b, err := json.Marshal(relaySpentState{Spent: next})
	if err == nil {
		err = writeFileAtomic(s.spentPath, b, privateFileMode)
	}
	if err != nil {
		return false, fmt.Errorf("record the registration token used: %w", err)
	}
	s.spent = next
	return true, nil
}

// serveTunnel runs one tunnel connection: registration, then the HTTP/2
// client over it until it breaks. A newer tunnel of the same installation
// replaces an older one (a laptop that reconnected before the relay saw
// the old connection die).
func (s *relayServer) serveTunnel(c *tls.Conn) {
	defer c.Close()
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	c.SetDeadline(time.Now().Add(relayHelloTimeout))
	var hello relayHello
	if err := relayReadFrame(c, &hello); err != nil {
		s.log.Info("tunnel hello", "remote", c.RemoteAddr(), "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayHelloTimeout)
	v, err := s.register(ctx, hello)
	cancel()
	if err == nil {
		err = s.attach(c, hello.Installation, v)
	}
	if err != nil {
		s.log.Warn("tunnel refused", "remote", c.RemoteAddr(), "installation", hello.Installation, "err", err)
		w := relayWelcome{Error: err.Error()}
		if errors.Is(err, errIdentNoKeys) || !errors.As(err, new(*identError)) {
			w = relayWelcome{Error: "the relay could not register the tunnel now (it cannot reach its control plane's keys, or record the token used); see its log", Retry: true}
		}
		relayWriteFrame(c, w)
	}
}

// attach welcomes the registered tunnel of installation, opens the HTTP/2
// client over it and routes its subdomain to it until the connection
// closes. An error is one before the welcome, which the caller reports to
// the client.
func (s *relayServer) attach(c *tls.Conn, installation string, v *identVerifier) error {
	sub := relaySubdomain(installation)
	if err := relayWriteFrame(c, relayWelcome{Subdomain: sub, PublicURL: s.publicURL(sub)}); err != nil {
		return fmt.Errorf("write welcome: %w", err)
	}
	c.SetDeadline(time.Time{})
	wc := &relayWatchedConn{Conn: c, done: make(chan struct{})}
	cc, err := newRelayTunnelTransport(wc).NewClientConn(context.Background(), "http", sub+":80")
	if err != nil { // after the welcome: the client sees the connection close
		s.log.Warn("tunnel: open HTTP/2", "installation", installation, "err", err)
		return nil
	}
	defer cc.Close()
	t := &relayTunnel{conn: c, verifier: v}
	t.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", pr.In.Host
			pr.SetXForwarded()
		},
		Transport: cc,
		// Stream every byte as it comes: SSE and long polls.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Info("relayed request failed", "sub", sub, "path", r.URL.Path, "err", err)
			writeAPIError(w, http.StatusBadGateway, apiError{Code: "tunnel_down", Message: "the svc dev session behind this URL did not answer; it reconnects on its own"})
		},
	}
	s.mu.Lock()
	if s.closing { // close has dropped the tunnels it saw: drop this one too
		s.mu.Unlock()
		return nil
	}
	old := s.tunnels[sub]
	s.tunnels[sub] = t
	s.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	s.log.Info("tunnel up", "installation", installation, "url", s.publicURL(sub), "remote", c.RemoteAddr())
	// The client conn reads the connection until it breaks (closed by
	// either side, or pings unanswered for relayPingEvery/2): wait for that.
	<-wc.done
	s.mu.Lock()
	if s.tunnels[sub] == t {
		delete(s.tunnels, sub)
	}
	s.mu.Unlock()
	s.log.Info("tunnel down", "installation", installation)
	return nil
}

// relayH2C is HTTP/2 with prior knowledge only: what both ends of a tunnel
// speak over its TLS connection once registered.
func relayH2C() *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return p
}

// relayWatchedConn is a tunnel connection that closes done once a read
// fails: the HTTP/2 client conn reads until the connection breaks. It also
// hides the *tls.Conn from net/http, which would otherwise treat the
// tunnel as a TLS connection of its own.
type relayWatchedConn struct {
	net.Conn
	done chan struct{}
	once sync.Once
}

// Read reads from the connection and reports a failed read on done.
func (c *relayWatchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(func() { close(c.done) })
	}
	return n, err
}

// ServeHTTP serves a public request: body pacing (the guard), then route.
func (s *relayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.guard.ServeHTTP(w, r) }

// route sends a public request by its Host to the tunnel of that
// subdomain, once its identity token is verified for the tunnel's
// installation; the console's preflights are answered here (CORS above).
func (s *relayServer) route(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	sub, ok := strings.CutSuffix(host, ".tun."+s.domain)
	if !ok || sub == "" || strings.Contains(sub, ".") {
		writeAPIError(w, http.StatusNotFound, apiError{Code: "not_found", Message: "no tunnel at " + host + ": tunnels are at <subdomain>.tun." + s.domain})
		return
	}
	if corsConsole(w, r, s.console) {
		return // the console's preflight, answered
	}
	s.mu.Lock()
	t := s.tunnels[sub]
	s.mu.Unlock()
	if t == nil {
		writeAPIError(w, http.StatusBadGateway, apiError{Code: "tunnel_down", Message: "no svc dev session is connected at " + host + " now; it reconnects on its own"})
		return
	}
	claims, err := t.verifier.verify(r.Context(), identBearer(r))
	if err != nil {
		s.log.Debug("relayed request refused", "sub", sub, "path", r.URL.Path, "err", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="svc relay"`)
		writeAPIError(w, http.StatusUnauthorized, apiError{Code: "unauthorized", Message: err.Error() + ": send an identity token for this installation in Authorization: Bearer"})
		return
	}
	// svc dev scopes durable sessions to the user (tunnelHandler); a
	// principal header from the caller is overwritten.
	r.Header.Set(signPrincipalHeader, claims.principal())
	t.proxy.ServeHTTP(w, r)
}

// close drops every tunnel, refuses new ones, waits for their goroutines
// (a hello in progress ends within relayHelloTimeout) and unlocks the
// state directory.
func (s *relayServer) close() {
	s.mu.Lock()
	s.closing = true
	for _, t := range s.tunnels {
		t.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.lock.Close()
}
