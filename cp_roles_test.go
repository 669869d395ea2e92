package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// cpRoleSample is the request a row of TestCPRoleRoutes sends to a route.
type cpRoleSample struct {
	method, path string
	body         any        // JSON
	form         url.Values // or a form
	fresh        bool       // with a credential minted for this request (the route revokes it)
}

// cpRoleRow is who may call a route (the test's own copy of the rule) and
// the request that calls it as a user u whose local-dev installation of
// agent demo is inst.
type cpRoleRow struct {
	access cpAccess
	sample func(inst string) cpRoleSample
}

// cpRoleTable is a row for every route of the control plane.
var cpRoleTable = map[string]cpRoleRow{
	"GET " + identJWKS:             {cpPublic, nil},
	"POST /api/login/device":       {cpPublic, nil},
	"POST /api/login/device/token": {cpPublic, nil},
	"POST /api/login/code":         {cpPublic, nil},
	"POST /api/login/invitation":   {cpPublic, nil},
	"GET /device":                  {cpPublic, nil},
	"POST /device/sign-in":         {cpPublic, nil},
	"GET /oidc/start":              {cpPublic, nil},
	"GET /oidc/callback":           {cpPublic, nil},
	"GET /dev/{installation}":      {cpPublic, nil},
	"GET /dev/console/{file...}":   {cpPublic, nil},
	"GET /box/console/{file...}":   {cpPublic, nil},
	"GET /team/{org}":              {cpPublic, nil},
	"GET /team/team.js":            {cpPublic, nil},
	"POST /api/login/codes":        {cpUserOnly, func(string) cpRoleSample { return cpRoleSample{method: "POST", path: "/api/login/codes"} }},
	"POST /api/login/device/approve": {cpUserOnly, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/login/device/approve", body: map[string]string{"user_code": "BCDF-GHJK"}}
	}},
	"POST /api/logout": {cpUserOnly, func(string) cpRoleSample { return cpRoleSample{method: "POST", path: "/api/logout", fresh: true} }},
	"GET /api/whoami":  {cpUserOnly, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/whoami"} }},
	"GET /api/orgs":    {cpUserOnly, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs"} }},
	"POST /api/orgs": {cpUserOnly, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/orgs", body: map[string]string{"slug": "Bad Slug"}}
	}},
	"PATCH /api/orgs/{org}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "PATCH", path: "/api/orgs/default", body: map[string]string{"name": ""}}
	}},
	"GET /api/orgs/{org}/agents": {cpMember, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs/default/agents"} }},
	"POST /api/orgs/{org}/agents": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/orgs/default/agents", body: map[string]string{"slug": "Bad Slug"}}
	}},
	"GET /api/orgs/{org}/api-keys": {cpAdmin, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs/default/api-keys"} }},
	"POST /api/orgs/{org}/api-keys": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/orgs/default/api-keys", body: map[string]string{"name": ""}}
	}},
	"GET /api/orgs/{org}/members":     {cpMember, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs/default/members"} }},
	"GET /api/orgs/{org}/invitations": {cpAdmin, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs/default/invitations"} }},
	"POST /api/orgs/{org}/invitations": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/orgs/default/invitations", body: map[string]string{"email": "bad", "role": "member"}}
	}},
	"GET /api/orgs/{org}/audit":        {cpAdmin, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs/default/audit"} }},
	"GET /api/orgs/{org}/audit/verify": {cpAdmin, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/orgs/default/audit/verify"} }},
	"PATCH /api/orgs/{org}/members/{member}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "PATCH", path: "/api/orgs/default/members/ghost@example.com", body: map[string]string{"role": "member"}}
	}},
	"DELETE /api/orgs/{org}/members/{member}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "DELETE", path: "/api/orgs/default/members/ghost@example.com"}
	}},
	"DELETE /api/orgs/{org}/invitations/{id}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "DELETE", path: "/api/orgs/default/invitations/inv_none"}
	}},
	"POST /api/orgs/{org}/agents/{agent}/local-dev-installation": {cpMember, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/orgs/default/agents/demo/local-dev-installation"}
	}},
	"GET /api/orgs/{org}/agents/{agent}/deployment": {cpMember, func(string) cpRoleSample {
		return cpRoleSample{method: "GET", path: "/api/orgs/default/agents/demo/deployment"}
	}},
	"POST /api/orgs/{org}/agents/{agent}/link": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/orgs/default/agents/demo/link", body: map[string]string{}}
	}},
	"PATCH /api/orgs/{org}/agents/{agent}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "PATCH", path: "/api/orgs/default/agents/demo", body: map[string]string{"name": "\x00"}}
	}},
	// Agent keep has a deployment: the delete is refused (409), so no
	// caller deletes it.
	"DELETE /api/orgs/{org}/agents/{agent}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "DELETE", path: "/api/orgs/default/agents/keep"}
	}},
	"GET /api/orgs/{org}/agents/{agent}/deployment/history": {cpMember, func(string) cpRoleSample {
		return cpRoleSample{method: "GET", path: "/api/orgs/default/agents/keep/deployment/history"}
	}},
	"DELETE /api/orgs/{org}/api-keys/{id}": {cpAdmin, func(string) cpRoleSample {
		return cpRoleSample{method: "DELETE", path: "/api/orgs/default/api-keys/key_none"}
	}},
	"GET /api/credentials": {cpUserOnly, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/api/credentials"} }},
	"DELETE /api/credentials/{id}": {cpUserOnly, func(string) cpRoleSample {
		return cpRoleSample{method: "DELETE", path: "/api/credentials/crd_none"}
	}},
	"POST /api/installations/{id}/resolve": {cpMember, func(inst string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/installations/" + inst + "/resolve"}
	}},
	"POST /api/installations/{id}/token": {cpMember, func(inst string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/installations/" + inst + "/token"}
	}},
	"POST /api/installations/{id}/tunnel": {cpMember, func(inst string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/api/installations/" + inst + "/tunnel"}
	}},
	"POST /device/approve": {cpUserOnly, func(string) cpRoleSample {
		return cpRoleSample{method: "POST", path: "/device/approve", form: url.Values{"user_code": {"BCDF-GHJK"}, "decision": {"deny"}}}
	}},
	// ?reloaded: a browser without the console cookie is sent to sign in.
	"GET /box/{installation}": {cpMember, func(inst string) cpRoleSample {
		return cpRoleSample{method: "GET", path: "/box/" + inst + "?reloaded"}
	}},
	"/{org}/{agent}/{path...}": {cpMember, func(string) cpRoleSample { return cpRoleSample{method: "GET", path: "/default/demo/api/workflows"} }},
}

