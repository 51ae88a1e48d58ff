/**
 * Orchestration overhead per turn, measured against Temporal's floor in the same run. Three (or more) ways of
 * running the demo agent's task (2 turns; or, with `turns`, an N-turn scripted run, so the run's fixed start and
 * end are spread over more turns), interleaved — each iteration runs every variant once, in rotating order:
 *   - in-process: the same activity code called as plain functions (bench/in-process.ts), no Temporal;
 *   - floor: a minimal workflow whose turn is ONE regular activity doing exactly one in-process turn
 *     (bench/floor/) — the same harness work, so it differs from in-process only by Temporal's cost;
 *   - bare wrapper: a minimal workflow whose turn is ONE regular activity that spawns the same harness and reads it
 *     to its end (bench/floor/bare.ts) — a plain Temporal wrapper, the floor of what durable-harness costs;
 *   - workflow: the project's agentRun workflow on the project's worker (default setup);
 *   - workflow, eager start: the same, started by a client on the worker's NativeConnection with eager start,
 *     as `durable-harness dev --demo` does;
 * Overhead per turn = median over iterations of (variant − in-process) / turns (paired differences, so slow
 * drifts of a shared machine cancel); the same against the bare wrapper. CPU per turn of each variant: this process
 * (the workers and the client), the Temporal server, and the harness processes (children, once waited for). Also the history per run and per steady-state turn (events and bytes), and
 * where each workflow run's time went, from its history's server timestamps: start (execution started → first turn
 * started: first workflow task, start-up local activities, dispatch), between turns (turn completed → next turn
 * started: the workflow task that decides, and the turn's dispatch), end (last turn completed → execution
 * completed) and the turn's dispatch alone (scheduled → started; 0 when eagerly dispatched).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import proto from '@temporalio/proto';
import { NativeConnection, Runtime, DefaultLogger, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { createActivities } from '../src/activities/index.js';
import { loadCatalog } from '../src/catalog/index.js';
import { startAgentRun } from '../src/client/index.js';
import { createWorker, defaultDeps, workflowsPath } from '../src/worker.js';
import { createFloorActivities } from './floor/activities.js';
import { createBareActivities } from './floor/bare.js';
import { cpuSeconds } from './proc.js';
import { InProcessRun } from './in-process.js';
import { turnTimeline } from './turn-timeline.js';
import { median } from './stats.js';

/** One way of running the task, with its medians. */
export interface OrchestrationVariant {
  readonly name: string;
  /** Median wall time of one run, ms. */
  readonly runMs: number;
  /** Median of (this run − the in-process run of the same iteration) / turns, ms. */
  readonly overheadPerTurnMs: number;
  /** Median of (this run − the floor run of the same iteration) / turns, ms; 0 for the floor. */
  readonly overFloorPerTurnMs?: number;
  /** Median of (this run − the bare wrapper's run of the same iteration) / turns, ms. */
  readonly overBarePerTurnMs?: number;
  /** Medians of CPU ms per turn: this process (workers + client), the Temporal server, the harness processes. */
  readonly cpuPerTurnMs?: { readonly process: number; readonly server: number; readonly harness: number };
  /** History of one run: events and encoded bytes per turn, and for one steady-state turn. */
  readonly history?: { eventsPerTurn: number; bytesPerTurn: number; steadyEvents: number; steadyBytes: number };
  /** Eager starts the server granted, of those requested. */
  readonly eagerGranted?: string;
  /** Medians over the runs of where a run's time went outside its turns (server timestamps), ms. */
  readonly phases?: Phases;
}

/** See the file comment; each a median over runs (between and dispatch: over all turns of all runs). */
export interface Phases {
  readonly startMs: number;
  readonly betweenMs: number;
  readonly endMs: number;
  readonly dispatchMs: number;
}

export interface OrchestrationFigures {
  /** What each run was: the demo agent, or an N-turn scripted run. */
  readonly scenario: string;
  readonly runs: number;
  readonly turnsPerRun: number;
  readonly inProcessRunMs: number;
  readonly variants: readonly OrchestrationVariant[];
  /** Median of (plain start − eager start) per iteration, ms per run, default setup. */
  readonly eagerSavingPerRunMs: number;
}

export interface OrchestrationOptions {
  readonly temporalAddress: string;
  /** Measured iterations (each runs every variant once); default 15. */
  readonly runs?: number;
  readonly workflowBundlePath?: string;
  /** Runs of exactly this many turns (the scripted harness) instead of the demo agent's two. */
  readonly turns?: number;
  /** The Temporal server's pid, for its CPU per turn. */
  readonly serverPid?: number;
}

