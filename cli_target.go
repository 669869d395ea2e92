package main

// Target resolution of `--agent <installationId>` (DESIGN §7 targeting):
// the control plane resolves the installation to its agent's deployment
// and mints an identity token for the box; the CLI then calls the box
// directly with that token as its only credential.

import (
	"context"
	"net/http"
	"net/url"
)

// agentTarget resolves installation through the control plane the user is
// signed in to. Not signed in is exit 2; an installation the user cannot
// see, or one whose agent has no registered deployment, is exit 4.
func agentTarget(ctx context.Context, c *cmd, installation string) (*target, error) {
	cl, _, err := requireSignIn(c)
	if err != nil {
		return nil, err
	}
	var res cpTarget
	err = cl.call(ctx, http.MethodPost, "/api/installations/"+url.PathEscape(installation)+"/resolve", nil, &res)
	switch cpErrorCode(err) {
	case "":
	case "no_deployment":
		return nil, failf(codeNotFound, "run `svc link` to register the agent's deployment, or drop --agent to use `svc dev`",
			"no registered deployment for installation %q", installation)
	case codeNotFound:
		return nil, failf(codeNotFound, "pass an installation id of your organization: `svc link` and `svc dev` print them",
			"no installation %q in your organizations on %s", installation, cl.url)
	}
	if err != nil {
		return nil, err
	}
	return &target{baseURL: res.Deployment.URL, client: &http.Client{}, key: res.IdentityToken, box: true}, nil
}

// unreachable is the error of a target that did not answer: a box is a
// generic failure naming it; the local runtime is dev_not_running.
func (t *target) unreachable(err error) error {
	if t.box {
		return failf(codeGeneric, "check that the deployment runs; `svc link` updates its URL", "the box at %s did not answer: %v", t.baseURL, err)
	}
	return failf(codeDevNotRunning, "start it with `svc dev`", "svc dev stopped answering: %v", err)
}
