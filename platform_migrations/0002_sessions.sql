-- Durable chat sessions (SPEC §5): the history and pending tool calls of a
-- conversation opened with x-svc-session (or an agent-UI threadId). A
-- session belongs to one agent AND one credential: the key includes the
-- SHA-256 of the credential, so another credential never reads or continues
-- it (it gets a fresh session under the same session key).
CREATE TABLE svc.agent_sessions (
    agent           text        NOT NULL,
    credential_hash text        NOT NULL, -- hex SHA-256 of the caller's credential
    session_key     text        NOT NULL, -- x-svc-session value or agent-UI threadId
    messages        jsonb       NOT NULL, -- the conversation, oldest first
    pending         jsonb       NOT NULL, -- tool calls waiting for the client (approvals, client tools)
    turns           integer     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent, credential_hash, session_key)
);
