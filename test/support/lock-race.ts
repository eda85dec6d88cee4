import type { Database } from "../../src/storage/index.js";

/**
 * Makes child processes really compete for an advisory lock: holds `lockKey`,
 * starts the children, waits until every one of them (seen by `appName`, their
 * connection's application_name) is blocked on it, then lets go and returns
 * their results.
 */
export async function raceForAdvisoryLock<T>(
  db: Database,
  lockKey: bigint | number,
  appName: string,
  start: () => Promise<T>[],
  timeoutMs = 30_000,
): Promise<T[]> {
  return db.session(async (session) => {
    await session.query(`SELECT pg_advisory_lock(${lockKey})`);
    const children = start();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { rows } = await session.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
         WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1`,
        [appName],
      );
      if (rows[0]?.n === children.length) break;
      if (Date.now() > deadline) throw new Error("the children never waited for the lock");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await session.query(`SELECT pg_advisory_unlock(${lockKey})`);
    return Promise.all(children);
  });
}
