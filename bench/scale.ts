/**
 * Scale curve: one worker (its own process), N concurrent runs of `turns` turns that each sleep `turnSeconds`
 * (bench/harness/sleep-harness.sh, a shell script, so harness start-up does not hide orchestration), for N in
 * `levels`. Per level, from the runs' histories and /proc:
 *   - turn overhead: the time between two consecutive turn results minus the harness's sleep (turns 2..n:
 *     the workflow task, local activities, dispatch, spawn, exit); p50/p99
 *   - start latency: the client's start call to the first turn's activity start; p50/p99
 *   - worker CPU (all threads, in cores), its main thread's share of one core, its event-loop delay p99,
 *     peak RSS; the Temporal server's CPU; the machine's busy share
 * Every level is bounded in time (`levelTimeoutMs`); a level that does not finish terminates its runs and ends
 * the curve. Run alone: `npx tsx bench/scale.ts [--levels 10,50,100,200]
 * [--turn-seconds 2] [--turns 3] [--cpu-prof DIR]` (starts its own dev server).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { DefaultLogger, bundleWorkflowCode } from '@temporalio/worker';
import { startAgentRun } from '../src/client/index.js';
import { workflowsPath } from '../src/worker.js';
import { cpuSeconds, rssMb, threadCpuSeconds } from './proc.js';
import type { LoopDelay, ScaleWorkerConfig, ScaleWorkerMessage } from './scale-worker.js';
import { requestsPerTurn, requestsTable, serverRequests, type RequestCounts } from './server-requests.js';
import { percentile } from './stats.js';
import { turnTimeline } from './turn-timeline.js';

export interface ScaleOptions {
  readonly temporalAddress: string;
  /** The Temporal server's pid, to report its CPU. */
  readonly serverPid?: number;
  /** The server's Prometheus endpoint, to count its requests per turn by operation (bench/server-requests.ts). */
  readonly metricsUrl?: string;
  readonly levels?: readonly number[];
  readonly turnSeconds?: number;
  readonly turns?: number;
  /** Upper bound of one level's wall time; default 120 s + 0.5 s per run. */
  readonly levelTimeoutMs?: number;
  readonly workflowBundlePath?: string;
  /** Write V8 CPU profiles of the worker process(es) into this directory (`--cpu-prof`). */
  readonly cpuProfileDir?: string;
}

export interface Quantiles {
  readonly p50: number;
  readonly p99: number;
}

export interface ScaleRow {
  readonly runs: number;
  readonly completed: number;
  /** The level hit its time bound; its figures cover the runs that finished. */
  readonly timedOut: boolean;
  readonly wallS: number;
  readonly turnOverheadMs: Quantiles;
  /** A turn's wait from scheduled to picked up by a worker (0 with eager activity dispatch). */
  readonly dispatchMs: Quantiles;
  readonly startLatencyMs: Quantiles;
  /** Worker process CPU over the level, in cores (all its threads). */
  readonly workerCores: number;
  /**
   * CPU milliseconds per turn (all turns of the level, start and end of the runs included): the worker process
   * (all threads), its main thread, the Temporal server, the harness processes. CPU time
   * suffers far less than latency from other load on a shared machine.
   */
  readonly cpuMsPerTurn: { worker: number; main: number; server?: number; harness: number };
  /** The worker's main thread: share of one core it was busy. */
  readonly mainThreadBusy: number;
  readonly loop: LoopDelay;
  readonly workerPeakRssMb: number;
  readonly serverCores?: number;
  /** Share of all the machine's CPU time that was busy during the level. */
  readonly machineBusy: number;
  /** The worker's CPU ms per turn by thread name (`main`; `node`: worker threads, the workflows' among them; `tokio-runtime-w`: the SDK's core). */
  readonly workerThreads: Record<string, number>;
  /** The server's RPCs and persistence operations per turn, by operation (with `metricsUrl`). */
  readonly serverRequests?: RequestCounts;
  /** The same level through the bare Temporal wrapper around the same harness (bench/floor/bare.ts), just after. */
  readonly bare?: ScaleRow;
}

const harnessPath = path.join(import.meta.dirname, 'harness', 'sleep-harness.sh');

/** What a bare-wrapper level runs: the same harness, spawned by bench/floor/bare.ts in a workspace under `root`. */
interface BareHarness {
  readonly harness: { readonly executable: string; readonly args: readonly string[]; readonly model: string };
  readonly root: string;
  readonly maxTurns: number;
}
const tsxImport = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

