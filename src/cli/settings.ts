/** Where the command line connects and keeps its data: flags, then environment, then embedded defaults. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SqliteLedger, openLedger, type Ledger } from '../ledger/index.js';
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

/** The local ledger, when this machine has one (it adds what the harness is doing to progress lines). */
export function openLedgerIfPresent(s: Pick<Settings, 'dataDir'>): Ledger | undefined {
  if (process.env.DATABASE_URL?.trim()) return openLedger(process.env, s.dataDir);
  const file = path.join(s.dataDir, 'ledger.sqlite');
  return existsSync(file) ? SqliteLedger.open(file) : undefined;
}
