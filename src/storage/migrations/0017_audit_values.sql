-- Values an audit event refers to instead of repeating them (docs/audit.md, "Compact decision
-- records"): a decision's inputs (subject, traits, data classes, context, resource attribute
-- names) and its outcome (policy version, decision, reason, rules) are written once here and
-- named by `ref`, the first 16 bytes of sha256 of the value's canonical JSON (base64url, 22
-- characters). The hash chain covers an event's details, which hold the refs; a ref covers its
-- value; `traitgate audit verify` checks both. Append-only, like audit_events.
CREATE TABLE audit_values (
  ref   text PRIMARY KEY CHECK (ref ~ '^[A-Za-z0-9_-]{22}$'),
  value jsonb NOT NULL
);

CREATE TRIGGER audit_values_append_only
  BEFORE UPDATE OR DELETE ON audit_values
  FOR EACH ROW EXECUTE FUNCTION audit_events_refuse_change();

CREATE TRIGGER audit_values_no_truncate
  BEFORE TRUNCATE ON audit_values
  FOR EACH STATEMENT EXECUTE FUNCTION audit_events_refuse_change();

-- audit_append (migration 0015) that also stores the values the batch's events refer to, in
-- the same transaction: an event is never committed without them. A value already stored (by
-- this or any process) is left as it is: its ref is its content. The twelve-argument function
-- stays for a process of the previous release on a shared PostgreSQL.
CREATE FUNCTION audit_append(
  p_ids uuid[],
  p_occurred_at timestamptz[],
  p_actor_type text[],
  p_actor_id text[],
  p_action text[],
  p_target text[],
  p_outcome text[],
  p_request_id text[],
  p_client_address text[],
  p_user_agent text[],
  p_details jsonb[],
  p_canonical text[],
  p_value_refs text[],
  p_values jsonb[]
) RETURNS TABLE (event_id text, event_seq bigint, event_hash text)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF coalesce(array_length(p_value_refs, 1), 0) > 0 THEN
    -- The chain's lock first (audit_append takes it again, which costs nothing): two batches
    -- inserting the same new values in other orders would otherwise wait on each other's
    -- rows until PostgreSQL ended one as a deadlock. The key is src/audit/store.ts's
    -- auditChainLockKey.
    PERFORM pg_advisory_xact_lock(7283431217);
    INSERT INTO audit_values (ref, value)
      SELECT v.ref, v.value FROM unnest(p_value_refs, p_values) AS v(ref, value)
      ORDER BY v.ref
      ON CONFLICT (ref) DO NOTHING;
  END IF;
  RETURN QUERY SELECT * FROM audit_append(p_ids, p_occurred_at, p_actor_type, p_actor_id,
    p_action, p_target, p_outcome, p_request_id, p_client_address, p_user_agent, p_details,
    p_canonical);
END
$$;

-- One index fewer per event: hash needs no unique index. Two events with one hash would have
-- to follow the same event with the same contents (ids are unique), which prev_hash's unique
-- index and the chain's lock already rule out; nothing looks an event up by its hash. Every
-- append wrote an entry at a random place of this index.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_hash_key;
