/**
 * The Docker sandbox provider: one locked-down container per run, the workspace bind-mounted into it, and
 * every process a `docker exec`. Containers are named from the deployment and the workflow id, so a retried
 * start or another worker of the same deployment reattaches instead of creating a second one. File
 * operations run inside the container as the sandbox user (docker-fs.ts); the worker touches the host side
 * of the workspace only to create it and hand it to that user, through descriptors that never follow a link.
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { DockerClient, dockerFromEnvironment } from './docker-client.js';
import { SandboxContainerGone, SandboxPolicyRefused } from './docker-errors.js';
import { DockerExecutor } from './docker-executor.js';
import { DockerFsHelper, DockerWorkspaceFs } from './docker-fs.js';
import { containerGatewayDir, forwarderArgv, gatewayPort, gatewaySocketFor, gatewaySocketName } from './forwarder.js';
import { usesGateway } from '../contracts/network.js';
import { safeSegment, workspaceDirFor } from './workspace.js';
import { chmodDirectoryNoFollow, chownDirectoryNoFollow, mkdirWorkspaceSync } from './workspace-fs.js';
import { protectWorkspacePath } from './data-dir.js';
import { WorkspaceMissingError } from './local-provider.js';
import type { NetworkPolicy, SandboxHandle, SandboxProvider, SandboxRef, SandboxStartRequest } from './types.js';

/** Labels every managed container carries. */
export const dockerLabels = {
  managed: 'durable-harness.managed',
  /** Which deployment (namespace + task queue, or configured) owns it: the reaper touches only its own. */
  deployment: 'durable-harness.deployment',
  workflowId: 'durable-harness.workflow-id',
  runId: 'durable-harness.run-id',
  agent: 'durable-harness.agent',
  networkPolicy: 'durable-harness.network-policy',
} as const;

/** The deployment a worker belongs to when none is configured: its Temporal namespace and task queue. */
export function defaultDeployment(namespace = 'default', taskQueue = 'durable-harness'): string {
  return `${namespace}/${taskQueue}`;
}

/** How long a container's gateway forwarder may take to listen. */
const forwarderReadyMs = 15_000;

/** How many times the forwarder said it listens (logs accumulate over restarts). */
const readyLines = (logs: string): number => logs.match(/ready\n/g)?.length ?? 0;

/** How long start() waits for a container another caller is creating. */
const reattachWaitMs = 10_000;

const defaults = {
  containerWorkspace: '/workspace',
  user: '1000:1000',
  // The keep-alive process runs as another user than the sandbox user: the turn-end sweep (kill -1 as the
  // sandbox user) cannot reach it, and neither can the harness.
  keepAliveUser: '65534:65534',
  memoryBytes: 2 * 1024 ** 3,
  cpus: 2,
  pidsLimit: 512,
  tmpfsSize: '512m',
  path: '/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin:/opt/clis/bin',
  keepAlive: ['sleep', 'infinity'],
} as const;

/** Options of the Docker provider. Per-run limits come from `spec.options` (see `DockerSandboxLimits`). */
export interface DockerSandboxProviderOptions {
  /** The engine; default: dockerode for `DOCKER_HOST`. */
  readonly docker?: Dockerode;
  /** Image with Node (and the harness CLIs) inside; `spec.options.image` overrides it per agent. */
  readonly image: string;
  /** Absolute host directory holding all workspaces (same layout as the local provider). */
  readonly workspaceRoot: string;
  /** Where the workspace is mounted inside the container. */
  readonly containerWorkspace?: string;
  /** Non-root `uid:gid` every exec (harness, file helper) runs as. */
  readonly user?: string;
  /** Non-root `uid:gid` of the container's keep-alive process; must differ from `user`. */
  readonly keepAliveUser?: string;
  /**
   * The deployment this provider belongs to (default `default/durable-harness`; the worker passes its
   * namespace/task queue or DURABLE_HARNESS_DEPLOYMENT). It labels containers and is part of their names.
   */
  readonly deployment?: string;
  /**
   * Docker network for policy `open`. Default `bridge`. An engine started with `--bridge=none` (as in CI
   * here) has no bridge network: start() then refuses `open` unless this names a network that exists
   * (`host` shares the worker's network, including its loopback services: for development only).
   */
  readonly openNetworkMode?: string;
  /**
   * Where the runs' gateway sockets live on this host (default `<dirname(workspaceRoot)>/runtime/gateway`): a run
   * with policy `vendor` or `allowlist` gets its directory here, bind-mounted read-only into its container.
   */
  readonly gatewayRoot?: string;
  /** Main process of the container: anything that sleeps for ever. */
  readonly keepAliveCommand?: readonly string[];
  /** PATH inside the container. */
  readonly path?: string;
  /** Grace between SIGTERM and SIGKILL for exec'd processes. */
  readonly killGraceMs?: number;
  /** Extra host directories mounted read-only (e.g. the repo's `harnesses/` for the demo harness). */
  readonly readOnlyMounts?: readonly { readonly host: string; readonly container: string }[];
}