const demoCatalogFile = path.join(import.meta.dirname, '..', 'config', 'default.yaml');
const scriptedHarness = path.join(import.meta.dirname, '..', 'test', 'harnesses', 'scripted-harness.mjs');

/** What every variant runs: the demo agent (2 turns), or with `turns` an agent that takes exactly that many. */
interface Scenario {
  readonly catalogFile: string;
  readonly agent: string;
  readonly task: string;
}

/**
 * An N-turn run: the scripted stdio-JSON harness (it resumes its own session, like a real CLI) answers N−1 turns
 * with one `echo` action each, then `success` — so the run's fixed start and end are spread over N turns.
 */
function longScenario(dataDir: string, turns: number): Scenario {
  const scripts = path.join(dataDir, 'scripts');
  mkdirSync(scripts, { recursive: true });
  const echo = (i: number) => ({ usage: { input: 10, output: 5 }, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: `step ${i}` } }] } });
  writeFileSync(path.join(scripts, 'long.json'), JSON.stringify({ turns: [...Array.from({ length: turns - 1 }, (_, i) => echo(i + 1)), { envelope: { step: 'success', result: 'done' } }] }));
  const catalogFile = path.join(dataDir, 'long-catalog.json');
  const catalog = {
    harnesses: [{ name: 'scripted', driverClass: 'StdioJson', executable: process.execPath, args: [scriptedHarness, '--scripts', scripts], active: true, vendor: 'bench', model: 'scripted-1', prices: { input: 1, output: 2 } }],
    agents: [{ name: 'long', harness: 'scripted', actions: ['echo'], sandbox: { provider: 'local', workspaceScope: 'run', networkPolicy: 'none' }, guardrails: { maxIterations: turns + 1, maxTokens: 100_000_000, maxCostUsd: 1000, maxWallTimeMs: 3_600_000 } }],
    actions: [{ name: 'echo' }],
  };
  writeFileSync(catalogFile, JSON.stringify(catalog));
  return { catalogFile, agent: 'long', task: 'a long run script:long' };
}
const identity = { tenantId: 'bench', userId: 'bench' };
const { EventType } = proto.temporal.api.enums.v1;

/** Events and bytes of a whole history and of its second turn cycle (after turn 1's result up to turn 2's). */
async function historyFigures(handle: WorkflowHandle, turnActivity: string, turns: number) {
  const history = await handle.fetchHistory();
  const events = history.events ?? [];
  const encode = (list: typeof events) => proto.temporal.api.history.v1.History.encode({ events: list }).finish().length;
  const turnIds = new Set<string>();
  const completedAt: number[] = [];
  events.forEach((e, i) => {
    if (e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED && e.activityTaskScheduledEventAttributes?.activityType?.name === turnActivity) turnIds.add(String(e.eventId));
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && turnIds.has(String(completed.scheduledEventId))) completedAt.push(i);
  });
  const steady = completedAt.length >= 2 ? events.slice(completedAt[0]! + 1, completedAt[1]! + 1) : [];
  return { eventsPerTurn: events.length / turns, bytesPerTurn: encode(events) / turns, steadyEvents: steady.length, steadyBytes: encode(steady) };
}

/** One run's phases, from its history: see `Phases`. */
async function phaseSamples(handle: WorkflowHandle, turnActivity: string): Promise<{ start: number; between: number[]; end: number; dispatch: number[] }> {
  const t = turnTimeline((await handle.fetchHistory()).events ?? [], turnActivity);
  return {
    start: (t.startedMs[0] ?? t.firstMs) - t.firstMs,
    between: t.startedMs.slice(1).map((at, i) => at - t.completedMs[i]!),
    end: t.lastMs - (t.completedMs.at(-1) ?? t.lastMs),
    dispatch: t.dispatchMs,
  };
}

interface Variant {
  readonly name: string;
  /** Runs once; returns the number of turns and, for a workflow, its handle. */
  run(i: number): Promise<{ turns: number; handle?: WorkflowHandle; eager?: boolean }>;
  readonly turnActivity?: string;
}

