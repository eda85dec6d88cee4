-- Login sessions and their rotating refresh tokens (decisions.md §1; docs/identity.md).
-- A session is one login; its refresh tokens form one family. Access tokens carry the
-- session id (`sid`), so revoking the session stops them too.
CREATE TABLE sessions (
  id             uuid PRIMARY KEY,
  user_id        uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  created_at     timestamptz NOT NULL DEFAULT now(),
  revoked_at     timestamptz,
  revoked_reason text
);
CREATE INDEX sessions_user ON sessions (user_id) WHERE revoked_at IS NULL;

-- Only a SHA-256 of each refresh token is stored: the tokens are 256-bit random values.
CREATE TABLE refresh_tokens (
  token_hash  text PRIMARY KEY,
  session_id  uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz
);
CREATE INDEX refresh_tokens_session ON refresh_tokens (session_id);
