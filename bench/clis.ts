/**
 * Per real CLI: one turn through the `agentRun` workflow against the fake vendor, next to the bare CLI process
 * doing the same turn outside durable-harness, and to the same turn driven in-process (the activities as plain
 * calls, no Temporal) and to the adapter's turn alone. Interleaved: every iteration runs each once, in rotating order; the figures are
 * medians, and the ratios medians of the per-iteration ratios.
 *
 *   - bareMs: the bare CLI, spawned with exactly the argv, env, stdin and per-run home the adapter builds
 *     (captured from the adapter), from spawn to exit: a fresh home, as every run of scope `run` has.
 *   - bareUsedMs: the same invocation again in the home the first one left (what a CLI costs once its first-run
 *     work is done: what codex's prepared home, src/adapters/home-template.ts, approaches on the local sandbox;
 *     the first run of a worker process goes without it, and that one is the warm-up).
 *   - inProcessMs: resolveAgent → startSession → runTurn (harness, accounting, validation) → endSession as
 *     plain calls with the workflow's own decisions (bench/in-process.ts): what the runtime adds around the
 *     process without Temporal.
 *   - workflowMs: start of a one-turn run (the vendor answers `success` at once) to its result.
 *   - floorMs: Temporal's floor for the same run (bench/floor/): a workflow whose one turn is ONE regular
 *     activity doing the whole in-process run — so floor − in-process is what any Temporal workflow around this
 *     turn costs, and workflow − floor is what the project adds over that.
 *   - activityMs: the runTurn activity alone inside the workflow (prompt-run row `durationMs`).
 *   - adapterMs: the adapter's turn on the local executor (spawn path, line handling, exit and kill), no
 *     activity, ledger or Temporal.
 *   - setupMs: the adapter's own setup for a turn — start() (config files, home) and building the command —
 *     with no process started.
 * So workflow − in-process is Temporal's part (floor − in-process of it unavoidable), in-process − bare the
 * runtime's part, setup a piece of the latter.
 * One warm-up of each kind per CLI is not counted. Needs the pinned CLIs (cd test/e2e/clis && npm ci).
 * Run alone: `npx tsx bench/clis.ts [runs] [cli ...]` (starts its own Temporal dev server).
 */