function scaleCatalog(turnSeconds: number, turns: number): unknown {
  return {
    harnesses: [
      {
        name: 'sleep',
        driverClass: 'StdioJson',
        executable: '/bin/sh',
        args: [harnessPath, String(turnSeconds), String(turns)],
        active: true,
        vendor: 'bench',
        model: 'sleep-1',
        capabilities: { sessionResume: true, systemPrompt: false },
        prices: { input: 1, output: 1 },
        turnTimeoutMs: 120_000,
      },
    ],
    agents: [
      {
        name: 'sleep',
        harness: 'sleep',
        systemPrompt: 'Sleep, then answer.',
        sandbox: { provider: 'local', workspaceScope: 'run', networkPolicy: 'none' },
        guardrails: { maxIterations: turns + 2, maxTokens: 1_000_000_000, maxCostUsd: 1_000_000, maxWallTimeMs: 3_600_000 },
        actions: ['echo'],
      },
    ],
    actions: [{ name: 'echo' }],
  };
}

/** Busy and total jiffies of all CPUs. */
function machineTicks(): { busy: number; total: number } {
  const [cpu] = readFileSync('/proc/stat', 'utf8').split('\n');
  const v = cpu!.trim().split(/\s+/).slice(1).map(Number);
  const idle = (v[3] ?? 0) + (v[4] ?? 0);
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

/** Turn results, the first turn's start, each turn's wait from scheduled to started, from one run's history. */
async function turnTimes(handle: WorkflowHandle, turnActivity: string): Promise<{ firstStartMs: number; completedMs: number[]; dispatchMs: number[] }> {
  const t = turnTimeline((await handle.fetchHistory()).events ?? [], turnActivity);
  return { firstStartMs: t.startedMs[0] ?? Number.NaN, completedMs: t.completedMs, dispatchMs: t.dispatchMs };
}

/** The worker process under test. */
interface WorkerUnderTest {
  readonly child: ChildProcess;
  readonly pid: number;
  stats(): Promise<LoopDelay>;
  stop(): Promise<void>;
}

async function startWorkerProcess(config: ScaleWorkerConfig, cpuProfileDir?: string): Promise<WorkerUnderTest> {
  const execArgv = ['--import', tsxImport, ...(cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfileDir}`] : [])];
  const child = fork(path.join(import.meta.dirname, 'scale-worker.ts'), [], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let exitCode: number | string | undefined;
  const exited = new Promise<void>((resolve) => child.once('exit', (code, signal) => resolve(void (exitCode = code ?? signal ?? 'unknown'))));
  const next = <T extends ScaleWorkerMessage['type']>(type: T, timeoutMs: number) =>
    new Promise<Extract<ScaleWorkerMessage, { type: T }>>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`scale worker: no "${type}" within ${timeoutMs} ms`)), timeoutMs);
      void exited.then(() => reject(new Error(`scale worker exited (${exitCode}) while waiting for "${type}"`)));
      const onMessage = (m: ScaleWorkerMessage) => {
        if (m.type === 'failed') reject(new Error(`scale worker failed: ${m.message}`));
        if (m.type !== type && m.type !== 'failed') return;
        clearTimeout(timer);
        child.off('message', onMessage);
        resolve(m as Extract<ScaleWorkerMessage, { type: T }>);
      };
      child.on('message', onMessage);
    });
  const ready = next('ready', 60_000);
  child.send(config);
  const { pid } = await ready;
  return {
    child,
    pid,
    async stats() {
      const reply = next('stats', 10_000);
      child.send({ type: 'stats' });
      return (await reply).loop;
    },
    async stop() {
      if (child.exitCode !== null) return;
      child.send({ type: 'stop' });
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** CPU seconds so far of the worker (all threads, main thread), the server, and the harness processes. */
function cpuNow(pids: { worker: number; server?: number }) {
  const of = (pid: number | undefined, tid?: number, children = false) => (pid ? cpuSeconds(pid, tid, children) ?? 0 : 0);
  return {
    worker: of(pids.worker),
    main: of(pids.worker, pids.worker),
    server: of(pids.server),
    // Harness processes are the worker's children.
    harness: of(pids.worker, undefined, true),
  };
}

async function runLevel(
  client: Client,
  worker: WorkerUnderTest,
  opts: { runs: number; turnSeconds: number; taskQueue: string; timeoutMs: number; serverPid?: number; metricsUrl?: string; bare?: BareHarness },
): Promise<ScaleRow> {
  const { runs, turnSeconds } = opts;
  await worker.stats(); // resets the loop-delay histogram
  const pids = { worker: worker.pid, server: opts.serverPid };
  const requests0 = opts.metricsUrl ? await serverRequests(opts.metricsUrl) : undefined;
  const cpu0 = cpuNow(pids);
  const threads0 = threadCpuSeconds(pids.worker);
  const machine0 = machineTicks();
  let peakRss = 0;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssMb(pids.worker) ?? 0)), 250);
  const t0 = Date.now();
  const prefix = `scale-${runs}-${t0.toString(36)}`;
  const bare = opts.bare;
  const started = await Promise.all(
    Array.from({ length: runs }, async (_, i) => {
      const at = Date.now();
      const workflowId = `${prefix}${bare ? '-bare' : ''}-${i}`;
      if (bare) {
        const handle = await client.workflow.start('bareRun', { taskQueue: opts.taskQueue, workflowId, args: [{ ...bare.harness, workspace: path.join(bare.root, workflowId), task: 'sleep', maxTurns: bare.maxTurns }] });
        return { run: { handle, result: async () => ({ ...((await handle.result()) as object), status: 'succeeded' as const, reason: undefined }) }, at };
      }
      const run = await startAgentRun(client, { agent: 'sleep', task: 'sleep', identity: { tenantId: 'bench', userId: 'bench' }, taskQueue: opts.taskQueue, workflowId });
      return { run: { handle: run.handle, result: () => run.result() }, at };
    }),
  );
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), opts.timeoutMs)));
  const finished = new Set<number>();
  const all = Promise.all(
    started.map(async ({ run }, i) => {
      const result = await run.result();
      if (result.status !== 'succeeded') throw new Error(`scale run ${run.handle.workflowId} ended ${result.status}: ${result.reason}`);
      finished.add(i);
    }),
  );
  const outcome = await Promise.race([all, deadline]);
  clearTimeout(timer);
  const wallS = (Date.now() - t0) / 1000;
  clearInterval(sampler);
  const cpu1 = cpuNow(pids);
  const threads1 = threadCpuSeconds(pids.worker);
  const machine1 = machineTicks();
  const loop = await worker.stats();
  // The server publishes its counters about once a second: the level's last requests need that long to show.
  const requests1 = opts.metricsUrl ? await new Promise((r) => setTimeout(r, 2000)).then(() => serverRequests(opts.metricsUrl!)) : undefined;
  const timedOut = outcome === 'timeout';
  if (timedOut) {
    await Promise.all(started.filter((_, i) => !finished.has(i)).map(({ run }) => run.handle.terminate('scale bench level timed out').catch(() => undefined)));
    await all.catch(() => undefined);
  }

  const overheads: number[] = [];
  const dispatches: number[] = [];
  const startLatencies: number[] = [];
  let turnsDone = 0;
  const perTurn = (cpuS: number) => (cpuS * 1000) / Math.max(1, turnsDone);
  const done = started.filter((_, i) => finished.has(i));
  for (let i = 0; i < done.length; i += 20) {
    const batch = await Promise.all(done.slice(i, i + 20).map(async ({ run, at }) => ({ at, times: await turnTimes(run.handle, bare ? 'bareTurn' : 'runTurn') })));
    for (const { at, times } of batch) {
      startLatencies.push(times.firstStartMs - at);
      turnsDone += times.completedMs.length;
      dispatches.push(...times.dispatchMs);
      for (let t = 1; t < times.completedMs.length; t++) overheads.push(times.completedMs[t]! - times.completedMs[t - 1]! - turnSeconds * 1000);
    }
  }
  return {
    runs,
    completed: done.length,
    timedOut,
    wallS,
    turnOverheadMs: { p50: percentile(overheads, 50), p99: percentile(overheads, 99) },
    dispatchMs: { p50: percentile(dispatches, 50), p99: percentile(dispatches, 99) },
    startLatencyMs: { p50: percentile(startLatencies, 50), p99: percentile(startLatencies, 99) },
    workerCores: (cpu1.worker - cpu0.worker) / wallS,
    cpuMsPerTurn: {
      worker: perTurn(cpu1.worker - cpu0.worker),
      main: perTurn(cpu1.main - cpu0.main),
      harness: perTurn(cpu1.harness - cpu0.harness),
      ...(pids.server ? { server: perTurn(cpu1.server - cpu0.server) } : {}),
    },
    mainThreadBusy: (cpu1.main - cpu0.main) / wallS,
    loop,
    workerPeakRssMb: peakRss,
    ...(pids.server ? { serverCores: (cpu1.server - cpu0.server) / wallS } : {}),
    machineBusy: (machine1.busy - machine0.busy) / (machine1.total - machine0.total),
    workerThreads: Object.fromEntries(Object.entries(threads1).map(([name, s]) => [name, perTurn(s - (threads0[name] ?? 0))]).filter(([, ms]) => (ms as number) >= 0.05)),
    ...(requests0 && requests1 ? { serverRequests: requestsPerTurn(requests0, requests1, turnsDone) } : {}),
  };
}

/** Runs the curve; see the file comment. */
export async function benchScale(opts: ScaleOptions): Promise<ScaleRow[]> {
  const levels = opts.levels ?? [10, 50, 100, 200];
  const turns = opts.turns ?? 3;
  const turnSeconds = opts.turnSeconds ?? 2;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-scale-'));
  const catalogFile = path.join(dataDir, 'catalog.json');
  writeFileSync(catalogFile, JSON.stringify(scaleCatalog(turnSeconds, turns)));
  let bundlePath = opts.workflowBundlePath;
  if (!bundlePath) {
    bundlePath = path.join(dataDir, 'workflow-bundle.js');
    writeFileSync(bundlePath, (await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') })).code);
  }
  const connection = await Connection.connect({ address: opts.temporalAddress });
  const client = new Client({ connection });
  const taskQueue = `scale-${path.basename(dataDir)}`;
  const worker = await startWorkerProcess({ address: opts.temporalAddress, taskQueue, catalogFile, dataDir: path.join(dataDir, 'worker'), bundlePath }, opts.cpuProfileDir);
  // The floor: the bare wrapper around the same harness, in a worker process of its own on its own queue.
  const bareBundle = path.join(dataDir, 'bare-bundle.js');
  writeFileSync(bareBundle, (await bundleWorkflowCode({ workflowsPath: path.join(import.meta.dirname, 'floor', 'workflows.ts'), logger: new DefaultLogger('ERROR') })).code);
  const bareQueue = `${taskQueue}-bare`;
  const bareWorker = await startWorkerProcess({ address: opts.temporalAddress, taskQueue: bareQueue, catalogFile, dataDir: path.join(dataDir, 'bare'), bundlePath: bareBundle, bare: true }, opts.cpuProfileDir && path.join(opts.cpuProfileDir, 'bare'));
  const bare: BareHarness = { harness: { executable: '/bin/sh', args: [harnessPath, String(turnSeconds), String(turns)], model: 'sleep-1' }, root: path.join(dataDir, 'bare-workspaces'), maxTurns: turns + 2 };
  const settle = () => new Promise((r) => setTimeout(r, 1000)); // the last turns' processes and ledger writes
  const rows: ScaleRow[] = [];
  try {
    // A small warm-up level of each (module loading, SQLite statements, the workflow cache), not reported.
    await runLevel(client, worker, { runs: 2, turnSeconds, taskQueue, timeoutMs: 60_000 });
    await runLevel(client, bareWorker, { runs: 2, turnSeconds, taskQueue: bareQueue, timeoutMs: 60_000, bare });
    for (const runs of levels) {
      const timeoutMs = opts.levelTimeoutMs ?? 120_000 + runs * 500;
      const measured = { serverPid: opts.serverPid, metricsUrl: opts.metricsUrl };
      const row = await runLevel(client, worker, { runs, turnSeconds, taskQueue, timeoutMs, ...measured });
      await settle();
      const floor = await runLevel(client, bareWorker, { runs, turnSeconds, taskQueue: bareQueue, timeoutMs, ...measured, bare });
      rows.push({ ...row, bare: floor });
      if (row.timedOut) break; // a level that did not finish ends the curve
      await settle();
    }
  } finally {
    await bareWorker.stop();
    await worker.stop();
    await connection.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return rows;
}

/** Where the curve saturates: the first level with p99 turn overhead ≥ 1 s (or that timed out), and what was busiest. */
export function saturation(rows: readonly ScaleRow[], turnSeconds = 2): string {
  const hit = rows.find((r) => r.timedOut || r.turnOverheadMs.p99 >= 1000);
  if (!hit) return `not within ${rows.map((r) => r.runs).join('/')} runs (p99 turn overhead stayed under 1 s)`;
  const busiest =
    hit.mainThreadBusy >= 0.85 ? `the worker's main thread (${pct(hit.mainThreadBusy)} of a core)` :
    hit.machineBusy >= 0.9 ? `the machine's CPUs (${pct(hit.machineBusy)} busy; server ${hit.serverCores?.toFixed(2) ?? '?'} cores, worker ${hit.workerCores.toFixed(2)})` :
    `no single resource (main thread ${pct(hit.mainThreadBusy)}, machine ${pct(hit.machineBusy)})`;
  // The SDK's default: a worker runs at most 100 activities (turns) at once; more wait for a slot.
  const slots = hit.runs > 100 ? `; ${hit.runs} concurrent turns exceed the worker's 100 activity slots` : '';
  return `${hit.runs} runs: p99 turn overhead ${fmt(hit.turnOverheadMs.p99)} ms${hit.timedOut ? ' (level timed out)' : ''}; busiest: ${busiest}${slots}; ${withoutWorker(hit, turnSeconds)}`;
}

/**
 * The floor under any worker at this level: the cores the Temporal server and the harness alone take when every run
 * turns once per `turnSeconds` (their CPU per turn, measured in the level), beside the machine's cores.
 */
function withoutWorker(row: ScaleRow, turnSeconds: number): string {
  const { server, harness } = row.cpuMsPerTurn;
  if (server === undefined) return 'server CPU not measured';
  const cores = ((server + harness) / 1000) * (row.runs / turnSeconds);
  return `the server and the harness alone need ${cores.toFixed(2)} cores at ${row.runs / turnSeconds} turns/s (${(server + harness).toFixed(1)} ms per turn), of the machine's ${os.cpus().length}`;
}

const pct = (x: number) => `${Math.round(x * 100)}%`;
const fmt = (x: number) => (Number.isFinite(x) ? String(Math.round(x)) : '–');

/** The curve as markdown table lines. */
export function scaleTable(rows: readonly ScaleRow[]): string[] {
  const ms = (x: number | undefined) => (x === undefined ? '–' : x.toFixed(1));
  const lines = [
    '| runs | done | turn overhead p50 / p99 (ms) | of which dispatch wait p50 / p99 | start latency p50 / p99 (ms) | CPU ms per turn: worker (main thread) / server / harness | worker cores | loop delay p99 / max (ms) | worker RSS (MB) | machine busy |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    const c = r.cpuMsPerTurn;
    lines.push(
      `| ${r.runs} | ${r.completed}${r.timedOut ? ' (timed out)' : ''} | ${fmt(r.turnOverheadMs.p50)} / ${fmt(r.turnOverheadMs.p99)} | ${fmt(r.dispatchMs.p50)} / ${fmt(r.dispatchMs.p99)} | ${fmt(r.startLatencyMs.p50)} / ${fmt(r.startLatencyMs.p99)} | ` +
        `${ms(c.worker)} (${ms(c.main)}) / ${ms(c.server)} / ${ms(c.harness)} | ${r.workerCores.toFixed(2)} | ${fmt(r.loop.p99)} / ${fmt(r.loop.max)} | ` +
        `${Math.round(r.workerPeakRssMb)} | ${pct(r.machineBusy)} |`,
    );
  }
  return lines;
}

/** Each level beside the bare wrapper's: all CPU per turn and the turn overhead, as ratios (issue 22's targets). */
export function floorTable(rows: readonly ScaleRow[]): string[] {
  const all = (r: ScaleRow) => r.cpuMsPerTurn.worker + (r.cpuMsPerTurn.server ?? 0) + r.cpuMsPerTurn.harness;
  const lines = [
    '| runs | all CPU ms per turn: project / bare wrapper (×) | worker / server / harness, bare wrapper | turn overhead p50: project / bare (ms) | p99: project / bare (ms, ×) |',
    '| ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    const b = r.bare;
    if (!b) continue;
    const c = b.cpuMsPerTurn;
    lines.push(
      `| ${r.runs} | ${all(r).toFixed(1)} / ${all(b).toFixed(1)} (×${(all(r) / all(b)).toFixed(2)}) | ${c.worker.toFixed(1)} / ${c.server?.toFixed(1) ?? '–'} / ${c.harness.toFixed(1)} | ` +
        `${fmt(r.turnOverheadMs.p50)} / ${fmt(b.turnOverheadMs.p50)} | ${fmt(r.turnOverheadMs.p99)} / ${fmt(b.turnOverheadMs.p99)} (×${(r.turnOverheadMs.p99 / Math.max(1, b.turnOverheadMs.p99)).toFixed(2)}) |`,
    );
  }
  return lines;
}

/** Where the CPU went, beside the bare wrapper: the worker's threads and what the server was asked, per turn. */
export function scaleDetails(rows: readonly ScaleRow[]): string[] {
  const threads = (t: Record<string, number>) => Object.entries(t).sort((a, b) => b[1] - a[1]).map(([name, ms]) => `${name} ${ms.toFixed(1)}`).join(', ');
  const lines = ["The worker's CPU ms per turn by thread (`main`; `node`: worker threads — V8's GC helpers and the workflows' own; `tokio-runtime-w`: the SDK's core):", ''];
  for (const r of rows) {
    const rss = r.bare ? ` (peak RSS ${Math.round(r.workerPeakRssMb)} / ${Math.round(r.bare.workerPeakRssMb)} MB)` : '';
    lines.push(`- ${r.runs} runs: project ${threads(r.workerThreads)}${r.bare ? `; bare wrapper ${threads(r.bare.workerThreads)}` : ''}${rss}`);
  }
  const counted = rows.find((r) => r.serverRequests && r.bare?.serverRequests);
  if (counted) {
    lines.push('', `What the Temporal server was asked per turn at ${counted.runs} runs (its RPCs and persistence operations, from its metrics, without the reads it repeats on its own clock; differences of 0.05 or more):`, '');
    lines.push(...requestsTable(counted.serverRequests!, counted.bare!.serverRequests!));
  }
  return lines;
}

export function printScale(rows: readonly ScaleRow[], turns: number, turnSeconds: number): void {
  console.log(`\nscale: one worker, concurrent runs of ${turns} turns of ${turnSeconds} s (shell harness):`);
  for (const line of scaleTable(rows)) console.log(`  ${line}`);
  console.log('  beside the bare Temporal wrapper around the same harness (its own worker process, the same level just after; targets: CPU ≤ ×1.25, p99 at 50 runs ≤ ×1.5):');
  for (const line of floorTable(rows)) console.log(`  ${line}`);
  console.log(`  saturates at: ${saturation(rows, turnSeconds)}`);
  for (const line of scaleDetails(rows)) console.log(`  ${line}`);
}

const isMain = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  const { values } = parseArgs({
    options: { levels: { type: 'string' }, 'turn-seconds': { type: 'string' }, turns: { type: 'string' }, 'cpu-prof': { type: 'string' } },
  });
  const { findTemporalCli, temporalCliInstallHint } = await import('../src/temporal/cli-path.js');
  const { startDevServer } = await import('../src/temporal/dev-server.js');
  const { quietRuntime } = await import('./orchestration.js');
  const temporal = findTemporalCli();
  if (!temporal) throw new Error(`bench/scale.ts needs the Temporal CLI. ${temporalCliInstallHint}`);
  quietRuntime();
  const levels = (values.levels ?? '10,50,100,200').split(',').map(Number);
  const turns = Number(values.turns ?? 3);
  const turnSeconds = Number(values['turn-seconds'] ?? 2);
  const { freePort } = await import('../src/temporal/dev-server.js');
  const server = await startDevServer({ cliPath: temporal.path, dbFile: path.join(mkdtempSync(path.join(os.tmpdir(), 'dh-scale-db-')), 'temporal.db'), metricsPort: await freePort() });
  try {
    printScale(await benchScale({ temporalAddress: server.address, serverPid: server.pid, metricsUrl: server.metricsUrl, levels, turns, turnSeconds, cpuProfileDir: values['cpu-prof'] }), turns, turnSeconds);
  } finally {
    await server.stop();
  }
}
