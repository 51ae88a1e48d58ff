/** Sandboxes: where a run's processes execute — a local directory (dev) or a Docker container per run. */
export type * from './types.js';
export { LocalSandboxProvider, WorkspaceMissingError } from './local-provider.js';
export type { LocalSandboxHandle, LocalSandboxProviderOptions } from './local-provider.js';
export { LocalExecutor, LocalProcess, minimalPath } from './local-executor.js';
export type { LocalExecutorOptions, LocalExit } from './local-executor.js';
export {
  SandboxIsolationUnavailable,
  checkIsolation,
  killRecordedTurn,
  parseLocalIsolation,
  processGroupAlive,
  type ContainmentTools,
  type LocalContainment,
  type LocalIsolation,
} from './local-containment.js';
export { safeSegment, workspaceDirFor } from './workspace.js';
export {
  LocalWorkspaceFs,
  PathEscapeError,
  SandboxFsError,
  chownDirectoryNoFollow,
  maxReadBytes,
  mkdirWorkspaceSync,
  readWorkspaceFileSync,
  writeWorkspaceFileSync,
  type SandboxFsErrorCode,
} from './workspace-fs.js';
export { LineQueue, OversizedLine, defaultLineLimits, oversizedOpeningBytes, type LineLimits, type LineQueueOptions, type OutputLine } from './line-queue.js';
export { DockerSandboxProvider, reapContainers, temporalRunClosed, dockerSandboxFromEnvironment, containerNameFor, dockerLabels, defaultDeployment } from './docker-provider.js';
export type { DockerSandboxProviderOptions, DockerSandboxLimits, DockerSandboxHandle, ReapOptions, ReapResult } from './docker-provider.js';
export { DockerExecutor, DockerProcess } from './docker-executor.js';
export { DockerWorkspaceFs } from './docker-fs.js';
export * from './docker-errors.js';
