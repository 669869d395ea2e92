-- The durable history of ended runs (workflow_history.go): once a run is
-- terminal it leaves the engine's memory and lives here, queryable newest
-- first with keyset paging, until the retention (SVC_RUN_RETENTION) prunes it.
--
-- record is the run exactly as GET /api/runs/{runId} shows it, as JSON text.
-- It is text and not jsonb on purpose: jsonb rejects "\u0000" in strings, so
-- an input the runtime accepted would fail to archive later. The other
-- columns are copies of record's fields for filtering and ordering.
--
-- run_id collates "C" (byte order) so that the tie-break of equal created_at
-- orders exactly as Go compares strings: the engine merges its active runs
-- with a page of this table and both sides must agree on the order.
CREATE TABLE svc.runs (
    run_id        text COLLATE "C" PRIMARY KEY,
    workflow_name text        NOT NULL, -- '' for agent turns
    status        text        NOT NULL, -- completed, failed or cancelled
    trigger       text        NOT NULL, -- http, cli, workflow, agent
    agent         text        NOT NULL, -- agent turns: the agent; '' otherwise
    created_at    timestamptz NOT NULL, -- microseconds, as the engine keeps them
    ended_at      timestamptz NOT NULL, -- the retention's clock
    record        text        NOT NULL
);

-- The newest-first walk: overall, per workflow, per status, per agent.
CREATE INDEX runs_created_idx ON svc.runs (created_at DESC, run_id DESC);
CREATE INDEX runs_workflow_created_idx ON svc.runs (workflow_name, created_at DESC, run_id DESC);
CREATE INDEX runs_status_created_idx ON svc.runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_agent_created_idx ON svc.runs (agent, created_at DESC, run_id DESC) WHERE agent <> '';

-- Pruning by age.
CREATE INDEX runs_ended_idx ON svc.runs (ended_at);
