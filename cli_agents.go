package main

// Agent, API key and device verbs of a control plane (issue 20 items 3
// and 4): `svc agents list|create|rename|delete|deployment` and `svc keys
// list|create|revoke`, each in one organization (--org, else the one `svc
// login` saved; the output names it), and `svc devices list|revoke`, the
// signed-in user's own credentials on every machine and browser.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// agentsVerbs are the verbs of `svc agents`.
func agentsVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc agents list --org acme", summary: "list the organization's agents", newFlags: orgFlags("list"), run: runAgentsList},
		{name: "create", example: "svc agents create support --name \"Support Desk\"", summary: "create an agent (owners and admins)", usage: "<slug>", newFlags: newAgentCreateFlags, run: runAgentsCreate},
		{name: "rename", example: "svc agents rename support \"Support Desk EU\"", summary: "rename an agent (its slug stays)", usage: "<slug> <name>", newFlags: orgFlags("rename"), run: runAgentsRename},
		{name: "delete", example: "svc agents delete support --force", summary: "delete an agent; refused while a deployment is linked unless --force", usage: "<slug>", newFlags: newAgentDeleteFlags, run: runAgentsDelete},
		{name: "deployment", example: "svc agents deployment support", summary: "an agent's deployment, its status and every link (who, when, URL, tag)", usage: "<slug>", newFlags: orgFlags("deployment"), run: runAgentsDeployment},
	}
}

// keysVerbs are the verbs of `svc keys`.
func keysVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc keys list", summary: "list the organization's API keys (never the keys)", newFlags: orgFlags("list"), run: runKeysList},
		{name: "create", example: "svc keys create ci --expires 90d", summary: "create an API key; prints it once", usage: "<name>", newFlags: newKeyCreateFlags, run: runKeysCreate},
		{name: "revoke", example: "svc keys revoke ci", summary: "revoke an API key (its id, or its name): its next call is refused", usage: "<id|name>", newFlags: orgFlags("revoke"), run: runKeysRevoke},
	}
}

// devicesVerbs are the verbs of `svc devices`.
func devicesVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc devices list", summary: "list your live credentials: device, created, last used, expiry", newFlags: noFlags("list"), run: runDevicesList},
		{name: "revoke", example: "svc devices revoke cred_01HZX", summary: "revoke one of your credentials (its id): that device is signed out at once", usage: "<id>", newFlags: noFlags("revoke"), run: runDevicesRevoke},
	}
}

// newAgentCreateFlags defines the flags of `svc agents create`.
func newAgentCreateFlags() *flag.FlagSet {
	fs := orgFlags("create")()
	fs.String("name", "", fmt.Sprintf("the agent's display name, at most %d bytes (default: the slug)", cpNameMax))
	return fs
}

// newAgentDeleteFlags defines the flags of `svc agents delete`.
func newAgentDeleteFlags() *flag.FlagSet {
	fs := orgFlags("delete")()
	fs.Bool("force", false, "delete even while a deployment is linked: the control plane stops reaching it (the box keeps running)")
	return fs
}

// newKeyCreateFlags defines the flags of `svc keys create`.
func newKeyCreateFlags() *flag.FlagSet {
	fs := orgFlags("create")()
	fs.String("expires", "", fmt.Sprintf("when the key stops working: an RFC 3339 time or a duration from now (90m, 24h, 30d); at most %d days (default: never)", cpAPIKeyMaxLife/(24*time.Hour)))
	return fs
}

// agentPath is the path of agent slug of org.
func agentPath(org, slug string) string { return orgPath(org, "/agents/"+url.PathEscape(slug)) }

// cliTime formats an optional time for a table ("-": none).
func cliTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// runAgentsList is `svc agents list`.
func runAgentsList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("agents list takes no arguments: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	agents, err := cl.agents(ctx, org)
	if err != nil {
		return teamError(err, "check --org (svc whoami lists yours)")
	}
	out := struct {
		Organization string    `json:"organization"`
		Agents       []cpAgent `json:"agents"`
	}{org, agents}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "organization %s: %s\n", org, plural(len(agents), "agent"))
		for _, a := range agents {
			fmt.Fprintf(w, "  %-32s %s\n", a.Slug, a.Name)
		}
	})
	return nil
}