export async function benchOrchestration(opts: OrchestrationOptions): Promise<OrchestrationFigures> {
  const runs = opts.runs ?? 15;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-'));
  const { catalogFile, agent, task } = opts.turns ? longScenario(dataDir, opts.turns) : { catalogFile: demoCatalogFile, agent: 'demo', task: 'Look around this workspace and write what you find into NOTES.md.' };
  const catalog = loadCatalog(catalogFile);
  const harnessName = catalog.agents.find((a) => a.name === agent)?.harness;
  const harness = catalog.harnesses.find((h) => h.name === harnessName);
  if (!harness?.executable) throw new Error(`bench: agent ${agent} has no harness with an executable`);
  const deps = defaultDeps({ catalog: () => catalog, dataDir, decisions: 'trusted-network' });
  const activities = createActivities(deps);
  const nativeConnection = await NativeConnection.connect({ address: opts.temporalAddress });
  const connection = await Connection.connect({ address: opts.temporalAddress });
  const client = new Client({ connection });
  // Eager start needs the client on the worker's own connection.
  const eagerClient = new Client({ connection: nativeConnection });
  const tag = path.basename(dataDir);
  const bundle = opts.workflowBundlePath ? { codePath: opts.workflowBundlePath } : await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') });
  const floorBundle = await bundleWorkflowCode({ workflowsPath: path.join(import.meta.dirname, 'floor', 'workflows.ts'), logger: new DefaultLogger('ERROR') });

  const floorQueue = `bench-floor-${tag}`;
  const floorWorker = await Worker.create({ connection: nativeConnection, taskQueue: floorQueue, workflowBundle: { code: floorBundle.code }, activities: { ...createFloorActivities(activities), ...createBareActivities() } });
  const floorRunning = floorWorker.run();
  const taskQueue = `bench-${tag}`;
  const { worker } = await createWorker({ connection: nativeConnection, taskQueue, catalog: () => catalog, dataDir, ledger: deps.ledger, env: process.env, workflowBundle: bundle });
  const running = worker.run();
  try {
    /** A run of the project's workflow: started by `startAgentRun` (plainly or eagerly), or by `start` instead. */
    const agentRunVariant = (name: string, taskQueue: string, eager: boolean): Variant => ({
      name,
      turnActivity: 'runTurn',
      async run(i) {
        const workflowId = `bench-${name.replace(/\W+/g, '-')}-${tag}-${i}`;
        const run = await startAgentRun(eager ? eagerClient : client, { agent, task, identity, taskQueue, workflowId, eager });
        const result = await run.result();
        if (result.status !== 'succeeded') throw new Error(`bench run ${run.workflowId} ended ${result.status}: ${result.reason}`);
        return { turns: result.iterations, handle: run.handle, eager: (run.handle as { eagerlyStarted?: boolean }).eagerlyStarted };
      },
    });
    const variants: Variant[] = [
      { name: 'in-process', run: async (i) => ({ turns: await new InProcessRun(activities, `bench-inproc-${tag}-${i}`, agent, task).all() }) },
      {
        name: 'floor (1 activity/turn)',
        turnActivity: 'floorTurn',
        async run(i) {
          const handle = await client.workflow.start('floorRun', { taskQueue: floorQueue, workflowId: `bench-floor-${tag}-${i}`, args: [{ agent, task, maxTurns: Math.max(20, (opts.turns ?? 0) + 1) }] });
          const result = (await handle.result()) as { turns: number };
          return { turns: result.turns, handle };
        },
      },
      {
        name: 'bare wrapper (spawn the harness, 1 activity/turn)',
        turnActivity: 'bareTurn',
        async run(i) {
          const workspace = path.join(dataDir, 'bare', String(i));
          const args = { executable: harness.executable, args: harness.args, model: harness.model, workspace, task, maxTurns: Math.max(20, (opts.turns ?? 0) + 1) };
          const handle = await client.workflow.start('bareRun', { taskQueue: floorQueue, workflowId: `bench-bare-${tag}-${i}`, args: [args] });
          const result = (await handle.result()) as { turns: number };
          return { turns: result.turns, handle };
        },
      },
      agentRunVariant('workflow', taskQueue, false),
      agentRunVariant('workflow, eager start', taskQueue, true),
    ];

    // One warm-up of each (worker caches, module loading, SQLite statements), not counted.
    for (const v of variants) await v.run(-1);
    const times = variants.map(() => [] as number[]);
    const eagerGranted = variants.map(() => 0);
    let turns = 0;
    const lastHandle: (WorkflowHandle | undefined)[] = variants.map(() => undefined);
    const phases = variants.map(() => ({ start: [] as number[], between: [] as number[], end: [] as number[], dispatch: [] as number[] }));
    const cpu = variants.map(() => ({ process: [] as number[], server: [] as number[], harness: [] as number[] }));
    const server = () => (opts.serverPid ? (cpuSeconds(opts.serverPid) ?? 0) : 0);
    const children = () => cpuSeconds(process.pid, undefined, true) ?? 0;
    for (let i = 0; i < runs; i++) {
      // Interleaved, in rotating order, so machine noise and ordering hit every variant alike.
      for (let k = 0; k < variants.length; k++) {
        const j = (i + k) % variants.length;
        const t = performance.now();
        const before = { process: process.cpuUsage(), server: server(), harness: children() };
        const r = await variants[j]!.run(i);
        times[j]!.push(performance.now() - t);
        const used = process.cpuUsage(before.process);
        cpu[j]!.process.push((used.user + used.system) / 1000 / r.turns);
        cpu[j]!.server.push(((server() - before.server) * 1000) / r.turns);
        cpu[j]!.harness.push(((children() - before.harness) * 1000) / r.turns);
        if (turns === 0) turns = r.turns;
        if (r.turns !== turns) throw new Error(`${variants[j]!.name} took ${r.turns} turns, another variant ${turns}`);
        if (r.eager) eagerGranted[j]! += 1;
        lastHandle[j] = r.handle;
        const turnActivity = variants[j]!.turnActivity;
        if (r.handle && turnActivity) {
          // Read after the clock stopped: the history of a closed run, off the measured path.
          const p = await phaseSamples(r.handle, turnActivity);
          phases[j]!.start.push(p.start);
          phases[j]!.between.push(...p.between);
          phases[j]!.end.push(p.end);
          phases[j]!.dispatch.push(...p.dispatch);
        }
      }
    }
    const perTurn = (j: number, base: number) => median(times[j]!.map((ms, i) => (ms - times[base]![i]!) / turns));
    const result: OrchestrationVariant[] = [];
    for (const [j, v] of variants.entries()) {
      if (j === 0) continue;
      const handle = lastHandle[j];
      result.push({
        name: v.name,
        runMs: median(times[j]!),
        overheadPerTurnMs: perTurn(j, 0),
        ...(j > 1 ? { overFloorPerTurnMs: perTurn(j, 1) } : {}),
        ...(j > 2 ? { overBarePerTurnMs: perTurn(j, 2) } : {}),
        cpuPerTurnMs: { process: median(cpu[j]!.process), server: median(cpu[j]!.server), harness: median(cpu[j]!.harness) },
        ...(handle && v.turnActivity ? { history: await historyFigures(handle, v.turnActivity, turns) } : {}),
        ...(v.name.includes('eager') ? { eagerGranted: `${eagerGranted[j]}/${runs}` } : {}),
        ...(v.turnActivity
          ? { phases: { startMs: median(phases[j]!.start), betweenMs: median(phases[j]!.between), endMs: median(phases[j]!.end), dispatchMs: median(phases[j]!.dispatch) } }
          : {}),
      });
    }
    // Variants 3 and 4 are the workflow started plainly and eagerly.
    const eagerSavingPerRunMs = median(times[3]!.map((ms, i) => ms - times[4]![i]!));
    return { scenario: opts.turns ? `${opts.turns}-turn scripted run` : 'demo agent', runs, turnsPerRun: turns, inProcessRunMs: median(times[0]!), variants: result, eagerSavingPerRunMs };
  } finally {
    worker.shutdown();
    await running.catch(() => undefined);
    floorWorker.shutdown();
    await floorRunning;
    await nativeConnection.close();
    await connection.close();
    await deps.ledger.close();
  }
}

