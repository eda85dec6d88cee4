-- Login throttling's counters, shared by every process on one PostgreSQL (docs/identity.md,
-- "Throttling"; src/identity/throttle-postgres.ts). On PGlite the counters live in the
-- process and this table stays empty.
--
-- A row is one counter: its failures within the window and its attempts in flight (reserved
-- by login_throttle_reserve, not yet settled by login_throttle_settle). Its key is a SHA-256
-- of the counter's name, so no username or address is stored in clear. Times are
-- milliseconds since the epoch by the clock of the process that wrote them.
--
-- UNLOGGED: the counters are soft state that a login writes twice, and a logged table made
-- each write wait for a WAL flush (about 10 ms each on the project's machine under load,
-- +15 % on a login). The price: PostgreSQL empties the table after a crash, and standbys do
-- not have it, so after a crash or a failover the counters start again from zero.
CREATE UNLOGGED TABLE login_throttle (
  key       text PRIMARY KEY,
  failures  integer NOT NULL DEFAULT 0,
  in_flight integer NOT NULL DEFAULT 0,
  last_ms   bigint NOT NULL
);

-- Reserves one attempt on the counters p_keys, taken in the order given: every caller gives
-- the same order of kinds (address, pair, account), so two reservations, or a reservation
-- and a settlement, never wait for each other in a cycle. Counter i at count
-- n = failures + in_flight (0 once p_window_ms has passed since last_ms) waits, after last_ms,
--   0                                                  if n = 0 or n < p_free[i]
--   p_window_ms                                        if p_block_at[i] > 0, n >= p_block_at[i]
--   least(p_max_ms[i], p_base_ms[i] * 2^least(30, n - p_free[i]))   otherwise
-- (waitMs in src/identity/throttle-store.ts: change both together). A refusing counter
-- (p_refuses[i]) that must still wait refuses the attempt: retry_after_ms is the longest wait
-- left of any refusing counter, counts is null and nothing is counted; counters after the
-- first that refuses are only read (a refused attempt creates no rows). Otherwise
-- retry_after_ms is 0, every counter counts the attempt in flight, and counts holds each
-- one's n before it. One statement, one transaction: atomic for every process.
CREATE FUNCTION login_throttle_reserve(
  p_keys text[],
  p_free integer[],
  p_base_ms bigint[],
  p_max_ms bigint[],
  p_block_at integer[],
  p_refuses boolean[],
  p_window_ms bigint,
  p_now_ms bigint,
  OUT retry_after_ms bigint,
  OUT counts integer[]
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  entry login_throttle;
  n integer;
  wait bigint;
BEGIN
  retry_after_ms := 0;
  counts := '{}';
  FOR i IN 1 .. cardinality(p_keys) LOOP
    IF retry_after_ms = 0 THEN
      -- Creates the counter or locks it until the transaction ends.
      INSERT INTO login_throttle AS t (key, last_ms) VALUES (p_keys[i], p_now_ms)
        ON CONFLICT (key) DO UPDATE SET last_ms = t.last_ms
        RETURNING t.* INTO entry;
    ELSIF p_refuses[i] THEN
      SELECT * INTO entry FROM login_throttle WHERE key = p_keys[i];
      CONTINUE WHEN NOT FOUND;
    ELSE
      CONTINUE;
    END IF;
    n := CASE WHEN p_now_ms - entry.last_ms >= p_window_ms THEN 0
              ELSE entry.failures + entry.in_flight END;
    IF p_refuses[i] AND n > 0 AND n >= p_free[i] THEN
      wait := CASE WHEN p_block_at[i] > 0 AND n >= p_block_at[i] THEN p_window_ms
                   ELSE least(p_max_ms[i],
                              p_base_ms[i] * power(2, least(30, n - p_free[i]))::bigint) END;
      retry_after_ms := greatest(retry_after_ms, entry.last_ms + wait - p_now_ms);
    END IF;
    counts := counts || n;
  END LOOP;
  IF retry_after_ms > 0 THEN
    counts := NULL;
    RETURN;
  END IF;
  -- Every row is locked by now: one statement counts the attempt on all of them.
  UPDATE login_throttle SET
    failures  = CASE WHEN p_now_ms - last_ms >= p_window_ms THEN 0 ELSE failures END,
    in_flight = CASE WHEN p_now_ms - last_ms >= p_window_ms THEN 0 ELSE in_flight END + 1,
    last_ms   = greatest(last_ms, p_now_ms)
  WHERE key = ANY (p_keys);
END $$;

-- Ends a reserved attempt on its counters, in the reservation's order: no longer in flight;
-- a failure is counted (and restarts the wait), a success clears the counters marked in
-- p_clear (the account-and-address pair).
CREATE FUNCTION login_throttle_settle(
  p_keys text[],
  p_clear boolean[],
  p_failed boolean,
  p_now_ms bigint
) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  FOR i IN 1 .. cardinality(p_keys) LOOP
    UPDATE login_throttle SET
      in_flight = greatest(in_flight - 1, 0),
      failures  = CASE WHEN p_failed THEN failures + 1 WHEN p_clear[i] THEN 0 ELSE failures END,
      last_ms   = CASE WHEN p_failed THEN greatest(last_ms, p_now_ms) ELSE last_ms END
    WHERE key = p_keys[i];
  END LOOP;
END $$;
