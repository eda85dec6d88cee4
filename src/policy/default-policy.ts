import type { PolicyDocument, PolicyRule } from "./types.js";

/**
 * The policy Traitgate ships and loads on first start: the spec's functions as
 * data (docs/policy.md has the table). Contexts:
 * - USER_ACTION, SEARCH: a user reads data of the request's data classes;
 * - DATA_EXPORT: a user exports data (the resource states its `row_count`);
 * - PLUGIN_INTERACTION: data of the request's classes goes to a plugin of a plugin_type;
 * - UI_RENDER: may the caller see the request's `ui_feature:` trait.
 */
const read = ["USER_ACTION", "SEARCH"];
const staffWithNeedToKnow = ["role:analyst", "role:clinician", "role:finance", "role:auditor"];

const rule = (
  id: string,
  description: string,
  contexts: string[],
  when: PolicyRule["when"],
  decision: PolicyRule["decision"],
  extra: Pick<PolicyRule, "sanitize" | "condition"> = {},
): PolicyRule => ({ id, description, contexts, when, decision, ...extra });

const security: PolicyRule[] = [
  rule(
    "security-locked",
    "an account under security hold is denied everything",
    ["*"],
    { all: ["security:locked"] },
    "deny",
  ),
];

const dataClassification: PolicyRule[] = [
  rule(
    "data-public",
    "anyone may read public data",
    read,
    { all: ["data_access:public"] },
    "allow",
  ),
  rule(
    "data-internal",
    "staff may read internal data",
    read,
    { all: ["data_access:internal", "role:viewer"] },
    "allow",
  ),
  rule(
    "data-confidential",
    "confidential data for staff with a need to know",
    read,
    { all: ["data_access:confidential"], any: staffWithNeedToKnow },
    "allow",
  ),
  rule(
    "data-confidential-need-to-know",
    "confidential data is denied to staff without a need-to-know role",
    read,
    { all: ["data_access:confidential"], none: staffWithNeedToKnow },
    "deny",
  ),
  rule(
    "data-pii-sanitize",
    "personal data is masked for roles without PII clearance",
    read,
    { all: ["data_access:pii"], none: ["security:pii_clearance"] },
    "sanitize",
    { sanitize: { fields: [], classifications: ["pii"] } },
  ),
  rule(
    "data-phi-requires-hipaa",
    "health data needs HIPAA training",
    read,
    { all: ["data_access:phi"], none: ["compliance:hipaa"] },
    "deny",
  ),
  rule(
    "data-phi-clinician",
    "clinicians with HIPAA training read health data",
    read,
    { all: ["data_access:phi", "compliance:hipaa", "role:clinician"] },
    "allow",
  ),
  rule(
    "data-phi-non-clinical",
    "trained non-clinical staff see health records without clinical fields",
    read,
    { all: ["data_access:phi", "compliance:hipaa"], none: ["role:clinician"] },
    "sanitize",
    { sanitize: { fields: [], classifications: ["phi"] } },
  ),
  rule(
    "data-financial-others",
    "financial fields are masked for staff outside finance and audit",
    read,
    { all: ["data_access:financial"], none: ["role:finance", "role:auditor"] },
    "sanitize",
    { sanitize: { fields: [], classifications: ["financial"] } },
  ),
  rule(
    "data-pci-requires-training",
    "payment card data needs PCI DSS training",
    read,
    { all: ["data_access:pci"], none: ["compliance:pci_dss"] },
    "deny",
  ),
  rule(
    "data-credentials",
    "credentials are never read through the platform",
    ["*"],
    { all: ["data_access:credentials"] },
    "deny",
  ),
];

const dataExport: PolicyRule[] = [
  rule(
    "export-capability",
    "exports need the export capability",
    ["DATA_EXPORT"],
    { all: ["capability:export"] },
    "allow",
  ),
  rule(
    "export-phi",
    "health data is never exported",
    ["DATA_EXPORT"],
    { all: ["data_access:phi"] },
    "deny",
  ),
  rule(
    "export-pii-sanitize",
    "exported personal data is masked without PII clearance",
    ["DATA_EXPORT"],
    { all: ["data_access:pii", "capability:export"], none: ["security:pii_clearance"] },
    "sanitize",
    { sanitize: { fields: [], classifications: ["pii"] } },
  ),
  rule(
    "export-row-limit",
    "exports above 10,000 rows are denied; an export that states no row_count fails closed",
    ["DATA_EXPORT"],
    { all: ["capability:export"] },
    "deny",
    { condition: "request.resource.row_count > 10000" },
  ),
];

