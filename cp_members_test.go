package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// cpTeamUser is a user of a test control plane with a CLI configuration
// directory of their own.
type cpTeamUser struct {
	email, cred string
	env         []string
}

// run runs `svc --json args...` as u and returns stdout, stderr and the
// exit code.
func (u *cpTeamUser) run(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	return cli(t, t.TempDir(), u.env, append([]string{"--json"}, args...)...)
}

// ok runs `svc --json args...` as u, wants exit 0 and decodes the
// envelope's data into data.
func (u *cpTeamUser) ok(t testing.TB, data any, args ...string) {
	t.Helper()
	out, stderr, code := u.run(t, args...)
	if code != 0 || !cpEnvelope(t, out, data).OK {
		t.Fatalf("%s: svc %s = %d %s %s", u.email, strings.Join(args, " "), code, out, stderr)
	}
}

// refused runs `svc --json args...` as u and wants exit code exit with the
// envelope's error code.
func (u *cpTeamUser) refused(t testing.TB, exit int, code string, args ...string) {
	t.Helper()
	out, stderr, got := u.run(t, args...)
	if env := cpEnvelope(t, out, nil); got != exit || env.OK || env.Error.Code != code {
		t.Fatalf("%s: svc %s = %d %s %s; want exit %d %s", u.email, strings.Join(args, " "), got, out, stderr, exit, code)
	}
}

// newCPTeamUser is a user with a fresh configuration directory.
func newCPTeamUser(t testing.TB, email string) *cpTeamUser {
	return &cpTeamUser{email: email, env: baseEnv("XDG_CONFIG_HOME=" + t.TempDir())}
}

// savedCredential reads the credential `svc login` saved for u.
func (u *cpTeamUser) savedCredential(t testing.TB) string {
	t.Helper()
	var creds loginCredentials
	for _, e := range u.env {
		if dir, ok := strings.CutPrefix(e, "XDG_CONFIG_HOME="); ok {
			b, _ := os.ReadFile(filepath.Join(dir, "svc", "credentials.json"))
			json.Unmarshal(b, &creds)
		}
	}
	return creds.Credential
}

// cpTeamOwner signs the first boot's admin (owner of "default") in on the
// CLI with the first boot's code.
func cpTeamOwner(t testing.TB, cp *cpProcess, code string) *cpTeamUser {
	t.Helper()
	u := newCPTeamUser(t, "admin")
	u.cred = cpSignInAdmin(t, cp, code)
	u.ok(t, nil, "login", "--control-plane", cp.url, "--token", u.cred)
	return u
}

// cpTeamOfThree starts a control plane on a fresh database with its owner
// (admin), an admin ada and a member bob signed in on the CLI.
func cpTeamOfThree(t testing.TB) (db string, cp *cpProcess, owner, admin, member *cpTeamUser) {
	t.Helper()
	db = testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	owner = cpTeamOwner(t, cp, first)
	admin = cpTeamJoin(t, cp, "ada@example.com", owner.invite(t, "ada@example.com", "admin"))
	member = cpTeamJoin(t, cp, "bob@example.com", owner.invite(t, "bob@example.com", "member"))
	return db, cp, owner, admin, member
}

// invite has by invite email with role (extra: more flags) and returns
// the invitation's code.
func (by *cpTeamUser) invite(t testing.TB, email, role string, extra ...string) string {
	t.Helper()
	var inv cpNewInvitation
	by.ok(t, &inv, append([]string{"members", "invite", email, "--role", role}, extra...)...)
	if inv.Code == "" || inv.Email != email || inv.Role != role || !strings.Contains(inv.Accept, "--invitation "+inv.Code) {
		t.Fatalf("invite %s: %+v", email, inv)
	}
	return inv.Code
}

// cpTeamJoin signs a new user in with an invitation's code on the CLI.
func cpTeamJoin(t testing.TB, cp *cpProcess, email, code string) *cpTeamUser {
	t.Helper()
	u := newCPTeamUser(t, email)
	var id loginIdentity
	u.ok(t, &id, "login", "--control-plane", cp.url, "--invitation", code)
	if id.User.Email != email || id.Organization == nil {
		t.Fatalf("login --invitation as %s: %+v", email, id)
	}
	u.cred = u.savedCredential(t)
	return u
}

