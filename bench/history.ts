/**
 * History cost per turn: a long run of the stateless scripted harness (no native resume, so every turn replays the
 * conversation from the ledger) through the real workflow. Prints events and bytes per steady-state turn and for
 * the whole run; issue 10's targets are <= 8 events and <= 2 KB per steady-state turn. The harness bills each turn's
 * input as the request's size, so the replay's cost shows: input tokens at turns 10, 100 and 300 and for the whole run,
 * with the agent's replay budget at `replayMaxTokens` (issue 22: flat once the budget is reached).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseCatalog } from '../src/catalog/index.js';
import { startAgentRun } from '../src/client/index.js';
import { historyFigures, type HistoryFigures } from '../test/support/history-figures.js';
import { startBenchWorker } from './bench-worker.js';

export interface HistoryBench extends HistoryFigures {
  readonly wallMs: number;
  readonly replayMaxTokens: number;
  /** Input tokens the harness billed at turns 10, 100 and the last, and over the whole run. */
  readonly inputAt: readonly { readonly turn: number; readonly input: number }[];
  readonly inputTotal: number;
}

/** The replay budget of the bench's agent: small enough that tiny turns reach it well before turn 300. */
export const benchReplayMaxTokens = 4_000;

const harness = path.join(import.meta.dirname, '..', 'test', 'harnesses', 'scripted-harness.mjs');

export async function benchHistory(opts: { temporalAddress: string; turns?: number; workflowBundlePath?: string; replayMaxTokens?: number }): Promise<HistoryBench> {
  const turns = opts.turns ?? 300;
  const replayMaxTokens = opts.replayMaxTokens ?? benchReplayMaxTokens;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-history-'));
  const scripts = path.join(dataDir, 'scripts');
  mkdirSync(scripts);
  const echo = (i: number) => ({ usage: { input: 10, output: 5 }, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: `step ${i}` } }] } });
  writeFileSync(path.join(scripts, 'long.json'), JSON.stringify({ turns: [...Array.from({ length: turns - 1 }, (_, i) => echo(i + 1)), { envelope: { step: 'success', result: 'done' } }] }));
  const catalog = parseCatalog(
    {
      harnesses: [{ name: 'stateless', driverClass: 'StdioJson', executable: process.execPath, args: [harness, '--scripts', scripts, '--stateless', '--input-from-prompt'], active: true, vendor: 'bench', model: 'scripted-1', capabilities: { sessionResume: false }, prices: { input: 1, output: 2 } }],
      agents: [{ name: 'long', harness: 'stateless', actions: ['echo'], replayMaxTokens, guardrails: { maxIterations: turns + 10, maxTokens: 100_000_000, maxCostUsd: 1000, maxWallTimeMs: 3_600_000 } }],
      actions: [{ name: 'echo' }],
    },
    'bench catalog',
  );
  const { client, taskQueue, deps, close } = await startBenchWorker({ temporalAddress: opts.temporalAddress, catalog, dataDir, prefix: 'bench-history', workflowBundlePath: opts.workflowBundlePath });
  try {
    const started = performance.now();
    const run = await startAgentRun(client, { agent: 'long', task: 'a long run script:long', identity: { tenantId: 'bench', userId: 'bench' }, taskQueue, workflowId: `bench-history-${taskQueue}` });
    const result = await run.result();
    const wallMs = performance.now() - started;
    if (result.status !== 'succeeded' || result.iterations !== turns) throw new Error(`history bench run ended ${result.status} after ${result.iterations} turns: ${result.reason}`);
    const figures = await historyFigures(client, run.workflowId, (run.handle as unknown as { firstExecutionRunId: string }).firstExecutionRunId);
    const used = (await deps.ledger.listPromptRuns(run.workflowId)).filter((r) => r.outputUsed);
    const inputOf = (turn: number) => used.filter((r) => r.turn === turn).reduce((sum, r) => sum + (r.usage.input ?? 0), 0);
    // The last turn is the envelope alone (no usage line): its predecessor is the last billed one.
    const inputAt = [10, 100, 200, turns - 1].filter((t) => t < turns).map((turn) => ({ turn, input: inputOf(turn) }));
    return { ...figures, wallMs, replayMaxTokens, inputAt, inputTotal: used.reduce((sum, r) => sum + (r.usage.input ?? 0), 0) };
  } finally {
    await close();
  }
}

/** The replay's input tokens of a run, on one line. */
export function replayLine(f: HistoryBench): string {
  return `${f.inputAt.map((x) => `turn ${x.turn}: ${x.input}`).join(', ')}; whole run ${f.inputTotal}`;
}

/** The figures as lines (printed, and the benchmarks page's section). */
export function historyLines(f: HistoryBench, unbounded?: HistoryBench): string[] {
  return [
    `workflow history, ${f.turns}-turn run of a harness without native resume (conversation replayed from the ledger):`,
    `  steady-state turn             ${f.steadyTurnEvents} events, ${Math.round(f.steadyTurnBytes)} bytes  (target <= 8 events, <= 2048 bytes)`,
    `  whole run                     ${f.events} events, ${f.bytes} bytes in ${f.executions} execution(s): ${(f.events / f.turns).toFixed(1)} events, ${Math.round(f.bytes / f.turns)} bytes per turn`,
    `  wall time                     ${(f.wallMs / 1000).toFixed(1)} s (${(f.wallMs / f.turns).toFixed(1)} ms per turn)`,
    `  input tokens, replay budget ${f.replayMaxTokens}: ${replayLine(f)}`,
    ...(unbounded ? [`  input tokens, no replay bound: ${replayLine(unbounded)} (×${(unbounded.inputTotal / f.inputTotal).toFixed(1)})`] : []),
  ];
}

export function printHistory(f: HistoryBench, unbounded?: HistoryBench): void {
  for (const line of historyLines(f, unbounded)) console.log(line);
}
