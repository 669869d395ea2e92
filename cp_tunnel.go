package main

// Tunnel registration tokens (DESIGN §7 tunnel): the control plane mints
// the signed-in user a short-lived token (identKindTunnel) for their own
// local-dev installation, which svc dev shows svc relay before each dial
// (tunnel.go, relay.go).

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// cpTunnelToken is the payload of POST /api/installations/{id}/tunnel.
type cpTunnelToken struct {
	Installation      cpInstallation `json:"installation"`
	RegistrationToken string         `json:"registration_token"`
	ExpiresAt         time.Time      `json:"expires_at"`
}

// handleTunnelToken mints the caller a registration token for their own
// local-dev installation (aud the installation, org its organization).
// Any other installation, another user's or a deployment's included, is
// 404.
func (s *cpServer) handleTunnelToken(w http.ResponseWriter, r *http.Request) {
	in, ok := s.ownLocalDev(w, r)
	if !ok {
		return
	}
	tok, claims := s.issuer.issueTunnel(caller(r).user.ID, in.OrganizationID, in.ID, s.now())
	writeJSON(w, http.StatusOK, cpTunnelToken{Installation: in, RegistrationToken: tok, ExpiresAt: time.Unix(claims.Exp, 0).UTC()})
}

// ownLocalDev returns the local-dev installation {id} of the caller of r,
// or answers 404 (any other installation) or 500 and reports false.
func (s *cpServer) ownLocalDev(w http.ResponseWriter, r *http.Request) (cpInstallation, bool) {
	in, err := s.store.installation(r.Context(), caller(r).user.ID, r.PathValue("id"))
	if err == nil && (in.Kind != "local_dev" || in.user != caller(r).user.ID) {
		err = errCPNotFound
	}
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no local-dev installation %q of yours: svc dev creates yours; a deployment's box takes the identity token of POST /api/installations/{id}/resolve", r.PathValue("id")))
		return in, false
	}
	if err != nil {
		s.internal(w, r, err)
		return in, false
	}
	return in, true
}
