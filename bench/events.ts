/**
 * `npm run bench -- events`: how long after the harness prints a line a follower of `run.events()` sees it, on the
 * SQLite ledger (a 100 ms tail) and the PostgreSQL ledger (LISTEN/NOTIFY). One run per ledger whose harness
 * (test/harnesses/streaming-harness.mjs) prints activity lines stamped with the time it wrote them, each followed by a
 * usage line; the follower records when each arrives.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, bundleWorkflowCode } from '@temporalio/worker';
import { parseCatalog } from '../src/catalog/index.js';
import { postgresEventSource, startAgentRun, type RunEventSource } from '../src/client/index.js';
import { SqliteLedger } from '../src/ledger/index.js';
import { ledgerEventSource } from '../src/ledger/events.js';
import { createWorker, workflowsPath } from '../src/worker.js';
import { benchDatabase } from './database.js';
import { percentile } from './stats.js';

const repoRoot = path.resolve(import.meta.dirname, '..');

export interface EventsFigures {
  readonly ledger: 'sqlite' | 'postgres';
  readonly lines: number;
  readonly everyMs: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

const catalog = parseCatalog(
  {
    harnesses: [
      {
        name: 'streaming',
        driverClass: 'StdioJson',
        executable: process.execPath,
        args: [path.join(repoRoot, 'test', 'harnesses', 'streaming-harness.mjs')],
        active: true,
        vendor: 'benchvendor',
        model: 'streaming-1',
        prices: { input: 1, output: 2 },
        turnTimeoutMs: 120_000,
      },
    ],
    agents: [
      {
        name: 'streamer',
        description: 'streams its turn',
        harness: 'streaming',
        systemPrompt: 'You stream.',
        actions: [],
        guardrails: { maxIterations: 3, maxTokens: 10_000_000, maxCostUsd: 1000, maxWallTimeMs: 300_000 },
        turnAttempts: 1,
      },
    ],
    actions: [],
  },
  'bench catalog',
  { baseDir: path.join(repoRoot, 'config') },
);

export async function benchEvents(opts: { temporalAddress: string; lines?: number; everyMs?: number }): Promise<EventsFigures[]> {
  const lines = opts.lines ?? 200;
  const everyMs = opts.everyMs ?? 50;
  const bundle = await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') });
  const figures: EventsFigures[] = [];
  for (const ledger of ['sqlite', 'postgres'] as const) {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), `dh-bench-events-${ledger}-`));
    const db = ledger === 'postgres' ? await benchDatabase('events') : undefined;
    const nativeConnection = await NativeConnection.connect({ address: opts.temporalAddress });
    const taskQueue = `bench-events-${ledger}-${Date.now().toString(36)}`;
    const { worker } = await createWorker({ connection: nativeConnection, taskQueue, catalog: () => catalog, dataDir, workflowBundle: bundle, env: db ? { DATABASE_URL: db.url } : {}, decisions: 'trusted-network' });
    const running = worker.run();
    const connection = await Connection.connect({ address: opts.temporalAddress });
    let source: RunEventSource | undefined;
    try {
      const client = new Client({ connection });
      const run = await startAgentRun(client, { agent: 'streamer', task: `delay:1000 stream:${lines}:${everyMs}`, identity: { tenantId: 'bench', userId: 'bench' }, taskQueue });
      const sqlite = db ? undefined : SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
      source = db ? await postgresEventSource(db.url) : ledgerEventSource(sqlite!, { close: () => sqlite!.close() });
      const delays: number[] = [];
      for await (const e of run.events({ source })) {
        const printed = e.type === 'activity' ? Number(/printed-at (\d+)/.exec(e.description)?.[1]) : NaN;
        if (printed) delays.push(Date.now() - printed);
      }
      figures.push({ ledger, lines: delays.length, everyMs, p50: percentile(delays, 50), p99: percentile(delays, 99), max: Math.max(...delays) });
    } finally {
      await source?.close?.();
      worker.shutdown();
      await running;
      await nativeConnection.close();
      await connection.close();
      await db?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }
  return figures;
}

export function eventsLines(figures: readonly EventsFigures[]): string[] {
  return [
    '| ledger | lines | line printed → follower p50 | p99 | max |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...figures.map((f) => `| ${f.ledger} | ${f.lines} (one every ${f.everyMs} ms, each with a usage line) | ${f.p50} ms | ${f.p99} ms | ${f.max} ms |`),
    '',
    'Target (issue 25): a line visible to a follower at most 500 ms after the harness printed it.',
  ];
}

export function printEvents(figures: readonly EventsFigures[]): void {
  console.log('\nevents: a harness line to a follower of run.events()');
  for (const line of eventsLines(figures)) console.log(line);
}
