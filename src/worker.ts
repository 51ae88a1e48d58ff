/** The durable-harness worker: the agentRun workflow and its activities on one task queue. */
import { chmodSync, existsSync } from 'node:fs';
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
import { DockerSandboxProvider, LocalSandboxProvider, defaultDeployment, dockerSandboxFromEnvironment, reapContainers, temporalRunClosed } from './sandbox/index.js';
import type { Client } from '@temporalio/client';
import type { SandboxProvider } from './sandbox/types.js';

import { defaultNamespace, defaultTaskQueue } from './worker-defaults.js';
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
   * Which deployment this worker belongs to: labels its sandbox containers, and its reaper touches only
   * those. Default DURABLE_HARNESS_DEPLOYMENT, else `<namespace>/<task queue>`.
   */
  readonly deployment?: string;
}

/** Builds the activity dependencies with the embedded defaults: SQLite ledger, local sandbox, built-in actions. */
export function defaultDeps(setup: Omit<WorkerSetup, 'connection'>): ActivityDeps {
  const dataDir = path.resolve(setup.dataDir);
  const credentialsFile = path.join(dataDir, 'credentials.json');
  const env = setup.env ?? process.env;
  const deployment = setup.deployment ?? (env.DURABLE_HARNESS_DEPLOYMENT || defaultDeployment(setup.namespace ?? defaultNamespace, setup.taskQueue ?? defaultTaskQueue));
  return {
    catalog: setup.catalog,
    adapters: setup.adapters ?? defaultAdapterRegistry(),
    sandboxes: setup.sandboxes ?? defaultSandboxes(env, dataDir, deployment),
    ledger: setup.ledger ?? openPrivateLedger(path.join(dataDir, 'ledger.sqlite')),
    actions: setup.actions ?? createBuiltinRegistry(),
    credentials: setup.credentials ?? (existsSync(credentialsFile) ? new JsonFileCredentialStore(credentialsFile) : new MemoryCredentialStore({})),
    env: setup.env,
  };
}

/** The ledger file, readable by the worker only (a sandbox user must not read other runs' records). */
function openPrivateLedger(file: string): SqliteLedger {
  const ledger = SqliteLedger.open(file);
  chmodSync(file, 0o600);
  return ledger;
}

/**
 * The local provider always (runtime state under `<dataDir>/runtime/local`, outside every workspace); the
 * Docker provider when DURABLE_HARNESS_SANDBOX_IMAGE names a sandbox image.
 */
export function defaultSandboxes(env: Readonly<Record<string, string | undefined>>, dataDir: string, deployment?: string): Record<string, SandboxProvider> {
  const docker = dockerSandboxFromEnvironment(env, dataDir, undefined, deployment);
  const local = new LocalSandboxProvider({ root: path.join(dataDir, 'workspaces'), runtimeDir: path.join(dataDir, 'runtime', 'local') });
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

/** Creates a worker; run it with `worker.run()`, stop it with `worker.shutdown()`. */
export async function createWorker(setup: WorkerSetup): Promise<{ worker: Worker; deps: ActivityDeps }> {
  const deps = defaultDeps(setup);
  const worker = await Worker.create({
    connection: setup.connection,
    namespace: setup.namespace ?? 'default',
    taskQueue: setup.taskQueue ?? defaultTaskQueue,
    ...(setup.identity ? { identity: setup.identity } : {}),
    ...(setup.workflowBundle ? { workflowBundle: setup.workflowBundle } : { workflowsPath }),
    activities: createActivities(deps),
    // Cancellation reaches an activity on its next heartbeat response: keep that gap well under a second,
    // so a cancelled turn's process tree is gone within 2 s.
    maxHeartbeatThrottleInterval: '300ms',
    defaultHeartbeatThrottleInterval: '300ms',
    shutdownGraceTime: '5s',
  });
  return { worker, deps };
}

