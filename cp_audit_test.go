package main

import (
	"fmt"
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
	if _, ok := byAction["signin.failed "]; ok {
		t.Errorf("a failed sign-in that names nobody is in organization default's log: it is no organization's")
	}
	for action, want := range map[string]string{
		"signin": "admin", "member.invited": "admin", "member.joined": "ada@example.com",
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
	cpTestExec(t, db, `CREATE TABLE public.heads_saved AS SELECT * FROM cp.audit_heads`)
	restore := func() {
		cpTestExec(t, db, `DELETE FROM cp.audit_log`)
		cpTestExec(t, db, `INSERT INTO cp.audit_log SELECT * FROM public.audit_saved`)
	}

	org := log.Organization.ID
	at := func(n int) string { return fmt.Sprintf("org_id = '%s' AND chain_seq = %d", org, n) }
	cpTestExec(t, db, `UPDATE cp.audit_log SET actor = 'someone-else' WHERE `+at(3))
	verify("row 3 does not match its hash")
	restore()
	verify("")
	// A tamperer with the database alone (issue 36, item 11) rewrites a
	// row and rehashes it, every row after it and the head, by the old
	// unkeyed rule and under a guessed key: verify still fails at that row.
	store := openTestCPStore(t, db)
	for _, key := range [][]byte{nil, make([]byte, 32)} {
		rows, err := store.db.Query(t.Context(), `SELECT `+cpAuditColumns+`, prev_hash FROM cp.audit_log WHERE org_id = $1 AND chain_seq >= 3 ORDER BY chain_seq`, org)
		if err != nil {
			t.Fatal(err)
		}
		var chain []cpAuditRow
		var prev []byte
		for rows.Next() {
			var r cpAuditRow
			var p []byte
			if err := rows.Scan(&r.Seq, &r.ChainSeq, &r.At, &r.OrganizationID, &r.ActorID, &r.Actor, &r.Action, &r.Outcome, &r.Target, &r.Source, &r.Detail, &p); err != nil {
				t.Fatal(err)
			}
			if prev == nil {
				prev = p
			}
			chain = append(chain, r)
		}
		rows.Close()
		chain[0].Actor = "someone-else"
		for _, r := range chain {
			h := cpAuditDigest(key, prev, r.ChainSeq, r)
			cpTestExec(t, db, `UPDATE cp.audit_log SET actor = $1, prev_hash = $2, hash = $3 WHERE seq = $4`, r.Actor, prev, h, r.Seq)
			prev = h
		}
		cpTestExec(t, db, `UPDATE cp.audit_heads SET hash = $2 WHERE org_id = $1`, org, prev)
		verify("row 3 does not match its hash under this control plane's key")
		cpTestExec(t, db, `DELETE FROM cp.audit_heads`)
		cpTestExec(t, db, `INSERT INTO cp.audit_heads SELECT * FROM public.heads_saved`)
		restore()
		verify("")
	}
	cpTestExec(t, db, `DELETE FROM cp.audit_log WHERE `+at(4))
	verify("row 4 is missing")
	restore()
	cpTestExec(t, db, `DELETE FROM cp.audit_log WHERE org_id = $1 AND chain_seq = (SELECT max(chain_seq) FROM cp.audit_log WHERE org_id = $1)`, org)
	verify("removed from its end")
	restore()

	// verify counts the organization's own rows (issue 36, item 13).
	var v cpAuditVerdict
	owner.ok(t, &v, "audit", "verify")
	if want := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE org_id = $1`, org); v.Rows != int64(want) || want == 0 {
		t.Errorf("audit verify counts %d rows; want the organization's %d", v.Rows, want)
	}
}

// TestCPAuditFlood is issue 36, items 10 and 13, as a member did it: 60
// refused routes write one row, and the count of the rest one more when
// the window closes (here at shutdown); a member's 20 browser sign-in
// codes leave at most cpSignInCodesMax rows; `svc audit` pages back
// through 250 more rows and --all reads them all; an admin cannot revoke
// an owner's pending invitation of an owner.
func TestCPAuditFlood(t *testing.T) {
	db, cp, owner, ada, bob := cpTeamOfThree(t)

	for range 60 {
		if st := httpJSONAuth(t, "GET", cp.url+"/api/orgs/default/audit", bob.cred, nil, nil); st != 403 {
			t.Fatalf("a member reading the audit log = %d; want 403", st)
		}
	}
	refusals := func() int {
		return cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE action = 'route.refused' AND actor = 'bob@example.com'`)
	}
	if n := refusals(); n != 1 {
		t.Errorf("60 refusals of one member wrote %d rows; want 1 until its window closes", n)
	}

	for range 20 {
		if st := httpJSONAuth(t, "POST", cp.url+"/api/login/codes", bob.cred, nil, nil); st != 200 && st != 201 {
			t.Fatalf("POST /api/login/codes = %d", st)
		}
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.signin_codes c JOIN cp.users u ON u.id = c.user_id WHERE u.email = 'bob@example.com'`); n > cpSignInCodesMax {
		t.Errorf("a member's 20 sign-in codes left %d rows; want at most %d", n, cpSignInCodesMax)
	}

	owner.invite(t, "carol@example.com", "owner")
	ada.refused(t, 1, "forbidden", "members", "uninvite", "carol@example.com")
	owner.ok(t, nil, "members", "uninvite", "carol@example.com")

	store := openTestCPStore(t, db)
	var org string
	if err := store.db.QueryRow(t.Context(), `SELECT id FROM cp.organizations WHERE slug = 'default'`).Scan(&org); err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		if err := store.appendAudit(t.Context(), cpAuditEvent{Org: org, ActorID: "u", Actor: "filler", Action: "test.filler", Outcome: cpAuditOK, Target: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var page struct {
		Entries    []cpAuditRow `json:"entries"`
		NextBefore int64        `json:"next_before"`
	}
	owner.ok(t, &page, "audit", "--limit", "100")
	if len(page.Entries) != 100 || page.NextBefore == 0 || page.Entries[0].Seq != page.NextBefore {
		t.Fatalf("audit --limit 100 = %d entries, next_before %d; want 100 and the cursor of the page before", len(page.Entries), page.NextBefore)
	}
	var older struct{ Entries []cpAuditRow }
	owner.ok(t, &older, "audit", "--limit", "100", "--before", fmt.Sprint(page.NextBefore))
	if len(older.Entries) != 100 || older.Entries[len(older.Entries)-1].Seq >= page.NextBefore {
		t.Errorf("the page before = %d entries ending at %d; want 100 older than %d", len(older.Entries), older.Entries[len(older.Entries)-1].Seq, page.NextBefore)
	}
	var all struct{ Entries []cpAuditRow }
	owner.ok(t, &all, "audit", "--all")
	want := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE org_id = $1 OR (org_id = '' AND actor_id <> '' AND actor_id IN (SELECT user_id FROM cp.memberships WHERE org_id = $1))`, org)
	if len(all.Entries) != want || want < 250 {
		t.Errorf("audit --all = %d entries; want all %d", len(all.Entries), want)
	}
	for i := 1; i < len(all.Entries); i++ {
		if all.Entries[i].Seq <= all.Entries[i-1].Seq {
			t.Fatalf("audit --all is not oldest first at %d", i)
		}
	}

	cp.stop() // the refusals' window closes with the process
	var detail string
	if err := store.db.QueryRow(t.Context(), `SELECT detail FROM cp.audit_log WHERE action = 'route.refused' AND actor = 'bob@example.com' ORDER BY seq DESC LIMIT 1`).Scan(&detail); err != nil {
		t.Fatal(err)
	}
	if n := refusals(); n != 2 || !strings.Contains(detail, "repeated 59 more times") {
		t.Errorf("after shutdown: %d rows, the last saying %q; want 2, the second counting the 59 others", n, detail)
	}
	if v, err := store.verifyAudit(t.Context(), org); err != nil || !v.OK {
		t.Errorf("verify after the flood = %+v %v", v, err)
	}
}

