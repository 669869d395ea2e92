package main

// Single sign-on of the control plane through an OpenID Connect provider
// (issue 20 item 6): the settings (SVC_OIDC_*, read by cpRun), the
// provider's discovery document and JWKS, the code-for-token exchange and
// the ID token's verification. The sign-in itself (state, nonce, PKCE, the
// user it maps to) is cp_oidc_flow.go. Written on the standard library:
// RS256 and ES256 signatures, nothing else.

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits of single sign-on.
const (
	// cpOIDCSkew is the clock difference allowed between the provider and
	// the control plane on an ID token's exp and iat.
	cpOIDCSkew = 2 * time.Minute
	// cpOIDCMaxAge is how old an ID token's iat may be at its check: it was
	// just minted by the code exchange.
	cpOIDCMaxAge = 10 * time.Minute
	// cpOIDCMetadataMaxAge is how long a fetched discovery document and
	// JWKS are used before the next sign-in fetches them again.
	cpOIDCMetadataMaxAge = time.Hour
	// cpOIDCRefetchEvery is the least time between two JWKS fetches for a
	// kid not in the cached set (the provider rotated its keys).
	cpOIDCRefetchEvery = 30 * time.Second
	// cpOIDCMaxBody bounds a response of the provider.
	cpOIDCMaxBody = 256 << 10
	// cpOIDCMaxToken bounds an ID token.
	cpOIDCMaxToken = 32 << 10
	// cpOIDCTimeout bounds one request to the provider.
	cpOIDCTimeout = 10 * time.Second
	// cpOIDCMinRSABits is the least RSA modulus accepted.
	cpOIDCMinRSABits = 2048
)

// cpOIDCConfig is the single sign-on setting of a control plane: the
// provider (issuer, exactly as its discovery document names itself), the
// control plane's client there, who may sign in (an email domain or a
// "groups" claim value) and the organization a first sign-in joins.
type cpOIDCConfig struct {
	Issuer, ClientID, ClientSecret string
	Name                           string   // shown as "Sign in with <Name>"
	Domains                        []string // lower case
	Groups                         []string
	Org                            string   // slug
	Owners                         []string // lower-case emails, and group:NAME entries, who join Org as owners (SVC_OIDC_OWNERS)
}

// owner reports whether c's user joins as an owner: their email, or one of
// their groups, is among cfg.Owners.
func (cfg *cpOIDCConfig) owner(c *cpOIDCClaims) bool {
	for _, o := range cfg.Owners {
		if g, ok := strings.CutPrefix(o, "group:"); ok {
			if slices.Contains(c.Groups, g) {
				return true
			}
		} else if strings.EqualFold(o, c.Email) {
			return true
		}
	}
	return false
}

// cpParseOIDC checks the SVC_OIDC_* settings (cpRun reads them); nil
// without an issuer. defaultOrg is the organization of --org, joined when
// org is empty.
func cpParseOIDC(issuer, clientID, secret, domains, groups, org, name, owners, defaultOrg string) (*cpOIDCConfig, error) {
	if issuer == "" {
		if clientID != "" || secret != "" || domains != "" || groups != "" || owners != "" {
			return nil, errors.New("SVC_OIDC_CLIENT_ID, _CLIENT_SECRET, _ALLOWED_* or _OWNERS is set but SVC_OIDC_ISSUER is not")
		}
		return nil, nil
	}
	if err := cpOIDCCheckURL(issuer); err != nil {
		return nil, fmt.Errorf("SVC_OIDC_ISSUER: %w", err)
	}
	if clientID == "" || secret == "" {
		return nil, errors.New("SVC_OIDC_ISSUER is set: set SVC_OIDC_CLIENT_ID and SVC_OIDC_CLIENT_SECRET too (the control plane's client at the provider)")
	}
	c := &cpOIDCConfig{Issuer: issuer, ClientID: clientID, ClientSecret: secret, Name: name, Org: cmp.Or(org, defaultOrg)}
	for _, d := range cpSplitList(domains) {
		d = strings.TrimPrefix(strings.ToLower(d), "@")
		if strings.ContainsAny(d, "@/ ") || !strings.Contains(d, ".") && d != "localhost" {
			return nil, fmt.Errorf("SVC_OIDC_ALLOWED_DOMAINS: %q is not a domain like example.com", d)
		}
		c.Domains = append(c.Domains, d)
	}
	c.Groups = cpSplitList(groups)
	for _, o := range cpSplitList(owners) {
		if g, ok := strings.CutPrefix(o, "group:"); ok && g != "" {
			c.Owners = append(c.Owners, o)
			continue
		}
		if _, err := mail.ParseAddress(o); err != nil || strings.ContainsAny(o, "<> ") {
			return nil, fmt.Errorf("SVC_OIDC_OWNERS: %q is neither an email nor group:NAME", o)
		}
		c.Owners = append(c.Owners, strings.ToLower(o))
	}
	if len(c.Domains) == 0 && len(c.Groups) == 0 {
		return nil, errors.New("SVC_OIDC_ISSUER is set: say who may sign in with SVC_OIDC_ALLOWED_DOMAINS (email domains) or SVC_OIDC_ALLOWED_GROUPS (values of the groups claim)")
	}
	if !cpSlugPattern.MatchString(c.Org) {
		return nil, fmt.Errorf("SVC_OIDC_ORG: %q is not an organization slug", c.Org)
	}
	if c.Name == "" {
		u, _ := url.Parse(issuer)
		c.Name = u.Host
	}
	return c, nil
}

