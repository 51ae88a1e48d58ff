/** Sandboxes: where a run's processes execute. A Docker provider will live beside the local one. */
export type * from './types.js';
export { LocalSandboxProvider, pidFileFor } from './local-provider.js';
export type { LocalSandboxHandle, LocalSandboxProviderOptions } from './local-provider.js';
export { LocalExecutor, LocalProcess, minimalPath } from './local-executor.js';
export type { LocalExecutorOptions, LocalExit } from './local-executor.js';
export { defaultPidFile, killStaleProcessGroup, processGroupAlive } from './pidfile.js';
export { resolveInside, safeSegment, workspaceDirFor } from './workspace.js';
export { LineQueue } from './line-queue.js';
