-- Kept responses of the OpenAI Responses wire (session_responses.go). A
-- response holds only the messages its turn added (its input and the
-- agent's answer); its conversation is the messages of its ancestors,
-- root first, then its own: a chain of N responses stores its history
-- once, not N times. Responses belong to one agent and one credential, as
-- sessions do. body is the response object as it was answered (text, not
-- jsonb, so any string the answer carried round-trips; messages and
-- pending are JSON text for the same reason, as in svc.agent_sessions since
-- 0004), served by
-- GET /openai/v1/responses/{id}; NULL until the answer is finished.
-- Responses older than SVC_RESPONSE_RETENTION are trimmed; a kept child of
-- a trimmed or deleted response first takes over its messages.
CREATE TABLE svc.agent_responses (
    response_id     text COLLATE "C" PRIMARY KEY, -- resp_<chain>_<self>
    agent           text        NOT NULL,
    credential_hash text        NOT NULL, -- hex SHA-256 of the caller's credential
    parent_id       text COLLATE "C",     -- the response this one continues; NULL: its chain starts here
    messages        text        NOT NULL, -- the messages this response added, oldest first (a JSON array)
    pending         text        NOT NULL, -- tool calls waiting for the client after it (a JSON array)
    turns           integer     NOT NULL, -- turns of its conversation, its own included
    body            text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_responses_parent ON svc.agent_responses (parent_id);
CREATE INDEX agent_responses_created ON svc.agent_responses (created_at);

-- Responses kept before this migration were whole sessions of their own in
-- svc.agent_sessions (each a full copy of its conversation): they move here
-- as the first responses of their chains (they have no stored body).
INSERT INTO svc.agent_responses (response_id, agent, credential_hash, messages, pending, turns, created_at)
SELECT session_key, agent, credential_hash, messages, pending, turns, created_at
FROM svc.agent_sessions WHERE session_key ~ '^resp_[0-9a-f]{24}_[0-9a-f]{24}$'
ON CONFLICT (response_id) DO NOTHING;
DELETE FROM svc.agent_sessions WHERE session_key ~ '^resp_[0-9a-f]{24}_[0-9a-f]{24}$';
