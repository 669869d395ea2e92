package main

// `svc control-plane` (DESIGN §7): organizations, users, agents,
// installations, deployments, API keys, device-code sign-in, identity
// tokens and their JWKS, as a JSON API on PostgreSQL. Errors are
// {"error":{"code","message"}}. Every route but the sign-in ones, the
// device page, the console at svc dev's deeplink and a deployment's
// (cp_console.go) and the JWKS needs a user credential: "Authorization: Bearer
// <credential>", or the console cookie on the device page; each route of
// the table names the role it needs in its organization (cp_members.go). Any other path
// /{org}/{agent}/... is the signed proxy to the agent's deployment
// (cp_proxy.go), which takes the organization's API keys too.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Names of the control plane.
const (
	// cpDefaultAddr is where svc control-plane listens by default.
	cpDefaultAddr = "127.0.0.1:4300"
	// cpCookie is the console's session cookie: a "console" credential.
	cpCookie = "svc_cp_session"
)

// cpCaller is the signed-in user of a request and the credential used.
type cpCaller struct {
	user   cpUser
	credID string
}

// cpCallerKey is the context key of the request's *cpCaller.
type cpCallerKey struct{}

// cpRoute is one route of the control plane: "" as method means any;
// access is who may call it (cp_members.go); own marks a route whose
// handler checks its callers itself (the proxy takes API keys, the pages
// the console cookie), which the credential middleware lets through.
type cpRoute struct {
	method, path string
	purpose      string // what it is for, as docs/http-api.md shows it
	access       cpAccess
	own          bool
	handler      http.HandlerFunc
}

// cpServer is the control plane's HTTP surface: its mux, the credential
// check in front of it (one middleware) and the body pacing of the guard.
type cpServer struct {
	store  *cpStore
	issuer *identIssuer
	url    string // public base URL: the tokens' iss and the device page's address
	log    *slog.Logger
	now    func() time.Time

	mux    *http.ServeMux
	public map[string]bool // patterns the credential check lets through: public routes, and those checking their own callers
	guard  *httpGuard
	proxy  *http.Transport // the proxy's and link's connections to the boxes, inside SVC_DEPLOYMENT_NETWORKS (cp_network.go)
	signer *signSender     // this process signing to the boxes (sign.go)
	limit  *rateLimiter    // proxied requests per credential (cp_proxy.go)
	// signInLimit bounds the unauthenticated sign-in requests of each
	// source (limitSignIn, cp_device.go).
	signInLimit *rateLimiter
	// signInShared is the same limit across the replicas on the database.
	signInShared *cpSharedLimit
	// proxyShared is limit's (the proxy's) across the replicas.
	proxyShared *cpSharedLimit
	// tunnelDomain is the relay's --domain (SVC_TUNNEL_DOMAIN): the console
	// at a deeplink talks only to https://<sub>.tun.<tunnelDomain>; "" turns
	// that console off (cp_console.go).
	tunnelDomain string
	// oidc is the single sign-on provider (SVC_OIDC_*, cp_oidc.go); nil:
	// none.
	oidc *cpOIDCProvider
	// refusals counts repeated refusals for the audit log (cp_audit_refusals.go).
	refusals cpAuditRefusals
}

