package main

// The control plane's proxy to deployments (DESIGN §7): any method on
// /{org}/{agent}/{path...} reaches <the agent's deployment URL>/{path...}
// with the query, signed with the deployment's secret (sign.go), and the
// answer streams back as it arrives (SSE chat streams and long polls are
// flushed per read, never buffered). The caller's credential stays here:
//
//   - a user credential of a member of the organization reaches every route
//     of the box but /.well-known/svc (the handshake, challenge and teach
//     routes belong to the control plane itself);
//   - an API key of the organization reaches the chat wires only
//     (/openai/, /anthropic/, /agui/, /chat).
//
// Authorization, cookies, x-api-key, incoming signature headers and
// hop-by-hop headers are not forwarded, nor are the box's Set-Cookie and
// hop-by-hop answer headers. A request body is bounded by cpProxyMaxBody
// (the box's own bound on a signed body). Each credential may send
// cpProxyRate requests a second, in bursts of cpProxyBurst (ratelimit.go);
// past that it gets 429 with Retry-After. The proxy moves the deployment's
// status from what it sees (cp_migrations/0001_control_plane.sql): the box
// answered → active (and last_active_at), no connection → unreachable, the
// box refused the signature → rejected. A box refusing for capacity (its
// replay window full, sign_window.go) or an overtaken counter is answered
// 503 replay_window_full with Retry-After and leaves the status alone: it
// says nothing about the secret.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// Limits and names of the proxy.
const (
	// cpProxyMaxBody bounds a proxied request body: the box refuses a signed
	// body over maxRequestBody, so the proxy refuses it first (413).
	cpProxyMaxBody = maxRequestBody
	// cpProxyDialTimeout bounds connecting to a box; past it the box is
	// unreachable. Answers have no time limit (long polls, SSE streams):
	// the caller going away cancels the call to the box.
	cpProxyDialTimeout = 5 * time.Second
	// cpProxyActiveEvery is how stale last_active_at may get before a
	// proxied call to an active deployment rewrites it, so a busy agent
	// costs one write per interval, not one per request.
	cpProxyActiveEvery = 30 * time.Second
	// cpProxyRefusalProbe bounds how much of a box's 401 the proxy reads to
	// tell a signature refusal from the box's other answers.
	cpProxyRefusalProbe = 64 << 10
	// cpProxyBuffer is the copy buffer of an answer; each read is flushed.
	cpProxyBuffer = 32 << 10
	// cpCodeBoxRejected is the error code of a box refusing the control
	// plane's signature.
	cpCodeBoxRejected = "box_rejected"
	// cpProxyRate and cpProxyBurst are each credential's proxied requests
	// a second and burst; cpProxyMaxKeys bounds the credentials tracked.
	cpProxyRate    = 50
	cpProxyBurst   = 100
	cpProxyMaxKeys = 10_000
	// cpSignLanes is how many sender ids a control plane process signs
	// with, in turn (sign.go): a box decides one sender's requests one at
	// a time, each a durable commit, so this many can be decided at once.
	cpSignLanes = 16
	// Deployment statuses the proxy sets (registered is link's).
	cpStatusActive      = "active"
	cpStatusUnreachable = "unreachable"
	cpStatusRejected    = "rejected"
)

// cpProxyHopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 (and
// the de-facto ones), never forwarded either way.
var cpProxyHopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// cpProxyCredentialHeaders carry the caller's credential to the control
// plane; the box gets a signature instead.
var cpProxyCredentialHeaders = append([]string{"Authorization", "Cookie", "X-Api-Key"}, signHeaders...)

