package main

import (
	"context"
	"flag"
)

// newLinkFlags defines the flags of `svc link` (SPEC §4.2).
func newLinkFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("link", flag.ContinueOnError)
	fs.String("agent", "", "agent slug (required in non-interactive mode)")
	fs.String("url", "", "public URL where the deployed agent is reachable (required)")
	fs.String("secret", "", "signing secret the container verifies with; must match exactly (required)")
	fs.String("tag", "", "image tag deployed, a semver or digest: the agent's version (required)")
	fs.Bool("force", false, "overwrite an existing .svc/project.json")
	fs.String("agents", "", "comma-separated coding agents to set up; skips the prompt")
	fs.Bool("no-agents", false, "set up no coding agent")
	return fs
}

// runLink is `svc link`. Registering with a control plane arrives with the
// link issue; until then the verb says so and exits 1.
func runLink(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	return failf(codeGeneric, "deploy-then-link arrives in a later release; `svc dev` works without it",
		"svc link is not available yet: this build has no control-plane client")
}
