/**
 * Every stable failure type a run can end with — one list, shared by the workflow, the activities and the command
 * line, so they cannot drift. `configuration: true` marks what an operator fixes in the catalog or the worker's
 * setup, not by running again: `run` and `status` exit 2 for those (src/cli/exit-codes.ts). Pure: safe in workflows.
 */
export const failureTypes = {
  // ---- the catalog, the worker's setup, the run's input: configuration --------------------------------------------
  UnknownAgent: { configuration: true },
  UnknownHarness: { configuration: true },
  InactiveHarness: { configuration: true },
  UnknownDriver: { configuration: true },
  /** The catalog file itself is broken. */
  CatalogInvalid: { configuration: true },
  HarnessBinaryMissing: { configuration: true },
  CredentialMissing: { configuration: true },
  /** A prompt, model or vendor id of the turn does not resolve to a catalog entry in the ledger. */
  AccountingUnresolved: { configuration: true },
  SandboxProviderUnknown: { configuration: true },
  SandboxPolicyRefused: { configuration: true },
  SandboxImageMissing: { configuration: true },
  /** The local provider cannot give the containment or sandbox user asked for (PID namespace, uid switch). */
  SandboxIsolationUnavailable: { configuration: true },
  /** `workspaceScope: parent` outside a sub-agent run. */
  WorkspaceScopeInvalid: { configuration: true },
  /** `strict` (or permission rules) on a harness that cannot ask before a tool runs, without `advisory: true`. */
  PermissionHooksMissing: { configuration: true },
  /** The agent has the MCP loopback on, but its harness's driver cannot take it (no `mcpClient`, e.g. Pi). */
  McpClientMissing: { configuration: true },
  /**
   * The run's repository cannot be used as asked: a source the agent does not allow or the worker cannot fetch, a ref
   * with no commit, a start input asking for a repository the agent has none of (docs/repositories.md).
   */
  RepositoryInvalid: { configuration: true },
  /** The worker's ledger file was deleted or replaced under it, or is read-only: fix the worker's data directory. */
  LedgerMissing: { configuration: true },
  LedgerReplaced: { configuration: true },
  LedgerReadOnly: { configuration: true },
  /** A worker joined a task queue whose other workers load a different catalog. */
  CatalogMismatch: { configuration: true },
  /** The run names a `workflowVersion` this worker does not run (a retired one, or a newer release's). */
  WorkflowVersionUnknown: { configuration: true },

  // ---- the sandbox and the turn ----------------------------------------------------------------------------------
  DockerUnavailable: { configuration: false },
  SandboxContainerGone: { configuration: false },
  TurnFailed: { configuration: false },
  /** The harness forgot its session and then refused a fresh one. */
  ResumeFailed: { configuration: false },
  /** A claim-checked text or frozen spec is missing from the blob store. */
  BlobMissing: { configuration: false },
  /** The ledger cannot be reached (its database is down): retried. */
  LedgerUnavailable: { configuration: false },
  /** The ledger lacks a row the run recorded earlier (e.g. the envelope whose actions are to run). */
  LedgerInconsistent: { configuration: false },
  /** A shared workspace (agent, agent-user scope) is in use by another open run (`sandbox.concurrentRuns`). */
  WorkspaceBusy: { configuration: false },
  /** The run's workspace is not on this worker (gone, or on another host): never replaced by an empty one. */
  WorkspaceMissing: { configuration: false },
  /** The run's repository remote could not be reached or failed on its side (network, 5xx, a fetch that hung): retried. */
  RepositoryUnreachable: { configuration: false },

  // ---- permission decisions (updates and the approvals activity) -------------------------------------------------
  ApprovalUnknown: { configuration: false },
  ApprovalAlreadyDecided: { configuration: false },
  ApprovalEditInvalid: { configuration: false },
  /** An update the run's state refuses now (e.g. `retry` of a run that is not awaiting an operator). */
  RunStateChanged: { configuration: false },

  // ---- operator decisions that do not count (src/operators/decision.ts) ------------------------------------------
  DecisionUnsigned: { configuration: false },
  DecisionSignatureInvalid: { configuration: false },
  DecisionOperatorUnknown: { configuration: false },
  DecisionRoleMissing: { configuration: false },
  DecisionExpired: { configuration: false },
  DecisionMismatch: { configuration: false },
  DecisionReplayed: { configuration: false },
  DecisionRefused: { configuration: false },

  // ---- how the run loop ends a run -------------------------------------------------------------------------------
  /** The harness said it cannot do the task (`failed` step). */
  HarnessReportedFailure: { configuration: false },
  /** More malformed envelopes in a row than `maxMalformedTurns`. */
  MalformedEnvelope: { configuration: false },
  /** A sub-agent ended without a result of its own (terminated, timed out). */
  SubAgentFailed: { configuration: false },
  /** Nobody answered the chat step within `chatTimeoutMs`. */
  ChatTimeout: { configuration: false },
  /** Nobody decided an `awaiting_operator` run within `operatorTimeoutMs`. */
  OperatorTimeout: { configuration: false },
  /** An operator abandoned the run. */
  Abandoned: { configuration: false },
  /** A bug in the run loop (the reason says what happened). */
  InternalError: { configuration: false },
  /** A failed run without a type of its own. */
  RunFailed: { configuration: false },
  /** The workflow failure of a run a guardrail stopped (docs/OUTCOMES.md). */
  GuardrailStopped: { configuration: false },
  /** The workflow failure of a run cancelled by the signal alone, without Temporal's cancel request. */
  Cancelled: { configuration: false },
} as const satisfies Record<string, { readonly configuration: boolean }>;

export type FailureType = keyof typeof failureTypes;

/** The types by name, for throw sites and matches: `FailureTypes.UnknownAgent === 'UnknownAgent'`. */
export const FailureTypes = Object.fromEntries(Object.keys(failureTypes).map((type) => [type, type])) as { readonly [T in FailureType]: T };

/** Whether a failure type is one an operator fixes in the configuration (unknown types are not). */
export function isConfigurationFailure(type: string | undefined): boolean {
  return type !== undefined && Object.hasOwn(failureTypes, type) && failureTypes[type as FailureType].configuration;
}
