-- What the device page shows about a device sign-in before a user approves
-- it (RFC 8628 §5.4): the address it came from (the TCP peer) and the host
-- name and version the CLI reported. The index serves the cleanup of
-- expired codes and the caps on pending ones (cp_device.go), which
-- otherwise read the whole table.
ALTER TABLE cp.device_codes
    ADD COLUMN client_addr    text NOT NULL DEFAULT '',
    ADD COLUMN client_host    text NOT NULL DEFAULT '',
    ADD COLUMN client_version text NOT NULL DEFAULT '';
CREATE INDEX device_codes_expires ON cp.device_codes (expires_at);
CREATE INDEX device_codes_pending ON cp.device_codes (client_addr, expires_at) WHERE status = 'pending';
