-- API keys for the administrative APIs (decisions.md §2; docs/api-keys.md).
-- A key is `tgk_<prefix>_<secret>`: the prefix finds the row, the secret proves possession.
-- Only SHA-256 of the whole key is stored. A plain hash (no salt, no argon2) is enough here
-- because the secret is 256 bits from the CSPRNG: nothing about it can be guessed, so a slow
-- hash would only make every administrative call slower without protecting anything.
CREATE TABLE api_keys (
  id            uuid PRIMARY KEY,
  name          text NOT NULL CHECK (name <> ''),
  -- The 8 characters after `tgk_`: shown to administrators, used to find the row.
  prefix        text NOT NULL UNIQUE,
  -- hex(sha256(key)), 64 characters.
  secret_hash   text NOT NULL CHECK (length(secret_hash) = 64),
  scopes        text[] NOT NULL,
  -- The administrator who created it; NULL when created from the command line. No foreign
  -- key: the key's provenance stays when that user is deleted (the audit log has it too).
  created_by    uuid,
  -- Millisecond precision, as written by the application's clock: listing pages on
  -- (created_at, id), and a cursor must round-trip through JavaScript's Date exactly.
  created_at    timestamptz(3) NOT NULL,
  expires_at    timestamptz(3),
  revoked_at    timestamptz(3),
  revoked_by    uuid,
  -- Written at most about once a minute per key, never on every request.
  last_used_at  timestamptz(3),
  CHECK (expires_at IS NULL OR expires_at > created_at)
);

CREATE INDEX api_keys_listing ON api_keys (created_at DESC, id DESC);
