package main

// `svc relay --domain D [--addr :443] --tls-cert F --tls-key F [--state DIR]`
// (DESIGN §7): the public end of svc dev's tunnel (relay.go).

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// relayShutdownTimeout bounds the drain of public requests at shutdown.
const relayShutdownTimeout = 10 * time.Second

// newRelayFlags defines the flags of `svc relay`.
func newRelayFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.String("domain", "", "tunnel domain D: sessions are published at https://<subdomain>.tun.D (required)")
	fs.String("addr", ":443", "address to listen on, for tunnels and public requests alike")
	fs.String("tls-cert", "", "PEM certificate chain covering *.tun.D and the name svc dev dials (required: tunnels and public traffic are TLS only)")
	fs.String("tls-key", "", "PEM private key of --tls-cert (required)")
	fs.String("control-plane", "", "control plane whose registration tokens admit tunnels and whose identity tokens relayed requests must carry (default SVC_CONTROL_PLANE_URL, then the built-in default)")
	fs.String("state", "", "private directory (0700, one relay each) remembering the registration tokens used in the last minute, so a restart does not let one be replayed (default $XDG_CONFIG_HOME/svc/relay)")
	return fs
}

// runRelay is `svc relay`: listen, serve tunnels and public requests until
// SIGINT/SIGTERM, then drop the tunnels and drain.
func runRelay(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("relay takes no arguments, got %q: %w", fs.Arg(0), errUsage)
	}
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	domain := strings.Trim(strings.ToLower(get("domain")), ".")
	if domain == "" || strings.ContainsAny(domain, ":/ ") {
		return failf(codeGeneric, "pass the tunnel domain, e.g. --domain example.com for https://<sub>.tun.example.com", "relay: invalid --domain %q", get("domain"))
	}
	if get("tls-cert") == "" || get("tls-key") == "" {
		return failf(codeGeneric, "pass --tls-cert and --tls-key: a certificate for *.tun."+domain+" and the name svc dev dials", "relay: --tls-cert and --tls-key are required")
	}
	cert, err := tls.LoadX509KeyPair(get("tls-cert"), get("tls-key"))
	if err != nil {
		return failf(codeGeneric, "pass a PEM certificate and its key", "relay: load certificate: %v", err)
	}
	cp := get("control-plane")
	if cp == "" {
		cp = c.getenv("SVC_CONTROL_PLANE_URL")
	}
	if cp == "" {
		cp = boxDefaultControlPlane
	}
	state := get("state")
	if state == "" {
		state = filepath.Join(cliConfigDir(c.getenv), "relay")
	}
	ln, err := net.Listen("tcp", get("addr"))
	if err != nil {
		return failf(codeGeneric, "pick a free --addr", "relay: listen on %s: %v", get("addr"), err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	log := newDevLogger(c)
	s, err := newRelayServer(relayConfig{Domain: domain, ControlPlane: cp, State: state, Port: port}, log)
	if err != nil {
		ln.Close()
		return err
	}
	srv := s.httpServer(cert)
	log.Info("relay up", "addr", ln.Addr().String(), "domain", "*.tun."+domain, "control_plane", cp, "state", state)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, srv.TLSConfig)) }()
	select {
	case <-ctx.Done():
	case err = <-served:
		return fmt.Errorf("relay: serve: %w", err)
	}
	log.Info("stopping")
	s.close()
	sctx, cancel := context.WithTimeout(context.Background(), relayShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("relay: shutdown: %w", err)
	}
	return nil
}
