/**
 * Where the turn activity runs. `inline`: in the workflow worker's process, as before. `process`: a second
 * Temporal worker in a child process polls the task queue's regular activities (the harness turn: spawning,
 * line parsing, ledger writes, heartbeats), while the main worker keeps the workflows and their local
 * activities — so a workflow task never waits behind harness I/O on the same event loop.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Duration } from '@temporalio/common';
import { msToNumber } from '@temporalio/common/lib/time.js';
import type { ActivityDeps } from './activities/index.js';
import { catalogHash } from './catalog/hash.js';
import type { DecisionMode } from './operators/index.js';
import type { ObservabilityConfig } from './observability/config.js';
import { assertSameCatalogOnTaskQueue, CatalogMismatchError, createWorker, type HarnessWorker, type WorkerSetup } from './worker.js';
import { defaultTaskQueue } from './worker-defaults.js';

/** See the file comment. */
export type ActivityPlacement = 'inline' | 'process';
export const activityPlacements: readonly ActivityPlacement[] = ['inline', 'process'];
/**
 * Placement `process`: how many turns the workflow worker still runs itself. The server hands a turn to the
 * worker whose workflow task scheduled it, in that task's response (eager dispatch), only while that worker has a
 * free slot; a few slots keep single runs at Temporal's floor (no dispatch wait), and under load the rest go to
 * the activity-worker process. 0 sends every turn there.
 */
export const defaultEagerTurnSlots = 2;

/**
 * `DURABLE_HARNESS_ACTIVITY_WORKER` overrides it. `inline` until a quiet machine says otherwise: on the shared
 * one `process` cut the worker's event-loop delay 3-10x and won at 30-50 concurrent runs, but at 100 it lost in
 * one of three runs — its turns, no longer eagerly dispatched, waited 255 ms p50 / 2.1 s p99 to be matched and
 * cost the server 3-5 ms more CPU each (docs/BENCHMARKS.md).
 */
export const defaultActivityPlacement: ActivityPlacement = 'inline';

/** The placement named by `DURABLE_HARNESS_ACTIVITY_WORKER` (`inline` or `process`), else the default. */
export function activityPlacementFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): ActivityPlacement {
  const value = env.DURABLE_HARNESS_ACTIVITY_WORKER?.trim();
  if (!value) return defaultActivityPlacement;
  if (!(activityPlacements as readonly string[]).includes(value)) {
    throw new Error(`DURABLE_HARNESS_ACTIVITY_WORKER must be one of ${activityPlacements.join(', ')}; got "${value}".`);
  }
  return value as ActivityPlacement;
}

/**
 * What the activity-worker process rebuilds its dependencies from: it cannot share the parent's objects, so it
 * opens the same catalog file, ledger (DATABASE_URL or the data directory's SQLite, which in WAL takes writers
 * from both processes) and payload keys (DURABLE_HARNESS_PAYLOAD_KEYS from `env`, else its inherited
 * environment). Sent over the IPC channel, never argv, since `env` may hold credentials and keys.
 */
export interface ActivityWorkerConfig {
  readonly address: string;
  readonly namespace: string;
  readonly taskQueue: string;
  readonly catalogFile: string;
  readonly dataDir: string;
  /** Worker identity; default `durable-harness-activities/PID@HOST` (its own pid). ` catalog:HASH` is appended. */
  readonly identity?: string;
  /** The parent's host id and host affinity, so this process polls the same host queue (docs/multi-host.md). */
  readonly hostId?: string;
  readonly hostAffinity?: boolean;
  /** The environment for credentials, payload keys and the ledger; default: the child's own (inherited) one. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** As the parent's `shutdownGraceTime`: how long in-flight turns may finish when it stops. */
  readonly shutdownGraceTime?: Duration;
  /** The parent's decision mode: it decides what a sandbox may reach, so both processes must agree. */
  readonly decisions?: DecisionMode;
  /**
   * The parent's tracing and metrics, so turns in this process get their spans and turn metrics too. Its metrics
   * exporter is its own (`activityProcessMetrics`): a Prometheus endpoint on the next port, OTLP with a tag.
   */
  readonly observability?: ObservabilityConfig;
  /** `operator`: log like `durable-harness dev`/`worker` (one line per failed attempt); default the SDK's, WARN. */
  readonly log?: 'operator' | 'default';
}

