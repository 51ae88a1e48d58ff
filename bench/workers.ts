/**
 * Throughput with 1, 2 and 4 worker processes (`npm run bench -- workers`): each a separate process with its own
 * data and workspace root (test/support/worker-process.ts), one task queue, one dev server, one PostgreSQL ledger
 * (DATABASE_URL / DURABLE_HARNESS_TEST_DATABASE_URL, else a scratch cluster). The same batch of concurrent runs of the
 * scripted harness (3 turns: write a file, read it, succeed) for each worker count.
 *
 * - runs per minute and turns per second: the batch's wall time, from the first start to the last result;
 * - turn overhead: per run, (wall time − time inside the harness, from the ledger) / turns; p50 and p99 over runs;
 * - worker RSS per concurrent run: (peak − idle resident memory of a worker process) / runs it held at once.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, bundleWorkflowCode } from '@temporalio/worker';
import { startAgentRun } from '../src/client/index.js';
import { PostgresLedger } from '../src/ledger/index.js';
import { workflowsPath } from '../src/worker.js';
import { startHostProcess, type HostProcess } from '../test/multihost/hosts.js';
import { benchDatabase } from './database.js';
import { median } from './stats.js';

export interface WorkerCountFigures {
  readonly workers: number;
  readonly runs: number;
  readonly turns: number;
  readonly wallMs: number;
  readonly runsPerMinute: number;
  readonly turnsPerSecond: number;
  readonly overheadP50Ms: number;
  readonly overheadP99Ms: number;
  /** Resident memory of one idle worker process, MB (mean over the workers). */
  readonly idleRssMb: number;
  /** (peak − idle) RSS of a worker process per run it held at once, MB (mean over the workers). */
  readonly rssPerRunMb: number;
}

const repoRoot = path.resolve(import.meta.dirname, '..');
const harness = path.join(repoRoot, 'test', 'harnesses', 'scripted-harness.mjs');

function catalogFor(scripts: string): unknown {
  return {
    harnesses: [
      { name: 'scripted', driverClass: 'StdioJson', executable: process.execPath, args: [harness, '--scripts', scripts], active: true, vendor: 'bench', model: 'scripted-1', prices: { input: 1, output: 2 } },
    ],
    agents: [{ name: 'bench', harness: 'scripted', actions: ['write_file', 'read_file'], guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 600_000 } }],
    actions: [{ name: 'write_file' }, { name: 'read_file' }],
  };
}

