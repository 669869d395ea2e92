package main

// The networks a control plane's deployments may live in
// (SVC_DEPLOYMENT_NETWORKS): link and the proxy reach boxes through one
// dialer that refuses an address outside them. The check runs on the
// address actually dialled, after DNS resolution, so a box's name that
// later resolves elsewhere (DNS rebinding) still cannot lead the control
// plane out of them.

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

const (
	// cpNetworksEnv names the control plane's variable listing the networks.
	cpNetworksEnv = "SVC_DEPLOYMENT_NETWORKS"
	// cpCodeOutsideNetworks is link's error code for a box outside them.
	cpCodeOutsideNetworks = "box_outside_networks"
)

// cpNetworks is the list of networks deployments may live in; an empty
// list allows every address.
type cpNetworks []netip.Prefix

// cpParseNetworks parses a comma-separated CIDR list ("" allows any
// address).
func cpParseNetworks(list string) (cpNetworks, error) {
	var nets cpNetworks
	for field := range strings.SplitSeq(list, ",") {
		if field = strings.TrimSpace(field); field == "" {
			continue
		}
		p, err := netip.ParsePrefix(field)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a network in CIDR form such as 10.0.0.0/8 or fd00::/8", cpNetworksEnv, field)
		}
		nets = append(nets, p.Masked())
	}
	return nets, nil
}

// cpNetworkError is a dial refused because the address is outside the
// deployment networks.
type cpNetworkError struct {
	Addr netip.Addr
}

func (e *cpNetworkError) Error() string {
	return fmt.Sprintf("%s is outside the networks deployments may live in (%s on the control plane)", e.Addr, cpNetworksEnv)
}

// allows reports whether addr is inside one of the networks (always, for
// an empty list).
func (n cpNetworks) allows(addr netip.Addr) bool {
	if len(n) == 0 {
		return true
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range n {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// control is a net.Dialer Control: it runs on the resolved ip:port just
// before connecting and refuses an address outside the networks (an IPv6
// zone is ignored).
func (n cpNetworks) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s %s: not an ip:port", network, address)
	}
	if !n.allows(ap.Addr()) {
		return &cpNetworkError{Addr: ap.Addr().Unmap()}
	}
	return nil
}