// newCPServer builds the server over store, issuing tokens as the control
// plane at baseURL; all are required.
func newCPServer(store *cpStore, issuer *identIssuer, baseURL string, log *slog.Logger) (*cpServer, error) {
	if store == nil || issuer == nil || baseURL == "" || log == nil {
		return nil, errors.New("new control plane server: want a store, an issuer, a URL and a logger")
	}
	s := &cpServer{store: store, issuer: issuer, url: strings.TrimSuffix(baseURL, "/"), log: log, now: time.Now, mux: http.NewServeMux(), public: map[string]bool{}, proxy: newCPProxyTransport(nil),
		signer: newSignSender(cpSignLanes), limit: newRateLimiter(cpProxyRate, cpProxyBurst, cpProxyMaxKeys),
		signInLimit: newRateLimiter(cpSignInRate, cpSignInBurst, cpSignInKeys), signInShared: &cpSharedLimit{store: store, table: "cp.sign_in_limits", rate: cpSignInRate, burst: cpSignInBurst},
		proxyShared: &cpSharedLimit{store: store, table: "cp.proxy_limits", rate: cpProxyRate, burst: cpProxyBurst}}
	for _, r := range s.routes() {
		if r.access == 0 {
			return nil, fmt.Errorf("new control plane server: route %s %s has no access rule", r.method, r.path)
		}
		pattern := strings.TrimSpace(r.method + " " + r.path)
		s.mux.HandleFunc(pattern, s.enforce(r))
		s.public[pattern] = r.access == cpPublic || r.own
	}
	var err error
	s.guard, err = newHTTPGuard(http.HandlerFunc(s.authenticate), httpGuardConfig{})
	return s, err
}

