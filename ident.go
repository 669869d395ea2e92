package main

// Identity tokens (DESIGN §7, SPEC §5 "Box signing and identity"): the
// control plane issues a signed-in user a short-lived Ed25519 JWT for one
// organization and installation; a box verifies it against the control
// plane's JWKS (ident_verify.go). This file holds the token format, the
// issuer and the JWKS document (JWS compact serialization, RFC 7515; JWT
// claims, RFC 7519; OKP keys and EdDSA, RFC 8037).
//
// The same issuer mints tunnel registration tokens: what svc dev shows
// `svc relay` to publish its local-dev installation (relay.go). They are
// explicitly typed (RFC 8725 §3.11): header typ identTunnelTyp and claim
// scope identTunnelScope, and every verifier checks both ways, so neither
// kind ever passes for the other (identKind).

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Names and limits of identity tokens.
const (
	identAlg  = "EdDSA"
	identTyp  = "JWT"
	identKty  = "OKP"
	identCrv  = "Ed25519"
	identUse  = "sig"
	identJWKS = "/.well-known/jwks.json"
	// identTTL is how long an issued token is valid.
	identTTL = 10 * time.Minute
	// identLeeway is the clock difference tolerated on exp and iat.
	identLeeway = 30 * time.Second
	// identMaxToken bounds a token's length: ours are about 450 bytes.
	identMaxToken = 4096

	// identTunnelTyp and identTunnelScope mark a tunnel registration
	// token, in its header and in its claims.
	identTunnelTyp   = "svc-tunnel+jwt"
	identTunnelScope = "tunnel"
	// identTunnelTTL is how long a registration token is valid: svc dev
	// fetches a fresh one before each dial, and the relay checks it once,
	// at registration.
	identTunnelTTL = time.Minute
)

// identKind is what a token is for: its name in errors, its header typ, its
// scope claim and its longest lifetime. A verifier admits one kind only.
type identKind struct {
	name, typ, scope string
	ttl              time.Duration
}

// The two kinds of token the control plane issues.
var (
	// identKindIdentity is an identity token: typ JWT (or none, for the
	// tokens of earlier control planes), no scope.
	identKindIdentity = identKind{name: "identity token", typ: identTyp, ttl: identTTL}
	// identKindTunnel is a tunnel registration token.
	identKindTunnel = identKind{name: "tunnel registration token", typ: identTunnelTyp, scope: identTunnelScope, ttl: identTunnelTTL}
)

// identB64 is base64url without padding, strict about trailing bits
// (RFC 7515 §2): one token has exactly one encoding.
var identB64 = base64.RawURLEncoding.Strict()

// identHeader is a token's JOSE header.
type identHeader struct {
	Alg  string   `json:"alg"`
	Typ  string   `json:"typ,omitempty"`
	Kid  string   `json:"kid"`
	Crit []string `json:"crit,omitempty"` // refused when present: we understand no extension
}

// identClaims are the claims of a token: Iss is the control plane's URL,
// Sub the user, Org the organization, Aud the installation; Scope is
// empty for an identity token (identKind).
type identClaims struct {
	Iss   string `json:"iss"`
	Sub   string `json:"sub"`
	Org   string `json:"org"`
	Aud   string `json:"aud"`
	Iat   int64  `json:"iat"`
	Exp   int64  `json:"exp"`
	Jti   string `json:"jti"`
	Scope string `json:"scope,omitempty"`
}

// identJWK is one public key of a JWKS (RFC 8037 §2: an OKP key; X is the
// base64url public key). A private key never takes this shape.
type identJWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
}

// identKeySet is a JWKS document (RFC 7517 §5).
type identKeySet struct {
	Keys []identJWK `json:"keys"`
}

// identKey is one signing key of the issuer.
type identKey struct {
	kid  string
	priv ed25519.PrivateKey
}

// identNewKey generates a signing key; its kid is the RFC 7638 thumbprint
// of its public JWK, so a kid names exactly one key.
func identNewKey() identKey {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	return identKeyFromSeed(priv.Seed())
}

