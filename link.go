package main

// The box side of `svc link` as a client sees it (DESIGN §7): the public
// handshake GET /.well-known/svc, the signed secret proof POST
// /.well-known/svc/challenge and the signed teaching POST
// /.well-known/svc/teach. The CLI reads the handshake before it asks the
// control plane to link; the control plane (cp_link.go) does all three.

import (
	"bytes"
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
	"strings"
	"time"
)

// Names and limits of the box contract.
const (
	// linkMinProtocol is the oldest agent protocol a box may speak (SPEC §8).
	linkMinProtocol = 15
	// linkHandshakePath is the box's public handshake.
	linkHandshakePath = "/.well-known/svc"
	// linkBoxTimeout bounds one call to a box.
	linkBoxTimeout = 15 * time.Second
	// linkMaxAnswer bounds what is read of a box's answer.
	linkMaxAnswer = 64 << 10
	// linkControlPlaneEnv is the container variable a box reads its control plane
	// from; an unarmed box is told to set it.
	linkControlPlaneEnv = "SVC_CONTROL_PLANE_URL"
)

// Error codes of the box contract; every one exits 1 (SPEC §7, link).
const (
	linkCodeUnreachable = "box_unreachable"
	linkCodeTooOld      = "box_too_old"
	linkCodeNotABox     = "box_invalid"
	linkCodeMismatch    = "secret_mismatch"
	linkCodeTeach       = "teach_refused"
	// linkCodeBusy is a box whose replay window is full (sign_window.go):
	// its secret may well match; it refuses signed requests for now.
	linkCodeBusy = "box_busy"
	// linkCodeDatabaseDown is a box whose database is down: it cannot
	// check a signature's replay window (box_auth.go).
	linkCodeDatabaseDown = "box_database_unavailable"
)

// Identity verification states (SPEC §2, §3).
const (
	linkArmed   = "armed"
	linkUnarmed = "unarmed"
	linkUnknown = "unknown"
)

// linkHandshake is the box's public handshake document.
type linkHandshake struct {
	AgentProtocolVersion int    `json:"agent_protocol_version"`
	ImageTag             string `json:"image_tag"`
	Identity             string `json:"identity"` // armed | unarmed; "" when the box does not say
	ControlPlane         string `json:"control_plane"`
	Taught               bool   `json:"taught"`
	OrganizationID       string `json:"organization_id,omitempty"`
	InstallationID       string `json:"installation_id,omitempty"`
}

// linkTeaching is the body of the teach request.
type linkTeaching struct {
	OrganizationID  string `json:"organization_id"`
	InstallationID  string `json:"installation_id"`
	ControlPlaneURL string `json:"control_plane_url"`
}

// linkBoxError is a box that failed one step of link: Code is one of the
// linkCode… values. Its message never holds the secret.
type linkBoxError struct {
	Code    string
	Message string
	Err     error
}

func (e *linkBoxError) Error() string { return e.Message }
func (e *linkBoxError) Unwrap() error { return e.Err }

// linkBoxClient calls one box at a base URL, signing as signer. It never
// follows redirects: a signed request is valid for one target only, and a
// control plane must not be steered elsewhere by a box's answer.
type linkBoxClient struct {
	url    string // no trailing slash
	signer *signSender
	http   *http.Client
}

