//go:build !linux

package main

import "net/netip"

// httpPeerUID cannot tell who owns the other end of a connection here (no
// socket table to read): every caller then needs a credential.
func httpPeerUID(local, remote netip.AddrPort) (uint32, bool) { return 0, false }

// httpPeerKnown is false: this system does not say who owns a socket.
func httpPeerKnown() bool { return false }

// httpPeerServerUID cannot tell who serves a port here.
func httpPeerServerUID(local, remote netip.AddrPort) (uint32, bool) { return 0, false }

// httpPeerListenerUID cannot tell who listens on a port here.
func httpPeerListenerUID(addr netip.AddrPort) (uint32, bool) { return 0, false }
