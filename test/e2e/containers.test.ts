import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { parseCommandLine } from "../../src/cli-usage.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { loadRagConfig } from "../../src/rag/config.js";
import { cliScript, killAll, listeningUrl, runCli, startCli, stopCli } from "../support/cli.js";
import {
  all,
  envOf,
  execForm,
  healthcheckOf,
  parseDockerfile,
  type Stage,
} from "../support/dockerfile.js";

/**
 * The container files (Dockerfile, rag-plugin.Dockerfile, compose.yaml, .env.example;
 * docs/containers.md) are never built here: there is no Docker engine on CI. This suite keeps
 * them honest without one: every command they run is one the repository has and that runs
 * (the CMD and the HEALTHCHECK are run for real against `serve` and `rag-plugin`), every
 * variable they set is one the configuration reads, ports and probes agree, the runtime
 * stages run as an unprivileged user, what runs at run time is a production dependency, and
 * the steps after start (scripts/setup-rag.mjs) work against a real core and plugin.
 */

const root = fileURLToPath(new URL("../..", import.meta.url));
const read = (file: string) => readFileSync(join(root, file), "utf8");
const packageJson = JSON.parse(read("package.json")) as {
  scripts: Record<string, string>;
  bin: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

const images = [
  { file: "Dockerfile", service: "core", command: "serve", config: "core" },
  { file: "rag-plugin.Dockerfile", service: "rag-plugin", command: "rag-plugin", config: "rag" },
] as const;

interface ComposeService {
  image?: string;
  build?: { context: string; dockerfile: string };
  environment?: Record<string, string>;
  ports?: string[];
  expose?: string[];
  healthcheck?: { test: string[] };
  profiles?: string[];
}
const composeText = read("compose.yaml");
const compose = parseYaml(composeText) as { services: Record<string, ComposeService> };

/** Compose's interpolation: ${X}, ${X:-default}, ${X:?message} (an unset X is an error). */
function interpolate(value: string, vars: Record<string, string>): string {
  return value.replace(/\$\{([A-Z0-9_]+)(?::([-?])([^}]*))?\}/g, (_, name, kind, rest) => {
    const set = vars[name];
    if (set !== undefined && set !== "") return set;
    if (kind === "?") throw new Error(`${name}: ${rest}`);
    return kind === "-" ? rest : "";
  });
}

const referencedVariables = [...composeText.matchAll(/\$\{([A-Z0-9_]+)/g)].map((m) => m[1]);

/** KEY=VALUE lines of an env file (comments and blank lines skipped). */
function envFile(text: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const match = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (match) vars[match[1] as string] = match[2] as string;
  }
  return vars;
}

/** A .env as a user would write it, with fresh random secrets. */
const goodDotEnv = () => ({
  JWT_SECRET: randomBytes(48).toString("base64"),
  DATA_ENCRYPTION_KEY: randomBytes(32).toString("base64"),
  POSTGRES_PASSWORD: randomBytes(24).toString("hex"),
  RAG_DB_PASSWORD: randomBytes(24).toString("hex"),
  CORE_SECRET: `tgc_${randomBytes(32).toString("base64url")}`,
});

/** The environment a container gets: the image's ENV, then compose's `environment`. */
function containerEnv(stage: Stage, service: ComposeService, vars: Record<string, string>) {
  const env: Record<string, string> = { ...envOf(stage) };
  for (const [key, value] of Object.entries(service.environment ?? {})) {
    env[key] = interpolate(String(value), vars);
  }
  return env;
}

/** Runs a configuration loader on `env`, recording every variable it reads. */
function readsOf(load: (env: NodeJS.ProcessEnv) => unknown, env: Record<string, string>) {
  const read = new Set<string>();
  const proxy = new Proxy(env, {
    get(target, key) {
      if (typeof key === "string") read.add(key);
      return target[key as string];
    },
  });
  load(proxy);
  return read;
}

const loaders = {
  core: (env: NodeJS.ProcessEnv) => loadConfig(env),
  rag: (env: NodeJS.ProcessEnv) => loadRagConfig(env),
};

const runtimeOf = (file: string) => {
  const stages = parseDockerfile(read(file));
  return { stages, runtime: stages.at(-1) as Stage };
};

