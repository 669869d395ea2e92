package main

// Team verbs of a control plane (issue 20): `svc members list|invite|role|
// remove|invitations|uninvite` and `svc audit [verify]`, each in one
// organization: --org, else the one `svc login` saved; the output names it.
// `svc login --invitation` (cli_login.go) accepts an invitation.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// membersVerbs are the verbs of `svc members`.
func membersVerbs() []*verb {
	return []*verb{
		{name: "list", example: "svc members list", summary: "list the organization's members and their roles", newFlags: orgFlags("list"), run: runMembersList},
		{name: "invite", example: "svc members invite ada@example.com --role admin", summary: "invite an email with a role; prints the one-time code to hand over (valid 7 days)", usage: "<email>", newFlags: newInviteFlags, run: runMembersInvite},
		{name: "role", example: "svc members role ada@example.com member", summary: "change a member's role (owner, admin, member)", usage: "<email> <role>", newFlags: orgFlags("role"), run: runMembersRole},
		{name: "remove", example: "svc members remove ada@example.com", summary: "remove a member: their access to the organization ends at once", usage: "<email>", newFlags: orgFlags("remove"), run: runMembersRemove},
		{name: "invitations", example: "svc members invitations", summary: "list the pending invitations", newFlags: orgFlags("invitations"), run: runMembersInvitations},
		{name: "uninvite", example: "svc members uninvite ada@example.com", summary: "revoke a pending invitation (its email or id)", usage: "<email|id>", newFlags: orgFlags("uninvite"), run: runMembersUninvite},
	}
}

// orgFlags returns a constructor of the flag set of a verb acting in one
// organization.
func orgFlags(name string) func() *flag.FlagSet {
	return func() *flag.FlagSet {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.String("org", "", "the organization (slug) to act in (default: the one svc login saved)")
		return fs
	}
}

// newInviteFlags defines the flags of `svc members invite`.
func newInviteFlags() *flag.FlagSet {
	fs := orgFlags("invite")()
	fs.String("role", cpRoleMember, "the role the invited person gets: owner, admin or member")
	return fs
}

// teamClient is a signed-in client and the organization a team verb acts
// in: --org, else the saved one.
func teamClient(c *cmd, fs *flag.FlagSet) (*cpClient, string, error) {
	cl, creds, err := requireSignIn(c)
	if err != nil {
		return nil, "", err
	}
	org := fs.Lookup("org").Value.String()
	if org == "" && creds.Organization != nil {
		org = creds.Organization.Slug
	}
	if org == "" {
		return nil, "", failf(codeGeneric, "pass --org <slug> (svc whoami lists yours)", "no organization chosen and none saved by svc login")
	}
	if !cpSlugPattern.MatchString(org) {
		return nil, "", failf(codeGeneric, "pass an organization's slug (svc whoami lists yours)", "--org %q is not a slug", org)
	}
	return cl, org, nil
}

// teamError turns a control plane's refusal into the verb's error: 404 is
// not_found (exit 4), 401 stays auth (exit 2), any other keeps its code
// (exit 1).
func teamError(err error, hint string) error {
	var ae *cpAPIError
	if !errors.As(err, &ae) {
		return err
	}
	code := ae.Code
	if ae.Status == http.StatusNotFound {
		code = codeNotFound
	}
	if ae.Status == http.StatusForbidden {
		hint = "ask an owner or admin of the organization"
	}
	return &cliError{Code: code, Message: ae.Message, Hint: hint, Err: err}
}

// orgPath is /api/orgs/<org><rest>.
func orgPath(org, rest string) string { return "/api/orgs/" + url.PathEscape(org) + rest }

// runMembersList is `svc members list`.
func runMembersList(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("members list takes no arguments: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		Organization cpOrg            `json:"organization"`
		Members      []cpMemberRecord `json:"members"`
	}
	if err := cl.call(ctx, http.MethodGet, orgPath(org, "/members"), nil, &out); err != nil {
		return teamError(err, "check --org (svc whoami lists yours)")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "organization %s: %s\n", out.Organization.Slug, plural(len(out.Members), "member"))
		for _, m := range out.Members {
			fmt.Fprintf(w, "  %-40s %-7s joined %s\n", m.Email, m.Role, m.JoinedAt.Local().Format(time.DateOnly))
		}
	})
	return nil
}

