/** The durable-harness worker: the agentRun workflow and its activities on one task queue. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DataConverter } from '@temporalio/common';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { dataConverterFromEnvironment } from './codec/index.js';
import { TurnTelemetryInterceptor, type WorkerTracing } from './observability/index.js';
import { createBuiltinRegistry, type ActionRegistry } from './actions/index.js';
import { createActivities, type ActivityDeps } from './activities/index.js';
import { defaultAdapterRegistry, type AdapterRegistry } from './adapters/index.js';
import { catalogHash } from './catalog/hash.js';
import type { Catalog } from './catalog/schema.js';
import { JsonFileCredentialStore, MemoryCredentialStore, type CredentialStore } from './credentials/index.js';
import { ledgerReady, openLedger } from './ledger/index.js';
import type { Ledger } from './ledger/types.js';
import { LocalSandboxProvider, dockerSandboxFromEnvironment, reapContainers, temporalRunClosed } from './sandbox/index.js';
import type { Client } from '@temporalio/client';
import type { SandboxProvider } from './sandbox/types.js';
import { conflictingPollers, taskQueuePollers, workerIdentity } from './temporal/task-queue.js';

import { defaultTaskQueue } from './worker-defaults.js';
export { defaultTaskQueue };

/**
 * The workflow entry the worker bundles: the compiled `workflows/index.js` beside this file in the built package
 * (dist/), the TypeScript source when running from a checkout (tsx, vitest).
 */
export const workflowsPath = [
  fileURLToPath(new URL('./workflows/index.js', import.meta.url)),
  fileURLToPath(new URL('./workflows/index.ts', import.meta.url)),
].find((file) => existsSync(file))!;

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
  /** Worker identity (default `durable-harness/PID@HOST`); ` catalog:HASH` is always appended. */
  readonly identity?: string;
  /**
   * Payload encoding (encryption). Default: from `env` (DURABLE_HARNESS_PAYLOAD_KEYS, see src/codec/keys.ts);
   * clients of these runs need the same keys.
   */
  readonly dataConverter?: DataConverter;
  /**
   * OpenTelemetry tracing (`startTracing(observabilityFromEnvironment().tracing)`); off when omitted. With a prebuilt
   * `workflowBundle`, bundle it with `workflowInterceptorModules` (src/observability) for the workflow spans.
   */
  readonly tracing?: WorkerTracing;
  /**
   * Refuse to start when a worker with another catalog already polls the task queue (default true): mixed
   * catalogs on one queue fail runs at random with UnknownAgent.
   */
  readonly catalogCheck?: boolean;
  /** How long a stopping worker lets in-flight activities finish before cancelling them (default 5 s). */
  readonly shutdownGraceTime?: WorkerOptions['shutdownGraceTime'];
}

/** Raised when the task queue is already served by a worker with another catalog. */
export class CatalogMismatchError extends Error {
  override readonly name = 'CatalogMismatchError';
  readonly code = 'CatalogMismatch' as const;
}

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
  return {
    catalog: setup.catalog,
    adapters: setup.adapters ?? defaultAdapterRegistry(),
    sandboxes: setup.sandboxes ?? defaultSandboxes(setup.env ?? process.env, dataDir),
    // PostgreSQL when DATABASE_URL is set (one ledger for many workers), else SQLite in the data dir.
    ledger: setup.ledger ?? openLedger(setup.env ?? process.env, dataDir),
    actions: setup.actions ?? createBuiltinRegistry(),
    credentials: setup.credentials ?? (existsSync(credentialsFile) ? new JsonFileCredentialStore(credentialsFile) : new MemoryCredentialStore({})),
    env: setup.env,
  };
}

/** The local provider always; the Docker provider when DURABLE_HARNESS_SANDBOX_IMAGE names a sandbox image. */
export function defaultSandboxes(env: Readonly<Record<string, string | undefined>>, dataDir: string): Record<string, SandboxProvider> {
  const docker = dockerSandboxFromEnvironment(env, dataDir);
  return { local: new LocalSandboxProvider({ root: path.join(dataDir, 'workspaces') }), ...(docker ? { docker } : {}) };
}

/** Removes sandbox containers whose runs are closed in Temporal (left by crashed workers). */
export async function reapClosedRunContainers(deps: ActivityDeps, client: Client): Promise<string[]> {
  if (!deps.sandboxes.docker) return [];
  const { removed } = await reapContainers({ isRunClosed: temporalRunClosed(client.workflow) });
  return removed;
}

/** Creates a worker; run it with `worker.run()`, stop it with `worker.shutdown()`. */
export async function createWorker(setup: WorkerSetup): Promise<{ worker: Worker; deps: ActivityDeps }> {
  const namespace = setup.namespace ?? 'default';
  const taskQueue = setup.taskQueue ?? defaultTaskQueue;
  const hash = catalogHash(setup.catalog());
  if (setup.catalogCheck !== false) await assertSameCatalogOnTaskQueue(setup.connection, namespace, taskQueue, hash);
  const deps = defaultDeps(setup);
  await ledgerReady(deps.ledger); // a wrong DATABASE_URL fails the worker at start, not its first turn
  const worker = await Worker.create({
    connection: setup.connection,
    namespace,
    taskQueue,
    identity: workerIdentity(hash, setup.identity),
    ...(setup.workflowBundle ? { workflowBundle: setup.workflowBundle } : { workflowsPath }),
    activities: createActivities(deps),
    // Turn tokens and cost go to the runtime's metrics always, and onto the turn's span when tracing is on.
    interceptors: setup.tracing?.workerOptions.interceptors ?? { activity: [(ctx) => ({ inbound: new TurnTelemetryInterceptor(ctx) })] },
    ...(setup.tracing ? { sinks: setup.tracing.workerOptions.sinks } : {}),
    dataConverter: setup.dataConverter ?? dataConverterFromEnvironment(setup.env ?? process.env),
    // Cancellation reaches an activity on its next heartbeat response: keep that gap well under a second,
    // so a cancelled turn's process tree is gone within 2 s.
    maxHeartbeatThrottleInterval: '300ms',
    defaultHeartbeatThrottleInterval: '300ms',
    shutdownGraceTime: setup.shutdownGraceTime ?? '5s',
  });
  return { worker, deps };
}

