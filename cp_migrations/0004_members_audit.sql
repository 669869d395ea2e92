-- Members, invitations and the audit log (issue 20, cp_members.go,
-- cp_audit.go).

-- A third role between owner and member: admin (agents, deployments, API
-- keys, members other than owners).
ALTER TABLE cp.memberships DROP CONSTRAINT memberships_role_check,
    ADD CONSTRAINT memberships_role_check CHECK (role IN ('owner', 'admin', 'member'));

-- An invitation into an organization with a role, for one email: a
-- one-time code (stored as its SHA-256 hash) that expires at expires_at
-- and is spent by the first sign-in with it (used_at, used_by).
CREATE TABLE cp.invitations (
    id          text PRIMARY KEY,
    org_id      text NOT NULL REFERENCES cp.organizations(id) ON DELETE CASCADE,
    email       text NOT NULL,
    role        text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    code_hash   bytea NOT NULL UNIQUE,
    invited_by  text REFERENCES cp.users(id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    used_by     text REFERENCES cp.users(id) ON DELETE SET NULL,
    revoked_at  timestamptz
);
CREATE INDEX invitations_pending ON cp.invitations (org_id, expires_at) WHERE used_at IS NULL AND revoked_at IS NULL;

-- The audit log: append-only, hash-chained. Each row's hash is SHA-256
-- over the previous row's hash and its own fields (cpAuditRow.digest);
-- seq has no gaps; cp.state 'audit_head' holds the last row's seq and
-- hash, so a removed last row is detected too. org_id is '' for a row of
-- no organization (a sign-in, a failed sign-in); no foreign keys, so rows
-- outlive what they name. Nothing secret is written.
CREATE TABLE cp.audit_log (
    seq        bigint PRIMARY KEY,
    at         timestamptz NOT NULL,
    org_id     text NOT NULL,
    actor_id   text NOT NULL,
    actor      text NOT NULL,
    action     text NOT NULL,
    outcome    text NOT NULL,
    target     text NOT NULL,
    source     text NOT NULL,
    detail     text NOT NULL,
    prev_hash  bytea NOT NULL,
    hash       bytea NOT NULL
);
CREATE INDEX audit_log_org_at ON cp.audit_log (org_id, at);
