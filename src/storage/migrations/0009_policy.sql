-- The policy engine's state (docs/policy.md). Built-in traits live in the code
-- (src/policy/builtin-traits.ts); only traits an administrator registers are stored.
CREATE TABLE policy_traits (
  name        text PRIMARY KEY,
  description text NOT NULL DEFAULT '',
  implies     jsonb NOT NULL DEFAULT '[]',
  conflicts   jsonb NOT NULL DEFAULT '[]',
  updated_at  timestamptz NOT NULL DEFAULT now(),
  updated_by  text NOT NULL
);

-- Policy documents, one row per distinct content: the key is the SHA-256 of the document's
-- canonical JSON (the engine's `version`), so storing the same content again is a no-op.
CREATE TABLE policy_versions (
  seq                bigserial UNIQUE,
  version            text PRIMARY KEY CHECK (version ~ '^[0-9a-f]{64}$'),
  document           jsonb NOT NULL,
  description        text NOT NULL DEFAULT '',
  rule_count         integer NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  created_by         text NOT NULL,
  created_by_user_id text
);

-- One row: the active version and a generation raised by every activation and every change
-- of the registry. Changes lock it (FOR UPDATE), so they apply one after the other; every
-- process reloads when the generation moves (LISTEN/NOTIFY on traitgate_policy, and a poll).
CREATE TABLE policy_state (
  id             boolean PRIMARY KEY DEFAULT true CHECK (id),
  active_version text REFERENCES policy_versions (version),
  generation     bigint NOT NULL DEFAULT 0
);
INSERT INTO policy_state (id) VALUES (true);

-- Every activation, newest last.
CREATE TABLE policy_activations (
  seq                  bigserial PRIMARY KEY,
  version              text NOT NULL REFERENCES policy_versions (version),
  previous_version     text,
  activated_at         timestamptz NOT NULL DEFAULT now(),
  activated_by         text NOT NULL,
  activated_by_user_id text,
  request_id           text
);
