/**
 * The chaos driver: real agent runs on their own Temporal dev server and a worker in its own process, while faults
 * are injected — worker SIGKILL during turns, Temporal server restarts, a cancel storm, a read-only ledger for a
 * while, and (its own phase, on two worker processes as hosts) a host SIGKILLed mid-turn. The harness (test/harnesses/scripted-harness.mjs) serves model calls with known usage and keeps the
 * vendor's bill (`served.jsonl` per run), so every run can be checked exactly:
 *
 * - ledger tokens equal the tokens served; the workflow's own totals too (once it folds failed attempts);
 * - no run lost (every run closed in Temporal, its ledger row closed);
 * - no turn counted twice (at most one used attempt per turn) and no prompt fed twice into a session;
 * - `endSession`'s effect exactly once (one `end` event);
 * - no process left running in the workspaces.
 *
 * Bounded: a fixed number of faults and runs, and a deadline after which whatever is still open counts as lost.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import { getAgentRun, startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { findTemporalCli, temporalCliInstallHint } from '../../src/temporal/cli-path.js';
import { freePort, startDevServer, type DevServer } from '../../src/temporal/dev-server.js';
import { workflowsPath } from '../../src/worker.js';
import type { AgentRunResult } from '../../src/workflows/types.js';
import { addUsage, noUsage, totalTokens, usageOf, type Usage } from '../../src/contracts/usage.js';
import { processesIn } from '../support/processes.js';

const repoRoot = path.resolve(import.meta.dirname, '..', '..');
const harness = path.join(repoRoot, 'test', 'harnesses', 'scripted-harness.mjs');

export interface ChaosPlan {
  /** Runs started while faults are injected (one every `startEveryMs`). */
  readonly runs: number;
  readonly startEveryMs: number;
  /** Turns per run, model calls per turn, latency per call. */
  readonly turns: number;
  readonly callsPerTurn: number;
  readonly callLatencyMs: number;
  readonly workerKills: number;
  readonly serverRestarts: number;
  /** Runs started together and cancelled at random moments. */
  readonly cancelStorm: number;
  /** How long the ledger stays read-only (0 = no window). */
  readonly readOnlyMs: number;
  /** Whatever is still open at this point counts as lost. */
  readonly deadlineMs: number;
  /** Assert the workflow's own totals too (the workflow folds failed attempts' usage: Phase B). */
  readonly assertWorkflowTotals: boolean;
  /**
   * The host-loss phase (`hostLossPhase`): runs on two worker processes standing in for hosts (own data and
   * workspace roots, one ledger); the host holding a turn in flight is SIGKILLed `kills` times. Half the runs move to
   * a fresh workspace (onHostLoss: reprovision), half wait for an operator, who retries once the host is back.
   */
  readonly hostLoss: { readonly runs: number; readonly kills: number };
  readonly seed: number;
}

export const shortPlan: ChaosPlan = {
  runs: 4,
  startEveryMs: 1000,
  turns: 2,
  callsPerTurn: 2,
  callLatencyMs: 250,
  workerKills: 2,
  serverRestarts: 1,
  cancelStorm: 3,
  readOnlyMs: 2000,
  deadlineMs: 75_000,
  assertWorkflowTotals: true,
  hostLoss: { runs: 2, kills: 1 },
  seed: 8,
};

export const fullPlan: ChaosPlan = {
  runs: 30,
  startEveryMs: 2000,
  turns: 4,
  callsPerTurn: 3,
  callLatencyMs: 400,
  workerKills: 20,
  serverRestarts: 3,
  cancelStorm: 12,
  readOnlyMs: 8000,
  deadlineMs: 900_000,
  assertWorkflowTotals: true,
  hostLoss: { runs: 6, kills: 3 },
  seed: 88,
};

/** One run's books, checked. */
export interface RunCheck {
  readonly workflowId: string;
  readonly kind: 'load' | 'cancel-storm' | 'host-loss';
  readonly status: string;
  readonly served: Usage;
  readonly ledger: Usage;
  readonly workflow?: Usage;
  readonly attempts: number;
  readonly unusedAttempts: number;
  readonly doubleCountedTurns: number;
  readonly endEvents: number;
  readonly ledgerClosed: boolean;
  /** The run started a session (has a ledger row); a run cancelled before that has nothing to end. */
  readonly hadSession: boolean;
  readonly duplicatePrompts: number;
  readonly problems: string[];
}

