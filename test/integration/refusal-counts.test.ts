import { describe, expect, it } from "vitest";
import { databaseTargets, openTestDatabase } from "../support/database.js";
import { startTestServer } from "../support/server.js";

/**
 * Refused calls without a valid token are sampled per client address (src/audit/
 * refused-calls.ts), but every one of them is counted: the events' details.count add up to the
 * number of refused calls once the server has shut down (the pending count is written then).
 */
describe.each(databaseTargets())("counting sampled refusals on $name", (target) => {
  it("40 parallel calls with bad tokens from one address: at most 21 events, counts summing to 40 (and 25 gateway calls)", async () => {
    const db = await openTestDatabase(target);
    try {
      const server = await startTestServer({ db });
      const statuses = await Promise.all(
        Array.from({ length: 40 }, async (_, i) => {
          const res = await fetch(`${server.url}/api/admin/users`, {
            headers: { authorization: `Bearer not-a-token-${i}` },
          });
          await res.arrayBuffer();
          return res.status;
        }),
      );
      expect(statuses).toEqual(Array.from({ length: 40 }, () => 401));
      // Gateway calls refused before authentication are sampled the same way (operator_call).
      const gatewayStatuses = await Promise.all(
        Array.from({ length: 25 }, async () => {
          const res = await fetch(`${server.url}/gateway/echo/rag_query`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ caller_plugin: "ai-core", payload: {} }),
          });
          await res.arrayBuffer();
          return res.status;
        }),
      );
      expect(gatewayStatuses).toEqual(Array.from({ length: 25 }, () => 401));
      await server.core.close();

      const { rows } = await db.query<{ details: { count?: unknown; client_address?: string } }>(
        "SELECT details FROM audit_events WHERE action = 'access_denied' ORDER BY seq",
      );
      // Sampling still bounds the log: 20 events of their own and one count of the rest.
      expect(rows.length).toBeGreaterThan(1);
      expect(rows.length).toBeLessThanOrEqual(21);
      expect(rows.every((row) => row.details.client_address === "127.0.0.1")).toBe(true);
      const total = rows.reduce(
        (sum, row) => sum + (typeof row.details.count === "number" ? row.details.count : 0),
        0,
      );
      expect(total).toBe(40);

      const calls = await db.query<{ target: string | null; details: { count?: unknown } }>(
        "SELECT target, details FROM audit_events WHERE action = 'operator_call' ORDER BY seq",
      );
      expect(calls.rows.length).toBeLessThanOrEqual(21);
      expect(calls.rows.every((row) => row.target === "plugin:echo")).toBe(true);
      expect(calls.rows.reduce((sum, row) => sum + Number(row.details.count), 0)).toBe(25);
    } finally {
      await db.close();
    }
  });
});
