package main

// Members, invitations and roles of the control plane (issue 20 items 1
// and 2). Every route of the table in cp_server.go carries who may call it
// (cpAccess); the organization routes (/api/orgs/{org}/...) are checked
// here, before their handler: a stranger to the organization gets 404, as
// if it did not exist, and a member below the route's role 403 (and a
// refused row in the audit log). Roles:
//
//   - owner: everything, owners included;
//   - admin: agents, deployments, API keys, members other than owners
//     (invite, change roles, remove), the audit log;
//   - member: use the agents (svc dev, tunnel, console, --agent verbs,
//     chat through the proxy), list the agents and the members.
//
// An owner or admin invites an email with a role: the answer carries a
// one-time code (cpInvitationTTL, stored hashed), handed over by hand; the
// invited person runs `svc login --invitation <code>`, which makes them a
// member and signs them in. An email that already has an account elsewhere
// on this control plane must accept while signed in as that account (the
// code alone would otherwise hand whoever holds it the account's other
// organizations). An organization keeps at least one owner. Removing a
// member deletes their local-dev installations there (no identity or
// tunnel token is minted for them again: every mint checks membership);
// a user left in no organization has every credential revoked at once
// (CLI and browser), so their next call is 401.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// cpAccess is who may call a route of the control plane.
type cpAccess int

// The access rules of routes, weakest first.
const (
	// cpPublic routes need no credential: sign-in, the JWKS, public pages.
	cpPublic cpAccess = iota + 1
	// cpUserOnly routes need a signed-in user, acting in no organization.
	cpUserOnly
	// cpMember, cpAdmin and cpOwner routes act in one organization (the
	// {org} of the path, or the installation's) and need that role or a
	// higher one there.
	cpMember
	cpAdmin
	cpOwner
)

// Roles of a membership.
const (
	cpRoleOwner  = "owner"
	cpRoleAdmin  = "admin"
	cpRoleMember = "member"
)

// cpRoleRank orders the roles (0: not a role).
func cpRoleRank(role string) int {
	switch role {
	case cpRoleMember:
		return 1
	case cpRoleAdmin:
		return 2
	case cpRoleOwner:
		return 3
	}
	return 0
}

// role is the least role a route of access a needs ("" for none).
func (a cpAccess) role() string {
	switch a {
	case cpMember:
		return cpRoleMember
	case cpAdmin:
		return cpRoleAdmin
	case cpOwner:
		return cpRoleOwner
	}
	return ""
}

// Limits of members and invitations.
const (
	// cpInvitationTTL is how long an invitation's code may be used.
	cpInvitationTTL = 7 * 24 * time.Hour
	// cpInvitationsPending caps an organization's unused, unexpired
	// invitations.
	cpInvitationsPending = 1000
	// cpEmailMax bounds an email (RFC 5321's path limit).
	cpEmailMax = 254
)

// Errors of membership changes that handlers turn into statuses.
var (
	errCPLastOwner      = errors.New("the organization's last owner")
	errCPOtherAccount   = errors.New("the invitation is for another account")
	errCPTooManyInvites = errors.New("too many pending invitations")
)

// cpOrgKey is the context key of the organization (with the caller's role
// in it) an organization route acts in.
type cpOrgKey struct{}

// enforce wraps the handler of rt with its organization check: for a route
// of an organization, the caller must belong to it (else 404) with rt's
// role or a higher one (else 403, audited); the handler then finds the
// organization with s.org. Other routes pass as they are.
func (s *cpServer) enforce(rt cpRoute) http.HandlerFunc {
	if rt.own || rt.access < cpMember || !strings.Contains(rt.path, "{org}") {
		return rt.handler
	}
	need := rt.access.role()
	return func(w http.ResponseWriter, r *http.Request) {
		o, err := s.store.userOrg(r.Context(), caller(r).user.ID, r.PathValue("org"))
		if errors.Is(err, errCPNotFound) {
			// Kept in the probed organization's log, for its admins to see,
			// when it exists (not in the caller's own organizations').
			probed, lerr := s.store.orgID(r.Context(), r.PathValue("org"))
			if lerr != nil {
				s.internal(w, r, lerr)
				return
			}
			s.audit(r, cpAuditEvent{Org: probed, Action: "route.refused", Outcome: cpAuditRefused, Target: r.Method + " " + r.URL.Path, Detail: "not a member of the organization"})
			cpError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no organization %q of yours", r.PathValue("org")))
			return
		}
		if err != nil {
			s.internal(w, r, err)
			return
		}
		if cpRoleRank(o.Role) < cpRoleRank(need) {
			s.audit(r, cpAuditEvent{Org: o.ID, Action: "route.refused", Outcome: cpAuditRefused, Target: r.Method + " " + r.URL.Path, Detail: "role " + o.Role + ", needs " + need})
			cpError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("your role in organization %s is %s; this needs %s or higher: ask an owner or admin", o.Slug, o.Role, need))
			return
		}
		rt.handler(w, r.WithContext(context.WithValue(r.Context(), cpOrgKey{}, o)))
	}
}