export interface ChaosReport {
  readonly plan: ChaosPlan;
  readonly injected: { workerKills: number; serverRestarts: number; cancels: number; readOnlyMs: number; hostKills: number; operatorRetries: number };
  readonly runs: RunCheck[];
  readonly lost: string[];
  readonly orphans: number[];
  readonly wallMs: number;
  readonly problems: string[];
}

/** A small deterministic PRNG, so a plan's fault timings repeat. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class WorkerProcess {
  private child: ChildProcess | undefined;
  restarts = 0;
  /** `env` configures test/support/worker-process.ts. */
  constructor(private readonly env: Record<string, string>) {}

  async start(): Promise<void> {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(repoRoot, 'test', 'support', 'worker-process.ts')], {
      cwd: repoRoot,
      env: { ...process.env, ...this.env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.child = child;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('chaos worker did not start within 60 s')), 60_000);
      child.stdout!.on('data', (d: Buffer) => {
        if (d.toString().includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`chaos worker exited with ${code} before it was ready`));
      });
    });
  }

  /** The worker's pid while it runs. */
  get pid(): number | undefined {
    return this.child?.exitCode === null ? this.child.pid : undefined;
  }

  /** SIGKILL: no shutdown, no cleanup — what a crashed host does. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }
}

function catalogFor(scriptsDir: string, plan: ChaosPlan) {
  const scriptedHarness = (name: string, args: string[], capabilities: Record<string, boolean>) => ({
    name,
    driverClass: 'StdioJson',
    executable: process.execPath,
    args: [harness, '--scripts', scriptsDir, ...args],
    active: true,
    vendor: 'chaosvendor',
    model: 'chaos-1',
    capabilities,
    prices: { input: 1, output: 2, cacheRead: 0.1, cacheWrite: 1.25 },
    turnTimeoutMs: 60_000,
  });
  return {
    harnesses: [
      // The scripted harness branches a session on request: retried attempts never feed a prompt twice.
      scriptedHarness('chaos', [], { sessionFork: true }),
      // The host-loss phase: a fresh workspace continues from the replayed conversation, which a harness without
      // resume finds its place in.
      scriptedHarness('chaos-stateless', ['--stateless'], { sessionResume: false }),
    ],
    agents: [
      {
        name: 'chaos',
        harness: 'chaos',
        actions: ['echo'],
        // Enough attempts that repeated kills never exhaust a turn (an exhausted turn would wait for an operator).
        turnAttempts: 50,
        guardrails: { maxIterations: plan.turns + 2, maxTokens: 10_000_000, maxCostUsd: 1000, maxWallTimeMs: plan.deadlineMs },
      },
      ...(['reprovision', 'await-operator'] as const).map((onHostLoss) => ({
        name: `chaos-${onHostLoss}`,
        harness: 'chaos-stateless',
        actions: ['echo'],
        turnAttempts: 3,
        operatorTimeoutMs: plan.deadlineMs,
        guardrails: { maxIterations: plan.turns + 2, maxTokens: 10_000_000, maxCostUsd: 1000, maxWallTimeMs: plan.deadlineMs },
        sandbox: { hostLossTimeoutMs: 3000, onHostLoss },
      })),
    ],
    actions: [{ name: 'echo' }],
  };
}

/** A run's script: `turns` turns of `callsPerTurn` calls with known, distinct usage; the last one succeeds. */
function script(plan: ChaosPlan, run: number): { turns: Record<string, unknown>[] } {
  const turns = Array.from({ length: plan.turns }, (_, t) => {
    const calls = Array.from({ length: plan.callsPerTurn }, (_, c) => ({
      sleepMs: plan.callLatencyMs,
      usage: { input: 1000 + run * 10 + t, output: 50 + c, cacheRead: 100 * c },
    }));
    const last = t === plan.turns - 1;
    return { calls, envelope: last ? { step: 'success', result: `run ${run} done` } : { step: 'actions', actions: [{ name: 'echo', params: { text: `turn ${t + 1}` } }] } };
  });
  return { turns };
}

/** The vendor's bill of a run: what the harness served in each of the run's workspaces (one per host it ran on). */
function servedOf(workspaces: readonly string[]): Usage {
  let sum = noUsage;
  for (const workspace of workspaces) {
    const file = path.join(workspace, '.scripted', 'served.jsonl');
    if (!existsSync(file)) continue;
    for (const line of readFileSync(file, 'utf8').split('\n').filter(Boolean)) sum = addUsage(sum, usageOf((JSON.parse(line) as { usage: Record<string, number> }).usage));
  }
  return sum;
}

