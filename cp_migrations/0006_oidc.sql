-- Single sign-on through an OpenID Connect provider (issue 20 item 6,
-- cp_oidc.go, cp_oidc_flow.go).

-- A sign-in started at the provider and not yet come back: its state is
-- stored as its SHA-256 hash (the key), its nonce too; the PKCE verifier,
-- which must be sent to the provider, sealed under the master key and bound
-- to 'oidc-verifier:<state hash, hex>'. Spent once (used_at), and useless
-- after expires_at; the next start deletes the expired ones. return_to is
-- the control plane's own path the sign-in goes back to.
CREATE TABLE cp.oidc_logins (
    state_hash  bytea PRIMARY KEY,
    nonce_hash  bytea NOT NULL,
    verifier    bytea NOT NULL,
    return_to   text NOT NULL,
    client_addr text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX oidc_logins_expires ON cp.oidc_logins (expires_at);
CREATE INDEX oidc_logins_pending ON cp.oidc_logins (client_addr, expires_at) WHERE used_at IS NULL;

-- Who a provider's subject is here: a later sign-in maps by (issuer,
-- subject), never by email alone. email is the one last signed in with.
CREATE TABLE cp.oidc_identities (
    issuer          text NOT NULL,
    subject         text NOT NULL,
    user_id         text NOT NULL REFERENCES cp.users(id) ON DELETE CASCADE,
    email           text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_sign_in_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX oidc_identities_user ON cp.oidc_identities (user_id);
