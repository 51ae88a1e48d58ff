/**
 * A durable-harness worker in its own process, for tests that SIGKILL it (a dead worker or a lost host, not a
 * graceful shutdown), the chaos suite and `npm run bench -- workers`:
 *
 *   node --import tsx test/support/worker-process.ts   (configured by the environment below)
 *
 * Required: TEMPORAL_ADDRESS, TASK_QUEUE, DATA_DIR, and CATALOG_JSON (a raw catalog; relative paths resolve against
 * config/). Optional: WORKFLOW_BUNDLE (a prebuilt bundle; bundles itself when unset), HOST_ID (its host queue's
 * id), DATABASE_URL (a shared PostgreSQL ledger; else DATA_DIR/ledger.sqlite), LEDGER_FILE (a SQLite ledger another
 * process shares, instead of DATA_DIR's), READ_ONLY_FLAG (a file: while it
 * exists the SQLite ledger is read-only, through SQLite itself — a fault drill), CATALOG_CHECK=off, LOG_LEVEL
 * (default ERROR), WORKER_ENV_JSON (the server environment credentials resolve from, beside DATABASE_URL),
 * CREDENTIALS_JSON (the worker's credential store: name → value). Prints
 * `ready <pid>` once it polls; SIGTERM shuts it down.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { DefaultLogger, NativeConnection, Runtime, type LogLevel } from '@temporalio/worker';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { createWorker } from '../../src/worker.js';

const need = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`worker-process: ${name} is not set`);
  return value;
};
const env = process.env;

Runtime.install({ logger: new DefaultLogger((env.LOG_LEVEL as LogLevel | undefined) ?? 'ERROR') });
const repoRoot = path.resolve(import.meta.dirname, '..', '..');
const catalog = parseCatalog(JSON.parse(need('CATALOG_JSON')), 'test catalog', { baseDir: path.join(repoRoot, 'config') });
const dataDir = need('DATA_DIR');
const hostId = env.HOST_ID;

// The read-only drill needs the process's own SQLite handle; otherwise the worker opens its ledger itself.
const readOnlyFlag = env.READ_ONLY_FLAG;
const ledger = readOnlyFlag || env.LEDGER_FILE ? SqliteLedger.open(env.LEDGER_FILE ?? path.join(dataDir, 'ledger.sqlite')) : undefined;
if (ledger && readOnlyFlag) {
  let readOnly = false;
  setInterval(() => {
    const now = existsSync(readOnlyFlag);
    if (now !== readOnly) ledger.setReadOnly((readOnly = now));
  }, 50).unref();
}

const connection = await NativeConnection.connect({ address: need('TEMPORAL_ADDRESS') });
const { worker } = await createWorker({
  connection,
  taskQueue: need('TASK_QUEUE'),
  catalog: () => catalog,
  dataDir,
  ...(ledger ? { ledger } : {}),
  env: { ...(env.WORKER_ENV_JSON ? (JSON.parse(env.WORKER_ENV_JSON) as Record<string, string>) : {}), ...(env.DATABASE_URL ? { DATABASE_URL: env.DATABASE_URL } : {}) },
  credentials: new MemoryCredentialStore(env.CREDENTIALS_JSON ? (JSON.parse(env.CREDENTIALS_JSON) as Record<string, string>) : {}),
  ...(env.WORKFLOW_BUNDLE ? { workflowBundle: { codePath: env.WORKFLOW_BUNDLE } } : {}),
  // A host stands in for a machine of a fleet: it stops quickly and names itself.
  ...(hostId ? { hostId, identity: `host-${hostId}/${process.pid}`, shutdownGraceTime: '2s' } : {}),
  catalogCheck: env.CATALOG_CHECK !== 'off',
  // As the in-process test worker: unsigned decisions, unless a test asks for signed ones.
  decisions: env.DURABLE_HARNESS_DECISIONS === 'signed' ? 'signed' : 'trusted-network',
});
process.once('SIGTERM', () => worker.shutdown());
const running = worker.run();
process.stdout.write(`ready ${process.pid}\n`);
await running;
await connection.close();
await ledger?.close();
process.exit(0);
