package main

// `svc link` (SPEC §4.2): register a deployed box with the control plane
// the user is signed in to and link this directory to its agent. The
// rules run in SPEC order: flags first (no network), then the directory,
// sign-in, the organization's agents, the box's handshake, and the control
// plane's proof, teaching and record (cp_link.go); then the files. With
// --local there is no box: the directory is linked to the user's local-dev
// installation of the agent, the one svc dev runs as and tunnels.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// newLinkFlags defines the flags of `svc link` (SPEC §4.2).
func newLinkFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("link", flag.ContinueOnError)
	fs.String("agent", "", "agent slug (required in non-interactive mode; a terminal offers a pick)")
	fs.String("url", "", "public URL where the deployed agent is reachable (required unless --local)")
	cliSecretLinkSecret.define(fs, "signing secret the container verifies with; must match exactly (required unless --local; never printed)")
	fs.String("tag", "", "image tag deployed, a semver or digest: the agent's version (required unless --local)")
	fs.Bool("local", false, "link this directory to the agent's local-dev installation (what svc dev runs as and tunnels); no box, so no --url, --secret or --tag")
	fs.Bool("force", false, "overwrite a .svc/project.json that links this directory to another agent or control plane")
	fs.String("agents", "", "comma-separated coding agents to set up, skipping the prompt: "+strings.Join(agentSetupNames(), ", ")+", or all")
	fs.Bool("no-agents", false, "set up no coding agent")
	return fs
}

// linkLocalDev is the local-dev installation of the link payload (SPEC §2).
type linkLocalDev struct {
	ID               string `json:"id"`
	OrganizationSlug string `json:"organization_slug"`
}

// linkPayload is the JSON payload of `svc link` (SPEC §4.2). It never
// holds the signing secret. With --local, deployment and
// identity_verification are null: there is no box.
type linkPayload struct {
	SchemaVersion        int                       `json:"schema_version"`
	Agent                cpAgent                   `json:"agent"`
	OrganizationID       string                    `json:"organization_id"`
	LocalDevInstallation linkLocalDev              `json:"local_dev_installation"`
	Deployment           *cpDeployment             `json:"deployment"`
	TargetDir            string                    `json:"target_dir"`
	FilesWritten         []string                  `json:"files_written"`
	AgentSetup           agentSetupReport          `json:"agent_setup"`
	IdentityVerification *linkIdentityVerification `json:"identity_verification"`
}

// linkOptions are the validated flags of `svc link`.
type linkOptions struct {
	agent, url, secret, tag string
	force, local            bool
	codingAgents            []string // nil: ask (or, non-interactive, none)
}

