package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
)

// handleFleetCall is POST /internal/fleet/{op}: a call from another
// replica of the fleet about runs this one holds (engine_fleet_rpc.go). It
// is served outside the guard, with a credential of its own: the fleet's
// token, which only the replicas (and whoever reads the database) know. On
// the file journal there is no such route (404).
func (s *server) handleFleetCall(w http.ResponseWriter, r *http.Request) {
	f := s.rt.engine
	if f == nil || !f.shared() || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	if !f.fleetTokenValid(r.Header.Get(fleetTokenHeader)) {
		writeAPIError(w, http.StatusUnauthorized, apiError{Code: "auth", Message: "calls between replicas need the fleet's token"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, fleetMaxBody+1))
	if err != nil || len(body) > fleetMaxBody {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_body", Message: "the call's body could not be read, or is too large"})
		return
	}
	res, err := f.serveCall(r.Context(), strings.TrimPrefix(r.URL.Path, fleetRPCPath), r.URL.Query().Get("p"), body)
	switch {
	case errors.Is(err, errFleetBadCall):
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_partition", Message: err.Error()})
	case errors.Is(err, errFleetNotOwner):
		writeAPIError(w, http.StatusConflict, apiError{Code: "not_owner", Message: err.Error()})
	default:
		writeJSON(w, http.StatusOK, fleetAnswerOf(res, err))
	}
}