import { driverSession, type DriverSession, type HarnessSessionConfig } from '../test/support/driver-session.js';
import { spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { defaultAdapterRegistry, findDriver } from '../src/adapters/registry.js';
import { parseCatalog } from '../src/catalog/index.js';
import { startAgentRun } from '../src/client/index.js';
import { MemoryCredentialStore } from '../src/credentials/index.js';
import { SqliteLedger } from '../src/ledger/index.js';
import { LocalExecutor, minimalPath } from '../src/sandbox/local-executor.js';
import type { ExecProcess, ExecRequest, SandboxExecutor } from '../src/sandbox/types.js';
import { findTemporalCli, temporalCliInstallHint } from '../src/temporal/cli-path.js';
import { startDevServer } from '../src/temporal/dev-server.js';
import { createActivities } from '../src/activities/index.js';
import { createWorker, defaultDeps, workflowsPath } from '../src/worker.js';
import { anthropicMessages } from '../test/e2e/fake-vendor/anthropic-messages.js';
import { openaiResponses } from '../test/e2e/fake-vendor/openai-responses.js';
import { startFakeVendor, type FakeVendor, type RecordedRequest } from '../test/e2e/fake-vendor/server.js';
import { profiles } from '../test/fixtures/record-more.js';
import { createFloorActivities } from './floor/activities.js';
import { InProcessRun } from './in-process.js';
import { median } from './stats.js';

/** Options of `benchClis`. */
export interface BenchClisOptions {
  readonly temporalAddress: string;
  /** A prebuilt workflow bundle; bundled here when absent (about 1 s). */
  readonly workflowBundlePath?: string;
  /** Measured turns per CLI and side; default 5. */
  readonly runs?: number;
  /** Subset of `claude`, `codex`, `gemini`, `opencode`, `pi`; default all five. */
  readonly clis?: readonly string[];
}

/** Medians in milliseconds for one CLI; see the file comment. */
export interface BenchCliRow {
  readonly cli: string;
  readonly bareMs: number;
  readonly bareCloseMs: number;
  readonly bareUsedMs: number;
  readonly adapterMs: number;
  readonly inProcessMs: number;
  readonly workflowMs: number;
  /** Temporal's floor: the same run as one regular activity in a minimal workflow. */
  readonly floorMs: number;
  readonly activityMs: number;
  readonly setupMs: number;
  /** Median of workflow / bare per iteration (target ≤ 1.10 for codex and claude, issue 22). */
  readonly ratio: number;
  /** Median of in-process / bare per iteration. */
  readonly inProcessRatio: number;
  /** Median of floor / bare per iteration: the best any workflow around this turn can do here. */
  readonly floorRatio: number;
  /** Median of (workflow − floor) per iteration, ms: what the project adds over Temporal's floor. */
  readonly overFloorMs: number;
}

const repoRoot = path.resolve(import.meta.dirname, '..');
const bin = (name: string): string => path.join(repoRoot, 'test/e2e/clis/node_modules/.bin', name);
const envelope = '{"step":"success","result":"done"}';
const task = 'Say done as a success envelope.';
const fakeKey = 'sk-bench-fake-key';

interface BenchCli {
  readonly name: string;
  readonly driverClass: string;
  readonly vendor: string;
  readonly model: string;
  readonly keyEnv: string;
  readonly executable: string;
  readonly startVendor: () => Promise<FakeVendor>;
  readonly match?: (request: RecordedRequest) => boolean;
  readonly baseUrl: (vendor: FakeVendor) => string;
  readonly settings: Record<string, unknown>;
  readonly env: Record<string, string>;
}

const allClis: readonly BenchCli[] = [
  {
    name: 'claude',
    driverClass: 'ClaudeCode',
    vendor: 'anthropic',
    model: 'claude-sonnet-4-5',
    keyEnv: 'ANTHROPIC_API_KEY',
    executable: bin('claude'),
    startVendor: () => startFakeVendor({ handlers: { '/v1/messages': anthropicMessages } }),
    baseUrl: (v) => v.url,
    settings: { maxRetries: 0 },
    env: {},
  },
  {
    name: 'codex',
    driverClass: 'Codex',
    vendor: 'openai',
    model: 'gpt-5.5',
    keyEnv: 'OPENAI_API_KEY',
    executable: bin('codex'),
    startVendor: () => startFakeVendor({ handlers: { '/v1/responses': openaiResponses } }),
    baseUrl: (v) => v.url,
    settings: {},
    env: {},
  },
  ...(['gemini', 'opencode', 'pi'] as const).map((name) => ({
    name,
    driverClass: { gemini: 'GeminiCli', opencode: 'OpenCode', pi: 'Pi' }[name],
    vendor: name === 'gemini' ? 'google' : 'openai',
    model: profiles[name].model,
    keyEnv: profiles[name].keyEnv,
    executable: profiles[name].executable,
    startVendor: profiles[name].vendor,
    match: profiles[name].match,
    baseUrl: profiles[name].baseUrl,
    settings: { apiKeyEnv: profiles[name].keyEnv },
    // OpenCode npm-installs a plugin package in the background at every start unless npm is offline.
    env: name === 'opencode' ? { npm_config_offline: 'true' } : ({} as Record<string, string>),
  })),
];

/** Records the request the adapter builds and answers with a process that exits at once. */
class CapturingExecutor implements SandboxExecutor {
  request: ExecRequest | undefined;
  exec(request: ExecRequest): ExecProcess {
    this.request = request;
    return {
      lines: (async function* () {})(),
      exit: Promise.resolve({ code: 0, signal: null }),
      stderrTail: () => '',
      write: () => undefined,
      kill: async () => undefined,
    };
  }
}

function sessionConfig(cli: BenchCli, vendor: FakeVendor, workspace: string, executor: SandboxExecutor): HarnessSessionConfig {
  return {
    runId: `bench-${cli.name}`,
    harnessName: cli.name,
    executable: cli.executable,
    baseArgs: [],
    model: cli.model,
    workspacePath: workspace,
    hostWorkspacePath: workspace,
    env: { ...cli.env, [cli.keyEnv]: fakeKey },
    executor,
    baseUrl: cli.baseUrl(vendor),
    turnTimeoutMs: 60_000,
    settings: cli.settings,
  };
}

/**
 * The argv/env/stdin the adapter would run for turn 1 in `workspace` (its per-run home is written too), and how
 * long the adapter took to get there: its setup cost per turn, with no process.
 */
async function captureTurn(cli: BenchCli, vendor: FakeVendor, workspace: string, systemPrompt: string): Promise<{ request: ExecRequest; setupMs: number }> {
  const executor = new CapturingExecutor();
  const started = performance.now();
  const adapter: DriverSession = driverSession(findDriver(defaultAdapterRegistry(), cli.driverClass));
  adapter.applyPermissionPolicy('auto');
  adapter.setSystemPrompt(systemPrompt);
  await adapter.start(sessionConfig(cli, vendor, workspace, executor));
  for await (const event of adapter.runTurn({ prompt: task, turn: 1 })) void event;
  await adapter.end();
  const setupMs = performance.now() - started;
  if (!executor.request) throw new Error(`${cli.name}: the adapter started no process`);
  return { request: executor.request, setupMs };
}

/**
 * Spawns the captured turn directly (the local executor's minimal environment) and times it to exit; `closeMs`
 * is when its pipes closed too (later if a background grandchild holds them).
 */
function bareTurn(request: ExecRequest, workspace: string): Promise<{ ms: number; closeMs: number }> {
  const [file, ...args] = request.argv;
  const started = performance.now();
  const child = spawn(file!, args, {
    cwd: request.cwd ?? workspace,
    env: { PATH: minimalPath(), HOME: path.join(workspace, '.home'), LANG: 'C.UTF-8', ...request.env },
    stdio: [request.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  child.stdout?.resume();
  child.stderr?.resume();
  child.stdin?.on('error', () => undefined);
  child.stdin?.end(request.stdin);
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve, reject) => {
    let exitMs = 0;
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      exitMs = performance.now() - started;
      if (code !== 0) reject(new Error(`bare ${file} exited with ${code ?? signal}`));
    });
    child.once('close', () => {
      clearTimeout(timer);
      resolve({ ms: exitMs, closeMs: performance.now() - started });
    });
  });
}

