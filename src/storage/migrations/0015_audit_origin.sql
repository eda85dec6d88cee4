-- Where a request came from (docs/audit.md, "Where a request came from"): the client's
-- address (the TCP peer, or what a trusted proxy says) and its User-Agent, on every event a
-- request caused; both null for the others (the command line, demo mode, checkpoints) and for
-- events written before this migration. The hash chain covers them: src/audit/canonical.ts
-- encodes an event with an origin as version 2, one without as version 1 (unchanged).
ALTER TABLE audit_events
  ADD COLUMN client_address text,
  ADD COLUMN user_agent text;

-- audit_append (migration 0012) with the two columns. The ten-argument function stays, for a
-- process of the previous release still running beside this one on a shared PostgreSQL (its
-- events have no origin); both take the same lock and append to the same chain.
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
        (id, occurred_at, actor_type, actor_id, action, target, outcome, request_id,
         client_address, user_agent, details, prev_hash, hash)
      SELECT u.id, u.occurred_at, u.actor_type, u.actor_id, u.action, u.target, u.outcome,
             u.request_id, u.client_address, u.user_agent, u.details, u.prev_hash, u.hash
        FROM unnest(p_ids, p_occurred_at, p_actor_type, p_actor_id, p_action, p_target,
               p_outcome, p_request_id, p_client_address, p_user_agent, p_details,
               prev_hashes, hashes)
             WITH ORDINALITY AS u(id, occurred_at, actor_type, actor_id, action, target, outcome,
               request_id, client_address, user_agent, details, prev_hash, hash, n)
       -- Rows are inserted, and draw their seq, in chain order.
       ORDER BY u.n
      RETURNING audit_events.id, audit_events.seq, audit_events.hash
    )
    SELECT inserted.id::text, inserted.seq, inserted.hash FROM inserted ORDER BY inserted.seq;
END
$$;
