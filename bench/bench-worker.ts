/**
 * The project's worker in the bench process, on a task queue of its own, with a client: what the history, flood and
 * approvals parts run their agents on. Unsigned decisions, as an operator in a trusted network.
 */
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, bundleWorkflowCode } from '@temporalio/worker';
import type { Catalog } from '../src/catalog/index.js';
import { createWorker, workflowsPath } from '../src/worker.js';

export async function startBenchWorker(opts: { temporalAddress: string; catalog: Catalog; dataDir: string; prefix: string; workflowBundlePath?: string }) {
  const nativeConnection = await NativeConnection.connect({ address: opts.temporalAddress });
  const taskQueue = `${opts.prefix}-${path.basename(opts.dataDir)}`;
  const bundle = opts.workflowBundlePath ? { codePath: opts.workflowBundlePath } : await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') });
  const { worker, deps } = await createWorker({ connection: nativeConnection, taskQueue, catalog: () => opts.catalog, dataDir: opts.dataDir, workflowBundle: bundle, env: {}, decisions: 'trusted-network' });
  const running = worker.run();
  const connection = await Connection.connect({ address: opts.temporalAddress });
  return {
    client: new Client({ connection }),
    taskQueue,
    deps,
    async close(): Promise<void> {
      worker.shutdown();
      await running;
      await nativeConnection.close();
      await connection.close();
      await deps.ledger.close();
    },
  };
}
