import { isIP } from "node:net";
import { invalidArgument } from "../errors.js";

/**
 * Plugin manifests: what an operator declares about a plugin, checked before
 * the core will ever send a request on its behalf. The core forwards only to
 * a path of the manifest, on the manifest's host and port; the host must be
 * one the platform's operator listed (PLUGIN_ALLOWED_HOSTS) unless the admin
 * registering the plugin explicitly allows another (SSRF stance, see
 * docs/operator-lane.md).
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
const hostnamePattern =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

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
 * Addresses no plugin may live at, whatever an admin allows: link-local ranges (where
 * cloud metadata services answer) and the metadata services' own names and addresses.
 * Names are checked as written; DNS answers are not (docs/operator-lane.md).
 */
export function isForbiddenHost(host: string): boolean {
  const h = host.toLowerCase();
  if (h === "metadata.google.internal" || h === "metadata" || h === "instance-data") return true;
  if (isIP(h) === 4) return h.startsWith("169.254.") || h === "100.100.100.200";
  if (isIP(h) === 6) return /^fe[89ab][0-9a-f]:/.test(h) || h === "fd00:ec2::254";
  return false;
}

/** A host name or an IP address literal (IPv6 without brackets). */
export function isValidHost(host: string): boolean {
  return isIP(host) !== 0 || hostnamePattern.test(host);
}

/**
 * Checks and normalises a manifest (defaults for host and port; host names in
 * lower case). Throws invalid_argument naming the first bad field.
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
    allowedHosts: ReadonlySet<string>;
    allowUnlistedHost: boolean;
    /** Throws invalid_argument naming `field` when a trait is not registered. */
    checkTrait: (trait: string, field: string) => void;
  },
): { manifest: PluginManifest; unlistedHost: boolean } {
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
  const host = (input.host.trim() || defaultPluginHost).toLowerCase();
  if (!isValidHost(host)) {
    throw bad("host", "host must be a host name or an IP address, without scheme or port");
  }
  if (isForbiddenHost(host)) {
    throw bad(
      "host",
      `host ${host} is a link-local or cloud metadata address and is never allowed`,
    );
  }
  const unlistedHost = !options.allowedHosts.has(host);
  if (unlistedHost && !options.allowUnlistedHost) {
    throw bad(
      "host",
      `host ${host} is not in PLUGIN_ALLOWED_HOSTS; register with allow_unlisted_host=true to allow it`,
    );
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
    manifest: {
      id: input.id,
      name: input.name,
      pluginType: input.pluginType,
      endpoints,
      host,
      port,
      traits: [...new Set(input.traits)].sort(),
    },
    unlistedHost,
  };
}
