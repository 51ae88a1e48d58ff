/** Stable `ApplicationFailure` types: the workflow, the client and operators match on these strings. */
export const FailureTypes = {
  UnknownAgent: 'UnknownAgent',
  UnknownHarness: 'UnknownHarness',
  InactiveHarness: 'InactiveHarness',
  UnknownDriver: 'UnknownDriver',
  HarnessBinaryMissing: 'HarnessBinaryMissing',
  CredentialMissing: 'CredentialMissing',
  AccountingUnresolved: 'AccountingUnresolved',
  SandboxProviderUnknown: 'SandboxProviderUnknown',
  SandboxPolicyRefused: 'SandboxPolicyRefused',
  DockerUnavailable: 'DockerUnavailable',
  SandboxImageMissing: 'SandboxImageMissing',
  SandboxContainerGone: 'SandboxContainerGone',
  /** The local provider cannot give the containment or sandbox user asked for (PID namespace, uid switch). */
  SandboxIsolationUnavailable: 'SandboxIsolationUnavailable',
  TurnFailed: 'TurnFailed',
  /** The harness forgot its session and then refused a fresh one. */
  ResumeFailed: 'ResumeFailed',
  /** A claim-checked text or frozen spec is missing from the blob store. */
  BlobMissing: 'BlobMissing',
  /** The ledger lacks a row the run recorded earlier (e.g. the envelope whose actions are to run). */
  LedgerInconsistent: 'LedgerInconsistent',
  /** The run's workspace is not on this worker (gone, or on another host): never replaced by an empty one. */
  WorkspaceMissing: 'WorkspaceMissing',
  /**
   * A pinned turn tried on the workflow's queue (for eager dispatch) reached a worker that is not its host: nothing
   * ran; the workflow sends the turn to its host queue (src/workflows/affinity.ts `turnElsewhereType`).
   */
  TurnElsewhere: 'TurnElsewhere',
  /** `workspaceScope: parent` outside a sub-agent run. */
  WorkspaceScopeInvalid: 'WorkspaceScopeInvalid',
  /** `strict` (or permission rules) on a harness that cannot ask before a tool runs, without `advisory: true`. */
  PermissionHooksMissing: 'PermissionHooksMissing',
} as const;

export type FailureType = (typeof FailureTypes)[keyof typeof FailureTypes];
