/** The durable-harness worker: the agentRun workflow and its activities on one task queue. */
import { chmodSync, existsSync } from 'node:fs';
import path from 'node:path';
import type { DataConverter } from '@temporalio/common';
import { SimplePlugin } from '@temporalio/plugin';
import { NativeConnection, Runtime, Worker, type InjectedSinks, type WorkerOptions } from '@temporalio/worker';
import { dataConverterFromEnvironment } from './codec/index.js';
import { TurnTelemetryInterceptor, type WorkerTracing } from './observability/index.js';
import { createBuiltinRegistry, type ActionRegistry } from './actions/index.js';
import { createActivities, type ActivityDeps } from './activities/index.js';
import { GatewayRegistry } from './activities/turn/door.js';
import { TurnStops } from './activities/turn/stops.js';
import { HomeTemplates } from './adapters/home-template.js';
import type { DurableHarnessSinks } from './workflows/sinks.js';
import { ApprovalWakeups } from './permissions/index.js';
import { defaultAdapterRegistry, type AdapterRegistry } from './adapters/index.js';
import { catalogHash } from './catalog/hash.js';
import type { Catalog } from './catalog/schema.js';
import { JsonFileCredentialStore, MemoryCredentialStore, type CredentialStore } from './credentials/index.js';
import { SqliteLedger, ledgerReady, openLedger } from './ledger/index.js';
import type { Ledger } from './ledger/types.js';
import { DockerSandboxProvider, LocalSandboxProvider, defaultDeployment, dockerSandboxFromEnvironment, reapContainers, temporalRunClosed } from './sandbox/index.js';
import { protectDataDir } from './sandbox/data-dir.js';
import { Client } from '@temporalio/client';
import { defaultReconcileIntervalMs, reconcilePeriodically } from './temporal/reconcile-runs.js';
import type { SandboxProvider } from './sandbox/types.js';
import { conflictingPollers, taskQueuePollers, workerIdentity } from './temporal/task-queue.js';
import { hostIdFrom, hostQueueName } from './temporal/host-queue.js';

import { decisionModeFromEnvironment, operatorsFromEnvironment, type DecisionMode, type OperatorDirectory } from './operators/index.js';
import { defaultNamespace, defaultTaskQueue } from './worker-defaults.js';
import { prebuiltWorkflowBundle, workflowsPath } from './workflow-bundle.js';
import { CatalogMismatchError } from './catalog/load.js';
export { defaultTaskQueue };

export { workflowsPath };

