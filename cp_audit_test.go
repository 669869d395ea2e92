package main

import (
	"strings"
	"testing"
	"time"
)

// TestCPAuditLog: sign-ins (and a failed one), invitations, joins, an
// agent, an API key, a refused route, a role change and a removal are in
// the audit log with actor, time, organization, target and source, and no
// secret anywhere in it; `svc audit` reads it for owners and admins only,
// --since filters it; `svc audit verify` passes, then fails naming the row
// after a row is changed in PostgreSQL, after a row is removed, and after
// the last row is removed.
func TestCPAuditLog(t *testing.T) {
	db := testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	if st := httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": "BCDF-BCDF-BCDF-BCDF"}, nil); st != 401 {
		t.Fatalf("a wrong sign-in code = %d; want 401", st)
	}
	owner := cpTeamOwner(t, cp, first)
	adaCode := owner.invite(t, "ada@example.com", "admin")
	ada := cpTeamJoin(t, cp, "ada@example.com", adaCode)
	bobCode := ada.invite(t, "bob@example.com", "admin")
	bob := cpTeamJoin(t, cp, "bob@example.com", bobCode)
	if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents", owner.cred, map[string]string{"slug": "demo"}, nil); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	var key struct{ Key string }
	if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/api-keys", ada.cred, map[string]string{"name": "ci"}, &key); st != 201 || key.Key == "" {
		t.Fatalf("create API key = %d", st)
	}
	ada.ok(t, nil, "members", "role", "bob@example.com", "member")
	bob.refused(t, 1, "forbidden", "audit")
	ada.ok(t, nil, "members", "remove", "bob@example.com")

	var log struct {
		Organization cpOrg
		Entries      []cpAuditRow
	}
	owner.ok(t, &log, "audit")
	byAction := map[string]cpAuditRow{} // the first of each action and actor
	for _, e := range log.Entries {
		if _, ok := byAction[e.Action+" "+e.Actor]; !ok {
			byAction[e.Action+" "+e.Actor] = e
		}
		if e.Source != "127.0.0.1" || e.At.IsZero() || e.Hash == "" || (e.OrganizationID != "" && e.OrganizationID != log.Organization.ID) {
			t.Errorf("audit entry %+v: want the source address, a time, a hash and this organization", e)
		}
	}
	for action, want := range map[string]string{
		"signin.failed": "", "signin": "admin", "member.invited": "admin", "member.joined": "ada@example.com",
		"agent.created": "admin", "api_key.created": "ada@example.com", "route.refused": "bob@example.com",
		"member.role": "ada@example.com", "member.removed": "ada@example.com",
	} {
		if _, ok := byAction[action+" "+want]; !ok {
			t.Errorf("audit: no %s by %q in %+v", action, want, log.Entries)
		}
	}
	if e := byAction["member.removed ada@example.com"]; e.Target != "bob@example.com" || e.OrganizationID != log.Organization.ID {
		t.Errorf("member.removed = %+v; want target bob in organization default", e)
	}
	var adaLog struct{ Entries []cpAuditRow }
	ada.ok(t, &adaLog, "audit")
	for _, e := range adaLog.Entries {
		if e.ActorID == "" {
			t.Errorf("an admin reads %+v, which names nobody: those rows are the owners'", e)
		}
	}
	if len(adaLog.Entries) == 0 {
		t.Errorf("an admin reads no audit entry")
	}

	for _, secret := range []string{first, cpNormalizeCode(first), owner.cred, adaCode, cpNormalizeCode(adaCode), bobCode, ada.cred, bob.cred, key.Key} {
		if n := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log a WHERE position($1 in a::text) > 0`, secret); n != 0 {
			t.Errorf("a secret %.12s… is in %d audit rows", secret, n)
		}
	}

	var recent struct{ Entries []cpAuditRow }
	owner.ok(t, &recent, "audit", "--since", "1h")
	if len(recent.Entries) != len(log.Entries) {
		t.Errorf("audit --since 1h = %d entries; want %d", len(recent.Entries), len(log.Entries))
	}
	owner.ok(t, &recent, "audit", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if len(recent.Entries) != 0 {
		t.Errorf("audit --since <in an hour> = %d entries; want none", len(recent.Entries))
	}
	owner.refused(t, 1, codeGeneric, "audit", "--since", "yesterday")

	verify := func(wantRow string) {
		t.Helper()
		out, stderr, code := owner.run(t, "audit", "verify")
		env := cpEnvelope(t, out, nil)
		if wantRow == "" {
			if code != 0 || !env.OK {
				t.Fatalf("audit verify = %d %s %s; want intact", code, out, stderr)
			}
			return
		}
		if code != 1 || env.OK || env.Error.Code != "audit_tampered" || !strings.Contains(env.Error.Message, wantRow) {
			t.Fatalf("audit verify = %d %s; want exit 1 audit_tampered naming %q", code, out, wantRow)
		}
	}
	verify("")
	cpTestExec(t, db, `CREATE TABLE public.audit_saved AS SELECT * FROM cp.audit_log`)
	restore := func() {
		cpTestExec(t, db, `DELETE FROM cp.audit_log`)
		cpTestExec(t, db, `INSERT INTO cp.audit_log SELECT * FROM public.audit_saved`)
	}

	cpTestExec(t, db, `UPDATE cp.audit_log SET actor = 'someone-else' WHERE seq = 3`)
	verify("row 3 was changed")
	restore()
	verify("")
	// A tamperer who also rewrites the row's own hash breaks the next link.
	store := openTestCPStore(t, db)
	var r cpAuditRow
	var prev []byte
	if err := store.db.QueryRow(t.Context(), `SELECT `+cpAuditColumns+`, prev_hash FROM cp.audit_log WHERE seq = 3`).
		Scan(&r.Seq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &prev); err != nil {
		t.Fatal(err)
	}
	r.Actor = "someone-else"
	cpTestExec(t, db, `UPDATE cp.audit_log SET actor = $1, hash = $2 WHERE seq = 3`, r.Actor, cpAuditDigest(prev, r))
	verify("row 4 does not chain to row 3: row 3 was changed")
	restore()
	verify("")
	cpTestExec(t, db, `DELETE FROM cp.audit_log WHERE seq = 4`)
	verify("row 4 is missing")
	restore()
	cpTestExec(t, db, `DELETE FROM cp.audit_log WHERE seq = (SELECT max(seq) FROM cp.audit_log)`)
	verify("removed from its end")
}
