-- The sign-in routes' rate limit per source address, shared by every
-- control-plane replica on the database (issue 20 item 7, cp_limits.go): a
-- token bucket per source, refilled from the time of its last request.
-- Rows idle past a full refill are deleted by the next sweep.
CREATE TABLE cp.sign_in_limits (
    source text COLLATE "C" PRIMARY KEY,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL
);
CREATE INDEX sign_in_limits_at ON cp.sign_in_limits (at);