/** Limits read from `SandboxSpec.options`; each has a sane default. */
export interface DockerSandboxLimits {
  /** Bytes, or a string like `512m`, `2g`. */
  readonly memory?: number | string;
  readonly cpus?: number;
  readonly pids?: number;
  readonly image?: string;
  /** Read-only root filesystem (with a tmpfs /tmp); turn off for harnesses that write outside HOME and /tmp. */
  readonly readonlyRootfs?: boolean;
  readonly tmpfsSize?: string;
}

/** A live Docker sandbox inside one activity. */
export interface DockerSandboxHandle extends SandboxHandle {
  readonly executor: DockerExecutor;
  /** The container's name. */
  readonly container: string;
}

/**
 * The container name for a workflow: readable, valid for Docker, and unique per deployment and workflow id
 * (a hash of both is appended, so ids that differ only in characters Docker refuses do not collide, and two
 * deployments sharing an engine never reattach to each other's container).
 */
export function containerNameFor(workflowId: string, deployment = defaultDeployment()): string {
  const readable = workflowId.replace(/[^a-zA-Z0-9_.-]/g, '-').slice(0, 80);
  const hash = createHash('sha256').update(`${deployment}\0${workflowId}`).digest('hex').slice(0, 12);
  return `durable-harness-${readable}-${hash}`;
}

/** Parses `512m`, `2g`, `1048576` into bytes. */
export function parseBytes(value: number | string): number {
  if (typeof value === 'number' && Number.isFinite(value) && value > 0) return Math.floor(value);
  const match = /^(\d+(?:\.\d+)?)\s*([kmg]?)i?b?$/i.exec(String(value).trim());
  if (!match) throw new Error(`Invalid memory size ${JSON.stringify(value)}; use bytes or a size like 512m, 2g.`);
  const unit = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[match[2]!.toLowerCase() as '' | 'k' | 'm' | 'g'];
  return Math.floor(Number(match[1]) * unit);
}

function limitsOf(options: Readonly<Record<string, unknown>> | undefined): DockerSandboxLimits {
  const o = options ?? {};
  const pick = <T>(key: string, ok: (v: unknown) => boolean, what: string): T | undefined => {
    const v = o[key];
    if (v === undefined) return undefined;
    if (!ok(v)) throw new Error(`Invalid sandbox option ${key}=${JSON.stringify(v)}: expected ${what}.`);
    return v as T;
  };
  const positive = (v: unknown): boolean => typeof v === 'number' && Number.isFinite(v) && v > 0;
  return {
    memory: pick('memory', (v) => positive(v) || typeof v === 'string', 'bytes or a size like 2g'),
    cpus: pick('cpus', positive, 'a positive number'),
    pids: pick('pids', (v) => positive(v) && Number.isInteger(v), 'a positive integer'),
    image: pick('image', (v) => typeof v === 'string' && v.length > 0, 'an image name'),
    readonlyRootfs: pick('readonlyRootfs', (v) => typeof v === 'boolean', 'true or false'),
    tmpfsSize: pick('tmpfsSize', (v) => typeof v === 'string' && /^\d+[kmg]?$/i.test(v), 'a size like 512m'),
  };
}

