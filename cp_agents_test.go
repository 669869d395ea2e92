package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// cpKeyProxyStatus sends a chat call with key through the control plane's
// proxy to agent of organization default and returns its status and
// error code (the stand-in box answers 404 to the chat path: the call
// reached it).
func cpKeyProxyStatus(t testing.TB, cp *cpProcess, agent, key string) int {
	t.Helper()
	resp, _ := cpProxyDo(t, http.DefaultClient, "POST", cp.url+"/default/"+agent+"/openai/v1/chat/completions", "Authorization", "Bearer "+key, cpProxyChat("hi", false))
	return resp.StatusCode
}

// TestCPAgentsCLI drives `svc agents` and `svc keys` as subprocesses
// against a control plane on PostgreSQL: an owner creates, renames and
// lists agents; hostile names are refused; a member reads an agent's
// deployment with every link (who, when, URL, tag) but cannot rename,
// delete or manage keys; delete is refused while a deployment is linked
// and --force drops it; an API key is created with an expiry, listed with
// its creator and last use (noted by a call through the proxy), and once
// revoked (or expired) its next call through the proxy is 401; a stranger
// cannot touch the organization's agents or keys; every change is in the
// audit log, no key in it.
func TestCPAgentsCLI(t *testing.T) {
	db, cp, owner, admin, member := cpTeamOfThree(t)
	cpTestExec(t, db, `INSERT INTO cp.organizations (id, slug, name) VALUES ('org_other', 'other', 'Other')`)
	cpTestExec(t, db, `INSERT INTO cp.memberships (org_id, user_id, role) SELECT 'org_other', id, 'owner' FROM cp.users WHERE email = 'admin'`)
	stranger := cpTeamJoin(t, cp, "eve@example.com", owner.invite(t, "eve@example.com", "owner", "--org", "other"))

	// Agents: create, list, rename; hostile input refused.
	var a cpAgent
	owner.ok(t, &a, "agents", "create", "demo", "--name", "Demo")
	if a.Slug != "demo" || a.Name != "Demo" {
		t.Fatalf("agents create = %+v", a)
	}
	owner.refused(t, 1, "conflict", "agents", "create", "demo")
	owner.refused(t, 1, "invalid", "agents", "create", "Bad Slug")
	owner.refused(t, 1, "invalid", "agents", "create", "ok", "--name", strings.Repeat("n", cpNameMax+1))
	owner.refused(t, 1, "invalid", "agents", "rename", "demo", "bell\a")
	member.refused(t, 1, "forbidden", "agents", "create", "mine")
	member.refused(t, 1, "forbidden", "agents", "rename", "demo", "Mine")
	admin.ok(t, nil, "agents", "rename", "demo", "Demo Two")
	var list struct {
		Organization string    `json:"organization"`
		Agents       []cpAgent `json:"agents"`
	}
	member.ok(t, &list, "agents", "list")
	if list.Organization != "default" || len(list.Agents) != 1 || list.Agents[0].Name != "Demo Two" {
		t.Fatalf("agents list = %+v", list)
	}
	stranger.refused(t, 4, codeNotFound, "agents", "list", "--org", "default")
	stranger.refused(t, 4, codeNotFound, "agents", "rename", "demo", "Mine", "--org", "default")

	// The deployment and its history: two links, by the owner then the
	// admin, to a stand-in box (the box contract's fake edge).
	var none cpDeploymentView
	member.ok(t, &none, "agents", "deployment", "demo")
	if none.Deployment != nil || len(none.Links) != 0 || none.Agent.Slug != "demo" {
		t.Fatalf("deployment before any link = %+v", none)
	}
	secret := "a-signing-secret-of-32-bytes-or-more"
	box := newStandInBox(t, secret)
	for i, u := range []*cpTeamUser{owner, admin} {
		req := cpLinkRequest{URL: box.URL, Secret: secret, ImageTag: []string{"1.0.0", "1.1.0"}[i]}
		if st := httpJSONAuth(t, "POST", cp.url+"/api/orgs/default/agents/demo/link", u.cred, req, nil); st != 200 {
			t.Fatalf("link as %s = %d\n%s", u.email, st, cp.stderr.String())
		}
	}
	var v cpDeploymentView
	member.ok(t, &v, "agents", "deployment", "demo")
	if v.Deployment == nil || v.Deployment.Status != cpStatusRegistered || v.Deployment.ImageTag != "1.1.0" || v.Deployment.URL != box.URL {
		t.Fatalf("deployment = %+v", v.Deployment)
	}
	if len(v.Links) != 2 || v.Links[0].Actor != "ada@example.com" || v.Links[0].ImageTag != "1.1.0" || v.Links[1].Actor != "admin" ||
		v.Links[1].ImageTag != "1.0.0" || v.Links[0].URL != box.URL || v.Links[0].At.IsZero() || v.Links[0].DeploymentID != v.Deployment.ID {
		t.Fatalf("links = %+v", v.Links)
	}
	out, _, _ := member.run(t, "agents", "deployment", "demo")
	if strings.Contains(out, secret) {
		t.Fatal("the deployment's answer holds its signing secret")
	}

	// API keys: created with an expiry, used through the proxy, listed,
	// revoked; the proxy refuses the revoked key's next call.
	var key struct {
		cpAPIKey
		Organization string `json:"organization"`
		Key          string `json:"key"`
	}
	admin.ok(t, &key, "keys", "create", "ci", "--expires", "30d")
	if !strings.HasPrefix(key.Key, "svc_key_") || key.ExpiresAt == nil || key.ExpiresAt.Before(time.Now().Add(29*24*time.Hour)) || key.CreatedBy != "ada@example.com" {
		t.Fatalf("keys create = %+v", key)
	}
	owner.refused(t, 1, "invalid", "keys", "create", "ci2", "--expires", "400d")
	owner.refused(t, 1, "invalid", "keys", "create", strings.Repeat("k", cpNameMax+1))
	owner.refused(t, 1, codeGeneric, "keys", "create", "ci2", "--expires", "someday")
	member.refused(t, 1, "forbidden", "keys", "list")
	member.refused(t, 1, "forbidden", "keys", "create", "mine")
	if st := cpKeyProxyStatus(t, cp, "demo", key.Key); st == http.StatusUnauthorized {
		t.Fatalf("a live key through the proxy = %d", st)
	}
	var keys struct {
		Keys []cpAPIKey `json:"api_keys"`
	}
	owner.ok(t, &keys, "keys", "list")
	if len(keys.Keys) != 1 || keys.Keys[0].Name != "ci" || keys.Keys[0].CreatedBy != "ada@example.com" || keys.Keys[0].LastUsedAt == nil || keys.Keys[0].ExpiresAt == nil {
		t.Fatalf("keys list = %+v", keys.Keys)
	}
	member.refused(t, 1, "forbidden", "keys", "revoke", key.ID)
	stranger.refused(t, 4, codeNotFound, "keys", "revoke", key.ID, "--org", "default")
	stranger.refused(t, 4, codeNotFound, "keys", "revoke", key.ID, "--org", "other")
	if st := cpKeyProxyStatus(t, cp, "demo", key.Key); st == http.StatusUnauthorized {
		t.Fatalf("the key after refused revocations = %d", st)
	}
	owner.ok(t, nil, "keys", "revoke", "ci")
	if st := cpKeyProxyStatus(t, cp, "demo", key.Key); st != http.StatusUnauthorized {
		t.Fatalf("a revoked key through the proxy = %d; want 401", st)
	}
	owner.refused(t, 4, codeNotFound, "keys", "revoke", key.ID)
	// An expired key is refused as well.
	owner.ok(t, &key, "keys", "create", "short", "--expires", "1h")
	if st := cpKeyProxyStatus(t, cp, "demo", key.Key); st == http.StatusUnauthorized {
		t.Fatalf("a live key through the proxy = %d", st)
	}
	cpTestExec(t, db, `UPDATE cp.api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, key.ID)
	if st := cpKeyProxyStatus(t, cp, "demo", key.Key); st != http.StatusUnauthorized {
		t.Fatalf("an expired key through the proxy = %d; want 401", st)
	}

	// Delete: refused while linked, forced, gone.
	admin.refused(t, 1, "deployment_linked", "agents", "delete", "demo")
	member.refused(t, 1, "forbidden", "agents", "delete", "demo", "--force")
	stranger.refused(t, 4, codeNotFound, "agents", "delete", "demo", "--force", "--org", "default")
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.deployments`); n != 1 {
		t.Fatalf("deployments after refused deletes = %d", n)
	}
	admin.ok(t, nil, "agents", "delete", "demo", "--force")
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.agents a JOIN cp.organizations o ON o.id = a.org_id WHERE o.slug = 'default'`) +
		cpTestCount(t, db, `SELECT count(*) FROM cp.deployments`); n != 0 {
		t.Fatalf("agents and deployments after the forced delete = %d", n)
	}
	owner.ok(t, nil, "agents", "create", "bare")
	owner.ok(t, nil, "agents", "delete", "bare")
	owner.refused(t, 4, codeNotFound, "agents", "delete", "bare")

	// Audited, with actors and targets, and no key or secret.
	for _, q := range []string{
		`SELECT count(*) FROM cp.audit_log WHERE action = 'agent.renamed' AND actor = 'ada@example.com' AND target = 'demo'`,
		`SELECT count(*) FROM cp.audit_log WHERE action = 'agent.delete' AND outcome = 'refused' AND actor = 'ada@example.com'`,
		`SELECT count(*) FROM cp.audit_log WHERE action = 'agent.deleted' AND actor = 'ada@example.com' AND detail LIKE '%forced%'`,
		`SELECT count(*) FROM cp.audit_log WHERE action = 'api_key.created' AND target = 'ci' AND detail LIKE '%expires%'`,
		`SELECT count(*) FROM cp.audit_log WHERE action = 'api_key.revoked' AND actor = 'admin' AND target = 'ci'`,
	} {
		if cpTestCount(t, db, q) == 0 {
			t.Errorf("not in the audit log: %s", q)
		}
	}
	if n := cpTestCount(t, db, `SELECT count(*) FROM cp.audit_log WHERE detail LIKE '%svc_key_%' OR detail LIKE $1`, "%"+secret+"%"); n != 0 {
		t.Fatalf("%d audit rows hold a key or a secret", n)
	}
	var verdict cpAuditVerdict
	owner.ok(t, &verdict, "audit", "verify")
	if out, _, code := cli(t, t.TempDir(), admin.env, "keys", "create", "ci-text"); code != 0 || !strings.Contains(out, cp.url+"/default/<agent>/openai/v1") {
		t.Errorf("svc keys create, for a person = %d %q; want the URL the key is for", code, out)
	}
}
