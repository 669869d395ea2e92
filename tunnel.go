package main

// The tunnel client of `svc dev` (DESIGN §7): one outbound TLS connection
// to `svc relay` (relay.go), registered with the installation and a
// registration token fetched from the control plane before each dial,
// then served as an HTTP/2 server (prior knowledge) whose requests the
// relay sends. It reconnects with backoff, and keeps its subdomain: the
// relay derives it from the installation. A refusal (by the relay, or by
// the control plane asked for a token) is logged at WARN with what to do
// and retried with the same backoff: each attempt reads the credentials
// afresh, so `svc login` brings the tunnel up without a restart. Only a
// refusal no retry can fix (tunnelFinal: the installation gone upstream,
// SVC_RELAY_URL not a relay) ends the retries. The runtime goes on
// locally meanwhile.
//
// Relayed requests reach dev's API through tunnelHandler: the relay has
// verified their identity token, and the connection they come over is the
// authenticated tunnel, so dev admits them as it admits its own loopback
// clients (Host rewritten to the API's, Origin dropped); the dev-only
// routes stay loopback-only.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Timing of the tunnel client.
const (
	// tunnelDialTimeout bounds the dial, TLS handshake and registration.
	tunnelDialTimeout = 10 * time.Second
	// tunnelBootWait is how long boot waits for the first handshake before
	// printing the payload without a public URL.
	tunnelBootWait = 5 * time.Second
	// tunnelBackoffMin and tunnelBackoffMax bound the wait between two
	// attempts; it doubles after each failure (with jitter) and starts
	// over after a connection that lasted tunnelBackoffReset.
	tunnelBackoffMin   = 200 * time.Millisecond
	tunnelBackoffMax   = 15 * time.Second
	tunnelBackoffReset = 30 * time.Second
	// tunnelPingEvery is how often dev pings a silent relay, so a relay
	// gone without a FIN is noticed and redialled.
	tunnelPingEvery = 30 * time.Second
)

// tunnelConfig is where and as whom svc dev registers its tunnel.
type tunnelConfig struct {
	Addr         string // host:port of the relay
	ServerName   string // TLS name of the relay
	Installation string // the local-dev installation
	// Token returns a fresh registration token for Installation; an error
	// wrapping tunnelFinal ends the retries.
	Token   func(context.Context) (string, error)
	Console string // console base URL of the deeplink
}

// parseTunnelRelay validates SVC_RELAY_URL: https://host[:port], no path.
func parseTunnelRelay(s string) (addr, serverName string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", "", fmt.Errorf("want https://host[:port], got %q", redactURL(s))
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), u.Hostname(), nil
}

// errTunnelRefused is a refusal by the relay or by the control plane:
// retrying helps once the sign-in (or the relay's configuration) changes.
var errTunnelRefused = errors.New("tunnel refused")

// tunnelFinal is a refusal no retry can fix until svc dev restarts: the
// control plane knows no such installation of the user's (the agent was
// deleted upstream), or SVC_RELAY_URL is not an svc relay.
type tunnelFinal struct{ error }

// Unwrap returns the refusal.
func (e tunnelFinal) Unwrap() error { return e.error }

// tunnelIsFinal reports whether err ends the retries.
func tunnelIsFinal(err error) bool { return errors.As(err, new(tunnelFinal)) }

// tunnelClient holds svc dev's tunnel. Start it with start; close stops
// it and waits.
type tunnelClient struct {
	cfg     tunnelConfig
	handler http.Handler
	log     *slog.Logger
	// onUp is called when the public URL becomes known after the boot
	// wait gave up on it (the payload is printed again).
	onUp func()
	// port is the relay's port as dialled (cfg.Addr's): the public URL
	// carries it unless it is 443, since the relay serves tunnels and
	// public requests on one port.
	port string

	publicURL atomic.Pointer[string]
	booted    atomic.Bool // the boot wait is over
	first     chan error  // the first attempt's outcome, buffered
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// newTunnelClient returns a client serving handler to the relay of cfg.
func newTunnelClient(cfg tunnelConfig, handler http.Handler, log *slog.Logger, onUp func()) *tunnelClient {
	_, port, _ := net.SplitHostPort(cfg.Addr)
	return &tunnelClient{cfg: cfg, handler: handler, log: log, onUp: onUp, port: port, first: make(chan error, 1)}
}

// start runs the tunnel in the background and waits up to tunnelBootWait
// for its first handshake. A failure is logged at WARN with its reason;
// the runtime goes on without a public URL while the client retries
// (unless the refusal is final).
func (t *tunnelClient) start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.run(ctx)
	}()
	var err error
	select {
	case err = <-t.first:
	case <-time.After(tunnelBootWait):
		err = fmt.Errorf("no answer from the relay within %v", tunnelBootWait)
	}
	t.booted.Store(true)
	if err != nil {
		t.log.Warn("tunnel: no public URL, public_url and deeplink are null", "relay", t.cfg.Addr, "err", err, "hint", tunnelHint(err)+"; the runtime works locally meanwhile")
	}
}