/** One container per run, locked down, reattached by name. */
export class DockerSandboxProvider implements SandboxProvider {
  readonly name = 'docker';
  /**
   * The workspace is a directory on the starting worker's disk, bind-mounted into the container: a run is pinned to
   * that worker like a local one (docs/multi-host.md). Workers that share one workspace root (a shared filesystem
   * at the same path, `DURABLE_HARNESS_WORKSPACES`) may turn pinning off with `DURABLE_HARNESS_HOST_AFFINITY=off`.
   */
  readonly hostBound = true;
  private readonly client: DockerClient;
  /** The host directory holding all workspaces (`DURABLE_HARNESS_WORKSPACES`). */
  readonly workspaceRoot: string;
  private readonly containerWorkspace: string;
  private readonly user: string;
  private readonly keepAliveUser: string;
  /** The deployment whose containers this provider creates, reattaches and reaps. */
  readonly deployment: string;
  /** The host directory of the runs' gateway sockets. */
  readonly gatewayRoot: string;
  /** One file helper per container, shared by the handles of this worker. */
  private readonly fsHelpers = new Map<string, DockerFsHelper>();

  constructor(private readonly options: DockerSandboxProviderOptions) {
    this.client = new DockerClient(options.docker ?? dockerFromEnvironment());
    this.workspaceRoot = path.resolve(options.workspaceRoot);
    this.containerWorkspace = options.containerWorkspace ?? defaults.containerWorkspace;
    this.user = options.user ?? defaults.user;
    this.keepAliveUser = options.keepAliveUser ?? defaults.keepAliveUser;
    this.deployment = options.deployment ?? defaultDeployment();
    this.gatewayRoot = path.resolve(options.gatewayRoot ?? path.join(path.dirname(this.workspaceRoot), 'runtime', 'gateway'));
    for (const [what, user] of [['user', this.user], ['keep-alive user', this.keepAliveUser]] as const) {
      if (/^0*(?::|$)|^root(?::|$)/.test(user)) {
        throw new Error(`Docker sandbox ${what} ${JSON.stringify(user)} is root; use a non-root uid:gid such as 1000:1000.`);
      }
    }
    if (this.user.split(':')[0] === this.keepAliveUser.split(':')[0]) {
      throw new Error(`Docker sandbox user and keep-alive user are both ${JSON.stringify(this.user)}; they must differ, or ending a turn's processes would stop the container.`);
    }
  }

  /**
   * `none`: enforced (`NetworkMode: 'none'`, loopback only). `vendor` and `allowlist`: enforced — loopback only too,
   * where the forwarder (the container's main process) leads to the run's egress gateway and nowhere else. `open`:
   * enforced (normal networking; start() refuses if the engine lacks the network).
   */
  enforces(policy: NetworkPolicy): 'enforced' | 'advisory' | 'refused' {
    switch (policy) {
      case 'none':
      case 'vendor':
      case 'allowlist':
      case 'open':
        return 'enforced';
      default: {
        const never: never = policy;
        throw new Error(`Unknown network policy ${JSON.stringify(never)}; use none, vendor, allowlist or open.`);
      }
    }
  }

