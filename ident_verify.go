package main

// The box side of identity tokens (DESIGN §7): verify a token against the
// JWKS of the control plane the box trusts, for the organization and
// installation it was taught.

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of the identity verifier.
const (
	// identRefetchEvery is the least time between two JWKS fetches: a flood
	// of tokens naming unknown keys costs the control plane one fetch per
	// interval, not one per token.
	identRefetchEvery = 30 * time.Second
	// identJWKSMaxAge is how long a fetched JWKS is used before the next
	// token triggers a refresh (a retired key stops verifying within it).
	// When the refresh fails the cached keys stay in use.
	identJWKSMaxAge = time.Hour
	// identJWKSMaxBytes bounds a JWKS response.
	identJWKSMaxBytes = 64 << 10
	// identFetchTimeout bounds one JWKS fetch.
	identFetchTimeout = 5 * time.Second
	// identVerifiedCap bounds the tokens remembered as verified. A client
	// sends the same token for up to identTTL, so remembering it spares
	// every later request the Ed25519 verification (about 50 µs idle, far
	// more on a busy core). At the cap the set is emptied and refills.
	identVerifiedCap = 4096
)

// The reasons a token is refused. An *identError wraps exactly one.
var (
	errIdentMissing      = errors.New("no identity token")
	errIdentMalformed    = errors.New("malformed identity token")
	errIdentAlg          = errors.New("identity token algorithm not accepted")
	errIdentUnknownKey   = errors.New("identity token signed by an unknown key")
	errIdentSignature    = errors.New("identity token signature invalid")
	errIdentExpired      = errors.New("identity token expired")
	errIdentNotYetValid  = errors.New("identity token issued in the future")
	errIdentIssuer       = errors.New("identity token from another control plane")
	errIdentOrganization = errors.New("identity token for another organization")
	errIdentAudience     = errors.New("identity token for another installation")
	errIdentNoKeys       = errors.New("cannot reach the control plane's keys")
)

// identError is a refused token: Reason is one of the errIdent…
// sentinels, Detail says what was seen (never the token).
type identError struct {
	Reason error
	Detail string
}

// Error is "verify identity token: <reason>: <detail>".
func (e *identError) Error() string {
	if e.Detail == "" {
		return "verify identity token: " + e.Reason.Error()
	}
	return "verify identity token: " + e.Reason.Error() + ": " + e.Detail
}

// Unwrap returns the reason.
func (e *identError) Unwrap() error { return e.Reason }