// runAgentsCreate is `svc agents create <slug> [--name N]`.
func runAgentsCreate(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("agents create takes one slug: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var a cpAgent
	body := map[string]string{"slug": fs.Arg(0), "name": fs.Lookup("name").Value.String()}
	if err := cl.call(ctx, http.MethodPost, orgPath(org, "/agents"), body, &a); err != nil {
		return teamError(err, "a slug is lowercase letters, digits and dashes; svc agents list shows the taken ones")
	}
	out := struct {
		Organization string `json:"organization"`
		cpAgent
	}{org, a}
	c.emit(out, func(w io.Writer) { fmt.Fprintf(w, "created agent %s (%s) in organization %s\n", a.Slug, a.Name, org) })
	return nil
}

// runAgentsRename is `svc agents rename <slug> <name>`.
func runAgentsRename(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 2 {
		return fmt.Errorf("agents rename takes a slug and a name: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		Organization string  `json:"organization"`
		Agent        cpAgent `json:"agent"`
	}
	if err := cl.call(ctx, http.MethodPatch, agentPath(org, fs.Arg(0)), map[string]string{"name": fs.Arg(1)}, &out); err != nil {
		return teamError(err, "svc agents list shows the agents")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "agent %s of organization %s is now named %s\n", out.Agent.Slug, org, out.Agent.Name)
	})
	return nil
}

// runAgentsDelete is `svc agents delete <slug> [--force]`.
func runAgentsDelete(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("agents delete takes one slug: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	path := agentPath(org, fs.Arg(0))
	if fs.Lookup("force").Value.String() == "true" {
		path += "?force=true"
	}
	var out struct {
		Organization string        `json:"organization"`
		Deleted      cpAgent       `json:"deleted"`
		Deployment   *cpDeployment `json:"deployment"` // the one --force dropped
	}
	if err := cl.call(ctx, http.MethodDelete, path, nil, &out); err != nil {
		return teamError(err, "svc agents deployment <slug> shows the deployment; --force deletes the agent anyway")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "deleted agent %s of organization %s", out.Deleted.Slug, org)
		if out.Deployment != nil {
			fmt.Fprintf(w, "; the control plane no longer reaches its deployment at %s (the box keeps running)", out.Deployment.URL)
		}
		fmt.Fprintln(w)
	})
	return nil
}

// runAgentsDeployment is `svc agents deployment <slug>`.
func runAgentsDeployment(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("agents deployment takes one slug: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var v cpDeploymentView
	if err := cl.call(ctx, http.MethodGet, agentPath(org, fs.Arg(0))+"/deployment/history", nil, &v); err != nil {
		return teamError(err, "svc agents list shows the agents")
	}
	c.emit(v, func(w io.Writer) {
		if v.Deployment == nil {
			fmt.Fprintf(w, "agent %s of organization %s has no deployment (svc link links one)\n", v.Agent.Slug, org)
		} else {
			d := v.Deployment
			fmt.Fprintf(w, "agent %s of organization %s: %s at %s, tag %s, last active %s\n", v.Agent.Slug, org, d.Status, d.URL, d.ImageTag, cliTime(d.LastActiveAt))
		}
		fmt.Fprintf(w, "%d links:\n", len(v.Links))
		for _, l := range v.Links {
			fmt.Fprintf(w, "  %s %-32s %s tag %s\n", l.At.Local().Format(time.DateTime), cmp.Or(l.Actor, l.ActorID), l.URL, l.ImageTag)
		}
	})
	return nil
}

// runKeysList is `svc keys list`.
func runKeysList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("keys list takes no arguments: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		Organization cpOrg      `json:"organization"`
		Keys         []cpAPIKey `json:"api_keys"`
	}
	if err := cl.call(ctx, http.MethodGet, orgPath(org, "/api-keys"), nil, &out); err != nil {
		return teamError(err, "owners and admins manage API keys")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "organization %s: %s\n", out.Organization.Slug, plural(len(out.Keys), "API key"))
		now := time.Now()
		for _, k := range out.Keys {
			expiry := "never expires"
			if k.ExpiresAt != nil {
				expiry = "expires " + cliTime(k.ExpiresAt)
				if !k.ExpiresAt.After(now) {
					expiry = "expired " + cliTime(k.ExpiresAt)
				}
			}
			fmt.Fprintf(w, "  %-16s %-24s by %s, created %s, last used %s, %s\n", k.ID, k.Name, cmp.Or(k.CreatedBy, "-"), k.CreatedAt.Local().Format(time.DateTime), cliTime(k.LastUsedAt), expiry)
		}
	})
	return nil
}

