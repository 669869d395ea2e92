-- svc.sign_accept (0006_sign_senders.sql) decides a known sender's fresh
-- counter in one UPDATE: the window's check in its WHERE, the slide or the
-- bit in its SET. The row is locked by the UPDATE itself, where 0006 locked
-- it with SELECT … FOR UPDATE and then updated it: on every signed request
-- that was two statements and two WAL records (the lock, then the new row
-- version) under the row's lock. In READ COMMITTED an UPDATE that waited
-- for another request's lock on the row re-checks its WHERE against the row
-- that request left, so two requests with the same counter never both
-- match. Anything else (a new sender, a replayed or stale counter) is
-- decided by 0006's function, unchanged, renamed svc.sign_decide. CASE,
-- not AND, orders the checks: get_bit is evaluated only for a counter
-- inside the window, and no difference of counters is cast to integer
-- before it is known to be below 4096.
ALTER FUNCTION svc.sign_accept(text, bigint, timestamptz, timestamptz, interval, integer) RENAME TO sign_decide;

CREATE FUNCTION svc.sign_accept(p_sender text, p_counter bigint, p_signed timestamptz, p_now timestamptz,
                                p_window interval, p_max_senders integer) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    -- As in 0006: the decision is visible at once; its flush to disk is the
    -- WAL writer's.
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE svc.sign_senders SET
        seen = CASE
            WHEN p_counter > hwm AND p_counter - hwm >= 4096 THEN set_bit(B'0'::bit(4096), 0, 1)
            WHEN p_counter > hwm THEN set_bit(seen >> (p_counter - hwm)::integer, 0, 1)
            ELSE set_bit(seen, (hwm - p_counter)::integer, 1)
        END,
        hwm = GREATEST(hwm, p_counter),
        newest = GREATEST(newest, p_signed)
    WHERE sender = p_sender AND CASE
            WHEN p_counter > hwm THEN true
            WHEN hwm - p_counter >= 4096 THEN false
            ELSE get_bit(seen, (hwm - p_counter)::integer) = 0
        END;
    IF FOUND THEN
        RETURN 'ok';
    END IF;
    RETURN svc.sign_decide(p_sender, p_counter, p_signed, p_now, p_window, p_max_senders);
END
$$;