// routes is the one route table of the control plane, each route with who
// may call it (TestCPRoleRoutes sends every role to every route).
func (s *cpServer) routes() []cpRoute {
	return []cpRoute{
		{"GET", identJWKS, "the control plane's public signing keys (JWKS): boxes verify identity tokens with them", cpPublic, false, s.handleJWKS},
		{"POST", "/api/login/device", "start a device sign-in (svc login): a user code and the page to approve it on", cpPublic, false, s.limitSignIn(s.handleDeviceStart)},
		{"POST", "/api/login/device/token", "poll a device sign-in: the credential once a signed-in browser approved the code", cpPublic, false, s.limitSignIn(s.handleDevicePoll)},
		{"POST", "/api/login/code", "trade a one-time sign-in code (the first boot's, or svc login --browser's) for a browser session", cpPublic, false, s.limitSignIn(s.handleSignInCode)},
		// A signed-in caller accepts as itself: the handler reads the bearer.
		{"POST", "/api/login/invitation", "accept an invitation code: sign up (or join as the signed-in user) with the role it gives", cpPublic, true, s.limitSignIn(s.handleAcceptInvitation)},
		{"POST", "/api/login/codes", "a one-time code that signs a browser in as the caller (svc login --browser); at most 5 live", cpUserOnly, false, s.handleNewSignInCode},
		{"GET", "/device", "the sign-in page: a one-time code, an invitation, single sign-on, and approving a device code", cpPublic, false, s.handleDevicePage},
		{"POST", "/device/sign-in", "the sign-in page's form: a one-time code or an invitation for a browser session", cpPublic, false, s.limitSignIn(s.handleDevicePageSignIn)},
		{"GET", "/oidc/start", "single sign-on: redirect to the OpenID provider", cpPublic, false, s.limitSignIn(s.handleOIDCStart)},
		{"GET", cpOIDCCallbackPath, "single sign-on: the provider's answer; signs the browser in", cpPublic, false, s.limitSignIn(s.handleOIDCCallback)},
		// The device page's forms check the console cookie themselves, and
		// answer a browser without it with the page, not JSON.
		{"POST", "/device/approve", "the sign-in page's approval of a device code, by a signed-in browser", cpUserOnly, true, s.handleDevicePageApprove},
		{"POST", "/api/login/device/approve", "approve a device code as the caller", cpUserOnly, false, s.handleDeviceApprove},
		{"POST", "/api/logout", "revoke the caller's credential", cpUserOnly, false, s.handleLogout},
		{"GET", "/api/whoami", "the caller: user, organizations and roles", cpUserOnly, false, s.handleWhoami},
		// A user's own credentials: the store queries name the caller.
		{"GET", "/api/credentials", "the caller's live credentials (devices and browsers): created, last used, expiry", cpUserOnly, false, s.handleListCredentials},
		{"DELETE", "/api/credentials/{id}", "revoke one of the caller's credentials", cpUserOnly, false, s.handleRevokeCredential},
		{"GET", "/api/orgs", "the caller's organizations and roles", cpUserOnly, false, s.handleListOrgs},
		{"POST", "/api/orgs", `create an organization {"slug","name"}; the caller is its owner (audited org.created)`, cpUserOnly, false, s.handleCreateOrg},
		{"PATCH", "/api/orgs/{org}", `rename an organization {"name"} (its slug stays; audited org.renamed)`, cpAdmin, false, s.handleRenameOrg},
		{"GET", "/api/orgs/{org}/agents", "the organization's agents and their deployments", cpMember, false, s.handleListAgents},
		{"POST", "/api/orgs/{org}/agents", "create an agent (owners and admins)", cpAdmin, false, s.handleCreateAgent},
		{"POST", "/api/orgs/{org}/agents/{agent}/local-dev-installation", "the installation id svc link --local gives a developer's svc dev", cpMember, false, s.handleLocalDevInstallation},
		{"GET", "/api/orgs/{org}/agents/{agent}/deployment", "an agent's deployment: URL, tag, status", cpMember, false, s.handleGetDeployment},
		{"POST", "/api/orgs/{org}/agents/{agent}/link", "link a box (svc link): the control plane checks its handshake and signature, then teaches it", cpAdmin, false, s.handleLink},
		{"PATCH", "/api/orgs/{org}/agents/{agent}", "rename an agent (its slug stays)", cpAdmin, false, s.handleRenameAgent},
		{"DELETE", "/api/orgs/{org}/agents/{agent}", "delete an agent; refused while a deployment is linked unless ?force=true", cpAdmin, false, s.handleDeleteAgent},
		{"GET", "/api/orgs/{org}/agents/{agent}/deployment/history", "every link of an agent's deployment: who, when, URL, tag", cpMember, false, s.handleDeploymentHistory},
		// The installation routes act in the installation's organization:
		// their store queries join the caller's memberships.
		{"POST", "/api/installations/{id}/resolve", "where an installation is served (svc --agent): the box's URL or the proxy's", cpMember, false, s.handleResolve},
		{"POST", "/api/installations/{id}/token", "an identity token for one installation (the console and the CLI present it to the box)", cpMember, false, s.handleToken},
		{"POST", "/api/installations/{id}/tunnel", "a tunnel registration token for svc dev's relay session", cpMember, false, s.handleTunnelToken},
		{"GET", "/api/orgs/{org}/api-keys", "the organization's API keys (never the keys themselves)", cpAdmin, false, s.handleListAPIKeys},
		{"POST", "/api/orgs/{org}/api-keys", "create an API key for the chat wires through the proxy; answered once with the key", cpAdmin, false, s.handleCreateAPIKey},
		{"DELETE", "/api/orgs/{org}/api-keys/{id}", "revoke an API key", cpAdmin, false, s.handleRevokeAPIKey},
		{"GET", "/api/orgs/{org}/members", "the organization's members and roles", cpMember, false, s.handleListMembers},
		{"PATCH", "/api/orgs/{org}/members/{member}", "change a member's role (owner, admin, member)", cpAdmin, false, s.handleSetRole},
		{"DELETE", "/api/orgs/{org}/members/{member}", "remove a member: their access ends at once", cpAdmin, false, s.handleRemoveMember},
		{"GET", "/api/orgs/{org}/invitations", "the pending invitations", cpAdmin, false, s.handleListInvitations},
		{"POST", "/api/orgs/{org}/invitations", "invite an email with a role: a one-time code valid 7 days", cpAdmin, false, s.handleInvite},
		{"DELETE", "/api/orgs/{org}/invitations/{id}", "revoke a pending invitation", cpAdmin, false, s.handleRevokeInvitation},
		{"GET", "/api/orgs/{org}/audit", "the organization's audit log, newest first; ?since=, ?before=, ?limit=", cpAdmin, false, s.handleListAudit},
		{"GET", "/api/orgs/{org}/audit/verify", "verify the audit log's HMAC-keyed hash chain", cpAdmin, false, s.handleVerifyAudit},
		// The team page holds no data: its script calls the routes above.
		{"GET", "/team/{org}", "the team page: members, invitations, agents, keys, audit (a page; its script calls the routes above)", cpPublic, false, cpHandleTeamPage},
		{"GET", "/team/team.js", "the team page's script", cpPublic, false, cpHandleTeamScript},
		{"GET", "/dev/{installation}", "the console at svc dev's deeplink, talking to the session through the relay", cpPublic, false, s.handleConsole},
		{"GET", "/dev/console/{file...}", "the console's files under /dev/", cpPublic, false, cpHandleConsoleFile},
		// A deployment's console is served to a member with the console
		// cookie (cpServer.deployed joins the memberships).
		{"GET", cpBoxConsolePath + "{installation}", "a deployed box's console, for a member signed in to this control plane", cpMember, true, s.handleBoxConsole},
		{"GET", cpBoxConsolePath + "console/{file...}", "the console's files under /box/", cpPublic, false, cpHandleConsoleFile},
		// The proxy checks its own callers: a member's credential or the
		// organization's API key (cpStore.proxyTarget).
		{"", "/{org}/{agent}/{path...}", "the proxy: a member's credential or the organization's API key reaches the agent's box (signed requests), e.g. /{org}/{agent}/openai/v1/chat/completions", cpMember, true, s.handleProxy},
	}
}

