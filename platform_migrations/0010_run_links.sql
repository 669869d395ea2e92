-- Links between runs: reruns (engine_rerun.go, issue 37 item 4): a run made by "run again" or
-- "retry from step" names the run it reruns; the old run finds its reruns
-- by this column (GET /api/runs?rerunOf=), so its own record never changes.
-- NULL for every other run: the partial index holds only reruns.
ALTER TABLE svc.runs ADD COLUMN rerun_of text COLLATE "C";
CREATE INDEX runs_rerun_of_idx ON svc.runs (rerun_of, created_at DESC, run_id DESC) WHERE rerun_of IS NOT NULL;

-- An agent turn's durable session (GET /api/runs?session=, the console's
-- session page, issue 37 item 5); NULL for workflow runs and stateless turns.
ALTER TABLE svc.runs ADD COLUMN session_id text COLLATE "C";
CREATE INDEX runs_session_idx ON svc.runs (session_id, created_at DESC, run_id DESC) WHERE session_id IS NOT NULL;
