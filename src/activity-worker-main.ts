/**
 * Entry of the activity-worker process (see src/activity-worker.ts): receives its config over IPC, polls the
 * task queue's regular activities, and shuts down when the parent closes the channel or dies.
 */
import path from 'node:path';
import { NativeConnection, Runtime, DefaultLogger } from '@temporalio/worker';
import type { ActivityWorkerConfig, ActivityWorkerMessage } from './activity-worker.js';
import { watchCatalogFile } from './catalog/watch.js';
import { createWorker } from './worker.js';

const send = (message: ActivityWorkerMessage) => process.connected && process.send?.(message);

async function main(config: ActivityWorkerConfig): Promise<void> {
  // This worker has no workflows by design: drop the SDK's warning that says so, keep every other one.
  const logger = new DefaultLogger('WARN', (entry) => {
    if (!entry.message.startsWith('No workflows registered')) defaultLogger.log(entry.level, entry.message, entry.meta);
  });
  const defaultLogger = new DefaultLogger('WARN');
  // No SDK signal handlers: this process decides itself what a signal means (below).
  Runtime.install({ logger, shutdownSignals: [] });
  const connection = await NativeConnection.connect({ address: config.address });
  const { worker, deps } = await createWorker({
    connection,
    role: 'activities',
    namespace: config.namespace,
    taskQueue: config.taskQueue,
    catalog: watchCatalogFile(path.resolve(config.catalogFile), (e) => process.stderr.write(`catalog change ignored: ${e.message}\n`)),
    dataDir: config.dataDir,
    env: config.env,
    identity: config.identity,
  });
  // The parent closing the channel (or dying) is the shutdown request: never outlive it.
  const stop = () => worker.getState() === 'RUNNING' && worker.shutdown();
  process.once('disconnect', stop);
  // Ctrl-C reaches the terminal's whole process group: the parent handles it and closes the channel, so this
  // worker drains its turns instead of dying under them. A SIGTERM meant for this process alone stops it gently.
  process.on('SIGINT', () => undefined);
  process.once('SIGTERM', stop);
  const running = worker.run();
  send({ type: 'ready' });
  try {
    await running;
  } finally {
    await deps.ledger.close();
    await connection.close();
  }
}

process.once('message', (config: ActivityWorkerConfig) => {
  main(config).then(
    () => process.exit(0),
    (err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      send({ type: 'failed', message });
      process.stderr.write(`activity worker: ${message}\n`);
      process.exit(1);
    },
  );
});
