/** The local-directory sandbox provider: a workspace directory on the worker's host, for development. */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { LocalExecutor } from './local-executor.js';
import type { Spawner } from './spawner.js';
import { defaultPidFile, killStaleProcessGroup } from './pidfile.js';
import { safeSegment, workspaceDirFor } from './workspace.js';
import type { NetworkPolicy, SandboxHandle, SandboxProvider, SandboxRef, SandboxStartRequest } from './types.js';

/** Options of the local provider. */
export interface LocalSandboxProviderOptions {
  /** Absolute directory holding all workspaces (the caller resolves the default `.data/workspaces`). */
  readonly root: string;
  /** Grace between SIGTERM and SIGKILL for processes it starts. */
  readonly killGraceMs?: number;
  /** How processes are started (src/sandbox/spawner.ts); default `child_process.spawn` on the calling thread. */
  readonly spawner?: Spawner;
}

/** A live local sandbox: the handle plus where its turn process group is recorded. */
export interface LocalSandboxHandle extends SandboxHandle {
  readonly executor: LocalExecutor;
  /** Pidfile of the running turn; pass it to `killStaleProcessGroup` before a retried attempt. */
  readonly pidFile: string;
}

/**
 * Where a run's turn process group is recorded. Shared workspaces (`agent`, `agent-user` scopes) can host
 * several runs at once, so the file is named after the run when the ref carries one; otherwise it is
 * `<workspace>/.durable-harness/turn.pid`.
 */
export function pidFileFor(ref: SandboxRef): string {
  if (ref.id === undefined) return defaultPidFile(ref.hostWorkspacePath);
  return path.join(ref.hostWorkspacePath, '.durable-harness', `turn-${safeSegment(ref.id, 'sandbox id')}.pid`);
}

/** Workspaces as plain directories under `root`; processes run directly on the host. */
export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local';
  private readonly root: string;

  constructor(private readonly options: LocalSandboxProviderOptions) {
    this.root = path.resolve(options.root);
  }

  /**
   * Local processes share the host's network, so only `open` is really what they get. `mcp-only` is a
   * request we can pass on but not enforce (advisory). `none` is refused: claiming isolation we cannot give
   * is worse than refusing, and the Docker provider enforces it for real.
   */
  enforces(policy: NetworkPolicy): 'enforced' | 'advisory' | 'refused' {
    switch (policy) {
      case 'open':
        return 'enforced';
      case 'mcp-only':
        return 'advisory';
      case 'none':
        return 'refused';
      default: {
        const never: never = policy;
        throw new Error(`Unknown network policy ${JSON.stringify(never)}; use none, open or mcp-only.`);
      }
    }
  }

  /** Creates the scope's workspace directory (idempotent) and returns its reference. */
  async start(request: SandboxStartRequest): Promise<SandboxRef> {
    const dir = workspaceDirFor(this.root, request.spec.workspaceScope, request);
    await mkdir(dir, { recursive: true });
    return { provider: this.name, workspacePath: dir, hostWorkspacePath: dir, id: safeSegment(request.workflowId, 'workflow id') };
  }

  /** Returns a handle whose executor runs processes in the workspace. */
  async attach(ref: SandboxRef): Promise<LocalSandboxHandle> {
    this.checkRef(ref);
    await mkdir(ref.hostWorkspacePath, { recursive: true });
    const pidFile = pidFileFor(ref);
    const executor = new LocalExecutor({ workspacePath: ref.hostWorkspacePath, pidFile, killGraceMs: this.options.killGraceMs, spawner: this.options.spawner });
    return { ref, executor, pidFile, release: () => executor.killAll() };
  }

  /**
   * Ends the sandbox: kills a turn process group that may still be running, and keeps the files
   * (workspaces stay for inspection; agent-scoped ones are reused). Idempotent.
   */
  async end(ref: SandboxRef): Promise<void> {
    this.checkRef(ref);
    await killStaleProcessGroup(pidFileFor(ref));
  }

  /** Refuses refs from another provider or outside this provider's root: a ref is data and may be stale. */
  private checkRef(ref: SandboxRef): void {
    if (ref.provider !== this.name) {
      throw new Error(`Sandbox ref belongs to provider "${ref.provider}", not "${this.name}"; attach it with that provider.`);
    }
    const rel = path.relative(this.root, path.resolve(ref.hostWorkspacePath));
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      throw new Error(`Sandbox workspace ${ref.hostWorkspacePath} is not inside the local root ${this.root}.`);
    }
  }
}
