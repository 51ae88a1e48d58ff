/**
 * Entry of the activity-worker process (see src/activity-worker.ts): receives its config over IPC, polls the
 * task queue's regular activities, and shuts down when the parent closes the channel or dies. It encodes payloads
 * with the same keys, traces and meters its turns like the parent, and logs like it.
 */
import os from 'node:os';
import path from 'node:path';
import type { LogLevel, LogMetadata, Logger } from '@temporalio/common';
import { NativeConnection, Runtime, DefaultLogger } from '@temporalio/worker';
import { activityProcessMetrics, type ActivityWorkerConfig, type ActivityWorkerMessage } from './activity-worker.js';
import { catalogHash } from './catalog/hash.js';
import { watchCatalogFile } from './catalog/watch.js';
import { OperatorLog } from './cli/operator-log.js';
import { startTracing } from './observability/tracing.js';
import { createWorker } from './worker.js';

const send = (message: ActivityWorkerMessage) => process.connected && process.send?.(message);

/** The parent's kind of log, without the SDK's warning that this worker has no workflows (it has none by design). */
function logger(kind: ActivityWorkerConfig['log']): Logger {
  const inner: Logger = kind === 'operator' ? new OperatorLog({ write: (line) => process.stdout.write(`${line}\n`) }) : new DefaultLogger('WARN');
  const log = (level: LogLevel, message: string, meta?: LogMetadata) => {
    if (!message.startsWith('No workflows registered')) inner.log(level, message, meta);
  };
  return {
    log,
    trace: (m, meta) => log('TRACE', m, meta),
    debug: (m, meta) => log('DEBUG', m, meta),
    info: (m, meta) => log('INFO', m, meta),
    warn: (m, meta) => log('WARN', m, meta),
    error: (m, meta) => log('ERROR', m, meta),
  };
}

async function main(config: ActivityWorkerConfig): Promise<void> {
  const metrics = config.observability?.metrics && activityProcessMetrics(config.observability.metrics);
  // No SDK signal handlers: this process decides itself what a signal means (below).
  Runtime.install({ logger: logger(config.log), shutdownSignals: [], ...(metrics ? { telemetryOptions: { metrics } } : {}) });
  const tracing = config.observability?.tracing && startTracing(config.observability.tracing);
  const catalogFile = path.resolve(config.catalogFile);
  const catalog = watchCatalogFile(catalogFile, (e) => process.stderr.write(`catalog change ignored: ${e.message}\n`));
  const connection = await NativeConnection.connect({ address: config.address });
  const { worker, deps } = await createWorker({
    connection,
    role: 'activities',
    namespace: config.namespace,
    taskQueue: config.taskQueue,
    catalog,
    dataDir: config.dataDir,
    env: config.env,
    identity: config.identity ?? `durable-harness-activities/${process.pid}@${os.hostname()}`,
    ...(config.hostId !== undefined ? { hostId: config.hostId } : {}),
    ...(config.hostAffinity !== undefined ? { hostAffinity: config.hostAffinity } : {}),
    // The parent checked the task queue before starting this process and compares the hash sent back below;
    // checking here would find the parent's previous run (or race its start) instead.
    catalogCheck: false,
    ...(config.shutdownGraceTime !== undefined ? { shutdownGraceTime: config.shutdownGraceTime } : {}),
    ...(config.decisions !== undefined ? { decisions: config.decisions } : {}),
    ...(tracing ? { tracing } : {}),
  });
  // The parent closing the channel (or dying) is the shutdown request: never outlive it.
  const stop = () => worker.getState() === 'RUNNING' && worker.shutdown();
  process.once('disconnect', stop);
  // Ctrl-C reaches the terminal's whole process group: the parent handles it and closes the channel, so this
  // worker drains its turns instead of dying under them. A SIGTERM meant for this process alone stops it gently.
  process.on('SIGINT', () => undefined);
  process.once('SIGTERM', stop);
  const running = worker.run();
  const metricsAt = metrics && ('prometheus' in metrics ? `http://${metrics.prometheus.bindAddress}/metrics` : 'otel' in metrics ? metrics.otel.url : undefined);
  send({ type: 'ready', catalogHash: catalogHash(catalog()), ...(metricsAt ? { metrics: metricsAt } : {}) });
  try {
    await running;
  } finally {
    await deps.ledger.close();
    await connection.close();
    await tracing?.shutdown();
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