// cpTestExec runs one statement on the database dbURL.
func cpTestExec(t testing.TB, dbURL, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// cpTestCount runs a count query on the database dbURL.
func cpTestCount(t testing.TB, dbURL, sql string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestCPMembers: an owner invites by email with a role; the invited person
// signs in with the one-time code on the CLI (once; never when expired;
// stored hashed); hostile emails and roles are refused; an admin cannot
// make or touch owners, a member cannot invite; the last owner stays one;
// removal ends the removed member's CLI and browser sessions and their
// local-dev installation at once (401, no identity token); a user of two
// organizations picks one with --org, and removal from one leaves the
// other.
func TestCPMembers(t *testing.T) {
	db := testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	owner := cpTeamOwner(t, cp, first)

	for _, bad := range [][]string{
		{"not-an-email", "member"}, {"Ada <ada@example.com>", "member"}, {"ada@example.com\nx", "member"},
		{strings.Repeat("a", 250) + "@example.com", "member"}, {"ada@example.com", "god"}, {"ada@example.com", ""},
	} {
		owner.refused(t, 1, "invalid", "members", "invite", bad[0], "--role", bad[1])
	}

	code := owner.invite(t, "ada@example.com", "admin")
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.invitations WHERE code_hash = $1 AND email = 'ada@example.com'`, cpHash(cpNormalizeCode(code))); n != 1 {
		t.Fatalf("the invitation's code is not stored as its hash (%d rows)", n)
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.invitations i WHERE position($1 in i::text) > 0 OR position($2 in i::text) > 0`, code, cpNormalizeCode(code)); n != 0 {
		t.Fatalf("the invitation's code is stored in the clear")
	}
	ada := cpTeamJoin(t, cp, "ada@example.com", code)
	newCPTeamUser(t, "thief").refused(t, 2, codeAuth, "login", "--control-plane", cp.url, "--invitation", code)

	expired := owner.invite(t, "late@example.com", "member")
	cpTestExec(t, db, `UPDATE cp.invitations SET expires_at = now() - interval '1 second' WHERE email = 'late@example.com'`)
	newCPTeamUser(t, "late").refused(t, 2, codeAuth, "login", "--control-plane", cp.url, "--invitation", expired)

	// An admin invites members and admins, never owners.
	ada.refused(t, 1, "forbidden", "members", "invite", "carl@example.com", "--role", "owner")
	bob := cpTeamJoin(t, cp, "bob@example.com", ada.invite(t, "bob@example.com", "member"))
	bob.refused(t, 1, "forbidden", "members", "invite", "eve@example.com", "--role", "member")
	owner.refused(t, 1, "conflict", "members", "invite", "bob@example.com", "--role", "admin")

	var list struct {
		Organization cpOrg
		Members      []cpMemberRecord
	}
	bob.ok(t, &list, "members", "list")
	roles := map[string]string{}
	for _, m := range list.Members {
		roles[m.Email] = m.Role
	}
	if list.Organization.Slug != "default" || len(roles) != 3 || roles["admin"] != "owner" || roles["ada@example.com"] != "admin" || roles["bob@example.com"] != "member" {
		t.Fatalf("members list = %+v", list)
	}

	// Roles: an admin cannot touch an owner; the last owner stays one.
	ada.refused(t, 1, "forbidden", "members", "role", "admin", "member")
	ada.refused(t, 1, "forbidden", "members", "remove", "admin")
	ada.refused(t, 1, "forbidden", "members", "role", "bob@example.com", "owner")
	owner.refused(t, 1, "last_owner", "members", "role", "admin", "admin")
	owner.refused(t, 1, "invalid", "members", "role", "bob@example.com", "root")
	owner.refused(t, 4, codeNotFound, "members", "role", "nobody@example.com", "admin")
	ada.ok(t, nil, "members", "role", "bob@example.com", "admin")
	bob.ok(t, nil, "members", "invitations")
	ada.ok(t, nil, "members", "role", "bob@example.com", "member")
	bob.refused(t, 1, "forbidden", "members", "invitations")

	// Bob works on an agent (svc dev's installation, an identity token) and
	// signs a browser in; his removal ends all of it at once.
	org := cp.url + "/api/orgs/default"
	if st := httpJSONAuth(t, "POST", org+"/agents", owner.cred, map[string]string{"slug": "demo"}, nil); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	var local cpInstallation
	if st := httpJSONAuth(t, "POST", org+"/agents/demo/local-dev-installation", bob.cred, nil, &local); st != 200 {
		t.Fatalf("bob's local-dev installation = %d", st)
	}
	if st := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/token", bob.cred, nil, nil); st != 200 {
		t.Fatalf("bob's identity token = %d", st)
	}
	var browser cpNewSignInCode
	bob.ok(t, &browser, "login", "--browser")
	var console cpSignedIn
	if st := httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": browser.Code}, &console); st != 200 {
		t.Fatalf("bob's browser sign-in = %d", st)
	}
	cookieWhoami := func() int {
		resp, _ := cpConsoleSend(t, cp.url, "GET", "/api/whoami", console.Credential, "", nil)
		return resp.StatusCode
	}
	if st := cookieWhoami(); st != 200 {
		t.Fatalf("bob's browser session = %d", st)
	}
	var removed struct {
		Removed cpMemberRecord
		Revoked int64 `json:"revoked_credentials"`
	}
	ada.ok(t, &removed, "members", "remove", "bob@example.com")
	if removed.Removed.Email != "bob@example.com" || removed.Revoked < 2 {
		t.Fatalf("remove bob = %+v; want his CLI and browser credentials revoked", removed)
	}
	bob.refused(t, 2, codeAuth, "whoami")
	if st := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/token", bob.cred, nil, nil); st != 401 {
		t.Fatalf("bob's identity token after removal = %d; want 401", st)
	}
	if st := cookieWhoami(); st != 401 {
		t.Fatalf("bob's browser session after removal = %d; want 401", st)
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.installations WHERE id = $1`, local.ID); n != 0 {
		t.Fatalf("bob's local-dev installation outlived his removal")
	}
	ada.refused(t, 4, codeNotFound, "members", "remove", "bob@example.com")

	// Two organizations: carl joins both, the CLI acts in the one picked.
	cpTestExec(t, db, `INSERT INTO cp.organizations (id, slug, name) VALUES ('org_other', 'other', 'Other')`)
	cpTestExec(t, db, `INSERT INTO cp.memberships (org_id, user_id, role) SELECT 'org_other', id, 'owner' FROM cp.users WHERE email = 'admin'`)
	carl := cpTeamJoin(t, cp, "carl@example.com", owner.invite(t, "carl@example.com", "member"))
	second := owner.invite(t, "carl@example.com", "admin", "--org", "other")
	newCPTeamUser(t, "thief").refused(t, 2, codeAuth, "login", "--control-plane", cp.url, "--invitation", second)
	var id loginIdentity
	carl.ok(t, &id, "login", "--control-plane", cp.url, "--invitation", second)
	if id.Organization == nil || id.Organization.Slug != "other" || id.Organization.Role != "admin" || len(id.Organizations) != 2 || carl.savedCredential(t) != carl.cred {
		t.Fatalf("carl's second invitation = %+v; want organization other saved, as admin, with his own credential", id)
	}
	carl.ok(t, &list, "members", "list")
	if list.Organization.Slug != "other" {
		t.Fatalf("members list with the saved default = %+v; want organization other", list.Organization)
	}
	carl.ok(t, &list, "members", "list", "--org", "default")
	if list.Organization.Slug != "default" {
		t.Fatalf("members list --org default = %+v", list.Organization)
	}
	if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/other/agents", owner.cred, map[string]string{"slug": "helper"}, nil); st != 201 {
		t.Fatalf("create agent in other = %d", st)
	}
	var carlsLocal cpInstallation
	if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/other/agents/helper/local-dev-installation", carl.cred, nil, &carlsLocal); st != 200 {
		t.Fatalf("carl's local-dev installation in other = %d", st)
	}
	owner.ok(t, nil, "members", "remove", "carl@example.com", "--org", "other")
	carl.refused(t, 4, codeNotFound, "members", "list", "--org", "other")
	for _, route := range []string{"token", "tunnel", "resolve"} {
		if st := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+carlsLocal.ID+"/"+route, carl.cred, nil, nil); st != 404 {
			t.Errorf("carl's %s in other after his removal from it = %d; want 404", route, st)
		}
	}
	carl.ok(t, &list, "members", "list", "--org", "default")
	newCPTeamUser(t, "nobody").refused(t, 2, codeAuth, "members", "list")
}
