package main

// Agents and their deployments from the CLI (issue 20 item 3): owners and
// admins rename and delete an agent (delete refuses while a deployment is
// linked, 409 deployment_linked, unless ?force=true, which drops the
// deployment record and the installations with it: the box stays up but
// the control plane no longer reaches or vouches for it); members read an
// agent's deployment and its history, every link (who, when, URL, tag)
// in cp.deployment_links. Every change is audited.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// cpDeploymentHistoryMax bounds the links one history read answers (the
// newest).
const cpDeploymentHistoryMax = 500

// errCPLinked is a delete refused because the agent has a deployment.
var errCPLinked = errors.New("the agent has a deployment")

// cpDeploymentLink is one link of an agent's deployment.
type cpDeploymentLink struct {
	ID           string    `json:"id"`
	DeploymentID string    `json:"deployment_id"`
	ActorID      string    `json:"actor_id"`
	Actor        string    `json:"actor"` // the linker's email then
	URL          string    `json:"url"`
	ImageTag     string    `json:"image_tag"`
	At           time.Time `json:"at"`
}

// cpDeploymentView is the answer of the history route: the agent, its
// deployment (nil: none linked) and its links, newest first.
type cpDeploymentView struct {
	Organization string             `json:"organization"`
	Agent        cpAgent            `json:"agent"`
	Deployment   *cpDeployment      `json:"deployment"`
	Links        []cpDeploymentLink `json:"links"`
}

// handleDeploymentHistory answers the agent's deployment (with its status,
// cp_proxy.go) and every link of it, newest first (at most
// cpDeploymentHistoryMax).
func (s *cpServer) handleDeploymentHistory(w http.ResponseWriter, r *http.Request) {
	o, a, ok := s.orgAgent(w, r)
	if !ok {
		return
	}
	v := cpDeploymentView{Organization: o.Slug, Agent: a}
	d, err := s.store.deploymentOf(r.Context(), a.ID)
	switch {
	case err == nil:
		v.Deployment = &d
	case !errors.Is(err, errCPNotFound):
		s.internal(w, r, err)
		return
	}
	if v.Links, err = s.store.deploymentLinks(r.Context(), a.ID); err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// handleRenameAgent renames the agent {name} (its slug stays: it is in
// every path and installation).
func (s *cpServer) handleRenameAgent(w http.ResponseWriter, r *http.Request) {
	o, a, ok := s.orgAgent(w, r)
	if !ok {
		return
	}
	name, ok := cpDecodeName(w, r)
	if !ok {
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "agent.renamed", Target: a.Slug, Detail: fmt.Sprintf("%q to %q", a.Name, name)})
	if err := s.store.renameAgent(r.Context(), a.ID, name, ev); err != nil {
		s.internal(w, r, err)
		return
	}
	a.Name = name
	writeJSON(w, http.StatusOK, map[string]any{"organization": o.Slug, "agent": a})
}

// handleDeleteAgent deletes the agent; 409 deployment_linked while it has
// a deployment, unless ?force=true.
func (s *cpServer) handleDeleteAgent(w http.ResponseWriter, r *http.Request) {
	o, a, ok := s.orgAgent(w, r)
	if !ok {
		return
	}
	force := r.URL.Query().Get("force")
	if force != "" && force != "true" && force != "false" {
		cpError(w, http.StatusBadRequest, "invalid", "force: want true or false")
		return
	}
	ev := auditEvent(r, cpAuditEvent{Org: o.ID, Action: "agent.deleted", Target: a.Slug, Detail: "agent " + a.ID})
	d, err := s.store.deleteAgent(r.Context(), a.ID, force == "true", ev)
	if errors.Is(err, errCPLinked) {
		s.audit(r, cpAuditEvent{Org: o.ID, Action: "agent.delete", Outcome: cpAuditRefused, Target: a.Slug, Detail: "deployment " + d.ID + " linked"})
		cpError(w, http.StatusConflict, "deployment_linked", fmt.Sprintf("agent %s has a deployment linked (%s): delete it with force to drop the deployment too (svc agents delete %s --force)", a.Slug, d.URL, a.Slug))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := map[string]any{"organization": o.Slug, "deleted": a, "deployment": nil}
	if d.ID != "" {
		out["deployment"] = d
	}
	writeJSON(w, http.StatusOK, out)
}

// renameAgent names agent name, appending ev.
func (s *cpStore) renameAgent(ctx context.Context, agent, name string, ev cpAuditEvent) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE cp.agents SET name = $2 WHERE id = $1`, agent, name); err != nil {
			return err
		}
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil {
		return fmt.Errorf("rename agent: %w", err)
	}
	return nil
}

// deleteAgent deletes agent with its installations, deployment and links,
// appending ev, and returns the deployment it had (zero: none);
// errCPLinked, deleting nothing, when it has one and force is false.
func (s *cpStore) deleteAgent(ctx context.Context, agent string, force bool, ev cpAuditEvent) (cpDeployment, error) {
	var d cpDeployment
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// Lock the agent first: a link recording its deployment meanwhile
		// waits, then finds the agent gone.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM cp.agents WHERE id = $1 FOR UPDATE`, agent); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT id, url, image_tag, status, last_active_at FROM cp.deployments WHERE agent_id = $1`, agent).
			Scan(&d.ID, &d.URL, &d.ImageTag, &d.Status, &d.LastActiveAt)
		switch {
		case err == nil && !force:
			return errCPLinked
		case err == nil:
			ev.Detail += fmt.Sprintf(", forced: deployment %s at %s dropped", d.ID, d.URL)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM cp.agents WHERE id = $1`, agent); err != nil {
			return err
		}
		return s.auditAppend(ctx, tx, ev)
	})
	if err != nil && !errors.Is(err, errCPLinked) {
		err = fmt.Errorf("delete agent: %w", err)
	}
	return d, err
}

// deploymentLinks lists agent's links, newest first.
func (s *cpStore) deploymentLinks(ctx context.Context, agent string) ([]cpDeploymentLink, error) {
	rows, err := s.db.Query(ctx, `SELECT id, deployment_id, actor_id, actor, url, image_tag, at FROM cp.deployment_links
		WHERE agent_id = $1 ORDER BY at DESC, id LIMIT $2`, agent, cpDeploymentHistoryMax)
	if err != nil {
		return nil, fmt.Errorf("deployment history: %w", err)
	}
	links, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cpDeploymentLink])
	if err != nil {
		return nil, fmt.Errorf("deployment history: %w", err)
	}
	for i := range links {
		links[i].At = links[i].At.UTC()
	}
	return links, nil
}
