package main

// The box (`svc serve`, DESIGN §7): the shared runtime (runtime.go) serving
// a deployed project, with the box's own side of the deployment loop: the
// public handshake, the signing secret and its proof, teaching, and the
// identity it verifies console and CLI traffic with (box_auth.go).

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Names and limits of the box.
const (
	// boxWellKnown is the handshake route; the signed challenge and teach
	// routes sit under it.
	boxWellKnown = "/.well-known/svc"
	// boxSecretName and boxTeachingName are the box's entries in its
	// encrypted secret store.
	boxSecretName   = "box_signing_secret"
	boxTeachingName = "box_teaching"
	// boxSecretBytes is the size of a minted signing secret (hex-encoded).
	boxSecretBytes = 32
	// boxMaxChallenge bounds a challenge, in bytes.
	boxMaxChallenge = 1024
	// boxMaxID bounds a taught organization or installation id, in bytes.
	boxMaxID = 200
	// boxArmTimeout bounds the JWKS fetch that arms the box at boot and
	// when it is taught.
	boxArmTimeout = 5 * time.Second
)

// boxDefaultControlPlane is the control plane a box trusts when it was
// never taught one and SVC_CONTROL_PLANE_URL is unset (SPEC §5). A var so
// a build can set it: -ldflags "-X main.boxDefaultControlPlane=https://…".
var boxDefaultControlPlane = "https://control.svc.dev"

// Identity states of the handshake (SPEC §3 identity verification).
const (
	boxArmed   = "armed"
	boxUnarmed = "unarmed"
)

// boxHandshake is GET /.well-known/svc: public, no secret in it.
type boxHandshake struct {
	AgentProtocolVersion int    `json:"agent_protocol_version"`
	ImageTag             string `json:"image_tag"`
	Identity             string `json:"identity"`
	ControlPlane         string `json:"control_plane"`
	Taught               bool   `json:"taught"`
	OrganizationID       string `json:"organization_id,omitempty"`
	InstallationID       string `json:"installation_id,omitempty"`
}

// boxTeaching is what the control plane taught the box (POST
// /.well-known/svc/teach), kept in its secret store across restarts.
type boxTeaching struct {
	OrganizationID  string `json:"organization_id"`
	InstallationID  string `json:"installation_id"`
	ControlPlaneURL string `json:"control_plane_url"`
}

// validate checks a teaching before anything is stored.
func (t boxTeaching) validate() error {
	for _, f := range [...][2]string{{"organization_id", t.OrganizationID}, {"installation_id", t.InstallationID}} {
		if f[1] == "" || len(f[1]) > boxMaxID || strings.IndexFunc(f[1], boxIDForeign) >= 0 {
			return fmt.Errorf("%s must be 1-%d characters of letters, digits, '-', '_' and '.'", f[0], boxMaxID)
		}
	}
	return boxCheckURL(t.ControlPlaneURL)
}

// boxIDForeign reports whether r may not appear in a taught id.
func boxIDForeign(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

// boxCheckURL checks a control plane URL: http or https with a host.
func boxCheckURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("control plane URL %q: want http(s)://host[:port][/path]", s)
	}
	return nil
}

// boxOptions are the validated flags and environment of `svc serve`.
type boxOptions struct {
	addr     string // listen address
	dataDir  string // absolute state directory
	imageTag string // SVC_IMAGE_TAG
	// hmacSecret is HMAC_SECRET: when set it wins over the stored secret.
	hmacSecret string
	// controlPlane is SVC_CONTROL_PLANE_URL, "" when unset.
	controlPlane string
	// apiKeys are SVC_API_KEYS: keys the chat wires accept.
	apiKeys []string
	// masterKey is SVC_MASTER_KEY, the secret store's key; nil keeps the
	// key in dataDir/master.key.
	masterKey []byte
	// s3Endpoint is SVC_S3_ENDPOINT: external object storage ("": the
	// built-in one).
	s3Endpoint string
	// engine is SVC_ENGINE and its lease settings (engine_store.go).
	engine engineSettings
}

// boxRuntime is a running box: the shared runtime, the signature verifier
// of its secret, what it was taught and the identity verifier it arms.
// Built by bootBox; the teaching and verifier change atomically.
type boxRuntime struct {
	*runtimeCore
	opts    boxOptions
	signer  *signVerifier
	secret  []byte
	keys    *httpGuardKeys // opts.apiKeys, accepted on the chat wires
	taught  atomic.Pointer[boxTeaching]
	ident   atomic.Pointer[identVerifier]
	trusted atomic.Pointer[string] // the control plane URL of ident
	teachMu sync.Mutex             // one teaching at a time
}

