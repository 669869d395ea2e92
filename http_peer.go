package main

// The developer's own account (issue 29): svc dev serves its runtime's
// routes without a key to a request that the kernel says comes from the
// account svc dev runs as, on this machine (httpPeerUID), and that a
// browser did not send on behalf of another page. Every other caller (an
// account of a neighbour, another machine under --listen, a page on
// another port) must show a key. Where the kernel cannot be asked (not
// Linux), every caller must.

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
)

// httpPeerKey is the connection-context key of the connection's httpPeer.
type httpPeerKey struct{}

// httpPeer is the owner of a connection's client socket, looked up once
// per connection, when a request first needs it.
type httpPeer struct {
	once sync.Once
	uid  uint32
	ok   bool
}

// httpPeerConnContext gives each accepted connection its httpPeer
// (http.Server.ConnContext).
func httpPeerConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, httpPeerKey{}, &httpPeer{})
}

// httpGuardOwner reports whether r comes from the account this process
// runs as: both ends of its connection on loopback, the kernel naming
// this account as the client socket's owner, and, when a browser sent
// it, sent by a page of this very server or typed by the user
// (Sec-Fetch-Site same-origin or none, and any Origin this server's own).
// A page another account serves on another port of this machine is then
// refused even in the developer's own browser.
func httpGuardOwner(r *http.Request) bool {
	return httpGuardNotForAnotherPage(r) && !httpGuardProxied(r) && httpPeerIsSelf(r)
}

// httpGuardProxied reports whether r says it was relayed for someone else
// (Forwarded, X-Forwarded-For or Via): a proxy the developer runs (socat,
// a dev server's proxy) connects from the developer's own socket, so the
// kernel's answer is about the proxy, not about whoever the proxy serves
// (issue 36, item 9). Such a request must show the key. A proxy that adds
// none of these headers cannot be told apart; docs/security.md says so.
func httpGuardProxied(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "Via"} {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// httpGuardNotForAnotherPage reports whether r was not sent by a browser
// on behalf of a page of another origin: no Sec-Fetch-Site or one of
// same-origin and none (typed, bookmarked), and no Origin or this
// server's own. Browsers set both headers; pages cannot.
func httpGuardNotForAnotherPage(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	return o == "" || httpGuardSelfOrigin(r, o)
}

// httpPeerIsSelf reports whether both ends of r's connection are on
// loopback and the kernel names this process's account as the owner of
// the client's socket.
func httpPeerIsSelf(r *http.Request) bool {
	local, remote, ok := httpPeerEnds(r)
	if !ok || !remote.Addr().Unmap().IsLoopback() || !local.Addr().Unmap().IsLoopback() {
		return false
	}
	return httpPeerSelfUID(r, local, remote)
}

// httpPeerEnds returns the local and remote ends of r's connection.
func httpPeerEnds(r *http.Request) (local, remote netip.AddrPort, ok bool) {
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if err != nil || !ok {
		return local, remote, false
	}
	local, err = netip.ParseAddrPort(la.String())
	return local, remote, err == nil
}

// httpPeerSelfUID reports whether the kernel names this process's account
// as the owner of the client socket of r's connection (asked once per
// connection).
func httpPeerSelfUID(r *http.Request, local, remote netip.AddrPort) bool {
	p, cached := r.Context().Value(httpPeerKey{}).(*httpPeer)
	if !cached { // a server without httpPeerConnContext: ask each time
		p = &httpPeer{}
	}
	p.once.Do(func() { p.uid, p.ok = httpPeerUID(local, remote) })
	return p.ok && p.uid == uint32(os.Getuid())
}

// httpPeerFromThisHost reports whether r's client is on this machine: its
// address is loopback or one of this host's own (a browser here that
// opened svc dev's --listen address).
func httpPeerFromThisHost(r *http.Request) bool {
	_, remote, ok := httpPeerEnds(r)
	if !ok {
		return false
	}
	a := remote.Addr().Unmap()
	if a.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: treat it as local, which asks more of it
	}
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil && p.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

// httpGuardOwnerOnThisHost is httpGuardOwner for a client anywhere on this
// machine, through loopback or one of the host's own addresses: what a
// console link's code asks (consoleTradeAllowed).
func httpGuardOwnerOnThisHost(r *http.Request) bool {
	local, remote, ok := httpPeerEnds(r)
	return ok && httpGuardNotForAnotherPage(r) && !httpGuardProxied(r) && httpPeerSelfUID(r, local, remote)
}

// httpGuardSelfOrigin reports whether origin is the server r addressed:
// same scheme, host and port.
func httpGuardSelfOrigin(r *http.Request, origin string) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	o, err := httpGuardParseOrigin(origin)
	self, serr := httpGuardParseOrigin(scheme + "://" + r.Host)
	return err == nil && serr == nil && o == self
}
