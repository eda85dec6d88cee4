import { generateSync } from "otplib";
import type { LoadResult } from "./load.js";

/**
 * Login with a TOTP code against login without, on one server: what the
 * second factor adds (a read of the sealed secret, AES-GCM open, the TOTP
 * check over ±1 step, the conditional update that makes the code single-use).
 *
 * A user's code works once per time step, so a closed loop on one user would
 * fail after the first login. Users with MFA are made through the admin API
 * first, and the logins are counted rather than timed: `pairs` logins of each
 * kind, one in flight, alternating without / with, so that both see the same
 * load from the machine's other tenants.
 */

/** POST a JSON body (with a bearer token if given); resolves with the body of a 200. */
/** A POST with a bearer token and, for administrative paths, an X-API-Key. */
export type Post = (path: string, body: string, token?: string, apiKey?: string) => Promise<string>;

interface MfaUser {
  username: string;
  secret: string;
  /** The last TOTP time step used for this user (the server accepts each step once). */
  lastStep: number;
}

const stepOf = (ms: number) => Math.floor(ms / 30_000);
const codeFor = (secret: string, step: number) => generateSync({ secret, epoch: step * 30 });

/** Users with TOTP on: created by `bench-admin`, then log in, enrol, activate. */
async function createMfaUsers(
  post: Post,
  password: string,
  apiKey: string,
  count: number,
  concurrency = 4,
): Promise<MfaUser[]> {
  const admin = JSON.parse(
    await post("/auth/login", JSON.stringify({ username: "bench-admin", password })),
  ) as { token: string };
  const users: MfaUser[] = [];
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const username = `bench-mfa-${next++}`;
      const user = JSON.stringify({ username, password, roles: ["viewer"] });
      await post("/api/admin/users", user, admin.token, apiKey);
      const { token } = JSON.parse(
        await post("/auth/login", JSON.stringify({ username, password })),
      ) as { token: string };
      const { secret } = JSON.parse(await post("/auth/mfa/enroll", "{}", token)) as {
        secret: string;
      };
      // The previous step's code (inside the ±1 step window) leaves the steps
      // now and now + 1 for logins; the current one if the clock just moved on.
      const activate = (step: number) =>
        post("/auth/mfa/activate", JSON.stringify({ code: codeFor(secret, step) }), token).then(
          () => step,
        );
      const lastStep = await activate(stepOf(Date.now()) - 1).catch(() =>
        activate(stepOf(Date.now())),
      );
      users.push({ username, secret, lastStep });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return users;
}

/**
 * Login bodies with a code not used yet: users take turns, each giving the
 * steps now and now + 1, so n users give at least 2n logins.
 */
function mfaLogins(users: MfaUser[], password: string): () => string {
  let cursor = 0;
  return () => {
    const now = stepOf(Date.now());
    for (let tried = 0; tried < users.length; tried++) {
      const user = users[cursor++ % users.length];
      if (!user) break;
      const step = Math.max(user.lastStep + 1, now);
      if (step > now + 1) continue;
      user.lastStep = step;
      const totpCode = codeFor(user.secret, step);
      return JSON.stringify({ username: user.username, password, totp_code: totpCode });
    }
    throw new Error("every MFA user has used its codes for this time step");
  };
}

function summarize(name: string, latencies: number[], errors: number): LoadResult {
  const sorted = Float64Array.from(latencies).sort();
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  const totalSeconds = latencies.reduce((a, b) => a + b, 0) / 1000;
  return {
    name,
    concurrency: 1,
    requests: latencies.length,
    errors,
    rps: latencies.length / totalSeconds,
    p50: at(0.5) ?? Number.NaN,
    p99: at(0.99) ?? Number.NaN,
  };
}

export interface TotpComparison {
  without: LoadResult;
  with: LoadResult;
  /** One line: rates, p50s, the added time and the ratio. */
  summary: string;
}

export async function compareLoginWithTotp(
  post: Post,
  options: {
    loginBody: string;
    password: string;
    /** An API key with `users:write`, for creating the users. */
    apiKey: string;
    pairs: number;
    warmupPairs?: number;
  },
): Promise<TotpComparison> {
  const warmup = options.warmupPairs ?? 5;
  const users = await createMfaUsers(
    post,
    options.password,
    options.apiKey,
    Math.ceil((options.pairs + warmup) / 2) + 4,
  );
  const nextMfaLogin = mfaLogins(users, options.password);
  const times = { without: [] as number[], with: [] as number[] };
  const errors = { without: 0, with: 0 };
  // The body (with its code) is made before the clock starts.
  const timed = async (kind: "without" | "with", body: () => string, record: boolean) => {
    try {
      const text = body();
      const started = performance.now();
      await post("/auth/login", text);
      if (record) times[kind].push(performance.now() - started);
    } catch {
      if (record) errors[kind]++;
    }
  };
  for (let i = 0; i < warmup + options.pairs; i++) {
    const record = i >= warmup;
    await timed("without", () => options.loginBody, record);
    await timed("with", nextMfaLogin, record);
  }
  const without = summarize("login, user without MFA (alternating)", times.without, errors.without);
  const withTotp = summarize(
    "login, user with TOTP (password + code, alternating)",
    times.with,
    errors.with,
  );
  const added = withTotp.p50 - without.p50;
  const summary =
    `login with TOTP vs without (${options.pairs} of each, alternating, 1 in flight): ` +
    `${withTotp.rps.toFixed(1)} vs ${without.rps.toFixed(1)} logins/s ` +
    `(${((withTotp.rps / without.rps) * 100).toFixed(0)}%); p50 ${withTotp.p50.toFixed(2)} vs ` +
    `${without.p50.toFixed(2)} ms (${added >= 0 ? "+" : ""}${added.toFixed(2)} ms, ` +
    `×${(withTotp.p50 / without.p50).toFixed(2)})` +
    (errors.with + errors.without > 0 ? "; ERRORS: figures not valid" : "");
  return { without, with: withTotp, summary };
}