function rssMb(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
    return line ? Number(line.split(/\s+/)[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export async function benchWorkers(opts: { temporalAddress: string; counts?: readonly number[]; runs?: number }): Promise<WorkerCountFigures[]> {
  const counts = opts.counts ?? [1, 2, 4];
  const runs = opts.runs ?? 16;
  const scripts = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-workers-scripts-'));
  writeFileSync(
    path.join(scripts, 'bench.json'),
    JSON.stringify({
      turns: [
        { usage: { input: 100, output: 10 }, envelope: { step: 'actions', actions: [{ name: 'write_file', params: { path: 'NOTES.md', content: 'bench' } }] } },
        { usage: { input: 100, output: 10 }, envelope: { step: 'actions', actions: [{ name: 'read_file', params: { path: 'NOTES.md' } }] } },
        { usage: { input: 100, output: 10 }, envelope: { step: 'success', result: 'done' } },
      ],
    }),
  );
  const catalog = catalogFor(scripts);
  const bundleFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'dh-bench-bundle-')), 'workflow-bundle.js');
  writeFileSync(bundleFile, (await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') })).code);
  const db = await benchDatabase('workers');
  const ledger = await PostgresLedger.connect({ connectionString: db.url });
  const connection = await Connection.connect({ address: opts.temporalAddress });
  const client = new Client({ connection });
  const figures: WorkerCountFigures[] = [];
  try {
    for (const n of counts) {
      const taskQueue = `bench-workers-${n}-${Date.now().toString(36)}`;
      const hosts: HostProcess[] = await Promise.all(
        [...Array(n).keys()].map((i) => startHostProcess({ temporalAddress: opts.temporalAddress, taskQueue, databaseUrl: db.url, catalog, hostId: `bench-${n}-${i}`, workflowBundle: bundleFile })),
      );
      try {
        const start = (id: string) => startAgentRun(client, { agent: 'bench', task: 'bench script:bench', identity: { tenantId: 'bench', userId: 'bench' }, taskQueue, workflowId: id });
        // Warm-up: one run per worker (module loading, pools, caches), not measured.
        await Promise.all(hosts.map(async (_, i) => (await start(`${taskQueue}-warm-${i}`)).result()));
        await new Promise((r) => setTimeout(r, 500));
        const idle = hosts.map((h) => rssMb(h.pid));
        const peak = [...idle];
        const sampler = setInterval(() => hosts.forEach((h, i) => (peak[i] = Math.max(peak[i]!, rssMb(h.pid)))), 100);
        const t0 = performance.now();
        const ids = [...Array(runs).keys()].map((i) => `${taskQueue}-${i}`);
        const walls = await Promise.all(
          ids.map(async (id) => {
            const started = performance.now();
            const result = await (await start(id)).result();
            if (result.status !== 'succeeded') throw new Error(`bench run ${id} ended ${result.status}: ${result.reason}`);
            return { id, ms: performance.now() - started, turns: result.iterations };
          }),
        );
        const wallMs = performance.now() - t0;
        clearInterval(sampler);
        const overheads: number[] = [];
        let turns = 0;
        for (const w of walls) {
          const harnessMs = (await ledger.listPromptRuns(w.id)).reduce((sum, r) => sum + r.durationMs, 0);
          overheads.push((w.ms - harnessMs) / w.turns);
          turns += w.turns;
        }
        const perWorker = runs / n;
        figures.push({
          workers: n,
          runs,
          turns,
          wallMs,
          runsPerMinute: (runs / wallMs) * 60_000,
          turnsPerSecond: (turns / wallMs) * 1000,
          overheadP50Ms: median(overheads),
          overheadP99Ms: percentile(overheads, 99),
          idleRssMb: idle.reduce((a, b) => a + b, 0) / n,
          rssPerRunMb: peak.reduce((sum, p, i) => sum + (p - idle[i]!), 0) / n / perWorker,
        });
      } finally {
        await Promise.all(hosts.map((h) => h.stop()));
      }
    }
  } finally {
    await ledger.close();
    await connection.close();
    await db.stop();
  }
  return figures;
}

export function workersTable(figures: readonly WorkerCountFigures[]): string {
  const rows = figures.map(
    (f) =>
      `| ${f.workers} | ${f.runs} × ${f.turns / f.runs} turns | ${(f.wallMs / 1000).toFixed(1)} s | ${f.runsPerMinute.toFixed(0)} | ${f.turnsPerSecond.toFixed(1)} | ${f.overheadP50Ms.toFixed(0)} / ${f.overheadP99Ms.toFixed(0)} ms | ${f.idleRssMb.toFixed(0)} MB | ${f.rssPerRunMb.toFixed(1)} MB |`,
  );
  return [
    '| worker processes | concurrent runs | wall time | runs/min | turns/s | turn overhead p50 / p99 | worker RSS idle | RSS per concurrent run |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
  ].join('\n');
}

export function printWorkers(figures: readonly WorkerCountFigures[]): void {
  console.log(`many workers: one batch of concurrent runs per worker count (separate processes, one PostgreSQL ledger, cores: ${os.cpus().length}):`);
  console.log(workersTable(figures));
}

/** The section of docs/BENCHMARKS.md: what was measured, then the table. */
export function workersLines(figures: readonly WorkerCountFigures[]): string[] {
  return [
    'Each row: N worker processes (own data and workspace roots, one task queue, one PostgreSQL ledger), one warm-up run',
    'per worker, then the same batch of runs started at once: 3 turns each of the scripted stdio-JSON harness (a Node',
    'process per turn) with a write_file and a read_file action; turns go to the host queue of the worker holding the',
    "run's workspace (docs/multi-host.md). Turn overhead = (run wall time − time driving the harness, the ledger's",
    'durationMs) / turns: workflow tasks, activity scheduling, actions, ledger writes, and — with the whole batch at once',
    "on a small machine — waiting for CPU. RSS is the worker process's own (not its harness children): peak during the",
    'batch minus idle, per run it held at once. More worker processes than cores cannot add throughput.',
    '',
    workersTable(figures),
  ];
}
