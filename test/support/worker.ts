/**
 * A real worker on the shared test Temporal server, with its own task queue, data dir and ledger.
 * Workflows come from the bundle built once in global setup.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime, DefaultLogger } from '@temporalio/worker';
import { inject } from 'vitest';
import type { ActionRegistry } from '../../src/actions/index.js';
import type { AdapterRegistry } from '../../src/adapters/index.js';
import { parseCatalog, type Catalog } from '../../src/catalog/index.js';
import { startAgentRun, type AgentRunHandle, type StartAgentRunInput } from '../../src/client/index.js';
import { MemoryCredentialStore, type CredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import type { SandboxProvider } from '../../src/sandbox/types.js';
import { createWorker, type HarnessWorker } from '../../src/worker.js';
import type { DecisionMode, OperatorDirectory } from '../../src/operators/index.js';
import type { DataConverter } from '@temporalio/common';

let runtimeInstalled = false;
function quietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: new DefaultLogger('WARN') });
  } catch {
    // already installed in this process
  }
}

export interface TestWorkerOptions {
  /** A raw catalog object (validated like a config file) or a parsed one. */
  readonly catalog: unknown;
  /** Directory relative paths in the catalog resolve against (default: the repo's config/). */
  readonly catalogDir?: string;
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly credentials?: CredentialStore;
  readonly sandboxes?: (dataDir: string) => Readonly<Record<string, SandboxProvider>>;
  readonly adapters?: AdapterRegistry;
  readonly actions?: ActionRegistry;
  /** Reuse an existing data dir (a second worker for the same runs). */
  readonly dataDir?: string;
  readonly taskQueue?: string;
  /** Payload encoding for the worker and the client (e.g. encryption). */
  readonly dataConverter?: DataConverter;
  /** Whether operator decisions must be signed (default `trusted-network`, as `dev`: most tests decide unsigned). */
  readonly decisions?: DecisionMode;
  /** The operators whose signatures count (src/operators). */
  readonly operators?: OperatorDirectory;
  /** How often the worker reconciles closed runs in the ledger (default the worker's: every minute). */
  readonly reconcileIntervalMs?: number;
}

export interface TestWorker {
  readonly client: Client;
  readonly taskQueue: string;
  readonly dataDir: string;
  readonly ledger: SqliteLedger;
  readonly catalog: Catalog;
  readonly worker: HarnessWorker;
  /** Swaps the catalog the worker reads (as a config reload would), validated like a config file. */
  replaceCatalog(raw: unknown): void;
  start(input: Omit<StartAgentRunInput, 'taskQueue' | 'identity'> & Partial<Pick<StartAgentRunInput, 'identity'>>): Promise<AgentRunHandle>;
  /** Stops the worker (in-flight activities are cancelled) but keeps the client usable. */
  stopWorker(): Promise<void>;
  close(): Promise<void>;
}

export const repoRoot = path.resolve(import.meta.dirname, '..', '..');

export async function startTestWorker(options: TestWorkerOptions): Promise<TestWorker> {
  quietRuntime();
  const address = inject('temporalAddress');
  const dataDir = options.dataDir ?? mkdtempSync(path.join(os.tmpdir(), 'dh-run-'));
  // The whole path decides the queue: two files whose data dirs share a last name (`…/<pid>/claude`) would otherwise
  // poll one queue at once, and each worker would run the other's turns against its own catalog.
  const taskQueue = options.taskQueue ?? `test-${path.basename(dataDir)}-${createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 8)}`;
  const parse = (raw: unknown) => parseCatalog(raw, 'test catalog', { baseDir: options.catalogDir ?? path.join(repoRoot, 'config'), registry: options.actions });
  const catalog = parse(options.catalog);
  let current = catalog;
  const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  const nativeConnection = await NativeConnection.connect({ address });
  const { worker } = await createWorker({
    connection: nativeConnection,
    taskQueue,
    catalog: () => current,
    dataDir,
    ledger,
    env: options.env ?? {},
    credentials: options.credentials ?? new MemoryCredentialStore({}),
    sandboxes: options.sandboxes?.(dataDir),
    adapters: options.adapters,
    actions: options.actions,
    // A failure converter is part of the workflow bundle: a worker that has one bundles its own.
    workflowBundle: options.dataConverter?.failureConverterPath ? undefined : { codePath: inject('workflowBundlePath') },
    dataConverter: options.dataConverter,
    decisions: options.decisions ?? 'trusted-network',
    ...(options.operators ? { operators: () => options.operators! } : {}),
    ...(options.reconcileIntervalMs !== undefined ? { reconcileIntervalMs: options.reconcileIntervalMs } : {}),
  });
  const running = worker.run();
  const connection = await Connection.connect({ address });
  const client = new Client({ connection, dataConverter: options.dataConverter });
  let stopped = false;
  const stopWorker = async () => {
    if (stopped) return;
    stopped = true;
    if (worker.getState() === 'RUNNING') worker.shutdown();
    await running;
  };
  return {
    client,
    taskQueue,
    dataDir,
    ledger,
    catalog,
    worker,
    replaceCatalog: (raw) => {
      current = parse(raw);
    },
    start: (input) => startAgentRun(client, { identity: { tenantId: 'acme', userId: 'alice' }, ...input, taskQueue }),
    stopWorker,
    async close() {
      await stopWorker();
      await nativeConnection.close();
      await connection.close();
      await ledger.close();
    },
  };
}

/** A unique workflow id per test. */
export function testWorkflowId(label: string): string {
  return `${label}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