/** The target: overhead per turn within this much of the floor's. */
export const floorTargetMs = 5;

/** The figures as markdown table lines. */
export function orchestrationTable(f: OrchestrationFigures): string[] {
  const fmt = (x: number | undefined, digits = 1) => (x === undefined ? '–' : x.toFixed(digits));
  const lines = [
    '| variant | run (ms) | overhead per turn (ms) | over the floor per turn (ms) | over the bare wrapper per turn (ms) | history per turn | steady-state turn |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    `| in-process (baseline) | ${fmt(f.inProcessRunMs)} | 0 | – | – | – | – |`,
  ];
  for (const v of f.variants) {
    const h = v.history;
    lines.push(
      `| ${v.name}${v.eagerGranted ? ` (eager granted ${v.eagerGranted})` : ''} | ${fmt(v.runMs)} | ${fmt(v.overheadPerTurnMs)} | ${fmt(v.overFloorPerTurnMs)} | ${fmt(v.overBarePerTurnMs)} | ` +
        `${h ? `${h.eventsPerTurn.toFixed(1)} events, ${Math.round(h.bytesPerTurn)} B` : '–'} | ${h ? `${h.steadyEvents} events, ${h.steadyBytes} B` : '–'} |`,
    );
  }
  const cpu = f.variants.filter((v) => v.cpuPerTurnMs);
  if (cpu.length > 0) {
    lines.push(
      '',
      'CPU per turn (medians over runs, ms): this process (the workers and the client), the Temporal server, the harness processes.',
      '',
      '| variant | process | server | harness | all | × the bare wrapper |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
    );
    const all = (v: OrchestrationVariant) => v.cpuPerTurnMs!.process + v.cpuPerTurnMs!.server + v.cpuPerTurnMs!.harness;
    const bare = cpu.find((v) => v.name.startsWith('bare'));
    for (const v of cpu) lines.push(`| ${v.name} | ${fmt(v.cpuPerTurnMs!.process)} | ${fmt(v.cpuPerTurnMs!.server)} | ${fmt(v.cpuPerTurnMs!.harness)} | ${fmt(all(v))} | ${bare ? fmt(all(v) / all(bare), 2) : '–'} |`);
  }
  const timed = f.variants.filter((v) => v.phases);
  if (timed.length > 0) {
    lines.push(
      '',
      "Where a run's time went outside its turns (medians, ms, from the histories' server timestamps): start = execution started → first turn started; " +
        'between = a turn completed → the next one started; end = last turn completed → run completed; dispatch = a turn scheduled → started. ' +
        "The floor resolves the agent and starts/ends the session inside its first/last turn, the workflow in local activities inside its start and end: compare between turns and dispatch like for like, start + end as the run's fixed cost.",
      '',
      '| variant | start | between turns | end | turn dispatch |',
      '| --- | ---: | ---: | ---: | ---: |',
      ...timed.map((v) => `| ${v.name} | ${fmt(v.phases!.startMs)} | ${fmt(v.phases!.betweenMs)} | ${fmt(v.phases!.endMs)} | ${fmt(v.phases!.dispatchMs)} |`),
    );
  }
  return lines;
}

