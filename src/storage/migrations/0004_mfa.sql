-- TOTP multi-factor authentication (decisions.md §1; docs/identity.md).
-- Secrets are sealed with the data encryption key (src/crypto/secret-box.ts), never stored
-- in clear; recovery codes are stored as SHA-256 hashes and used at most once.
ALTER TABLE users ADD COLUMN mfa_secret text;
ALTER TABLE users ADD COLUMN mfa_pending_secret text;
-- The last TOTP time step accepted for the user: a code of that step or an older one is
-- refused, so a code works once even across processes.
ALTER TABLE users ADD COLUMN mfa_last_step bigint;

CREATE TABLE mfa_recovery_codes (
  user_id   uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  code_hash text NOT NULL,
  used_at   timestamptz,
  PRIMARY KEY (user_id, code_hash)
);