// identKeyFromSeed rebuilds a signing key from its 32-byte seed.
func identKeyFromSeed(seed []byte) identKey {
	priv := ed25519.NewKeyFromSeed(seed)
	x := identB64.EncodeToString(priv.Public().(ed25519.PublicKey))
	// RFC 7638 §3.2: the required members in lexical order, no whitespace.
	sum := sha256.Sum256([]byte(`{"crv":"` + identCrv + `","kty":"` + identKty + `","x":"` + x + `"}`))
	return identKey{kid: identB64.EncodeToString(sum[:]), priv: priv}
}

// jwk is the public JWK of k.
func (k identKey) jwk() identJWK {
	return identJWK{Kty: identKty, Crv: identCrv, X: identB64.EncodeToString(k.priv.Public().(ed25519.PublicKey)), Kid: k.kid, Use: identUse, Alg: identAlg}
}

// identIssuer signs identity tokens. keys[0] signs; the others are older
// keys still published so tokens they signed verify until they expire
// (rotation). Read-only after construction.
type identIssuer struct {
	iss  string
	keys []identKey
}

// newIdentIssuer returns the issuer named iss (the control plane URL)
// signing with keys[0].
func newIdentIssuer(iss string, keys []identKey) (*identIssuer, error) {
	if iss == "" || len(keys) == 0 {
		return nil, errors.New("new identity issuer: want an issuer URL and at least one key")
	}
	return &identIssuer{iss: iss, keys: keys}, nil
}

// issue signs an identity token for user sub in organization org and
// installation aud, valid identTTL from now.
func (is *identIssuer) issue(sub, org, aud string, now time.Time) (string, identClaims) {
	return is.sign(identKindIdentity, sub, org, aud, now)
}

// issueTunnel signs a tunnel registration token for user sub's local-dev
// installation aud of organization org, valid identTunnelTTL from now.
func (is *identIssuer) issueTunnel(sub, org, aud string, now time.Time) (string, identClaims) {
	return is.sign(identKindTunnel, sub, org, aud, now)
}

// sign signs a token of kind k for sub, org and aud, valid k.ttl from now.
func (is *identIssuer) sign(k identKind, sub, org, aud string, now time.Time) (string, identClaims) {
	c := identClaims{Iss: is.iss, Sub: sub, Org: org, Aud: aud, Iat: now.Unix(), Exp: now.Add(k.ttl).Unix(), Jti: rand.Text(), Scope: k.scope}
	return identSign(is.keys[0], identHeader{Alg: identAlg, Typ: k.typ, Kid: is.keys[0].kid}, c), c
}

// keySet is the JWKS of every key of the issuer.
func (is *identIssuer) keySet() identKeySet {
	ks := identKeySet{Keys: make([]identJWK, len(is.keys))}
	for i, k := range is.keys {
		ks.Keys[i] = k.jwk()
	}
	return ks
}

// identSign returns the compact JWS of claims under header, signed by k.
// Tests use it to forge headers the issuer never writes.
func identSign(k identKey, h identHeader, claims any) string {
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(claims)
	input := identB64.EncodeToString(hb) + "." + identB64.EncodeToString(cb)
	return input + "." + identB64.EncodeToString(ed25519.Sign(k.priv, []byte(input)))
}

// identParsed is a token split and decoded, not yet verified.
type identParsed struct {
	header identHeader
	claims identClaims
	input  []byte // the JWS signing input: header.payload as sent
	sig    []byte
}

// identParse splits and decodes token strictly: at most identMaxToken
// bytes, three segments of unpadded base64url, each of the first two one
// JSON object. Unknown claims are ignored, so a newer control plane may add
// some without locking out older boxes.
func identParse(token string) (*identParsed, error) {
	if len(token) > identMaxToken {
		return nil, fmt.Errorf("longer than %d bytes", identMaxToken)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("want 3 dot-separated segments, have %d", len(parts))
	}
	var raw [3][]byte
	for i, p := range parts {
		b, err := identB64.DecodeString(p)
		if err != nil || (len(b) == 0 && i < 2) { // an empty signature is refused later, by alg or length
			return nil, fmt.Errorf("segment %d is not unpadded base64url", i+1)
		}
		raw[i] = b
	}
	p := &identParsed{input: []byte(parts[0] + "." + parts[1]), sig: raw[2]}
	if err := identDecodeStrict(raw[0], &p.header); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if err := identDecodeStrict(raw[1], &p.claims); err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	return p, nil
}

// identDecodeStrict decodes one JSON value into v, refusing trailing data.
func identDecodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
