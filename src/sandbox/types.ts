/** Where and how a run's processes execute. Adapters never spawn directly: they go through an executor. */
import type { LineLimits, OutputLine } from './line-queue.js';

/** How much a workspace is shared: one per run, one per agent, one per agent and user, or the parent run's. */
export type WorkspaceScope = 'run' | 'agent' | 'agent-user' | 'parent';

import type { NetworkPolicy } from '../contracts/network.js';

/** Network posture a provider must enforce or refuse (contracts/network.ts; docs/network.md). */
export type { NetworkPolicy };

export interface SandboxSpec {
  readonly provider: string;
  readonly workspaceScope: WorkspaceScope;
  readonly networkPolicy: NetworkPolicy;
  /** Provider-specific limits (memory, cpus, pids, image, ...). */
  readonly options?: Readonly<Record<string, unknown>>;
  /** Shared scopes (`agent`, `agent-user`): a second run waits for the workspace (default) or is refused. */
  readonly concurrentRuns?: 'wait' | 'refuse';
}

/** Who the run belongs to, from trusted authentication (never model output). */
export interface RunIdentity {
  readonly tenantId: string;
  readonly userId: string;
}

/** Small, serializable reference to a live sandbox; lives in workflow state between activities. */
export interface SandboxRef {
  readonly provider: string;
  /** Workspace as the harness sees it (host path for local, container path for docker). */
  readonly workspacePath: string;
  /** Workspace on the worker's host, for providers that bind-mount it. */
  readonly hostWorkspacePath: string;
  /** Provider-specific id (container id for docker). */
  readonly id?: string;
  /** Provider-specific settings frozen at start (e.g. the local provider's containment and user). */
  readonly settings?: Readonly<Record<string, string>>;
  /**
   * The task queue of the worker that holds this workspace (`<queue>@<host id>`), for providers whose workspace
   * lives on one worker's disk; every activity that touches the workspace runs there (docs/multi-host.md).
   */
  readonly hostQueue?: string;
  /**
   * The run's egress gateway, for policies that go through one (`vendor`, `allowlist`): the Unix socket on the
   * worker's host where the worker's gateway must listen, and the port the sandbox's forwarder listens on. Absent: no
   * gateway (and in refs of runs started before it).
   */
  readonly gateway?: { readonly socket: string; readonly port: number };
}

export interface SandboxStartRequest {
  readonly workflowId: string;
  readonly runId: string;
  readonly agent: string;
  readonly identity: RunIdentity;
  readonly spec: SandboxSpec;
}

/** One process to start: argv only, never a shell string. */
export interface ExecRequest {
  readonly argv: readonly string[];
  /** Working directory as the harness sees it; defaults to the workspace. */
  readonly cwd?: string;
  /** The complete environment extra to the provider's minimal PATH/HOME; secrets only arrive here. */
  readonly env?: Readonly<Record<string, string>>;
  /** Text written to stdin; stdin is closed after it unless keepStdinOpen. `undefined` = stdin ignored. */
  readonly stdin?: string;
  readonly keepStdinOpen?: boolean;
  readonly signal?: AbortSignal;
  /** Grace between SIGTERM and SIGKILL when the signal aborts. */
  readonly killGraceMs?: number;
  /** How long a stdout line may grow before it is streamed past (default `defaultLineLimits`). */
  readonly lineLimits?: LineLimits;
}

/** How `ExecProcess.kill` ends a process tree. */
export interface KillOptions {
  /** Grace between SIGTERM and SIGKILL; default the executor's. 0: no grace (a stop that must not spend more). */
  readonly graceMs?: number;
}

