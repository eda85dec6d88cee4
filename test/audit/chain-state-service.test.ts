import { describe, expect, it } from "vitest";
import type { AuditChainState } from "../../src/audit/chain-state.js";
import type { AuditQuery } from "../../src/audit/query.js";
import { createAuditService } from "../../src/audit/query-service.js";

/** GetAuditChainState answers what it found, whatever a tampered checkpoint row holds. */

const verified: AuditChainState["verification"] = {
  state: "verified",
  start: "genesis",
  startSeq: "0",
  checked: 3,
  unchecked: 0,
};

const stateWith = (checkpoint: AuditChainState["checkpoint"]): AuditChainState => ({
  head: { seq: "4", hash: "h4" },
  checkpoint,
  verification: verified,
});

const service = (state: AuditChainState) => createAuditService({} as AuditQuery, async () => state);

describe("GetAuditChainState", () => {
  it("reports a forged checkpoint with an impossible time or seq as it is, not as a server error", async () => {
    const forged = stateWith({
      eventSeq: "3",
      checkpoint: {
        seq: "99999999999999999999",
        hash: "h2",
        time: "2025-13-45T99:99:99.000Z",
        keyId: "k1",
        signature: "x",
      },
      status: "bad_signature",
      message: "the signature does not verify",
    });
    const answer = await service(forged).getAuditChainState({} as never, {} as never);
    expect(answer.checkpoint).toMatchObject({
      eventSeq: 3n,
      status: "bad_signature",
      signedHash: "h2",
    });
    expect(answer.checkpoint?.signedAt).toBeUndefined();
  });

  it("gives a valid checkpoint's signed head and time", async () => {
    const valid = stateWith({
      eventSeq: "3",
      checkpoint: {
        seq: "2",
        hash: "h2",
        time: "2026-11-27T10:00:00.000Z",
        keyId: "k1",
        signature: "x",
      },
      status: "valid",
      message: "",
    });
    const answer = await service(valid).getAuditChainState({} as never, {} as never);
    expect(answer.checkpoint).toMatchObject({ signedSeq: 2n, status: "valid" });
    expect(answer.checkpoint?.signedAt?.seconds).toBe(
      BigInt(Date.parse("2026-11-27T10:00:00Z") / 1000),
    );
  });
});
