/**
 * A worker in its own process, for tests that SIGKILL it mid-turn (a dead worker, not a graceful shutdown):
 *
 *   node --import tsx test/workflows/support/worker-process.ts ADDRESS TASK_QUEUE DATA_DIR CATALOG_JSON BUNDLE
 *
 * Prints "ready" once it polls. Its ledger is DATA_DIR/ledger.sqlite, like the in-process test worker's.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { parseCatalog } from '../../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../../src/credentials/index.js';
import { createWorker } from '../../../src/worker.js';

const [address, taskQueue, dataDir, catalogFile, bundlePath] = process.argv.slice(2) as [string, string, string, string, string];
Runtime.install({ logger: new DefaultLogger('ERROR') });
const repoRoot = path.resolve(import.meta.dirname, '..', '..', '..');
const catalog = parseCatalog(JSON.parse(readFileSync(catalogFile, 'utf8')), 'test catalog', { baseDir: path.join(repoRoot, 'config') });
const connection = await NativeConnection.connect({ address });
const { worker } = await createWorker({
  connection,
  taskQueue,
  catalog: () => catalog,
  dataDir,
  env: {},
  credentials: new MemoryCredentialStore({}),
  workflowBundle: { codePath: bundlePath },
});
const running = worker.run();
process.stdout.write('ready\n');
await running;