/** Prompts fed twice into one session: a retried attempt that resumed what a failed one left behind. */
function duplicatePrompts(workspace: string): number {
  const dir = path.join(workspace, '.scripted', 'sessions');
  if (!existsSync(dir)) return 0;
  let worst = 0;
  for (const file of readdirSafe(dir)) {
    const session = JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as { prompts?: string[] };
    const prompts = session.prompts ?? [];
    worst = Math.max(worst, prompts.length - new Set(prompts).size);
  }
  return worst;
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

const sameUsage = (a: Usage, b: Usage) => totalTokens(a) === totalTokens(b) && (a.input ?? 0) === (b.input ?? 0) && (a.output ?? 0) === (b.output ?? 0);

export async function runChaos(plan: ChaosPlan, options: { dataDir: string; log?: (line: string) => void }): Promise<ChaosReport> {
  const log = options.log ?? (() => undefined);
  const started = Date.now();
  const random = prng(plan.seed);
  const dataDir = options.dataDir;
  const scriptsDir = path.join(dataDir, 'scripts');
  mkdirSync(scriptsDir, { recursive: true });
  const catalogFile = path.join(dataDir, 'catalog.json');
  writeFileSync(catalogFile, JSON.stringify(catalogFor(scriptsDir, plan)));
  const cli = findTemporalCli();
  if (!cli) throw new Error(`the chaos suite needs the Temporal CLI. ${temporalCliInstallHint}`);
  const port = await freePort();
  const dbFile = path.join(dataDir, 'temporal.db');
  let server: DevServer = await startDevServer({ cliPath: cli.path, port, dbFile, logFile: path.join(dataDir, 'temporal.log') });
  const bundle = await bundleWorkflowCode({ workflowsPath, logger: { info() {}, warn() {}, error: console.error, debug() {}, trace() {}, log() {} } as never });
  const bundleFile = path.join(dataDir, 'workflow-bundle.js');
  writeFileSync(bundleFile, bundle.code);
  const taskQueue = `chaos-${plan.seed}`;
  const worker = new WorkerProcess({
    TEMPORAL_ADDRESS: server.address,
    TASK_QUEUE: taskQueue,
    DATA_DIR: dataDir,
    CATALOG_JSON: readFileSync(catalogFile, 'utf8'),
    WORKFLOW_BUNDLE: bundleFile,
    // While this file exists the worker's ledger is read-only (the read-only window below).
    READ_ONLY_FLAG: path.join(dataDir, 'ledger-read-only'),
  });
  await worker.start();
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  const injected = { workerKills: 0, serverRestarts: 0, cancels: 0, readOnlyMs: 0, hostKills: 0, operatorRetries: 0 };
  const runs: { handle: AgentRunHandle; kind: RunCheck['kind']; result?: AgentRunResult }[] = [];
  const problems: string[] = [];

  const start = async (index: number, kind: RunCheck['kind']) => {
    const name = `${kind}-${index}`;
    writeFileSync(path.join(scriptsDir, `${name}.json`), JSON.stringify(script(plan, index)));
    for (;;) {
      try {
        const handle = await startAgentRun(client, { agent: 'chaos', task: `chaos run script:${name}`, identity: { tenantId: 'chaos', userId: 'chaos' }, taskQueue, workflowId: `${name}-${plan.seed}` });
        runs.push({ handle, kind });
        return handle;
      } catch (err) {
        // The server may be restarting: try again (the id is fixed, so a start that did land is refused, not doubled).
        if ((err as Error).name === 'RunIdTakenError') {
          const handle = getAgentRun(client, `${name}-${plan.seed}`);
          runs.push({ handle, kind });
          return handle;
        }
        await sleep(500);
      }
    }
  };
  /** True while some attempt is running in the ledger (a turn is in flight). */
  const turnInFlight = async () => (await ledger.listOpenRuns(1000)).length > 0;

  // ---- load: a steady stream of runs while faults land ------------------------------------------------------
  const load = (async () => {
    for (let i = 0; i < plan.runs; i++) {
      await start(i, 'load');
      await sleep(plan.startEveryMs);
    }
  })();

  // ---- faults, one after another ----------------------------------------------------------------------------
  const faults = (async () => {
    await sleep(plan.startEveryMs);
    for (let k = 0; k < plan.workerKills; k++) {
      for (let waited = 0; !(await turnInFlight()) && waited < 20_000; waited += 100) await sleep(100);
      await sleep(Math.floor(random() * plan.callLatencyMs * plan.callsPerTurn));
      log(`fault: SIGKILL worker (${k + 1}/${plan.workerKills})`);
      await worker.kill();
      injected.workerKills += 1;
      await sleep(200 + Math.floor(random() * 800));
      await worker.start();
      await sleep(1500 + Math.floor(random() * 2000));
    }
    for (let r = 0; r < plan.serverRestarts; r++) {
      await sleep(1000 + Math.floor(random() * 2000));
      log(`fault: restart the Temporal server (${r + 1}/${plan.serverRestarts})`);
      await server.stop();
      injected.serverRestarts += 1;
      await sleep(500 + Math.floor(random() * 1000));
      server = await startDevServer({ cliPath: cli.path, port, dbFile, logFile: path.join(dataDir, 'temporal.log') });
    }
    if (plan.readOnlyMs > 0) {
      await sleep(1000);
      log(`fault: ledger read-only for ${plan.readOnlyMs} ms`);
      const flag = path.join(dataDir, 'ledger-read-only');
      writeFileSync(flag, '');
      const t0 = Date.now();
      await sleep(plan.readOnlyMs);
      rmSync(flag);
      injected.readOnlyMs = Date.now() - t0;
    }
    if (plan.cancelStorm > 0) {
      log(`fault: cancel storm of ${plan.cancelStorm} runs`);
      const storm = await Promise.all(Array.from({ length: plan.cancelStorm }, (_, i) => start(i, 'cancel-storm')));
      await Promise.all(
        storm.map(async (handle, i) => {
          await sleep(Math.floor(random() * plan.callLatencyMs * plan.callsPerTurn * 2));
          for (let tries = 0; tries < 20; tries++) {
            try {
              // Half through the run's cancel signal, half through Temporal's own cancel request.
              if (i % 2 === 0) await handle.cancel('cancel storm');
              else await handle.handle.cancel();
              injected.cancels += 1;
              return;
            } catch {
              await sleep(250);
            }
          }
        }),
      );
    }
  })();
  await Promise.all([load, faults]);

  // ---- wait for every run to close ---------------------------------------------------------------------------
  const deadline = started + plan.deadlineMs;
  const lost: string[] = [];
  log(`faults done; waiting for ${runs.length} runs to close`);
  const giveUp = new AbortController();
  const timer = setTimeout(() => giveUp.abort(), Math.max(0, deadline - Date.now()));
  for (const run of runs) {
    // The long poll is aborted at the deadline, so no call is left running when the connection closes.
    let result: AgentRunResult | 'timeout' | undefined;
    for (;;) {
      try {
        result = await connection.withAbortSignal(giveUp.signal, () => run.handle.result());
        break;
      } catch {
        if (giveUp.signal.aborted) {
          result = 'timeout';
          break;
        }
        // A transient error (the server restarting) retries; a run that closed without a result (terminated) stops.
        const state = await run.handle.handle.describe().then((d) => d.status.name, () => 'unknown');
        if (state !== 'RUNNING' && state !== 'unknown') break;
        await sleep(500);
      }
    }
    log(`  ${run.handle.workflowId}: ${result === 'timeout' ? 'timeout' : result === undefined ? 'no result' : result.status}`);
    if (result === 'timeout' || result === undefined) {
      const state = await run.handle.handle.describe().then((d) => d.status.name, () => 'unknown');
      if (result === 'timeout' || state === 'RUNNING') lost.push(`${run.handle.workflowId} (${state})`);
    } else {
      run.result = result;
    }
  }
  clearTimeout(timer);

  // ---- host loss: its own hosts, its own runs, after the rest ---------------------------------------------------
  const hostRoots: string[] = [];
  if (plan.hostLoss.runs > 0) {
    const phase = await hostLossPhase(plan, { client, scriptsDir, dataDir, catalogJson: readFileSync(catalogFile, 'utf8'), bundleFile, address: server.address, injected, log });
    runs.push(...phase.runs);
    lost.push(...phase.lost);
    hostRoots.push(...phase.workspaceRoots);
  }
  log('all runs closed (or lost); checking the books');
  await sleep(1000);
  const workspaces = path.join(dataDir, 'workspaces');
  const roots = [workspaces, ...hostRoots];
  const orphans = roots.flatMap((root) => (existsSync(root) ? processesIn(root) : []));

  // ---- check every run's books -------------------------------------------------------------------------------
  const checks: RunCheck[] = [];
  for (const run of runs) {
    const workflowId = run.handle.workflowId;
    const workspace = path.join(workspaces, 'runs', workflowId);
    // A host-loss run may have had a workspace on each host: its bill is their sum.
    const served = servedOf(run.kind === 'host-loss' ? hostRoots.map((root) => path.join(root, 'runs', workflowId)) : [workspace]);
    const totals = await ledger.runTotals(workflowId);
    const rows = await ledger.listPromptRuns(workflowId);
    const usedByTurn = new Map<number, number>();
    for (const r of rows) if (r.outputUsed) usedByTurn.set(r.turn, (usedByTurn.get(r.turn) ?? 0) + 1);
    const doubleCountedTurns = [...usedByTurn.values()].filter((n) => n > 1).length;
    const endEvents = (await ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'end').length;
    const ledgerRun = await ledger.getRun(workflowId);
    const check: RunCheck = {
      workflowId,
      kind: run.kind,
      status: run.result?.status ?? 'lost',
      served,
      ledger: totals.usage,
      ...(run.result ? { workflow: run.result.usage } : {}),
      attempts: totals.attempts,
      unusedAttempts: totals.unusedAttempts,
      doubleCountedTurns,
      endEvents,
      ledgerClosed: ledgerRun?.finishedAt !== undefined,
      hadSession: ledgerRun !== undefined,
      duplicatePrompts: duplicatePrompts(workspace),
      problems: [],
    };
    const p = check.problems;
    if (!sameUsage(served, totals.usage)) p.push(`ledger ${totalTokens(totals.usage)} tokens, served ${totalTokens(served)}`);
    if (plan.assertWorkflowTotals && run.result && !sameUsage(served, run.result.usage)) p.push(`workflow ${totalTokens(run.result.usage)} tokens, served ${totalTokens(served)}`);
    if (doubleCountedTurns) p.push(`${doubleCountedTurns} turn(s) with two used attempts`);
    // A run cancelled before its session started has no ledger row and nothing to end; any other ends exactly once.
    const hadSession = ledgerRun !== undefined;
    if (run.result && hadSession && endEvents !== 1) p.push(`${endEvents} end events`);
    if (run.result && hadSession && !check.ledgerClosed) p.push('ledger row still open');
    if (!hadSession && totalTokens(served) > 0) p.push('tokens served for a run the ledger never saw');
    if (check.duplicatePrompts) p.push(`a session holds a prompt ${check.duplicatePrompts + 1} times`);
    if (run.kind !== 'cancel-storm' && run.result && run.result.status !== 'succeeded') p.push(`ended ${run.result.status}: ${run.result.reason ?? ''}`);
    checks.push(check);
  }
  for (const c of checks) problems.push(...c.problems.map((p) => `${c.workflowId}: ${p}`));
  problems.push(...lost.map((l) => `lost: ${l}`));
  if (orphans.length) problems.push(`orphan processes: ${orphans.join(', ')}`);

  log(`checked: ${problems.length} problem(s)`);
  await worker.stop();
  await ledger.close();
  await connection.close();
  await server.stop();
  return { plan, injected, runs: checks, lost, orphans, wallMs: Date.now() - started, problems };
}

interface PhaseContext {
  readonly client: Client;
  readonly scriptsDir: string;
  readonly dataDir: string;
  readonly catalogJson: string;
  readonly bundleFile: string;
  readonly address: string;
  readonly injected: ChaosReport['injected'];
  readonly log: (line: string) => void;
}

/**
 * The host-loss phase: two worker processes stand in for two hosts (own data and workspace roots, one task queue,
 * the chaos ledger shared). Runs start on them; `plan.hostLoss.kills` times, the host holding a turn in flight is
 * SIGKILLed and brought back (same data dir, same host id) once its runs have gone on without it: `reprovision` runs
 * move to a fresh workspace on the other host, `await-operator` ones are retried by the operator once it is back.
 * The books are checked like every run's: vendor bill (both workspaces) = ledger = workflow totals.
 */
async function hostLossPhase(plan: ChaosPlan, ctx: PhaseContext): Promise<{ runs: { handle: AgentRunHandle; kind: 'host-loss'; result?: AgentRunResult }[]; lost: string[]; workspaceRoots: string[] }> {
  const taskQueue = `chaos-${plan.seed}-hosts`;
  const hosts = ['h1', 'h2'].map((hostId) => {
    const hostDir = path.join(ctx.dataDir, 'hosts', hostId);
    mkdirSync(hostDir, { recursive: true });
    const worker = new WorkerProcess({
      TEMPORAL_ADDRESS: ctx.address,
      TASK_QUEUE: taskQueue,
      DATA_DIR: hostDir,
      HOST_ID: hostId,
      LEDGER_FILE: path.join(ctx.dataDir, 'ledger.sqlite'),
      CATALOG_JSON: ctx.catalogJson,
      WORKFLOW_BUNDLE: ctx.bundleFile,
    });
    return { hostId, workspaces: path.join(hostDir, 'workspaces'), worker };
  });
  await Promise.all(hosts.map((h) => h.worker.start()));
  const runs: { handle: AgentRunHandle; kind: 'host-loss'; result?: AgentRunResult }[] = [];
  for (let i = 0; i < plan.hostLoss.runs; i++) {
    const name = `host-loss-${i}`;
    // Slow calls, so a turn is in flight when the host is killed.
    writeFileSync(path.join(ctx.scriptsDir, `${name}.json`), JSON.stringify(script({ ...plan, callLatencyMs: 2000 }, 100 + i)));
    const agent = i % 2 === 0 ? 'chaos-reprovision' : 'chaos-await-operator';
    const handle = await startAgentRun(ctx.client, { agent, task: `chaos run script:${name}`, identity: { tenantId: 'chaos', userId: 'chaos' }, taskQueue, workflowId: `${name}-${plan.seed}` });
    runs.push({ handle, kind: 'host-loss' });
  }
  // The operator: retries whatever waits for one (the host it needs may be back by then, or not yet: then again).
  let closing = false;
  const operator = (async () => {
    while (!closing) {
      for (const run of runs) {
        if (run.result) continue;
        const state = await run.handle.status().then((v) => v.state, () => undefined);
        if (state === 'awaiting_operator' && (await run.handle.retryTurn().then(() => true, () => false))) ctx.injected.operatorRetries += 1;
      }
      await sleep(1000);
    }
  })();
  for (let k = 0; k < plan.hostLoss.kills; k++) {
    // The host with a harness process at work: a turn in flight on it.
    let victim: (typeof hosts)[number] | undefined;
    for (let waited = 0; !victim && waited < 30_000; waited += 100) {
      victim = hosts.find((h) => existsSync(h.workspaces) && processesIn(h.workspaces).length > 0);
      if (!victim) await sleep(100);
    }
    if (!victim) break;
    ctx.log(`fault: SIGKILL host ${victim.hostId} mid-turn (${k + 1}/${plan.hostLoss.kills})`);
    await victim.worker.kill();
    ctx.injected.hostKills += 1;
    // Long enough for its turns to be given up (heartbeat timeout, then nobody takes them from its queue).
    await sleep(25_000);
    await victim.worker.start();
  }
  const deadline = Date.now() + plan.deadlineMs;
  const lost: string[] = [];
  for (const run of runs) {
    const left = deadline - Date.now();
    const result = await Promise.race([run.handle.result().catch(() => undefined), sleep(Math.max(0, left)).then(() => 'timeout' as const)]);
    ctx.log(`  ${run.handle.workflowId}: ${result === 'timeout' ? 'timeout' : (result?.status ?? 'no result')}`);
    if (result && result !== 'timeout') run.result = result;
    else lost.push(`${run.handle.workflowId} (host-loss phase)`);
  }
  closing = true;
  await operator;
  await Promise.all(hosts.map((h) => h.worker.stop()));
  return { runs, lost, workspaceRoots: hosts.map((h) => h.workspaces) };
}

/** The figures of a report as markdown (docs/RELIABILITY.md). */
export function reportMarkdown(report: ChaosReport, command: string): string {
  const sum = (pick: (c: RunCheck) => Usage | undefined) => report.runs.reduce((n, c) => n + totalTokens(pick(c) ?? noUsage), 0);
  const served = sum((c) => c.served);
  const ledgerTokens = sum((c) => c.ledger);
  const closed = report.runs.filter((c) => c.workflow);
  const servedClosed = closed.reduce((n, c) => n + totalTokens(c.served), 0);
  const workflowTokens = closed.reduce((n, c) => n + totalTokens(c.workflow ?? noUsage), 0);
  const pct = (part: number, whole: number) => (whole === 0 ? '0 %' : `${((100 * part) / whole).toFixed(1)} %`);
  const statuses = new Map<string, number>();
  for (const c of report.runs) statuses.set(`${c.kind}: ${c.status}`, (statuses.get(`${c.kind}: ${c.status}`) ?? 0) + 1);
  const p = report.plan;
  return [
    '# Reliability: every token counted, under every fault',
    '',
    `Written by the chaos suite (\`${command}\`) on ${new Date().toISOString().slice(0, 10)}; do not edit by hand. A real Temporal dev`,
    'server and a real worker process run agent runs of the scripted stdio-JSON harness, which serves model calls',
    'with known usage and keeps the bill; faults are injected while they run. The machine was a shared 2-core box.',
    '',
    '## Faults injected',
    '',
    '| fault | count |',
    '| --- | ---: |',
    `| worker SIGKILL during turns | ${report.injected.workerKills} |`,
    `| Temporal server restart | ${report.injected.serverRestarts} |`,
    `| cancel storm (runs cancelled mid-turn, half by signal, half by Temporal cancel) | ${report.injected.cancels} |`,
    `| ledger read-only (ms) | ${report.injected.readOnlyMs} |`,
    `| host SIGKILL mid-turn (host-loss phase: ${p.hostLoss.runs} runs on two hosts, reprovision and await-operator) | ${report.injected.hostKills} (operator retries: ${report.injected.operatorRetries}) |`,
    '',
    `Load: ${p.runs} runs of ${p.turns} turns × ${p.callsPerTurn} model calls (${p.callLatencyMs} ms each), one started every ${p.startEveryMs} ms, plus ${p.cancelStorm} cancel-storm runs. Wall time ${(report.wallMs / 1000).toFixed(0)} s.`,
    '',
    '## Per run, checked',
    '',
    '| check | result |',
    '| --- | ---: |',
    `| runs | ${report.runs.length} (${[...statuses].map(([k, v]) => `${k} ${v}`).join(', ')}) |`,
    `| runs lost (not closed by the deadline) | ${report.lost.length} |`,
    `| tokens served (the vendor's bill) | ${served.toLocaleString('en-US')} |`,
    `| tokens in the ledger | ${ledgerTokens.toLocaleString('en-US')} |`,
    `| runs whose ledger ≠ served | ${report.runs.filter((c) => !sameUsage(c.served, c.ledger)).length} |`,
    `| unaccounted in the ledger | ${pct(served - ledgerTokens, served)} |`,
    `| tokens in the workflows' own totals (closed runs) | ${workflowTokens.toLocaleString('en-US')} of ${servedClosed.toLocaleString('en-US')} served (${pct(servedClosed - workflowTokens, servedClosed)} not folded${p.assertWorkflowTotals ? ': asserted equal for every run, cancelled ones included' : ''}) |`,
    `| turn attempts / unused (failed, lost, cancelled, superseded) | ${report.runs.reduce((n, c) => n + c.attempts, 0)} / ${report.runs.reduce((n, c) => n + c.unusedAttempts, 0)} |`,
    `| turns counted twice | ${report.runs.reduce((n, c) => n + c.doubleCountedTurns, 0)} |`,
    `| prompts fed twice into a session | ${report.runs.reduce((n, c) => n + c.duplicatePrompts, 0)} |`,
    `| runs with \`endSession\`'s effect ≠ once (of ${report.runs.filter((c) => c.hadSession).length} that started a session) | ${report.runs.filter((c) => c.workflow && c.hadSession && c.endEvents !== 1).length} |`,
    `| ledger rows left open | ${report.runs.filter((c) => c.workflow && c.hadSession && !c.ledgerClosed).length} |`,
    `| orphan processes | ${report.orphans.length} |`,
    '',
    report.problems.length ? ['## Problems', '', ...report.problems.map((x) => `- ${x}`), ''].join('\n') : '**All checks passed.**\n',
  ].join('\n');
}
