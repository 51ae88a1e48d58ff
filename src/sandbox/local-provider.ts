/**
 * The local-directory sandbox provider: a workspace directory on the worker's host, for development. Each
 * process gets its own PID namespace (every descendant dies with it) and, with `sandbox.options.user`, runs
 * as an unprivileged user; see local-containment.ts and docs/SECURITY.md for what it does and does not isolate.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import {
  SandboxIsolationUnavailable,
  checkIsolation,
  defaultTools,
  wrapArgv,
  isolationSettings,
  killRecordedTurn,
  parseLocalIsolation,
  type ContainmentTools,
  type LocalIsolation,
} from './local-containment.js';
import { LocalExecutor } from './local-executor.js';
import { gatewayPort, gatewaySocketFor } from './forwarder.js';
import { usesGateway } from '../contracts/network.js';
import { safeSegment, workspaceDirFor } from './workspace.js';
import { chmodDirectoryNoFollow, chownDirectoryNoFollow, LocalWorkspaceFs, mkdirWorkspaceSync } from './workspace-fs.js';
import { protectWorkspacePath } from './data-dir.js';
import { checkSharedUid, parseUidRange, ScopeUids } from './scope-users.js';
import type { NetworkPolicy, SandboxHandle, SandboxProvider, SandboxRef, SandboxStartRequest } from './types.js';

/** Options of the local provider. */
export interface LocalSandboxProviderOptions {
  /** Absolute directory holding all workspaces (the caller resolves the default `.data/workspaces`). */
  readonly root: string;
  /**
   * Where runtime state (the running turn's pid and start time) is kept: never inside a workspace, so nothing a
   * harness or an action writes can name a process to kill. Default: `runtime/local` beside `root`.
   */
  readonly runtimeDir?: string;
  /** Grace between SIGTERM and SIGKILL for processes it starts. */
  readonly killGraceMs?: number;
  /** How the containment helper is built (tests point the compiler elsewhere to see a missing mechanism refused). */
  readonly tools?: ContainmentTools;
  /** Where the runs' gateway sockets live (default `gateway` beside the runtime directory's `local`). */
  readonly gatewayRoot?: string;
  /**
   * Whether a harness may share the host's network (policy `open`). A deployment with signed
   * decisions says no: on the host's network a harness reaches the worker's loopback services — Temporal, the
   * ledger, the codec server — and could act on its own run. Default: allowed.
   */
  readonly hostNetwork?: 'allowed' | 'refused';
}

/** A live local sandbox: the handle plus where its running turn is recorded. */
export interface LocalSandboxHandle extends SandboxHandle {
  readonly executor: LocalExecutor;
  readonly fs: LocalWorkspaceFs;
  /** The runtime state file of this sandbox's running turn. */
  readonly stateFile: string;
}

/**
 * The run's workspace is not on this worker: its directory is gone, or the ref names another worker's root. A
 * turn is never run in a fresh, empty directory instead (code `WorkspaceMissing`, a permanent failure).
 */
export class WorkspaceMissingError extends Error {
  override readonly name = 'WorkspaceMissingError';
  readonly code = 'WorkspaceMissing' as const;
}

const isRootWorker = (): boolean => typeof process.geteuid === 'function' && process.geteuid() === 0;

const reachable = new Set<string>();

/**
 * Throws unless the sandbox user can enter and write `dir` (every directory above it must be searchable). Probed once
 * per parent directory, not per workspace: the workspace itself was just made the user's own (0700), and every
 * sandbox user is "other" to the directories above (its own uid and gid, no supplementary groups), so what the probe
 * finds holds for every workspace beside it — and the probe is a synchronous spawn on the worker's event loop.
 */
function checkReachable(dir: string, isolation: LocalIsolation, tools: ContainmentTools): void {
  const key = path.dirname(dir);
  if (reachable.has(key)) return;
  const probe = wrapArgv({ containment: 'process-group', user: isolation.user }, ['/bin/sh', '-c', 'cd "$1" && test -w .', 'sh', dir], tools);
  const result = spawnSync(probe[0]!, probe.slice(1), { stdio: 'ignore', timeout: 10_000, env: { PATH: '/usr/bin:/bin' } });
  if (result.status !== 0) {
    throw new SandboxIsolationUnavailable(
      `Workspace ${dir} is not reachable by the sandbox user ${isolation.user?.uid}:${isolation.user?.gid}: every directory above it must be searchable by others (chmod o+x), e.g. the data directory.`,
    );
  }
  reachable.add(key);
}