// TestCPAuditChainsApart: an append holding one organization's chain (its
// transaction open) does not hold another organization's appends, and
// holds its own organization's next one until it commits (issue 36, item
// 10).
func TestCPAuditChainsApart(t *testing.T) {
	store := openTestCPStore(t, testPostgresURL(t))
	ctx := t.Context()
	tx, err := store.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := store.auditAppend(ctx, tx, cpAuditEvent{Org: "org-a", Action: "test.held", Outcome: cpAuditOK}); err != nil {
		t.Fatal(err)
	}
	appended := func(org string) chan error {
		done := make(chan error, 1)
		go func() {
			done <- store.appendAudit(ctx, cpAuditEvent{Org: org, Action: "test.next", Outcome: cpAuditOK})
		}()
		return done
	}
	select {
	case err := <-appended("org-b"):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append to organization b waited for organization a's open transaction")
	}
	sameOrg := appended("org-a")
	select {
	case <-sameOrg:
		t.Fatal("an append to organization a did not wait for a's open transaction: its chain would fork")
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sameOrg; err != nil {
		t.Fatal(err)
	}
	for _, org := range []string{"org-a", "org-b"} {
		if v, err := store.verifyAudit(ctx, org); err != nil || !v.OK || v.Rows != map[string]int64{"org-a": 2, "org-b": 1}[org] {
			t.Errorf("verify %s = %+v %v", org, v, err)
		}
	}
}

// TestCPAuditRechain: a log of before issue 36 (one unkeyed chain across
// organizations) is re-chained at the first boot into keyed chains of each
// organization that verify; an edit made before the upgrade is reported.
func TestCPAuditRechain(t *testing.T) {
	db := testPostgresURL(t)
	openTestCPStore(t, db).close() // the schema
	prev := cpAuditGenesis
	for i, org := range []string{"org-a", "org-b", "org-a", ""} {
		r := cpAuditRow{Seq: int64(i + 1), At: time.Now().UTC().Truncate(time.Microsecond), OrganizationID: org, Action: "old.row", Outcome: cpAuditOK}
		h := cpAuditDigest(nil, prev, r.Seq, r)
		cpTestExec(t, db, `INSERT INTO cp.audit_log (seq, at, org_id, actor_id, actor, action, outcome, target, source, detail, prev_hash, hash)
			VALUES ($1, $2, $3, '', '', $4, $5, '', '', '', $6, $7)`, r.Seq, r.At, org, r.Action, r.Outcome, prev, h)
		prev = h
	}
	cpTestExec(t, db, `DELETE FROM cp.audit_heads`)
	store := openTestCPStore(t, db)
	if !strings.Contains(store.rechained, "re-chained 4") || !strings.Contains(store.rechained, "held") || strings.Contains(store.rechained, "NOT") {
		t.Errorf("re-chain said %q", store.rechained)
	}
	for org, n := range map[string]int64{"org-a": 2, "org-b": 1, "": 1} {
		if v, err := store.verifyAudit(t.Context(), org); err != nil || !v.OK || v.Rows != n {
			t.Errorf("verify %q after the re-chain = %+v %v; want %d rows intact", org, v, err, n)
		}
	}
	if err := store.appendAudit(t.Context(), cpAuditEvent{Org: "org-a", Action: "new.row", Outcome: cpAuditOK}); err != nil {
		t.Fatal(err)
	}
	if v, _ := store.verifyAudit(t.Context(), "org-a"); !v.OK || v.Rows != 3 {
		t.Errorf("verify after a new row = %+v", v)
	}
	if again := openTestCPStore(t, db); again.rechained != "" {
		t.Errorf("the second boot re-chained again: %q", again.rechained)
	}
}