export interface WorkerSetup {
  readonly connection: NativeConnection;
  readonly namespace?: string;
  readonly taskQueue?: string;
  readonly catalog: () => Catalog;
  /** Directory for the ledger, workspaces and credentials (default `.data`). */
  readonly dataDir: string;
  readonly ledger?: Ledger;
  readonly adapters?: AdapterRegistry;
  readonly actions?: ActionRegistry;
  readonly sandboxes?: Readonly<Record<string, SandboxProvider>>;
  readonly credentials?: CredentialStore;
  readonly env?: Readonly<Record<string, string | undefined>>;
  /**
   * A prebuilt workflow bundle (tests bundle once per run). The data converter's `failureConverterPath` is part of
   * the bundle: pass it to `bundleWorkflowCode` too, or workflow failures are not encoded with it. Default: the
   * matching one in dist/workflow-bundles when the package has them (the worker image), else bundled at start.
   */
  readonly workflowBundle?: WorkerOptions['workflowBundle'];
  /** Worker identity (default `durable-harness/PID@HOST`); ` catalog:HASH` is always appended. */
  readonly identity?: string;
  /**
   * Which deployment this worker belongs to: labels its sandbox containers, and its reaper touches only
   * those. Default DURABLE_HARNESS_DEPLOYMENT, else `<namespace>/<task queue>`.
   */
  readonly deployment?: string;
  /**
   * Payload encoding (encryption). Default: from `env` (DURABLE_HARNESS_PAYLOAD_KEYS, see src/codec/keys.ts);
   * clients of these runs need the same keys.
   */
  readonly dataConverter?: DataConverter;
  /**
   * OpenTelemetry tracing (`startTracing(observabilityFromEnvironment().tracing)`); off when omitted. With a prebuilt
   * `workflowBundle`, bundle it with `plugins: tracing.plugins` for the workflow spans.
   */
  readonly tracing?: WorkerTracing;
  /**
   * Refuse to start when a worker with another catalog already polls the task queue (default true): mixed
   * catalogs on one queue fail runs at random with UnknownAgent.
   */
  readonly catalogCheck?: boolean;
  /** How long a stopping worker lets in-flight activities finish before cancelling them (default 5 s). */
  readonly shutdownGraceTime?: WorkerOptions['shutdownGraceTime'];
  /**
   * What this worker polls: `all` (default) — workflows and activities; `activities` — activities only, no workflow
   * code (a host that keeps serving the turns of the runs whose workspace it holds while their workflows run elsewhere).
   */
  readonly role?: 'all' | 'activities';
  /**
   * This worker's host id; it also polls `<taskQueue>@<hostId>`, where the runs whose local workspace it holds
   * send their turns. Default DURABLE_HARNESS_HOST_ID, else the hostname and a hash of the data dir (stable across
   * restarts). See docs/multi-host.md.
   */
  readonly hostId?: string;
  /**
   * Host affinity (default on; `DURABLE_HARNESS_HOST_AFFINITY=off` turns it off): pin runs with a local workspace to
   * this worker. Turn it off only when every worker sees the same workspace root (a shared filesystem): unpinned
   * turns keep Temporal's eager dispatch to the worker that scheduled them.
   */
  readonly hostAffinity?: boolean;
  /**
   * Whether operator decisions must be signed by a configured operator (`signed`), or are taken from whoever reaches
   * Temporal (`trusted-network`: development only; status says so). Default DURABLE_HARNESS_DECISIONS, else `signed`.
   */
  readonly decisions?: DecisionMode;
  /** The operators whose signatures count. Default: DURABLE_HARNESS_OPERATORS_FILE (re-read on change), else none. */
  readonly operators?: () => OperatorDirectory;
  /**
   * How often this worker closes, in the ledger, the runs Temporal terminated or timed out (their `endSession` never
   * ran): default every minute; 0 turns it off. Workers with role `activities` do not.
   */
  readonly reconcileIntervalMs?: number;
}

/**
 * The worker of one host: the shared task queue (workflows and activities) and the host's own queue (the
 * activities of runs whose workspace is on this host). `run`, `shutdown` and `getState` act on both.
 */
export class HarnessWorker {
  constructor(
    readonly main: Worker,
    /** Polls the host queue (none with host affinity off). */
    readonly host: Worker | undefined,
    /** This host's queue (`<queue>@<host id>`); undefined with host affinity off. */
    readonly hostQueue: string | undefined,
    /** Work beside the pollers while the worker runs (the periodic reconciliation); returns its stop. */
    private readonly background: () => () => void = () => () => undefined,
  ) {}

  private get workers(): Worker[] {
    return this.host ? [this.main, this.host] : [this.main];
  }

  /** Runs both until shut down; when either stops with an error, the other is shut down too. */
  async run(): Promise<void> {
    const stopAll = () => this.shutdown();
    const stopBackground = this.background();
    const runs = this.workers.map((w) =>
      w.run().then(stopAll, (err: unknown) => {
        stopAll();
        throw err;
      }),
    );
    try {
      await Promise.all(runs);
    } finally {
      stopBackground();
    }
  }

  shutdown(): void {
    for (const w of this.workers) if (w.getState() === 'RUNNING') w.shutdown();
  }

  getState(): ReturnType<Worker['getState']> {
    return this.main.getState();
  }
}

export { CatalogMismatchError };

