package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// identTestPlane is a loopback JWKS endpoint serving the keys of an issuer
// that a test may replace, counting fetches.
type identTestPlane struct {
	srv     *httptest.Server
	mu      sync.Mutex
	issuer  *identIssuer
	fetches atomic.Int32
}

// newIdentTestPlane serves keys at a loopback URL, the issuer's name.
func newIdentTestPlane(t testing.TB, keys ...identKey) *identTestPlane {
	p := &identTestPlane{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != identJWKS {
			http.NotFound(w, r)
			return
		}
		p.fetches.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		writeJSON(w, http.StatusOK, p.issuer.keySet())
	}))
	t.Cleanup(p.srv.Close)
	p.setKeys(t, keys...)
	return p
}

// setKeys replaces the issuer's keys (keys[0] signs).
func (p *identTestPlane) setKeys(t testing.TB, keys ...identKey) {
	is, err := newIdentIssuer(p.srv.URL, keys)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.issuer = is
	p.mu.Unlock()
}

// TestIdentVerify refuses every token the box must not admit, each with
// its reason, and admits a valid one.
func TestIdentVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	key, old, stranger := identNewKey(), identNewKey(), identNewKey()
	plane := newIdentTestPlane(t, key, old)
	iss := plane.srv.URL
	claims := func(mod func(*identClaims)) identClaims {
		c := identClaims{Iss: iss, Sub: "usr_1", Org: "org_1", Aud: "ins_1", Iat: now.Unix(), Exp: now.Add(identTTL).Unix(), Jti: "j"}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	hdr := identHeader{Alg: identAlg, Typ: identTyp, Kid: key.kid}
	valid := identSign(key, hdr, claims(nil))
	// tamper replaces the payload of a valid token, keeping its signature.
	tamper := func(tok string, c identClaims) string {
		parts := strings.Split(tok, ".")
		b, _ := json.Marshal(c)
		return parts[0] + "." + identB64.EncodeToString(b) + "." + parts[2]
	}
	// hs256 signs with HMAC keyed by the public key: the alg-confusion attack.
	hs256 := func() string {
		h, _ := json.Marshal(identHeader{Alg: "HS256", Typ: identTyp, Kid: key.kid})
		b, _ := json.Marshal(claims(nil))
		in := identB64.EncodeToString(h) + "." + identB64.EncodeToString(b)
		m := hmac.New(sha256.New, []byte(key.jwk().X))
		m.Write([]byte(in))
		return in + "." + identB64.EncodeToString(m.Sum(nil))
	}
	none := func() string {
		h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
		b, _ := json.Marshal(claims(nil))
		return identB64.EncodeToString(h) + "." + identB64.EncodeToString(b) + "."
	}
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"valid", valid, nil},
		{"valid, signed by the older published key", identSign(old, identHeader{Alg: identAlg, Kid: old.kid}, claims(nil)), nil},
		{"valid within the leeway after exp", identSign(key, hdr, claims(func(c *identClaims) { c.Iat -= 600; c.Exp = now.Unix() - 10 })), nil},
		{"none", "", errIdentMissing},
		{"another installation", identSign(key, hdr, claims(func(c *identClaims) { c.Aud = "ins_2" })), errIdentAudience},
		{"another organization", identSign(key, hdr, claims(func(c *identClaims) { c.Org = "org_2" })), errIdentOrganization},
		{"another control plane", identSign(key, hdr, claims(func(c *identClaims) { c.Iss = "https://cp.example" })), errIdentIssuer},
		{"expired", identSign(key, hdr, claims(func(c *identClaims) { c.Iat -= 3600; c.Exp -= 3600 })), errIdentExpired},
		{"issued in the future", identSign(key, hdr, claims(func(c *identClaims) { c.Iat += 3600; c.Exp += 3600 })), errIdentNotYetValid},
		{"lifetime too long", identSign(key, hdr, claims(func(c *identClaims) { c.Exp += 86400 })), errIdentNotYetValid},
		{"unknown key", identSign(stranger, identHeader{Alg: identAlg, Kid: stranger.kid}, claims(nil)), errIdentUnknownKey},
		{"known kid, another key's signature", identSign(stranger, hdr, claims(nil)), errIdentSignature},
		{"tampered payload", tamper(valid, claims(func(c *identClaims) { c.Aud = "ins_2" })), errIdentSignature},
		{"alg confusion HS256", hs256(), errIdentAlg},
		{"alg none", none(), errIdentAlg},
		{"no kid", identSign(key, identHeader{Alg: identAlg}, claims(nil)), errIdentMalformed},
		{"crit header", identSign(key, identHeader{Alg: identAlg, Kid: key.kid, Crit: []string{"exp"}}, claims(nil)), errIdentMalformed},
		{"two segments", strings.Join(strings.Split(valid, ".")[:2], "."), errIdentMalformed},
		{"four segments", valid + ".x", errIdentMalformed},
		{"padded base64", strings.Replace(valid, ".", "=.", 1), errIdentMalformed},
		{"standard base64 alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(valid) + "+", errIdentMalformed},
		{"oversized", valid + strings.Repeat("A", identMaxToken), errIdentMalformed},
		{"claims not an object", identSign(key, hdr, []int{1}), errIdentMalformed},
		{"a tunnel registration token", identSign(key, identHeader{Alg: identAlg, Typ: identTunnelTyp, Kid: key.kid}, claims(func(c *identClaims) { c.Scope = identTunnelScope })), errIdentKind},
		{"typ JWT, scope tunnel", identSign(key, hdr, claims(func(c *identClaims) { c.Scope = identTunnelScope })), errIdentKind},
		{"typ tunnel, no scope", identSign(key, identHeader{Alg: identAlg, Typ: identTunnelTyp, Kid: key.kid}, claims(nil)), errIdentKind},
	}
	v, err := newIdentVerifier(iss, "org_1", "ins_1", nil, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := v.verify(context.Background(), tt.token)
			if tt.want == nil {
				if err != nil || c.Sub != "usr_1" {
					t.Fatalf("verify = %+v, %v; want usr_1 admitted", c, err)
				}
				return
			}
			var ie *identError
			if !errors.Is(err, tt.want) || !errors.As(err, &ie) {
				t.Fatalf("verify = %v; want %v", err, tt.want)
			}
			if tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Errorf("the refusal quotes the token: %v", err)
			}
		})
	}
}

