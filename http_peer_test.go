package main

import (
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"
)

// peerTestPair is a loopback connection of this process: the client's end
// and the end the listener accepted.
func peerTestPair(t testing.TB, network, addr string) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// peerTestUID asks httpPeerUID about the client of the accepted end s.
func peerTestUID(s net.Conn) (uint32, bool) {
	return httpPeerUID(netip.MustParseAddrPort(s.LocalAddr().String()), netip.MustParseAddrPort(s.RemoteAddr().String()))
}

// TestHTTPPeerUID checks the direct lookup of a connection's client socket
// (issue 36, items 2 and 3): an established client of this account is
// named, over IPv4, IPv6 and an IPv6 socket dialling IPv4; a client that
// has closed is named by nobody, even once the kernel keeps only a
// TIME_WAIT entry for it (uid 0 and no inode, which a root svc dev once
// took for its own); and a 4-tuple that no socket has is named by nobody.
func TestHTTPPeerUID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux says who owns a connection")
	}
	for _, tt := range []struct{ name, network, addr string }{
		{"IPv4", "tcp4", "127.0.0.1:0"},
		{"IPv6", "tcp6", "[::1]:0"},
		{"IPv4 through a dual-stack socket", "tcp", "127.0.0.1:0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, s := peerTestPair(t, tt.network, tt.addr)
			uid, ok := peerTestUID(s)
			if !ok || uid != uint32(os.Getuid()) {
				t.Fatalf("httpPeerUID of an established client of this process = %d, %v; want %d, true", uid, ok, os.Getuid())
			}
		})
	}

	if !httpPeerKnown() {
		t.Errorf("httpPeerKnown() = false where the kernel names a connection's owner")
	}

	t.Run("a client that closed", func(t *testing.T) {
		c, s := peerTestPair(t, "tcp4", "127.0.0.1:0")
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		c.Close() // orphaned: FIN_WAIT2, then a TIME_WAIT entry of uid 0
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(s); err != nil {
			t.Fatalf("read until the client's FIN: %v", err)
		}
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) { // the whole way from FIN_WAIT to TIME_WAIT
			if uid, ok := peerTestUID(s); ok {
				t.Fatalf("httpPeerUID of a closed client = %d, true; want no owner", uid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("no such socket", func(t *testing.T) {
		_, s := peerTestPair(t, "tcp4", "127.0.0.1:0")
		local := netip.MustParseAddrPort(s.LocalAddr().String())
		remote := netip.MustParseAddrPort(s.RemoteAddr().String())
		for _, r := range []netip.AddrPort{
			netip.AddrPortFrom(remote.Addr(), remote.Port()+1),
			netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), remote.Port()),
		} {
			if uid, ok := httpPeerUID(local, r); ok {
				t.Errorf("httpPeerUID(%v, %v) = %d, true; want no owner", local, r, uid)
			}
		}
	})
}

// TestHTTPPeerListenerUID checks who holds a listening port: this
// account, over IPv4 and IPv6, and nobody for a port no socket listens on.
func TestHTTPPeerListenerUID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux says who owns a socket")
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("listen %s: %v", addr, err)
		}
		ap := netip.MustParseAddrPort(ln.Addr().String())
		if uid, ok := httpPeerListenerUID(ap); !ok || uid != uint32(os.Getuid()) {
			t.Errorf("httpPeerListenerUID(%v) = %d, %v; want %d, true", ap, uid, ok, os.Getuid())
		}
		ln.Close()
		if uid, ok := httpPeerListenerUID(ap); ok {
			t.Errorf("httpPeerListenerUID(%v) after close = %d, true; want nobody", ap, uid)
		}
	}
}

// BenchmarkHTTPPeerUID is the cost of one owner lookup, the price a
// keyless request pays once per connection.
func BenchmarkHTTPPeerUID(b *testing.B) {
	_, s := peerTestPair(b, "tcp4", "127.0.0.1:0")
	local, remote := netip.MustParseAddrPort(s.LocalAddr().String()), netip.MustParseAddrPort(s.RemoteAddr().String())
	for b.Loop() {
		if _, ok := httpPeerUID(local, remote); !ok {
			b.Fatal("no owner")
		}
	}
}
