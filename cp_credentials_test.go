package main

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// cpFreshCredential mints u a new credential of their own (a browser's
// one-time code spent on the CLI's route), as a second device would get.
func cpFreshCredential(t testing.TB, cp *cpProcess, cred string) string {
	t.Helper()
	var code cpNewSignInCode
	var signed cpSignedIn
	if httpJSONAuth(t, "POST", cp.url+"/api/login/codes", cred, nil, &code) != 201 ||
		httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": code.Code}, &signed) != 200 {
		t.Fatal("a fresh credential")
	}
	return signed.Credential
}

// cpWhoamiStatus is the status of GET /api/whoami with cred at base.
func cpWhoamiStatus(t testing.TB, base, cred string) int {
	t.Helper()
	return httpJSONAuth(t, "GET", base+"/api/whoami", cred, nil, nil)
}

// TestCPCredentialLife: a member's credentials, as the CLI (a subprocess)
// and the proxy see them on a control plane on PostgreSQL: `svc devices
// list` names each (the host the CLI reported), its creation, last use
// and expiry; `svc login` on the machine revokes the credential it
// replaces; `svc devices revoke` ends another device's at once (its next
// call, on a route or through the proxy, is 401); nobody lists or revokes
// another user's; a credential unused for the TTL (30 days by default,
// --credential-ttl on another control plane process of the same database)
// is refused; revocations are audited without the credential.
func TestCPCredentialLife(t *testing.T) {
	db := testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	owner := cpTeamOwner(t, cp, first)
	bob := cpTeamJoin(t, cp, "bob@example.com", owner.invite(t, "bob@example.com", "member"))
	host, _ := os.Hostname()

	var devs cpCredentialList
	bob.ok(t, &devs, "devices", "list")
	if len(devs.Credentials) != 1 || devs.User.Email != "bob@example.com" || devs.TTLSeconds != int64(cpCredentialTTLDefault.Seconds()) {
		t.Fatalf("devices list = %+v", devs)
	}
	d := devs.Credentials[0]
	if !d.Current || d.Kind != "cli" || d.Device != cpClientText(host, cpDeviceNameMax) || d.LastUsedAt == nil ||
		d.ExpiresAt.Sub(*d.LastUsedAt) != cpCredentialTTLDefault || d.CreatedAt.IsZero() {
		t.Fatalf("bob's credential = %+v (host %q)", d, host)
	}

	// svc login again on the machine: the old credential is revoked.
	old := bob.cred
	var id loginIdentity
	bob.ok(t, &id, "login", "--token", cpFreshCredential(t, cp, old))
	bob.cred = bob.savedCredential(t)
	if !id.Replaced || bob.cred == old {
		t.Fatalf("login on the same machine = %+v", id)
	}
	if st := cpWhoamiStatus(t, cp.url, old); st != http.StatusUnauthorized {
		t.Fatalf("the replaced credential = %d; want 401", st)
	}
	bob.ok(t, &devs, "devices", "list")
	if len(devs.Credentials) != 1 || !devs.Credentials[0].Current || devs.Credentials[0].ID == d.ID {
		t.Fatalf("devices after the new login = %+v", devs.Credentials)
	}

	// Another device of bob's, revoked from this one: its next calls are
	// 401, on a route and through the proxy (404 for an unknown agent
	// while it lives).
	other := cpFreshCredential(t, cp, bob.cred)
	proxied := func(cred string) int {
		resp, _ := cpProxyDo(t, http.DefaultClient, "GET", cp.url+"/default/nothing/api/workflows", "Authorization", "Bearer "+cred, nil)
		return resp.StatusCode
	}
	if st := proxied(other); st != http.StatusNotFound {
		t.Fatalf("the other device through the proxy = %d; want 404", st)
	}
	bob.ok(t, &devs, "devices", "list")
	var otherID string
	for _, c := range devs.Credentials {
		if !c.Current {
			otherID = c.ID
		}
	}
	if len(devs.Credentials) != 2 || otherID == "" {
		t.Fatalf("devices with a second one = %+v", devs.Credentials)
	}
	// The owner sees none of bob's, and cannot revoke them.
	var mine cpCredentialList
	owner.ok(t, &mine, "devices", "list")
	for _, c := range mine.Credentials {
		if c.ID == otherID || c.ID == devs.Credentials[0].ID {
			t.Fatalf("the owner's devices list bob's %s", c.ID)
		}
	}
	owner.refused(t, 4, codeNotFound, "devices", "revoke", otherID)
	if st := cpWhoamiStatus(t, cp.url, other); st != http.StatusOK {
		t.Fatalf("bob's other device after the owner's refused revoke = %d", st)
	}
	bob.ok(t, nil, "devices", "revoke", otherID)
	if st := cpWhoamiStatus(t, cp.url, other); st != http.StatusUnauthorized {
		t.Fatalf("a revoked device = %d; want 401", st)
	}
	if st := proxied(other); st != http.StatusUnauthorized {
		t.Fatalf("a revoked device through the proxy = %d; want 401", st)
	}
	bob.refused(t, 4, codeNotFound, "devices", "revoke", otherID)

	// Expiry: unused for the TTL, refused; the TTL is the control plane's.
	idle := cpFreshCredential(t, cp, bob.cred)
	cpTestExec(t, db, `UPDATE cp.credentials SET last_used_at = now() - interval '29 days' WHERE token_hash = $1`, cpHash(idle))
	if st := cpWhoamiStatus(t, cp.url, idle); st != http.StatusOK {
		t.Fatalf("a credential idle 29 days = %d; want 200", st)
	}
	cpTestExec(t, db, `UPDATE cp.credentials SET last_used_at = now() - interval '31 days' WHERE token_hash = $1`, cpHash(idle))
	if st := cpWhoamiStatus(t, cp.url, idle); st != http.StatusUnauthorized {
		t.Fatalf("a credential idle 31 days = %d; want 401", st)
	}
	if st := proxied(idle); st != http.StatusUnauthorized {
		t.Fatalf("a credential idle 31 days through the proxy = %d; want 401", st)
	}
	cpTestExec(t, db, `UPDATE cp.credentials SET last_used_at = now() - interval '31 days' WHERE token_hash = $1`, cpHash(bob.cred))
	bob.refused(t, 2, codeAuth, "whoami")

	var ready cpReady
	startEnvelopeProcess(t, baseEnv("DATABASE_URL="+db, "SVC_MASTER_KEY="+cpTestMasterKey, "XDG_CONFIG_HOME="+t.TempDir()),
		&ready, "--json", "control-plane", "--addr", "127.0.0.1:0", "--credential-ttl", "1h")
	hourIdle := cpFreshCredential(t, cp, owner.cred)
	cpTestExec(t, db, `UPDATE cp.credentials SET last_used_at = now() - interval '2 hours' WHERE token_hash = $1`, cpHash(hourIdle))
	if st := cpWhoamiStatus(t, ready.URL, hourIdle); st != http.StatusUnauthorized {
		t.Fatalf("idle 2 hours on a control plane of --credential-ttl 1h = %d; want 401", st)
	}
	if st := cpWhoamiStatus(t, cp.url, hourIdle); st != http.StatusOK {
		t.Fatalf("idle 2 hours on the default control plane = %d; want 200", st)
	}
	out, _, code := cli(t, t.TempDir(), baseEnv("DATABASE_URL="+db), "--json", "control-plane", "--credential-ttl", "1s")
	if env := cpEnvelope(t, out, nil); code != 1 || !strings.Contains(env.Error.Message, "--credential-ttl") {
		t.Fatalf("control-plane --credential-ttl 1s = %d %s", code, out)
	}

	// Audited, never the credential.
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE action = 'credential.revoked' AND actor = 'bob@example.com' AND detail LIKE $1`, "%"+otherID+"%"); n != 1 {
		t.Fatalf("credential.revoked rows = %d", n)
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE action = 'signout' AND actor = 'bob@example.com'`); n != 1 {
		t.Fatalf("the replaced credential's signout rows = %d", n)
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE detail LIKE '%svc_cred_%' OR target LIKE '%svc_cred_%'`); n != 0 {
		t.Fatalf("%d audit rows hold a credential", n)
	}
}