/** The verdict lines: the project against the floor + 5 ms, and what eager start saves. */
export function orchestrationVerdict(f: OrchestrationFigures): string[] {
  const floor = f.variants.find((v) => v.name.startsWith('floor'));
  const project = f.variants.find((v) => v.name.startsWith('workflow (') && !v.name.includes('eager'));
  const eager = f.variants.find((v) => v.name.includes('eager'));
  const out: string[] = [];
  if (floor && project) {
    const diff = project.overFloorPerTurnMs ?? Number.NaN;
    out.push(
      `overhead per turn (${f.scenario}, ${f.turnsPerRun} turns): project ${project.overheadPerTurnMs.toFixed(1)} ms, floor ${floor.overheadPerTurnMs.toFixed(1)} ms, ` +
        `difference ${diff.toFixed(2)} ms (target ≤ ${floorTargetMs} ms: ${diff <= floorTargetMs ? 'met' : 'NOT met'})`,
    );
  }
  const bare = f.variants.find((v) => v.name.startsWith('bare'));
  if (bare && project) out.push(`over the bare Temporal wrapper around the same harness: ${(project.overBarePerTurnMs ?? Number.NaN).toFixed(1)} ms per turn (issue 22's target: ≤ 10 ms on 10-turn runs, ≤ 15 ms on 2-turn runs)`);
  if (project?.history) {
    const h = project.history;
    out.push(`steady-state turn history: ${h.steadyEvents} events, ${h.steadyBytes} B (target ≤ 8 events, ≤ 2048 B: ${h.steadyEvents <= 8 && h.steadyBytes <= 2048 ? 'met' : 'NOT met'})`);
  }
  if (eager) out.push(`eager start: ${f.eagerSavingPerRunMs.toFixed(1)} ms less per run (median of paired differences; granted ${eager.eagerGranted})`);
  return out;
}

export function printOrchestration(f: OrchestrationFigures): void {
  console.log(`orchestration, ${f.scenario}: ${f.turnsPerRun} turns per run, ${f.runs} interleaved iterations, medians:`);
  for (const line of orchestrationTable(f)) console.log(`  ${line}`);
  for (const line of orchestrationVerdict(f)) console.log(`  ${line}`);
}

/** Quiet SDK logs for benchmarks. */
export function quietRuntime(): void {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
}
