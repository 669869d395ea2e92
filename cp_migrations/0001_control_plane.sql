-- The control plane's state (svc control-plane, DESIGN §7), in its own
-- database. Ids are prefixed random hex (org_, usr_, agt_, ins_, dep_,
-- key_, crd_). Secrets are never stored in the clear: credentials, API
-- keys, device codes and sign-in codes as SHA-256 hashes; deployment
-- signing secrets and identity signing keys sealed with AES-256-GCM under
-- the control plane's master key.

CREATE SCHEMA cp;

-- Small state: 'bootstrapped' once the first boot created the admin.
CREATE TABLE cp.state (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cp.organizations (
    id         text PRIMARY KEY,
    slug       text NOT NULL UNIQUE,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cp.users (
    id         text PRIMARY KEY,
    email      text NOT NULL UNIQUE,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cp.memberships (
    org_id     text NOT NULL REFERENCES cp.organizations(id) ON DELETE CASCADE,
    user_id    text NOT NULL REFERENCES cp.users(id) ON DELETE CASCADE,
    role       text NOT NULL CHECK (role IN ('owner', 'member')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id)
);

CREATE TABLE cp.agents (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES cp.organizations(id) ON DELETE CASCADE,
    slug       text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, slug)
);

-- One deployment per agent: re-linking updates it (SPEC §4.2 link rule 2).
-- status: registered (recorded by link, not called since), active (the
-- last call through the control plane reached the box), unreachable (the
-- last call could not reach it), rejected (the box refused the control
-- plane's signature: the secrets differ, re-link).
CREATE TABLE cp.deployments (
    id             text PRIMARY KEY,
    agent_id       text NOT NULL UNIQUE REFERENCES cp.agents(id) ON DELETE CASCADE,
    url            text NOT NULL,
    image_tag      text NOT NULL,
    status         text NOT NULL CHECK (status IN ('registered', 'active', 'unreachable', 'rejected')),
    signing_secret bytea NOT NULL, -- sealed, bound to 'deployment:<id>'
    last_active_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- An installation is what an identity token's aud names: one local_dev
-- installation per user and agent (SPEC §2), and one deployment
-- installation per agent, the one its box is taught.
CREATE TABLE cp.installations (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES cp.organizations(id) ON DELETE CASCADE,
    agent_id   text NOT NULL REFERENCES cp.agents(id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('local_dev', 'deployment')),
    user_id    text REFERENCES cp.users(id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'local_dev') = (user_id IS NOT NULL))
);
CREATE UNIQUE INDEX installations_local_dev ON cp.installations (agent_id, user_id) WHERE kind = 'local_dev';
CREATE UNIQUE INDEX installations_deployment ON cp.installations (agent_id) WHERE kind = 'deployment';

-- Ed25519 identity-token keys; the newest unretired one signs.
CREATE TABLE cp.signing_keys (
    kid        text PRIMARY KEY,
    seed       bytea NOT NULL, -- sealed, bound to 'identity-key:<kid>'
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);

-- User credentials (svc login, the console): opaque bearer tokens.
CREATE TABLE cp.credentials (
    id           text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES cp.users(id) ON DELETE CASCADE,
    token_hash   bytea NOT NULL UNIQUE,
    kind         text NOT NULL CHECK (kind IN ('cli', 'console')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- API keys of an organization, accepted by its boxes on the chat wires.
CREATE TABLE cp.api_keys (
    id           text PRIMARY KEY,
    org_id       text NOT NULL REFERENCES cp.organizations(id) ON DELETE CASCADE,
    name         text NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    created_by   text REFERENCES cp.users(id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

-- One-time sign-in codes (the admin's, printed on first boot).
CREATE TABLE cp.signin_codes (
    code_hash  bytea PRIMARY KEY,
    user_id    text NOT NULL REFERENCES cp.users(id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    used_at    timestamptz
);

-- Device-code sign-in (RFC 8628): pending until a signed-in user approves
-- the user code, then consumed by the poll that receives the credential.
CREATE TABLE cp.device_codes (
    device_hash  bytea PRIMARY KEY,
    user_code    text NOT NULL UNIQUE,
    status       text NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    user_id      text REFERENCES cp.users(id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_poll_at timestamptz
);