/** Throws CatalogMismatchError when a live worker with another catalog polls the task queue. */
export async function assertSameCatalogOnTaskQueue(
  connection: Pick<NativeConnection, 'workflowService'>,
  namespace: string,
  taskQueue: string,
  hash: string,
): Promise<void> {
  const conflicts = conflictingPollers(await taskQueuePollers(connection.workflowService, namespace, taskQueue), hash);
  if (conflicts.length === 0) return;
  const seen = conflicts
    .map((p) => `${p.identity}${p.lastAccessMs ? `, last poll ${Math.max(0, Math.round((Date.now() - p.lastAccessMs) / 1000))} s ago` : ''}`)
    .join('; ');
  throw new CatalogMismatchError(
    `task queue "${taskQueue}" is already served by a worker with another catalog (${seen}); this worker's catalog is ${hash}. ` +
      'Workers on one task queue must serve the same catalog, or runs fail at random (e.g. UnknownAgent). ' +
      'Stop that worker, give this one its own queue (--task-queue or DURABLE_HARNESS_TASK_QUEUE), or start both with the same catalog. ' +
      'The server lists a stopped worker for about 5 minutes after its last poll.',
  );
}

/** Builds the activity dependencies with the defaults: the ledger DATABASE_URL selects (else SQLite), local sandbox, built-in actions. */
export function defaultDeps(setup: Omit<WorkerSetup, 'connection'>): ActivityDeps {
  const dataDir = path.resolve(setup.dataDir);
  const credentialsFile = path.join(dataDir, 'credentials.json');
  const env = setup.env ?? process.env;
  const deployment = setup.deployment ?? (env.DURABLE_HARNESS_DEPLOYMENT || defaultDeployment(setup.namespace ?? defaultNamespace, setup.taskQueue ?? defaultTaskQueue));
  const decisionMode = setup.decisions ?? decisionModeFromEnvironment(env, 'signed');
  return {
    catalog: setup.catalog,
    adapters: setup.adapters ?? defaultAdapterRegistry(),
    sandboxes: setup.sandboxes ?? defaultSandboxes(env, dataDir, deployment, decisionMode),
    // PostgreSQL when DATABASE_URL is set (one ledger for many workers), else SQLite in the data dir.
    ledger: setup.ledger ?? openPrivateLedger(env, dataDir),
    actions: setup.actions ?? createBuiltinRegistry(),
    credentials: setup.credentials ?? (existsSync(credentialsFile) ? new JsonFileCredentialStore(credentialsFile) : new MemoryCredentialStore({})),
    env: setup.env,
    decisionMode,
    operators: setup.operators ?? operatorsFromEnvironment(env),
    gitRoot: path.join(dataDir, 'git'),
  };
}

/** Every workspace root of the worker's providers, and the default one in the data dir. */
function workspaceRootsOf(dataDir: string, sandboxes: Readonly<Record<string, SandboxProvider>>): string[] {
  const roots = Object.values(sandboxes).flatMap((p) => ('workspaceRoot' in p && typeof p.workspaceRoot === 'string' ? [p.workspaceRoot] : []));
  return [...new Set([path.join(path.resolve(dataDir), 'workspaces'), ...roots])];
}

/** The ledger; an SQLite file is made readable by the worker only (a sandbox user must not read other runs' records). */
function openPrivateLedger(env: Readonly<Record<string, string | undefined>>, dataDir: string): Ledger {
  const ledger = openLedger(env, dataDir);
  const file = path.join(dataDir, 'ledger.sqlite');
  if (ledger instanceof SqliteLedger && existsSync(file)) chmodSync(file, 0o600);
  return ledger;
}

/**
 * The local provider always (runtime state under `<dataDir>/runtime/local`, outside every workspace); the
 * Docker provider when DURABLE_HARNESS_SANDBOX_IMAGE names a sandbox image. With signed decisions a local
 * harness never shares the host's network: it would reach this worker's Temporal server and could act on its own run.
 */
export function defaultSandboxes(
  env: Readonly<Record<string, string | undefined>>,
  dataDir: string,
  deployment?: string,
  decisions: DecisionMode = 'signed',
): Record<string, SandboxProvider> {
  const docker = dockerSandboxFromEnvironment(env, dataDir, undefined, deployment);
  const local = new LocalSandboxProvider({
    root: path.join(dataDir, 'workspaces'),
    runtimeDir: path.join(dataDir, 'runtime', 'local'),
    hostNetwork: decisions === 'signed' ? 'refused' : 'allowed',
  });
  return { local, ...(docker ? { docker } : {}) };
}

