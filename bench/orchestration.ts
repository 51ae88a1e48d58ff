/**
 * Orchestration overhead per turn: the demo-harness run through the real workflow on a local dev server,
 * minus the same turns driven in-process with the same activity code and no Temporal.
 * Also the workflow history size per turn (events and bytes).
 */
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { MockActivityEnvironment } from '@temporalio/testing';
import { NativeConnection, Runtime, DefaultLogger, bundleWorkflowCode } from '@temporalio/worker';
import { createActivities } from '../src/activities/index.js';
import { loadCatalog } from '../src/catalog/index.js';
import { startAgentRun } from '../src/client/index.js';
import { applyTurn, beginTurn, initialState, resolved, runResult, sessionStarted } from '../src/workflows/decide.js';
import { createWorker, defaultDeps, workflowsPath } from '../src/worker.js';
import { median } from './stats.js';

export interface OrchestrationFigures {
  readonly runs: number;
  readonly turnsPerRun: number;
  /** Median wall time of one run through the workflow, ms. */
  readonly workflowRunMs: number;
  /** Median wall time of the same turns driven in-process, ms. */
  readonly inProcessRunMs: number;
  /** (workflow - in-process) / turns, ms. */
  readonly overheadPerTurnMs: number;
  /** workflow / in-process. */
  readonly ratio: number;
  readonly historyEventsPerTurn: number;
  readonly historyBytesPerTurn: number;
}

const catalogFile = path.join(import.meta.dirname, '..', 'config', 'default.yaml');
const task = 'Look around this workspace and write what you find into NOTES.md.';

/** The same loop the workflow runs, as plain calls: the same activities and the same pure decisions, no Temporal. */
async function runInProcess(activities: ReturnType<typeof createActivities>, workflowId: string): Promise<number> {
  const mock = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'bench' } }, { logger: new DefaultLogger('ERROR') });
  const env = { run: <A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A) => mock.run(fn, ...args) as Promise<R> };
  const input = { agent: 'demo', task, identity: { tenantId: 'bench', userId: 'bench' } };
  const policy = await activities.resolveAgent({ agent: 'demo' });
  let state = resolved(initialState(input), policy, Date.now());
  const started = await env.run(activities.startSession, { workflowId, runId: 'bench', specHash: policy.specHash, identity: input.identity, task });
  state = sessionStarted(state, started.sandbox, started.task);
  for (;;) {
    const begun = beginTurn(state);
    const result = await env.run(activities.runTurn, { ...begun.request, specHash: policy.specHash, sandbox: started.sandbox });
    const applied = applyTurn(begun.state, result);
    state = applied.state;
    if (applied.decision.kind === 'end') {
      const outcome = runResult(state, workflowId, applied.decision.ending);
      await env.run(activities.endSession, { workflowId, sandbox: started.sandbox, releaseSandbox: true, status: outcome.status, result: outcome });
      return state.iteration;
    }
    if (applied.decision.kind !== 'next') throw new Error(`unexpected decision ${applied.decision.kind}`);
    if (state.iteration > policy.guardrails.maxIterations) throw new Error('demo run did not finish');
  }
}

export async function benchOrchestration(opts: { temporalAddress: string; runs?: number; workflowBundlePath?: string }): Promise<OrchestrationFigures> {
  const runs = opts.runs ?? 10;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-'));
  const catalog = loadCatalog(catalogFile);
  const deps = defaultDeps({ catalog: () => catalog, dataDir });
  const activities = createActivities(deps);
  const nativeConnection = await NativeConnection.connect({ address: opts.temporalAddress });
  const taskQueue = `bench-${path.basename(dataDir)}`;
  const bundle = opts.workflowBundlePath ? { codePath: opts.workflowBundlePath } : await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') });
  const { worker } = await createWorker({ connection: nativeConnection, taskQueue, catalog: () => catalog, dataDir, ledger: deps.ledger, workflowBundle: bundle });
  const running = worker.run();
  const connection = await Connection.connect({ address: opts.temporalAddress });
  const client = new Client({ connection });
  try {
    // One warm-up of each path (worker caches, module loading, SQLite statements).
    await (await startAgentRun(client, { agent: 'demo', task, identity: { tenantId: 'bench', userId: 'bench' }, taskQueue, workflowId: `bench-warm-${taskQueue}` })).result();
    await runInProcess(activities, `bench-warm-inproc-${taskQueue}`);

    const workflowMs: number[] = [];
    const inProcessMs: number[] = [];
    let turns = 0;
    let events = 0;
    let bytes = 0;
    for (let i = 0; i < runs; i++) {
      // Interleave the two so machine noise hits both alike.
      let t = performance.now();
      const run = await startAgentRun(client, { agent: 'demo', task, identity: { tenantId: 'bench', userId: 'bench' }, taskQueue, workflowId: `bench-${taskQueue}-${i}` });
      const result = await run.result();
      workflowMs.push(performance.now() - t);
      if (result.status !== 'succeeded') throw new Error(`bench run ${i} ended ${result.status}: ${result.reason}`);
      turns = result.iterations;
      const history = await run.handle.fetchHistory();
      events = history.events?.length ?? 0;
      bytes = proto.temporal.api.history.v1.History.encode(history).finish().length;

      t = performance.now();
      const inTurns = await runInProcess(activities, `bench-inproc-${taskQueue}-${i}`);
      inProcessMs.push(performance.now() - t);
      if (inTurns !== turns) throw new Error(`in-process run took ${inTurns} turns, workflow ${turns}`);
    }
    const workflowRunMs = median(workflowMs);
    const inProcessRunMs = median(inProcessMs);
    return {
      runs,
      turnsPerRun: turns,
      workflowRunMs,
      inProcessRunMs,
      overheadPerTurnMs: (workflowRunMs - inProcessRunMs) / turns,
      ratio: workflowRunMs / inProcessRunMs,
      historyEventsPerTurn: events / turns,
      historyBytesPerTurn: bytes / turns,
    };
  } finally {
    worker.shutdown();
    await running;
    await nativeConnection.close();
    await connection.close();
    await deps.ledger.close();
  }
}

export function printOrchestration(f: OrchestrationFigures): void {
  console.log(`orchestration overhead, demo harness, median of ${f.runs} runs of ${f.turnsPerRun} turns:`);
  console.log(`  run through the workflow      ${f.workflowRunMs.toFixed(1)} ms`);
  console.log(`  same turns in-process         ${f.inProcessRunMs.toFixed(1)} ms`);
  console.log(`  overhead per turn             ${f.overheadPerTurnMs.toFixed(1)} ms  (target < 30 ms)`);
  console.log(`  ratio workflow / in-process   ${f.ratio.toFixed(2)}`);
  console.log(`  history per turn              ${f.historyEventsPerTurn.toFixed(1)} events, ${Math.round(f.historyBytesPerTurn)} bytes`);
}

/** Quiet SDK logs for benchmarks. */
export function quietRuntime(): void {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
}
