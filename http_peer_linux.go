package main

// Who is on the other end of a loopback connection (issues 29 and 36): on
// Linux the kernel's socket-diagnostics netlink (NETLINK_SOCK_DIAG,
// inet_diag) answers for one TCP socket named by its exact 4-tuple, with
// the account that owns it. The client's socket of a connection accepted
// here is the one whose local end is the connection's remote one and whose
// remote end is the connection's local one. Another account cannot forge
// the owner: the kernel records it when the socket is made.
//
// Only an established socket with a real inode counts. A client that
// closed right after sending leaves a TIME_WAIT (or FIN_WAIT) entry that
// the kernel reports with uid 0 and inode 0; a root svc dev once took such
// an entry for its own (issue 36, item 2). And the lookup is one hash
// probe in the kernel, not a scan of a table that another account can
// inflate for free (item 3).

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// Constants of <linux/sock_diag.h>, <linux/inet_diag.h> and <netinet/tcp.h>.
const (
	netlinkSockDiag     = 4  // NETLINK_SOCK_DIAG
	sockDiagByFamily    = 20 // SOCK_DIAG_BY_FAMILY
	tcpEstablished      = 1  // TCP_ESTABLISHED
	tcpListen           = 10 // TCP_LISTEN
	inetDiagReqV2Len    = 56 // struct inet_diag_req_v2
	inetDiagMsgLen      = 72 // struct inet_diag_msg
	inetDiagMsgStateOff = 1
	inetDiagMsgUIDOff   = 64
	inetDiagMsgInodeOff = 68
	nlmsgHdrLen         = 16
)

// httpPeerUID returns the account that owns the client socket of the TCP
// connection seen here from local to remote, when the kernel reports that
// socket as established with an inode. An IPv4 client that connected from
// an IPv6 socket is found by its IPv4 tuple too (the kernel hashes it so).
func httpPeerUID(local, remote netip.AddrPort) (uint32, bool) {
	return httpPeerDiag(remote, local, tcpEstablished, true)
}

// httpPeerListenerUID returns the account that owns the TCP socket
// listening on addr (bound to that very address), if any: who holds a port
// svc dev wanted (issue 36, item 7).
func httpPeerListenerUID(addr netip.AddrPort) (uint32, bool) {
	any := netip.IPv4Unspecified()
	if addr.Addr().Is6() {
		any = netip.IPv6Unspecified()
	}
	return httpPeerDiag(addr, netip.AddrPortFrom(any, 0), tcpListen, true)
}

// httpPeerKnown says whether this kernel answers httpPeerUID, found once
// by asking it about a loopback connection of this process: false where it
// has no TCP socket diagnostics (a kernel without inet_diag or tcp_diag, a
// sandbox that refuses the netlink family). There every caller must show a
// key, and the CLI sends it (cli_target.go).
var httpPeerKnown = sync.OnceValue(func() bool {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return false
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		return false
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		return false
	}
	defer s.Close()
	local, lerr := netip.ParseAddrPort(s.LocalAddr().String())
	remote, rerr := netip.ParseAddrPort(s.RemoteAddr().String())
	if lerr != nil || rerr != nil {
		return false
	}
	uid, ok := httpPeerUID(local, remote)
	return ok && uid == uint32(os.Getuid())
})