// ServeHTTP serves a request: body pacing, then authenticate, then the mux.
func (s *cpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.guard.ServeHTTP(w, r) }

// authenticate is the one credential check: a public route passes; any
// other needs a live credential (bearer, or the console cookie, whose
// state-changing requests must come from the control plane's own origin),
// and runs with its *cpCaller in the context.
func (s *cpServer) authenticate(w http.ResponseWriter, r *http.Request) {
	_, pattern := s.mux.Handler(r)
	if pattern == "" || s.public[pattern] {
		s.mux.ServeHTTP(w, r)
		return
	}
	tok := identBearer(r)
	if tok == "" {
		if c, err := r.Cookie(cpCookie); err == nil {
			tok = c.Value
			if httpGuardStateChanging(r.Method) && r.Header.Get("Origin") != s.origin() {
				cpError(w, http.StatusForbidden, "forbidden", "a console request must come from "+s.origin())
				return
			}
		}
	}
	if tok == "" {
		cpError(w, http.StatusUnauthorized, codeAuth, "sign in first: svc login --control-plane "+s.url)
		return
	}
	u, cred, err := s.store.userByCredential(r.Context(), tok)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusUnauthorized, codeAuth, "the credential is unknown, revoked, or expired after it went unused: svc login again")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cpCallerKey{}, &cpCaller{user: u, credID: cred})))
}

// origin is scheme://host[:port] of the control plane's URL.
func (s *cpServer) origin() string {
	u, err := url.Parse(s.url)
	if err != nil {
		return s.url
	}
	return u.Scheme + "://" + u.Host
}

// caller is the signed-in user of an authenticated route.
func caller(r *http.Request) *cpCaller { return r.Context().Value(cpCallerKey{}).(*cpCaller) }

// cpError answers {"error":{"code","message"}} with status.
func cpError(w http.ResponseWriter, status int, code, message string) {
	writeAPIError(w, status, apiError{Code: code, Message: message})
}

// internal logs err with the request and answers 500 without its detail.
func (s *cpServer) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("control plane request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	cpError(w, http.StatusInternalServerError, "internal", "internal error; the control plane log has the detail")
}

// cpDecode reads r's JSON body (at most maxRequestBody) into v, refusing
// unknown fields; on failure it answers 400 and returns false.
func cpDecode(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := readBody(r)
	if err == nil {
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.DisallowUnknownFields()
		err = d.Decode(v)
	}
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", "request body: "+err.Error())
		return false
	}
	return true
}

// orgAgent resolves the {org} and {agent} path values; on failure it
// answers and returns false.
func (s *cpServer) orgAgent(w http.ResponseWriter, r *http.Request) (cpOrg, cpAgent, bool) {
	o, ok := s.org(w, r)
	if !ok {
		return o, cpAgent{}, false
	}
	a, err := s.store.agent(r.Context(), o.ID, r.PathValue("agent"))
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no agent %q in organization %s", r.PathValue("agent"), o.Slug))
		return o, a, false
	}
	if err != nil {
		s.internal(w, r, err)
		return o, a, false
	}
	return o, a, true
}