describe.each(images)("$file", ({ file, service: serviceName, command, config }) => {
  const { stages, runtime } = runtimeOf(file);
  const service = compose.services[serviceName] as ComposeService;

  it("is multi-stage: npm ci and npm run build, then production dependencies only", () => {
    expect(stages.map((s) => s.name)).toEqual(["build", "runtime"]);
    const runs = (stage: Stage) => all(stage, "RUN").flatMap((r) => r.args.split("&&"));
    const build = stages[0] as Stage;
    expect(runs(build).map((r) => r.trim())).toEqual([
      "npm ci --no-audit --no-fund",
      "npm run build",
    ]);
    expect(runs(runtime).map((r) => r.trim())).toEqual(["npm ci --omit=dev --no-audit --no-fund"]);
    // The compiled output comes from the build stage; no dev tool is in the runtime image.
    expect(all(runtime, "COPY").map((c) => c.args)).toContain("--from=build /app/dist ./dist");
    expect(stages.every((s) => s.image === runtime.image)).toBe(true);
    expect(runtime.image).toMatch(/^node:20\b/);
  });

  it("runs only commands the repository has", () => {
    for (const stage of stages) {
      for (const step of all(stage, "RUN").flatMap((r) => r.args.split("&&"))) {
        const words = step.trim().split(/\s+/);
        if (words[0] === "npm" && words[1] === "ci") {
          // Every option is one npm ci takes; the lock file is copied beside package.json.
          expect(words.slice(2).every((w) => /^--(omit=dev|no-audit|no-fund)$/.test(w))).toBe(true);
          continue;
        }
        expect(words.slice(0, 2)).toEqual(["npm", "run"]);
        expect(Object.keys(packageJson.scripts)).toContain(words[2]);
      }
    }
    const cmd = execForm(all(runtime, "CMD")[0]?.args ?? "");
    expect(cmd.slice(0, 2)).toEqual(["node", packageJson.bin.traitgate]);
    expect(existsSync(join(root, "src", "cli.ts"))).toBe(true);
    expect(parseCommandLine(cmd.slice(2))).toEqual({ kind: "run", command, args: [] });
    // The probe is a file of the repository, copied into the runtime image.
    const probe = healthcheckOf(runtime).argv;
    expect(probe[0]).toBe("node");
    expect(existsSync(join(root, probe[1] ?? ""))).toBe(true);
    expect(all(runtime, "COPY").some((c) => c.args.split(/\s+/).includes(probe[1] ?? ""))).toBe(
      true,
    );
    expect(["/healthz", "/readyz"]).toContain(probe[2]);
    // Every file the runtime stage copies from the context exists.
    for (const copy of all(runtime, "COPY").filter((c) => !c.args.startsWith("--from"))) {
      const sources = copy.args.split(/\s+/).slice(0, -1);
      for (const source of sources) expect(existsSync(join(root, source)), source).toBe(true);
    }
  });

  it("runs as an unprivileged user in the runtime stage", () => {
    const users = all(runtime, "USER").map((u) => u.args.trim());
    expect(users.length).toBeGreaterThan(0);
    const last = users.at(-1) ?? "";
    expect(["root", "0", "0:0"]).not.toContain(last);
    expect(last.split(":")[0]).not.toBe("0");
    // CMD and HEALTHCHECK come after USER, so they run as that user.
    const order = runtime.instructions.map((i) => i.keyword);
    expect(order.lastIndexOf("USER")).toBeLessThan(order.indexOf("CMD"));
  });

  it("sets only variables the configuration reads, and everything it requires", () => {
    const env = containerEnv(runtime, service, goodDotEnv());
    const read = readsOf(loaders[config], env);
    for (const key of Object.keys(env))
      expect(read, `${key} is read by the ${config}`).toContain(key);
    // No secret is baked into the image.
    for (const secret of ["JWT_SECRET", "DATA_ENCRYPTION_KEY", "CORE_SECRET", "DB_CONNECTION"]) {
      expect(Object.keys(envOf(runtime))).not.toContain(secret);
    }
    expect(read.has("DB_CONNECTION")).toBe(true);
  });

  it("agrees on the port and the health check with compose and the configuration's default", () => {
    const env = envOf(runtime);
    const exposed = all(runtime, "EXPOSE").map((e) => e.args.trim());
    const defaultPort = String(
      config === "core" ? loadConfig(goodDotEnv()).config.port : loadRagConfig(goodDotEnv()).port,
    );
    expect(defaultPort).toBe("8080");
    expect(exposed).toEqual([defaultPort]);
    expect(env.PORT).toBe(defaultPort);
    expect(service.environment?.PORT).toBe(defaultPort);
    expect(service.build).toEqual({ context: ".", dockerfile: file });
    expect(service.healthcheck?.test).toEqual(["CMD", ...healthcheckOf(runtime).argv]);
    if (serviceName === "core") expect(service.ports).toEqual([`127.0.0.1:8080:${defaultPort}`]);
    else expect(service.expose).toEqual([defaultPort]);
  });

  it("starts with its CMD and passes its HEALTHCHECK, run as the Dockerfile says", async () => {
    const dataDir = tempDir();
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ...containerEnv(runtime, service, goodDotEnv()),
      // Here: the embedded database in a temporary folder, port 0, this machine only.
      DATA_DIR: dataDir,
      PORT: "0",
      HOST: "127.0.0.1",
    };
    delete (env as Record<string, string>).DB_CONNECTION;
    const args = execForm(all(runtime, "CMD")[0]?.args ?? "").slice(2);
    const { child, output } = await startCli(args, env, /listening/);
    try {
      const port = new URL(listenedOn(output())).port;
      const probe = healthcheckOf(runtime).argv;
      expect(await run(probe, { PORT: port })).toBe(0);
      expect(await run([probe[0] ?? "", probe[1] ?? "", "/healthz"], { PORT: port })).toBe(0);
    } finally {
      expect(await stopCli(child)).toBe(0);
    }
    // Nothing listening: the probe fails.
    expect(await run(healthcheckOf(runtime).argv, { PORT: await freePort() })).toBe(1);
  });
});

