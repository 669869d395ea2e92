-- Runtime state of svc. The schema svc and the tracking table
-- svc.svc_migrations are created by the migration runner before this file.

-- Stored secrets (e.g. a model-provider credential entered at first run).
-- value is encrypted by svc before it is written.
CREATE TABLE svc.secrets (
    name       text PRIMARY KEY,
    value      bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Small runtime state that must survive restarts.
CREATE TABLE svc.kv (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);
