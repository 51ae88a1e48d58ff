/**
 * Output floods (issue 18): one worker (this process), one hostile run flooding its stdout at a time, and beside it
 * normal runs of the same worker, one after another until the flood is over. Per flood: the worker's peak RSS while it
 * lasted, and the neighbour's turn latency during it over the quiet baseline measured just before, in the same run.
 * Targets: RSS < 600 MB, neighbour ratio < 1.5.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import path from 'node:path';
import proto from '@temporalio/proto';
import { parseCatalog } from '../src/catalog/index.js';
import { startAgentRun, type AgentRunHandle } from '../src/client/index.js';
import { startBenchWorker } from './bench-worker.js';
import { median } from './stats.js';

const { EventType } = proto.temporal.api.enums.v1;
const MB = 1024 * 1024;
const harness = path.join(import.meta.dirname, '..', 'test', 'harnesses', 'scripted-harness.mjs');
const identity = { tenantId: 'bench', userId: 'bench' };

/** The floods, as steps of the scripted harness (test/harnesses/scripted-harness.mjs, `outputFlood`). */
export const floods = [
  { name: '600 MB line', step: { outputFlood: { line: 600 * MB } } },
  { name: '600 MB line at end of output', step: { outputFlood: { line: 600 * MB, newline: false } } },
  { name: '1,000,000 tiny lines', step: { outputFlood: { tinyLines: 1_000_000 } } },
  { name: '100,000 junk lines', step: { outputFlood: { junkLines: 100_000 } } },
  { name: '500 MB of 1 KB lines', step: { outputFlood: { kbLines: 500 * MB } } },
] as const;

export interface FloodRow {
  readonly name: string;
  readonly floodMs: number;
  readonly outcome: string;
  readonly rssBeforeMb: number;
  readonly peakRssMb: number;
  readonly quietTurnMs: number;
  /** Median turn latency of neighbour turns that ran entirely during the flood; undefined when none did. */
  readonly floodedTurnMs: number | undefined;
  readonly neighbourTurns: number;
  readonly ratio: number | undefined;
  /** The worker's event-loop delay while the flood lasted (p99 and max, ms): whether the flood blocked its thread. */
  readonly loopP99Ms: number;
  readonly loopMaxMs: number;
}

const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;

/** Each runTurn of a run: scheduled and closed (server time). */
async function turnsOf(run: AgentRunHandle): Promise<{ scheduledMs: number; closedMs: number }[]> {
  const events = (await run.handle.fetchHistory()).events ?? [];
  const turns: { scheduledMs: number; closedMs: number }[] = [];
  for (const e of events) {
    if (e.eventType !== EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED || e.activityTaskScheduledEventAttributes?.activityType?.name !== 'runTurn') continue;
    const id = Number(e.eventId);
    const end = events.find((x) => Number((x.activityTaskCompletedEventAttributes ?? x.activityTaskFailedEventAttributes)?.scheduledEventId ?? -1) === id);
    if (end) turns.push({ scheduledMs: ms(e.eventTime), closedMs: ms(end.eventTime) });
  }
  return turns;
}

