package main

// Target resolution of `--agent <installationId>` (DESIGN §7 targeting):
// the control plane resolves the installation to its agent's deployment
// and mints an identity token for the box; the CLI then calls the box
// directly with that token as its only credential.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
)

// agentTarget resolves installation through the control plane the user is
// signed in to. Not signed in is exit 2; an installation the user cannot
// see, or one whose agent has no registered deployment, is exit 4.
func agentTarget(ctx context.Context, c *cmd, installation string) (*target, error) {
	cl, _, err := requireSignIn(c)
	if err != nil {
		return nil, err
	}
	var res cpTarget
	err = cl.call(ctx, http.MethodPost, "/api/installations/"+url.PathEscape(installation)+"/resolve", nil, &res)
	switch cpErrorCode(err) {
	case "":
	case "no_deployment":
		return nil, failf(codeNotFound, "run `svc link` to register the agent's deployment, or drop --agent to use `svc dev`",
			"no registered deployment for installation %q", installation)
	case codeNotFound:
		return nil, failf(codeNotFound, "pass an installation id of your organization: `svc link` and `svc dev` print them",
			"no installation %q in your organizations on %s", installation, cl.url)
	}
	if err != nil {
		return nil, err
	}
	return &target{baseURL: res.Deployment.URL, client: &http.Client{}, key: res.IdentityToken, box: true}, nil
}

// unreachable is the error of a target that did not answer: a box is a
// generic failure naming it; the local runtime is dev_not_running.
func (t *target) unreachable(err error) error {
	if t.box {
		return failf(codeGeneric, "check that the deployment runs; `svc link` updates its URL", "the box at %s did not answer: %v", t.baseURL, err)
	}
	return failf(codeDevNotRunning, "start it with `svc dev`", "svc dev stopped answering: %v", err)
}

// devNotOwnedError is a loopback port whose server is not a socket of
// this account: a neighbour holds the port of a svc dev that died
// (SIGKILL, a crash, a reboot) and left .svc/runtime.json behind.
type devNotOwnedError struct {
	addr  string
	uid   uint32
	known bool // false: the kernel did not say who owns it
}

func (e *devNotOwnedError) Error() string {
	if !e.known {
		return fmt.Sprintf("the kernel does not say who serves %s, so nothing was sent to it", e.addr)
	}
	return fmt.Sprintf("%s is served by another account (uid %d), not by yours: nothing was sent to it", e.addr, e.uid)
}

// devOwnedClient is the CLI's client of a svc dev on a loopback port. On
// every connection, before a byte is sent, it asks the kernel who owns
// the server's end and drops the connection unless it is this account
// (issue 36, item 5); such a client needs no key, since svc dev admits
// the developer's own account on loopback (httpGuardOwner). base is the
// client to wrap (http.DefaultTransport's settings, or svc's pinned
// certificate under --tls).
func devOwnedClient(base *http.Client) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if b, ok := base.Transport.(*http.Transport); ok {
		tr = b.Clone()
	}
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		local, lerr := netip.ParseAddrPort(conn.LocalAddr().String())
		remote, rerr := netip.ParseAddrPort(conn.RemoteAddr().String())
		uid, ok := uint32(0), false
		if lerr == nil && rerr == nil {
			uid, ok = httpPeerServerUID(local, remote)
		}
		if !ok || uid != uint32(os.Getuid()) {
			conn.Close()
			return nil, &devNotOwnedError{addr: addr, uid: uid, known: ok}
		}
		return conn, nil
	}
	return &http.Client{Transport: tr}
}

// devLoopbackURL reports whether u names a loopback host.
func devLoopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(strings.Trim(p.Hostname(), "[]"))
	return (err == nil && addr.Unmap().IsLoopback()) || p.Hostname() == "localhost"
}
