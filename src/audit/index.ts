export { canonicalEvent, canonicalJson, chainHash, eventHash, genesisHash } from "./canonical.js";
export {
  type Checkpoint,
  checkpointAction,
  checkpointJson,
  checkSignature,
  parseCheckpoint,
  signCheckpoint,
} from "./checkpoint.js";
export {
  type CheckpointReport,
  createCheckpointCheck,
  type ExpectedHead,
} from "./checkpoint-check.js";
export {
  type CheckpointKeys,
  type CheckpointPublicKey,
  type CheckpointSigningKey,
  checkpointKeyId,
  checkpointKeysFrom,
  ensureDemoCheckpointKey,
} from "./checkpoint-keys.js";
export {
  type AuditCheckpoints,
  type CheckpointTrigger,
  createAuditCheckpoints,
} from "./checkpointer.js";
export {
  type AuditVerifyArgs,
  type AuditVerifyCommandOptions,
  parseAuditVerifyArgs,
  runAuditVerifyCommand,
} from "./command.js";
export {
  batchDecisionId,
  createDecisionRecorder,
  type DecisionInputs,
  type DecisionOutcome,
  type DecisionRecorder,
  decisionAction,
  decisionBatchAction,
  decisionRefs,
  expandDecisionDetails,
} from "./decision-record.js";
export { isSensitiveKey, type JsonObject, type JsonValue, redacted } from "./details.js";
export {
  type ActorType,
  type AuditEventInput,
  type AuditedRequest,
  type AuditRecord,
  actorTypes,
  type Outcome,
  outcomes,
  type RequestOrigin,
  requestFields,
} from "./event.js";
export {
  type AuditExportOptions,
  exportLine,
  type LineSink,
  parseAuditExportArgs,
  runAuditExport,
} from "./export-command.js";
export {
  type AuditEventFilter,
  type AuditEventRow,
  type AuditQuery,
  createAuditQuery,
  readAuditEvents,
} from "./query.js";
export { AuditService, createAuditQueryModule } from "./query-service.js";
export {
  createRefusalSampler,
  type RefusalSampler,
  type RefusalSamplerOptions,
  type RefusalSummary,
} from "./refusal-sampler.js";
export {
  auditRefusedCalls,
  type RefusedCallsAudit,
  refusedCallOrigin,
  singleTarget,
  summaryDetails,
  summaryFailed,
} from "./refused-calls.js";
export { type AppendedEvent, auditChainLockKey } from "./store.js";
export {
  type AuditChainReport,
  type BrokenEvent,
  type BrokenReason,
  type VerifyOptions,
  verifyAuditChain,
} from "./verify.js";
export {
  type AuditClock,
  type AuditWriter,
  type AuditWriterOptions,
  type AuditWriterStats,
  createAuditWriter,
} from "./writer.js";