describe("compose.yaml and .env.example", () => {
  it("wires PostgreSQL with pgvector, the core and the plugin", () => {
    const postgres = compose.services.postgres as ComposeService;
    expect(postgres.image).toBe("pgvector/pgvector:pg17");
    const core = compose.services.core as ComposeService;
    const plugin = compose.services["rag-plugin"] as ComposeService;
    const vars = goodDotEnv();
    const coreDb = new URL(interpolate(core.environment?.DB_CONNECTION ?? "", vars));
    const pluginDb = new URL(interpolate(plugin.environment?.DB_CONNECTION ?? "", vars));
    // Both on the postgres service; the plugin in a database and role of its own.
    expect([coreDb.hostname, pluginDb.hostname]).toEqual(["postgres", "postgres"]);
    expect(coreDb.pathname).toBe(
      `/${interpolate(String(postgres.environment?.POSTGRES_DB), vars)}`,
    );
    expect(decodeURIComponent(coreDb.password)).toBe(vars.POSTGRES_PASSWORD);
    expect(pluginDb.pathname).toBe("/rag");
    expect(decodeURIComponent(pluginDb.password)).toBe(vars.RAG_DB_PASSWORD);
    const init = read("deploy/postgres-init/10-rag-database.sh");
    expect(init).toContain("CREATE DATABASE rag OWNER rag");
    expect(init).toContain("CREATE EXTENSION vector");
    // The core may reach the plugin by its compose name; the setup script registers that name.
    expect(core.environment?.PLUGIN_ALLOWED_HOSTS?.split(",")).toContain("rag-plugin");
    const setup = read("scripts/setup-rag.mjs");
    expect(setup).toContain('"plugin-host": { type: "string", default: "rag-plugin" }');
    expect(setup).toContain('"plugin-port": { type: "string", default: "8080" }');
    // The plugin starts after registration, which prints its CORE_SECRET.
    expect(plugin.profiles).toEqual(["rag"]);
    expect(setup).toMatch(/process\.stdout\.write\(`CORE_SECRET=\$\{coreSecret\}\\n`\)/);
  });

  it("takes every secret from .env; the example's placeholders are refused at start", () => {
    const example = envFile(read(".env.example"));
    for (const name of referencedVariables) {
      if (name === "CORE_SECRET") continue; // added by scripts/setup-rag.mjs (below)
      expect(Object.keys(example), `${name} in .env.example`).toContain(name);
    }
    expect(read(".env.example")).toMatch(/^# CORE_SECRET=/m);
    // Unset, compose itself refuses to start (${X:?…}).
    const { CORE_SECRET: _, ...withoutPlugin } = goodDotEnv();
    for (const name of ["JWT_SECRET", "DATA_ENCRYPTION_KEY", "POSTGRES_PASSWORD"] as const) {
      const vars = { ...withoutPlugin, [name]: "" };
      expect(() =>
        Object.values(compose.services).forEach((s) => {
          for (const v of Object.values(s.environment ?? {})) interpolate(String(v), vars);
        }),
      ).toThrow(name);
    }
    // With the example's values the core refuses both secrets, the plugin its missing one.
    const core = runtimeOf("Dockerfile").runtime;
    const env = containerEnv(core, compose.services.core as ComposeService, example);
    let problems: readonly string[] = [];
    try {
      loadConfig(env);
    } catch (err) {
      if (err instanceof ConfigError) problems = err.problems;
    }
    expect(problems.some((p) => p.startsWith("JWT_SECRET"))).toBe(true);
    expect(problems.some((p) => p.includes("DATA_ENCRYPTION_KEY"))).toBe(true);
    const plugin = runtimeOf("rag-plugin.Dockerfile").runtime;
    const pluginEnv = containerEnv(
      plugin,
      compose.services["rag-plugin"] as ComposeService,
      example,
    );
    expect(() => loadRagConfig(pluginEnv)).toThrow(/CORE_SECRET/);
  });

  it("keeps secrets and local state out of the build context and out of git", () => {
    const ignored = read(".dockerignore").split("\n");
    for (const entry of [".env", "data/", "node_modules/", "dist/", ".git/"]) {
      expect(ignored).toContain(entry);
    }
    expect(ignored).toContain("!.env.example");
    expect(read(".gitignore").split("\n")).toContain(".env");
  });
});

describe("runtime dependencies", () => {
  it("everything src/ and gen/ import at run time is a production dependency", () => {
    const used = new Set<string>();
    const files = ["src", "gen"].flatMap((top) =>
      readdirSync(join(root, top), { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
        .map((f) => join(root, top, f)),
    );
    const patterns = [
      // import … from "x" / export … from "x", except `import type` / `export type`.
      /(?:^|\n)\s*(?:import|export)\s+(type\s+)?[^;]*?\sfrom\s+["']([^"']+)["']/g,
      /(?:^|\n)\s*import\s+()["']([^"']+)["']/g,
      /\bimport\(\s*()["']([^"']+)["']\s*\)/g,
      /\.resolve\(\s*()["']([^"'./][^"']*)["']\s*\)/g,
    ];
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      for (const pattern of patterns) {
        for (const match of text.matchAll(pattern)) {
          const [, typeOnly, specifier = ""] = match;
          if (typeOnly || specifier.startsWith(".") || specifier.startsWith("node:")) continue;
          const parts = specifier.split("/");
          used.add(specifier.startsWith("@") ? parts.slice(0, 2).join("/") : (parts[0] ?? ""));
        }
      }
    }
    const runtime = new Set([...Object.keys(packageJson.dependencies), ...builtinModules]);
    expect([...used].filter((name) => !runtime.has(name))).toEqual([]);
    // The check sees what it should: a few packages the core imports.
    expect([...used]).toEqual(expect.arrayContaining(["pg", "pino", "pino-roll", "jose"]));
  });
});

describe("the steps after start (scripts/setup-rag.mjs)", () => {
  const url = process.env.TEST_DATABASE_URL?.trim();
  const skip = !url && !process.env.CI;
  if (skip) {
    console.warn(
      "containers: the setup script's test is skipped: it runs the core on PostgreSQL " +
        "(set TEST_DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/test)",
    );
  }
  it.skipIf(skip)(
    "registers, allowlists and chooses the plugin, which then answers searches",
    async () => {
      // A database of its own (the CLI and the core share it, as in compose), dropped after.
      const database = `tg_containers_${randomBytes(5).toString("hex")}`;
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      await admin.query(`CREATE DATABASE ${database}`);
      const dbUrl = new URL(url ?? "");
      dbUrl.pathname = `/${database}`;
      const secrets = goodDotEnv();
      const env = {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        ...containerEnv(
          runtimeOf("Dockerfile").runtime,
          compose.services.core as ComposeService,
          secrets,
        ),
        DB_CONNECTION: dbUrl.toString(),
        PLUGIN_ALLOWED_HOSTS: "127.0.0.1",
        PORT: "0",
        HOST: "127.0.0.1",
        DATA_DIR: tempDir(),
      };
      let core: Awaited<ReturnType<typeof startCli>> | undefined;
      let plugin: Awaited<ReturnType<typeof startCli>> | undefined;
      try {
        core = await startCli(["serve"], env, /traitgate listening/);
        const coreUrl = listeningUrl(core.output());
        const password = randomBytes(12).toString("base64url");
        const created = await runCli(
          ["users", "create", "--username", "admin", "--role", "admin"],
          {
            ...env,
            TRAITGATE_PASSWORD: password,
          },
        );
        expect(created.code, created.stderr).toBe(0);
        const pluginPort = await freePort();
        const setupEnv = {
          ...env,
          PORT: new URL(coreUrl).port,
          TRAITGATE_CLI: cliScript,
          TRAITGATE_PASSWORD: password,
        };
        const setupArgs = ["--plugin-host", "127.0.0.1", "--plugin-port", pluginPort];
        const first = await runScript("scripts/setup-rag.mjs", setupArgs, setupEnv);
        expect(first.code, first.stderr).toBe(0);
        // Run again (a second setup, or after a restart): the plugin's secrets are rotated.
        const second = await runScript("scripts/setup-rag.mjs", setupArgs, setupEnv);
        expect(second.code, second.stderr).toBe(0);
        expect(second.stderr).toContain("exists already");
        const coreSecret = /^CORE_SECRET=(tgc_\S+)$/m.exec(second.stdout)?.[1] ?? "";
        expect(second.stdout.trim()).toBe(`CORE_SECRET=${coreSecret}`);
        expect(coreSecret).not.toBe(/^CORE_SECRET=(tgc_\S+)$/m.exec(first.stdout)?.[1]);
        // The plugin's container: its own embedded database here (no pgvector on this server).
        plugin = await startCli(
          ["rag-plugin"],
          {
            PATH: process.env.PATH,
            HOME: process.env.HOME,
            CORE_SECRET: coreSecret,
            PORT: pluginPort,
            HOST: "127.0.0.1",
            DATA_DIR: tempDir(),
          },
          /rag-plugin listening/,
        );
        const login = await fetch(`${coreUrl}/auth/login`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ username: "admin", password }),
        });
        const { token } = (await login.json()) as { token: string };
        const ingest = await runCli(
          [
            "ingest",
            join(root, "examples", "corpus", "public"),
            "--required-traits",
            "none",
            "--classification",
            "public",
          ],
          { ...env, TRAITGATE_URL: coreUrl, TRAITGATE_TOKEN: token },
        );
        expect(ingest.code, ingest.stderr).toBe(0);
        const search = await fetch(`${coreUrl}/api/search`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
          body: JSON.stringify({ q: "visiting hours", top_k: 1 }),
        });
        const { items } = (await search.json()) as { items: { path: string }[] };
        expect(items.map((i) => i.path)).toEqual(["public/visiting-hours.md"]);
        // The documents are in the plugin, which answers only its core secret.
        const stats = await fetch(
          `${new URL(coreUrl).protocol}//127.0.0.1:${pluginPort}/rag/stats`,
          {
            headers: { authorization: `Bearer ${coreSecret}` },
          },
        );
        expect(((await stats.json()) as { documents: string }).documents).not.toBe("0");
        // The folder's documents went in batches (rag_index_batch), as the script registered.
        const coreDb = new pg.Client({ connectionString: dbUrl.toString() });
        await coreDb.connect();
        try {
          const { rows } = await coreDb.query<{ operation: string }>(
            `SELECT DISTINCT details->>'operation' AS operation FROM audit_events
             WHERE action = 'operator_call' AND outcome = 'success'`,
          );
          expect(rows.map((r) => r.operation)).toContain("rag_index_batch");
        } finally {
          await coreDb.end();
        }
      } finally {
        if (plugin) await stopCli(plugin.child);
        if (core) await stopCli(core.child);
        await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
        await admin.end();
      }
    },
    // Four processes and the plugin's embedded database on a loaded 2-core machine.
    300_000,
  );
});