// org is the organization an organization route acts in, which enforce
// checked; a route declared without an organization rule has none and is
// answered 500, so a mistake in the table fails closed.
func (s *cpServer) org(w http.ResponseWriter, r *http.Request) (cpOrg, bool) {
	o, ok := r.Context().Value(cpOrgKey{}).(cpOrg)
	if !ok {
		s.internal(w, r, fmt.Errorf("route %s %s acts in an organization but has no organization rule", r.Method, r.URL.Path))
	}
	return o, ok
}

// cpMemberRecord is a member of an organization.
type cpMemberRecord struct {
	UserID   string    `json:"user_id"`
	Email    string    `json:"email"`
	Name     string    `json:"name"`
	Role     string    `json:"role"`
	JoinedAt time.Time `json:"joined_at"`
}

// cpInvitation is an invitation's record; its code is shown once, when it
// is made, and stored hashed.
type cpInvitation struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	Role      string    `json:"role"`
	InvitedBy string    `json:"invited_by"` // the inviter's email
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// cpNewInvitation is the answer of POST /api/orgs/{org}/invitations.
type cpNewInvitation struct {
	cpInvitation
	Organization cpOrg  `json:"organization"`
	Code         string `json:"code"`
	Accept       string `json:"accept"` // the command the invited person runs
}

// cpCheckEmail normalizes and checks an email to invite: a bare address
// (no display name), at most cpEmailMax bytes, printable, lower-cased.
func cpCheckEmail(raw string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(raw))
	bad := fmt.Errorf("email %q: want a plain address like ada@example.com, at most %d bytes", cpClientText(raw, 64), cpEmailMax)
	if e == "" || len(e) > cpEmailMax || strings.IndexFunc(e, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return "", bad
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" {
		return "", bad
	}
	return e, nil
}

// cpCheckRole checks a role given by a caller.
func cpCheckRole(role string) error {
	if cpRoleRank(role) == 0 {
		return fmt.Errorf("role %q: want owner, admin or member", cpClientText(role, 32))
	}
	return nil
}

// mayGrant reports whether the caller, of role o.Role in o, may act on a
// member of role target or grant role target: owners on anyone, admins on
// anyone but owners; on refusal it answers 403 and returns false.
func mayGrant(w http.ResponseWriter, o cpOrg, target string) bool {
	if target == cpRoleOwner && o.Role != cpRoleOwner {
		cpError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("only an owner of organization %s may invite, change or remove an owner", o.Slug))
		return false
	}
	return true
}

// cpAnswerList answers {"organization": o, key: list(o.ID)} for an
// organization route.
func cpAnswerList[T any](s *cpServer, w http.ResponseWriter, r *http.Request, key string, list func(context.Context, string) ([]T, error)) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	items, err := list(r.Context(), o.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"organization": o, key: items})
}

// handleListMembers lists the organization's members.
func (s *cpServer) handleListMembers(w http.ResponseWriter, r *http.Request) {
	cpAnswerList(s, w, r, "members", s.store.listMembers)
}

// handleInvite invites {email, role} into the organization: 201 with the
// one-time code; 409 when the email is a member already; 403 for an
// admin inviting an owner.
func (s *cpServer) handleInvite(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	var in struct{ Email, Role string }
	if !cpDecode(w, r, &in) {
		return
	}
	email, err := cpCheckEmail(in.Email)
	if err == nil {
		err = cpCheckRole(in.Role)
	}
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	if !mayGrant(w, o, in.Role) {
		s.audit(r, cpAuditEvent{Org: o.ID, Action: "member.invite", Outcome: cpAuditRefused, Target: email, Detail: "role " + in.Role})
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "member.invited", Target: email, Detail: "role " + in.Role})
	code, inv, err := s.store.createInvitation(r.Context(), o.ID, caller(r).user, email, in.Role, s.now().Add(cpInvitationTTL), ev)
	switch {
	case errors.Is(err, errCPConflict):
		cpError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s is a member of organization %s already: change their role instead", email, o.Slug))
	case errors.Is(err, errCPTooManyInvites):
		cpError(w, http.StatusConflict, "too_many_invitations", fmt.Sprintf("organization %s has %d pending invitations: revoke some, or let them expire", o.Slug, cpInvitationsPending))
	case err != nil:
		s.internal(w, r, err)
	default:
		writeJSON(w, http.StatusCreated, cpNewInvitation{cpInvitation: inv, Organization: o, Code: code,
			Accept: "svc login --control-plane " + s.url + " --invitation " + code})
	}
}