export async function benchFlood(opts: { temporalAddress: string; only?: readonly string[] }): Promise<FloodRow[]> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-flood-'));
  const scripts = path.join(dataDir, 'scripts');
  mkdirSync(scripts);
  const echo = (text: string) => ({ envelope: { step: 'actions', actions: [{ name: 'echo', params: { text } }] } });
  writeFileSync(path.join(scripts, 'neighbour.json'), JSON.stringify({ turns: [echo('1'), echo('2'), echo('3'), { envelope: { step: 'success', result: 'done' } }] }));
  floods.forEach((f, i) => writeFileSync(path.join(scripts, `flood-${i}.json`), JSON.stringify({ turns: [{ ...f.step, ...(f.name.includes('end of output') ? {} : { envelope: { step: 'success', result: 'flood over' } }) }] })));
  const guardrails = { maxIterations: 10, maxTokens: 100_000_000, maxCostUsd: 1000, maxWallTimeMs: 3_600_000 };
  const catalog = parseCatalog(
    {
      harnesses: [{ name: 'scripted', driverClass: 'StdioJson', executable: process.execPath, args: [harness, '--scripts', scripts], active: true, vendor: 'bench', model: 'scripted-1', prices: { input: 1, output: 2 }, turnTimeoutMs: 300_000 }],
      agents: [
        { name: 'neighbour', harness: 'scripted', actions: ['echo'], guardrails },
        { name: 'flooder', harness: 'scripted', actions: ['echo'], guardrails, turnAttempts: 1 },
      ],
      actions: [{ name: 'echo' }],
    },
    'bench catalog',
  );
  // The flood at end of output is given up unsigned, as an operator in a trusted network would.
  const { client, taskQueue, close } = await startBenchWorker({ temporalAddress: opts.temporalAddress, catalog, dataDir, prefix: 'bench-flood' });
  let n = 0;
  const start = (agent: string, script: string) => startAgentRun(client, { agent, task: `bench script:${script}`, identity, taskQueue, workflowId: `bench-flood-${taskQueue}-${n++}` });
  /** One neighbour run to its end: its turns' latencies. */
  const neighbourRun = async () => {
    const run = await start('neighbour', 'neighbour');
    const result = await run.result();
    if (result.status !== 'succeeded') throw new Error(`neighbour run ended ${result.status}: ${result.reason}`);
    return turnsOf(run);
  };
  const rows: FloodRow[] = [];
  try {
    await neighbourRun(); // warm-up
    for (const [i, flood] of floods.entries()) {
      if (opts.only && !opts.only.some((o) => flood.name.includes(o))) continue;
      const quiet: number[] = [];
      for (let k = 0; k < 3; k++) quiet.push(...(await neighbourRun()).map((t) => t.closedMs - t.scheduledMs));
      global.gc?.();
      const rssBefore = process.memoryUsage().rss;
      let peak = rssBefore;
      const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
      const loop = monitorEventLoopDelay({ resolution: 10 });
      loop.enable();
      const started = performance.now();
      const run = await start('flooder', `flood-${i}`);
      let over = false;
      const ended = (async () => {
        // The flood at end of output fails its only attempt: the run waits for an operator, who gives it up.
        for (const deadline = Date.now() + 600_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
          const status = await run.status();
          if (status.state === 'awaiting_operator') {
            await run.abandon('bench');
            break;
          }
          if (['succeeded', 'failed', 'cancelled', 'timed_out'].includes(status.state)) break;
        }
        const result = await run.result();
        over = true;
        return result;
      })();
      // Neighbours one after another while the flood lasts (bounded in count).
      const neighbourTurns: { scheduledMs: number; closedMs: number }[] = [];
      for (let k = 0; k < 200 && !over; k++) neighbourTurns.push(...(await neighbourRun()));
      const result = await ended;
      const floodMs = performance.now() - started;
      clearInterval(sampler);
      loop.disable();
      const floodTurn = (await turnsOf(run))[0];
      const during = floodTurn ? neighbourTurns.filter((t) => t.scheduledMs >= floodTurn.scheduledMs && t.closedMs <= floodTurn.closedMs).map((t) => t.closedMs - t.scheduledMs) : [];
      const quietTurnMs = median(quiet);
      const floodedTurnMs = during.length > 0 ? median(during) : undefined;
      rows.push({
        name: flood.name,
        floodMs: Math.round(floodMs),
        outcome: result.status === 'succeeded' ? 'succeeded' : `${result.status}: ${(result.reason ?? '').slice(0, 80)}`,
        rssBeforeMb: Math.round(rssBefore / MB),
        peakRssMb: Math.round(peak / MB),
        quietTurnMs: Math.round(quietTurnMs),
        floodedTurnMs: floodedTurnMs === undefined ? undefined : Math.round(floodedTurnMs),
        neighbourTurns: during.length,
        ratio: floodedTurnMs === undefined ? undefined : Math.round((floodedTurnMs / quietTurnMs) * 100) / 100,
        loopP99Ms: Math.round(loop.percentile(99) / 1e6),
        loopMaxMs: Math.round(loop.max / 1e6),
      });
      printFloodRow(rows.at(-1)!);
    }
  } finally {
    await close();
  }
  return rows;
}

function printFloodRow(r: FloodRow): void {
  const ratio = r.ratio === undefined ? 'n/a (no neighbour turn inside the flood)' : `${r.ratio} (${r.floodedTurnMs} ms vs ${r.quietTurnMs} ms quiet, ${r.neighbourTurns} turns)`;
  console.log(`  ${r.name}: peak RSS ${r.peakRssMb} MB (before ${r.rssBeforeMb} MB) · neighbour ratio ${ratio} · event-loop delay p99 ${r.loopP99Ms} ms, max ${r.loopMaxMs} ms · flood ${r.floodMs} ms, ${r.outcome}`);
}

export function floodTable(rows: readonly FloodRow[]): string[] {
  return [
    '| flood | worker peak RSS | neighbour turn (median) quiet → flooded | ratio | event-loop delay p99 / max | flood lasted | flood run |',
    '|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.peakRssMb} MB (${r.rssBeforeMb} MB before) | ${r.quietTurnMs} → ${r.floodedTurnMs ?? 'n/a'} ms (${r.neighbourTurns} turns) | ${r.ratio ?? 'n/a'} | ${r.loopP99Ms} / ${r.loopMaxMs} ms | ${(r.floodMs / 1000).toFixed(1)} s | ${r.outcome.slice(0, 60)} |`,
    ),
  ];
}

export function printFlood(rows: readonly FloodRow[]): void {
  console.log('\nflood: worker peak RSS and neighbour turn latency under each output flood (targets: RSS < 600 MB, ratio < 1.5)');
  for (const line of floodTable(rows)) console.log(`  ${line}`);
}
