package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPTeamPageInChromium drives the team page (/team/default) in
// headless Chromium (conformance/team.test.mjs) against a real control
// plane whose owner and member the CLI made: a member sees the members
// and the agents only; the owner is refused a hostile email, invites,
// reads the audit log and its verification, removes the member, is
// refused the delete of a linked agent, creates and renames an agent,
// creates an API key with an expiry and revokes it, which the store and
// the audit log then show. Screenshots go to conformance/artifacts/.
func TestCPTeamPageInChromium(t *testing.T) {
	if _, err := os.Stat(consoleChromium); err != nil {
		t.Fatalf("console tests need Debian's chromium at %s (apt-get install -y chromium; .ci/run installs it): %v", consoleChromium, err)
	}
	db := testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	owner := cpTeamOwner(t, cp, first)
	bob := cpTeamJoin(t, cp, "bob@example.com", owner.invite(t, "bob@example.com", "member"))
	owner.ok(t, nil, "agents", "create", "demo")
	cpTestRecordDeployment(t, db, "demo", "http://127.0.0.1:9", []byte("a-signing-secret-of-32-bytes-or-more"))
	var ownerCode, bobCode cpNewSignInCode
	owner.ok(t, &ownerCode, "login", "--browser")
	bob.ok(t, &bobCode, "login", "--browser")
	artifacts, err := filepath.Abs(filepath.Join("conformance", "artifacts", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(artifacts)
	runConformance(t, "conformance/team.test.mjs", []string{"SVC_CP_URL=" + cp.url, "SVC_OWNER_CODE=" + ownerCode.Code, "SVC_MEMBER_CODE=" + bobCode.Code, "SVC_ARTIFACTS=" + artifacts})

	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.invitations WHERE email = 'carol@example.com' AND role = 'admin' AND used_at IS NULL`); n != 1 {
		t.Errorf("carol's invitation from the page: %d rows", n)
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.memberships m JOIN cp.users u ON u.id = m.user_id WHERE u.email = 'bob@example.com'`); n != 0 {
		t.Errorf("bob is still a member after his removal on the page")
	}
	bob.refused(t, 2, codeAuth, "whoami")
	for what, q := range map[string]string{
		"the linked agent":             `SELECT count(*) FROM cp.deployments d JOIN cp.agents a ON a.id = d.agent_id WHERE a.slug = 'demo'`,
		"the agent renamed":            `SELECT count(*) FROM cp.agents WHERE slug = 'support' AND name = 'Support Desk'`,
		"the key revoked, with expiry": `SELECT count(*) FROM cp.api_keys WHERE name = 'page-key' AND revoked_at IS NOT NULL AND expires_at > now() + interval '29 days'`,
	} {
		if n := cpTestCount(t, db, q); n != 1 {
			t.Errorf("%s: %d rows", what, n)
		}
	}
	var log struct{ Entries []cpAuditRow }
	owner.ok(t, &log, "audit")
	var seen []string
	for _, e := range log.Entries {
		if e.Actor == "admin" && e.Source == "127.0.0.1" && (e.Action == "member.invited" && e.Target == "carol@example.com" || e.Action == "member.removed" && e.Target == "bob@example.com") {
			seen = append(seen, e.Action)
		}
	}
	if strings.Join(seen, " ") != "member.invited member.removed" {
		t.Errorf("the page's invitation and removal in the audit log: %v", seen)
	}
}