// identRefuse returns an *identError of reason with a formatted detail.
func identRefuse(reason error, format string, args ...any) *identError {
	return &identError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// identVerifier verifies identity tokens for one control plane (Issuer),
// organization and installation: what the box was taught. Build it with
// newIdentVerifier; safe for concurrent use.
type identVerifier struct {
	issuer, org, aud string
	client           *http.Client
	now              func() time.Time

	keys    atomic.Pointer[identKeyCache]
	fetchMu sync.Mutex // one fetch at a time; holds lastTry
	lastTry time.Time

	verifiedMu sync.Mutex
	verified   map[string]*identClaims // tokens that passed every check, by their text
}

// identKeyCache is the public keys of one JWKS fetch, by kid.
type identKeyCache struct {
	keys    map[string]ed25519.PublicKey
	fetched time.Time
}

// newIdentVerifier returns a verifier of tokens issued by the control plane
// at issuer for organization org and installation aud. client nil means a
// default client; now nil means time.Now. It fetches nothing until the
// first token.
func newIdentVerifier(issuer, org, aud string, client *http.Client, now func() time.Time) (*identVerifier, error) {
	if issuer == "" || org == "" || aud == "" {
		return nil, errors.New("new identity verifier: want the control plane URL, the organization and the installation")
	}
	if client == nil {
		client = &http.Client{Timeout: identFetchTimeout}
	}
	if now == nil {
		now = time.Now
	}
	return &identVerifier{issuer: strings.TrimSuffix(issuer, "/"), org: org, aud: aud, client: client, now: now, verified: map[string]*identClaims{}}, nil
}

// identBearer returns the token of an "Authorization: Bearer" header, or "".
func identBearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// verify checks token and returns its claims: shape, alg EdDSA, a known
// kid (refetching the JWKS once per identRefetchEvery on an unknown one),
// the signature, exp and iat within identLeeway, then iss, org and aud. A
// token seen before passed all but exp then (the issuer, organization and
// installation of a verifier never change), so only exp is checked again;
// a retired key's tokens thus live out their ≤10 minutes.
func (v *identVerifier) verify(ctx context.Context, token string) (*identClaims, error) {
	if token == "" {
		return nil, &identError{Reason: errIdentMissing}
	}
	v.verifiedMu.Lock()
	c, ok := v.verified[token]
	v.verifiedMu.Unlock()
	if ok {
		return c, v.checkExp(c, v.now())
	}
	c, err := v.verifyNew(ctx, token)
	if err != nil {
		return nil, err
	}
	v.verifiedMu.Lock()
	if len(v.verified) >= identVerifiedCap {
		clear(v.verified)
	}
	v.verified[token] = c
	v.verifiedMu.Unlock()
	return c, nil
}

// checkExp refuses claims expired at now (with identLeeway).
func (v *identVerifier) checkExp(c *identClaims, now time.Time) error {
	if exp := time.Unix(c.Exp, 0); !now.Before(exp.Add(identLeeway)) {
		return identRefuse(errIdentExpired, "expired %s, now %s", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// verifyNew runs every check of verify on a token not seen before.
func (v *identVerifier) verifyNew(ctx context.Context, token string) (*identClaims, error) {
	p, err := identParse(token)
	if err != nil {
		return nil, identRefuse(errIdentMalformed, "%v", err)
	}
	if p.header.Alg != identAlg {
		return nil, identRefuse(errIdentAlg, "alg %q; want %q", p.header.Alg, identAlg)
	}
	if len(p.header.Crit) > 0 || (p.header.Typ != "" && p.header.Typ != identTyp) {
		return nil, identRefuse(errIdentMalformed, "header typ %q crit %q", p.header.Typ, p.header.Crit)
	}
	key, err := v.key(ctx, p.header.Kid)
	if err != nil {
		return nil, err
	}
	if len(p.sig) != ed25519.SignatureSize || !ed25519.Verify(key, p.input, p.sig) {
		return nil, &identError{Reason: errIdentSignature}
	}
	c, now := &p.claims, v.now()
	if err := v.checkExp(c, now); err != nil {
		return nil, err
	}
	if iat := time.Unix(c.Iat, 0); iat.After(now.Add(identLeeway)) || c.Exp-c.Iat > int64((identTTL+identLeeway)/time.Second) {
		return nil, identRefuse(errIdentNotYetValid, "issued %s, expires %s, now %s", iat.UTC().Format(time.RFC3339), time.Unix(c.Exp, 0).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if strings.TrimSuffix(c.Iss, "/") != v.issuer {
		return nil, identRefuse(errIdentIssuer, "iss %q; this box trusts %q", c.Iss, v.issuer)
	}
	if c.Org != v.org {
		return nil, identRefuse(errIdentOrganization, "org %q; this box serves %q", c.Org, v.org)
	}
	if c.Aud != v.aud {
		return nil, identRefuse(errIdentAudience, "aud %q; this box serves %q", c.Aud, v.aud)
	}
	return c, nil
}

// key returns the public key kid names, fetching the JWKS when there is
// none yet, when it is older than identJWKSMaxAge, or when kid is unknown
// and the last fetch is older than identRefetchEvery.
func (v *identVerifier) key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	if kid == "" {
		return nil, identRefuse(errIdentMalformed, "header has no kid")
	}
	c := v.keys.Load()
	if c != nil && v.now().Sub(c.fetched) < identJWKSMaxAge {
		if k, ok := c.keys[kid]; ok {
			return k, nil
		}
	}
	c, err := v.refresh(ctx, c)
	if c == nil {
		return nil, &identError{Reason: errIdentNoKeys, Detail: err.Error()}
	}
	if k, ok := c.keys[kid]; ok {
		return k, nil
	}
	return nil, identRefuse(errIdentUnknownKey, "kid %q is not in %s", kid, v.issuer+identJWKS)
}

// refresh fetches the JWKS unless another caller did since seen was loaded
// or the last try is within identRefetchEvery; it returns the keys to use
// (the cached ones when the fetch fails or is skipped) and the fetch error.
func (v *identVerifier) refresh(ctx context.Context, seen *identKeyCache) (*identKeyCache, error) {
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	if c := v.keys.Load(); c != seen {
		return c, nil
	}
	now := v.now()
	if !v.lastTry.IsZero() && now.Sub(v.lastTry) < identRefetchEvery {
		return seen, errors.New("last fetch failed or is too recent to retry")
	}
	v.lastTry = now
	keys, err := v.fetch(ctx)
	if err != nil {
		return seen, err
	}
	c := &identKeyCache{keys: keys, fetched: now}
	v.keys.Store(c)
	return c, nil
}

// fetch reads the control plane's JWKS and keeps its Ed25519 signing keys;
// keys of other types are skipped.
func (v *identVerifier) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, identFetchTimeout)
	defer cancel()
	u := v.issuer + identJWKS
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: status %d", u, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, identJWKSMaxBytes+1))
	if err != nil || len(b) > identJWKSMaxBytes {
		return nil, fmt.Errorf("fetch %s: read: body over %d bytes or cut: %v", u, identJWKSMaxBytes, err)
	}
	var ks identKeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range ks.Keys {
		x, err := identB64.DecodeString(k.X)
		if k.Kty != identKty || k.Crv != identCrv || (k.Alg != "" && k.Alg != identAlg) || (k.Use != "" && k.Use != identUse) ||
			k.Kid == "" || err != nil || len(x) != ed25519.PublicKeySize {
			continue
		}
		keys[k.Kid] = ed25519.PublicKey(x)
	}
	return keys, nil
}