/**
 * Removes this deployment's sandbox containers whose runs are closed in Temporal (left by crashed workers);
 * other deployments' containers on the same engine are never touched.
 */
export async function reapClosedRunContainers(deps: ActivityDeps, client: Client): Promise<string[]> {
  const docker = deps.sandboxes.docker;
  if (!(docker instanceof DockerSandboxProvider)) return [];
  const { removed } = await reapContainers({ deployment: docker.deployment, isRunClosed: temporalRunClosed(client.workflow) });
  return removed;
}

/**
 * How often a running turn's heartbeat reaches the server (at most). Every heartbeat is a server write: at 500 ms a
 * 2-second turn made 4.8 of them, now 1 (`npm run bench -- scale` counts the server's requests per turn). A cancel
 * does not wait for one on the turn's own host: the workflow stops the turn there at once (turnStops, a sink; tree
 * gone in ~20 ms). Only a cancel decided on another host reaches the turn with a heartbeat response, so within this
 * interval (test/workflows/cancel-across-hosts.test.ts: 1.6 s), plus the 1 s kill grace.
 */
export const heartbeatThrottle = '2s';

/** What `durableHarnessPlugin` adds to a worker. */
export interface DurableHarnessPluginOptions {
  /** The activities' dependencies (`defaultDeps(setup)` gives the defaults). */
  readonly deps: ActivityDeps;
  /** Payload encoding; clients of these runs need the same. Default: from DURABLE_HARNESS_PAYLOAD_KEYS. */
  readonly dataConverter?: DataConverter;
  /** Run the agentRun workflow (default true); false for a worker of activities only. */
  readonly workflows?: boolean;
  /** A prebuilt workflow bundle (else the worker bundles `workflowsPath` itself at start, about a second). */
  readonly workflowBundle?: WorkerOptions['workflowBundle'];
}

/**
 * The durable-harness worker side as a Temporal plugin: the agentRun workflow, its activities bound to `deps`, the
 * turn telemetry (tokens and cost as metrics, and on the turn's span under tracing) and the data converter. A service
 * composes it with its own plugins on its own worker: `Worker.create({ connection, taskQueue, plugins: [...tracing,
 * durableHarnessPlugin({ deps })] })`; tracing plugins go first (see `WorkerTracing.plugins`).
 */
export function durableHarnessPlugin(options: DurableHarnessPluginOptions): SimplePlugin {
  const workflows = options.workflows ?? true;
  // The workflow's sink and the turns it stops share one registry (the worker's, for both its pollers).
  const deps = options.deps.turnStops ? options.deps : { ...options.deps, turnStops: new TurnStops() };
  return new DurableHarnessPlugin(workflows ? turnStopSinks(deps.turnStops!) : undefined, {
    name: 'durable-harness',
    activities: createActivities(deps),
    ...(workflows ? (options.workflowBundle ? { workflowBundle: options.workflowBundle } : { workflowsPath }) : {}),
    dataConverter: options.dataConverter ?? dataConverterFromEnvironment(options.deps.env ?? process.env),
    workerInterceptors: { activity: [(ctx) => ({ inbound: new TurnTelemetryInterceptor(ctx) })] },
  });
}

/** The workflow's sinks, on a worker that runs workflows (a replay calls none of them). */
function turnStopSinks(stops: TurnStops): InjectedSinks<DurableHarnessSinks> {
  return { turnStops: { requested: { fn: (info, reason) => void stops.stop(info.workflowId, info.runId, reason), callDuringReplay: false } } };
}

/** SimplePlugin with the workflow's sinks added to the worker's own (SimplePlugin has no option for them). */
class DurableHarnessPlugin extends SimplePlugin {
  constructor(
    private readonly sinks: InjectedSinks<DurableHarnessSinks> | undefined,
    options: ConstructorParameters<typeof SimplePlugin>[0],
  ) {
    super(options);
  }