const pluginInteraction: PolicyRule[] = [
  rule(
    "plugin-external-phi",
    "external plugins never receive health data",
    ["PLUGIN_INTERACTION"],
    { all: ["plugin_type:external", "data_access:phi"] },
    "deny",
  ),
  rule(
    "plugin-external-financial",
    "external plugins never receive financial data",
    ["PLUGIN_INTERACTION"],
    { all: ["plugin_type:external", "data_access:financial"] },
    "deny",
  ),
  rule(
    "plugin-external-pii",
    "external plugins receive personal data sanitized",
    ["PLUGIN_INTERACTION"],
    { all: ["plugin_type:external", "data_access:pii"] },
    "sanitize",
    { sanitize: { fields: [], classifications: ["pii"] } },
  ),
  rule(
    "plugin-external-public",
    "external plugins receive public data",
    ["PLUGIN_INTERACTION"],
    { all: ["plugin_type:external", "data_access:public"] },
    "allow",
  ),
  rule(
    "plugin-internal",
    "internal plugins receive data other than health data",
    ["PLUGIN_INTERACTION"],
    { all: ["plugin_type:internal"], none: ["data_access:phi"] },
    "allow",
  ),
  rule(
    "plugin-internal-phi",
    "internal plugins in HIPAA scope receive health data",
    ["PLUGIN_INTERACTION"],
    { all: ["plugin_type:internal", "data_access:phi", "compliance:hipaa"] },
    "allow",
  ),
];

const uiGate = (feature: string, description: string, when: PolicyRule["when"]) =>
  rule(
    `ui-${feature.replaceAll("_", "-")}`,
    description,
    ["UI_RENDER"],
    { ...when, all: [`ui_feature:${feature}`, ...(when.all ?? [])] },
    "allow",
  );

const uiFeatures: PolicyRule[] = [
  uiGate("dashboard", "every member of staff sees the dashboard", { all: ["role:viewer"] }),
  uiGate("search", "search for those who may search", { all: ["capability:search"] }),
  uiGate("admin_console", "the admin console for administrators", { all: ["role:admin"] }),
  rule(
    "ui-admin-console-mfa",
    "the admin console only after a second factor",
    ["UI_RENDER"],
    { all: ["ui_feature:admin_console"], none: ["security:mfa"] },
    "deny",
  ),
  uiGate("settings_editor", "settings editor with manage_settings", {
    all: ["capability:manage_settings"],
  }),
  uiGate("user_management", "user management with manage_users", {
    all: ["capability:manage_users"],
  }),
  uiGate("policy_editor", "policy editor with manage_policy", {
    all: ["capability:manage_policy"],
  }),
  uiGate("plugin_manager", "plugin manager with manage_plugins", {
    all: ["capability:manage_plugins"],
  }),
  uiGate("audit_viewer", "audit viewer with view_audit", { all: ["capability:view_audit"] }),
  uiGate("phi_viewer", "patient record viewer for trained clinicians", {
    all: ["role:clinician", "compliance:hipaa"],
  }),
  uiGate("export_button", "export actions with the export capability", {
    all: ["capability:export"],
  }),
];

export const defaultPolicy: PolicyDocument = {
  rules: [...security, ...dataClassification, ...dataExport, ...pluginInteraction, ...uiFeatures],
  sanitization: {
    pii: {
      fields: [
        "name",
        "first_name",
        "last_name",
        "full_name",
        "email",
        "phone",
        "ssn",
        "address",
        "date_of_birth",
        "dob",
      ],
      patterns: ["ssn", "email", "phone"],
    },
    phi: {
      fields: [
        "mrn",
        "medical_record_number",
        "diagnosis",
        "diagnoses",
        "medications",
        "lab_results",
        "treatment",
        "clinical_notes",
      ],
      patterns: ["mrn", "ssn"],
    },
    financial: {
      fields: ["account_number", "iban", "routing_number", "salary", "card_number", "cvv"],
      patterns: ["card"],
      action: "mask",
    },
  },
};
