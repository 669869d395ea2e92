package main

// The control plane's side of `svc link` (SPEC §4.2 rules 3–6, DESIGN §7):
// POST /api/orgs/{org}/agents/{agent}/link reads the box's handshake,
// proves the secret, teaches the box, and only then records the
// deployment. Any failure before the record leaves nothing saved.

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// cpLinkRequest is the body of the link route. The secret is sealed at
// rest once proven and never answered.
type cpLinkRequest struct {
	URL      string `json:"url"`
	Secret   string `json:"secret"`
	ImageTag string `json:"image_tag"`
}

// cpLinkResult is the link route's answer: the parts of the SPEC §4.2
// payload the control plane knows.
type cpLinkResult struct {
	Agent                cpAgent                  `json:"agent"`
	OrganizationID       string                   `json:"organization_id"`
	LocalDevInstallation cpInstallation           `json:"local_dev_installation"`
	Installation         cpInstallation           `json:"installation"` // the one the box was taught
	Deployment           cpDeployment             `json:"deployment"`
	IdentityVerification linkIdentityVerification `json:"identity_verification"`
}

// validate checks the request's fields, with messages that say what to pass.
func (in cpLinkRequest) validate() error {
	if err := linkCheckURL(in.URL); err != nil {
		return err
	}
	if in.ImageTag == "" || len(in.ImageTag) > 256 || strings.ContainsAny(in.ImageTag, " \t\r\n") {
		return errors.New("image_tag: want a semver or digest, at most 256 bytes, no spaces")
	}
	if len(in.Secret) < signMinSecret || len(in.Secret) > 1024 {
		return fmt.Errorf("secret: want %d to 1024 bytes, the signing secret the box printed on its first boot", signMinSecret)
	}
	return nil
}

// handleLink links a box to the agent: handshake (protocol ≥ 15), secret
// proof, teaching, then the record (re-linking updates the agent's one
// deployment). It is the only way a deployment is recorded, so the proxy
// only ever reaches a URL that proved it holds the secret. A URL that is
// unreachable or does not answer as a box is answered 502 box_unreachable
// with one message whatever happened; a box outside the deployment
// networks 422 box_outside_networks; a box that refused the signed request
// for capacity 503 box_busy (retry later, never a secret mismatch); a box's
// other failures 422 with their code (box_too_old, secret_mismatch,
// teach_refused).
func (s *cpServer) handleLink(w http.ResponseWriter, r *http.Request) {
	o, a, ok := s.orgAgent(w, r)
	if !ok {
		return
	}
	var in cpLinkRequest
	if !cpDecode(w, r, &in) {
		return
	}
	if err := in.validate(); err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	in.URL = strings.TrimSuffix(in.URL, "/")
	box, _ := newLinkBoxClient(in.URL, s.signer, s.proxy)
	ctx, secret := r.Context(), []byte(in.Secret)
	boxFailed := func(err error) {
		var be *linkBoxError
		if !errors.As(err, &be) {
			s.internal(w, r, err)
			return
		}
		s.log.Info("link refused", "org", o.Slug, "agent", a.Slug, "url", in.URL, "code", be.Code, "reason", be.Message)
		s.audit(r, cpAuditEvent{Org: o.ID, Action: "deployment.link", Outcome: cpAuditRefused, Target: a.Slug, Detail: "url " + in.URL + ", " + be.Code})
		var outside *cpNetworkError
		switch {
		case errors.As(err, &outside):
			cpError(w, http.StatusUnprocessableEntity, cpCodeOutsideNetworks, fmt.Sprintf("the box at %s is outside the networks this control plane reaches deployments in (%s): deploy it inside them, or ask the control plane's operator to add its network", in.URL, cpNetworksEnv))
		case be.Code == linkCodeBusy || be.Code == linkCodeDatabaseDown:
			w.Header().Set("Retry-After", "60")
			cpError(w, http.StatusServiceUnavailable, be.Code, be.Message)
		case be.Code == linkCodeUnreachable || be.Code == linkCodeNotABox:
			// One answer whatever the URL did (port refused, connection
			// closed, TLS failed, an HTTP answer that is not a box's): link
			// must not tell a signed-in user what the control plane's
			// network holds. The detail is in the log above.
			cpError(w, http.StatusBadGateway, linkCodeUnreachable, fmt.Sprintf("box unreachable or not an svc box at %s: check that the URL is the box's base URL (svc serve) and that the control plane can reach it", in.URL))
		default:
			cpError(w, http.StatusUnprocessableEntity, be.Code, be.Message)
		}
	}
	if _, err := box.handshake(ctx); err != nil {
		boxFailed(err)
		return
	}
	if err := box.proveSecret(ctx, secret); err != nil {
		boxFailed(err)
		return
	}
	inst, err := s.store.installationOf(ctx, o, a.ID, "deployment", "")
	if err != nil {
		s.internal(w, r, err)
		return
	}
	taught, err := box.teach(ctx, secret, linkTeaching{OrganizationID: o.ID, InstallationID: inst.ID, ControlPlaneURL: s.url})
	if err != nil {
		boxFailed(err)
		return
	}
	s.audit(r, cpAuditEvent{Org: o.ID, Action: "box.taught", Target: a.Slug, Detail: fmt.Sprintf("url %s taught organization %s, installation %s", in.URL, o.ID, inst.ID)})
	d, inst, err := s.store.recordDeployment(ctx, o, a.ID, in.URL, in.ImageTag, secret, caller(r).user)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	local, err := s.store.installationOf(ctx, o, a.ID, "local_dev", caller(r).user.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.log.Info("linked", "org", o.Slug, "agent", a.Slug, "deployment", d.ID, "url", d.URL, "image_tag", d.ImageTag, "identity", taught.Identity)
	s.audit(r, cpAuditEvent{Org: o.ID, Action: "deployment.linked", Target: a.Slug, Detail: fmt.Sprintf("deployment %s, url %s, image_tag %s, identity %s",
		d.ID, d.URL, d.ImageTag, taught.Identity)})
	writeJSON(w, http.StatusOK, cpLinkResult{Agent: a, OrganizationID: o.ID, LocalDevInstallation: local, Installation: inst,
		Deployment: d, IdentityVerification: linkIdentityOf(taught, in.URL, s.url)})
}