// handleListInvitations lists the organization's pending invitations (no
// codes).
func (s *cpServer) handleListInvitations(w http.ResponseWriter, r *http.Request) {
	cpAnswerList(s, w, r, "invitations", s.store.listInvitations)
}

// handleRevokeInvitation revokes a pending invitation {id} (or the one of
// an email).
func (s *cpServer) handleRevokeInvitation(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "invitation.revoked"})
	err := s.store.revokeInvitation(r.Context(), o, r.PathValue("id"), ev)
	if errors.Is(err, errCPForbidden) {
		s.audit(r, cpAuditEvent{Org: o.ID, Action: "invitation.revoke", Outcome: cpAuditRefused, Target: r.PathValue("id"), Detail: "an invitation of an owner"})
		cpError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("only an owner of organization %s may revoke an invitation of an owner", o.Slug))
		return
	}
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, "no_invitation", fmt.Sprintf("no pending invitation %q in organization %s", r.PathValue("id"), o.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"revoked": true})
}

// member resolves the {member} path value (a user id or an email) among
// the organization's members; on failure it answers and returns false.
func (s *cpServer) member(w http.ResponseWriter, r *http.Request, o cpOrg) (cpMemberRecord, bool) {
	ref := r.PathValue("member")
	m, err := s.store.member(r.Context(), o.ID, strings.ToLower(ref))
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, "no_member", fmt.Sprintf("no member %q in organization %s", cpClientText(ref, 64), o.Slug))
		return m, false
	}
	if err != nil {
		s.internal(w, r, err)
		return m, false
	}
	return m, true
}