// cpSplitList splits a comma-separated setting, dropping blanks.
func cpSplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// cpOIDCCheckURL accepts an absolute https URL, or http on a loopback host
// (a provider on the same machine), without user, query or fragment.
func cpOIDCCheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want an absolute https URL without query or fragment", raw)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && cpLoopbackHost(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q: want https (http only on a loopback host)", raw)
}

// cpLoopbackHost reports whether host is localhost or a loopback address.
func cpLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cpOIDCDiscovery is what the control plane reads of the provider's
// /.well-known/openid-configuration.
type cpOIDCDiscovery struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	JWKSURI               string   `json:"jwks_uri"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
}

// cpOIDCKey is a verification key of the provider's JWKS and the algorithm
// it verifies.
type cpOIDCKey struct {
	alg string // RS256 or ES256
	pub crypto.PublicKey
}

// cpOIDCProvider talks to the provider for the control plane: a cache of
// its discovery document and keys (the same at every replica: a cache, no
// state), the code exchange and the ID token's check.
type cpOIDCProvider struct {
	cfg    cpOIDCConfig
	client *http.Client
	now    func() time.Time

	mu         sync.Mutex
	disc       *cpOIDCDiscovery
	discAt     time.Time
	keys       map[string]cpOIDCKey
	keysAt     time.Time // last successful JWKS fetch
	keysTryAt  time.Time // last JWKS fetch tried
	keysSource string    // the jwks_uri keys came from
}

// newCPOIDCProvider returns the provider of cfg; its client follows no
// redirects (each URL comes from the issuer's own document).
func newCPOIDCProvider(cfg cpOIDCConfig) *cpOIDCProvider {
	return &cpOIDCProvider{cfg: cfg, now: time.Now, client: &http.Client{Timeout: cpOIDCTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// cpOIDCError is a refused sign-in: the status to answer and what to tell
// the user (and the audit log). Anything else failing is internal.
type cpOIDCError struct {
	status int
	msg    string
	// unreachable marks a provider that did not answer (as against one that
	// answered wrong): at boot the first is a warning, the second stops it.
	unreachable bool
}

// Error is the message.
func (e *cpOIDCError) Error() string { return e.msg }

// checkAtBoot reads the provider's discovery document once at boot
// (issue 38, item C): a provider that answers with another issuer, or
// endpoints the control plane may not call, stops the boot with what to
// fix, instead of a 502 at the first "Sign in"; one that does not answer
// yet is only a warning.
func (p *cpOIDCProvider) checkAtBoot(ctx context.Context, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := p.discover(ctx)
	var oe *cpOIDCError
	if errors.As(err, &oe) && oe.unreachable {
		log.Warn("single sign-on: the identity provider does not answer yet; sign-ins through it fail until it does", "issuer", p.cfg.Issuer, "err", err)
		return nil
	}
	return err
}

// oidcRefuse returns a *cpOIDCError.
func oidcRefuse(status int, format string, args ...any) error {
	return &cpOIDCError{status: status, msg: fmt.Sprintf(format, args...)}
}

// get reads a JSON document of the provider into v.
func (p *cpOIDCProvider) get(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	return p.do(req, v)
}

// do sends req and decodes its JSON answer (at most cpOIDCMaxBody) into v;
// a status other than 200 is an error naming it and the provider's error.
func (p *cpOIDCProvider) do(req *http.Request, v any) error {
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, cpOIDCMaxBody+1))
	if err != nil || len(b) > cpOIDCMaxBody {
		return fmt.Errorf("%s: body over %d bytes or cut: %v", req.URL, cpOIDCMaxBody, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		json.Unmarshal(b, &e)
		return fmt.Errorf("%s: status %d %s %s", req.URL, resp.StatusCode, cpClientText(e.Error, 64), cpClientText(e.Description, 200))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", req.URL, err)
	}
	return nil
}

// discover returns the provider's discovery document, fetched at most every
// cpOIDCMetadataMaxAge; its issuer must be the configured one exactly and
// its endpoints URLs the control plane may call.
func (p *cpOIDCProvider) discover(ctx context.Context) (*cpOIDCDiscovery, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.disc != nil && p.now().Sub(p.discAt) < cpOIDCMetadataMaxAge {
		return p.disc, nil
	}
	u := strings.TrimSuffix(p.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	var d cpOIDCDiscovery
	if err := p.get(ctx, u, &d); err != nil {
		return nil, &cpOIDCError{status: http.StatusBadGateway, unreachable: true, msg: fmt.Sprintf("the identity provider's discovery document could not be read: %v", err)}
	}
	if d.Issuer != p.cfg.Issuer {
		return nil, oidcRefuse(http.StatusBadGateway, "the identity provider's discovery document names the issuer %q, not %q (SVC_OIDC_ISSUER must match it exactly)", cpClientText(d.Issuer, 200), p.cfg.Issuer)
	}
	for name, e := range map[string]string{"authorization_endpoint": d.AuthorizationEndpoint, "token_endpoint": d.TokenEndpoint, "jwks_uri": d.JWKSURI} {
		if err := cpOIDCCheckURL(e); err != nil {
			return nil, oidcRefuse(http.StatusBadGateway, "the identity provider's %s: %v", name, err)
		}
	}
	if len(d.CodeChallengeMethods) > 0 && !slices.Contains(d.CodeChallengeMethods, "S256") {
		return nil, oidcRefuse(http.StatusBadGateway, "the identity provider does not support PKCE with S256 (code_challenge_methods_supported %v)", d.CodeChallengeMethods)
	}
	p.disc, p.discAt = &d, p.now()
	return p.disc, nil
}

// exchange trades an authorization code for the provider's ID token, with
// the PKCE verifier and the client's secret (HTTP Basic, RFC 6749 §2.3.1).
func (p *cpOIDCProvider) exchange(ctx context.Context, d *cpOIDCDiscovery, code, verifier, redirectURI string) (string, error) {
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(p.cfg.ClientID), url.QueryEscape(p.cfg.ClientSecret))
	var tok struct {
		IDToken string `json:"id_token"`
	}
	if err := p.do(req, &tok); err != nil {
		return "", oidcRefuse(http.StatusBadGateway, "the identity provider refused the code exchange: %v", err)
	}
	if tok.IDToken == "" {
		return "", oidcRefuse(http.StatusBadGateway, "the identity provider's token answer has no id_token")
	}
	return tok.IDToken, nil
}

// key returns the provider's key kid, fetching the JWKS when there is none
// yet, when it is older than cpOIDCMetadataMaxAge, or when kid is unknown and
// the last try is older than cpOIDCRefetchEvery.
func (p *cpOIDCProvider) key(ctx context.Context, d *cpOIDCDiscovery, kid string) (cpOIDCKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	fresh := p.keys != nil && p.keysSource == d.JWKSURI && now.Sub(p.keysAt) < cpOIDCMetadataMaxAge
	if k, ok := p.keys[kid]; ok && fresh {
		return k, nil
	}
	if !fresh || now.Sub(p.keysTryAt) >= cpOIDCRefetchEvery {
		p.keysTryAt = now
		keys, err := p.fetchKeys(ctx, d.JWKSURI)
		if err != nil {
			return cpOIDCKey{}, oidcRefuse(http.StatusBadGateway, "the identity provider's keys (%s) could not be read: %v", d.JWKSURI, err)
		}
		p.keys, p.keysAt, p.keysSource = keys, now, d.JWKSURI
	}
	if k, ok := p.keys[kid]; ok {
		return k, nil
	}
	return cpOIDCKey{}, oidcRefuse(http.StatusUnauthorized, "the ID token is signed with key %q, which is not in the identity provider's JWKS", cpClientText(kid, 100))
}

// cpOIDCJWK is one key of a JWKS as the control plane reads it.
type cpOIDCJWK struct {
	Kty, Kid, Use, Alg, Crv string
	N, E, X, Y              string
}

// fetchKeys reads the JWKS at u and keeps its RSA (RS256) and P-256
// (ES256) signing keys with a kid; others are skipped.
func (p *cpOIDCProvider) fetchKeys(ctx context.Context, u string) (map[string]cpOIDCKey, error) {
	var set struct {
		Keys []cpOIDCJWK `json:"keys"`
	}
	if err := p.get(ctx, u, &set); err != nil {
		return nil, err
	}
	keys := map[string]cpOIDCKey{}
	for _, j := range set.Keys {
		if j.Kid == "" || (j.Use != "" && j.Use != "sig") {
			continue
		}
		if k, err := cpOIDCParseJWK(j); err == nil {
			keys[j.Kid] = k
		}
	}
	return keys, nil
}

// cpOIDCParseJWK reads an RSA key (at least cpOIDCMinRSABits) or a P-256
// key; its alg, when named, must be the one its type verifies.
func cpOIDCParseJWK(j cpOIDCJWK) (cpOIDCKey, error) {
	switch j.Kty {
	case "RSA":
		n, err1 := identB64.DecodeString(j.N)
		e, err2 := identB64.DecodeString(j.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 || (j.Alg != "" && j.Alg != "RS256") {
			return cpOIDCKey{}, errors.New("not an RS256 key")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < cpOIDCMinRSABits || pub.E < 3 {
			return cpOIDCKey{}, errors.New("RSA key too small")
		}
		return cpOIDCKey{alg: "RS256", pub: pub}, nil
	case "EC":
		x, err1 := identB64.DecodeString(j.X)
		y, err2 := identB64.DecodeString(j.Y)
		if err1 != nil || err2 != nil || j.Crv != "P-256" || len(x) != 32 || len(y) != 32 || (j.Alg != "" && j.Alg != "ES256") {
			return cpOIDCKey{}, errors.New("not an ES256 key")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return cpOIDCKey{}, err
		}
		return cpOIDCKey{alg: "ES256", pub: pub}, nil
	}
	return cpOIDCKey{}, fmt.Errorf("key type %q", j.Kty)
}

// cpOIDCAudience is an aud claim: one string or an array of them.
type cpOIDCAudience []string

// UnmarshalJSON reads either form.
func (a *cpOIDCAudience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = cpOIDCAudience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("aud is neither a string nor an array of strings")
	}
	*a = many
	return nil
}

// cpOIDCClaims are the claims of an ID token the control plane reads.
type cpOIDCClaims struct {
	Iss           string         `json:"iss"`
	Sub           string         `json:"sub"`
	Aud           cpOIDCAudience `json:"aud"`
	Azp           string         `json:"azp"`
	Exp           float64        `json:"exp"`
	Iat           float64        `json:"iat"`
	Nonce         string         `json:"nonce"`
	Email         string         `json:"email"`
	EmailVerified any            `json:"email_verified"` // true, or "true" from some providers
	Name          string         `json:"name"`
	Groups        []string       `json:"groups"`
}

// verify checks idToken: at most cpOIDCMaxToken bytes; alg RS256 or ES256
// with a kid of the provider's JWKS and a valid signature by it; iss the
// issuer exactly; aud containing the client id, azp (required with several
// audiences) the client id; exp not passed and iat not in the future (both
// within cpOIDCSkew) nor older than cpOIDCMaxAge; the nonce the one whose
// SHA-256 is nonceHash; a subject; a verified email.
func (p *cpOIDCProvider) verify(ctx context.Context, d *cpOIDCDiscovery, idToken string, nonceHash []byte) (*cpOIDCClaims, error) {
	bad := func(format string, args ...any) error {
		return oidcRefuse(http.StatusUnauthorized, "the ID token is refused: "+format, args...)
	}
	if len(idToken) > cpOIDCMaxToken {
		return nil, bad("longer than %d bytes", cpOIDCMaxToken)
	}
	parts := strings.Split(idToken, ".")
	if len(parts) != 3 {
		return nil, bad("not a signed JWT (want 3 dot-separated segments)")
	}
	var raw [3][]byte
	for i, s := range parts {
		b, err := identB64.DecodeString(s)
		if err != nil || len(b) == 0 {
			return nil, bad("segment %d is not base64url", i+1)
		}
		raw[i] = b
	}
	var h identHeader
	if err := identDecodeStrict(raw[0], &h); err != nil {
		return nil, bad("header: %v", err)
	}
	if h.Alg != "RS256" && h.Alg != "ES256" {
		return nil, bad("alg %q; only RS256 and ES256 are accepted", cpClientText(h.Alg, 20))
	}
	if len(h.Crit) > 0 || h.Kid == "" {
		return nil, bad("header names no kid, or extensions (crit) the control plane does not understand")
	}
	k, err := p.key(ctx, d, h.Kid)
	if err != nil {
		return nil, err
	}
	if k.alg != h.Alg {
		return nil, bad("alg %s, but key %q is an %s key", h.Alg, cpClientText(h.Kid, 100), k.alg)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !cpOIDCSignatureOK(k, sum[:], raw[2]) {
		return nil, bad("its signature does not verify with the provider's key %q: it was altered or not issued by %s", cpClientText(h.Kid, 100), p.cfg.Issuer)
	}
	var c cpOIDCClaims
	if err := identDecodeStrict(raw[1], &c); err != nil {
		return nil, bad("claims: %v", err)
	}
	now := p.now()
	switch {
	case c.Iss != p.cfg.Issuer:
		return nil, bad("iss %q is not the issuer %q", cpClientText(c.Iss, 200), p.cfg.Issuer)
	case !slices.Contains(c.Aud, p.cfg.ClientID):
		return nil, bad("it is for another client (aud %q), not this control plane's %q", cpClientText(strings.Join(c.Aud, ","), 200), p.cfg.ClientID)
	case (len(c.Aud) > 1 || c.Azp != "") && c.Azp != p.cfg.ClientID:
		return nil, bad("azp %q is not this control plane's client %q", cpClientText(c.Azp, 200), p.cfg.ClientID)
	case c.Exp == 0 || time.Unix(int64(c.Exp), 0).Add(cpOIDCSkew).Before(now):
		return nil, bad("it expired (exp %d)", int64(c.Exp))
	case c.Iat == 0 || time.Unix(int64(c.Iat), 0).After(now.Add(cpOIDCSkew)) || time.Unix(int64(c.Iat), 0).Before(now.Add(-cpOIDCMaxAge-cpOIDCSkew)):
		return nil, bad("iat %d is in the future or too old", int64(c.Iat))
	case c.Nonce == "" || !hmac.Equal(cpHash(c.Nonce), nonceHash):
		return nil, bad("its nonce is not the one this sign-in sent: the token belongs to another sign-in")
	case c.Sub == "" || len(c.Sub) > 255:
		return nil, bad("no subject (sub), or one over 255 bytes")
	case c.Email == "":
		return nil, bad("it has no email claim: let the client receive the email scope's claims in the ID token")
	case c.EmailVerified != true && c.EmailVerified != "true":
		return nil, oidcRefuse(http.StatusForbidden, "the identity provider has not verified the email %s (email_verified is not true)", cpClientText(c.Email, 254))
	}
	return &c, nil
}

// cpOIDCSignatureOK verifies sig over the SHA-256 digest with k: PKCS #1
// v1.5 for RS256, r||s of 32 bytes each for ES256.
func cpOIDCSignatureOK(k cpOIDCKey, digest, sig []byte) bool {
	switch pub := k.pub.(type) {
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest, sig) == nil
	case *ecdsa.PublicKey:
		if len(sig) != 64 {
			return false
		}
		return ecdsa.Verify(pub, digest, new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
	}
	return false
}

// allowed reports whether c may sign in: its email's domain is one of the
// allowed domains, or one of its groups one of the allowed groups.
func (cfg *cpOIDCConfig) allowed(c *cpOIDCClaims) error {
	domain := strings.ToLower(c.Email[strings.LastIndex(c.Email, "@")+1:])
	if slices.Contains(cfg.Domains, domain) {
		return nil
	}
	for _, g := range c.Groups {
		if slices.Contains(cfg.Groups, g) {
			return nil
		}
	}
	var allowed []string
	if len(cfg.Domains) > 0 {
		allowed = append(allowed, "an email in "+strings.Join(cfg.Domains, ", "))
	}
	if len(cfg.Groups) > 0 {
		allowed = append(allowed, "membership of the group "+strings.Join(cfg.Groups, ", "))
	}
	return oidcRefuse(http.StatusForbidden, "%s may not sign in to this control plane: it takes %s. Ask its owner", cpClientText(c.Email, 254), strings.Join(allowed, " or "))
}
