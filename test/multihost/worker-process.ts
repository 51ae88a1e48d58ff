/**
 * One "host" for the many-workers tests and the multi-worker benchmark: a durable-harness worker in its own process
 * with its own data and workspace root, on the shared task queue and its own host queue.
 *
 *   node --import tsx test/multihost/worker-process.ts   (configured by the environment below)
 *
 * TEMPORAL_ADDRESS, TASK_QUEUE, DATA_DIR, HOST_ID, DATABASE_URL (the shared ledger), CATALOG_JSON (a raw catalog),
 * WORKFLOW_BUNDLE (a prebuilt bundle; bundles itself when unset). Prints `ready <pid>` once polling; SIGTERM stops it.
 */
import path from 'node:path';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { createWorker } from '../../src/worker.js';

const need = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`worker-process: ${name} is not set`);
  return value;
};

Runtime.install({ logger: new DefaultLogger('WARN') });
const repoRoot = path.resolve(import.meta.dirname, '..', '..');
const catalog = parseCatalog(JSON.parse(need('CATALOG_JSON')), 'host catalog', { baseDir: path.join(repoRoot, 'config') });
const connection = await NativeConnection.connect({ address: need('TEMPORAL_ADDRESS') });
const bundle = process.env.WORKFLOW_BUNDLE;
const { worker } = await createWorker({
  connection,
  taskQueue: need('TASK_QUEUE'),
  hostId: need('HOST_ID'),
  catalog: () => catalog,
  dataDir: need('DATA_DIR'),
  env: { DATABASE_URL: need('DATABASE_URL') },
  credentials: new MemoryCredentialStore({}),
  ...(bundle ? { workflowBundle: { codePath: bundle } } : {}),
  identity: `host-${need('HOST_ID')}/${process.pid}`,
  catalogCheck: false,
  shutdownGraceTime: '2s',
});
process.once('SIGTERM', () => worker.shutdown());
const running = worker.run();
process.stdout.write(`ready ${process.pid}\n`);
await running;
await connection.close();
process.exit(0);