  override configureWorker(options: WorkerOptions): WorkerOptions {
    const configured = super.configureWorker(options);
    return this.sinks ? { ...configured, sinks: { ...configured.sinks, ...this.sinks } } : configured;
  }
}

/** Creates a worker; run it with `worker.run()`, stop it with `worker.shutdown()`. */
export async function createWorker(setup: WorkerSetup): Promise<{ worker: HarnessWorker; deps: ActivityDeps }> {
  const namespace = setup.namespace ?? 'default';
  const taskQueue = setup.taskQueue ?? defaultTaskQueue;
  const hash = catalogHash(setup.catalog());
  if (setup.catalogCheck !== false) await assertSameCatalogOnTaskQueue(setup.connection, namespace, taskQueue, hash);
  const affinity = setup.hostAffinity ?? (setup.env ?? process.env).DURABLE_HARNESS_HOST_AFFINITY?.trim().toLowerCase() !== 'off';
  const hostQueue = affinity ? hostQueueName(taskQueue, setup.hostId ?? hostIdFrom(setup.env ?? process.env, setup.dataDir)) : undefined;
  // One gateway registry for both pollers: a run's turns (host queue) and its end (either) see the same gateways. One
  // set of approval wake-ups too: the approve update's activity (the run's queue) wakes the turn (the host queue); and
  // one set of turn stops: the workflow's cancel (the run's queue) kills the turn (the host queue).
  const gateways = new GatewayRegistry();
  const deps: ActivityDeps = { ...defaultDeps(setup), gateways, approvalWakeups: new ApprovalWakeups(), turnStops: new TurnStops(), homeTemplates: new HomeTemplates({ warn: (line) => Runtime.instance().logger.warn(line) }), ...(hostQueue ? { hostQueue } : {}) };
  const activitiesOnly = setup.role === 'activities';
  await ledgerReady(deps.ledger); // a wrong DATABASE_URL fails the worker at start, not its first turn
  // After the ledger (and, under `dev`, Temporal's database) exists: older data dirs had 0644 files and 0755 dirs.
  protectDataDir(setup.dataDir, workspaceRootsOf(setup.dataDir, deps.sandboxes));
  const dataConverter = setup.dataConverter ?? dataConverterFromEnvironment(setup.env ?? process.env);
  // The worker image's bundle built ahead of time, when it matches this worker's converter and tracing.
  const workflowBundle = setup.workflowBundle ?? prebuiltWorkflowBundle(dataConverter, setup.tracing !== undefined);
  const plugins = (workflows: boolean) => [...(setup.tracing?.plugins ?? []), durableHarnessPlugin({ deps, dataConverter, workflows, workflowBundle })];
  const options = {
    connection: setup.connection,
    namespace,
    identity: workerIdentity(hash, setup.identity),
    maxHeartbeatThrottleInterval: heartbeatThrottle,
    defaultHeartbeatThrottleInterval: heartbeatThrottle,
    shutdownGraceTime: setup.shutdownGraceTime ?? '5s',
  } satisfies Omit<WorkerOptions, 'taskQueue'>;
  const main = await Worker.create({ ...options, taskQueue, plugins: plugins(!activitiesOnly) });
  // Activities only: the turns (and the end) of runs whose workspace this host holds.
  const host = hostQueue ? await Worker.create({ ...options, taskQueue: hostQueue, plugins: plugins(false) }) : undefined;
  // Runs Temporal terminated or timed out are closed in the ledger every minute, not only when some worker starts.
  const reconcileMs = setup.reconcileIntervalMs ?? defaultReconcileIntervalMs;
  const client = new Client({ connection: setup.connection, namespace, dataConverter });
  const background = () => {
    const stop = activitiesOnly || reconcileMs <= 0 ? () => undefined : reconcilePeriodically(deps.ledger, client, reconcileMs, (line) => Runtime.instance().logger.info(line));
    // A stopped worker leaves no gateway listening: its runs' sandboxes reach nothing until a worker takes them again.
    return () => {
      stop();
      void gateways.closeAll();
    };
  };
  return { worker: new HarnessWorker(main, host, hostQueue, background), deps };
}
