import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
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
    // WebAssembly compiled by V8's baseline compiler only: optimising PGlite's (PostgreSQL in
    // WebAssembly) hot functions costs a test process more CPU than it saves (test/integration
    // 210 -> 158 s of CPU, measured on the 2-core machine). The same code runs either way.
    execArgv: ["--liftoff-only"],
    projects: [
      {
        extends: true,
        test: {
          name: "in-process",
          include: ["test/**/*.test.ts"],
          exclude: ["test/e2e/**"],
          // The suites that run the code in the test's own process share a worker process
          // and its loaded modules from file to file: each file loading src/, Connect and
          // PGlite afresh cost more CPU than most of its tests (the in-process suites
          // ~40% less CPU). Nothing there keeps state in a module: servers, databases and
          // loggers are made per test or per file and closed.
          isolate: false,
        },
      },
      {
        extends: true,
        test: {
          // `traitgate` as a user runs it (several processes, cluster workers, signals):
          // each file in a fresh worker process. Vitest starts the projects' files in the
          // order of their names, then longest first: these long files (up to ~75 s each)
          // start first, beside the in-process ones, instead of ending the run alone.
          name: "command-line",
          include: ["test/e2e/**/*.test.ts"],
        },
      },
    ],
  },
});