// newLinkBoxClient returns a client of the box at boxURL, which must be an
// absolute http or https URL. signer signs its requests (nil when it sends
// none signed, as the CLI's handshake); rt carries them (nil: the default
// transport; the control plane passes its own, which dials only inside
// its deployment networks).
func newLinkBoxClient(boxURL string, signer *signSender, rt http.RoundTripper) (*linkBoxClient, error) {
	if err := linkCheckURL(boxURL); err != nil {
		return nil, err
	}
	return &linkBoxClient{url: strings.TrimSuffix(boxURL, "/"), signer: signer, http: &http.Client{
		Transport:     rt,
		Timeout:       linkBoxTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// linkCheckURL reports whether u is an absolute http(s) URL with a host and
// neither credentials, query nor fragment.
func linkCheckURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" {
		return fmt.Errorf("url %q: want an absolute http or https URL such as https://agent.example.com", u)
	}
	return nil
}

// do sends method path with body (signed with secret when secret is not
// nil) and returns the status and at most linkMaxAnswer bytes of answer.
// A transport failure is box_unreachable; a box refusing a signed request
// for capacity (503, signRefusedHeader capacity) is box_busy, whatever the
// step.
func (b *linkBoxClient) do(ctx context.Context, method, path string, body, secret []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, &linkBoxError{Code: linkCodeUnreachable, Message: fmt.Sprintf("box at %s: %v", b.url, err), Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != nil {
		b.signer.sign(req, body, secret, time.Now())
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, nil, &linkBoxError{Code: linkCodeUnreachable, Message: fmt.Sprintf("the box at %s is unreachable: %v", b.url, errors.Unwrap(err)), Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, linkMaxAnswer))
	if err != nil {
		return 0, nil, &linkBoxError{Code: linkCodeUnreachable, Message: fmt.Sprintf("the box at %s broke off its answer: %v", b.url, err), Err: err}
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(signRefusedHeader) == signCheckNames[errSignCapacity] {
		return 0, nil, &linkBoxError{Code: linkCodeBusy, Message: fmt.Sprintf("the box at %s refused the signed request for capacity, not for its secret (%s): try again in a few minutes", b.url, linkBoxReason(raw))}
	}
	if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(raw, []byte(`"`+boxCodeDatabaseDown+`"`)) {
		return 0, nil, &linkBoxError{Code: linkCodeDatabaseDown, Message: fmt.Sprintf("the box at %s could not check the signed request: its database is unavailable", b.url)}
	}
	return resp.StatusCode, raw, nil
}

// handshake reads the box's public handshake and refuses a box older than
// linkMinProtocol, or one that does not answer as a box.
func (b *linkBoxClient) handshake(ctx context.Context) (linkHandshake, error) {
	var h linkHandshake
	status, raw, err := b.do(ctx, http.MethodGet, linkHandshakePath, nil, nil)
	if err != nil {
		return h, err
	}
	if status != http.StatusOK || json.Unmarshal(raw, &h) != nil || h.AgentProtocolVersion == 0 {
		return h, &linkBoxError{Code: linkCodeNotABox, Message: fmt.Sprintf("%s%s answered HTTP %d without a handshake: is this the URL of a svc box (svc serve)?", b.url, linkHandshakePath, status)}
	}
	if h.AgentProtocolVersion < linkMinProtocol {
		return h, &linkBoxError{Code: linkCodeTooOld, Message: fmt.Sprintf("the box at %s speaks agent protocol %d; link needs %d or newer: deploy a newer image", b.url, h.AgentProtocolVersion, linkMinProtocol)}
	}
	return h, nil
}

// proveSecret sends the box a signed random challenge and checks the MAC it
// answers against secret: the box must hold the same secret. A refused
// signature or a different MAC is secret_mismatch, naming what differed.
func (b *linkBoxClient) proveSecret(ctx context.Context, secret []byte) error {
	challenge := rand.Text()
	body, _ := json.Marshal(map[string]string{"challenge": challenge})
	status, raw, err := b.do(ctx, http.MethodPost, linkHandshakePath+"/challenge", body, secret)
	if err != nil {
		return err
	}
	if status == http.StatusUnauthorized {
		return &linkBoxError{Code: linkCodeMismatch, Message: fmt.Sprintf("secret mismatch: the box at %s refused the signed challenge (%s): --secret is not the signing secret the box holds", b.url, linkBoxReason(raw))}
	}
	var ans struct {
		MAC string `json:"mac"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &ans) != nil {
		return &linkBoxError{Code: linkCodeNotABox, Message: fmt.Sprintf("the box at %s answered the challenge with HTTP %d (%s)", b.url, status, linkBoxReason(raw))}
	}
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, challenge)
	got, err := hex.DecodeString(ans.MAC)
	if err != nil || !hmac.Equal(got, m.Sum(nil)) {
		return &linkBoxError{Code: linkCodeMismatch, Message: fmt.Sprintf("secret mismatch: the box at %s accepted the signature but answered the challenge with a MAC of another secret", b.url)}
	}
	return nil
}

// teach tells the box its organization, installation and control plane,
// signed with secret, and returns the handshake it answers. Anything but
// 200 with a handshake is teach_refused: the caller registers nothing.
func (b *linkBoxClient) teach(ctx context.Context, secret []byte, t linkTeaching) (linkHandshake, error) {
	var h linkHandshake
	body, _ := json.Marshal(t)
	status, raw, err := b.do(ctx, http.MethodPost, linkHandshakePath+"/teach", body, secret)
	if err != nil {
		return h, err
	}
	if status != http.StatusOK || json.Unmarshal(raw, &h) != nil || h.AgentProtocolVersion == 0 {
		return h, &linkBoxError{Code: linkCodeTeach, Message: fmt.Sprintf("the box at %s refused to be taught its installation (HTTP %d: %s); nothing was registered", b.url, status, linkBoxReason(raw))}
	}
	return h, nil
}

// linkBoxReason is the message of a box's error answer, else its first
// 200 bytes.
func linkBoxReason(raw []byte) string {
	var e struct {
		Error apiError `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "no reason given"
	}
	return s
}

// linkIdentityVerification is the identity verification report (SPEC §2).
type linkIdentityVerification struct {
	State   string  `json:"state"`
	Warning *string `json:"warning"`
}

// linkIdentityOf reports h's identity state; a box that is not armed gets
// a warning naming SVC_CONTROL_PLANE_URL, set to controlPlaneURL.
func linkIdentityOf(h linkHandshake, boxURL, controlPlaneURL string) linkIdentityVerification {
	var warn string
	state := h.Identity
	switch state {
	case linkArmed:
		return linkIdentityVerification{State: state}
	case linkUnarmed:
		warn = fmt.Sprintf("the box at %s does not verify browser identity, so the console and `svc --agent` get 401: set %s=%s on the container and restart it", boxURL, linkControlPlaneEnv, controlPlaneURL)
	default:
		state = linkUnknown
		warn = fmt.Sprintf("the box at %s does not say whether it verifies browser identity; if the console or `svc --agent` get 401, set %s=%s on the container and restart it", boxURL, linkControlPlaneEnv, controlPlaneURL)
	}
	return linkIdentityVerification{State: state, Warning: &warn}
}