/** The adapter's own turn on the local executor: no activity, ledger or Temporal. */
async function adapterTurn(cli: BenchCli, vendor: FakeVendor, workspace: string, systemPrompt: string): Promise<{ ms: number }> {
  const started = performance.now();
  const adapter: DriverSession = driverSession(findDriver(defaultAdapterRegistry(), cli.driverClass));
  adapter.applyPermissionPolicy('auto');
  adapter.setSystemPrompt(systemPrompt);
  await adapter.start(sessionConfig(cli, vendor, workspace, new LocalExecutor({ workspacePath: workspace })));
  for await (const event of adapter.runTurn({ prompt: task, turn: 1 })) {
    if (event.type === 'session-error') throw new Error(`${cli.name}: adapter turn failed: ${event.message}`);
  }
  await adapter.end();
  return { ms: performance.now() - started };
}

function installQuietRuntime(): void {
  try {
    Runtime.install({ logger: new DefaultLogger('ERROR') });
  } catch {
    // already installed by the caller (bench/main.ts)
  }
}

/** Measures each CLI through the workflow and bare; see the file comment. */
export async function benchClis(opts: BenchClisOptions): Promise<BenchCliRow[]> {
  const runs = opts.runs ?? 5;
  const selected = allClis.filter((c) => !opts.clis || opts.clis.includes(c.name));
  if (opts.clis && selected.length !== opts.clis.length) throw new Error(`unknown CLI in ${opts.clis.join(', ')}; use ${allClis.map((c) => c.name).join(', ')}`);
  installQuietRuntime();
  // Not under /tmp: codex's sandbox helper breaks when its home is there.
  const dataDir = path.join(repoRoot, '.data', 'bench-clis', `${process.pid}`);
  mkdirSync(dataDir, { recursive: true });
  const vendors = new Map<string, FakeVendor>();
  for (const cli of selected) vendors.set(cli.name, await cli.startVendor());
  const systemPrompt = 'Answer with the success envelope.';
  const catalog = parseCatalog(
    {
      harnesses: selected.map((cli) => ({
        name: cli.name,
        driverClass: cli.driverClass,
        vendor: cli.vendor,
        model: cli.model,
        apiKeyEnv: cli.keyEnv,
        executable: cli.executable,
        active: true,
        baseUrl: cli.baseUrl(vendors.get(cli.name)!),
        turnTimeoutMs: 60_000,
        settings: cli.settings,
        env: cli.env,
      })),
      agents: selected.map((cli) => ({
        name: `${cli.name}-bench`,
        harness: cli.name,
        systemPrompt,
        permissions: 'auto',
        credentials: [{ env: cli.keyEnv, from: 'BENCH_FAKE_KEY' }],
        guardrails: { maxIterations: 2, maxTokens: 1_000_000, maxCostUsd: 10, maxWallTimeMs: 120_000 },
      })),
    },
    'bench catalog',
    { baseDir: path.join(repoRoot, 'config') },
  );
  const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  const nativeConnection = await NativeConnection.connect({ address: opts.temporalAddress });
  const connection = await Connection.connect({ address: opts.temporalAddress });
  const client = new Client({ connection });
  const taskQueue = `bench-clis-${process.pid}`;
  const workflowBundle = opts.workflowBundlePath
    ? { codePath: opts.workflowBundlePath }
    : await bundleWorkflowCode({ workflowsPath, logger: new DefaultLogger('ERROR') });
  const setup = {
    catalog: () => catalog,
    dataDir,
    ledger,
    env: { BENCH_FAKE_KEY: fakeKey },
    credentials: new MemoryCredentialStore({}),
  };
  const { worker } = await createWorker({ ...setup, connection: nativeConnection, taskQueue, workflowBundle });
  const activities = createActivities(defaultDeps(setup));
  const running = worker.run();
  const floorQueue = `${taskQueue}-floor`;
  const floorBundle = await bundleWorkflowCode({ workflowsPath: path.join(import.meta.dirname, 'floor', 'workflows.ts'), logger: new DefaultLogger('ERROR') });
  const floorWorker = await Worker.create({ connection: nativeConnection, taskQueue: floorQueue, workflowBundle: { code: floorBundle.code }, activities: createFloorActivities(activities) });
  const floorRunning = floorWorker.run();
  const rows: BenchCliRow[] = [];
  try {
    for (const cli of selected) {
      const vendor = vendors.get(cli.name)!;
      const answer = () => vendor.script({ match: cli.match, text: envelope, usage: { input: 100, output: 10 } });
      const order = ['workflow', 'floor', 'inProcess', 'adapter', 'bare'] as const;
      type Sample = { ms: number; activityMs?: number; setupMs?: number; closeMs?: number; usedMs?: number };
      const kinds: Record<(typeof order)[number], (i: number) => Promise<Sample>> = {
        async workflow(i: number) {
          answer();
          const workflowId = `bench-${cli.name}-${process.pid}-${i}`;
          const started = performance.now();
          const run = await startAgentRun(client, { agent: `${cli.name}-bench`, task, workflowId, taskQueue, identity: { tenantId: 'bench', userId: 'bench' } });
          const result = await run.result();
          const elapsed = performance.now() - started;
          if (result.status !== 'succeeded') throw new Error(`${cli.name}: bench run ${workflowId} ended ${result.status}: ${JSON.stringify(result)}`);
          const [row] = await ledger.listPromptRuns(workflowId);
          return { ms: elapsed, activityMs: row?.durationMs };
        },
        async floor(i: number) {
          answer();
          const started = performance.now();
          const handle = await client.workflow.start('floorRun', { taskQueue: floorQueue, workflowId: `bench-floor-${cli.name}-${process.pid}-${i}`, args: [{ agent: `${cli.name}-bench`, task, maxTurns: 2 }] });
          const result = (await handle.result()) as { turns: number; lastStep: string };
          const elapsed = performance.now() - started;
          if (result.turns !== 1 || result.lastStep !== 'success') throw new Error(`${cli.name}: the floor run ended after ${result.turns} turns with ${result.lastStep}`);
          return { ms: elapsed };
        },
        async inProcess(i: number) {
          answer();
          const started = performance.now();
          const turns = await new InProcessRun(activities, `bench-inproc-${cli.name}-${process.pid}-${i}`, `${cli.name}-bench`, task).all();
          if (turns !== 1) throw new Error(`${cli.name}: the in-process run took ${turns} turns`);
          return { ms: performance.now() - started };
        },
        async adapter(i: number) {
          const workspace = path.join(dataDir, 'adapter', `${cli.name}-${i}`);
          mkdirSync(workspace, { recursive: true });
          writeFileSync(path.join(workspace, 'notes.txt'), 'bench\n');
          answer();
          return adapterTurn(cli, vendor, workspace, systemPrompt);
        },
        async bare(i: number) {
          const workspace = path.join(dataDir, 'bare', `${cli.name}-${i}`);
          mkdirSync(workspace, { recursive: true });
          writeFileSync(path.join(workspace, 'notes.txt'), 'bench\n');
          const { request, setupMs } = await captureTurn(cli, vendor, workspace, systemPrompt);
          answer();
          const fresh = await bareTurn(request, workspace);
          answer();
          const used = await bareTurn(request, workspace);
          return { ...fresh, setupMs, usedMs: used.ms };
        },
      };
      const samples: Record<string, number[]> = {};
      const add = (name: string, ms: number | undefined) => ms !== undefined && (samples[name] ??= []).push(ms);
      for (let i = 0; i <= runs; i++) {
        const got: Partial<Record<(typeof order)[number], Sample>> = {};
        // Rotating order: each kind goes first, second, ... equally often.
        for (let k = 0; k < order.length; k++) {
          const kind = order[(i + k) % order.length]!;
          got[kind] = await kinds[kind](i);
        }
        if (i === 0) continue; // warm-up
        for (const kind of order) add(kind, got[kind]!.ms);
        add('activity', got.workflow?.activityMs);
        add('setup', got.bare?.setupMs);
        add('bareClose', got.bare?.closeMs);
        add('bareUsed', got.bare?.usedMs);
      }
      if (vendor.unexpected.length > 0) throw new Error(`${cli.name}: the fake vendor saw ${vendor.unexpected.length} unexpected requests`);
      const m = (name: string) => Math.round(median(samples[name] ?? [Number.NaN]));
      const ratio = (name: string) => Math.round(median(samples[name]!.map((ms, i) => ms / samples.bare![i]!)) * 100) / 100;
      const overFloor = Math.round(median(samples.workflow!.map((ms, i) => ms - samples.floor![i]!)));
      rows.push({
        cli: cli.name,
        bareMs: m('bare'),
        bareCloseMs: m('bareClose'),
        bareUsedMs: m('bareUsed'),
        adapterMs: m('adapter'),
        inProcessMs: m('inProcess'),
        workflowMs: m('workflow'),
        floorMs: m('floor'),
        activityMs: m('activity'),
        setupMs: Math.round(median(samples.setup!) * 10) / 10,
        ratio: ratio('workflow'),
        inProcessRatio: ratio('inProcess'),
        floorRatio: ratio('floor'),
        overFloorMs: overFloor,
      });
    }
  } finally {
    worker.shutdown();
    floorWorker.shutdown();
    await running;
    await floorRunning;
    await nativeConnection.close();
    await connection.close();
    await ledger.close();
    for (const vendor of vendors.values()) await vendor.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return rows;
}

/** Issue 22's target: a fresh run through the workflow within 10 % of the bare CLI, for the two short-turn CLIs. */
const targetRatio = 1.1;
const targetClis = ['claude', 'codex'];

/** The rows as markdown table lines. */
export function clisTable(rows: readonly BenchCliRow[], runs: number): string[] {
  return [
    `One turn against the fake vendor, ${runs} interleaved iterations, medians (ms); ratios are medians of per-iteration ratios (target: workflow / bare ≤ ${targetRatio} for ${targetClis.join(' and ')}).`,
    'Bare: the CLI with the adapter\'s argv, env and a fresh per-run home (as every run of scope `run` has); used home: the same invocation again in the home it left.',
    "The floor is Temporal's own cost around the same run: a minimal workflow whose one turn is one regular activity doing the in-process run.",
    '',
    '| cli | bare CLI (exit / pipes closed) | bare, used home | adapter turn | in-process | floor | workflow | runTurn activity | adapter setup | in-process / bare | floor / bare | workflow / bare | workflow − floor |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.cli} | ${r.bareMs} / ${r.bareCloseMs} | ${r.bareUsedMs} | ${r.adapterMs} | ${r.inProcessMs} | ${r.floorMs} | ${r.workflowMs} | ${r.activityMs} | ${r.setupMs} | ` +
        `${r.inProcessRatio.toFixed(2)} | ${r.floorRatio.toFixed(2)} | ${r.ratio.toFixed(2)} | ${r.overFloorMs} |`,
    ),
    '',
    ...rows.map((r) => {
      const verdict = targetClis.includes(r.cli) ? ` (target ≤ ${targetRatio}: ${r.ratio <= targetRatio ? 'met' : 'NOT met'})` : '';
      return `- ${r.cli}: workflow / bare ${r.ratio.toFixed(2)}${verdict}; Temporal's floor alone ${r.floorRatio.toFixed(2)}`;
    }),
  ];
}

/** Prints the rows as a table. */
export function printClis(rows: readonly BenchCliRow[], runs: number): void {
  console.log('');
  for (const line of clisTable(rows, runs)) console.log(`  ${line}`);
}

const isMain = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  const [first, ...rest] = process.argv.slice(2);
  const runs = first !== undefined && /^\d+$/.test(first) ? Number(first) : 5;
  const clis = first !== undefined && /^\d+$/.test(first) ? rest : process.argv.slice(2);
  const temporal = findTemporalCli();
  if (!temporal) throw new Error(`bench/clis.ts needs the Temporal CLI. ${temporalCliInstallHint}`);
  installQuietRuntime();
  const server = await startDevServer({ cliPath: temporal.path });
  try {
    printClis(await benchClis({ temporalAddress: server.address, runs, clis: clis.length ? clis : undefined }), runs);
  } finally {
    await server.stop();
  }
}
