package main

// `svc orgs list|create|rename` (issue 38, item C): the signed-in user's
// organizations, a new one (its creator its owner), and a new name for
// one (owners and admins); the slug never changes.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
)

// orgsVerbs are the verbs of `svc orgs`.
func orgsVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc orgs list", summary: "list your organizations and your role in each (the one svc login saved is marked)", newFlags: noFlags("list"), run: runOrgsList},
		{name: "create", example: `svc orgs create acme-eu --name "Acme Europe"`, summary: "create an organization; you are its owner", usage: "<slug>", newFlags: newOrgCreateFlags, run: runOrgsCreate},
		{name: "rename", example: `svc orgs rename acme-eu "Acme EU"`, summary: "rename an organization (owners and admins; its slug stays)", usage: "<slug> <name>", newFlags: noFlags("rename"), run: runOrgsRename},
	}
}

// newOrgCreateFlags defines the flags of `svc orgs create`.
func newOrgCreateFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	fs.String("name", "", fmt.Sprintf("the organization's display name, at most %d bytes (default: the slug)", cpNameMax))
	return fs
}

// runOrgsList is `svc orgs list`.
func runOrgsList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("orgs list takes no arguments: %w", errUsage)
	}
	cl, creds, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var out struct {
		Organizations []cpOrg `json:"organizations"`
	}
	if err := cl.call(ctx, http.MethodGet, "/api/orgs", nil, &out); err != nil {
		return teamError(err, "run svc login again")
	}
	c.emit(out, func(w io.Writer) { printOrgs(w, out.Organizations, creds.Organization) })
	return nil
}

// printOrgs prints organizations with the role in each, marking saved.
func printOrgs(w io.Writer, orgs []cpOrg, saved *cpOrg) {
	for _, o := range orgs {
		mark := " "
		if saved != nil && saved.ID == o.ID {
			mark = "*"
		}
		fmt.Fprintf(w, "%s %-24s %-8s %s\n", mark, o.Slug, o.Role, o.Name)
	}
	if saved != nil {
		fmt.Fprintln(w, "(* the one svc login saved: team verbs act in it unless --org says otherwise)")
	}
}

// runOrgsCreate is `svc orgs create <slug> [--name N]`.
func runOrgsCreate(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("orgs create takes one slug: %w", errUsage)
	}
	if err := cpCheckOrgSlug(fs.Arg(0)); err != nil {
		return failf("invalid", "pick a slug of lowercase letters, digits and dashes", "%v; nothing was created", err)
	}
	cl, _, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var o cpOrg
	if err := cl.call(ctx, http.MethodPost, "/api/orgs", map[string]string{"slug": fs.Arg(0), "name": fs.Lookup("name").Value.String()}, &o); err != nil {
		return teamError(err, "svc orgs list shows yours")
	}
	c.emit(o, func(w io.Writer) {
		fmt.Fprintf(w, "Created organization %s (%s); you are its owner.\n  svc members invite <email> --org %s\n", o.Slug, o.Name, o.Slug)
	})
	return nil
}

// runOrgsRename is `svc orgs rename <slug> <name>`.
func runOrgsRename(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 2 {
		return fmt.Errorf("orgs rename takes a slug and a name: %w", errUsage)
	}
	cl, _, err := requireSignIn(c)
	if err != nil {
		return err
	}
	var o cpOrg
	if err := cl.call(ctx, http.MethodPatch, orgPath(fs.Arg(0), ""), map[string]string{"name": fs.Arg(1)}, &o); err != nil {
		return teamError(err, "svc orgs list shows yours")
	}
	c.emit(o, func(w io.Writer) { fmt.Fprintf(w, "Organization %s is now named %s.\n", o.Slug, o.Name) })
	return nil
}
