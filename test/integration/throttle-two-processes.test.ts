import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultThrottlePolicy } from "../../src/identity/throttle.js";
import { silentLogger } from "../../src/log.js";
import { type Database, migrate } from "../../src/storage/index.js";
import { killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import {
  openTestPostgres,
  postgresUrlFor,
  schemaConnection,
  testSchemaName,
} from "../support/database.js";
import { type AddressedReply, postFrom, tally } from "../support/from-address.js";

/**
 * Two `traitgate serve` processes on one PostgreSQL database behave as one system for login
 * throttling: an attacker sending to both gets the documented number of attempts once, not
 * once per process. The servers run the default policy (1 s, 2 s, ... after the free
 * attempts); to make the attempts really simultaneous, the test holds a lock on the counters'
 * table until every attempt waits for it, then lets them all go at once.
 */

const url = postgresUrlFor("throttle two processes");
const password = "two-processes-victim-pw";
const { address, pair } = defaultThrottlePolicy;
// Connections of each server's pool (src/storage/index.ts): attempts beyond them wait in the
// pool, not for the lock.
const poolSize = 10;

describe.skipIf(!url)("login throttling across two serve processes", { timeout: 180_000 }, () => {
  let db: Database;
  let servers: { child: Awaited<ReturnType<typeof startCli>>["child"]; url: string }[] = [];

  beforeAll(async () => {
    const base = url ?? "";
    const schema = testSchemaName();
    db = await openTestPostgres(base, schema);
    await migrate(db, silentLogger);
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DB_CONNECTION: schemaConnection(base, schema),
      JWT_SECRET: "two-processes-secret-0123456789-abcdef",
      DATA_ENCRYPTION_KEY: Buffer.alloc(32, 9).toString("base64"),
      PORT: "0",
      HOST: "127.0.0.1",
      // The test holds the counters' table locked until every attempt waits for it, and the
      // attempts beyond a pool's connections wait for one: on a loaded machine that takes
      // longer than the default bounds (2 s a statement, 1 s for a connection), which would
      // answer 503 DATABASE_UNAVAILABLE instead of the throttle's verdict.
      DB_STATEMENT_TIMEOUT_MS: "60000",
      DB_ACQUIRE_TIMEOUT_MS: "60000",
    };
    const created = await runCli(["users", "create", "--username", "victim"], {
      ...env,
      TRAITGATE_PASSWORD: password,
    });
    expect(created.code, created.stderr).toBe(0);
    const started = await Promise.all([
      startCli(["serve"], env, /traitgate listening/),
      startCli(["serve"], env, /traitgate listening/),
    ]);
    servers = started.map(({ child, output }) => ({ child, url: listeningUrl(output()) }));
  });
  afterAll(async () => {
    for (const s of servers) await stopCli(s.child);
    killAll();
    await db?.close();
  });

  /**
   * Sends `bodies` to the two servers in turn from `from`, all while the counters' table is
   * locked; lets go once every attempt that can reach the database waits for the lock.
   */
  async function atOnce(from: string, bodies: unknown[]): Promise<AddressedReply[]> {
    const onA = Math.ceil(bodies.length / 2);
    const waiting = Math.min(onA, poolSize) + Math.min(bodies.length - onA, poolSize);
    const pending = await db.transaction(async (tx) => {
      await tx.query("LOCK TABLE login_throttle IN EXCLUSIVE MODE");
      const replies = bodies.map((body, i) =>
        postFrom(from, servers[i % 2]?.url ?? "", "/auth/login", body),
      );
      const deadline = Date.now() + 60_000;
      for (;;) {
        const { rows } = await tx.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks
           WHERE relation = 'login_throttle'::regclass AND NOT granted`,
        );
        if (rows[0]?.n === waiting) break;
        if (Date.now() > deadline) throw new Error(`${rows[0]?.n} of ${waiting} attempts waited`);
        await sleep(20);
      }
      return replies;
    });
    return Promise.all(pending);
  }

  it(`checks ${pair.free} of ${pair.free + 20} wrong passwords for one account from one address, sent to both`, async () => {
    const replies = await atOnce(
      "127.0.0.2",
      Array.from({ length: pair.free + 20 }, (_, i) => ({
        username: "victim",
        password: `wrong-${i}`,
      })),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_CREDENTIALS": pair.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
  });

  it(`checks ${address.free} of ${address.free + 20} wrong logins for as many accounts from one address, sent to both`, async () => {
    const replies = await atOnce(
      "127.0.0.3",
      Array.from({ length: address.free + 20 }, (_, i) => ({
        username: `nobody-${i}`,
        password: "wrong-password",
      })),
    );
    expect(tally(replies)).toEqual({
      "401:INVALID_CREDENTIALS": address.free,
      "429:TOO_MANY_ATTEMPTS": 20,
    });
  });

  it("lets the victim in from an address of its own, on either server", async () => {
    for (const s of servers) {
      const reply = await postFrom("127.0.0.4", s.url, "/auth/login", {
        username: "victim",
        password,
      });
      expect(reply.status).toBe(200);
    }
  });
});
