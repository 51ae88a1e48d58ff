/**
 * The worker process of the chaos suite: a real durable-harness worker (its own process, so the driver can SIGKILL
 * it) over the run's data directory. While the file `<DATA_DIR>/ledger-read-only` exists its ledger is read-only (a
 * fault drill through SQLite itself, `PRAGMA query_only`); SIGTERM shuts it down.
 *
 *   node --import tsx test/chaos/chaos-worker.ts ADDRESS TASK_QUEUE DATA_DIR CATALOG_JSON_FILE
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { NativeConnection, Runtime, DefaultLogger } from '@temporalio/worker';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { createWorker } from '../../src/worker.js';

const [address, taskQueue, dataDir, catalogFile] = process.argv.slice(2);
if (!address || !taskQueue || !dataDir || !catalogFile) {
  process.stderr.write('usage: chaos-worker ADDRESS TASK_QUEUE DATA_DIR CATALOG_JSON_FILE\n');
  process.exit(2);
}
Runtime.install({ logger: new DefaultLogger('ERROR') });
const catalog = parseCatalog(JSON.parse(readFileSync(catalogFile, 'utf8')), catalogFile, { baseDir: path.dirname(catalogFile) });
const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
const flag = path.join(dataDir, 'ledger-read-only');
let readOnly = false;
setInterval(() => {
  const now = existsSync(flag);
  if (now !== readOnly) ledger.setReadOnly((readOnly = now));
}, 50).unref();
const connection = await NativeConnection.connect({ address });
const { worker } = await createWorker({
  connection,
  taskQueue,
  catalog: () => catalog,
  dataDir,
  ledger,
  env: {},
  credentials: new MemoryCredentialStore({}),
  workflowBundle: process.env.CHAOS_WORKFLOW_BUNDLE ? { codePath: process.env.CHAOS_WORKFLOW_BUNDLE } : undefined,
});
process.once('SIGTERM', () => worker.shutdown());
process.stdout.write('ready\n');
await worker.run();
await connection.close();
await ledger.close();