// tunnelHint says what svc dev does after the failed attempt err, and
// what the user can do.
func tunnelHint(err error) string {
	switch {
	case tunnelIsFinal(err):
		return "svc dev does not retry this: fix it (the project's link, SVC_RELAY_URL) and restart svc dev"
	case errors.Is(err, errTunnelRefused):
		return fmt.Sprintf("svc dev retries every %v at most and reads your credentials afresh each time: run `svc login` (or fix the relay's --control-plane) and the tunnel comes up without a restart", tunnelBackoffMax)
	}
	return "svc dev keeps retrying"
}

// close stops the tunnel and waits for it.
func (t *tunnelClient) close(context.Context) error {
	if t.cancel != nil {
		t.cancel()
	}
	t.wg.Wait()
	return nil
}

// urls returns the public URL and the deeplink, or nils before the first
// handshake.
func (t *tunnelClient) urls() (public, deeplink *string) {
	if t == nil {
		return nil, nil
	}
	p := t.publicURL.Load()
	if p == nil {
		return nil, nil
	}
	d := strings.TrimSuffix(t.cfg.Console, "/") + "/dev/" + url.PathEscape(t.cfg.Installation) + "?url=" + url.QueryEscape(*p)
	return p, &d
}

// run connects, serves until the connection breaks and reconnects with
// backoff until ctx ends or a refusal is final. A refusal after the
// first attempt is logged at WARN when it is new (the first, or another
// than the last attempt's).
func (t *tunnelClient) run(ctx context.Context) {
	backoff := tunnelBackoffMin
	var last error
	for attempt := 0; ctx.Err() == nil; attempt++ {
		began := time.Now()
		err := t.session(ctx)
		if attempt == 0 && err != nil {
			t.first <- err
		}
		if ctx.Err() != nil {
			return
		}
		if attempt > 0 && errors.Is(err, errTunnelRefused) && (last == nil || last.Error() != err.Error()) {
			msg := "tunnel: refused; retrying"
			if tunnelIsFinal(err) {
				msg = "tunnel: refused; not retrying until svc dev restarts"
			}
			t.log.Warn(msg, "err", err, "hint", tunnelHint(err))
		}
		last = err
		if tunnelIsFinal(err) {
			return
		}
		if time.Since(began) > tunnelBackoffReset {
			backoff = tunnelBackoffMin
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		t.log.Info("tunnel: reconnecting", "in", wait.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, tunnelBackoffMax)
	}
}

// session fetches a registration token, dials and registers one tunnel
// and serves it until it breaks.
func (t *tunnelClient) session(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, tunnelDialTimeout)
	defer cancel()
	token, err := t.cfg.Token(dctx)
	if err != nil {
		return err
	}
	// The system roots verify the relay (they honour SSL_CERT_FILE).
	conf := &tls.Config{ServerName: t.cfg.ServerName, NextProtos: []string{relayTunnelALPN}, MinVersion: tls.VersionTLS12}
	raw, err := (&tls.Dialer{Config: conf}).DialContext(dctx, "tcp", t.cfg.Addr)
	if err != nil {
		return fmt.Errorf("dial relay %s: %w", t.cfg.Addr, err)
	}
	c := raw.(*tls.Conn)
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != relayTunnelALPN {
		return tunnelFinal{fmt.Errorf("%w: %s is not an svc relay (TLS protocol %q): fix SVC_RELAY_URL", errTunnelRefused, t.cfg.Addr, p)}
	}
	deadline, _ := dctx.Deadline()
	c.SetDeadline(deadline)
	if err := relayWriteFrame(c, relayHello{Installation: t.cfg.Installation, Token: token}); err != nil {
		return fmt.Errorf("register with relay: %w", err)
	}
	var welcome relayWelcome
	if err := relayReadFrame(c, &welcome); err != nil {
		return fmt.Errorf("register with relay: %w", err)
	}
	if welcome.Retry {
		return fmt.Errorf("register with relay: %s", welcome.Error)
	}
	if welcome.Error != "" || welcome.PublicURL == "" {
		return fmt.Errorf("%w by the relay: %s", errTunnelRefused, welcome.Error)
	}
	c.SetDeadline(time.Time{})
	t.up(relayURLWithPort(welcome.PublicURL, t.port))
	return t.serve(ctx, c)
}