/** A started process: line-oriented stdout, collected stderr, exit. */
export interface ExecProcess {
  /** stdout, split into lines (without the trailing newline); lines over their cap are skipped. */
  readonly lines: AsyncIterable<string>;
  /**
   * The same stdout (one reader: this or `lines`), with a line over its cap as an `OversizedLine`. It ends when the
   * process closes its stdout — which may be before it exits.
   */
  readonly output?: AsyncIterable<OutputLine>;
  /** Resolves when the process has exited and its output is drained. */
  readonly exit: Promise<{ code: number | null; signal: string | null }>;
  /** The last part of stderr seen so far (bounded). */
  stderrTail(): string;
  /** Writes to stdin (for two-way protocols). */
  write(text: string): void;
  /** Closes stdin (end of input for a two-way protocol); a no-op when it is not open. */
  closeStdin?(): void;
  /**
   * Kills the whole process tree: SIGTERM, then SIGKILL after the grace period. Idempotent. `graceMs: 0` sends
   * SIGKILL at once — also to a tree whose graceful kill is already under way.
   */
  kill(options?: KillOptions): Promise<void>;
  /** OS pid on the executing host, where known. */
  readonly pid?: number;
}

export interface SandboxExecutor {
  exec(request: ExecRequest): ExecProcess;
}

/** The kind of a workspace entry; a link is reported as `symlink`, never followed. */
export type SandboxEntryType = 'file' | 'directory' | 'symlink' | 'other';

/**
 * The workspace's files, read and written where the sandbox is (inside the container, as its user, for
 * Docker). Paths are relative to the workspace. No operation follows a symbolic link or resolves a path twice
 * (no check-then-open); failures are `SandboxFsError`s whose messages name workspace-relative paths only.
 */
export interface SandboxFs {
  /** The entry's type and size, or `undefined` when it does not exist. */
  stat(path: string): Promise<{ readonly type: SandboxEntryType; readonly size: number } | undefined>;
  /** At most `maxBytes` (default and ceiling 16 MiB) of a regular file, and the file's full size. */
  readFile(path: string, options?: { readonly maxBytes?: number }): Promise<{ readonly data: Buffer; readonly size: number }>;
  /** Creates or replaces a regular file; `createParents` creates missing directories on the way. */
  writeFile(path: string, data: string | Uint8Array, options?: { readonly createParents?: boolean; readonly mode?: number }): Promise<{ readonly bytes: number }>;
  /** A directory's entries, sorted by name. */
  list(path: string): Promise<readonly { readonly name: string; readonly type: SandboxEntryType }[]>;
  /** Creates a directory; `recursive` also creates parents and accepts an existing directory. */
  mkdir(path: string, options?: { readonly recursive?: boolean }): Promise<void>;
}

/** A live sandbox inside one activity. */
export interface SandboxHandle {
  readonly ref: SandboxRef;
  readonly executor: SandboxExecutor;
  /** The workspace's files; actions and adapters use this, never a host path. */
  readonly fs: SandboxFs;
  /**
   * Kills every process a turn left in this sandbox — descendants that started their own session or
   * double-forked included — without trusting anything the harness can write. Called after each turn and
   * before a retried attempt.
   */
  killLeftovers(): Promise<void>;
  /** Releases per-activity resources (not the sandbox itself: that is `SandboxProvider.end`). */
  release(): Promise<void>;
}

/** Creates, reattaches and removes sandboxes. `start` and `end` are idempotent. */
export interface SandboxProvider {
  readonly name: string;
  /**
   * True when the workspace lives on the worker's own disk (the local provider): the run is then pinned to the
   * worker that started it. Docker on a shared engine is not host-bound.
   */
  readonly hostBound?: boolean;
  /** Whether this provider really enforces the policy; providers refuse or warn, never pretend. */
  enforces(policy: NetworkPolicy): 'enforced' | 'advisory' | 'refused';
  /** Why `enforces(policy)` is `refused`, and what to do instead: the message an operator reads. */
  refusalOf(policy: NetworkPolicy): string;
  start(request: SandboxStartRequest): Promise<SandboxRef>;
  attach(ref: SandboxRef): Promise<SandboxHandle>;
  end(ref: SandboxRef): Promise<void>;
}
