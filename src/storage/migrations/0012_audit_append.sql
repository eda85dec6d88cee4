-- One statement appends a batch to the audit chain (src/audit/store.ts): the writer's group
-- commit used to take five round trips (BEGIN, the chain's advisory lock, the newest hash,
-- INSERT, COMMIT); this function does the same work in one, as its own transaction.
--
-- hash = sha256_hex(prev_hash || '\n' || canonical), where canonical is the event's
-- canonical encoding computed by src/audit/canonical.ts (UTF-8); `traitgate audit verify`
-- recomputes every hash in JavaScript from the stored fields, so the two must agree.
--
-- The function is VOLATILE: under READ COMMITTED each statement in it takes a new snapshot,
-- so the SELECT after the lock sees the commit of the previous holder of the lock.
CREATE FUNCTION audit_append(
  p_ids uuid[],
  p_occurred_at timestamptz[],
  p_actor_type text[],
  p_actor_id text[],
  p_action text[],
  p_target text[],
  p_outcome text[],
  p_request_id text[],
  p_details jsonb[],
  p_canonical text[]
) RETURNS TABLE (event_id text, event_seq bigint, event_hash text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  previous text;
  prev_hashes text[] := '{}';
  hashes text[] := '{}';
  n integer := coalesce(array_length(p_ids, 1), 0);
BEGIN
  -- The key is src/audit/store.ts's auditChainLockKey; change both together.
  PERFORM pg_advisory_xact_lock(7283431217);
  SELECT e.hash INTO previous FROM audit_events e ORDER BY e.seq DESC LIMIT 1;
  previous := coalesce(previous, repeat('0', 64));
  FOR i IN 1 .. n LOOP
    prev_hashes[i] := previous;
    previous := encode(sha256(convert_to(previous || E'\n' || p_canonical[i], 'UTF8')), 'hex');
    hashes[i] := previous;
  END LOOP;
  RETURN QUERY
    WITH inserted AS (
      INSERT INTO audit_events
        (id, occurred_at, actor_type, actor_id, action, target, outcome, request_id, details,
         prev_hash, hash)
      SELECT u.id, u.occurred_at, u.actor_type, u.actor_id, u.action, u.target, u.outcome,
             u.request_id, u.details, u.prev_hash, u.hash
        FROM unnest(p_ids, p_occurred_at, p_actor_type, p_actor_id, p_action, p_target,
               p_outcome, p_request_id, p_details, prev_hashes, hashes)
             WITH ORDINALITY AS u(id, occurred_at, actor_type, actor_id, action, target, outcome,
               request_id, details, prev_hash, hash, n)
       -- Rows are inserted, and draw their seq, in chain order.
       ORDER BY u.n
      RETURNING audit_events.id, audit_events.seq, audit_events.hash
    )
    SELECT inserted.id::text, inserted.seq, inserted.hash FROM inserted ORDER BY inserted.seq;
END
$$;
