// The containers' HEALTHCHECK (Dockerfile, rag-plugin.Dockerfile; docs/containers.md): asks this
// process's own listener for a probe path (/healthz: the process answers; /readyz: and its
// database answers) on 127.0.0.1:$PORT, over TLS when TLS_CERT_FILE is set. Exit 0 on 200,
// 1 otherwise. Node only, so the runtime image needs no curl or wget.
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";

const path = process.argv[2] ?? "/readyz";
if (path !== "/healthz" && path !== "/readyz") {
  process.stderr.write(`healthcheck: the path must be /healthz or /readyz (got "${path}")\n`);
  process.exit(2);
}
const port = Number(process.env.PORT?.trim() || "8080");
const tls = Boolean(process.env.TLS_CERT_FILE?.trim());
// The certificate names the service, not 127.0.0.1: the probe checks liveness, not identity.
const request = tls ? httpsRequest : httpRequest;
const req = request(
  { host: "127.0.0.1", port, path, method: "GET", timeout: 2500, rejectUnauthorized: false },
  (res) => {
    res.resume();
    process.exit(res.statusCode === 200 ? 0 : 1);
  },
);
req.on("timeout", () => req.destroy(new Error("timed out")));
req.on("error", (err) => {
  process.stderr.write(`healthcheck: ${path}: ${err.message}\n`);
  process.exit(1);
});
req.end();
