-- The proxy's rate limit per caller (an API key or a user), shared by every
-- control-plane replica on the database (issue 19 item 6, cp_limits.go): a
-- token bucket per caller, spent by the statement that resolves the
-- proxied request's target. Rows idle past a full refill are deleted by the
-- next sweep, which reads the whole table (one row per caller active in the
-- last two seconds): no index on at, so a bucket's update stays a
-- heap-only one that adds no index entries, however many calls it counts.
CREATE TABLE cp.proxy_limits (
    principal text COLLATE "C" PRIMARY KEY,
    tokens    double precision NOT NULL,
    at        timestamptz NOT NULL
);