// runMembersInvite is `svc members invite <email> --role R`.
func runMembersInvite(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("members invite takes one email: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var inv cpNewInvitation
	body := map[string]string{"email": fs.Arg(0), "role": fs.Lookup("role").Value.String()}
	if err := cl.call(ctx, http.MethodPost, orgPath(org, "/invitations"), body, &inv); err != nil {
		return teamError(err, "svc members invite <email> --role owner|admin|member")
	}
	c.emit(inv, func(w io.Writer) {
		fmt.Fprintf(w, "invited %s into organization %s as %s, until %s\nhand them this one-time code (it works once; nobody else may see it): %s\nthey run: %s\n",
			inv.Email, inv.Organization.Slug, inv.Role, inv.ExpiresAt.Local().Format(time.DateTime), inv.Code, inv.Accept)
	})
	return nil
}

// memberPath is the path of member ref (an email or a user id) of org.
func memberPath(org, ref string) string { return orgPath(org, "/members/"+url.PathEscape(ref)) }

// runMembersRole is `svc members role <email> <role>`.
func runMembersRole(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 2 {
		return fmt.Errorf("members role takes an email and a role: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var m cpMemberRecord
	if err := cl.call(ctx, http.MethodPatch, memberPath(org, fs.Arg(0)), map[string]string{"role": fs.Arg(1)}, &m); err != nil {
		return teamError(err, "svc members list shows the members and their roles")
	}
	out := struct {
		Organization string `json:"organization"`
		cpMemberRecord
	}{org, m}
	c.emit(out, func(w io.Writer) { fmt.Fprintf(w, "%s is now %s of organization %s\n", m.Email, m.Role, org) })
	return nil
}

// runMembersRemove is `svc members remove <email>`.
func runMembersRemove(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("members remove takes one email: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		Organization string         `json:"organization"`
		Removed      cpMemberRecord `json:"removed"`
		Revoked      int64          `json:"revoked_credentials"`
	}
	if err := cl.call(ctx, http.MethodDelete, memberPath(org, fs.Arg(0)), nil, &out); err != nil {
		return teamError(err, "svc members list shows the members")
	}
	out.Organization = org
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "removed %s from organization %s", out.Removed.Email, org)
		if out.Revoked > 0 {
			fmt.Fprintf(w, "; they belong to no organization now: %d credentials revoked", out.Revoked)
		}
		fmt.Fprintln(w)
	})
	return nil
}

// runMembersInvitations is `svc members invitations`.
func runMembersInvitations(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("members invitations takes no arguments: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	var out struct {
		Organization cpOrg          `json:"organization"`
		Invitations  []cpInvitation `json:"invitations"`
	}
	if err := cl.call(ctx, http.MethodGet, orgPath(org, "/invitations"), nil, &out); err != nil {
		return teamError(err, "check --org (svc whoami lists yours)")
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "organization %s: %s\n", out.Organization.Slug, plural(len(out.Invitations), "pending invitation"))
		for _, i := range out.Invitations {
			fmt.Fprintf(w, "  %-40s %-7s by %s, until %s (%s)\n", i.Email, i.Role, i.InvitedBy, i.ExpiresAt.Local().Format(time.DateTime), i.ID)
		}
	})
	return nil
}

