package main

import (
	"strings"
	"testing"
)

// TestCPOrgsCLI drives `svc orgs` against a control plane on PostgreSQL
// (issue 38, item C): any signed-in user creates an organization and owns
// it; slugs taken, reserved or malformed are refused; owners and admins
// rename theirs, members cannot; svc whoami and svc orgs list name every
// organization with the role in it; each change is in the organization's
// own audit log, and a non-member's probe of an organization is kept in
// that organization's log, not in the prober's own.
func TestCPOrgsCLI(t *testing.T) {
	_, _, owner, admin, member := cpTeamOfThree(t)
	var o cpOrg
	owner.ok(t, &o, "orgs", "create", "acme-eu", "--name", "Acme Europe")
	if o.Slug != "acme-eu" || o.Name != "Acme Europe" || o.Role != cpRoleOwner || !strings.HasPrefix(o.ID, "org_") {
		t.Fatalf("orgs create = %+v", o)
	}
	owner.refused(t, 1, "conflict", "orgs", "create", "acme-eu")
	owner.refused(t, 1, "invalid", "orgs", "create", "api")
	owner.refused(t, 1, "invalid", "orgs", "create", "Bad Slug")
	member.ok(t, nil, "orgs", "create", "bobs")
	var list struct {
		Organizations []cpOrg `json:"organizations"`
	}
	member.ok(t, &list, "orgs", "list")
	roles := map[string]string{}
	for _, o := range list.Organizations {
		roles[o.Slug] = o.Role
	}
	if len(roles) != 2 || roles["default"] != cpRoleMember || roles["bobs"] != cpRoleOwner {
		t.Fatalf("orgs list of a member who made one = %v", roles)
	}
	out, _, code := cli(t, t.TempDir(), member.env, "whoami")
	if code != 0 || !strings.Contains(out, "bob@example.com at ") || !strings.Contains(out, "* default") || !strings.Contains(out, "  bobs ") {
		t.Errorf("whoami = %d:\n%s\nwant every organization, the saved one marked", code, out)
	}

	// Renames: owners and admins; members are refused; the slug stays.
	member.refused(t, 1, "forbidden", "orgs", "rename", "default", "Mine")
	admin.ok(t, &o, "orgs", "rename", "default", "Default Team")
	if o.Slug != "default" || o.Name != "Default Team" {
		t.Errorf("orgs rename = %+v", o)
	}
	owner.refused(t, 1, "invalid", "orgs", "rename", "default", "bell\a")
	member.refused(t, 4, codeNotFound, "orgs", "rename", "acme-eu", "Mine")

	// The audit: each organization's own changes, and the member's probes
	// of acme-eu (the rename above, this list: refusals of one kind close
	// together are summed, cp_audit_refusals.go) in acme-eu's log, not in
	// default's.
	member.refused(t, 4, codeNotFound, "members", "list", "--org", "acme-eu")
	var log struct {
		Entries []cpAuditRow `json:"entries"`
	}
	owner.ok(t, &log, "audit", "--org", "acme-eu")
	var created, probed bool
	for _, e := range log.Entries {
		created = created || (e.Action == "org.created" && e.Target == "acme-eu" && e.Actor == "admin")
		probed = probed || (e.Action == "route.refused" && e.Actor == "bob@example.com" && strings.Contains(e.Target, "/api/orgs/acme-eu"))
	}
	if !created || !probed {
		t.Errorf("acme-eu's audit log = %+v; want org.created by its owner and bob's refused probe", log.Entries)
	}
	owner.ok(t, &log, "audit")
	var renamed bool
	for _, e := range log.Entries {
		renamed = renamed || (e.Action == "org.renamed" && e.Actor == "ada@example.com" && strings.Contains(e.Detail, `"default" to "Default Team"`))
		if e.Action == "route.refused" && strings.Contains(e.Target, "acme-eu") {
			t.Errorf("default's audit log holds the probe of acme-eu: %+v", e)
		}
	}
	if !renamed {
		t.Errorf("default's audit log = %+v; want org.renamed by ada", log.Entries)
	}
}
