-- Platform settings (decisions.md §2; docs/settings.md). Only values set through the API are
-- stored; the environment and the registry's defaults (src/settings/registry.ts) supply the
-- rest. Secret values are sealed with the data encryption key (src/crypto/secret-box.ts,
-- context "settings:<key>"), never stored in clear.
CREATE TABLE settings (
  key        text PRIMARY KEY,
  -- Plain values as JSON (string, number or boolean); NULL for secrets.
  value      jsonb,
  -- Secret values, sealed; NULL for plain ones.
  sealed     text,
  version    bigint NOT NULL,
  CHECK ((value IS NULL) <> (sealed IS NULL))
);

-- One row: the settings' version, raised by one by every update that changes something.
-- Updates lock it (FOR UPDATE), so they apply one after the other on every process.
CREATE TABLE settings_state (
  id      boolean PRIMARY KEY DEFAULT true CHECK (id),
  version bigint NOT NULL DEFAULT 0
);
INSERT INTO settings_state (id, version) VALUES (true, 0);

-- History: one row per update, one per key it changed. Secret values are "****".
CREATE TABLE settings_updates (
  version    bigint PRIMARY KEY,
  updated_at timestamptz NOT NULL DEFAULT now(),
  user_id    text NOT NULL,
  username   text NOT NULL,
  request_id text
);

CREATE TABLE settings_changes (
  version bigint NOT NULL REFERENCES settings_updates (version),
  key     text NOT NULL,
  -- JSON values; NULL when no value was stored (the environment's or the default applied).
  before  jsonb,
  after   jsonb,
  PRIMARY KEY (version, key)
);
CREATE INDEX settings_changes_key ON settings_changes (key, version);
