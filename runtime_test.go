package main

// newTestServer builds the shared routes of rt as dev on loopback would:
// behind a guard with the keys of rt.agents, when it has some.
func newTestServer(rt *runtimeCore) (*server, error) {
	s, err := newServer(rt, httpGuardConfig{}, nil)
	if err != nil {
		return nil, err
	}
	// Recorded requests have no connection for the kernel to name its
	// account: every request is taken as the developer's own, as far as a
	// browser's headers allow (the rule itself: TestHTTPGuardOwner).
	s.guard.auth.(*httpGuardKeys).owner = httpGuardNotForAnotherPage
	return s, nil
}
