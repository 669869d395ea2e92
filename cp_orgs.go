package main

// Organizations (issue 38, item C): a signed-in user lists theirs, creates
// one (becoming its owner) and its owners and admins rename it; each
// change is audited in the organization's own chain. The slug never
// changes: it is in every proxy path (/{org}/{agent}/…) clients hold.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// createOrg makes an organization slug named name with user as its owner,
// appending ev (its Org filled in) in the same transaction; errCPConflict
// when the slug is taken.
func (s *cpStore) createOrg(ctx context.Context, user, slug, name string, ev cpAuditEvent) (cpOrg, error) {
	o := cpOrg{ID: randomID("org_", 8), Slug: slug, Name: name, Role: cpRoleOwner}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO cp.organizations (id, slug, name) VALUES ($1, $2, $3)`, o.ID, slug, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO cp.memberships (org_id, user_id, role) VALUES ($1, $2, 'owner')`, o.ID, user); err != nil {
			return err
		}
		ev.Org = o.ID
		return s.auditAppend(ctx, tx, ev)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return cpOrg{}, errCPConflict
	}
	if err != nil {
		return cpOrg{}, fmt.Errorf("create organization: %w", err)
	}
	return o, nil
}

// renameOrg names organization org name, appending ev.
func (s *cpStore) renameOrg(ctx context.Context, org, name string, ev cpAuditEvent) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE cp.organizations SET name = $2 WHERE id = $1`, org, name); err != nil {
			return err
		}
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("rename organization: %w", err)
	}
	return nil
}

// orgID returns the id of the organization whose id or slug is ref, or "".
func (s *cpStore) orgID(ctx context.Context, ref string) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT id FROM cp.organizations WHERE id = $1 OR slug = $1`, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// cpCheckOrgSlug says why slug cannot name an organization.
func cpCheckOrgSlug(slug string) error {
	if !cpSlugPattern.MatchString(slug) {
		return fmt.Errorf("slug %q: want lowercase letters, digits and dashes, at most 63, starting with a letter or digit", cpClientText(slug, 64))
	}
	if slices.Contains(cpReservedOrgSlugs, slug) {
		return fmt.Errorf("slug %q is reserved: the control plane's own routes start with /%s/", slug, slug)
	}
	return nil
}

// handleListOrgs is GET /api/orgs: the caller's organizations and roles.
func (s *cpServer) handleListOrgs(w http.ResponseWriter, r *http.Request) {
	orgs, err := s.store.userOrgs(r.Context(), caller(r).user.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"organizations": orEmpty(orgs)})
}

// handleCreateOrg is POST /api/orgs {"slug","name"}: a new organization
// whose owner is the caller.
func (s *cpServer) handleCreateOrg(w http.ResponseWriter, r *http.Request) {
	var in struct{ Slug, Name string }
	if !cpDecode(w, r, &in) {
		return
	}
	if err := cpCheckOrgSlug(in.Slug); err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	if in.Name == "" {
		in.Name = in.Slug
	}
	name, err := cpCheckName(in.Name)
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return
	}
	ev := auditEvent(r, cpAuditEvent{Action: "org.created", Target: in.Slug, Detail: fmt.Sprintf("named %q; its owner is its creator", name)})
	o, err := s.store.createOrg(r.Context(), caller(r).user.ID, in.Slug, name, ev)
	if errors.Is(err, errCPConflict) {
		cpError(w, http.StatusConflict, "conflict", fmt.Sprintf("an organization %q already exists: pick another slug", in.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, o)
}

// cpDecodeName reads a rename's body {"name"} and checks the name
// (cpCheckName), answering 400 when it is not acceptable.
func cpDecodeName(w http.ResponseWriter, r *http.Request) (string, bool) {
	var in struct {
		Name string `json:"name"`
	}
	if !cpDecode(w, r, &in) {
		return "", false
	}
	name, err := cpCheckName(in.Name)
	if err != nil {
		cpError(w, http.StatusBadRequest, "invalid", err.Error())
		return "", false
	}
	return name, true
}

// handleRenameOrg is PATCH /api/orgs/{org} {"name"} (owners and admins).
func (s *cpServer) handleRenameOrg(w http.ResponseWriter, r *http.Request) {
	o, ok := s.org(w, r)
	if !ok {
		return
	}
	name, ok := cpDecodeName(w, r)
	if !ok {
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "org.renamed", Target: o.Slug, Detail: fmt.Sprintf("%q to %q", o.Name, name)})
	if err := s.store.renameOrg(r.Context(), o.ID, name, ev); err != nil {
		s.internal(w, r, err)
		return
	}
	o.Name = name
	writeJSON(w, http.StatusOK, o)
}
