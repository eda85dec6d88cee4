import { request } from "node:http";
import { createLogger } from "../../src/log.js";
import { installLastResortGuard } from "../../src/server/last-resort.js";

/**
 * A process with the last-resort guard, as `traitgate serve` installs it (log lines on
 * stdout). It makes the mistake of the issue that brought the guard (an outgoing request
 * destroyed with no `error` listener: "socket hang up"), prints how many errors the guard
 * caught, then, with the argument `programming-error`, throws a TypeError from a timer.
 * Run by test/unit/last-resort.test.ts.
 */

const guard = installLastResortGuard(createLogger({ level: "info" }));

// A request that would carry a secret, destroyed before any listener for its error.
const outgoing = request({
  host: "127.0.0.1",
  port: 9,
  path: "/held?token=SECRET-MARKER-5d1c",
  headers: { authorization: "Bearer SECRET-MARKER-5d1c" },
});
outgoing.destroy();

const started = Date.now();
const poll = setInterval(() => {
  if (guard.caught() === 0 && Date.now() - started < 10_000) return;
  clearInterval(poll);
  process.stdout.write(`${JSON.stringify({ caught: guard.caught() })}\n`);
  if (process.argv[2] === "programming-error") {
    setTimeout(() => {
      throw new TypeError("a programming error in the test child");
    }, 0);
  }
}, 5);
