package main

import (
	"fmt"
	"net/http"
)

// handleGetSession serves GET /api/agents/{agent}/sessions/{id}: a page of
// the durable session's transcript (agent_history.go). Sessions belong to
// the credential that made them (session.go), so the caller sends the one
// it chats with; any other credential, like an unknown session, gets 404.
func (s *server) handleGetSession(w http.ResponseWriter, r *http.Request) {
	agent, key := r.PathValue("agent"), r.PathValue("id")
	cred := httpGuardPrincipal(r)
	if cred == "" {
		writeAPIError(w, http.StatusUnauthorized, apiError{Code: "auth",
			Message: "send the credential the session was made with: Authorization: Bearer <token> or x-api-key: <key>"})
		return
	}
	if len(key) > sessionMaxKeyLength {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_query", Message: fmt.Sprintf("a session id is at most %d bytes", sessionMaxKeyLength)})
		return
	}
	q, err := parseAgentHistoryQuery(r.URL.Query().Get("limit"), r.URL.Query().Get("cursor"))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_query", Message: err.Error()})
		return
	}
	if s.rt.agents == nil || s.rt.agents.sessions == nil {
		writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: "sessions_unavailable", Message: errSessionUnavailable.Error()})
		return
	}
	page, found, err := s.rt.agents.sessions.agentHistory(r.Context(), newSessionRef(agent, cred, key), q)
	if err != nil {
		s.log.Error("read session", "agent", agent, "err", err)
		writeAPIError(w, http.StatusServiceUnavailable, apiError{Code: "sessions_unavailable", Message: "could not read the session"})
		return
	}
	if !found {
		writeAPIError(w, http.StatusNotFound, apiError{Code: "session_not_found",
			Message: fmt.Sprintf("no session %q of agent %q for this credential (sessions are kept per agent and credential)", key, agent)})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, page)
}
