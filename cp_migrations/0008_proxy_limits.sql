-- The proxy's rate limit per caller (an API key or a user), shared by every
-- control-plane replica on the database (issue 19 item 6, cp_limits.go): a
-- token bucket per caller, spent by the statement that resolves the
-- proxied request's target. Rows idle past a full refill are deleted by the
-- next sweep.
CREATE TABLE cp.proxy_limits (
    principal text COLLATE "C" PRIMARY KEY,
    tokens    double precision NOT NULL,
    at        timestamptz NOT NULL
);
CREATE INDEX proxy_limits_at ON cp.proxy_limits (at);
