-- The shared audit log (decisions.md §2; docs/audit.md): append-only, hash-chained.
-- seq orders the chain (it may have gaps: a rolled-back batch consumes identity values);
-- hash = sha256_hex(prev_hash || '\n' || canonical encoding), computed by src/audit.
CREATE TABLE audit_events (
  seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id          uuid NOT NULL UNIQUE,
  -- Millisecond precision, exactly what is hashed: a changed time cannot hide below it.
  occurred_at timestamptz(3) NOT NULL,
  actor_type  text NOT NULL
    CHECK (actor_type IN ('user', 'service', 'plugin', 'system', 'anonymous')),
  actor_id    text,
  action      text NOT NULL CHECK (action <> ''),
  target      text,
  outcome     text NOT NULL CHECK (outcome IN ('success', 'failure', 'denied', 'error')),
  request_id  text,
  details     jsonb NOT NULL DEFAULT '{}',
  -- UNIQUE: no two events may follow the same one, so the chain cannot fork.
  prev_hash   text NOT NULL UNIQUE,
  hash        text NOT NULL UNIQUE
);

-- Append-only: UPDATE, DELETE and TRUNCATE raise. The table's owner or a superuser can still
-- disable these triggers (ALTER TABLE ... DISABLE TRIGGER, session_replication_role = replica)
-- or rewrite rows; `traitgate audit verify` detects such changes through the hash chain.
CREATE FUNCTION audit_events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_events_append_only
  BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

CREATE TRIGGER audit_events_no_truncate
  BEFORE TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();
