-- The audit log, one chain per organization, keyed (issue 36, items 10
-- and 11). Appends to one organization's chain lock that chain's head row
-- (cp.audit_heads) and no other, so a member flooding one organization's
-- log no longer slows every other's audited writes. A row's hash is an
-- HMAC-SHA-256, keyed with a key derived from the control plane's master
-- key (which is not in the database), over the previous row's hash of the
-- same chain and the row's own fields: whoever can write to the database
-- but not read the master key cannot extend or rewrite a chain.
-- chain_seq is the row's place in its organization's chain ('' for rows of
-- no organization: sign-ins); seq stays the row's id, from a sequence, for
-- paging. Rows of the old single chain have chain_seq NULL until the first
-- boot with the master key re-chains them (cpStore.auditRechain).
ALTER TABLE cp.audit_log ADD COLUMN chain_seq bigint;
CREATE SEQUENCE cp.audit_log_seq OWNED BY cp.audit_log.seq;
SELECT setval('cp.audit_log_seq', (SELECT coalesce(max(seq), 0) + 1 FROM cp.audit_log), false);
ALTER TABLE cp.audit_log ALTER COLUMN seq SET DEFAULT nextval('cp.audit_log_seq');
CREATE UNIQUE INDEX audit_log_chain ON cp.audit_log (org_id, chain_seq);
CREATE INDEX audit_log_org_seq ON cp.audit_log (org_id, seq);
-- The rows still to re-chain, which every boot asks about: an empty index
-- once they are, so the question costs nothing however long the log.
CREATE INDEX audit_log_unchained ON cp.audit_log (seq) WHERE chain_seq IS NULL;
CREATE TABLE cp.audit_heads (
    org_id    text PRIMARY KEY,
    chain_seq bigint NOT NULL,
    hash      bytea NOT NULL
);
-- A member's browser sign-in codes are capped and expire (cpStore.newSignInCode).
CREATE INDEX signin_codes_user ON cp.signin_codes (user_id);
