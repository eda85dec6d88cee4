-- The operator lane (docs/operator-lane.md): registered plugins and the allowlist of who may
-- call which of their operations.
CREATE TABLE plugins (
  id                    text PRIMARY KEY,
  name                  text NOT NULL DEFAULT '',
  plugin_type           text NOT NULL,
  -- {"operation": "/absolute/path", ...}
  endpoints             jsonb NOT NULL,
  host                  text NOT NULL,
  port                  integer NOT NULL,
  -- Traits for the plugin-interaction policy besides plugin_type:<plugin_type>.
  traits                text[] NOT NULL DEFAULT '{}',
  unlisted_host         boolean NOT NULL DEFAULT false,
  enabled               boolean NOT NULL DEFAULT true,
  -- SHA-256 of the credential the plugin presents (256 random bits, so a fast hash is enough).
  credential_hash       bytea NOT NULL,
  -- The secret the core presents to the plugin, sealed (AES-256-GCM, docs/encryption.md).
  core_secret_sealed    text NOT NULL,
  credentials_issued_at timestamptz NOT NULL DEFAULT now(),
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now()
);

-- `caller` is a plugin id or a service account name; `target` a plugin.
CREATE TABLE operator_allowlist (
  caller     text NOT NULL,
  target     text NOT NULL REFERENCES plugins (id) ON DELETE CASCADE,
  operations text[] NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (caller, target)
);
CREATE INDEX operator_allowlist_target ON operator_allowlist (target);
