import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface TestCertificate {
  certFile: string;
  keyFile: string;
  /** The certificate in PEM, to trust as a CA in clients. */
  cert: Buffer;
  remove(): Promise<void>;
}

/**
 * A throw-away self-signed P-256 certificate for `localhost` and `127.0.0.1`,
 * valid for one day, written to a fresh temporary directory with `openssl`.
 */
export async function createTestCertificate(): Promise<TestCertificate> {
  const dir = await mkdtemp(join(tmpdir(), "traitgate-tls-"));
  const certFile = join(dir, "cert.pem");
  const keyFile = join(dir, "key.pem");
  // biome-ignore format: one openssl argument per line would hide the command.
  const args = [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-days", "1", "-subj", "/CN=localhost",
    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    "-keyout", keyFile, "-out", certFile,
  ];
  try {
    await run("openssl", args, { timeout: 30_000 });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    throw new Error(
      missing ? "openssl is not installed; the TLS tests need it" : "openssl failed",
      { cause: err },
    );
  }
  return {
    certFile,
    keyFile,
    cert: await readFile(certFile),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}
