-- Sessions of the admin console, a backend-for-frontend (decisions.md §7; docs/console.md).
-- The browser holds only a random cookie; this table holds what it stands for. Several
-- processes on one database share it, so any replica answers any console request.
CREATE TABLE console_sessions (
  -- hex(sha256(cookie value)): the cookie itself (256 random bits) is never stored.
  id_hash          text PRIMARY KEY CHECK (length(id_hash) = 64),
  -- 'enrol': MFA enrolment under an enrolment-only token; 'api_key': signed in, waiting for
  -- the API key; 'active': usable.
  stage            text NOT NULL CHECK (stage IN ('enrol', 'api_key', 'active')),
  user_id          uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  username         text NOT NULL,
  roles            text[] NOT NULL,
  -- Signed in with a second factor (the policy's trait security:mfa).
  mfa              boolean NOT NULL,
  -- Sealed JSON {access, refresh, access_expires_at} (src/crypto/secret-box.ts, context
  -- `console_sessions.sealed:<id_hash>`); the API key is sealed in it too once given.
  sealed           text NOT NULL,
  api_key_id       uuid,
  api_key_scopes   text[] NOT NULL DEFAULT '{}',
  -- The policy's ListUiFeatures answer for this user, asked at sign-in and on each shell load.
  features         text[] NOT NULL DEFAULT '{}',
  policy_version   text NOT NULL DEFAULT '',
  client_address   text NOT NULL,
  created_at       timestamptz(3) NOT NULL,
  last_seen_at     timestamptz(3) NOT NULL,
  -- One process refreshes the tokens at a time (single-use refresh tokens): it holds this lease.
  refreshing_until timestamptz(3)
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_last_seen ON console_sessions (last_seen_at);