// parseLinkOptions validates the flags before any network call (rule 1):
// the three required flags (none of them with --local), their shape,
// --agent in non-interactive mode, and the coding agents named.
func parseLinkOptions(c *cmd, fs *flag.FlagSet) (linkOptions, error) {
	get := func(name string) string { return strings.TrimSpace(fs.Lookup(name).Value.String()) }
	o := linkOptions{agent: get("agent"), url: get("url"), tag: get("tag"),
		force: get("force") == "true", local: get("local") == "true"}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("link takes no arguments: %w", errUsage)
	}
	var err error
	if o.secret, err = cliSecretLinkSecret.read(c, fs); err != nil {
		return o, err
	}
	hint := "svc link --agent <slug> --url <box URL> --secret <signing secret> --tag <image tag>, or svc link --agent <slug> --local"
	boxFlags := []struct{ name, value string }{{"--url", o.url}, {"--secret", o.secret}, {"--tag", o.tag}}
	var missing, extra []string
	for _, f := range boxFlags {
		switch {
		case o.local && f.value != "":
			extra = append(extra, f.name)
		case !o.local && f.value == "":
			missing = append(missing, f.name)
		}
	}
	if o.agent == "" && !c.interactive() {
		missing = append(missing, "--agent (required when not in a terminal)")
	}
	if len(extra) > 0 {
		return o, failf(codeGeneric, "svc link --agent <slug> --local links svc dev's installation; drop "+strings.Join(extra, ", ")+" (they register a deployed box)",
			"svc link: --local takes no %s; nothing was linked", strings.Join(extra, ", "))
	}
	if len(missing) > 0 {
		return o, failf(codeGeneric, hint, "svc link: missing %s; nothing was linked", strings.Join(missing, ", "))
	}
	if !o.local {
		if err := linkCheckURL(o.url); err != nil {
			return o, failf(codeGeneric, hint, "svc link: --%v; nothing was linked", err)
		}
		if err := (cpLinkRequest{URL: o.url, Secret: o.secret, ImageTag: o.tag}).validate(); err != nil {
			return o, failf(codeGeneric, hint, "svc link: --%v; nothing was linked", strings.Replace(err.Error(), "image_tag", "tag", 1))
		}
	}
	list, none := get("agents"), get("no-agents") == "true"
	switch {
	case list != "" && none:
		return o, failf(codeGeneric, "pass one of --agents and --no-agents", "svc link: --agents and --no-agents together")
	case none:
		o.codingAgents = []string{}
	case list != "":
		names, err := agentSetupParse(list)
		if err != nil {
			return o, failf(codeGeneric, "pass --agents "+strings.Join(agentSetupNames(), ",")+" (or all), or --no-agents", "svc link: --agents: %v", err)
		}
		o.codingAgents = names
	}
	return o, nil
}

