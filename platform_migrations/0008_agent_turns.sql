-- Durable chat turns in progress (session.go): one row per turn of a
-- durable session (x-svc-session, agent-UI threadId), from when it starts
-- until its session is saved, in the same statement. A row left behind is a
-- turn whose process died before it ended (killed, crashed, its machine
-- lost): the session's next turn, on whichever replica it reaches, or a
-- replica's sweep (which tells such a row by lock_key: no session of the
-- database holds that advisory lock, which a turn holds while it runs)
-- records it in the runs as interrupted and removes it.
CREATE TABLE svc.agent_turns (
    turn_id          text COLLATE "C" PRIMARY KEY,
    agent            text        NOT NULL,
    credential_hash  text        NOT NULL,
    session_key      text        NOT NULL,
    lock_key         bigint      NOT NULL, -- the session's advisory lock (session.go sessionLockID)
    wire             text        NOT NULL,
    conversation_key text        NOT NULL, -- '' when none
    input            text        NOT NULL, -- the runs API's input of the turn (JSON text)
    started_at       timestamptz NOT NULL
);
CREATE INDEX agent_turns_session ON svc.agent_turns (agent, credential_hash, session_key);
