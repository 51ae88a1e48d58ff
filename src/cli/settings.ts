/** Where the command line connects and keeps its data: flags, then environment, then embedded defaults. */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultNamespace, defaultTaskQueue, defaultTemporalAddress } from '../worker-defaults.js';

export interface Settings {
  readonly address: string;
  readonly namespace: string;
  readonly taskQueue: string;
  /** Catalog file (JSON or YAML). */
  readonly catalogFile: string;
  /** Ledger, workspaces, credentials and the dev server's database live here. */
  readonly dataDir: string;
}

/** The repository (or installed package) root: the parent of src/. */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export function resolveSettings(
  flags: Partial<Record<'address' | 'namespace' | 'task-queue' | 'catalog' | 'data', string | undefined>>,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Settings {
  return {
    address: flags.address ?? env.TEMPORAL_ADDRESS ?? defaultTemporalAddress,
    namespace: flags.namespace ?? env.TEMPORAL_NAMESPACE ?? defaultNamespace,
    taskQueue: flags['task-queue'] ?? env.DURABLE_HARNESS_TASK_QUEUE ?? defaultTaskQueue,
    catalogFile: path.resolve(flags.catalog ?? env.DURABLE_HARNESS_CATALOG ?? path.join(packageRoot, 'config', 'default.yaml')),
    dataDir: path.resolve(flags.data ?? env.DURABLE_HARNESS_DATA ?? '.data'),
  };
}

/** Exit codes: how the run ended, or why the command could not run. */
export const ExitCodes = {
  succeeded: 0,
  usage: 2,
  unavailable: 3,
  failed: 10,
  stopped: 11,
  cancelled: 12,
  awaitingOperator: 13,
} as const;
