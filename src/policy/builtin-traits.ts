import type { TraitDefinition } from "./registry.js";

/**
 * The traits every Traitgate installation knows. Administrators register more;
 * the shipped policy (default-policy.ts) is written against these.
 *
 * Role hierarchy (⇒ = implies): admin ⇒ operator ⇒ analyst ⇒ viewer;
 * admin ⇒ security_officer ⇒ auditor ⇒ viewer; physician and nurse ⇒
 * clinician ⇒ viewer. Roles imply the capabilities and clearances they carry.
 * Data classes: phi ⇒ pii ⇒ confidential; pci ⇒ financial ⇒ confidential.
 */
const t = (
  name: string,
  description: string,
  implies: string[] = [],
  conflicts: string[] = [],
): TraitDefinition => ({ name, description, implies, conflicts });

const roles: TraitDefinition[] = [
  t("role:admin", "platform administrator", [
    "role:operator",
    "role:security_officer",
    "capability:manage_settings",
    "capability:manage_users",
    "capability:manage_policy",
  ]),
  t("role:operator", "runs the platform and its plugins", [
    "role:analyst",
    "capability:manage_plugins",
    "capability:ingest",
  ]),
  t("role:security_officer", "owns security and compliance", [
    "role:auditor",
    "capability:manage_policy",
  ]),
  t("role:auditor", "reads the audit log", ["role:viewer", "capability:view_audit"]),
  t("role:analyst", "works with internal and confidential data", [
    "role:viewer",
    "capability:export",
    "capability:write",
  ]),
  t("role:data_steward", "curates personal data", ["role:analyst", "security:pii_clearance"]),
  t("role:finance", "works with financial data", ["role:viewer", "capability:export"]),
  t("role:physician", "treating physician", ["role:clinician", "capability:write"]),
  t("role:nurse", "nursing staff", ["role:clinician"]),
  t("role:clinician", "clinical staff", ["role:viewer", "security:pii_clearance"]),
  t("role:viewer", "any signed-in member of staff", ["capability:read", "capability:search"]),
  t("role:service", "a service account", []),
];

const capabilities: TraitDefinition[] = [
  t("capability:read", "read data"),
  t("capability:write", "change data"),
  t("capability:search", "use semantic search"),
  t("capability:export", "export data out of the platform"),
  t("capability:ingest", "ingest documents for search"),
  t("capability:manage_settings", "change platform settings"),
  t("capability:manage_users", "administer users and service accounts"),
  t("capability:manage_policy", "change traits and policies"),
  t("capability:manage_plugins", "register plugins and allowlists"),
  t("capability:view_audit", "read the audit log"),
  t("capability:invoke_plugin", "call plugins through the operator lane"),
  t("capability:rag_index", "plugin operation rag_index"),
  t("capability:rag_query", "plugin operation rag_query"),
];

const dataClasses: TraitDefinition[] = [
  t("data_access:public", "published data", [], ["data_access:confidential"]),
  t("data_access:internal", "staff-only data"),
  t("data_access:confidential", "data under need-to-know"),
  t("data_access:pii", "personally identifiable information", ["data_access:confidential"]),
  t("data_access:phi", "protected health information (HIPAA)", ["data_access:pii"]),
  t("data_access:financial", "financial records", ["data_access:confidential"]),
  t("data_access:pci", "payment card data (PCI DSS)", ["data_access:financial"]),
  t("data_access:credentials", "secrets and credentials"),
];

const uiFeatures: TraitDefinition[] = [
  t("ui_feature:dashboard", "home dashboard"),
  t("ui_feature:search", "semantic search page"),
  t("ui_feature:admin_console", "administration console"),
  t("ui_feature:settings_editor", "platform settings editor"),
  t("ui_feature:user_management", "users and service accounts"),
  t("ui_feature:policy_editor", "traits and policies editor"),
  t("ui_feature:plugin_manager", "plugins and allowlists"),
  t("ui_feature:audit_viewer", "audit log viewer"),
  t("ui_feature:phi_viewer", "patient record viewer"),
  t("ui_feature:export_button", "export actions"),
];

const pluginTypes: TraitDefinition[] = [
  t(
    "plugin_type:internal",
    "runs inside the operator's trust boundary",
    [],
    ["plugin_type:external"],
  ),
  t("plugin_type:external", "third-party or remote plugin"),
  t("plugin_type:ai_core", "the platform's AI core", ["plugin_type:internal"]),
  t("plugin_type:retrieval", "RAG storage and search plugin", ["plugin_type:internal"]),
  t("plugin_type:tool", "a tool the AI core may call"),
];

const security: TraitDefinition[] = [
  t("security:mfa", "authenticated with a second factor"),
  t("security:pii_clearance", "cleared to see personal data unmasked"),
  t("security:trusted_network", "request from the operator's network"),
  t("security:locked", "account under security hold: denied everywhere"),
];

const compliance: TraitDefinition[] = [
  t("compliance:hipaa", "completed HIPAA training"),
  t("compliance:gdpr", "completed GDPR training"),
  t("compliance:pci_dss", "completed PCI DSS training"),
  t("compliance:soc2", "SOC 2 scope"),
];

export const builtinTraits: readonly TraitDefinition[] = [
  ...roles,
  ...capabilities,
  ...dataClasses,
  ...uiFeatures,
  ...pluginTypes,
  ...security,
  ...compliance,
];
