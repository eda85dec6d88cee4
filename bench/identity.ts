import { type ChildProcess, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Agent, request } from "node:http";
import { join } from "node:path";
import pg from "pg";
import { startChild } from "./children.js";
import { grpcFrame, rawGrpcClient } from "./grpc-client.js";
import { compareLoginWithTotp } from "./identity-mfa.js";
import { onInterrupt, temporaryDir } from "./interrupt.js";
import {
  type CpuSampler,
  commandCpuMs,
  formatResults,
  type LoadResult,
  processCpuMs,
  runLoad,
} from "./load.js";

/**
 * Validate over REST and gRPC against the framework floor: GetJwks, a public
 * method with an (almost) empty handler that passes the same listener,
 * transcoder and interceptors. The server runs in its own process (`traitgate
 * serve` on the embedded database), the load generator in this one. Login
 * with a TOTP code is measured against login without, on the same server.
 */

const cli = join(import.meta.dirname, "../src/cli.js");
const password = "bench-password-long-enough";

async function startServer(
  extraEnv: NodeJS.ProcessEnv,
): Promise<{ url: string; child: ChildProcess; removeDir: () => void; apiKey: string }> {
  const { dir, remove: removeDir } = temporaryDir("traitgate-bench-");
  const env = {
    ...process.env,
    ...extraEnv,
    DATA_DIR: dir,
    JWT_SECRET: randomBytes(32).toString("base64url"),
    DATA_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    TRAITGATE_PASSWORD: password,
  };
  for (const [username, role] of [
    ["bench", "viewer"],
    ["bench-admin", "admin"],
  ] as const) {
    execFileSync(
      process.execPath,
      [cli, "users", "create", "--username", username, "--role", role],
      {
        env,
        stdio: ["ignore", "ignore", "inherit"],
      },
    );
  }
  // User administration takes an admin's token and an API key with users:write.
  const apiKey = execFileSync(
    process.execPath,
    [cli, "apikeys", "create", "--name", "bench", "--scope", "users:write"],
    { env, stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" },
  ).trim();
  // Started as the other benchmarks start their servers (bench/children.ts): once it is
  // listening, the access line of every call is only kept, not searched again.
  const coreArgs = (process.env.BENCH_CORE_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const server = await startChild(
    process.execPath,
    [...coreArgs, cli, "serve"],
    env,
    /"url":"([^"]+)"[^\n]*"msg":"traitgate listening"/,
  );
  const url = server.match?.[1];
  if (url === undefined) throw new Error("the server did not say where it listens");
  const child = server.child;
  return { url, child, removeDir, apiKey };
}

function httpGetter(url: string, concurrency: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const { hostname, port } = new URL(url);
  return (path: string, headers: Record<string, string> = {}) =>
    new Promise<void>((resolve, reject) => {
      const req = request({ hostname, port, path, agent, headers }, (res) => {
        res.resume();
        res.once("end", () =>
          res.statusCode === 200 ? resolve() : reject(new Error(`${res.statusCode}`)),
        );
      });
      req.once("error", reject);
      req.end();
    });
}

/** gRPC calls with an empty request message; the answer checked by its first bytes. */
function grpcCaller(url: string) {
  const client = rawGrpcClient(url);
  const emptyMessage = grpcFrame(new Uint8Array(0));
  return async (path: string, headers: Record<string, string> = {}, expectPrefix?: Buffer) => {
    const answer = await client.call(path, emptyMessage, headers);
    if (expectPrefix && !answer.subarray(0, expectPrefix.length).equals(expectPrefix)) {
      throw new Error("unexpected answer");
    }
  };
}

function httpPost(url: string) {
  const agent = new Agent({ keepAlive: true, maxSockets: 16 });
  const { hostname, port } = new URL(url);
  return (path: string, body: string, token?: string, apiKey?: string) =>
    new Promise<string>((resolve, reject) => {
      const req = request(
        {
          hostname,
          port,
          path,
          agent,
          method: "POST",
          headers: {
            "content-type": "application/json",
            ...(token ? { authorization: `Bearer ${token}` } : {}),
            ...(apiKey ? { "x-api-key": apiKey } : {}),
          },
        },
        (res) => {
          let data = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => {
            data += c;
          });
          res.once("end", () =>
            res.statusCode === 200 ? resolve(data) : reject(new Error(`${res.statusCode}`)),
          );
        },
      );
      req.once("error", reject);
      req.end(body);
    });
}

/**
 * Logins of `count` users made through the admin API, taken in turns: each call logs in a
 * user not logging in at the moment (with at most `count` in flight, there always is one).
 */
async function loginTurns(
  post: ReturnType<typeof httpPost>,
  password: string,
  count: number,
  apiKey: string,
): Promise<() => Promise<unknown>> {
  const admin = JSON.parse(
    await post("/auth/login", JSON.stringify({ username: "bench-admin", password })),
  ) as { token: string };
  const idle: string[] = [];
  for (let i = 0; i < count; i++) {
    const username = `bench-login-${i}`;
    const user = JSON.stringify({ username, password, roles: ["viewer"] });
    await post("/api/admin/users", user, admin.token, apiKey);
    idle.push(JSON.stringify({ username, password }));
  }
  return async () => {
    const body = idle.pop();
    if (body === undefined) throw new Error("more logins in flight than users");
    try {
      return await post("/auth/login", body);
    } finally {
      idle.push(body);
    }
  };
}

