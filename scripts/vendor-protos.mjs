#!/usr/bin/env node
// Copies the third-party protos this project compiles against from the npm
// packages that ship them (the Buf Schema Registry is out of reach here), and
// writes buf/validate/validate.proto from @bufbuild/protovalidate's descriptor.
// Licence headers stay as the upstream files carry them.
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const pkgDir = (name) => dirname(require.resolve(`${name}/package.json`));

const copies = [
  ["google-proto-files", "google/api/annotations.proto", "google/api/annotations.proto"],
  ["google-proto-files", "google/api/http.proto", "google/api/http.proto"],
  ["google-proto-files", "google/rpc/error_details.proto", "google/rpc/error_details.proto"],
  // Not imported by proto/: clients in other languages decode the google.rpc.Status of
  // the grpc-status-details-bin trailer with it (docs/clients.md).
  ["google-proto-files", "google/rpc/status.proto", "google/rpc/status.proto"],
  [
    "@grpc/reflection",
    "build/proto/grpc/reflection/v1/reflection.proto",
    "grpc/reflection/v1/reflection.proto",
  ],
  [
    "@grpc/reflection",
    "build/proto/grpc/reflection/v1alpha/reflection.proto",
    "grpc/reflection/v1alpha/reflection.proto",
  ],
  ["grpc-health-check", "proto/health/v1/health.proto", "grpc/health/v1/health.proto"],
];
for (const [pkg, from, to] of copies) {
  const dest = join(root, "third_party", to);
  mkdirSync(dirname(dest), { recursive: true });
  copyFileSync(join(pkgDir(pkg), from), dest);
  console.log(`copied third_party/${to} from ${pkg}`);
}
await import("./write-protovalidate-proto.mjs");
