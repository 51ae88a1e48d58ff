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
  TurnFailed: 'TurnFailed',
  /** `strict` (or permission rules) on a harness that cannot ask before a tool runs, without `advisory: true`. */
  PermissionHooksMissing: 'PermissionHooksMissing',
} as const;

export type FailureType = (typeof FailureTypes)[keyof typeof FailureTypes];