// runLink is `svc link`.
func runLink(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	o, err := parseLinkOptions(c, fs)
	if err != nil {
		return err
	}
	proj, err := loadProject(c.dir)
	if err != nil {
		return err
	}
	if l := proj.Link; l != nil && l.ControlPlaneURL != "" && !o.force {
		cpURL := loginControlPlaneURL(c, "", loginCredentials{ControlPlaneURL: l.ControlPlaneURL})
		if o.agent != l.Agent.Slug || cpURL != l.ControlPlaneURL {
			return failf(codeGeneric, "pass --force to link it to another agent, or run link for "+l.Agent.Slug,
				"%s is already linked to agent %s at %s; nothing was linked", proj.Dir, l.Agent.Slug, l.ControlPlaneURL)
		}
	}
	cl, creds, err := requireSignIn(c)
	if err != nil {
		return err
	}
	if creds.Organization == nil {
		return failf(codeNoProject, "ask an owner to add you to an organization, then run `svc login` again", "you belong to no organization on %s", cl.url)
	}
	org := creds.Organization
	agent, err := linkPickAgent(ctx, c, cl, org, o.agent)
	if err != nil {
		return err
	}
	var payload linkPayload
	var pf projectFile
	next := c.selfCommand(c.dir) + " dev"
	if o.local {
		if pf, err = projectLocalDev(ctx, cl, org.Slug, agent); err != nil {
			return linkFailure(err)
		}
		payload = linkPayload{Agent: agent, OrganizationID: pf.OrganizationID}
	} else {
		box, _ := newLinkBoxClient(o.url, nil, nil)
		if _, err := box.handshake(ctx); err != nil {
			return linkFailure(err)
		}
		var res cpLinkResult
		err = cl.call(ctx, http.MethodPost, projectAgentPath(org.Slug, agent.Slug)+"/link", cpLinkRequest{URL: o.url, Secret: o.secret, ImageTag: o.tag}, &res)
		if err != nil {
			return linkFailure(err)
		}
		pf = projectFile{SchemaVersion: schemaVersion, OrganizationID: res.OrganizationID, OrganizationSlug: org.Slug,
			Agent: projectAgent(res.Agent), LocalDevInstallationID: res.LocalDevInstallation.ID, ControlPlaneURL: cl.url}
		payload = linkPayload{Agent: res.Agent, OrganizationID: res.OrganizationID, Deployment: &res.Deployment, IdentityVerification: &res.IdentityVerification}
		next = c.selfCommand(c.dir) + " workflows list --agent " + res.Installation.ID
	}
	written := []string{}
	for _, f := range []struct {
		rel   string
		write func(string) (bool, error)
	}{
		{".svc/project.json", func(dir string) (bool, error) { return projectWrite(dir, pf) }},
		{".gitignore", linkPatchGitignore},
	} {
		changed, err := f.write(proj.Dir)
		if err != nil {
			return fmt.Errorf("svc link: the agent is linked on the control plane, but writing %s failed (run link again): %w", f.rel, err)
		}
		if changed {
			written = append(written, f.rel)
		}
	}
	selected := o.codingAgents
	if selected == nil {
		if selected, err = agentSetupAsk(c); err != nil {
			return err
		}
	}
	command := c.executable
	if command == "" {
		command = "svc"
	}
	report, files := agentSetupRun(proj.Dir, selected, command)
	payload.SchemaVersion, payload.TargetDir, payload.FilesWritten, payload.AgentSetup = schemaVersion, proj.Dir, append(written, files...), report
	payload.LocalDevInstallation = linkLocalDev{ID: pf.LocalDevInstallationID, OrganizationSlug: pf.OrganizationSlug}
	var warning *string
	if v := payload.IdentityVerification; v != nil {
		warning = v.Warning
	}
	if warning != nil && c.json {
		fmt.Fprintf(c.stderr, "warning: %s\n", *warning)
	}
	c.emit(payload, func(w io.Writer) {
		fmt.Fprintf(w, "Linked %s to agent %s (%s) in organization %s\n", proj.Dir, agent.Slug, agent.Name, org.Slug)
		if d := payload.Deployment; d != nil {
			fmt.Fprintf(w, "  deployment  %s  %s  tag %s  %s\n  identity    %s\n", d.ID, d.URL, d.ImageTag, d.Status, payload.IdentityVerification.State)
		} else {
			fmt.Fprintf(w, "  local dev   %s (the installation svc dev runs as; no deployment)\n", pf.LocalDevInstallationID)
		}
		for _, f := range payload.FilesWritten {
			fmt.Fprintf(w, "  wrote       %s\n", f)
		}
		if warning != nil {
			fmt.Fprintf(w, "warning: %s\n", *warning)
		}
		fmt.Fprintf(w, "\nNext: %s\n", next)
	})
	return nil
}

// linkPickAgent finds the organization's agent slug, or, with no slug (a
// terminal), asks the user to pick one. No agents is no_project (exit 3);
// no agent with that slug is not_found (exit 4).
func linkPickAgent(ctx context.Context, c *cmd, cl *cpClient, org *cpOrg, slug string) (cpAgent, error) {
	agents, err := cl.agents(ctx, org.Slug)
	if err != nil {
		return cpAgent{}, err
	}
	if len(agents) == 0 {
		return cpAgent{}, failf(codeNoProject, "create one: run `svc dev` in the project (it offers to create an agent named after the folder), or use the console",
			"organization %s has no agents yet; nothing was linked", org.Slug)
	}
	if slug == "" {
		fmt.Fprintf(c.stderr, "Agents of organization %s:\n", org.Slug)
		slug = linkChooseAgent(c, agents, "Link to which agent? (number or slug) ")
	}
	if i := slices.IndexFunc(agents, func(a cpAgent) bool { return a.Slug == slug }); i >= 0 {
		return agents[i], nil
	}
	slugs := make([]string, len(agents))
	for i, a := range agents {
		slugs[i] = a.Slug
	}
	return cpAgent{}, failf(codeNotFound, "pass --agent with one of: "+strings.Join(slugs, ", "),
		"no agent %q in organization %s; nothing was linked", slug, org.Slug)
}

