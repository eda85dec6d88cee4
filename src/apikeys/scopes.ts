import { invalidArgument } from "../errors.js";

/**
 * Every scope an API key can carry, in one place. A method's auth rule
 * (`requireAuth({apiKeyScopes})`) names the scopes it needs; a key is created with a subset
 * of these. Adding a scope is one entry here (and a line in docs/api-keys.md).
 */
export const apiKeyScopes = {
  "settings:read": "read the admin settings and their history",
  "settings:write": "change the admin settings",
  "audit:read": "read and export the audit log",
  "api_keys:read": "list and read API keys (never their secrets)",
  "api_keys:write": "create and revoke API keys",
  "operator:read": "read the operator lane's plugins and allowlist",
  "operator:write": "register plugins and change the operator allowlist",
  "plugins:read": "read plugin registrations",
  "plugins:write": "change plugin registrations",
  "policy:read": "read policies and the trait registry",
  "policy:write": "change policies and the trait registry",
  "users:read": "list and read user accounts",
  "users:write": "create, change and delete user accounts, set their passwords, reset their MFA",
  "service_accounts:read": "list and read service accounts (never their secrets)",
  "service_accounts:write": "create, change and delete service accounts, rotate their secrets",
} as const satisfies Record<string, string>;

export type ApiKeyScope = keyof typeof apiKeyScopes;

export const allScopes = Object.keys(apiKeyScopes) as ApiKeyScope[];

export const isKnownScope = (scope: string): scope is ApiKeyScope =>
  Object.hasOwn(apiKeyScopes, scope);

/**
 * The scopes, deduplicated and in registry order; an unknown scope, or none at all, is a
 * 400 naming it (field `scopes`).
 */
export function checkScopes(scopes: readonly string[]): ApiKeyScope[] {
  if (scopes.length === 0) {
    throw invalidArgument("INVALID_FIELD", "an API key needs at least one scope", {
      field: "scopes",
    });
  }
  const unknown = scopes.filter((s) => !isKnownScope(s));
  if (unknown.length > 0) {
    throw invalidArgument(
      "UNKNOWN_SCOPE",
      `unknown scope ${unknown.map((s) => JSON.stringify(s)).join(", ")}; known scopes: ${allScopes.join(", ")}`,
      { field: "scopes", metadata: { scopes: unknown.join(",") } },
    );
  }
  return allScopes.filter((s) => scopes.includes(s));
}
