-- Search over ended runs (GET /api/runs?q=, issue 37 item 3): search is the
-- lowercased JSON text of a run's input, output and error (runSearchText,
-- at most runSearchMaxBytes), written with the record. Runs archived before
-- this column have it NULL and are searched in their whole record instead.
ALTER TABLE svc.runs ADD COLUMN search text;
