package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestCPIdentityToken runs the control plane as a process: POST
// /api/installations/{id}/token mints the caller a token for their own
// local-dev installation, which identVerifier accepts for exactly that
// installation and organization; POST /api/installations/{id}/tunnel
// mints a tunnel registration token for it, which the relay's check
// accepts and identVerifier (a box's, the relay's for relayed requests)
// refuses as of another kind. For both, another user's, a deployment's, an
// unknown installation are 404, and no credential is 401.
func TestCPIdentityToken(t *testing.T) {
	dbURL := testPostgresURL(t)
	cp, code := startTestControlPlane(t, dbURL)
	admin := cpSignedIn{Credential: cpSignInAdmin(t, cp, code)}
	var who loginIdentity
	httpJSONAuth(t, "GET", cp.url+"/api/whoami", admin.Credential, nil, &who)
	org := cp.url + "/api/orgs/default"
	if code := httpJSONAuth(t, "POST", org+"/agents", admin.Credential, map[string]string{"slug": "demo"}, nil); code != 201 {
		t.Fatalf("create agent = %d", code)
	}
	var local cpInstallation
	if code := httpJSONAuth(t, "POST", org+"/agents/demo/local-dev-installation", admin.Credential, nil, &local); code != 200 {
		t.Fatalf("local-dev installation = %d", code)
	}

	// A second member of the organization, with a credential of their own.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	bob := "svc_cred_" + strings.Repeat("b", 40)
	if _, err := conn.Exec(context.Background(), `WITH u AS (INSERT INTO cp.users (id, email, name) VALUES ('usr_bob', 'bob', 'Bob') RETURNING id),
		m AS (INSERT INTO cp.memberships (org_id, user_id, role) SELECT o.id, u.id, 'member' FROM cp.organizations o, u)
		INSERT INTO cp.credentials (id, user_id, token_hash, kind) SELECT 'crd_bob', u.id, $1, 'cli' FROM u`, cpHash(bob)); err != nil {
		t.Fatal(err)
	}
	var bobs cpInstallation
	if code := httpJSONAuth(t, "POST", org+"/agents/demo/local-dev-installation", bob, nil, &bobs); code != 200 || bobs.ID == local.ID {
		t.Fatalf("Bob's local-dev installation = %d %+v", code, bobs)
	}
	_, deployed := cpTestRecordDeployment(t, dbURL, "demo", "http://127.0.0.1:9", []byte(strings.Repeat("s", 40)))

	var got cpIdentity
	if code := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/token", admin.Credential, nil, &got); code != 200 || got.Installation.ID != local.ID || got.ExpiresAt.IsZero() {
		t.Fatalf("token for my local-dev installation = %d %+v", code, got)
	}
	v, _ := newIdentVerifier(cp.url, local.OrganizationID, local.ID, nil, nil)
	if c, err := v.verify(context.Background(), got.IdentityToken); err != nil || c.Sub != who.User.ID || c.Aud != local.ID || c.Org != local.OrganizationID {
		t.Fatalf("the tunnel's verification of the token = %+v, %v", c, err)
	}
	box, _ := newIdentVerifier(cp.url, local.OrganizationID, deployed.ID, nil, nil)
	if _, err := box.verify(context.Background(), got.IdentityToken); !errors.Is(err, errIdentAudience) {
		t.Fatalf("the local-dev token at the deployment's box = %v; want %v", err, errIdentAudience)
	}

	var reg cpTunnelToken
	if code := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+local.ID+"/tunnel", admin.Credential, nil, &reg); code != 200 || reg.Installation.ID != local.ID ||
		reg.ExpiresAt.After(time.Now().Add(identTunnelTTL+identLeeway)) {
		t.Fatalf("registration token for my local-dev installation = %d %+v", code, reg)
	}
	keys, _ := newIdentKeySource(cp.url, nil, nil)
	if c, err := keys.check(context.Background(), reg.RegistrationToken, identKindTunnel); err != nil || c.Sub != who.User.ID || c.Aud != local.ID || c.Org != local.OrganizationID {
		t.Fatalf("the relay's check of the registration token = %+v, %v", c, err)
	}
	if _, err := keys.check(context.Background(), got.IdentityToken, identKindTunnel); !errors.Is(err, errIdentKind) {
		t.Fatalf("an identity token as a registration token = %v; want %v", err, errIdentKind)
	}
	if _, err := v.verify(context.Background(), reg.RegistrationToken); !errors.Is(err, errIdentKind) {
		t.Fatalf("the registration token as an identity token of its own installation = %v; want %v", err, errIdentKind)
	}

	for _, tt := range []struct {
		name, cred, id string
		want           int
	}{
		{"another user's installation", bob, local.ID, 404},
		{"the deployment's installation", admin.Credential, deployed.ID, 404},
		{"an unknown installation", admin.Credential, "ins_unknown", 404},
		{"no credential", "", local.ID, 401},
		{"Bob's own", bob, bobs.ID, 200},
	} {
		for _, kind := range []string{"token", "tunnel"} {
			if code := httpJSONAuth(t, "POST", cp.url+"/api/installations/"+tt.id+"/"+kind, tt.cred, nil, nil); code != tt.want {
				t.Errorf("%s: %s = %d; want %d", tt.name, kind, code, tt.want)
			}
		}
	}
}