// TestCPRoleRoutes sends every role (owner, admin, member, a stranger who
// belongs to another organization only, and nobody) to every route of the
// control plane's route table, and wants each refused exactly when its
// rule says (401 for nobody; 403, or 404 not_found as if the organization
// did not exist, for a role too low or a stranger). A route without a row
// here, or with another rule than its row's, fails the test. The refusals
// are audited and the chain stays intact.
func TestCPRoleRoutes(t *testing.T) {
	seen := map[string]bool{}
	for _, rt := range (&cpServer{}).routes() {
		key := strings.TrimSpace(rt.method + " " + rt.path)
		seen[key] = true
		row, ok := cpRoleTable[key]
		switch {
		case !ok:
			t.Errorf("route %s has no row in cpRoleTable: give it an access rule and a sample request", key)
		case row.access != rt.access:
			t.Errorf("route %s: access %d in the route table, %d in cpRoleTable", key, rt.access, row.access)
		case row.access != cpPublic && row.sample == nil:
			t.Errorf("route %s: no sample request", key)
		}
	}
	for key := range cpRoleTable {
		if !seen[key] {
			t.Errorf("cpRoleTable has a row for %s, which is no route", key)
		}
	}
	if t.Failed() {
		return
	}

	db := testPostgresURL(t)
	cp, first := startTestControlPlane(t, db)
	owner := cpTeamOwner(t, cp, first)
	admin := cpTeamJoin(t, cp, "ada@example.com", owner.invite(t, "ada@example.com", "admin"))
	member := cpTeamJoin(t, cp, "bob@example.com", owner.invite(t, "bob@example.com", "member"))
	cpTestExec(t, db, `INSERT INTO cp.organizations (id, slug, name) VALUES ('org_other', 'other', 'Other')`)
	cpTestExec(t, db, `INSERT INTO cp.memberships (org_id, user_id, role) SELECT 'org_other', id, 'owner' FROM cp.users WHERE email = 'admin'`)
	stranger := cpTeamJoin(t, cp, "eve@example.com", owner.invite(t, "eve@example.com", "owner", "--org", "other"))
	for _, slug := range []string{"demo", "keep"} {
		if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents", owner.cred, map[string]string{"slug": slug}, nil); st != 201 {
			t.Fatalf("create agent %s = %d", slug, st)
		}
	}
	cpTestRecordDeployment(t, db, "keep", "http://127.0.0.1:9", []byte("a-signing-secret-of-32-bytes-or-more"))
	inst := map[*cpTeamUser]string{}
	for _, u := range []*cpTeamUser{owner, admin, member} {
		var in cpInstallation
		if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents/demo/local-dev-installation", u.cred, nil, &in); st != 200 {
			t.Fatalf("%s's local-dev installation = %d", u.email, st)
		}
		inst[u] = in.ID
	}
	inst[stranger], inst[nil] = inst[owner], inst[owner]

	// fresh mints u a credential of its own for a route that revokes it.
	fresh := func(u *cpTeamUser) string {
		var code cpNewSignInCode
		var cred cpSignedIn
		if httpJSONAuth(t, "POST", cp.url+"/api/login/codes", u.cred, nil, &code) != 201 ||
			httpJSONAuth(t, "POST", cp.url+"/api/login/code", "", map[string]string{"code": code.Code}, &cred) != 200 {
			t.Fatalf("a fresh credential for %s", u.email)
		}
		return cred.Credential
	}
	send := func(u *cpTeamUser, s cpRoleSample) (int, string) {
		var body io.Reader
		ctype := "application/json"
		switch {
		case s.form != nil:
			body, ctype = strings.NewReader(s.form.Encode()), "application/x-www-form-urlencoded"
		case s.body != nil:
			b, _ := json.Marshal(s.body)
			body = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(s.method, cp.url+s.path, body)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Origin", cp.url)
		if u != nil {
			cred := u.cred
			if s.fresh {
				cred = fresh(u)
			}
			req.Header.Set("Authorization", "Bearer "+cred)
			req.AddCookie(&http.Cookie{Name: cpCookie, Value: cred})
		}
		resp, err := cpNoRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var e struct{ Error apiError }
		json.Unmarshal(raw, &e)
		if resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), cpConsoleSignIn) {
			return http.StatusUnauthorized, "sent to sign in"
		}
		return resp.StatusCode, e.Error.Code
	}

	type caller struct {
		name string
		u    *cpTeamUser
		rank int // 0 nobody, -1 a stranger to the organization
	}
	callers := []caller{{"owner", owner, 3}, {"admin", admin, 2}, {"member", member, 1}, {"stranger", stranger, -1}, {"nobody", nil, 0}}
	for key, row := range cpRoleTable {
		if row.access == cpPublic {
			continue
		}
		for _, c := range callers {
			st, code := send(c.u, row.sample(inst[c.u]))
			refused := st == http.StatusUnauthorized
			want := c.u == nil
			if row.access != cpUserOnly {
				refused = refused || st == http.StatusForbidden || (st == http.StatusNotFound && code == codeNotFound)
				want = c.rank < cpRoleRank(row.access.role())
			}
			if refused != want {
				t.Errorf("%s as %s = %d %s; want refused %v", key, c.name, st, code, want)
			}
		}
	}

	var v cpAuditVerdict
	if st := httpJSONAuth(t, "GET", cp.url+"/api/orgs/default/audit/verify", owner.cred, nil, &v); st != 200 || !v.OK {
		t.Fatalf("audit verify = %d %+v", st, v)
	}
	for what, q := range map[string]string{
		"the member's refusals":                    `SELECT count(*) FROM cp.audit_log WHERE action = 'route.refused' AND actor = 'bob@example.com' AND outcome = 'refused'`,
		"the stranger's refused proxy call, named": `SELECT count(*) FROM cp.audit_log a JOIN cp.users u ON u.id = a.actor_id WHERE a.action = 'proxy.refused' AND u.email = 'eve@example.com' AND a.actor = 'eve@example.com'`,
		"the sign-outs":                            `SELECT count(*) FROM cp.audit_log WHERE action = 'signout' AND actor = 'ada@example.com'`,
	} {
		if n := cpTestCount(t, db, q); n == 0 {
			t.Errorf("%s are not in the audit log", what)
		}
	}
}
