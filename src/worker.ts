/** The durable-harness worker: the agentRun workflow and its activities on one task queue. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createBuiltinRegistry, type ActionRegistry } from './actions/index.js';
import { createActivities, type ActivityDeps } from './activities/index.js';
import { defaultAdapterRegistry, type AdapterRegistry } from './adapters/index.js';
import type { Catalog } from './catalog/schema.js';
import { JsonFileCredentialStore, MemoryCredentialStore, type CredentialStore } from './credentials/index.js';
import { SqliteLedger } from './ledger/index.js';
import type { Ledger } from './ledger/types.js';
import { LocalSandboxProvider, dockerSandboxFromEnvironment, reapContainers, spawnModeFromEnv, spawnerFor, temporalRunClosed } from './sandbox/index.js';
import { defaultSpawnMode } from './sandbox/spawner.js';
import type { Client } from '@temporalio/client';
import type { SandboxProvider } from './sandbox/types.js';

import { defaultTaskQueue } from './worker-defaults.js';
export { defaultTaskQueue };

/** The bundled workflow source (TypeScript; the worker's bundler compiles it). */
export const workflowsPath = fileURLToPath(new URL('./workflows/index.ts', import.meta.url));

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
  /** A prebuilt workflow bundle (tests bundle once per run). */
  readonly workflowBundle?: WorkerOptions['workflowBundle'];
  readonly identity?: string;
  /**
   * What this worker polls: `all` (default) — workflows, local and regular activities; `workflows` — workflows
   * and their local activities only, the regular ones (the turn) left to an activity worker elsewhere
   * (src/activity-worker.ts); `activities` — regular activities only, no workflow code.
   */
  readonly role?: WorkerRole;
  /** At most this many regular activities (turns) at once on this worker; default the SDK's 100. */
  readonly maxConcurrentTurns?: number;
  /** Concurrent polls for turns; each holds one of the slots above while it waits. Default the SDK's (≤ 10). */
  readonly turnPollers?: number;
}

/** See `WorkerSetup.role`. */
export type WorkerRole = 'all' | 'workflows' | 'activities';

/** Builds the activity dependencies with the embedded defaults: SQLite ledger, local sandbox, built-in actions. */
export function defaultDeps(setup: Omit<WorkerSetup, 'connection'>): ActivityDeps {
  const dataDir = path.resolve(setup.dataDir);
  const credentialsFile = path.join(dataDir, 'credentials.json');
  return {
    catalog: setup.catalog,
    adapters: setup.adapters ?? defaultAdapterRegistry(),
    sandboxes: setup.sandboxes ?? defaultSandboxes(setup.env ?? process.env, dataDir),
    ledger: setup.ledger ?? SqliteLedger.open(path.join(dataDir, 'ledger.sqlite')),
    actions: setup.actions ?? createBuiltinRegistry(),
    credentials: setup.credentials ?? (existsSync(credentialsFile) ? new JsonFileCredentialStore(credentialsFile) : new MemoryCredentialStore({})),
    env: setup.env,
  };
}

/**
 * The local provider always; the Docker provider when DURABLE_HARNESS_SANDBOX_IMAGE names a sandbox image.
 * Local processes are spawned as DURABLE_HARNESS_SPAWN says (src/sandbox/spawner.ts).
 */
export function defaultSandboxes(env: Readonly<Record<string, string | undefined>>, dataDir: string): Record<string, SandboxProvider> {
  const docker = dockerSandboxFromEnvironment(env, dataDir);
  const spawner = spawnerFor(spawnModeFromEnv(env, defaultSpawnMode));
  return { local: new LocalSandboxProvider({ root: path.join(dataDir, 'workspaces'), spawner }), ...(docker ? { docker } : {}) };
}

/** Removes sandbox containers whose runs are closed in Temporal (left by crashed workers). */
export async function reapClosedRunContainers(deps: ActivityDeps, client: Client): Promise<string[]> {
  if (!deps.sandboxes.docker) return [];
  const { removed } = await reapContainers({ isRunClosed: temporalRunClosed(client.workflow) });
  return removed;
}

/**
 * How often a running turn's heartbeat reaches the server. Cancellation reaches an activity only on a heartbeat
 * response, so this bounds how late a cancel is noticed: at 1 s a cancelled turn's process tree was gone in
 * 0.6-1.0 s (300 ms: 0.15-0.35 s), inside the 2 s promise. Every heartbeat is a server write: at 300 ms the dev
 * server spent ~5 ms more CPU per 2-second turn (docs/BENCHMARKS.md), i.e. 100 long turns cost it ~0.4 core
 * in heartbeats alone instead of ~0.12.
 */
export const heartbeatThrottle = '1s';

/** Creates a worker; run it with `worker.run()`, stop it with `worker.shutdown()`. */
export async function createWorker(setup: WorkerSetup): Promise<{ worker: Worker; deps: ActivityDeps }> {
  const deps = defaultDeps(setup);
  const role = setup.role ?? 'all';
  const worker = await Worker.create({
    connection: setup.connection,
    namespace: setup.namespace ?? 'default',
    taskQueue: setup.taskQueue ?? defaultTaskQueue,
    ...(setup.identity ? { identity: setup.identity } : {}),
    ...(role === 'activities' ? {} : setup.workflowBundle ? { workflowBundle: setup.workflowBundle } : { workflowsPath }),
    activities: createActivities(deps),
    enableNonLocalActivities: role !== 'workflows',
    ...(setup.maxConcurrentTurns !== undefined ? { maxConcurrentActivityTaskExecutions: setup.maxConcurrentTurns } : {}),
    // (SDK 1.24 ignores maxConcurrentActivityTaskPolls; the poller behaviour is what counts.)
    ...(setup.turnPollers !== undefined ? { activityTaskPollerBehavior: { type: 'simple-maximum', maximum: setup.turnPollers } as const } : {}),
    maxHeartbeatThrottleInterval: heartbeatThrottle,
    defaultHeartbeatThrottleInterval: heartbeatThrottle,
    shutdownGraceTime: '5s',
  });
  return { worker, deps };
}

