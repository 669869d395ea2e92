-- Search over ended runs (GET /api/runs?q=, issue 37 item 3): search is the
-- lowercased JSON text of a run's input, output and error (runSearchText,
-- at most runSearchMaxBytes), written with the record. Runs archived before
-- this column have it NULL and are searched in their whole record instead.
ALTER TABLE svc.runs ADD COLUMN search text;
-- The words of a failed run's error (at most 200 bytes), for the overview's
-- top errors (GET /api/runs/stats); NULL for other runs and older ones.
ALTER TABLE svc.runs ADD COLUMN error_message text;
CREATE INDEX runs_failed_created_idx ON svc.runs (created_at) WHERE error_message IS NOT NULL;

-- A trigram index makes a substring search of three or more characters an
-- index scan. pg_trgm is a trusted extension (PostgreSQL 13 and later): the
-- project's own role may create it. Where it cannot be had (a server
-- without the contrib modules), searches read the records of their range.
DO $$
DECLARE
    schema text;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA svc;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pg_trgm is not available (%): run searches read every record of their range', SQLERRM;
        RETURN;
    END;
    SELECT n.nspname INTO schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    EXECUTE format('CREATE INDEX runs_search_trgm ON svc.runs USING gin (search %I.gin_trgm_ops)', schema);
    -- The runs archived before: with this, the planner ORs the two
    -- indexes rather than reading every record (workflow_history.go list).
    CREATE INDEX runs_search_legacy ON svc.runs (created_at) WHERE search IS NULL;
END $$;