// TestIdentTunnelToken checks a tunnel registration token as the relay
// does: the issuer's own passes, an identity token is of another kind, and
// its one-minute lifetime is enforced.
func TestIdentTunnelToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	key := identNewKey()
	plane := newIdentTestPlane(t, key)
	keys, err := newIdentKeySource(plane.srv.URL, nil, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	is := plane.issuer
	tunnel := func(iat time.Time) string { tok, _ := is.issueTunnel("usr_1", "org_1", "ldi_1", iat); return tok }
	identity, _ := is.issue("usr_1", "org_1", "ldi_1", now)
	long := identSign(key, identHeader{Alg: identAlg, Typ: identTunnelTyp, Kid: key.kid},
		identClaims{Iss: is.iss, Sub: "usr_1", Org: "org_1", Aud: "ldi_1", Iat: now.Unix(), Exp: now.Add(identTTL).Unix(), Scope: identTunnelScope})
	for _, tt := range []struct {
		name, token string
		want        error
	}{
		{"valid", tunnel(now), nil},
		{"an identity token", identity, errIdentKind},
		{"expired", tunnel(now.Add(-identTunnelTTL - identLeeway)), errIdentExpired},
		{"lifetime of an identity token", long, errIdentNotYetValid},
	} {
		c, err := keys.check(context.Background(), tt.token, identKindTunnel)
		if !errors.Is(err, tt.want) || (err == nil && (c.Aud != "ldi_1" || c.Org != "org_1")) {
			t.Errorf("%s: check = %+v, %v; want %v", tt.name, c, err, tt.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "verify tunnel registration token: ") {
			t.Errorf("%s: error %q does not name the token's kind", tt.name, err)
		}
	}
}

// TestIdentVerifyKeyRotation refetches the JWKS on an unknown kid, at most
// once per identRefetchEvery, and keeps the cached keys when the control
// plane is down.
func TestIdentVerifyKeyRotation(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	first, second, third := identNewKey(), identNewKey(), identNewKey()
	plane := newIdentTestPlane(t, first)
	v, _ := newIdentVerifier(plane.srv.URL, "org_1", "ins_1", nil, func() time.Time { return clock })
	tok := func(k identKey) string {
		c := identClaims{Iss: plane.srv.URL, Sub: "u", Org: "org_1", Aud: "ins_1", Iat: clock.Unix(), Exp: clock.Add(identTTL).Unix()}
		return identSign(k, identHeader{Alg: identAlg, Kid: k.kid}, c)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := v.verify(ctx, tok(first)); err != nil {
			t.Fatal(err)
		}
	}
	if n := plane.fetches.Load(); n != 1 {
		t.Fatalf("JWKS fetched %d times for 3 tokens; want 1 (cached)", n)
	}
	plane.setKeys(t, second, first) // rotation: a new key signs
	clock = clock.Add(identRefetchEvery)
	if _, err := v.verify(ctx, tok(second)); err != nil {
		t.Fatalf("token of the rotated-in key: %v", err)
	}
	for range 5 { // a flood of unknown kids: no fetch within the interval
		if _, err := v.verify(ctx, tok(third)); !errors.Is(err, errIdentUnknownKey) {
			t.Fatalf("unknown key = %v; want %v", err, errIdentUnknownKey)
		}
	}
	if n := plane.fetches.Load(); n != 2 {
		t.Fatalf("JWKS fetched %d times; want 2 (refetch rate-limited)", n)
	}
	remembered := tok(first)
	v.verify(ctx, remembered)
	clock = clock.Add(identTTL + identLeeway)
	if _, err := v.verify(ctx, remembered); !errors.Is(err, errIdentExpired) {
		t.Fatalf("a remembered token past exp = %v; want %v", err, errIdentExpired)
	}
	plane.srv.Close()
	clock = clock.Add(identJWKSMaxAge)
	if _, err := v.verify(ctx, tok(first)); err != nil {
		t.Fatalf("control plane down, cached key: %v", err)
	}

	down, _ := newIdentVerifier(plane.srv.URL, "org_1", "ins_1", nil, nil)
	if _, err := down.verify(ctx, tok(first)); !errors.Is(err, errIdentNoKeys) {
		t.Fatalf("never reached a JWKS = %v; want %v", err, errIdentNoKeys)
	}
}

// TestIdentKeySet checks the JWKS is RFC 8037 OKP keys with no private part.
func TestIdentKeySet(t *testing.T) {
	is, _ := newIdentIssuer("http://cp", []identKey{identNewKey()})
	b, _ := json.Marshal(is.keySet())
	var ks struct {
		Keys []map[string]string `json:"keys"`
	}
	json.Unmarshal(b, &ks)
	k := ks.Keys[0]
	if len(ks.Keys) != 1 || k["kty"] != "OKP" || k["crv"] != "Ed25519" || k["use"] != "sig" || k["alg"] != "EdDSA" || k["kid"] == "" || len(k["x"]) != 43 || k["d"] != "" {
		t.Fatalf("JWKS = %s", b)
	}
	if again := identKeyFromSeed(is.keys[0].priv.Seed()); again.kid != k["kid"] {
		t.Errorf("kid from seed = %q; want %q (thumbprint)", again.kid, k["kid"])
	}
}

// BenchmarkVerifyIdentityToken is the box's cost of verifying an identity
// token with the JWKS cached: "repeat" is a client's every request after
// its first with one token, "first" a token the box has not seen (the
// Ed25519 verification).
func BenchmarkVerifyIdentityToken(b *testing.B) {
	key := identNewKey()
	plane := newIdentTestPlane(b, key)
	ctx := context.Background()
	b.Run("repeat", func(b *testing.B) {
		v, _ := newIdentVerifier(plane.srv.URL, "org_1", "ins_1", nil, nil)
		tok, _ := plane.issuer.issue("usr_1", "org_1", "ins_1", time.Now())
		for range b.N {
			if _, err := v.verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		v, _ := newIdentVerifier(plane.srv.URL, "org_1", "ins_1", nil, nil)
		toks := make([]string, b.N)
		for i := range toks {
			toks[i], _ = plane.issuer.issue("usr_1", "org_1", "ins_1", time.Now())
		}
		v.verify(ctx, toks[0]) // fetch the JWKS
		b.ResetTimer()
		for i := range b.N {
			if _, err := v.verify(ctx, toks[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