// runMembersUninvite is `svc members uninvite <email|id>`.
func runMembersUninvite(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 1 {
		return fmt.Errorf("members uninvite takes one email or invitation id: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	if err := cl.call(ctx, http.MethodDelete, orgPath(org, "/invitations/"+url.PathEscape(fs.Arg(0))), nil, nil); err != nil {
		return teamError(err, "svc members invitations lists the pending ones")
	}
	out := map[string]any{"organization": org, "revoked": fs.Arg(0)}
	c.emit(out, func(w io.Writer) { fmt.Fprintf(w, "revoked the invitation of %s in organization %s\n", fs.Arg(0), org) })
	return nil
}

// newAuditFlags defines the flags of `svc audit`.
func newAuditFlags() *flag.FlagSet {
	fs := orgFlags("audit")()
	fs.String("since", "", "only entries from this time on: RFC 3339 (2026-01-02T15:04:05Z) or an age (90m, 24h, 7d)")
	fs.Int("limit", cpAuditListDefault, fmt.Sprintf("at most this many entries, the newest (1 to %d)", cpAuditListMax))
	fs.Int64("before", 0, "only entries older than this one (a seq: the next_before a page ends with), to page back")
	fs.Bool("all", false, "every entry, paging back through the whole log (with --since: back to that time)")
	return fs
}

// auditSince parses --since: an RFC 3339 time, or an age before now (a Go
// duration, or whole days "7d").
func auditSince(v string, now time.Time) (time.Time, error) {
	if t, err := runQueryTime(v, now); err == nil {
		return t, nil
	}
	return time.Time{}, failf(codeGeneric, "e.g. --since 24h, --since 7d or --since 2026-01-02T15:04:05Z", "--since %q is neither a time nor an age", v)
}

// runAudit is `svc audit [verify]`: the organization's audit entries, or a
// verification of the whole chain (exit 1 when it fails, naming the row).
func runAudit(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	verify := fs.NArg() == 1 && fs.Arg(0) == "verify"
	if fs.NArg() > 1 || (fs.NArg() == 1 && !verify) {
		return fmt.Errorf("audit takes nothing or verify: %w", errUsage)
	}
	cl, org, err := teamClient(c, fs)
	if err != nil {
		return err
	}
	if verify {
		return auditVerify(ctx, c, cl, org)
	}
	q := url.Values{"limit": {fs.Lookup("limit").Value.String()}}
	if v := fs.Lookup("since").Value.String(); v != "" {
		t, err := auditSince(v, time.Now())
		if err != nil {
			return err
		}
		q.Set("since", t.UTC().Format(time.RFC3339Nano))
	}
	all := fs.Lookup("all").Value.String() == "true"
	if all {
		q.Set("limit", strconv.Itoa(cpAuditListMax))
	}
	before := fs.Lookup("before").Value.String()
	var out struct {
		Organization cpOrg        `json:"organization"`
		Entries      []cpAuditRow `json:"entries"`
		NextBefore   int64        `json:"next_before,omitempty"`
	}
	for range cpAuditPagesMax {
		if before != "0" {
			q.Set("before", before)
		}
		var page struct {
			Organization cpOrg        `json:"organization"`
			Entries      []cpAuditRow `json:"entries"`
			NextBefore   int64        `json:"next_before"`
		}
		if err := cl.call(ctx, http.MethodGet, orgPath(org, "/audit")+"?"+q.Encode(), nil, &page); err != nil {
			return teamError(err, "owners and admins read the audit log")
		}
		out.Organization, out.NextBefore = page.Organization, page.NextBefore
		out.Entries = append(page.Entries, out.Entries...) // older pages go first
		if !all || page.NextBefore == 0 {
			break
		}
		before = strconv.FormatInt(page.NextBefore, 10)
	}
	c.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "organization %s: %s\n", out.Organization.Slug, plural(len(out.Entries), "audit entry"))
		for _, e := range out.Entries {
			actor := cmp.Or(e.Actor, e.ActorID, "-")
			fmt.Fprintf(w, "%6d %s %-24s %-7s %s -> %s from %s", e.Seq, e.At.Local().Format(time.DateTime), e.Action, e.Outcome, actor, cmp.Or(e.Target, "-"), cmp.Or(e.Source, "-"))
			if e.Detail != "" {
				fmt.Fprintf(w, " (%s)", e.Detail)
			}
			fmt.Fprintln(w)
		}
		if out.NextBefore != 0 {
			fmt.Fprintf(w, "older entries: svc audit --before %d (or --all)\n", out.NextBefore)
		}
	})
	return nil
}

// cpAuditPagesMax bounds the pages `svc audit --all` reads (a million rows).
const cpAuditPagesMax = 1000

// auditVerify is `svc audit verify`.
func auditVerify(ctx context.Context, c *cmd, cl *cpClient, org string) error {
	var v cpAuditVerdict
	if err := cl.call(ctx, http.MethodGet, orgPath(org, "/audit/verify"), nil, &v); err != nil {
		return teamError(err, "owners and admins verify the audit log")
	}
	if !v.OK {
		return failf("audit_tampered", "restore the audit log from a backup and find who could write to the control plane's database",
			"the audit log was tampered with: %s", v.Problem)
	}
	c.emit(v, func(w io.Writer) {
		fmt.Fprintf(w, "the audit log is intact: %d rows, head row %d hash %s at %s (keep both elsewhere to compare later)\n", v.Rows, v.HeadSeq, v.HeadHash, v.At.Format(time.RFC3339))
	})
	return nil
}
