package main

// Who is on the other end of a loopback connection (issue 29): on Linux
// the kernel lists every TCP socket of this network namespace in
// /proc/net/tcp and /proc/net/tcp6 with the account that owns it. The
// client's socket of a connection accepted here is the line whose local
// address is the connection's remote one and whose remote address is the
// connection's local one. Another account on this machine cannot forge
// it: the kernel records the owner when the socket is made.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// httpPeerUID returns the account that owns the client socket of the TCP
// connection seen here from local to remote, if the kernel lists it. An
// IPv4 client is in /proc/net/tcp, or in /proc/net/tcp6 under its
// IPv4-mapped form when it connected from an IPv6 socket.
func httpPeerUID(local, remote netip.AddrPort) (uint32, bool) {
	local, remote = netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	if remote.Addr().Is4() && local.Addr().Is4() {
		if uid, ok := httpPeerScan("/proc/net/tcp", remote, local); ok {
			return uid, true
		}
		remote = netip.AddrPortFrom(netip.AddrFrom16(remote.Addr().As16()), remote.Port())
		local = netip.AddrPortFrom(netip.AddrFrom16(local.Addr().As16()), local.Port())
	}
	return httpPeerScan("/proc/net/tcp6", remote, local)
}

// httpPeerScan looks in one socket table for the socket bound to src and
// connected to dst and returns its owner's uid.
func httpPeerScan(table string, src, dst netip.AddrPort) (uint32, bool) {
	f, err := os.Open(table)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	want := httpPeerHex(src) + " " + httpPeerHex(dst)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "  sl: local rem st tx:rx tr:when retrnsmt uid ..."
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[1]+" "+fields[2] != want {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		return uint32(uid), err == nil
	}
	return 0, false
}

// httpPeerHex writes an address as the socket tables do: each 32-bit word
// of the address (one for IPv4, four for IPv6) as the kernel holds it in
// memory, read in the machine's byte order and printed as %08X, then a
// colon and the port as %04X.
func httpPeerHex(ap netip.AddrPort) string {
	raw := ap.Addr().AsSlice()
	var sb strings.Builder
	for i := 0; i+4 <= len(raw); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.NativeEndian.Uint32(raw[i:i+4]))
	}
	fmt.Fprintf(&sb, ":%04X", ap.Port())
	return sb.String()
}