/** Messages from the activity-worker process. */
export type ActivityWorkerMessage = { type: 'ready'; catalogHash: string; metrics?: string } | { type: 'failed'; message: string };

/** A running activity-worker process. */
export interface ActivityWorkerProcess {
  readonly pid: number;
  /** The hash of the catalog it loaded from the file (compared with the parent's before anything runs). */
  readonly catalogHash: string;
  /** Where its own metrics are exported (a Prometheus URL or the OTLP endpoint), when metrics are on. */
  readonly metrics?: string;
  /** Resolves with the exit code (or signal name) when the process ends, for whatever reason. */
  readonly exited: Promise<number | string>;
  /** Asks it to shut down (in-flight turns are cancelled and cleaned up) and waits for it to exit. */
  stop(): Promise<void>;
}

const entryFile = (): string => {
  const ts = fileURLToPath(new URL('./activity-worker-main.ts', import.meta.url));
  return import.meta.url.endsWith('.ts') ? ts : ts.replace(/\.ts$/, '.js');
};

/** Starts the activity worker in a child process and waits until it polls. */
export async function startActivityWorkerProcess(config: ActivityWorkerConfig, options: { readyTimeoutMs?: number } = {}): Promise<ActivityWorkerProcess> {
  const entry = entryFile();
  // The parent's Node flags (heap size, --cpu-prof, the tsx loader) but not a debugger port it holds.
  const execArgv = process.execArgv.filter((a) => !a.startsWith('--inspect'));
  // Running from TypeScript sources without tsx's loader in the flags (vitest): give the child tsx.
  if (entry.endsWith('.ts') && !execArgv.some((a) => a.includes('tsx'))) execArgv.push('--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href);
  const child: ChildProcess = fork(entry, [], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  let timer: NodeJS.Timeout | undefined;
  const ready = new Promise<Extract<ActivityWorkerMessage, { type: 'ready' }>>((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`the activity worker process did not start polling within ${readyTimeoutMs} ms`)), readyTimeoutMs);
    child.on('message', (message: ActivityWorkerMessage) => {
      if (message.type === 'ready') resolve(message);
      if (message.type === 'failed') reject(new Error(`the activity worker process failed to start: ${message.message}`));
    });
    void exited.then((code) => reject(new Error(`the activity worker process exited (${code}) before it was ready`)));
  }).finally(() => clearTimeout(timer));
  child.send(config);
  let started: Extract<ActivityWorkerMessage, { type: 'ready' }>;
  try {
    started = await ready;
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  return {
    pid: child.pid!,
    catalogHash: started.catalogHash,
    ...(started.metrics ? { metrics: started.metrics } : {}),
    exited,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // Closing the IPC channel is the shutdown request; the worker's grace time bounds it, SIGKILL backs it up.
      if (child.connected) child.disconnect();
      const timer = setTimeout(() => child.kill('SIGKILL'), msToNumber(config.shutdownGraceTime ?? '5s') + 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * The activity process's own metrics exporter, from the parent's: a process cannot share the parent's Prometheus
 * port, so it serves on the next one (`HOST:PORT+1`); both kinds get the tag `durable_harness_process=activities`
 * so its series (the turn metrics live here) never collide with the parent's.
 */
export function activityProcessMetrics(metrics: NonNullable<ObservabilityConfig['metrics']>): NonNullable<ObservabilityConfig['metrics']> {
  const globalTags = { ...(metrics.globalTags ?? {}), durable_harness_process: 'activities' };
  if ('prometheus' in metrics) {
    const bind = metrics.prometheus.bindAddress;
    const colon = bind.lastIndexOf(':');
    const port = Number(bind.slice(colon + 1));
    if (!Number.isInteger(port) || port >= 65535) throw new Error(`cannot place the activity process's metrics beside ${bind}: no next port`);
    return { ...metrics, globalTags, prometheus: { ...metrics.prometheus, bindAddress: `${bind.slice(0, colon)}:${port + 1}` } };
  }
  return { ...metrics, globalTags };
}

/** A workflow worker plus, with placement `process`, its activity-worker process. */
export interface PlacedWorker {
  readonly worker: HarnessWorker;
  readonly deps: ActivityDeps;
  readonly placement: ActivityPlacement;
  readonly activityProcess?: ActivityWorkerProcess;
  /** Runs until `shutdown()`; rejects if the activity-worker process dies under it. */
  run(): Promise<void>;
  shutdown(): Promise<void>;
}

/**
 * `createWorker` with the turn activity placed as asked. For `process` the child rebuilds its dependencies
 * from `processConfig` (the catalog file, the data directory, the environment's payload keys and ledger), so
 * injected objects (a custom ledger, adapters, credential store) only reach `inline` workers; an injected
 * `dataConverter`, or `tracing` without `processConfig.observability`, is refused, since the two processes would
 * then encode payloads or trace differently.
 */
export async function createPlacedWorker(
  setup: WorkerSetup & {
    placement: ActivityPlacement;
    processConfig?: Pick<ActivityWorkerConfig, 'address' | 'catalogFile' | 'env' | 'observability' | 'log'>;
    /** Placement `process`: see `defaultEagerTurnSlots`. */
    eagerTurnSlots?: number;
  },
): Promise<PlacedWorker> {
  if (setup.placement === 'inline') {
    const { worker, deps } = await createWorker(setup);
    return { worker, deps, placement: 'inline', run: () => worker.run(), shutdown: async () => stopWorker(worker) };
  }
  const config = setup.processConfig;
  if (!config) throw new Error('activity placement "process" needs processConfig (the Temporal address and the catalog file)');
  if (setup.dataConverter) {
    throw new Error('activity placement "process" builds the activity process\'s data converter from the environment (DURABLE_HARNESS_PAYLOAD_KEYS); pass the keys through env instead of a dataConverter');
  }
  if (setup.tracing && !config.observability?.tracing) {
    throw new Error('activity placement "process" with tracing needs processConfig.observability.tracing, so turns in the activity process are traced too');
  }
  const namespace = setup.namespace ?? 'default';
  const taskQueue = setup.taskQueue ?? defaultTaskQueue;
  // The catalog check runs once, here, before either process polls: each would otherwise see the other.
  const hash = catalogHash(setup.catalog());
  if (setup.catalogCheck !== false) await assertSameCatalogOnTaskQueue(setup.connection, namespace, taskQueue, hash);
  const activityProcess = await startActivityWorkerProcess({
    ...config,
    namespace,
    taskQueue,
    dataDir: setup.dataDir,
    env: config.env ?? setup.env,
    identity: setup.identity ? `${setup.identity}-activities` : undefined,
    ...(setup.hostId !== undefined ? { hostId: setup.hostId } : {}),
    ...(setup.hostAffinity !== undefined ? { hostAffinity: setup.hostAffinity } : {}),
    shutdownGraceTime: setup.shutdownGraceTime,
    ...(setup.decisions !== undefined ? { decisions: setup.decisions } : {}),
  });
  if (activityProcess.catalogHash !== hash) {
    await activityProcess.stop();
    throw new CatalogMismatchError(
      `the activity worker process loaded catalog ${activityProcess.catalogHash} from ${config.catalogFile}, but this worker serves catalog ${hash}; ` +
        'both processes must serve the same catalog (was the file changed while the worker started?)',
    );
  }
  const eagerTurnSlots = setup.eagerTurnSlots ?? defaultEagerTurnSlots;
  // A waiting poll holds a slot too, so one poller gets one slot more than the eager ones.
  let created: Awaited<ReturnType<typeof createWorker>>;
  try {
    created = await createWorker(
      eagerTurnSlots > 0
        ? { ...setup, catalogCheck: false, role: 'all', maxConcurrentTurns: eagerTurnSlots + 1, turnPollers: 1 }
        : { ...setup, catalogCheck: false, role: 'workflows' },
    );
  } catch (err) {
    await activityProcess.stop();
    throw err;
  }
  const { worker, deps } = created;
  let running: Promise<void> | undefined;
  let stopping = false;
  return {
    worker,
    deps,
    placement: 'process',
    activityProcess,
    run() {
      running ??= (async () => {
        let died: number | string | undefined;
        const workerRun = worker.run();
        void activityProcess.exited.then(async (code) => {
          if (stopping) return;
          // No turn can run without it: stop rather than let runs wait for ever.
          died = code;
          await stopWorker(worker);
        });
        await workerRun;
        if (died !== undefined) throw new Error(`the activity worker process exited (${died}); the worker stopped`);
      })();
      return running;
    },
    async shutdown() {
      stopping = true;
      await Promise.all([activityProcess.stop(), stopWorker(worker)]);
    },
  };
}

async function stopWorker(worker: HarnessWorker): Promise<void> {
  if (worker.getState() === 'RUNNING') worker.shutdown();
}