// up records the public URL of a registered tunnel and logs it: "tunnel
// up" the first time (then, if the boot wait gave up on it, the payload
// is printed again), "tunnel back up" after a reconnect.
func (t *tunnelClient) up(public string) {
	old := t.publicURL.Swap(&public)
	switch {
	case old == nil:
		t.log.Info("tunnel up", "public_url", public)
		select {
		case t.first <- nil:
		default:
		}
		if t.booted.Load() && t.onUp != nil {
			t.onUp()
		}
	case *old != public:
		t.log.Warn("tunnel back up at another public URL", "was", *old, "public_url", public)
	default:
		t.log.Info("tunnel back up", "public_url", public)
	}
}

// serve runs dev's side of HTTP/2 over c until the connection ends or ctx
// is cancelled.
func (t *tunnelClient) serve(ctx context.Context, c net.Conn) error {
	ln := &tunnelListener{conn: &relayWatchedConn{Conn: c, done: make(chan struct{})}, closed: make(chan struct{})}
	// Not newHTTPServer: its idle timeout would drop a quiet tunnel; pings
	// find a dead one instead.
	srv := &http.Server{Handler: t.handler, Protocols: relayH2C(), MaxHeaderBytes: httpMaxHeaderBytes,
		HTTP2: &http.HTTP2Config{SendPingTimeout: tunnelPingEvery, PingTimeout: tunnelPingEvery / 2}}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case <-ln.conn.done:
		err = errors.New("connection to the relay closed")
	}
	srv.Close()
	<-served
	return err
}

// tunnelListener hands http.Server the one tunnel connection, then blocks
// until closed.
type tunnelListener struct {
	conn   *relayWatchedConn
	once   sync.Once
	given  atomic.Bool
	closed chan struct{}
}

// Accept returns the tunnel connection once, then waits for Close.
func (l *tunnelListener) Accept() (net.Conn, error) {
	if l.given.CompareAndSwap(false, true) {
		return l.conn, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

// Close ends Accept.
func (l *tunnelListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is the tunnel's local address.
func (l *tunnelListener) Addr() net.Addr { return l.conn.LocalAddr() }

// tunnelHandler admits relayed requests to api: Host becomes the API's own
// (apiHost), Origin is dropped and the guard is told the request is
// vouched for, since the relay verified an identity token (a header no
// cross-site page can borrow) and the tunnel itself is authenticated; the dev-only routes are refused, being for this machine.
// The relay names the token's user in x-svc-principal (overwriting any
// the caller sent): durable sessions belong to that user, so they outlive
// the token, which the console renews every few minutes.
func tunnelHandler(api http.Handler, apiHost string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/dev/") {
			writeAPIError(w, http.StatusForbidden, apiError{Code: "not_loopback", Message: "the dev-only routes are served to this machine only, never through the tunnel"})
			return
		}
		r.Host = apiHost
		r.Header.Del("Origin")
		ctx := context.WithValue(r.Context(), httpGuardVouchedKey{}, true)
		if p := r.Header.Get(signPrincipalHeader); p != "" {
			r.Header.Del(signPrincipalHeader)
			ctx = context.WithValue(ctx, httpGuardPrincipalKey{}, p)
		}
		r = r.WithContext(ctx)
		api.ServeHTTP(w, r)
	})
}