  /** Creates the run's container, or reattaches to it (also after a create race). Idempotent. */
  async start(request: SandboxStartRequest): Promise<SandboxRef> {
    const networkMode = await this.networkModeFor(request.spec.networkPolicy);
    const limits = limitsOf(request.spec.options);
    const hostDir = workspaceDirFor(this.workspaceRoot, request.spec.workspaceScope, request);
    this.prepareWorkspace(hostDir);
    const name = containerNameFor(safeSegment(request.workflowId, 'workflow id'), this.deployment);
    const gateway = usesGateway(request.spec.networkPolicy) ? this.prepareGatewayDir(request.workflowId) : undefined;
    const ref: SandboxRef = { provider: this.name, workspacePath: this.containerWorkspace, hostWorkspacePath: hostDir, id: name, ...(gateway ? { gateway } : {}) };

    // A concurrent create holds the name before the container can be inspected: retry for a few seconds.
    const deadline = Date.now() + reattachWaitMs;
    while (Date.now() < deadline) {
      const existing = await this.client.inspect(name);
      if (existing) {
        this.checkOwner(existing, request.workflowId);
        if (!existing.State.Running) await this.startContainer(name, ref);
        return ref;
      }
      const created = await this.client.create(this.createOptions(name, request, hostDir, networkMode, limits, gateway));
      // 409: another worker (or a concurrent retry) created it first: reattach to theirs.
      if (created === 'conflict') {
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      try {
        await this.startContainer(name, ref);
      } catch (error) {
        // A start failure (bad mount, bad image config) leaves a dead container that would be reattached.
        await this.client.remove(name);
        throw error;
      }
      return ref;
    }
    throw new SandboxContainerGone(name, 'it keeps disappearing while being created; is something removing it?');
  }

  /** A handle whose executor runs processes in the container; a stopped container is started again. */
  async attach(ref: SandboxRef): Promise<DockerSandboxHandle> {
    const container = this.checkRef(ref);
    const state = await this.client.inspect(container);
    if (!state) throw new SandboxContainerGone(container, 'no such container');
    if (!state.State.Running) await this.startContainer(container, ref);
    const executor = new DockerExecutor({
      client: this.client,
      container,
      workspacePath: ref.workspacePath,
      user: this.user,
      home: path.posix.join(ref.workspacePath, '.home'),
      path: this.options.path ?? defaults.path,
      killGraceMs: this.options.killGraceMs,
      ownPids: async () => (await this.fsHelpers.get(container)?.ownPids()) ?? [],
    });
    return {
      ref,
      executor,
      container,
      fs: new DockerWorkspaceFs(this.fsHelperFor(container, ref.workspacePath)),
      killLeftovers: async () => {
        await executor.killAll();
        await executor.killLeftovers();
      },
      release: () => executor.killAll(),
    };
  }

  /** Kills and removes the container (everything in it dies); keeps the workspace. Idempotent. */
  async end(ref: SandboxRef): Promise<void> {
    // The container is reached by name on the shared engine: a worker with another workspace root can remove it.
    const container = this.checkContainerName(ref);
    this.fsHelpers.get(container)?.close();
    this.fsHelpers.delete(container);
    await this.client.remove(container);
  }

  private fsHelperFor(container: string, workspacePath: string): DockerFsHelper {
    let helper = this.fsHelpers.get(container);
    if (!helper) {
      helper = new DockerFsHelper({ client: this.client, container, user: this.user, workspacePath, path: this.options.path ?? defaults.path });
      this.fsHelpers.set(container, helper);
    }
    return helper;
  }

  refusalOf(policy: NetworkPolicy): string {
    return `Network policy ${JSON.stringify(policy)} cannot be enforced by the Docker sandbox; use "none", "vendor", "allowlist" or "open".`;
  }

  /**
   * Starts the container; with a gateway, returns once its forwarder listens (it prints `ready`), so a turn's first
   * model call never finds the door shut. A forwarder that cannot start (no node in the image) is named.
   */
  private async startContainer(name: string, ref: SandboxRef): Promise<void> {
    const before = ref.gateway ? readyLines(await this.client.logs(name)) : 0;
    await this.client.start(name);
    if (!ref.gateway) return;
    const deadline = Date.now() + forwarderReadyMs;
    for (;;) {
      const logs = await this.client.logs(name);
      if (readyLines(logs) > before) return;
      const state = await this.client.inspect(name);
      if (!state?.State.Running || Date.now() > deadline) {
        const tail = logs.replace(/[^\x20-\x7e\n]/g, '').trim().slice(-300);
        throw new SandboxPolicyRefused(
          `The gateway forwarder in container ${name} did not start (${state?.State.Running ? `not ready after ${forwarderReadyMs} ms` : `the container exited ${state?.State.ExitCode ?? ''}`}` +
            `${tail ? `: ${tail}` : ''}). The image needs node on PATH for the gateway forwarder (policies vendor and allowlist); use an image with node, or policy none.`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** The run's gateway directory (0755, the worker's; the root above it traverse-only) and what the ref says of it. */
  private prepareGatewayDir(workflowId: string): { socket: string; port: number } {
    const socket = gatewaySocketFor(this.gatewayRoot, workflowId);
    mkdirSync(this.gatewayRoot, { recursive: true, mode: 0o711 });
    chmodSync(this.gatewayRoot, 0o711);
    mkdirSync(path.dirname(socket), { recursive: true, mode: 0o755 });
    chmodSync(path.dirname(socket), 0o755);
    return { socket, port: gatewayPort };
  }

  private async networkModeFor(policy: NetworkPolicy): Promise<string> {
    if (this.enforces(policy) === 'refused') throw new SandboxPolicyRefused(this.refusalOf(policy));
    if (policy === 'none' || usesGateway(policy)) return 'none';
    const mode = this.options.openNetworkMode ?? 'bridge';
    if (!(await this.client.hasNetwork(mode))) {
      // Docker would silently fall back to loopback only: "open" would be a lie, so refuse.
      throw new SandboxPolicyRefused(
        `Network policy "open" needs the Docker network ${JSON.stringify(mode)}, which this engine does not have ` +
          '(started with --bridge=none?). Start dockerd with a bridge, create the network, or set openNetworkMode.',
      );
    }
    return mode;
  }

  /**
   * Creates the workspace and gives it (the directory itself, through a descriptor that refuses a link) to
   * the container user; `.home` inside it is created without following anything a harness planted. Nothing
   * is chowned or chmodded by path, and nothing below the workspace is changed on an existing workspace.
   */
  private prepareWorkspace(hostDir: string): void {
    mkdirSync(this.workspaceRoot, { recursive: true });
    mkdirWorkspaceSync(this.workspaceRoot, path.relative(this.workspaceRoot, hostDir));
    // Traverse-only above the workspace: a local sandbox user on the same worker lists no one's workspace.
    protectWorkspacePath(this.workspaceRoot, hostDir);
    const [uid, gid] = this.user.split(':').map((part) => Number(part));
    try {
      if (uid === undefined || !Number.isInteger(uid)) throw new Error('named user');
      chownDirectoryNoFollow(hostDir, uid, gid !== undefined && Number.isInteger(gid) ? gid : uid, 0o700);
    } catch {
      // A worker that is not root cannot chown: make the workspace writable for the container user instead.
      chmodDirectoryNoFollow(hostDir, 0o777);
    }
    try {
      // Created as the workspace's owner (root gives it away through the descriptor).
      mkdirWorkspaceSync(hostDir, '.home');
    } catch {
      // A link a harness planted as .home stays as it is: never followed; the harness's HOME is then its own doing.
    }
  }

  private createOptions(
    name: string,
    request: SandboxStartRequest,
    hostDir: string,
    networkMode: string,
    limits: DockerSandboxLimits,
    gateway: { socket: string } | undefined,
  ): Dockerode.ContainerCreateOptions {
    const readonlyRootfs = limits.readonlyRootfs ?? true;
    return {
      name,
      Image: limits.image ?? this.options.image,
      // Behind a gateway the keep-alive process IS the forwarder: the sandbox's one door, out of the harness's reach.
      Cmd: gateway ? forwarderArgv('node', path.posix.join(containerGatewayDir, gatewaySocketName)) : [...(this.options.keepAliveCommand ?? defaults.keepAlive)],
      // The keep-alive process (and the init) run as another user than every exec; see defaults.keepAliveUser.
      User: this.keepAliveUser,
      WorkingDir: this.containerWorkspace,
      // No secrets here, ever: `docker inspect` shows Config.Env. Secrets go to each exec's environment.
      Env: [`HOME=${path.posix.join(this.containerWorkspace, '.home')}`],
      Labels: {
        [dockerLabels.managed]: 'true',
        [dockerLabels.deployment]: this.deployment,
        [dockerLabels.workflowId]: request.workflowId,
        [dockerLabels.runId]: request.runId,
        [dockerLabels.agent]: request.agent,
        [dockerLabels.networkPolicy]: request.spec.networkPolicy,
      },
      NetworkDisabled: networkMode === 'none' ? true : undefined,
      HostConfig: {
        Binds: [
          `${hostDir}:${this.containerWorkspace}:rw`,
          ...(this.options.readOnlyMounts ?? []).map((m) => `${path.resolve(m.host)}:${m.container}:ro`),
          // The directory, not the socket: a worker that restarts listens on a new socket the container still sees.
          ...(gateway ? [`${path.dirname(gateway.socket)}:${containerGatewayDir}:ro`] : []),
        ],
        NetworkMode: networkMode,
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        Init: true,
        Memory: parseBytes(limits.memory ?? defaults.memoryBytes),
        // Same as Memory: no swap on top of the limit.
        MemorySwap: parseBytes(limits.memory ?? defaults.memoryBytes),
        NanoCpus: Math.round((limits.cpus ?? defaults.cpus) * 1e9),
        PidsLimit: limits.pids ?? defaults.pidsLimit,
        ReadonlyRootfs: readonlyRootfs,
        Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${limits.tmpfsSize ?? defaults.tmpfsSize}` },
        RestartPolicy: { Name: 'no' },
        AutoRemove: false,
      },
    };
  }

  /** A container by our name must be ours (labels); anything else is a configuration error, not a reattach. */
  private checkOwner(info: Dockerode.ContainerInspectInfo, workflowId: string): void {
    const labels = info.Config.Labels ?? {};
    if (labels[dockerLabels.managed] !== 'true' || labels[dockerLabels.workflowId] !== workflowId || labels[dockerLabels.deployment] !== this.deployment) {
      throw new Error(
        `Container ${info.Name} exists but does not belong to workflow ${JSON.stringify(workflowId)} of deployment ${JSON.stringify(this.deployment)} ` +
          `(labels ${JSON.stringify(labels)}); remove it or rename it.`,
      );
    }
  }

  /** Refs are data and may be stale or forged: only our provider's, only our naming, only under our root. */
  private checkRef(ref: SandboxRef): string {
    const container = this.checkContainerName(ref);
    const rel = path.relative(this.workspaceRoot, path.resolve(ref.hostWorkspacePath));
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      // Permanent: retrying on this worker cannot help (issue 18 saw runs retry this into awaiting_operator).
      const where = ref.hostQueue ? `it belongs to the worker on host queue "${ref.hostQueue}"` : 'it was started by a worker with another workspace root';
      throw new WorkspaceMissingError(
        `Sandbox workspace ${ref.hostWorkspacePath} is not inside the workspace root ${this.workspaceRoot} of this worker (${where}). ` +
          'Workers whose runs are not pinned (DURABLE_HARNESS_HOST_AFFINITY=off) must share one workspace root: the same DURABLE_HARNESS_WORKSPACES path on one filesystem.',
      );
    }
    return container;
  }

  /** The container name of a ref of this provider, of this provider's naming (the name hashes the deployment). */
  private checkContainerName(ref: SandboxRef): string {
    if (ref.provider !== this.name) {
      throw new Error(`Sandbox ref belongs to provider "${ref.provider}", not "${this.name}"; use that provider.`);
    }
    if (ref.id === undefined || !/^durable-harness-[a-zA-Z0-9_.-]+$/.test(ref.id)) {
      throw new Error(`Sandbox ref has no valid container name (${JSON.stringify(ref.id)}).`);
    }
    return ref.id;
  }
}

/** Options of `reapContainers`. */
export interface ReapOptions {
  readonly docker?: Dockerode;
  /** Only this deployment's containers are considered (see `DockerSandboxProvider.deployment`). */
  readonly deployment: string;
  /** Whether the run that owns a container is closed (the worker passes a Temporal-backed check). */
  readonly isRunClosed: (workflowId: string, runId: string | undefined) => Promise<boolean>;
}

/** Result of one reap: which managed containers were removed and which were kept. */
export interface ReapResult {
  readonly removed: string[];
  readonly kept: string[];
}

/**
 * Removes this deployment's managed containers whose runs Temporal reports closed: leftovers of workers that
 * died before `end()`. Called at worker start. Containers of other deployments sharing the engine (other
 * namespaces or task queues, another team) are never touched, running or not. A container whose check
 * throws is kept (and the error does not stop the reap).
 */
export async function reapContainers(options: ReapOptions): Promise<ReapResult> {
  const client = new DockerClient(options.docker ?? dockerFromEnvironment());
  const containers = await client.list([`${dockerLabels.managed}=true`, `${dockerLabels.deployment}=${options.deployment}`]);
  const removed: string[] = [];
  const kept: string[] = [];
  for (const info of containers) {
    const name = (info.Names[0] ?? info.Id).replace(/^\//, '');
    // The engine filtered by label already; check again rather than trust one filter with removal.
    if (info.Labels[dockerLabels.deployment] !== options.deployment) continue;
    const workflowId = info.Labels[dockerLabels.workflowId];
    let closed = false;
    try {
      closed = workflowId !== undefined && (await options.isRunClosed(workflowId, info.Labels[dockerLabels.runId]));
    } catch {
      closed = false;
    }
    if (closed) {
      await client.remove(info.Id);
      removed.push(name);
    } else {
      kept.push(name);
    }
  }
  return { removed, kept };
}

/** The slice of `@temporalio/client`'s `WorkflowClient` the reaper check needs. */
export interface WorkflowDescriber {
  getHandle(workflowId: string): { describe(): Promise<{ status: { name: string } }> };
}

/**
 * A Temporal-backed `isRunClosed` for `reapContainers`: closed when the workflow's latest run is not
 * RUNNING, or when Temporal no longer knows the workflow (history past retention). Other errors throw, so
 * the reaper keeps the container.
 */
export function temporalRunClosed(workflows: WorkflowDescriber): (workflowId: string) => Promise<boolean> {
  return async (workflowId) => {
    try {
      const description = await workflows.getHandle(workflowId).describe();
      return description.status.name !== 'RUNNING';
    } catch (error) {
      if ((error as Error).name === 'WorkflowNotFoundError') return true;
      throw error;
    }
  };
}

/**
 * The Docker provider configured from the worker's environment, or `undefined` when
 * `DURABLE_HARNESS_SANDBOX_IMAGE` is unset. `DURABLE_HARNESS_WORKSPACES` (default `<dataDir>/workspaces`)
 * must be the same absolute path on the engine's host as in the worker: the engine resolves bind mounts there.
 * Runs are pinned to the worker that started them (`hostBound`), unless every worker shares that root and host
 * affinity is off (docs/multi-host.md).
 * `DURABLE_HARNESS_SANDBOX_USER` (uid:gid), `DURABLE_HARNESS_OPEN_NETWORK` (network for policy open),
 * `DURABLE_HARNESS_DEPLOYMENT` (default: the worker's namespace/task queue).
 */
export function dockerSandboxFromEnvironment(
  env: Readonly<Record<string, string | undefined>>,
  dataDir: string,
  docker?: Dockerode,
  deployment?: string,
): DockerSandboxProvider | undefined {
  const image = env.DURABLE_HARNESS_SANDBOX_IMAGE;
  if (!image) return undefined;
  return new DockerSandboxProvider({
    docker,
    image,
    deployment: env.DURABLE_HARNESS_DEPLOYMENT || deployment,
    workspaceRoot: env.DURABLE_HARNESS_WORKSPACES ?? path.join(path.resolve(dataDir), 'workspaces'),
    user: env.DURABLE_HARNESS_SANDBOX_USER || undefined,
    openNetworkMode: env.DURABLE_HARNESS_OPEN_NETWORK || undefined,
  });
}