/** Workspaces as plain directories under `root`; processes run on the host, each in its own PID namespace. */
export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local';
  /** Workspaces are directories on this worker's disk: runs are pinned to this worker (docs/multi-host.md). */
  readonly hostBound = true;
  /** The directory holding all workspaces (the worker keeps it traverse-only: src/sandbox/data-dir.ts). */
  readonly workspaceRoot: string;
  private readonly runtimeDir: string;
  /** The directory of the runs' gateway sockets (root-only: the forwarder runs as the worker's user). */
  readonly gatewayRoot: string;
  private readonly tools: ContainmentTools;
  /** Uids of workspaces under `sandbox.options.userRange`, kept in the runtime directory. */
  private readonly uids: ScopeUids;


  constructor(private readonly options: LocalSandboxProviderOptions) {
    this.workspaceRoot = path.resolve(options.root);
    this.runtimeDir = path.resolve(options.runtimeDir ?? path.join(path.dirname(this.workspaceRoot), 'runtime', 'local'));
    this.tools = options.tools ?? defaultTools;
    this.gatewayRoot = path.resolve(options.gatewayRoot ?? path.join(path.dirname(this.runtimeDir), 'gateway'));
    this.uids = new ScopeUids(this.runtimeDir);
  }

  /**
   * `none`: enforced — a network namespace per process with only its own loopback. `vendor` and `allowlist`: the
   * same namespace, whose only way out is the forwarder to the run's egress gateway; it needs a root worker (the
   * namespace's loopback needs CAP_NET_ADMIN there, and the forwarder must run as a user the harness cannot signal).
   * `open`: the host's network, enforced (it is what the process gets), refused where `hostNetwork` is `refused`.
   */
  enforces(policy: NetworkPolicy): 'enforced' | 'advisory' | 'refused' {
    switch (policy) {
      case 'none':
        return 'enforced';
      case 'vendor':
      case 'allowlist':
        return isRootWorker() ? 'enforced' : 'refused';
      case 'open':
        return this.options.hostNetwork === 'refused' ? 'refused' : 'enforced';
      default: {
        const never: never = policy;
        throw new Error(`Unknown network policy ${JSON.stringify(never)}; use none, vendor, allowlist or open.`);
      }
    }
  }

  refusalOf(policy: NetworkPolicy): string {
    if (policy === 'vendor' || policy === 'allowlist') {
      return (
        `The local sandbox gives network policy "${policy}" only on a worker running as root (this one runs as uid ${process.geteuid?.()}): ` +
        "the sandbox's own network namespace needs its loopback brought up, and the forwarder to the run's egress gateway must run as a user the harness cannot signal. " +
        'Run the worker as root, use the docker provider, or set networkPolicy "none" (no network) or "open" (the host\'s network: development only) for the agent.'
      );
    }
    return (
      `The local sandbox cannot give network policy "${policy}" where operator decisions are signed: it would share the host's network, ` +
      "where the harness reaches the worker's Temporal server, ledger and codec server and could act on its own run. " +
      'Use networkPolicy "none" (a loopback-only network namespace), "vendor" for a harness that needs its model API (through the egress gateway), ' +
      'or DURABLE_HARNESS_DECISIONS=trusted-network on a host where every process is trusted.'
    );
  }

  /**
   * Creates the scope's workspace directory (idempotent) and returns its reference. Refuses
   * (`SandboxIsolationUnavailable`) when this machine cannot give the containment or user asked for.
   */
  async start(request: SandboxStartRequest): Promise<SandboxRef> {
    if (this.enforces(request.spec.networkPolicy) === 'refused') throw new SandboxIsolationUnavailable(this.refusalOf(request.spec.networkPolicy));
    checkSharedUid(request.spec.workspaceScope, request.spec.options);
    const dir = workspaceDirFor(this.workspaceRoot, request.spec.workspaceScope, request);
    const gateway = usesGateway(request.spec.networkPolicy) ? this.prepareGatewayDir(request.workflowId) : undefined;
    const network = request.spec.networkPolicy === 'none' ? { network: 'loopback' as const } : gateway ? { network: 'gateway' as const, gatewaySocket: gateway.socket } : {};
    const isolation: LocalIsolation = { ...(await this.isolationFor(request.spec.options, dir)), ...network };
    if (gateway && isolation.containment !== 'pid-namespace') {
      throw new SandboxIsolationUnavailable(
        `Network policy "${request.spec.networkPolicy}" needs containment "pid-namespace" on the local sandbox: the forwarder to the run's egress gateway must die with the turn. Drop sandbox.options.containment: process-group, or use networkPolicy "none".`,
      );
    }
    checkIsolation(isolation, this.tools);
    this.createWorkspace(dir, isolation);
    return {
      provider: this.name,
      workspacePath: dir,
      hostWorkspacePath: dir,
      id: safeSegment(request.workflowId, 'workflow id'),
      settings: isolationSettings(isolation),
      ...(gateway ? { gateway } : {}),
    };
  }

  /** The run's gateway directory (0700: only the worker and its forwarder, as root, reach the socket). */
  private prepareGatewayDir(workflowId: string): { socket: string; port: number } {
    const socket = gatewaySocketFor(this.gatewayRoot, workflowId);
    mkdirSync(this.gatewayRoot, { recursive: true, mode: 0o700 });
    chmodSync(this.gatewayRoot, 0o700);
    mkdirSync(path.dirname(socket), { recursive: true, mode: 0o700 });
    return { socket, port: gatewayPort };
  }

  /**
   * Returns a handle whose executor runs processes in the workspace, with the isolation frozen in the ref. The
   * workspace must exist (`start` made it): a missing one is a `WorkspaceMissingError`, never a new empty directory.
   */
  async attach(ref: SandboxRef): Promise<LocalSandboxHandle> {
    this.checkRef(ref);
    const isolation = parseLocalIsolation(ref.settings);
    checkIsolation(isolation, this.tools);
    this.requireWorkspace(ref);
    const stateFile = this.stateFileFor(ref);
    const executor = new LocalExecutor({ workspacePath: ref.hostWorkspacePath, stateFile, isolation, tools: this.tools, killGraceMs: this.options.killGraceMs });
    return {
      ref,
      executor,
      fs: new LocalWorkspaceFs(ref.hostWorkspacePath),
      stateFile,
      killLeftovers: async () => {
        const usedForTurn = executor.startedAny;
        // Its own processes take their namespaces, and so every descendant, with them.
        await executor.killAll();
        // Before a turn: what an earlier attempt recorded. After one, the record may be a newer attempt's.
        if (!usedForTurn) await killRecordedTurn(stateFile);
      },
      release: () => executor.killAll(),
    };
  }

  /**
   * Ends the sandbox: kills a turn that may still be running (from the runtime state, not the workspace) and
   * keeps the files (workspaces stay for inspection; agent-scoped ones are reused). Idempotent.
   */
  async end(ref: SandboxRef): Promise<void> {
    this.checkRef(ref);
    await killRecordedTurn(this.stateFileFor(ref));
  }

  /**
   * The isolation asked for; with `userRange`, the user is the workspace's own uid from that range (gid = uid),
   * the same for every run of the workspace, another for every other workspace.
   */
  private async isolationFor(options: Readonly<Record<string, unknown>> | undefined, dir: string): Promise<LocalIsolation> {
    const range = parseUidRange(options);
    if (!range) return parseLocalIsolation(options);
    const uid = await this.uids.uidFor(path.relative(this.workspaceRoot, dir), range);
    return parseLocalIsolation({ ...options, userRange: undefined, user: `${uid}:${uid}` });
  }

  /** Where a sandbox's running turn is recorded: one file per run (shared workspaces host several runs). */
  stateFileFor(ref: SandboxRef): string {
    const name = ref.id !== undefined ? safeSegment(ref.id, 'sandbox id') : `ws-${createHash('sha256').update(ref.hostWorkspacePath).digest('hex').slice(0, 16)}`;
    return path.join(this.runtimeDir, `${name}.json`);
  }

  /**
   * The workspace and the directories above it, none of them followed through a link. The directories above are
   * traverse-only (0711: a sandbox user reaches its own workspace by name and lists nobody else's); the workspace
   * itself is private (0700) to the worker, or with a `user` to that user.
   */
  private createWorkspace(dir: string, isolation: LocalIsolation): void {
    mkdirSync(this.workspaceRoot, { recursive: true });
    mkdirWorkspaceSync(this.workspaceRoot, path.relative(this.workspaceRoot, dir));
    protectWorkspacePath(this.workspaceRoot, dir);
    if (isolation.user) {
      chownDirectoryNoFollow(dir, isolation.user.uid, isolation.user.gid, 0o700);
      checkReachable(dir, isolation, this.tools);
    } else {
      chmodDirectoryNoFollow(dir, 0o700);
    }
  }

  /** Throws `WorkspaceMissingError` unless the ref's workspace is a directory on this worker. */
  private requireWorkspace(ref: SandboxRef): void {
    let isDirectory = false;
    try {
      isDirectory = statSync(ref.hostWorkspacePath).isDirectory();
    } catch {
      isDirectory = false;
    }
    if (!isDirectory) {
      const where = ref.hostQueue ? ` It was created by the worker on host queue "${ref.hostQueue}".` : '';
      throw new WorkspaceMissingError(
        `The run's workspace ${ref.hostWorkspacePath} does not exist on this worker (root ${this.workspaceRoot}).${where} ` +
          'It was removed, or the run is on another host than its workspace; a turn never runs in a fresh empty directory instead. ' +
          'Restore the workspace or give the run a new one (sandbox.onHostLoss: reprovision).',
      );
    }
  }

  /** Refuses refs from another provider or outside this provider's root: a ref is data and may be stale. */
  private checkRef(ref: SandboxRef): void {
    if (ref.provider !== this.name) {
      throw new Error(`Sandbox ref belongs to provider "${ref.provider}", not "${this.name}"; attach it with that provider.`);
    }
    const rel = path.relative(this.workspaceRoot, path.resolve(ref.hostWorkspacePath));
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      const where = ref.hostQueue ? ` (it belongs to the worker on host queue "${ref.hostQueue}")` : '';
      throw new WorkspaceMissingError(`Sandbox workspace ${ref.hostWorkspacePath} is not inside the local root ${this.workspaceRoot} of this worker${where}.`);
    }
  }
}
