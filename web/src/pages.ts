import type { FunctionComponent } from "preact";
import type { SessionInfo } from "./api.js";
import { ApiKeysPage } from "./pages/api-keys.js";
import { AuditPage } from "./pages/audit.js";
import { OperatorCallsPage } from "./pages/operator-calls.js";
import { OverviewPage } from "./pages/overview.js";
import { PluginsPage } from "./pages/plugins.js";
import { PolicyPage } from "./pages/policy.js";
import { RagPage } from "./pages/rag.js";
import { SettingsPage } from "./pages/settings.js";
import { UsersPage } from "./pages/users.js";

export interface PageProps {
  session: SessionInfo;
  /** Does the session's API key carry this scope? (Actions without it are disabled.) */
  can(scope: string): boolean;
  /** Is this `ui_feature` in the policy's answer for the user? */
  has(feature: string): boolean;
  /** Is this page in the user's navigation? */
  shows(page: string): boolean;
}

/**
 * The pages the console has, in navigation order. Which ones a user sees is the server's
 * answer (src/console/access.ts: pages from the policy's ListUiFeatures).
 */
export const pageTable: {
  id: string;
  label: string;
  path: string;
  component: FunctionComponent<PageProps>;
}[] = [
  { id: "overview", label: "Overview", path: "/console/", component: OverviewPage },
  { id: "settings", label: "Settings", path: "/console/settings", component: SettingsPage },
  { id: "api_keys", label: "API keys", path: "/console/api-keys", component: ApiKeysPage },
  { id: "plugins", label: "Plugins", path: "/console/plugins", component: PluginsPage },
  { id: "audit", label: "Audit", path: "/console/audit", component: AuditPage },
  {
    id: "operator_calls",
    label: "Operator calls",
    path: "/console/operator-calls",
    component: OperatorCallsPage,
  },
  { id: "users", label: "Users", path: "/console/users", component: UsersPage },
  { id: "rag", label: "RAG", path: "/console/rag", component: RagPage },
  { id: "policy", label: "Policy", path: "/console/policy", component: PolicyPage },
];
