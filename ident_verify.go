package main

// The verifying side of the control plane's tokens (DESIGN §7): a box
// verifies identity tokens against the JWKS of the control plane it
// trusts, for the organization and installation it was taught; the relay
// verifies tunnel registration tokens and relayed identity tokens the same
// way (identKeySource.check, identKind).

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
	errIdentMissing      = errors.New("no token")
	errIdentMalformed    = errors.New("malformed token")
	errIdentAlg          = errors.New("token algorithm not accepted")
	errIdentKind         = errors.New("token of another kind")
	errIdentUnknownKey   = errors.New("token signed by an unknown key")
	errIdentSignature    = errors.New("token signature invalid")
	errIdentExpired      = errors.New("token expired")
	errIdentNotYetValid  = errors.New("token issued in the future")
	errIdentIssuer       = errors.New("token from another control plane")
	errIdentOrganization = errors.New("token for another organization")
	errIdentAudience     = errors.New("token for another installation")
	errIdentNoKeys       = errors.New("cannot reach the control plane's keys")
)

// identError is a refused token: Kind names what it was checked as (an
// identKind's name), Reason is one of the errIdent… sentinels, Detail
// says what was seen (never the token).
type identError struct {
	Kind   string
	Reason error
	Detail string
}

// Error is "verify <kind>: <reason>: <detail>".
func (e *identError) Error() string {
	if e.Detail == "" {
		return "verify " + e.Kind + ": " + e.Reason.Error()
	}
	return "verify " + e.Kind + ": " + e.Reason.Error() + ": " + e.Detail
}

// Unwrap returns the reason.
func (e *identError) Unwrap() error { return e.Reason }