// runKeysCreate is `svc keys create <name> [--expires T]`.
func runKeysCreate(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("keys create takes one name: %w", errUsage)
	}
	body := map[string]any{"name": fs.Arg(0)}
	if v := fs.Lookup("expires").Value.String(); v != "" {
		t, err := cliUntil(v, time.Now())
		if err != nil {
			return err
		}
		body["expires_at"] = t.UTC().Format(time.RFC3339)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		cpAPIKey
		Organization string `json:"organization"`
		Key          string `json:"key"`
	}
	if err := cl.call(ctx, http.MethodPost, orgPath(org, "/api-keys"), body, &out); err != nil {
		return teamError(err, "svc keys create <name> [--expires 30d]")
	}
	expiry := "never expires"
	if out.ExpiresAt != nil {
		expiry = "expires " + cliTime(out.ExpiresAt)
	}
	slug := cmp.Or(org, out.Organization)
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "created API key %s (%s) in organization %s, %s\nthe key, shown only now: %s\n", out.Name, out.ID, slug, expiry, out.Key)
		fmt.Fprintf(w, "it calls the organization's agents through this control plane, as the chat wires' key: %s/%s/<agent>/openai/v1 (also /anthropic, /agui)\n", cl.url, slug)
	})
	return nil
}

// cliUntil parses a time ahead: an RFC 3339 time, or a duration from now
// (a Go duration, or whole days "30d").
func cliUntil(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	ago, err := auditSince(v, now)
	if err != nil {
		return ago, failf(codeGeneric, "e.g. --expires 30d, --expires 12h or --expires 2026-01-02T15:04:05Z", "--expires %q is neither a time nor a duration", v)
	}
	return now.Add(now.Sub(ago)), nil
}

// runKeysRevoke is `svc keys revoke <id|name>`.
func runKeysRevoke(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("keys revoke takes one key id or name: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		Organization string   `json:"organization"`
		Revoked      cpAPIKey `json:"revoked"`
	}
	if err := cl.call(ctx, http.MethodDelete, orgPath(org, "/api-keys/"+url.PathEscape(fs.Arg(0))), nil, &out); err != nil {
		return teamError(err, "svc keys list shows the keys and their ids")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "revoked API key %s (%s) of organization %s: its next call is refused\n", out.Revoked.Name, out.Revoked.ID, org)
	})
	return nil
}

// runDevicesList is `svc devices list`.
func runDevicesList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("devices list takes no arguments: %w", errUsage)
	}
	cl, _, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var out cpCredentialList
	if err := cl.call(ctx, http.MethodGet, "/api/credentials", nil, &out); err != nil {
		return err
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "%s: %s (each expires %s after its last use)\n", out.User.Email, plural(len(out.Credentials), "signed-in device"), time.Duration(out.TTLSeconds)*time.Second)
		for _, d := range out.Credentials {
			this := ""
			if d.Current {
				this = " (this one)"
			}
			fmt.Fprintf(w, "  %-16s %-7s %-24s created %s, last used %s, expires %s%s\n", d.ID, d.Kind, cmp.Or(d.Device, "-"), d.CreatedAt.Local().Format(time.DateTime), cliTime(d.LastUsedAt), d.ExpiresAt.Local().Format(time.DateTime), this)
		}
	})
	return nil
}

// runDevicesRevoke is `svc devices revoke <id>`.
func runDevicesRevoke(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("devices revoke takes one credential id (svc devices list): %w", errUsage)
	}
	cl, _, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var out struct {
		Revoked cpCredential `json:"revoked"`
	}
	if err := cl.call(ctx, http.MethodDelete, "/api/credentials/"+url.PathEscape(fs.Arg(0)), nil, &out); err != nil {
		return teamError(err, "svc devices list shows your credentials and their ids")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "revoked credential %s (%s)", out.Revoked.ID, cmp.Or(out.Revoked.Device, out.Revoked.Kind))
		if out.Revoked.Current {
			fmt.Fprint(w, ": it was this machine's; svc login signs in again")
		}
		fmt.Fprintln(w)
	})
	return nil
}
