package main

// svc dev's loopback ports in both address families (issue 36, item 7).
// Bound to 127.0.0.1 alone, a port left [::1] free for another account,
// and browsers send http://localhost:PORT to [::1] first: the other
// account's page answered. So svc dev holds [::1]:PORT too, serving the
// same routes, or refuses to start, naming who holds it.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/user"
	"strconv"
	"sync"
	"syscall"
)

// devListen listens on host:port and, for the loopback host 127.0.0.1, on
// [::1]:port as well (skipped where this machine has no IPv6 loopback).
func devListen(host string, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil || host != "127.0.0.1" {
		return ln, err
	}
	ln6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(port)))
	switch {
	case err == nil:
		return devPairListen(ln, ln6), nil
	case errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT):
		return ln, nil // no IPv6 loopback: localhost can only mean 127.0.0.1
	}
	ln.Close()
	held := &devHeldError{port: port, err: err}
	held.uid, held.known = httpPeerListenerUID(netip.AddrPortFrom(netip.IPv6Loopback(), uint16(port)))
	return nil, held
}

// devHeldError is a port whose [::1] side another program holds.
type devHeldError struct {
	port  int
	uid   uint32
	known bool // the kernel named the holder's account
	err   error
}

func (e *devHeldError) Error() string {
	holder := "another program"
	if e.known {
		holder = "uid " + strconv.FormatUint(uint64(e.uid), 10)
		if u, err := user.LookupId(strconv.FormatUint(uint64(e.uid), 10)); err == nil {
			holder = "account " + u.Username + " (" + holder + ")"
		}
	}
	return fmt.Sprintf("[::1]:%d is held by %s, and browsers send localhost:%d there", e.port, holder, e.port)
}

func (e *devHeldError) Unwrap() error { return e.err }

// devPairListener accepts from two listeners as one.
type devPairListener struct {
	lns   [2]net.Listener
	conns chan devAccepted
	done  chan struct{}
	once  sync.Once
}

// devAccepted is one Accept's result.
type devAccepted struct {
	conn net.Conn
	err  error
}

// devPairListen starts accepting on a and b; Addr is a's.
func devPairListen(a, b net.Listener) *devPairListener {
	p := &devPairListener{lns: [2]net.Listener{a, b}, conns: make(chan devAccepted), done: make(chan struct{})}
	for _, ln := range p.lns {
		go func() {
			for {
				c, err := ln.Accept()
				select {
				case p.conns <- devAccepted{c, err}:
				case <-p.done:
					if c != nil {
						c.Close()
					}
					return
				}
				if errors.Is(err, net.ErrClosed) {
					return
				}
			}
		}()
	}
	return p
}

// Accept returns the next connection of either listener.
func (p *devPairListener) Accept() (net.Conn, error) {
	select {
	case a := <-p.conns:
		return a.conn, a.err
	case <-p.done:
		return nil, net.ErrClosed
	}
}

// Close closes both listeners.
func (p *devPairListener) Close() error {
	var err error
	p.once.Do(func() {
		close(p.done)
		err = errors.Join(p.lns[0].Close(), p.lns[1].Close())
	})
	return err
}

// Addr is the first listener's address.
func (p *devPairListener) Addr() net.Addr { return p.lns[0].Addr() }