// refuse returns an *identError of a token of kind k, for reason, with a
// formatted detail.
func (k identKind) refuse(reason error, format string, args ...any) *identError {
	return &identError{Kind: k.name, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// identKeySource is the JWKS of one control plane (issuer) as a verifier needs
// it: fetched on first use, cached, refetched on an unknown kid at most
// once per identRefetchEvery. Safe for concurrent use; the relay shares
// one among its tunnels (relay.go).
type identKeySource struct {
	issuer string
	client *http.Client
	now    func() time.Time

	keys    atomic.Pointer[identKeyCache]
	fetchMu sync.Mutex // one fetch at a time; holds lastTry
	lastTry time.Time
}

// identKeyCache is the public keys of one JWKS fetch, by kid.
type identKeyCache struct {
	keys    map[string]ed25519.PublicKey
	fetched time.Time
}

// newIdentKeySource returns the key set of the control plane at issuer; client
// nil means a default client, now nil means time.Now. It fetches nothing
// until the first token.
func newIdentKeySource(issuer string, client *http.Client, now func() time.Time) (*identKeySource, error) {
	if issuer == "" {
		return nil, errors.New("new identity key set: want the control plane URL")
	}
	if client == nil {
		client = &http.Client{Timeout: identFetchTimeout}
	}
	if now == nil {
		now = time.Now
	}
	return &identKeySource{issuer: strings.TrimSuffix(issuer, "/"), client: client, now: now}, nil
}

// check verifies token as a token of kind k issued by j's control plane
// and returns its claims: shape, alg EdDSA, typ and scope of k, a known
// kid, the signature, exp and iat within identLeeway (a lifetime of at
// most k.ttl), then iss. Organization and installation are the caller's
// to check.
func (j *identKeySource) check(ctx context.Context, token string, k identKind) (*identClaims, error) {
	if token == "" {
		return nil, k.refuse(errIdentMissing, "")
	}
	p, err := identParse(token)
	if err != nil {
		return nil, k.refuse(errIdentMalformed, "%v", err)
	}
	if p.header.Alg != identAlg {
		return nil, k.refuse(errIdentAlg, "alg %q; want %q", p.header.Alg, identAlg)
	}
	if len(p.header.Crit) > 0 {
		return nil, k.refuse(errIdentMalformed, "header crit %q", p.header.Crit)
	}
	// An identity token of an earlier control plane may omit typ.
	if typ := p.header.Typ; (typ != k.typ && (typ != "" || k != identKindIdentity)) || p.claims.Scope != k.scope {
		return nil, k.refuse(errIdentKind, "typ %q, scope %q; want typ %q, scope %q", typ, p.claims.Scope, k.typ, k.scope)
	}
	key, err := j.key(ctx, p.header.Kid, k)
	if err != nil {
		return nil, err
	}
	if len(p.sig) != ed25519.SignatureSize || !ed25519.Verify(key, p.input, p.sig) {
		return nil, k.refuse(errIdentSignature, "")
	}
	c, now := &p.claims, j.now()
	if err := checkExp(c, now, k); err != nil {
		return nil, err
	}
	if iat := time.Unix(c.Iat, 0); iat.After(now.Add(identLeeway)) || c.Exp-c.Iat > int64((k.ttl+identLeeway)/time.Second) {
		return nil, k.refuse(errIdentNotYetValid, "issued %s, expires %s, now %s", iat.UTC().Format(time.RFC3339), time.Unix(c.Exp, 0).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if strings.TrimSuffix(c.Iss, "/") != j.issuer {
		return nil, k.refuse(errIdentIssuer, "iss %q; trusted %q", c.Iss, j.issuer)
	}
	return c, nil
}

// checkExp refuses claims of a token of kind k expired at now (with
// identLeeway).
func checkExp(c *identClaims, now time.Time, k identKind) error {
	if exp := time.Unix(c.Exp, 0); !now.Before(exp.Add(identLeeway)) {
		return k.refuse(errIdentExpired, "expired %s, now %s", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// identVerifier verifies identity tokens for one control plane,
// organization and installation: what the box was taught, or a tunnel's
// at the relay. Build it with newIdentVerifier; safe for concurrent use.
type identVerifier struct {
	*identKeySource
	org, aud string

	verifiedMu sync.Mutex
	verified   map[string]*identClaims // tokens that passed every check, by their text
}

// newIdentVerifier returns a verifier of identity tokens issued by the
// control plane at issuer for organization org and installation aud.
// client nil means a default client; now nil means time.Now. It fetches
// nothing until the first token.
func newIdentVerifier(issuer, org, aud string, client *http.Client, now func() time.Time) (*identVerifier, error) {
	j, err := newIdentKeySource(issuer, client, now)
	if err != nil {
		return nil, err
	}
	return newIdentVerifierOn(j, org, aud)
}

// newIdentVerifierOn returns a verifier of identity tokens for
// organization org and installation aud whose keys are those of j.
func newIdentVerifierOn(j *identKeySource, org, aud string) (*identVerifier, error) {
	if j == nil || org == "" || aud == "" {
		return nil, errors.New("new identity verifier: want the control plane's keys, the organization and the installation")
	}
	return &identVerifier{identKeySource: j, org: org, aud: aud, verified: map[string]*identClaims{}}, nil
}

// identBearer returns the token of an "Authorization: Bearer" header, or "".
func identBearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// principal is who a verified identity token stands for: its user in its
// organization, "identity:<org>/<sub>". Durable sessions are scoped to it,
// not to one of the tokens, which are renewed every few minutes.
func (c *identClaims) principal() string { return "identity:" + c.Org + "/" + c.Sub }

// verify checks an identity token (check) for the verifier's organization
// and installation and returns its claims. A token seen before passed all
// but exp then (the issuer, organization and installation of a verifier
// never change), so only exp is checked again; a retired key's tokens thus
// live out their ≤10 minutes.
func (v *identVerifier) verify(ctx context.Context, token string) (*identClaims, error) {
	v.verifiedMu.Lock()
	c, ok := v.verified[token]
	v.verifiedMu.Unlock()
	if ok {
		return c, checkExp(c, v.now(), identKindIdentity)
	}
	c, err := v.check(ctx, token, identKindIdentity)
	if err != nil {
		return nil, err
	}
	if c.Org != v.org {
		return nil, identKindIdentity.refuse(errIdentOrganization, "org %q; this box serves %q", c.Org, v.org)
	}
	if c.Aud != v.aud {
		return nil, identKindIdentity.refuse(errIdentAudience, "aud %q; this box serves %q", c.Aud, v.aud)
	}
	v.verifiedMu.Lock()
	if len(v.verified) >= identVerifiedCap {
		clear(v.verified)
	}
	v.verified[token] = c
	v.verifiedMu.Unlock()
	return c, nil
}

// key returns the public key kid names, fetching the JWKS when there is
// none yet, when it is older than identJWKSMaxAge, or when kid is unknown
// and the last fetch is older than identRefetchEvery.
func (j *identKeySource) key(ctx context.Context, kid string, k identKind) (ed25519.PublicKey, error) {
	if kid == "" {
		return nil, k.refuse(errIdentMalformed, "header has no kid")
	}
	c := j.keys.Load()
	if c != nil && j.now().Sub(c.fetched) < identJWKSMaxAge {
		if pub, ok := c.keys[kid]; ok {
			return pub, nil
		}
	}
	c, err := j.refresh(ctx, c)
	if c == nil {
		return nil, k.refuse(errIdentNoKeys, "%v", err)
	}
	if pub, ok := c.keys[kid]; ok {
		return pub, nil
	}
	return nil, k.refuse(errIdentUnknownKey, "kid %q is not in %s", kid, j.issuer+identJWKS)
}

// refresh fetches the JWKS unless another caller did since seen was loaded
// or the last try is within identRefetchEvery; it returns the keys to use
// (the cached ones when the fetch fails or is skipped) and the fetch error.
func (j *identKeySource) refresh(ctx context.Context, seen *identKeyCache) (*identKeyCache, error) {
	j.fetchMu.Lock()
	defer j.fetchMu.Unlock()
	if c := j.keys.Load(); c != seen {
		return c, nil
	}
	now := j.now()
	if !j.lastTry.IsZero() && now.Sub(j.lastTry) < identRefetchEvery {
		return seen, errors.New("last fetch failed or is too recent to retry")
	}
	j.lastTry = now
	keys, err := j.fetch(ctx)
	if err != nil {
		return seen, err
	}
	c := &identKeyCache{keys: keys, fetched: now}
	j.keys.Store(c)
	return c, nil
}

// fetch reads the control plane's JWKS and keeps its Ed25519 signing keys;
// keys of other types are skipped.
func (j *identKeySource) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, identFetchTimeout)
	defer cancel()
	u := j.issuer + identJWKS
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	resp, err := j.client.Do(req)
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
