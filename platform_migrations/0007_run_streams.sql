-- The streams of archived runs (engine_stream.go, workflow_stream.go): the
-- chunks a run's steps wrote, kept beside the run in svc.runs and pruned
-- with it. entries is the JSON array of the stream's entries, as text for
-- the reason svc.runs.record is (jsonb refuses "\u0000" in strings).
CREATE TABLE svc.run_streams (
    run_id  text COLLATE "C" PRIMARY KEY REFERENCES svc.runs (run_id) ON DELETE CASCADE,
    entries text NOT NULL
);