// boxSigningSecret returns the signing secret: HMAC_SECRET when set, else
// the one stored in the box's secret store, minted (32 random bytes,
// hex-encoded) on the first boot, which alone logs it, once, at WARN.
func (b *boxRuntime) boxSigningSecret(ctx context.Context) ([]byte, error) {
	if b.opts.hmacSecret != "" {
		b.log.Info("signing secret from HMAC_SECRET")
		return []byte(b.opts.hmacSecret), nil
	}
	v, ok, err := b.secrets.get(ctx, boxSecretName)
	if err != nil {
		return nil, err
	}
	if ok {
		return v, nil
	}
	raw := make([]byte, boxSecretBytes)
	rand.Read(raw)
	minted := []byte(hex.EncodeToString(raw))
	if err := b.secrets.put(ctx, boxSecretName, minted); err != nil {
		return nil, err
	}
	b.log.Warn("first boot: minted the signing secret; it is shown only now: pass it to svc link --secret (HMAC_SECRET overrides it)",
		"signing_secret", string(minted))
	return minted, nil
}

// loadTeaching reads what the box was taught on an earlier boot.
func (b *boxRuntime) loadTeaching(ctx context.Context) error {
	v, ok, err := b.secrets.get(ctx, boxTeachingName)
	if err != nil || !ok {
		return err
	}
	var t boxTeaching
	if err := json.Unmarshal(v, &t); err != nil {
		return fmt.Errorf("read the box's teaching: %w", err)
	}
	b.taught.Store(&t)
	return nil
}

// boxTeachingPoll is how often a box looks for a teaching another replica
// of its fleet stored (svc link reaches one replica of a fleet).
const boxTeachingPoll = 500 * time.Millisecond

// watchTeaching adopts, within boxTeachingPoll, a teaching stored in the
// database by another replica sharing it (or by this one), and arms
// against it: svc link teaches the replica it reaches, and every replica
// of the fleet admits what it taught without a restart. It stops with the
// box.
func (b *boxRuntime) watchTeaching() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var seen time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(boxTeachingPoll):
			}
			var at time.Time
			err := b.secrets.db.QueryRow(ctx, `select updated_at from svc.secrets where name = $1`, boxTeachingName).Scan(&at)
			if err != nil || at.Equal(seen) {
				continue // none yet, unchanged, or the database is away: asked again next time
			}
			seen = at
			b.adoptTeaching(ctx)
		}
	}()
	b.closers = append(b.closers, func(context.Context) error { cancel(); <-done; return nil })
}

// adoptTeaching reads the stored teaching and, when it differs from the
// one in force, makes it the box's and arms against it.
func (b *boxRuntime) adoptTeaching(ctx context.Context) {
	b.teachMu.Lock()
	defer b.teachMu.Unlock()
	v, ok, err := b.secrets.get(ctx, boxTeachingName)
	if err != nil || !ok {
		return
	}
	var t boxTeaching
	if json.Unmarshal(v, &t) != nil {
		return
	}
	if cur := b.taught.Load(); cur != nil && *cur == t {
		return
	}
	b.taught.Store(&t)
	b.log.Info("taught (the teaching another replica stored)", "organization", t.OrganizationID, "installation", t.InstallationID, "control_plane", t.ControlPlaneURL)
	b.arm(ctx)
}

// controlPlane returns the control plane the box trusts and why: taught >
// SVC_CONTROL_PLANE_URL > boxDefaultControlPlane.
func (b *boxRuntime) controlPlane() (cpURL, source string) {
	switch t := b.taught.Load(); {
	case t != nil:
		return t.ControlPlaneURL, "taught"
	case b.opts.controlPlane != "":
		return b.opts.controlPlane, "SVC_CONTROL_PLANE_URL"
	}
	return boxDefaultControlPlane, boxDefaultSource
}

// boxDefaultSource is the source of the built-in default control plane.
const boxDefaultSource = "built-in default"

// boxUntaught stands for the organization and installation of a box never
// taught: no token carries it, so its verifier admits nobody, yet it
// fetches the JWKS and so reports whether the box could verify.
const boxUntaught = "(untaught)"

// arm builds the identity verifier for the trusted control plane and what
// the box was taught, and fetches its JWKS once (bounded) so the
// handshake can say armed. A verifier that could not fetch keeps trying
// on the next token (at most once per identRefetchEvery).
func (b *boxRuntime) arm(ctx context.Context) {
	if fetch := b.armVerifier(); fetch != nil {
		fetch(ctx)
	}
}