// handleSetRole changes a member's role {role}: admins may not touch
// owners nor make one; the last owner stays one.
func (s *cpServer) handleSetRole(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	var in struct{ Role string }
	if !cpDecode(w, r, &in) {
		return
	}
	if err := cpCheckRole(in.Role); err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	m, ok := s.member(w, r, o)
	if !ok {
		return
	}
	if !mayGrant(w, o, m.Role) || !mayGrant(w, o, in.Role) {
		s.audit(r, cpAuditEvent{Org: o.ID, Action: "member.role", Outcome: cpAuditRefused, Target: m.Email, Detail: m.Role + " to " + in.Role})
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "member.role", Target: m.Email, Detail: m.Role + " to " + in.Role})
	err := s.store.setRole(r.Context(), o.ID, m.UserID, in.Role, ev)
	if errors.Is(err, errCPLastOwner) {
		cpError(w, http.StatusConflict, "last_owner", fmt.Sprintf("%s is the last owner of organization %s: make another member owner first", m.Email, o.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	m.Role = in.Role
	writeJSON(w, http.StatusOK, m)
}

// handleRemoveMember removes a member: their local-dev installations here
// go, and when they are left in no organization every credential of
// theirs is revoked (revoked_credentials says how many).
func (s *cpServer) handleRemoveMember(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	m, ok := s.member(w, r, o)
	if !ok {
		return
	}
	if !mayGrant(w, o, m.Role) {
		s.audit(r, cpAuditEvent{Org: o.ID, Action: "member.remove", Outcome: cpAuditRefused, Target: m.Email, Detail: "role " + m.Role})
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "member.removed", Target: m.Email, Detail: "role " + m.Role})
	revoked, err := s.store.removeMember(r.Context(), o.ID, m.UserID, ev)
	if errors.Is(err, errCPLastOwner) {
		cpError(w, http.StatusConflict, "last_owner", fmt.Sprintf("%s is the last owner of organization %s: make another member owner first", m.Email, o.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": m, "revoked_credentials": revoked})
}

// cpAccepted is the answer of POST /api/login/invitation: the organization
// joined and, unless the caller was signed in already, a credential.
type cpAccepted struct {
	Organization cpOrg  `json:"organization"`
	User         cpUser `json:"user"`
	Credential   string `json:"credential,omitempty"`
}

// handleAcceptInvitation spends an invitation {code}. Anyone may call it
// (rate-limited per source); a caller with a bearer credential accepts as
// that user, who must be the invited email. 401 for a wrong, expired,
// spent or revoked code (audited as a failed sign-in); 403 when the email
// has an account in another organization and the caller is not signed in
// as it; 409 when the account is a member already. The code stays unspent
// on every refusal but the first.
func (s *cpServer) handleAcceptInvitation(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Code       string `json:"code"`
		ClientHost string `json:"client_host"` // the CLI's host name: the credential's device
	}
	if !cpDecode(w, r, &in) {
		return
	}
	var as *cpUser
	if tok := identBearer(r); tok != "" {
		u, _, err := s.store.userByCredential(r.Context(), tok)
		if errors.Is(err, errCPNotFound) {
			cpError(w, http.StatusUnauthorized, codeAuth, "the credential is unknown or revoked: accept the invitation without signing in, or svc login again")
			return
		}
		if err != nil {
			s.internal(w, r, err)
			return
		}
		as = &u
	}
	acc, err := s.store.acceptInvitation(r.Context(), in.Code, as, rateLimitPeer(r), cpClientText(in.ClientHost, cpDeviceNameMax))
	switch {
	case errors.Is(err, errCPNotFound):
		s.audit(r, cpAuditEvent{Action: "signin.failed", Outcome: cpAuditRefused, Detail: "invitation code wrong, expired, used or revoked"})
		cpError(w, http.StatusUnauthorized, codeAuth, "the invitation code is wrong, expired, was used or revoked: ask for a new invitation")
	case errors.Is(err, errCPOtherAccount):
		cpError(w, http.StatusForbidden, "forbidden", "this invitation is for an email that has an account on this control plane: sign in as that account first (svc login), then run svc login --invitation again")
	case errors.Is(err, errCPConflict):
		cpError(w, http.StatusConflict, "conflict", "you are a member of that organization already")
	case err != nil:
		s.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, acc)
	}
}

// listMembers lists the organization's members by email.
func (s *cpStore) listMembers(ctx context.Context, org string) ([]cpMemberRecord, error) {
	rows, err := s.db.Query(ctx, `SELECT u.id, u.email, u.name, m.role, m.created_at FROM cp.memberships m
		JOIN cp.users u ON u.id = m.user_id WHERE m.org_id = $1 ORDER BY u.email`, org)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpMemberRecord])
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	return list, nil
}

// member returns the organization's member ref (a user id or an email).
func (s *cpStore) member(ctx context.Context, org, ref string) (cpMemberRecord, error) {
	var m cpMemberRecord
	err := s.db.QueryRow(ctx, `SELECT u.id, u.email, u.name, m.role, m.created_at FROM cp.memberships m
		JOIN cp.users u ON u.id = m.user_id WHERE m.org_id = $1 AND (u.id = $2 OR u.email = $2)`, org, ref).
		Scan(&m.UserID, &m.Email, &m.Name, &m.Role, &m.JoinedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, errCPNotFound
	}
	return m, err
}

