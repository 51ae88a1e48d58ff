/**
 * Per real CLI: one turn through the `agentRun` workflow against the fake vendor, next to the bare CLI process
 * doing the same turn outside durable-harness.
 *
 *   - workflowTurnMs: median end-to-end wall time of a one-turn run (the vendor answers `success` at once),
 *     from `startAgentRun` to its result: Temporal round trips, session start/end, the adapter, the process.
 *   - activityTurnMs: median `durationMs` of the prompt-run row (the runTurn activity: adapter + process only).
 *   - bareTurnMs: median wall time of the bare CLI, spawned with exactly the argv, env, stdin and per-run home
 *     the adapter builds (captured from the adapter), from spawn to exit.
 *   - ratio: workflowTurnMs / bareTurnMs.
 * One warm-up of each kind per CLI is not counted. Needs the pinned CLIs (cd test/e2e/clis && npm ci).
 * Run alone: `npx tsx bench/clis.ts [runs] [cli ...]` (starts its own Temporal dev server).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, bundleWorkflowCode } from '@temporalio/worker';
import { defaultAdapterRegistry } from '../src/adapters/registry.js';
import type { HarnessAdapter, HarnessSessionConfig } from '../src/adapters/types.js';
import { parseCatalog } from '../src/catalog/index.js';
import { startAgentRun } from '../src/client/index.js';
import { MemoryCredentialStore } from '../src/credentials/index.js';
import { SqliteLedger } from '../src/ledger/index.js';
import { minimalPath } from '../src/sandbox/local-executor.js';
import type { ExecProcess, ExecRequest, SandboxExecutor } from '../src/sandbox/types.js';
import { findTemporalCli, temporalCliInstallHint } from '../src/temporal/cli-path.js';
import { startDevServer } from '../src/temporal/dev-server.js';
import { createWorker, workflowsPath } from '../src/worker.js';
import { anthropicMessages } from '../test/e2e/fake-vendor/anthropic-messages.js';
import { openaiResponses } from '../test/e2e/fake-vendor/openai-responses.js';
import { startFakeVendor, type FakeVendor, type RecordedRequest } from '../test/e2e/fake-vendor/server.js';
import { profiles } from '../test/fixtures/record-more.js';
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

/** Medians in milliseconds for one CLI. */
export interface BenchCliRow {
  readonly cli: string;
  /** End-to-end: start of the run to its result (one turn). */
  readonly workflowTurnMs: number;
  /** The runTurn activity alone (prompt-run row `durationMs`). */
  readonly activityTurnMs: number;
  /** The bare CLI process, spawn to exit. */
  readonly bareTurnMs: number;
  /** workflowTurnMs / bareTurnMs. */
  readonly ratio: number;
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

/** The argv/env/stdin the adapter would run for turn 1 in `workspace` (its per-run home is written too). */
async function captureTurn(cli: BenchCli, vendor: FakeVendor, workspace: string, systemPrompt: string): Promise<ExecRequest> {
  const executor = new CapturingExecutor();
  const adapter: HarnessAdapter = defaultAdapterRegistry().create(cli.driverClass);
  adapter.applyPermissionPolicy('auto');
  adapter.setSystemPrompt(systemPrompt);
  await adapter.start(sessionConfig(cli, vendor, workspace, executor));
  for await (const event of adapter.runTurn({ prompt: task, turn: 1 })) void event;
  await adapter.end();
  if (!executor.request) throw new Error(`${cli.name}: the adapter started no process`);
  return executor.request;
}

/** Spawns the captured turn directly (the local executor's minimal environment) and times it to exit. */
function bareTurn(request: ExecRequest, workspace: string): Promise<number> {
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
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`bare ${file} exited with ${code ?? signal}`));
      else resolve(performance.now() - started);
    });
  });
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
  const { worker } = await createWorker({
    connection: nativeConnection,
    taskQueue,
    catalog: () => catalog,
    dataDir,
    ledger,
    env: { BENCH_FAKE_KEY: fakeKey },
    credentials: new MemoryCredentialStore({}),
    workflowBundle,
  });
  const running = worker.run();
  const rows: BenchCliRow[] = [];
  try {
    for (const cli of selected) {
      const vendor = vendors.get(cli.name)!;
      const workflow: number[] = [];
      const activity: number[] = [];
      for (let i = 0; i <= runs; i++) {
        vendor.script({ match: cli.match, text: envelope, usage: { input: 100, output: 10 } });
        const workflowId = `bench-${cli.name}-${process.pid}-${i}`;
        const started = performance.now();
        const run = await startAgentRun(client, { agent: `${cli.name}-bench`, task, workflowId, taskQueue, identity: { tenantId: 'bench', userId: 'bench' } });
        const result = await run.result();
        const elapsed = performance.now() - started;
        if (result.status !== 'succeeded') throw new Error(`${cli.name}: bench run ${workflowId} ended ${result.status}: ${JSON.stringify(result)}`);
        if (i === 0) continue; // warm-up
        workflow.push(elapsed);
        const [row] = await ledger.listPromptRuns(workflowId);
        if (row) activity.push(row.durationMs);
      }
      const bare: number[] = [];
      for (let i = 0; i <= runs; i++) {
        const workspace = path.join(dataDir, 'bare', `${cli.name}-${i}`);
        mkdirSync(workspace, { recursive: true });
        writeFileSync(path.join(workspace, 'notes.txt'), 'bench\n');
        const request = await captureTurn(cli, vendor, workspace, systemPrompt);
        vendor.script({ match: cli.match, text: envelope, usage: { input: 100, output: 10 } });
        const ms = await bareTurn(request, workspace);
        if (i > 0) bare.push(ms);
      }
      if (vendor.unexpected.length > 0) throw new Error(`${cli.name}: the fake vendor saw ${vendor.unexpected.length} unexpected requests`);
      const workflowTurnMs = Math.round(median(workflow));
      const bareTurnMs = Math.round(median(bare));
      rows.push({ cli: cli.name, workflowTurnMs, activityTurnMs: Math.round(median(activity)), bareTurnMs, ratio: Math.round((workflowTurnMs / bareTurnMs) * 100) / 100 });
    }
  } finally {
    worker.shutdown();
    await running;
    await nativeConnection.close();
    await connection.close();
    await ledger.close();
    for (const vendor of vendors.values()) await vendor.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return rows;
}

/** Prints the rows as a table. */
export function printClis(rows: readonly BenchCliRow[], runs: number): void {
  console.log(`\none turn against the fake vendor, median of ${runs} (ms); workflow = start of the run to its result:`);
  console.log('  cli        workflow   runTurn activity   bare CLI   ratio');
  for (const r of rows) {
    console.log(`  ${r.cli.padEnd(10)} ${String(r.workflowTurnMs).padStart(8)} ${String(r.activityTurnMs).padStart(18)} ${String(r.bareTurnMs).padStart(10)}   ${r.ratio.toFixed(2)}`);
  }
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
