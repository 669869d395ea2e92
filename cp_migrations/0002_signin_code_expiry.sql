-- One-time sign-in codes a signed-in user mints for a browser (POST
-- /api/login/codes) expire; the first boot's code (expires_at NULL) does not.
ALTER TABLE cp.signin_codes ADD COLUMN expires_at timestamptz;
