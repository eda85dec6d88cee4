/**
 * What a console session may see and call, from the policy's ListUiFeatures answer for
 * the signed-in user (decisions.md §7). Pure functions: the browser shows the same pages
 * (web/src/pages.ts keeps its copy of the page table in step with this one).
 */

/** The console's pages, in navigation order. */
export const consolePages = [
  "overview",
  "settings",
  "api_keys",
  "plugins",
  "audit",
  "operator_calls",
  "users",
  "rag",
  "policy",
] as const;
export type ConsolePage = (typeof consolePages)[number];

/** Each page and the `ui_feature:` traits (any of them) that show it. */
const pageFeatures: Record<Exclude<ConsolePage, "overview">, readonly string[]> = {
  settings: ["settings_editor", "audit_viewer"],
  api_keys: ["admin_console"],
  plugins: ["plugin_manager"],
  audit: ["audit_viewer"],
  operator_calls: ["audit_viewer", "plugin_manager"],
  users: ["user_management"],
  rag: ["plugin_manager"],
  policy: ["policy_editor"],
};

/**
 * How the console opens for a user:
 * - `console`: the pages listed;
 * - `mfa_needed`: an administrator whom the policy refuses `admin_console` (the shipped
 *   rule ui-admin-console-mfa: no second factor) sees only the MFA enrolment page;
 * - `none`: no page at all (clinicians, viewers): the "no access" page.
 */
export type ConsoleAccess =
  | { kind: "console"; pages: ConsolePage[] }
  | { kind: "mfa_needed"; pages: [] }
  | { kind: "none"; pages: [] };

export function consoleAccess(
  features: readonly string[],
  roles: readonly string[],
): ConsoleAccess {
  const has = (f: string) => features.includes(f);
  if (roles.includes("admin") && !has("admin_console")) return { kind: "mfa_needed", pages: [] };
  const pages = consolePages.filter((p) => p === "overview" || pageFeatures[p].some((f) => has(f)));
  // Overview alone is no console: someone who may see no page of it has no access.
  if (pages.length <= 1) return { kind: "none", pages: [] };
  return { kind: "console", pages };
}

/** Calls every session may make: its own account (sign-out, MFA, password). */
const ownAccount = [
  "traitgate.identity.v1.IdentityService/Logout",
  "traitgate.identity.v1.IdentityService/LogoutAll",
  "traitgate.identity.v1.IdentityService/ChangePassword",
  "traitgate.identity.v1.IdentityService/EnrollMfa",
  "traitgate.identity.v1.IdentityService/ActivateMfa",
  "traitgate.identity.v1.IdentityService/DisableMfa",
];

/** Services (or single methods) and the pages that call them. */
const callers: [string, readonly ConsolePage[]][] = [
  ["grpc.health.v1.Health/Check", ["overview"]],
  ["traitgate.settings.v1.SettingsService/", ["settings", "rag"]],
  ["traitgate.admin.v1.ApiKeyService/", ["api_keys"]],
  ["traitgate.gateway.v1.PluginRegistryService/", ["plugins", "rag"]],
  ["traitgate.gateway.v1.OperatorAllowlistService/", ["plugins", "rag"]],
  ["traitgate.admin.v1.AuditService/", ["audit"]],
  ["traitgate.gateway.v1.GatewayService/WatchOperatorCalls", ["operator_calls"]],
  ["traitgate.identity.v1.UserAdminService/", ["users"]],
  ["traitgate.identity.v1.ServiceAccountAdminService/", ["users"]],
  ["traitgate.search.v1.SearchService/", ["rag"]],
  ["traitgate.policy.v1.PolicyService/", ["policy"]],
];

/**
 * May a session with these pages call this method (`package.Service/Method`) through the
 * console? Methods no page calls are refused (fail closed). The services still check the
 * caller's roles and API key scopes on every call: this only keeps the console to its pages.
 */
export function consoleMayCall(rpc: string, access: ConsoleAccess): boolean {
  if (ownAccount.includes(rpc)) return true;
  const entry = callers.find(([prefix]) =>
    prefix.endsWith("/") ? rpc.startsWith(prefix) : rpc === prefix,
  );
  if (entry === undefined) return false;
  return entry[1].some((p) => (access.pages as readonly ConsolePage[]).includes(p));
}

/** The traits a session asks ListUiFeatures with: its roles, and security:mfa after a second factor. */
export function sessionTraits(roles: readonly string[], mfa: boolean): string[] {
  return [...roles.map((r) => `role:${r}`), ...(mfa ? ["security:mfa"] : [])];
}