// httpPeerServerUID returns the account that owns the server's end of a
// TCP connection this process dialled from local to remote: what the CLI
// asks before it sends anything secret to a loopback port (issue 36, item
// 5). The server's end is a clone of its listening socket, owned by the
// listener's account from the moment the handshake completes, before the
// server accepts it (it has no inode until then), so the answer is asked
// for a few times while the kernel still holds it as a half-open request.
func httpPeerServerUID(local, remote netip.AddrPort) (uint32, bool) {
	for range 50 {
		if uid, ok := httpPeerDiag(remote, local, tcpEstablished, false); ok {
			return uid, true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, false
}

// httpPeerDiag asks the kernel for the TCP socket bound to src and
// connected to dst (no dump: one exact lookup; IPv4-mapped addresses taken
// as IPv4) and returns its owner when it is in state and, if needInode,
// has an inode.
func httpPeerDiag(src, dst netip.AddrPort, state byte, needInode bool) (uint32, bool) {
	src, dst = netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if src.Addr().Is4() != dst.Addr().Is4() {
		return 0, false
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return 0, false
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(int64(time.Second))
	if syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv) != nil {
		return 0, false
	}
	const seq = 1
	if err := syscall.Sendto(fd, httpPeerDiagRequest(src, dst, seq), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, false
	}
	buf := make([]byte, 8192)
	n, from, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, false
	}
	if nl, ok := from.(*syscall.SockaddrNetlink); !ok || nl.Pid != 0 { // only the kernel answers
		return 0, false
	}
	return httpPeerDiagAnswer(buf[:n], seq, src, dst, state, needInode)
}

// httpPeerDiagRequest builds the netlink message asking for one socket:
// an nlmsghdr then struct inet_diag_req_v2 naming TCP, every state (the
// answer's state is checked, so a lookup that finds a TIME_WAIT entry is
// refused rather than missed) and the socket's 4-tuple with no cookie.
func httpPeerDiagRequest(src, dst netip.AddrPort, seq uint32) []byte {
	msg := make([]byte, nlmsgHdrLen+inetDiagReqV2Len)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], sockDiagByFamily)
	ne.PutUint16(msg[6:], syscall.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], seq)
	req := msg[nlmsgHdrLen:]
	req[0] = syscall.AF_INET
	if src.Addr().Is6() {
		req[0] = syscall.AF_INET6
	}
	req[1] = syscall.IPPROTO_TCP
	ne.PutUint32(req[4:], ^uint32(0)) // idiag_states: all
	httpPeerPutSockID(req[8:56], src, dst)
	ne.PutUint32(req[48:], ^uint32(0)) // idiag_cookie: INET_DIAG_NOCOOKIE
	ne.PutUint32(req[52:], ^uint32(0))
	return msg
}

// httpPeerPutSockID writes the ports and addresses of a struct
// inet_diag_sockid (network byte order; an IPv4 address fills the first
// word of its 16 bytes).
func httpPeerPutSockID(id []byte, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	copy(id[4:20], src.Addr().AsSlice())
	copy(id[20:36], dst.Addr().AsSlice())
}

// httpPeerDiagAnswer reads the kernel's answer: one SOCK_DIAG_BY_FAMILY
// message whose struct inet_diag_msg names the very socket asked for, in
// state and (if needInode) with an inode; anything else (an error message, no
// such socket, a socket in another state) is no answer.
func httpPeerDiagAnswer(b []byte, seq uint32, src, dst netip.AddrPort, state byte, needInode bool) (uint32, bool) {
	ne := binary.NativeEndian
	if len(b) < nlmsgHdrLen+inetDiagMsgLen {
		return 0, false
	}
	if l := ne.Uint32(b[0:]); l < nlmsgHdrLen+inetDiagMsgLen || int(l) > len(b) {
		return 0, false
	}
	if ne.Uint16(b[4:]) != sockDiagByFamily || ne.Uint32(b[8:]) != seq {
		return 0, false
	}
	m := b[nlmsgHdrLen:]
	if gotSrc, gotDst, ok := httpPeerSockID(m[0], m[4:52]); !ok || gotSrc != src || gotDst != dst {
		return 0, false
	}
	if m[inetDiagMsgStateOff] != state || (needInode && ne.Uint32(m[inetDiagMsgInodeOff:]) == 0) {
		return 0, false
	}
	return ne.Uint32(m[inetDiagMsgUIDOff:]), true
}

// httpPeerSockID reads the ends of a struct inet_diag_sockid of a socket
// of family (an IPv6 socket connected to an IPv4 peer is reported with
// IPv4-mapped addresses, unmapped here).
func httpPeerSockID(family byte, id []byte) (src, dst netip.AddrPort, ok bool) {
	var sa, da netip.Addr
	switch family {
	case syscall.AF_INET:
		sa, da = netip.AddrFrom4([4]byte(id[4:8])), netip.AddrFrom4([4]byte(id[20:24]))
	case syscall.AF_INET6:
		sa, da = netip.AddrFrom16([16]byte(id[4:20])).Unmap(), netip.AddrFrom16([16]byte(id[20:36])).Unmap()
	default:
		return src, dst, false
	}
	return netip.AddrPortFrom(sa, binary.BigEndian.Uint16(id[0:])), netip.AddrPortFrom(da, binary.BigEndian.Uint16(id[2:])), true
}
