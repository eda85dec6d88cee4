-- Service accounts: non-human principals (internal services such as `ai-core`) that get
-- short-lived access tokens with a client id (`name`) and secret (docs/identity.md).
-- Only a SHA-256 of each secret is stored: secrets are 256-bit random values, so a slow
-- password hash would add cost without adding safety. During a rotation the previous
-- secret is accepted until `previous_secret_expires_at`.
CREATE TABLE service_accounts (
  id                         uuid PRIMARY KEY,
  name                       text NOT NULL UNIQUE,
  description                text NOT NULL DEFAULT '',
  roles                      text[] NOT NULL DEFAULT '{}',
  is_active                  boolean NOT NULL DEFAULT true,
  secret_hash                bytea NOT NULL,
  secret_issued_at           timestamptz NOT NULL DEFAULT now(),
  previous_secret_hash       bytea,
  previous_secret_expires_at timestamptz,
  created_at                 timestamptz NOT NULL DEFAULT now(),
  updated_at                 timestamptz NOT NULL DEFAULT now()
);
