-- Replay protection of signed requests (sign.go, sign_window.go): per
-- sender (a control plane process), the highest counter accepted and a
-- bitmap of the counters accepted just below it, as IPsec's anti-replay
-- window (RFC 4303 §3.4.3). Kept here, not in memory, so that a signed
-- request is refused after a restart of the box, and by every replica of it.
-- Only a request whose MAC verified adds or changes a row.
CREATE TABLE svc.sign_senders (
    sender  text        PRIMARY KEY,
    hwm     bigint      NOT NULL, -- the highest counter accepted
    seen    bytea       NOT NULL, -- bit i (big-endian) set: counter hwm - i was accepted
    newest  timestamptz NOT NULL  -- the latest signing time accepted: the row is dropped once it is a signing window old
);
CREATE INDEX sign_senders_newest_idx ON svc.sign_senders (newest);
