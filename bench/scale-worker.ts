/**
 * The worker under test for bench/scale.ts, in its own process so its CPU and memory are its own: the project's
 * worker (createWorker) on the given task queue, or with `bare` the bare Temporal wrapper (bench/floor/bare.ts). Talks to the bench over IPC: it reports `ready` with its
 * pids, answers `stats` with the main thread's event-loop delay since the last `stats`, and stops on `stop` or
 * when the bench goes away.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { loadCatalog } from '../src/catalog/index.js';
import { createWorker } from '../src/worker.js';
import { createBareActivities } from './floor/bare.js';

/** Sent by the bench as the first message. */
export interface ScaleWorkerConfig {
  readonly address: string;
  readonly taskQueue: string;
  readonly catalogFile: string;
  readonly dataDir: string;
  readonly bundlePath: string;
  /** The bare wrapper instead of the project's worker (`bundlePath` then holds bench/floor/workflows.ts). */
  readonly bare?: boolean;
}

/** Event-loop delay of the worker's main thread, ms. */
export interface LoopDelay {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

export type ScaleWorkerMessage =
  | { type: 'ready'; pid: number }
  | { type: 'stats'; loop: LoopDelay }
  | { type: 'failed'; message: string };

const send = (message: ScaleWorkerMessage) => process.connected && process.send?.(message);

async function main(config: ScaleWorkerConfig): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const connection = await NativeConnection.connect({ address: config.address });
  const catalog = loadCatalog(config.catalogFile);
  const { worker, deps } = config.bare
    ? { worker: await Worker.create({ connection, taskQueue: config.taskQueue, workflowBundle: { codePath: config.bundlePath }, activities: createBareActivities() }), deps: undefined }
    : await createWorker({ connection, taskQueue: config.taskQueue, catalog: () => catalog, dataDir: config.dataDir, workflowBundle: { codePath: config.bundlePath } });
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const running = worker.run();
  process.on('message', (message: { type: string }) => {
    if (message.type === 'stats') {
      send({ type: 'stats', loop: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 } });
      loop.reset();
    }
    if (message.type === 'stop' && worker.getState() === 'RUNNING') worker.shutdown();
  });
  process.once('disconnect', () => worker.getState() === 'RUNNING' && worker.shutdown());
  send({ type: 'ready', pid: process.pid });
  try {
    await running;
  } finally {
    loop.disable();
    await deps?.ledger.close();
    await connection.close();
  }
}

process.once('message', (config: ScaleWorkerConfig) => {
  main(config).then(
    () => process.exit(0),
    (err: unknown) => {
      send({ type: 'failed', message: err instanceof Error ? err.message : String(err) });
      process.exit(1);
    },
  );
});
