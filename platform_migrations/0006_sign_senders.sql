-- Replay protection of signed requests (sign.go, sign_window.go): per
-- sender (a control plane process), the highest counter accepted and a
-- bitmap of the counters accepted just below it, as IPsec's anti-replay
-- window (RFC 4303 §3.4.3). Kept here, not in memory, so that a signed
-- request is refused after a restart of the box, and by every replica of it.
-- Only a request whose MAC verified adds or changes a row.
CREATE TABLE svc.sign_senders (
    sender  text        PRIMARY KEY,
    hwm     bigint      NOT NULL, -- the highest counter accepted
    seen    bit(4096)   NOT NULL, -- bit i (from the left) set: counter hwm - i was accepted
    newest  timestamptz NOT NULL  -- the latest signing time accepted: the row is dropped once it is a signing window old
);
CREATE INDEX sign_senders_newest_idx ON svc.sign_senders (newest);

-- svc.sign_accept decides one counter of a sender in one statement (one
-- round trip, the row locked only while it runs): 'ok' (recorded),
-- 'replayed' (accepted before), 'stale' (below the window) or 'capacity'
-- (a new sender while max_senders are live; the senders idle for a signing
-- window are dropped first).
CREATE FUNCTION svc.sign_accept(p_sender text, p_counter bigint, p_signed timestamptz, p_now timestamptz,
                                p_window interval, p_max_senders integer) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r svc.sign_senders%ROWTYPE;
    d bigint;
BEGIN
    -- The decision is visible to every later statement, on any connection,
    -- at once; only its flush to disk is left to the WAL writer (within
    -- about 0.6 s). A restart of the box (or of a replica) loses nothing;
    -- only a crash of PostgreSQL itself can forget the last instant's
    -- counters. The price of waiting for the flush was a disk sync on every
    -- proxied request.
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT * INTO r FROM svc.sign_senders WHERE sender = p_sender FOR UPDATE;
    IF NOT FOUND THEN
        DELETE FROM svc.sign_senders WHERE newest < p_now - p_window;
        IF (SELECT count(*) FROM svc.sign_senders) >= p_max_senders THEN
            RETURN 'capacity';
        END IF;
        INSERT INTO svc.sign_senders (sender, hwm, seen, newest) VALUES (p_sender, 0, B'0'::bit(4096), p_signed)
            ON CONFLICT (sender) DO NOTHING;
        SELECT * INTO r FROM svc.sign_senders WHERE sender = p_sender FOR UPDATE;
    END IF;
    IF p_counter > r.hwm THEN
        d := p_counter - r.hwm;
        IF d >= 4096 THEN
            r.seen := B'0'::bit(4096);
        ELSE
            r.seen := r.seen >> d::integer;
        END IF;
        r.seen := set_bit(r.seen, 0, 1);
        r.hwm := p_counter;
    ELSE
        d := r.hwm - p_counter;
        IF d >= 4096 THEN
            RETURN 'stale';
        END IF;
        IF get_bit(r.seen, d::integer) = 1 THEN
            RETURN 'replayed';
        END IF;
        r.seen := set_bit(r.seen, d::integer, 1);
    END IF;
    UPDATE svc.sign_senders SET hwm = r.hwm, seen = r.seen, newest = GREATEST(r.newest, p_signed) WHERE sender = p_sender;
    RETURN 'ok';
END
$$;