const dirs: string[] = [];
afterAll(() => {
  killAll();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "traitgate-containers-"));
  dirs.push(dir);
  return dir;
}

/** The URL of the "traitgate listening" or "traitgate rag-plugin listening" log line. */
function listenedOn(output: string): string {
  const line = output.split("\n").find((l) => /"msg":"traitgate (rag-plugin )?listening"/.test(l));
  return line ? (JSON.parse(line) as { url: string }).url : "";
}

/** Runs an argv (`node <file> …`) from the package root; its exit code. */
function run(argv: readonly string[], env: Record<string, string>): Promise<number | null> {
  const [, ...args] = argv;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      cwd: root,
      env: { PATH: process.env.PATH, ...env },
      stdio: "ignore",
    });
    child.on("close", (code) => resolve(code));
  });
}

function runScript(file: string, args: string[], env: NodeJS.ProcessEnv) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [join(root, file), ...args], { cwd: root, env });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => {
      stdout += c;
    });
    child.stderr.on("data", (c: Buffer) => {
      stderr += c;
    });
    child.stdin.end();
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** A port nothing listens on (asked of the kernel, then released). */
async function freePort(): Promise<string> {
  const { createServer } = await import("node:net");
  return new Promise((resolve) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(String(port)));
    });
  });
}