/**
 * The identity benchmark on the embedded database, then on PostgreSQL (a
 * database created for the run and dropped after) when one is reachable:
 * PGlite runs its queries on the server's event loop, PostgreSQL does not.
 */
export async function benchIdentity(seconds: number): Promise<string> {
  const sections = [await benchIdentityOn("embedded PGlite", {}, seconds)];
  const adminUrl = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
  const admin = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
  const database = `tg_bench_${randomBytes(4).toString("hex")}`;
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE ${database}`);
  } catch (err) {
    await admin.end().catch(() => undefined);
    sections.push(`(PostgreSQL at ${adminUrl} not reachable, skipped: ${(err as Error).message})`);
    return sections.join("\n\n");
  }
  const forget = onInterrupt(() => admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
  try {
    const url = new URL(adminUrl);
    url.pathname = `/${database}`;
    sections.push(await benchIdentityOn("PostgreSQL", { DB_CONNECTION: url.toString() }, seconds));
  } finally {
    forget();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
  return sections.join("\n\n");
}

async function benchIdentityOn(
  label: string,
  extraEnv: NodeJS.ProcessEnv,
  seconds: number,
): Promise<string> {
  const { url, child, removeDir, apiKey } = await startServer(extraEnv);
  try {
    const post = httpPost(url);
    const loginBody = JSON.stringify({ username: "bench", password });
    const { token } = JSON.parse(await post("/auth/login", loginBody)) as { token: string };
    const auth = { authorization: `Bearer ${token}` };
    const grpc = grpcCaller(url);
    const service = "/traitgate.identity.v1.IdentityService";
    // ValidateResponse with valid = true starts with field 1, varint 1.
    const validTrue = Buffer.from([0x08, 0x01]);
    const results: LoadResult[] = [];
    // CPU per request of the load generator, the server and PostgreSQL (when it is used).
    const serverPid = child.pid ?? -1;
    const cpu: CpuSampler = () => {
      const self = process.cpuUsage();
      return {
        client: (self.user + self.system) / 1000,
        server: processCpuMs(serverPid),
        ...(extraEnv.DB_CONNECTION ? { postgres: commandCpuMs("postgres") } : {}),
      };
    };
    for (const concurrency of [1, 64]) {
      const get = httpGetter(url, concurrency);
      const opts = { concurrency, seconds, cpu };
      results.push(
        await runLoad(
          "REST floor (GET /.well-known/jwks.json)",
          () => get("/.well-known/jwks.json"),
          opts,
        ),
      );
      results.push(
        await runLoad(
          "REST validate (GET /auth/validate)",
          () => get("/auth/validate", auth),
          opts,
        ),
      );
      results.push(await runLoad("gRPC floor (GetJwks)", () => grpc(`${service}/GetJwks`), opts));
      results.push(
        await runLoad("gRPC validate", () => grpc(`${service}/Validate`, auth, validTrue), opts),
      );
    }
    results.push(
      await runLoad("login (argon2id)", () => post("/auth/login", loginBody), {
        concurrency: 1,
        seconds,
      }),
    );
    const totp = await compareLoginWithTotp(post, {
      loginBody,
      password,
      apiKey,
      pairs: Math.max(20, Math.round(seconds * 30)),
    });
    results.push(totp.without, totp.with);

    const get = httpGetter(url, 1);
    // Eight users, one login each in flight: the throttle counts logins in flight, and refuses
    // more than three at once of one account from one address (docs/identity.md).
    const nextLogin = await loginTurns(post, password, 8, apiKey);
    const [underLoad, logins] = await Promise.all([
      runLoad("REST validate while 8 logins run", () => get("/auth/validate", auth), {
        concurrency: 1,
        seconds,
      }),
      runLoad("login, 8 at once (8 users)", nextLogin, {
        concurrency: 8,
        seconds,
      }),
    ]);
    results.push(underLoad, logins);

    const ratio = (a: string, b: string, c: number) => {
      const x = results.find((r) => r.name.startsWith(a) && r.concurrency === c);
      const y = results.find((r) => r.name.startsWith(b) && r.concurrency === c);
      return x && y ? `${((x.rps / y.rps) * 100).toFixed(0)}%` : "n/a";
    };
    const summary = [1, 64].map(
      (c) =>
        `- ${c} in flight: REST validate = ${ratio("REST validate (", "REST floor", c)} of floor; gRPC validate = ${ratio("gRPC validate", "gRPC floor", c)} of floor`,
    );
    return [
      `## Identity on ${label}: validate vs the framework floor`,
      "",
      formatResults(results),
      "",
      ...summary,
      `- validate p99 while 8 logins run: ${underLoad.p99.toFixed(2)} ms (target ≤ 10 ms)`,
      `- ${totp.summary}`,
    ].join("\n");
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    removeDir();
  }
}
