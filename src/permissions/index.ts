/** Permission requests and answers, the agent's policy, the per-turn gate and the durable approval broker. */
export * from './types.js';
export * from './policy.js';
export { OVER_CAP_DECIDER, approvalIdFor, applyEdit, canonicalJson, createPermissionGate } from './gate.js';
export type { PermissionGateOptions } from './gate.js';
export { answerOf, ledgerApprovalBroker } from './ledger-broker.js';
export type { LedgerApprovalBrokerOptions } from './ledger-broker.js';
export { ApprovalDecisionError, decidePendingApproval } from './decide.js';
export { ApprovalWakeups } from './wakeups.js';
export type { ApprovalWaiter } from './wakeups.js';
export type { OperatorDecision } from './decide.js';
export { DETAIL_CHARS, approvalDetail } from './detail.js';