// handleProxy is ANY /{org}/{agent}/{path...}: authenticate (the route is
// public to the credential middleware: the proxy takes API keys too), find
// the deployment, forward signed, stream the answer back.
func (s *cpServer) handleProxy(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	cred := wireCredential(r)
	if cred == "" {
		cpError(w, http.StatusUnauthorized, codeAuth, "send a user credential (svc login) or an API key of the organization: Authorization: Bearer <credential> or x-api-key: <key>")
		return
	}
	c, d, err := s.store.proxyTarget(ctx, cred, r.PathValue("org"), r.PathValue("agent"), s.proxyShared)
	var miss *cpProxyMiss
	if errors.As(err, &miss) && miss.status == http.StatusUnauthorized {
		cpError(w, miss.status, miss.code, miss.msg)
		return
	}
	if err != nil && miss == nil {
		s.internal(w, r, err)
		return
	}
	// A known caller's every request counts, its misses too: they may be
	// audited, and the log must not grow faster than the limit.
	ok, wait := s.limit.allow(c.principal())
	if ok && c.limited {
		ok, wait = false, s.proxyShared.wait()
	}
	if !ok {
		rateLimitRefuse(w, wait, fmt.Sprintf("this credential sent more than %d proxied requests a second (bursts of %d)", cpProxyRate, cpProxyBurst))
		return
	}
	if miss != nil {
		if miss.stranger {
			s.auditProxyRefused(r, c, c.apiKeyOrg, "not a member of the organization")
		}
		cpError(w, miss.status, miss.code, miss.msg)
		return
	}
	rest, ok := cpProxyRest(r.URL.EscapedPath())
	if !ok {
		cpError(w, http.StatusBadRequest, "invalid", "the path after /{org}/{agent}/ is not a valid path")
		return
	}
	clean := path.Clean("/" + rest.decoded)
	if clean == boxWellKnown || strings.HasPrefix(clean, boxWellKnown+"/") {
		s.auditProxyRefused(r, c, d.org, boxWellKnown+" is not proxied")
		cpError(w, http.StatusForbidden, "forbidden", boxWellKnown+" is the control plane's own channel to the box: it is not proxied")
		return
	}
	if c.apiKeyOrg != "" && httpGuardWire(clean) == nil {
		s.auditProxyRefused(r, c, d.org, "an API key reaches the chat wires only")
		cpError(w, http.StatusForbidden, "forbidden", "an API key reaches the chat wires only (/openai/, /anthropic/, /agui/, /chat): use a user credential (svc login) for "+clean)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, cpProxyMaxBody+1))
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", "read request body: "+err.Error())
		return
	}
	if len(body) > cpProxyMaxBody {
		cpError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("a proxied request body is at most %d bytes", cpProxyMaxBody))
		return
	}
	target := d.url + "/" + rest.escaped
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, target, bytes.NewReader(body))
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", "proxied request: "+err.Error())
		return
	}
	out.Header = cpProxyHeaders(r.Header, cpProxyCredentialHeaders)
	out.Header.Set(signPrincipalHeader, c.principal())
	s.signer.sign(out, body, d.secret, s.now())
	resp, err := s.proxy.RoundTrip(out)
	if err != nil {
		if ctx.Err() != nil {
			return // the caller went away; the box call was cancelled with it
		}
		s.noteDeployment(ctx, d, cpStatusUnreachable)
		cpError(w, http.StatusBadGateway, linkCodeUnreachable, fmt.Sprintf("cannot reach the deployment at %s: %v", d.url, err))
		return
	}
	defer resp.Body.Close()
	var answer io.Reader = resp.Body
	switch resp.Header.Get(signRefusedHeader) {
	case signCheckNames[errSignCapacity], signCheckNames[errSignStale]:
		w.Header().Set("Retry-After", "1")
		cpError(w, http.StatusServiceUnavailable, signCodeReplayWindow, "the deployment refused the signed request for capacity (its replay window), not for its secret: retry")
		return
	}
	if resp.StatusCode == http.StatusUnauthorized {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, cpProxyRefusalProbe))
		if bytes.Contains(head, []byte("verify signed request")) {
			s.noteDeployment(ctx, d, cpStatusRejected)
			cpError(w, http.StatusBadGateway, cpCodeBoxRejected, "the deployment refused the control plane's signature (its signing secret changed?): re-link it with svc link")
			return
		}
		answer = io.MultiReader(bytes.NewReader(head), resp.Body)
	}
	if resp.StatusCode < 500 {
		s.noteDeployment(ctx, d, cpStatusActive)
	}
	for k, v := range cpProxyHeaders(resp.Header, []string{"Set-Cookie"}) {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	cpProxyCopy(w, answer)
}

// auditProxyRefused appends a proxied call refused to the known caller c
// in organization org ("" when it is not theirs) for why. An unknown
// credential is not appended: it names nobody, and anyone could fill the
// log with such calls.
func (s *cpServer) auditProxyRefused(r *http.Request, c cpProxyCaller, org, why string) {
	e := cpAuditEvent{Org: org, ActorID: c.userID, Action: "proxy.refused", Outcome: cpAuditRefused, Target: r.Method + " " + r.URL.Path, Detail: why}
	if c.apiKeyID != "" {
		e.ActorID = c.apiKeyID
	}
	// The actor's name, as every other row has one (issue 38, item C): a
	// refusal costs this one more query, and refusals are counted, not
	// written a row each (cp_audit_refusals.go).
	e.Actor = s.store.actorName(r.Context(), c.userID, c.apiKeyID)
	s.audit(r, e)
}

// cpProxyCopy copies an answer to w, flushing each read. A box that breaks
// off mid-answer aborts the caller's response too, so a cut stream is not
// taken for a whole one.
func cpProxyCopy(w http.ResponseWriter, answer io.Reader) {
	rc := http.NewResponseController(w)
	rc.Flush() // the status and headers: an SSE client sees the stream open
	buf := make([]byte, cpProxyBuffer)
	for {
		n, err := answer.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the caller went away; returning cancels the box call
			}
			rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// cpProxyPath is the part of a proxied path after /{org}/{agent}/.
type cpProxyPath struct {
	escaped string // as the caller sent it: forwarded and signed as is
	decoded string // what the box's router will see
}

// cpProxyRest splits an escaped /{org}/{agent}/{rest} path; ok is false
// when rest does not decode.
func cpProxyRest(escaped string) (cpProxyPath, bool) {
	parts := strings.SplitN(strings.TrimPrefix(escaped, "/"), "/", 3)
	if len(parts) < 3 {
		return cpProxyPath{}, len(parts) == 2
	}
	dec, err := url.PathUnescape(parts[2])
	return cpProxyPath{escaped: parts[2], decoded: dec}, err == nil
}

// cpProxyHeaders copies h without the hop-by-hop headers, the headers its
// Connection header names, and drop.
func cpProxyHeaders(h http.Header, drop []string) http.Header {
	out := h.Clone()
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			out.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range cpProxyHopHeaders {
		out.Del(name)
	}
	for _, name := range drop {
		out.Del(name)
	}
	return out
}

// noteDeployment records what a proxied call saw of deployment d: a
// change of status is written at once, an active deployment's
// last_active_at once per cpProxyActiveEvery. A failed write is logged
// and not the caller's problem: the next call retries it.
func (s *cpServer) noteDeployment(ctx context.Context, d cpProxyDeployment, status string) {
	now := s.now()
	if status == d.status && (status != cpStatusActive || (d.lastActive != nil && now.Sub(*d.lastActive) < cpProxyActiveEvery)) {
		return
	}
	if err := s.store.setDeploymentStatus(context.WithoutCancel(ctx), d.id, status, now); err != nil {
		s.log.Warn("proxy: record deployment status", "deployment", d.id, "status", status, "err", err)
	}
}
