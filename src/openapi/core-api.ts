import type { DescService, JsonObject } from "@bufbuild/protobuf";
import { ApiKeyService } from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import { AuditService } from "../../gen/traitgate/admin/v1/audit_pb.js";
import {
  GatewayService,
  OperatorAllowlistService,
  PluginRegistryService,
} from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { ServiceAccountAdminService } from "../../gen/traitgate/identity/v1/service_accounts_pb.js";
import { UserAdminService } from "../../gen/traitgate/identity/v1/user_admin_pb.js";
import { PolicyService } from "../../gen/traitgate/policy/v1/policy_pb.js";
import { SearchService } from "../../gen/traitgate/search/v1/search_pb.js";
import { SettingsService } from "../../gen/traitgate/settings/v1/settings_pb.js";
import { apiKeyAuthRules } from "../apikeys/module.js";
import { auditQueryAuthRules } from "../audit/query-service.js";
import { gatewayAuthRules } from "../gateway/module.js";
import { identityAuthRules } from "../identity/module.js";
import { tokenFormOpenApi } from "../identity/oauth-token-form.js";
import { serviceAccountAdminAuthRules } from "../identity/service-accounts-service.js";
import { userAdminAuthRules } from "../identity/user-admin-service.js";
import { policyAuthRules } from "../policy/module.js";
import { searchAuthRules } from "../search/module.js";
import type { AuthRule } from "../server/interceptors.js";
import { settingsAuthRules } from "../settings/module.js";

/**
 * The services the core serves (src/platform.ts) and how each method is protected: what
 * gen/openapi.json describes. The RAG plugin's own service (traitgate.rag.v1) runs in the
 * plugin's process and is not part of the core's API. test/integration/openapi-routes.test.ts
 * checks both lists against a running core.
 */
export const coreServices: readonly DescService[] = [
  IdentityService,
  ServiceAccountAdminService,
  UserAdminService,
  ApiKeyService,
  AuditService,
  SettingsService,
  PolicyService,
  PluginRegistryService,
  OperatorAllowlistService,
  GatewayService,
  SearchService,
];

export const coreAuthRules: ReadonlyMap<string, AuthRule> = new Map([
  ...identityAuthRules,
  ...serviceAccountAdminAuthRules,
  ...userAdminAuthRules,
  ...apiKeyAuthRules,
  ...auditQueryAuthRules,
  ...settingsAuthRules,
  ...policyAuthRules,
  ...gatewayAuthRules,
  ...searchAuthRules,
]);

/** Bodies the core takes besides JSON: the form-encoded OAuth token request. */
export const coreOtherRequestContent: ReadonlyMap<string, JsonObject> = new Map([
  [`${IdentityService.typeName}/Token`, tokenFormOpenApi],
]);
