package main

// newTestServer builds the shared routes of rt as dev on loopback would:
// behind a guard with the keys of rt.agents, when it has some.
func newTestServer(rt *runtimeCore) (*server, error) {
	var cfg httpGuardConfig
	if rt.agents != nil {
		cfg.APIKeys = rt.agents.apiKeys
	}
	return newServer(rt, cfg, nil)
}