// linkChooseAgent lists agents numbered on stderr, asks question and
// returns the slug answered: a listed number becomes its slug.
func linkChooseAgent(c *cmd, agents []cpAgent, question string) string {
	for i, a := range agents {
		fmt.Fprintf(c.stderr, "  %d. %s (%s)\n", i+1, a.Slug, a.Name)
	}
	answer := cliPrompt(c, question)
	if n, err := strconv.Atoi(answer); err == nil && n >= 1 && n <= len(agents) {
		return agents[n-1].Slug
	}
	return answer
}

// linkFailure turns a failure of the box or of the control plane's link
// route into the CLI's error: not_found keeps exit 4, auth exit 2, and the
// box's failures (unreachable, too old, mismatch, teaching refused) exit 1
// under their own code.
func linkFailure(err error) error {
	var be *linkBoxError
	if errors.As(err, &be) {
		return &cliError{Code: be.Code, Message: "svc link: " + be.Message + "; nothing was linked", Hint: linkHint(be.Code), Exit: 1, Err: err}
	}
	var ae *cpAPIError
	if errors.As(err, &ae) {
		ce := &cliError{Code: ae.Code, Message: "svc link: " + ae.Message, Hint: linkHint(ae.Code), Exit: 1, Err: err}
		if ae.Code == codeNotFound {
			ce.Exit = exitCodes[codeNotFound]
		}
		if !strings.Contains(ae.Message, "nothing was") {
			ce.Message += "; nothing was linked"
		}
		return ce
	}
	return err
}

// linkHint is what to do after a box failure of code.
func linkHint(code string) string {
	switch code {
	case linkCodeUnreachable:
		return "check --url: the box must be running and reachable from here and from the control plane"
	case linkCodeTooOld:
		return "deploy an image built from a newer svc, then run link again"
	case linkCodeMismatch:
		return "pass the secret the box printed on its first boot (or the HMAC_SECRET it runs with)"
	case linkCodeTeach:
		return "read the box's log for why it refused, then run link again"
	case linkCodeNotABox:
		return "point --url at the box's base URL (svc serve)"
	case cpCodeOutsideNetworks:
		return "deploy the box inside the control plane's " + cpNetworksEnv + ", or ask its operator to add the box's network"
	case linkCodeBusy:
		return "run link again in a few minutes; the box's log says which limit it reached"
	case linkCodeDatabaseDown:
		return "bring the box's PostgreSQL back (the box's log names the error), then run link again"
	}
	return ""
}

// cliPrompt writes question on stderr and reads one line of stdin, a byte
// at a time so later prompts read what follows.
func cliPrompt(c *cmd, question string) string {
	fmt.Fprint(c.stderr, question)
	var line []byte
	b := make([]byte, 1)
	for len(line) < 4096 {
		n, err := c.stdin.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if err != nil {
			break
		}
	}
	return strings.TrimSpace(string(line))
}

// linkWriteFile writes data to path (atomically, with perm) unless it
// already holds exactly data, and reports whether it wrote.
func linkWriteFile(path string, data []byte, perm os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	return true, writeFileAtomic(path, data, perm)
}

// linkPatchGitignore makes dir's .gitignore ignore .svc/* but keep
// .svc/migrations/ (committed, applied by the box): a line hiding the
// whole .svc directory is replaced; the two lines are added when absent.
func linkPatchGitignore(dir string) (bool, error) {
	path := filepath.Join(dir, ".gitignore")
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	var lines []string
	if len(old) > 0 {
		lines = strings.Split(strings.TrimSuffix(string(old), "\n"), "\n")
	}
	lines = slices.DeleteFunc(lines, func(l string) bool {
		switch strings.TrimSpace(l) {
		case ".svc", ".svc/", "/.svc", "/.svc/":
			return true
		}
		return false
	})
	for _, want := range []string{".svc/*", "!.svc/migrations/"} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.TrimSpace(l) == want }) {
			lines = append(lines, want)
		}
	}
	return linkWriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