// handleJWKS serves the identity-token public keys.
func (s *cpServer) handleJWKS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, s.issuer.keySet())
}

// cpWhoami is the payload of GET /api/whoami.
type cpWhoami struct {
	User          cpUser  `json:"user"`
	Organizations []cpOrg `json:"organizations"`
}

// handleWhoami answers the caller and their organizations.
func (s *cpServer) handleWhoami(w http.ResponseWriter, r *http.Request) {
	c := caller(r)
	orgs, err := s.store.userOrgs(r.Context(), c.user.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cpWhoami{User: c.user, Organizations: orgs})
}

// handleLogout revokes the credential the request carried.
func (s *cpServer) handleLogout(w http.ResponseWriter, r *http.Request) {
	if err := s.store.revokeCredential(r.Context(), caller(r).credID); err != nil {
		s.internal(w, r, err)
		return
	}
	s.audit(r, cpAuditEvent{Action: "signout", Target: caller(r).user.Email, Detail: "credential " + caller(r).credID + " revoked"})
	writeJSON(w, http.StatusOK, map[string]bool{"revoked": true})
}

// handleListAgents lists the organization's agents.
func (s *cpServer) handleListAgents(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	agents, err := s.store.listAgents(r.Context(), o.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": agents})
}

// handleCreateAgent creates an agent {slug, name (default the slug; 1 to
// cpNameMax bytes)}; 409 when the slug is taken.
func (s *cpServer) handleCreateAgent(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	var in struct{ Slug, Name string }
	if !cpDecode(w, r, &in) {
		return
	}
	if !cpSlugPattern.MatchString(in.Slug) {
		cpError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("slug %q: want lowercase letters, digits and dashes, at most 63, starting with a letter or digit", cpClientText(in.Slug, 64)))
		return
	}
	if in.Name == "" {
		in.Name = in.Slug
	}
	var err error
	if in.Name, err = cpCheckName(in.Name); err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	a, err := s.store.createAgent(r.Context(), o.ID, in.Slug, in.Name)
	if errors.Is(err, errCPConflict) {
		cpError(w, http.StatusConflict, "conflict", fmt.Sprintf("organization %s already has an agent %q", o.Slug, in.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.audit(r, cpAuditEvent{Org: o.ID, Action: "agent.created", Target: a.Slug, Detail: "agent " + a.ID})
	writeJSON(w, http.StatusCreated, a)
}

// handleLocalDevInstallation answers the caller's local-dev installation
// of the agent (SPEC §2), creating it the first time.
func (s *cpServer) handleLocalDevInstallation(w http.ResponseWriter, r *http.Request) {
	o, a, ok := s.orgAgent(w, r)
	if !ok {
		return
	}
	in, err := s.store.installationOf(r.Context(), o, a.ID, "local_dev", caller(r).user.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// handleGetDeployment answers the agent's deployment with its status
// (registered, active, unreachable, rejected; cp_proxy.go); 404
// no_deployment when it has none.
func (s *cpServer) handleGetDeployment(w http.ResponseWriter, r *http.Request) {
	_, a, ok := s.orgAgent(w, r)
	if !ok {
		return
	}
	d, err := s.store.deploymentOf(r.Context(), a.ID)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, "no_deployment", fmt.Sprintf("agent %s has no deployment: run svc link", a.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// cpIdentity is an identity token minted for a caller and the
// installation it is for (its aud).
type cpIdentity struct {
	Installation  cpInstallation `json:"installation"`
	IdentityToken string         `json:"identity_token"`
	ExpiresAt     time.Time      `json:"expires_at"`
}

// identity mints the caller of r an identity token for installation in.
func (s *cpServer) identity(r *http.Request, in cpInstallation) cpIdentity {
	tok, claims := s.issuer.issue(caller(r).user.ID, in.OrganizationID, in.ID, s.now())
	return cpIdentity{Installation: in, IdentityToken: tok, ExpiresAt: time.Unix(claims.Exp, 0).UTC()}
}

// cpTarget is the payload of POST /api/installations/{id}/resolve: where
// the installation's agent is deployed and an identity token for its box.
type cpTarget struct {
	cpIdentity
	Deployment cpDeployment `json:"deployment"`
}

// handleResolve resolves an installation (local-dev or deployment) to its
// agent's deployment and mints the caller an identity token for the box:
// aud is the deployment's installation, the one the box was taught. 404
// no_deployment when the agent has none registered.
func (s *cpServer) handleResolve(w http.ResponseWriter, r *http.Request) {
	in, d, ok := s.deployed(w, r, caller(r).user.ID, r.PathValue("id"))
	if !ok {
		return
	}
	box, err := s.store.installationOf(r.Context(), cpOrg{ID: in.OrganizationID, Slug: in.OrganizationSlug}, in.AgentID, "deployment", "")
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cpTarget{cpIdentity: s.identity(r, box), Deployment: d})
}

// deployed resolves installation id, one of user's organizations, to its
// agent's deployment; on failure (404 for an unknown or foreign
// installation, no_deployment when its agent has none) it answers and
// returns false.
func (s *cpServer) deployed(w http.ResponseWriter, r *http.Request, user, id string) (cpInstallation, cpDeployment, bool) {
	in, err := s.store.installation(r.Context(), user, id)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no installation %q in your organizations", id))
		return in, cpDeployment{}, false
	}
	if err != nil {
		s.internal(w, r, err)
		return in, cpDeployment{}, false
	}
	d, err := s.store.deploymentOf(r.Context(), in.AgentID)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, "no_deployment", fmt.Sprintf("installation %s has no registered deployment: run svc link", in.ID))
		return in, d, false
	}
	if err != nil {
		s.internal(w, r, err)
		return in, d, false
	}
	return in, d, true
}

// handleToken mints the caller an identity token for their own local-dev
// installation (aud the installation, org its organization): what a
// browser or client sends to that svc dev through the tunnel (relay.go).
// Any other installation, another user's included, is 404.
func (s *cpServer) handleToken(w http.ResponseWriter, r *http.Request) {
	if in, ok := s.ownLocalDev(w, r); ok {
		writeJSON(w, http.StatusOK, s.identity(r, in))
	}
}

// newCPFlags defines the flags of `svc control-plane`.
func newCPFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("control-plane", flag.ContinueOnError)
	fs.String("addr", cpDefaultAddr, "host:port to listen on")
	fs.String("url", "", "public URL of this control plane: the identity tokens' issuer and the sign-in page's address (default http://<addr>)")
	fs.String("key-file", "", "the 32-byte master key sealing secrets at rest, minted 0600 when absent; unused when SVC_MASTER_KEY is set (default $XDG_CONFIG_HOME/svc/control-plane.key)")
	fs.String("data", "", "where the control plane's own PostgreSQL keeps its cluster when DATABASE_URL is unset (default $XDG_DATA_HOME/svc/control-plane)")
	fs.String("org", "default", "slug of the organization the first boot creates for its owner")
	fs.String("owner", "", "the email of the owner the first boot creates (default: a user named admin); later boots ignore it")
	fs.Duration("credential-ttl", cpCredentialTTLDefault, "how long a user credential (svc login, a browser's) lives after its last use, 1m to 8784h")
	return fs
}

// cpReady is the payload `svc control-plane --json` prints once it serves.
type cpReady struct {
	SchemaVersion int    `json:"schema_version"`
	URL           string `json:"url"`
	JWKSURL       string `json:"jwks_url"`
}

// cpRun is `svc control-plane`: migrate DATABASE_URL, create the admin on
// first boot (printing the one-time sign-in code at WARN, that boot only),
// serve until interrupted.
func cpRun(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("control-plane takes no arguments: %w", errUsage)
	}
	orgSlug := fs.Lookup("org").Value.String()
	if !cpSlugPattern.MatchString(orgSlug) {
		return failf(codeGeneric, "use lowercase letters, digits and dashes", "svc control-plane: --org %q is not a slug", orgSlug)
	}
	if slices.Contains(cpReservedOrgSlugs, orgSlug) {
		return failf(codeGeneric, "pick another slug", "svc control-plane: --org %q is reserved: the control plane's own routes start with /%s/", orgSlug, orgSlug)
	}
	owner := fs.Lookup("owner").Value.String()
	if owner != "" {
		var err error
		if owner, err = cpCheckEmail(owner); err != nil {
			return failf(codeGeneric, "pass the first owner's email, e.g. --owner ada@example.com", "svc control-plane: --owner: %v", err)
		}
	}
	credTTL := fs.Lookup("credential-ttl").Value.(flag.Getter).Get().(time.Duration)
	if err := cpCheckCredentialTTL(credTTL); err != nil {
		return failf(codeGeneric, "pass --credential-ttl as a Go duration, e.g. 720h", "svc control-plane: %v", err)
	}
	oidc, err := cpParseOIDC(c.getenv("SVC_OIDC_ISSUER"), c.getenv("SVC_OIDC_CLIENT_ID"), c.getenv("SVC_OIDC_CLIENT_SECRET"),
		c.getenv("SVC_OIDC_ALLOWED_DOMAINS"), c.getenv("SVC_OIDC_ALLOWED_GROUPS"), c.getenv("SVC_OIDC_ORG"), c.getenv("SVC_OIDC_NAME"), c.getenv("SVC_OIDC_OWNERS"), orgSlug)
	if err != nil {
		return failf(codeGeneric, "see docs/security.md, Single sign-on", "svc control-plane: %v", err)
	}
	nets, err := cpParseNetworks(c.getenv(cpNetworksEnv))
	if err != nil {
		return failf(codeGeneric, "list networks in CIDR form, comma-separated, or leave it empty to allow any address", "svc control-plane: %v", err)
	}
	key, err := cpMasterKey(c.getenv("SVC_MASTER_KEY"), fs.Lookup("key-file").Value.String(), cliConfigDir(c.getenv))
	if err != nil {
		return failf(codeGeneric, "set SVC_MASTER_KEY to 32 bytes (64 hex digits or base64), or point --key-file at a 0600 file", "svc control-plane: %v", err)
	}
	ln, err := net.Listen("tcp", fs.Lookup("addr").Value.String())
	if err != nil {
		return failf(codeGeneric, "pick another --addr", "svc control-plane: %v", err)
	}
	defer ln.Close()
	base := fs.Lookup("url").Value.String()
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	dbURL, stopPG, err := cpDatabase(ctx, c, fs.Lookup("data").Value.String(), log)
	if err != nil {
		return err
	}
	defer stopPG()
	store, err := openCPStore(ctx, dbURL, key)
	if err != nil {
		return err
	}
	defer store.close()
	if store.rechained != "" {
		log.Warn("audit log: " + store.rechained)
	}
	store.credTTL = credTTL
	code, err := store.bootstrap(ctx, orgSlug, owner)
	if err != nil {
		return err
	}
	if code != "" {
		log.Warn("first boot: created the owner "+cmp.Or(owner, "admin")+" and organization "+orgSlug+"; this one-time sign-in code is shown only now",
			"sign_in_code", code, "use", "svc login --control-plane "+base+", then enter the code on the sign-in page")
	}
	if oidc != nil {
		var exists bool
		if err := store.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cp.organizations WHERE slug = $1)`, oidc.Org).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return failf(codeGeneric, "set SVC_OIDC_ORG to an existing organization's slug", "svc control-plane: SVC_OIDC_ORG: no organization %q", oidc.Org)
		}
	}
	keys, err := store.identityKeys(ctx)
	if err != nil {
		return err
	}
	issuer, err := newIdentIssuer(base, keys)
	if err != nil {
		return err
	}
	s, err := newCPServer(store, issuer, base, log)
	if err != nil {
		return err
	}
	s.tunnelDomain = strings.TrimSuffix(c.getenv("SVC_TUNNEL_DOMAIN"), ".")
	s.proxy = newCPProxyTransport(nets)
	if oidc != nil {
		s.oidc = newCPOIDCProvider(*oidc)
		if err := s.oidc.checkAtBoot(ctx, log); err != nil {
			return failf(codeGeneric, "set SVC_OIDC_ISSUER to the issuer exactly as the provider's discovery document names it ("+oidc.Issuer+"/.well-known/openid-configuration)", "svc control-plane: single sign-on: %v", err)
		}
		log.Info("single sign-on", "issuer", oidc.Issuer, "client_id", oidc.ClientID, "redirect_uri", s.redirectURI(), "organization", oidc.Org)
	}
	srv := newHTTPServer(s)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("control plane serving", "url", base, "jwks", base+identJWKS)
	c.emit(cpReady{SchemaVersion: 1, URL: base, JWKSURL: base + identJWKS}, func(w io.Writer) {
		fmt.Fprintf(w, "control plane at %s (Ctrl-C stops it)\n", base)
	})
	select {
	case err = <-done:
		return fmt.Errorf("svc control-plane: serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer s.proxy.CloseIdleConnections()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("svc control-plane: shut down: %w", err)
	}
	s.flushRefusals(shutdown)
	return nil
}

// cpMasterKey returns the master key: env (SVC_MASTER_KEY: 64 hex digits
// or base64 of 32 bytes) when set, else the key file (keyFile, or
// control-plane.key under configDir), minted when absent and refused when
// group or others may read it.
func cpMasterKey(env, keyFile, configDir string) ([]byte, error) {
	if env != "" {
		return parseMasterKey(env)
	}
	if keyFile == "" {
		keyFile = filepath.Join(configDir, "control-plane.key")
	}
	if fi, err := os.Stat(keyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key file %s is readable by others (mode %04o): chmod 600 it", keyFile, fi.Mode().Perm())
	}
	return secretLoadKey(keyFile)
}

// cpDatabase returns the control plane's database: DATABASE_URL when set,
// else a PostgreSQL cluster of its own under data (default
// $XDG_DATA_HOME/svc/control-plane), started as svc dev and svc serve
// start theirs, on a free loopback port; stop stops it.
func cpDatabase(ctx context.Context, c *cmd, data string, log *slog.Logger) (url string, stop func(), err error) {
	if url := c.getenv("DATABASE_URL"); url != "" {
		return url, func() {}, nil
	}
	if data == "" {
		data = filepath.Join(cliDataDir(c.getenv), "control-plane")
	}
	port, err := serveFreePort()
	if err != nil {
		return "", nil, err
	}
	getenv := func(k string) string {
		if k == "SVC_DATABASE_URL" {
			return "" // svc dev's variable: not the control plane's
		}
		return c.getenv(k)
	}
	var verbose io.Writer = io.Discard
	if c.verbose {
		verbose = c.stderr
	}
	log.Info("DATABASE_URL is unset: starting the control plane's own PostgreSQL (the first boot also initializes its cluster)", "data", data, "port", port)
	pg, err := startPostgres(ctx, pgOptions{ProjectDir: filepath.Join(data, "postgres"), Port: port, Getenv: getenv, LookPath: exec.LookPath, Log: verbose})
	if err != nil {
		if errors.Is(err, errNoPostgres) {
			return "", nil, &cliError{Code: codeGeneric, Message: err.Error(), Err: err, Hint: "set DATABASE_URL to a PostgreSQL database the control plane owns, or install PostgreSQL (or Docker/Podman)"}
		}
		return "", nil, fmt.Errorf("svc control-plane: start PostgreSQL: %w", err)
	}
	unwatch := pg.supervise(log)
	log.Info("postgres up", "provider", pg.Provider, "url", redactURL(pg.URL))
	pg.logUndid(log)
	return pg.URL, func() {
		unwatch(context.Background())
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pg.Stop(sctx); err != nil {
			log.Error("stop postgres", "err", err)
		}
	}, nil
}
