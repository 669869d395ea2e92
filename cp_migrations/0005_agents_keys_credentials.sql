-- Agents, deployments and keys from the CLI, and CLI credentials with a
-- life (issue 20 items 3 and 4; cp_agents.go, cp_keys.go,
-- cp_credentials.go).

-- An API key may expire (expires_at, NULL: never); the proxy notes its
-- last use (last_used_at, at most once a minute).
ALTER TABLE cp.api_keys
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN last_used_at timestamptz;

-- A credential's device: the host name its CLI reported, or 'browser'.
-- A credential expires a TTL after its last use (or its creation), the
-- TTL being the control plane's --credential-ttl.
ALTER TABLE cp.credentials ADD COLUMN name text NOT NULL DEFAULT '';
CREATE INDEX credentials_user ON cp.credentials (user_id) WHERE revoked_at IS NULL;

-- Every link of an agent's deployment: who, when, where, which tag. The
-- deployment row holds only the last; this table keeps them all (the
-- audit log too, as deployment.linked rows).
CREATE TABLE cp.deployment_links (
    id            text PRIMARY KEY,
    agent_id      text NOT NULL REFERENCES cp.agents(id) ON DELETE CASCADE,
    deployment_id text NOT NULL,
    actor_id      text NOT NULL,
    actor         text NOT NULL,
    url           text NOT NULL,
    image_tag     text NOT NULL,
    at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deployment_links_agent ON cp.deployment_links (agent_id, at);
