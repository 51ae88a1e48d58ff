/** Sandboxes: where a run's processes execute — a local directory (dev) or a Docker container per run. */
export type * from './types.js';
export { LocalSandboxProvider, pidFileFor } from './local-provider.js';
export type { LocalSandboxHandle, LocalSandboxProviderOptions } from './local-provider.js';
export { LocalExecutor, LocalProcess, minimalPath } from './local-executor.js';
export type { LocalExecutorOptions, LocalExit } from './local-executor.js';
export { defaultPidFile, killStaleProcessGroup, processGroupAlive } from './pidfile.js';
export { PathEscapeError, resolveInside, safeSegment, workspaceDirFor, type ResolveInsideOptions } from './workspace.js';
export { LineQueue } from './line-queue.js';
export { SpawnPool, directSpawner, spawnModeFromEnv, spawnModes, spawnerFor, type SpawnMode, type Spawner } from './spawner.js';
export { DockerSandboxProvider, reapContainers, temporalRunClosed, dockerSandboxFromEnvironment, containerNameFor, dockerLabels } from './docker-provider.js';
export type { DockerSandboxProviderOptions, DockerSandboxLimits, DockerSandboxHandle, ReapOptions, ReapResult } from './docker-provider.js';
export { DockerExecutor, DockerProcess } from './docker-executor.js';
export * from './docker-errors.js';