// armAtBoot is arm without holding up the boot: the box serves (unarmed)
// while the first JWKS fetch runs, which an unreachable or air-gapped
// control plane would otherwise stretch to boxArmTimeout. Closing the box
// ends the fetch and waits for it.
func (b *boxRuntime) armAtBoot() {
	fetch := b.armVerifier()
	if fetch == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fetch(ctx)
	}()
	b.closers = append(b.closers, func(context.Context) error { cancel(); <-done; return nil })
}

// armVerifier installs a verifier for the trusted control plane and what
// the box was taught, and returns the fetch of its keys that arms it (nil
// when no verifier could be built).
func (b *boxRuntime) armVerifier() func(context.Context) {
	cpURL, source := b.controlPlane()
	org, aud := boxUntaught, boxUntaught
	if t := b.taught.Load(); t != nil {
		org, aud = t.OrganizationID, t.InstallationID
	}
	v, err := newIdentVerifier(cpURL, org, aud, nil, nil)
	if err != nil {
		b.log.Error("identity verifier", "err", err)
		return nil
	}
	b.ident.Store(v)
	b.trusted.Store(&cpURL)
	return func(ctx context.Context) { b.fetchKeys(ctx, v, cpURL, source) }
}

// fetchKeys fetches v's JWKS once, bounded by boxArmTimeout, and logs
// whether the box is armed against cpURL.
func (b *boxRuntime) fetchKeys(ctx context.Context, v *identVerifier, cpURL, source string) {
	ctx, cancel := context.WithTimeout(ctx, boxArmTimeout)
	defer cancel()
	_, ferr := v.refresh(ctx, nil)
	if ferr != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return // the box is closing
		}
		if source == boxDefaultSource {
			// Nothing to warn about: a box is unarmed until svc link
			// teaches it its control plane, which arms it then.
			b.log.Info("identity not armed yet: svc link teaches this box its control plane and arms it", "control_plane", cpURL, "source", source)
			return
		}
		b.log.Warn("identity unarmed: cannot reach the control plane's keys; console and CLI traffic is answered 401 until it can",
			"control_plane", cpURL, "source", source, "jwks", cpURL+identJWKS, "err", ferr,
			"hint", "set SVC_CONTROL_PLANE_URL to your control plane, or link the box with svc link")
		return
	}
	b.log.Info("identity armed", "control_plane", cpURL, "source", source, "taught", b.taught.Load() != nil)
}

// identity reports armed once the verifier holds the control plane's keys.
func (b *boxRuntime) identity() string {
	if v := b.ident.Load(); v != nil && v.keys.Load() != nil {
		return boxArmed
	}
	return boxUnarmed
}

// handshake is the public handshake document.
func (b *boxRuntime) handshake() boxHandshake {
	cpURL, _ := b.controlPlane()
	h := boxHandshake{AgentProtocolVersion: agentProtocolVersion, ImageTag: b.opts.imageTag, Identity: b.identity(), ControlPlane: cpURL}
	if t := b.taught.Load(); t != nil {
		h.Taught, h.OrganizationID, h.InstallationID = true, t.OrganizationID, t.InstallationID
	}
	return h
}

// routes are the box's own routes, beside the shared ones.
func (b *boxRuntime) routes() []route {
	return []route{
		{"GET", "/{$}", "public: a browser opening the box is sent to its console at the control plane that taught it", b.handleRoot},
		{"GET", boxWellKnown, "the box's public handshake: agent protocol, image tag, identity state, trusted control plane, teaching", b.handleHandshake},
		{"POST", boxWellKnown + "/challenge", `signed: proves the signing secret; {"challenge":"…"} answered {"mac":"<hex HMAC-SHA256(secret, challenge)>"}`, b.handleChallenge},
		{"POST", boxWellKnown + "/teach", "signed: teaches the organization, installation and control plane URL; answers the handshake", b.handleTeach},
	}
}

// handleHandshake serves GET /.well-known/svc.
func (b *boxRuntime) handleHandshake(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, b.handshake())
}

