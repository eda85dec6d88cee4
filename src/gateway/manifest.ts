import { invalidArgument } from "../errors.js";
import { hostString, parseHost } from "./host-address.js";

/**
 * Plugin manifests: what an operator declares about a plugin, checked before
 * the core will ever send a request on its behalf. The core forwards only to
 * a path of the manifest, on the manifest's host and port. Here the host is only
 * put in its canonical form; where it may point is the host policy's to say
 * (host-policy.ts; SSRF stance, see docs/operator-lane.md).
 */

export interface PluginManifest {
  id: string;
  name: string;
  pluginType: string;
  /** Operation → absolute path. */
  endpoints: Readonly<Record<string, string>>;
  host: string;
  port: number;
  /** Traits for the interaction policy besides `plugin_type:<pluginType>` (e.g. compliance:hipaa). */
  traits: readonly string[];
}

export const defaultPluginHost = "127.0.0.1";
export const defaultPluginPort = 8080;

const idPattern = /^[a-z0-9][a-z0-9-]{0,62}$/;
const typePattern = /^[a-z][a-z0-9_]{0,62}$/;
const operationPattern = /^[a-z][a-z0-9_]{0,62}$/;
/** Path segments: unreserved and sub-delimiter characters, no percent-encoding. */
const segmentPattern = /^[A-Za-z0-9._~!$&'()*+,;=:@-]+$/;
const bad = (field: string, message: string) =>
  invalidArgument("INVALID_MANIFEST", message, { field: `manifest.${field}` });

/**
 * Why `path` is not an acceptable endpoint path, or undefined when it is:
 * absolute, no scheme or authority, no query or fragment, no `.` or `..`
 * segments, no percent-encoding (which could hide them), no empty segments.
 */
export function endpointPathProblem(path: string): string | undefined {
  if (!path.startsWith("/")) return "must be an absolute path starting with /";
  if (path.startsWith("//")) return "must not name a host (//)";
  if (path.length > 512) return "must be at most 512 characters";
  const segments = path.slice(1).split("/");
  // A trailing slash is allowed ("/rag/"); an empty path ("/") is too.
  if (segments.at(-1) === "") segments.pop();
  for (const segment of segments) {
    if (segment === "") return "must not contain empty segments (//)";
    if (segment === "." || segment === "..") return "must not contain . or .. segments";
    if (!segmentPattern.test(segment)) {
      return "may only contain letters, digits and - . _ ~ ! $ & ' ( ) * + , ; = : @ (no %, ?, #, \\ or spaces)";
    }
  }
  return undefined;
}

/**
 * Checks and normalises a manifest (defaults for host and port; the host in its
 * canonical form: `0x7f.1` is 127.0.0.1, `Rag.Internal.` is rag.internal). Throws
 * invalid_argument naming the first bad field.
 */
export function checkManifest(
  input: {
    id: string;
    name: string;
    pluginType: string;
    endpoints: Readonly<Record<string, string>>;
    host: string;
    port: number;
    traits: readonly string[];
  },
  options: {
    /** Throws invalid_argument naming `field` when a trait is not registered. */
    checkTrait: (trait: string, field: string) => void;
  },
): PluginManifest {
  if (!idPattern.test(input.id)) {
    throw bad("id", "id must be 1–63 lower-case letters, digits or hyphens");
  }
  if (!typePattern.test(input.pluginType)) {
    throw bad("plugin_type", "plugin_type must be lower-case letters, digits or _ (e.g. external)");
  }
  const operations = Object.keys(input.endpoints);
  if (operations.length === 0) throw bad("endpoints", "endpoints must name at least one operation");
  const endpoints: Record<string, string> = {};
  for (const operation of operations.sort()) {
    if (!operationPattern.test(operation)) {
      throw bad(
        `endpoints.${operation}`,
        `operation "${operation}" must be lower-case letters, digits or _`,
      );
    }
    const path = input.endpoints[operation] ?? "";
    const problem = endpointPathProblem(path);
    if (problem !== undefined) {
      throw bad(`endpoints.${operation}`, `endpoint of ${operation}: ${problem}`);
    }
    endpoints[operation] = path;
  }
  const host = parseHost(input.host.trim() || defaultPluginHost);
  if (host === undefined) {
    throw bad("host", "host must be a host name or an IP address, without scheme or port");
  }
  options.checkTrait(`plugin_type:${input.pluginType}`, "manifest.plugin_type");
  input.traits.forEach((trait, i) => {
    options.checkTrait(trait, `manifest.traits[${i}]`);
  });
  const port = input.port === 0 ? defaultPluginPort : input.port;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw bad("port", "port must be 1–65535");
  }
  return {
    id: input.id,
    name: input.name,
    pluginType: input.pluginType,
    endpoints,
    host: hostString(host),
    port,
    traits: [...new Set(input.traits)].sort(),
  };
}
