import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Builds the console's bundle (dist/console) once: its tests serve it to a real browser;
    // and compiles src/ for the suites that run `traitgate` as its own process.
    globalSetup: ["test/support/build-console.ts", "test/support/build-cli.ts"],
    // A bound for a hung test, not a measure: suites that start several processes take
    // tens of seconds on a loaded 2-core machine.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // PGlite instances and real servers are heavy; two cores on CI, but much of a suite waits on
    // child processes, sockets and PostgreSQL: a third worker fills those waits (npm test 418 s
    // with two, 367 s with three, measured on the 2-core machine).
    pool: "forks",
    maxWorkers: 3,
  },
});