// handleRoot sends a browser opening the box's URL to the console of its
// deployment at the control plane that taught it (GET /box/{installation}
// there, cp_console.go): the box serves no pages of its own. A box never
// taught, or unarmed, answers 401 saying what to do, as its API would.
func (b *boxRuntime) handleRoot(w http.ResponseWriter, r *http.Request) {
	t := b.taught.Load()
	var msg string
	switch {
	case t == nil:
		msg = "This box was never linked, so it admits no console traffic yet.\n\n" +
			"Link it from your project: svc link --agent <slug> --url <this box's URL> --secret <the signing secret its first boot logged>,\n" +
			"then open this URL again: it leads to the console at your control plane."
	case b.identity() != boxArmed:
		cpURL, _ := b.controlPlane()
		msg = fmt.Sprintf("This box cannot verify identity tokens yet: it has not reached its control plane's keys at %s.\n\n"+
			"Check that the box can reach %s (set SVC_CONTROL_PLANE_URL or re-link it with svc link);\n"+
			"until then its console at %s is refused.", cpURL+identJWKS, cpURL, boxConsoleURL(t))
	default:
		http.Redirect(w, r, boxConsoleURL(t), http.StatusFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, msg+"\n")
}

// boxConsoleURL is the console of the deployment t taught, at its control
// plane.
func boxConsoleURL(t *boxTeaching) string {
	return t.ControlPlaneURL + cpBoxConsolePath + url.PathEscape(t.InstallationID)
}

// handleChallenge answers a signed challenge with its MAC under the
// signing secret; the guard verified the signature (box_auth.go).
func (b *boxRuntime) handleChallenge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Challenge string `json:"challenge"`
	}
	if !boxDecode(w, r, &in) {
		return
	}
	if in.Challenge == "" || len(in.Challenge) > boxMaxChallenge {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_challenge", Message: fmt.Sprintf("challenge must be 1-%d bytes", boxMaxChallenge)})
		return
	}
	m := hmac.New(sha256.New, b.secret)
	m.Write([]byte(in.Challenge))
	writeJSON(w, http.StatusOK, map[string]string{"mac": hex.EncodeToString(m.Sum(nil))})
}

// handleTeach stores a signed teaching, arms against its control plane and
// answers the handshake document.
func (b *boxRuntime) handleTeach(w http.ResponseWriter, r *http.Request) {
	var t boxTeaching
	if !boxDecode(w, r, &t) {
		return
	}
	t.ControlPlaneURL = strings.TrimSuffix(t.ControlPlaneURL, "/")
	if err := t.validate(); err != nil {
		writeAPIError(w, http.StatusUnprocessableEntity, apiError{Code: "invalid_teaching", Message: err.Error()})
		return
	}
	b.teachMu.Lock()
	defer b.teachMu.Unlock()
	v, _ := json.Marshal(t)
	if err := b.secrets.put(r.Context(), boxTeachingName, v); err != nil {
		b.log.Error("store teaching", "err", err)
		writeAPIError(w, http.StatusInternalServerError, apiError{Code: "internal", Message: "could not store the teaching"})
		return
	}
	b.taught.Store(&t)
	b.log.Info("taught", "organization", t.OrganizationID, "installation", t.InstallationID, "control_plane", t.ControlPlaneURL)
	b.arm(r.Context())
	writeJSON(w, http.StatusOK, b.handshake())
}

// boxDecode reads r's JSON body into v, answering 400 or 413 itself.
func boxDecode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := readBody(r)
	if errors.Is(err, errBodyTooLarge) {
		writeAPIError(w, http.StatusRequestEntityTooLarge, apiError{Code: "too_large", Message: err.Error()})
		return false
	}
	if err == nil {
		if err = edgeJSON.check(body); err == nil {
			err = json.Unmarshal(body, v)
		}
	}
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: err.Error()})
		return false
	}
	return true
}

// warnSchemaDrift logs at WARN what src/schema.ts declares that the box's
// database still lacks once the committed migrations ran. A box runs no
// auto-migrate, so a project deployed before `svc dev` wrote its
// migrations would fail only at its first query; the log says so at boot.
// It only reads (the shadow schema is rolled back), and a failure to check
// is logged, never fatal.
func (b *boxRuntime) warnSchemaDrift(ctx context.Context, pgURL string) {
	if _, err := os.Stat(filepath.Join(b.proj.Dir, amSchemaFile)); err != nil {
		return
	}
	tables, err := amLoadSchema(ctx, b.proj.Dir, io.Discard)
	var changes []amChange
	if err == nil {
		changes, err = amPlan(ctx, pgURL, tables)
	}
	if err != nil {
		b.log.Warn("could not compare "+amSchemaFile+" with the database", "err", err)
		return
	}
	var what []string
	for _, c := range changes {
		if c.What != "" {
			what = append(what, c.What)
		}
	}
	if len(what) > 0 {
		b.log.Warn("the database lacks what "+amSchemaFile+" declares; queries of it will fail", "missing", strings.Join(what, "; "),
			"hint", "run svc dev once so auto-migrate writes .svc/migrations, commit them and redeploy: a box applies committed migrations only")
	}
}
