-- A session keeps what the model and the tools wrote exactly as they wrote
-- it, and that may be anything: jsonb refuses "\u0000" in strings (22P05)
-- and a lone surrogate escape such as "\ud800" (22P02), so a turn holding
-- either failed to save and vanished from the transcript the user had seen.
-- As in svc.runs, the JSON is kept as text, which takes both escapes as
-- written (nothing in the database reads inside these columns).
ALTER TABLE svc.agent_sessions
    ALTER COLUMN messages TYPE text USING messages::text,
    ALTER COLUMN pending TYPE text USING pending::text;