// createInvitation invites email into org with role until expires, as by,
// appending ev; it returns the code (only its hash is stored).
// errCPConflict when email is a member already, errCPTooManyInvites past
// the organization's cap of pending ones.
func (s *cpStore) createInvitation(ctx context.Context, org string, by cpUser, email, role string, expires time.Time, ev cpAuditEvent) (string, cpInvitation, error) {
	code := cpCode(5)
	inv := cpInvitation{ID: randomID("inv_", 8), Email: email, Role: role, InvitedBy: by.Email, ExpiresAt: expires.UTC().Truncate(time.Second)}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var member bool
		var pending int
		err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM cp.memberships m JOIN cp.users u ON u.id = m.user_id WHERE m.org_id = $1 AND u.email = $2),
			(SELECT count(*) FROM (SELECT 1 FROM cp.invitations WHERE org_id = $1 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now() LIMIT $3) p)`,
			org, email, cpInvitationsPending).Scan(&member, &pending)
		switch {
		case err != nil:
			return err
		case member:
			return errCPConflict
		case pending >= cpInvitationsPending:
			return errCPTooManyInvites
		}
		err = tx.QueryRow(ctx, `INSERT INTO cp.invitations (id, org_id, email, role, code_hash, invited_by, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`, inv.ID, org, email, role, cpHash(cpNormalizeCode(code)), by.ID, inv.ExpiresAt).Scan(&inv.CreatedAt)
		if err != nil {
			return err
		}
		ev.Detail += ", invitation " + inv.ID + ", expires " + inv.ExpiresAt.Format(time.RFC3339)
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, errCPConflict) && !errors.Is(err, errCPTooManyInvites) {
		err = fmt.Errorf("invite: %w", err)
	}
	return code, inv, err
}

// listInvitations lists the organization's pending invitations.
func (s *cpStore) listInvitations(ctx context.Context, org string) ([]cpInvitation, error) {
	rows, err := s.db.Query(ctx, `SELECT i.id, i.email, i.role, coalesce(u.email, ''), i.created_at, i.expires_at FROM cp.invitations i
		LEFT JOIN cp.users u ON u.id = i.invited_by
		WHERE i.org_id = $1 AND i.used_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now() ORDER BY i.created_at`, org)
	if err != nil {
		return nil, fmt.Errorf("list invitations: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpInvitation])
	if err != nil {
		return nil, fmt.Errorf("list invitations: %w", err)
	}
	return list, nil
}

// revokeInvitation revokes the pending invitation id (or the one of an
// email) of org, appending ev; errCPNotFound when there is none.
func (s *cpStore) revokeInvitation(ctx context.Context, org cpOrg, id string, ev cpAuditEvent) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var email, role string
		// Only who may invite to a role may revoke an invitation to it: an
		// admin cannot revoke an owner's invitation of an owner (issue 36,
		// item 13).
		err := tx.QueryRow(ctx, `UPDATE cp.invitations SET revoked_at = now()
			WHERE org_id = $1 AND (id = $2 OR email = lower($2)) AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now()
				AND (role <> $3 OR $4)
			RETURNING email, role`, org.ID, id, cpRoleOwner, org.Role == cpRoleOwner).Scan(&email, &role)
		if errors.Is(err, pgx.ErrNoRows) && org.Role != cpRoleOwner {
			var pending bool
			if tx.QueryRow(ctx, `SELECT true FROM cp.invitations WHERE org_id = $1 AND (id = $2 OR email = lower($2)) AND role = $3
				AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now()`, org.ID, id, cpRoleOwner).Scan(&pending) == nil {
				return errCPForbidden
			}
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return errCPNotFound
		}
		if err != nil {
			return err
		}
		ev.Target, ev.Detail = email, "role "+role
		return s.auditAppend(ctx, tx, ev)
	})
}

// acceptInvitation spends the invitation code as the signed-in user as
// (nil: not signed in), from source, on device (the host name the CLI
// reported, the minted credential's name): the invited email's account joins the
// organization with the invitation's role, created when the email has
// none. A credential is minted unless the caller was signed in. The email's
// existing account, when it belongs to an organization, accepts only when
// signed in as itself (errCPOtherAccount); a signed-in caller of another
// email is refused so too. errCPNotFound for a wrong, spent, revoked or
// expired code; errCPConflict for a member already. Every refusal rolls the
// spending back.
func (s *cpStore) acceptInvitation(ctx context.Context, code string, as *cpUser, source, device string) (cpAccepted, error) {
	var acc cpAccepted
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var id, role string
		err := tx.QueryRow(ctx, `UPDATE cp.invitations SET used_at = now()
			WHERE code_hash = $1 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now()
			RETURNING id, role, email, org_id`, cpHash(cpNormalizeCode(code))).Scan(&id, &role, &acc.User.Email, &acc.Organization.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			return errCPNotFound
		}
		if err != nil {
			return err
		}
		var inOrgs bool
		err = tx.QueryRow(ctx, `SELECT u.id, u.name, EXISTS (SELECT 1 FROM cp.memberships m WHERE m.user_id = u.id)
			FROM cp.users u WHERE u.email = $1`, acc.User.Email).Scan(&acc.User.ID, &acc.User.Name, &inOrgs)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			acc.User.ID, acc.User.Name = randomID("usr_", 8), strings.SplitN(acc.User.Email, "@", 2)[0]
			if _, err := tx.Exec(ctx, `INSERT INTO cp.users (id, email, name) VALUES ($1, $2, $3)`, acc.User.ID, acc.User.Email, acc.User.Name); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		if (as != nil && as.ID != acc.User.ID) || (as == nil && inOrgs) {
			return errCPOtherAccount
		}
		_, err = tx.Exec(ctx, `INSERT INTO cp.memberships (org_id, user_id, role) VALUES ($1, $2, $3)`, acc.Organization.ID, acc.User.ID, role)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return errCPConflict
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE cp.invitations SET used_by = $2 WHERE id = $1`, id, acc.User.ID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT slug, name FROM cp.organizations WHERE id = $1`, acc.Organization.ID).Scan(&acc.Organization.Slug, &acc.Organization.Name); err != nil {
			return err
		}
		acc.Organization.Role = role
		if as == nil {
			acc.Credential = cpNewSecret("svc_cred_")
			if _, err := tx.Exec(ctx, `INSERT INTO cp.credentials (id, user_id, token_hash, kind, name) VALUES ($1, $2, $3, 'cli', $4)`,
				randomID("crd_", 8), acc.User.ID, cpHash(acc.Credential), device); err != nil {
				return err
			}
		}
		return s.auditAppend(ctx, tx, cpAuditEvent{Org: acc.Organization.ID, ActorID: acc.User.ID, Actor: acc.User.Email, Action: "member.joined",
			Outcome: cpAuditOK, Target: acc.User.Email, Source: source, Detail: "role " + role + ", invitation " + id})
	})
	if err != nil && !errors.Is(err, errCPNotFound) && !errors.Is(err, errCPOtherAccount) && !errors.Is(err, errCPConflict) {
		err = fmt.Errorf("accept invitation: %w", err)
	}
	return acc, err
}

// lockOwners locks org's memberships (FOR UPDATE, so two concurrent changes
// cannot each leave the other the last owner) and returns how many owners
// it has.
func lockOwners(ctx context.Context, tx pgx.Tx, org string) (int, error) {
	rows, err := tx.Query(ctx, `SELECT role FROM cp.memberships WHERE org_id = $1 FOR UPDATE`, org)
	if err != nil {
		return 0, err
	}
	owners := 0
	var role string
	_, err = pgx.ForEachRow(rows, []any{&role}, func() error {
		if role == cpRoleOwner {
			owners++
		}
		return nil
	})
	return owners, err
}

// setRole sets user's role in org, appending ev; errCPLastOwner when it
// would leave org without an owner.
func (s *cpStore) setRole(ctx context.Context, org, user, role string, ev cpAuditEvent) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		owners, err := lockOwners(ctx, tx, org)
		if err != nil {
			return err
		}
		var was string
		if err := tx.QueryRow(ctx, `SELECT role FROM cp.memberships WHERE org_id = $1 AND user_id = $2`, org, user).Scan(&was); err != nil {
			return err
		}
		if was == cpRoleOwner && role != cpRoleOwner && owners <= 1 {
			return errCPLastOwner
		}
		if _, err := tx.Exec(ctx, `UPDATE cp.memberships SET role = $3 WHERE org_id = $1 AND user_id = $2`, org, user, role); err != nil {
			return err
		}
		return s.auditAppend(ctx, tx, ev)
	})
}

// removeMember removes user from org, appending ev: their local-dev
// installations of org are deleted; when they are left in no organization,
// their credentials are revoked, their unused sign-in codes spent and
// their device sign-ins dropped. It returns how many credentials it
// revoked; errCPLastOwner for org's last owner.
func (s *cpStore) removeMember(ctx context.Context, org, user string, ev cpAuditEvent) (int64, error) {
	var revoked int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		owners, err := lockOwners(ctx, tx, org)
		if err != nil {
			return err
		}
		var was string
		if err := tx.QueryRow(ctx, `DELETE FROM cp.memberships WHERE org_id = $1 AND user_id = $2 RETURNING role`, org, user).Scan(&was); err != nil {
			return err
		}
		if was == cpRoleOwner && owners <= 1 {
			return errCPLastOwner
		}
		if _, err := tx.Exec(ctx, `DELETE FROM cp.installations WHERE org_id = $1 AND user_id = $2 AND kind = 'local_dev'`, org, user); err != nil {
			return err
		}
		var elsewhere bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cp.memberships WHERE user_id = $1)`, user).Scan(&elsewhere); err != nil {
			return err
		}
		if !elsewhere {
			tag, err := tx.Exec(ctx, `UPDATE cp.credentials SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL`, user)
			if err != nil {
				return err
			}
			revoked = tag.RowsAffected()
			if _, err := tx.Exec(ctx, `UPDATE cp.signin_codes SET used_at = now() WHERE user_id = $1 AND used_at IS NULL`, user); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM cp.device_codes WHERE user_id = $1`, user); err != nil {
				return err
			}
			ev.Detail += fmt.Sprintf(", in no organization now: %d credentials revoked", revoked)
		}
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, errCPLastOwner) {
		err = fmt.Errorf("remove member: %w", err)
	}
	return revoked, err
}
