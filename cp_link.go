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
// deployment). A box's failure is answered 502 box_unreachable, 503
// box_busy (its replay window is full) or 422 with its code (box_too_old,
// box_invalid, secret_mismatch, teach_refused).
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
	box, _ := newLinkBoxClient(in.URL, s.signer)
	ctx, secret := r.Context(), []byte(in.Secret)
	boxFailed := func(err error) {
		var be *linkBoxError
		if !errors.As(err, &be) {
			s.internal(w, r, err)
			return
		}
		status := http.StatusUnprocessableEntity
		switch be.Code {
		case linkCodeUnreachable:
			status = http.StatusBadGateway
		case linkCodeBusy:
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "60")
		}
		s.log.Info("link refused", "org", o.Slug, "agent", a.Slug, "url", in.URL, "code", be.Code, "reason", be.Message)
		cpError(w, status, be.Code, be.Message)
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
	d, inst, err := s.store.recordDeployment(ctx, o, a.ID, in.URL, in.ImageTag, secret)
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
	writeJSON(w, http.StatusOK, cpLinkResult{Agent: a, OrganizationID: o.ID, LocalDevInstallation: local, Installation: inst,
		Deployment: d, IdentityVerification: linkIdentityOf(taught, in.URL, s.url)})
}
