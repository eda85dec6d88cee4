import type { DescFile } from "@bufbuild/protobuf";
import { file_traitgate_admin_v1_api_keys } from "../../gen/traitgate/admin/v1/api_keys_pb.js";
import { file_traitgate_admin_v1_audit } from "../../gen/traitgate/admin/v1/audit_pb.js";
import { file_traitgate_gateway_v1_gateway } from "../../gen/traitgate/gateway/v1/gateway_pb.js";
import { file_traitgate_identity_v1_identity } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { file_traitgate_identity_v1_service_accounts } from "../../gen/traitgate/identity/v1/service_accounts_pb.js";
import { file_traitgate_identity_v1_user_admin } from "../../gen/traitgate/identity/v1/user_admin_pb.js";
import { file_traitgate_policy_v1_policy } from "../../gen/traitgate/policy/v1/policy_pb.js";
import { file_traitgate_rag_v1_rag } from "../../gen/traitgate/rag/v1/rag_pb.js";
import { file_traitgate_search_v1_search } from "../../gen/traitgate/search/v1/search_pb.js";
import { file_traitgate_settings_v1_settings } from "../../gen/traitgate/settings/v1/settings_pb.js";

/** The proto files of the services the platform serves (their request and response messages). */
export const serviceSchemaFiles: readonly DescFile[] = [
  file_traitgate_admin_v1_api_keys,
  file_traitgate_admin_v1_audit,
  file_traitgate_gateway_v1_gateway,
  file_traitgate_identity_v1_identity,
  file_traitgate_identity_v1_service_accounts,
  file_traitgate_identity_v1_user_admin,
  file_traitgate_policy_v1_policy,
  file_traitgate_rag_v1_rag,
  file_traitgate_search_v1_search,
  file_traitgate_settings_v1_settings,
];
