// The service's worker: the agentRun workflow (compiled, from the installed package) and its activities, with this
// service's catalog. Plain node: `node worker.mjs`. Stops on SIGINT/SIGTERM.
import { fileURLToPath } from 'node:url';
import { NativeConnection } from '@temporalio/worker';
import { loadCatalog } from 'durable-harness/catalog';
import { createWorker } from 'durable-harness/worker';

const address = process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233';
const taskQueue = process.env.TASK_QUEUE ?? 'example-service';
const catalog = loadCatalog(fileURLToPath(new URL('./catalog.yaml', import.meta.url)));

const connection = await NativeConnection.connect({ address });
const { worker } = await createWorker({ connection, taskQueue, catalog: () => catalog, dataDir: '.data' });
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => worker.shutdown());
console.log(`worker ready on task queue ${taskQueue} at ${address}`);
await worker.run();
await connection.close();
console.log('worker stopped');
