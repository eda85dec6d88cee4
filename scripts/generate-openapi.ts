// Writes gen/openapi.json: the OpenAPI 3.1 document of the core's REST paths, made from
// the descriptors protoc-gen-es emitted in gen/ (their google.api.http options) and the
// comments of proto/ (through `buf build`, local). Run by `npm run generate` after
// `buf generate`; deterministic, so CI's "generated code is up to date" check holds.
//
//   tsx scripts/generate-openapi.ts
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { bufImage, commentsFromImage } from "../src/openapi/comments.js";
import { coreAuthRules, coreOtherRequestContent, coreServices } from "../src/openapi/core-api.js";
import { buildOpenApi } from "../src/openapi/document.js";
import { toolPath } from "./tools.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
const document = buildOpenApi({
  services: coreServices,
  authRules: coreAuthRules,
  otherRequestContent: coreOtherRequestContent,
  comments: commentsFromImage(bufImage(toolPath("buf"), "proto", root)),
  version: pkg.version,
});
writeFileSync(join(root, "gen", "openapi.json"), `${JSON.stringify(document, null, 2)}\n`);
