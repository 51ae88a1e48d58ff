/**
 * Permission hooks against the REAL pinned CLIs: each one's two-way mode, the runtime's permission gate (the
 * agent's `strict` policy, then the ledger-backed approval broker) and an operator who answers through the
 * ledger, as `durable-harness approve|deny` does. The fake vendor's model asks for a shell command
 * (`touch ran.txt`) and a file write (out.txt). What a user checks: the files in the workspace and the ledger.
 * A missing binary or strace fails, never skips.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { getAgentRun, startAgentRun } from '../../src/client/index.js';
import { addUsage, noUsage, usageOf } from '../../src/contracts/usage.js';
import { spawnCli, spawnNode } from '../support/cli.js';
import { startTestWorker } from '../support/worker.js';
import { collectTurn } from '../../src/adapters/fold.js';
import type { HarnessEvent } from '../../src/adapters/types.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import type { ApprovalRecord } from '../../src/ledger/types.js';
import { agentPermissionsSchema, createPermissionGate, decidePendingApproval, ledgerApprovalBroker, type OperatorDecision } from '../../src/permissions/index.js';
import { sameProcessAlive, type TurnRecord } from '../../src/sandbox/local-containment.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import { baseUrlFor, cliNames, forCli, shellCall, startVendorForCli, turnRequest, type CliName } from './fake-vendor/tool-calls.js';
import { cliBinary, expectInstalled } from './support/clis.js';
import { expectStrace, inetConnects, readStraceLogs, straceBin, straceConnectArgs } from './support/network.js';
import { cliProfiles, cliSessionConfig, envelope, permissionReplies } from './support/two-way.js';

const repo = path.resolve(import.meta.dirname, '../..');
// Not under /tmp: codex's sandbox helper breaks when CODEX_HOME is there.
const liveRoot = path.join(repo, '.data/permissions-live');
afterAll(() => process.env.KEEP_LIVE || rmSync(liveRoot, { recursive: true, force: true }));

const secret = 'sk-live-permissions-not-a-real-key';
/**
 * The harness's own turn budget here (the clock pauses while a request waits for an answer). It covers the CLI's cold
 * start, which the turn includes: on a starved machine opencode took 42 s of a 76 s turn just to answer
 * `session/new` (measured under `nice -n 19` beside CPU burners), and the suite runs these CLIs beside every other
 * test file. At 90 s such a turn timed out mid-scenario — CI saw it as "the scripted model was not asked as often as
 * the scenario expects: expected 1 to be +0" (the timeout struck before opencode's third model call).
 */
const liveTurnTimeoutMs = 300_000;
/** Each live test drives one turn: its budget, plus the fake vendor, the operator and the teardown. */
const liveTestTimeoutMs = liveTurnTimeoutMs + 60_000;
const prompt = 'Run touch ran.txt, then write out.txt, then finish.';

function freshWorkspace(name: string): string {
  const workspace = path.join(liveRoot, `${name}-${process.pid}-${Date.now()}`);
  mkdirSync(workspace, { recursive: true });
  writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
  return workspace;
}

/** Answers the run's pending requests from the ledger, the way the `approve`/`deny` commands do. */
function operator(ledger: SqliteLedger, workflowId: string, decide: (row: ApprovalRecord) => OperatorDecision | undefined) {
  let running = true;
  const seen: ApprovalRecord[] = [];
  const loop = (async () => {
    while (running) {
      for (const row of await ledger.listApprovals({ workflowId, status: 'pending' })) {
        const decision = decide(row);
        if (!decision) continue;
        seen.push(row);
        await decidePendingApproval(ledger, workflowId, row.requestId, decision);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    seen,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

interface Live {
  readonly workspace: string;
  readonly events: HarnessEvent[];
  readonly rows: ApprovalRecord[];
  readonly turn: Awaited<ReturnType<typeof collectTurn>>;
  readonly seen: ApprovalRecord[];
  readonly connects?: string[];
}

async function live(
  cli: CliName,
  scenario: 'allow' | 'deny' | 'edit',
  decide: (row: ApprovalRecord) => OperatorDecision | undefined,
  options: { approvalTimeoutMs?: number; strace?: boolean } = {},
): Promise<Live> {
  const workspace = freshWorkspace(`${cli}-${scenario}`);
  const ledger = SqliteLedger.open(':memory:');
  const vendor = await startVendorForCli(cli);
  const workflowId = `perm-${cli}-${scenario}-${Date.now()}`;
  const straceLog = path.join(workspace, 'connect.strace');
  const adapter = cliProfiles[cli].create();
  const ops = operator(ledger, workflowId, decide);
  try {
    adapter.applyPermissionPolicy('strict');
    adapter.setSystemPrompt('End every turn with one JSON next-step envelope.');
    const wrap = options.strace ? [straceBin, ...straceConnectArgs(straceLog)] : [];
    await adapter.start(cliSessionConfig(cli, workspace, vendor, new LocalExecutor({ workspacePath: workspace }), secret, { wrap, turnTimeoutMs: liveTurnTimeoutMs }));
    vendor.script(...forCli(cli, ...permissionReplies(cli, workspace, scenario)));
    const policy = agentPermissionsSchema.parse({ posture: 'strict', approvalTimeoutMs: options.approvalTimeoutMs ?? 60_000 });
    const gate = createPermissionGate({ ledger, workflowId, turn: 1, policy, workspace, broker: ledgerApprovalBroker({ ledger, pollMs: 50 }) });
    const events: HarnessEvent[] = [];
    const turn = await collectTurn(adapter.runTurn({ prompt, turn: 1, gate }), (e) => void events.push(e));
    // A turn that ended early (a timeout, a crash) says so, rather than showing up as a short count of model calls.
    expect(turn.error, 'the turn ended with an error before the scenario was through').toBeUndefined();
    expect(vendor.unexpected).toEqual([]);
    expect(vendor.remaining(), 'the scripted model was not asked as often as the scenario expects').toBe(0);
    return {
      workspace,
      events,
      turn,
      rows: await ledger.listApprovals({ workflowId }),
      seen: ops.seen,
      ...(options.strace ? { connects: inetConnects(readStraceLogs(straceLog)) } : {}),
    };
  } finally {
    await ops.stop();
    await adapter.end();
    await vendor.close();
    await ledger.close();
  }
}

const has = (workspace: string, file: string) => existsSync(path.join(workspace, file));

describe.each(cliNames.map((cli) => ({ cli })))('$cli permission hooks (real binary, fake vendor)', ({ cli }) => {
  it('has the pinned binary and strace (a missing one fails, never skips)', () => {
    expectInstalled(cliBinary(cli));
    expectStrace();
  });

  it('allowed by an operator: the command runs and the file is written; both decisions are in the ledger; only 127.0.0.1 is contacted', async () => {
    const r = await live(cli, 'allow', () => ({ allow: true, by: 'operator:alice' }), { strace: true });
    expect(r.turn.error).toBeUndefined();
    expect(r.turn.text).toBe('{"step":"success","result":"done"}');
    expect(has(r.workspace, 'ran.txt')).toBe(true);
    expect(readFileSync(path.join(r.workspace, 'out.txt'), 'utf8').trimEnd()).toBe('hello');
    expect(r.rows.map((row) => [row.kind, row.status, row.decidedBy])).toEqual([
      ['command', 'allowed', 'operator:alice'],
      ['edit', 'allowed', 'operator:alice'],
    ]);
    expect(r.rows[0]!.command).toBe('touch ran.txt');
    expect(r.rows[1]!.paths?.some((p) => p.endsWith('out.txt'))).toBe(true);
    for (const row of r.rows) expect(Date.parse(row.decidedAt!)).toBeGreaterThanOrEqual(Date.parse(row.requestedAt));
    expect(r.turn.sessionId).toBeTruthy();
    expect(r.turn.usage.output).toBe(60);
    expect(r.connects!.length, 'strace saw no inet connect at all: the proof would be empty').toBeGreaterThan(0);
    expect(r.connects!.filter((a) => a !== '127.0.0.1' && a !== '::1' && a !== '::ffff:127.0.0.1')).toEqual([]);
  }, liveTestTimeoutMs);

  it('denied by an operator: the file is not there and the command left no trace; the model is told why', async () => {
    const r = await live(cli, 'deny', () => ({ allow: false, by: 'operator:bob', message: 'Not in this workspace.' }));
    expect(r.turn.error).toBeUndefined();
    expect(has(r.workspace, 'ran.txt')).toBe(false);
    expect(has(r.workspace, 'out.txt')).toBe(false);
    expect(r.rows.map((row) => [row.kind, row.status, row.decidedBy, row.message])).toEqual([
      ['command', 'denied', 'operator:bob', 'Not in this workspace.'],
      ['edit', 'denied', 'operator:bob', 'Not in this workspace.'],
    ]);
    expect(r.events.filter((e) => e.type === 'permission-decision').map((e) => (e as { decision: string }).decision)).toEqual(['deny', 'deny']);
  }, liveTestTimeoutMs);

  it('edited by an operator: the edited command runs and the asked one does not', async () => {
    const r = await live(cli, 'edit', (row) => (row.command === 'touch ran.txt' ? { allow: true, by: 'operator:carol', edit: { command: 'touch edited.txt' } } : undefined));
    expect(r.turn.error).toBeUndefined();
    expect(r.turn.text).toBe('{"step":"success","result":"edited ran"}');
    expect(has(r.workspace, 'edited.txt')).toBe(true);
    expect(has(r.workspace, 'ran.txt')).toBe(false);
    const [first, ...rest] = r.rows;
    expect(first).toMatchObject({ command: 'touch ran.txt', status: 'allowed', decidedBy: 'operator:carol' });
    expect((first!.editedInput as { command: string }).command).toBe('touch edited.txt');
    if (cliProfiles[cli].nativeEdit) expect(rest).toEqual([]);
    // Emulated: the model asks again with exactly the edit, which the operator already approved.
    else expect(rest.map((row) => [row.command, row.status, row.decidedBy])).toEqual([['touch edited.txt', 'allowed', `edit-of:${first!.requestId}`]]);
    expect(r.seen).toHaveLength(1);
  }, liveTestTimeoutMs);

  it('the worker dies while the CLI waits for an answer: the CLI runs nothing and goes away', async () => {
    const workspace = freshWorkspace(`${cli}-worker-death`);
    const vendor = await startVendorForCli(cli);
    try {
      vendor.script(...forCli(cli, ...permissionReplies(cli, workspace, 'allow')));
      const stateFile = `${workspace}.runtime/turn.json`;
      const worker = spawn(process.execPath, ['--import', 'tsx', path.join(repo, 'test/e2e/support/two-way-worker.ts'), cli, workspace, vendor.url, stateFile], {
        cwd: repo,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let out = '';
      worker.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const exit = await new Promise<{ code: number | null; signal: string | null }>((resolve) => worker.on('exit', (code, signal) => resolve({ code, signal })));
      expect(out).toBe('asked\n');
      expect(exit.signal).toBe('SIGKILL');
      // The runtime's record of the turn (outside the workspace): the process and its PID namespace's PID 1.
      const record = JSON.parse(readFileSync(stateFile, 'utf8')) as TurnRecord;
      expect(record.init).toBeDefined();
      const alive = () => [record, record.init!].some((p) => sameProcessAlive(p.pid, p.start));
      // Its stdin gone, the CLI may still talk to the model, but it must neither run the tool nor stay around.
      const deadline = Date.now() + 20_000;
      while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(alive(), 'the orphaned CLI is still running (a retried attempt would kill it by its runtime record)').toBe(false);
      expect(has(workspace, 'ran.txt')).toBe(false);
      expect(has(workspace, 'out.txt')).toBe(false);
    } finally {
      await vendor.close();
    }
  }, liveTestTimeoutMs);

  it('a request nobody answers is denied when its approval timeout passes', async () => {
    const started = Date.now();
    const r = await live(cli, 'deny', () => undefined, { approvalTimeoutMs: 1500 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(3000); // two requests, 1.5 s each
    expect(has(r.workspace, 'ran.txt')).toBe(false);
    expect(has(r.workspace, 'out.txt')).toBe(false);
    expect(r.rows.map((row) => [row.status, row.decidedBy])).toEqual([
      ['denied', 'timeout'],
      ['denied', 'timeout'],
    ]);
    expect(r.rows[0]!.message).toMatch(/Nobody approved this within 2 s/);
  }, liveTestTimeoutMs);
});

const driverClasses: Record<CliName, { driverClass: string; vendor: string }> = {
  claude: { driverClass: 'ClaudeCode', vendor: 'anthropic' },
  codex: { driverClass: 'Codex', vendor: 'openai' },
  gemini: { driverClass: 'GeminiCli', vendor: 'google' },
  opencode: { driverClass: 'OpenCode', vendor: 'openai' },
  pi: { driverClass: 'Pi', vendor: 'openai' },
};

/**
 * What the call that asks is, once its worker died in the wait (measured): known in full where the CLI reported it
 * before it asked (codex from its rollout, gemini from its chat file, pi's message_end); claude's output and all of
 * opencode's call are still to come then, and are booked as unknown usage by the retried attempt.
 */
const lostInTheWait: Record<CliName, 'nothing' | 'output' | 'call'> = { claude: 'output', codex: 'nothing', gemini: 'nothing', opencode: 'call', pi: 'nothing' };

describe.each(cliNames.map((cli) => ({ cli })))('$cli: a worker SIGKILLed while a permission request waits (the run through the workflow)', ({ cli }) => {
  it('the call that asked was booked before the wait: vendor bill = ledger = the run\'s result, or the run says what is unknown', { timeout: 900_000 }, async () => {
    expectInstalled(cliBinary(cli));
    const vendor = await startVendorForCli(cli);
    // Not under /tmp (codex's sandbox helper); its own task queue and ledger.
    const dataDir = path.join(liveRoot, `${cli}-spend-worker-death-${process.pid}-${Date.now()}`);
    mkdirSync(dataDir, { recursive: true });
    const profile = cliProfiles[cli];
    const catalog = {
      harnesses: [
        {
          name: cli,
          ...driverClasses[cli],
          model: profile.model,
          executable: cliBinary(cli),
          active: true,
          baseUrl: baseUrlFor(cli, vendor),
          turnTimeoutMs: liveTurnTimeoutMs,
          prices: { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
          settings: { apiKeyEnv: profile.keyEnv, ...profile.settings },
          env: profile.env ?? {},
        },
      ],
      agents: [
        {
          name: 'asking',
          harness: cli,
          permissions: { posture: 'strict', approvalTimeoutMs: 600_000 },
          turnAttempts: 3,
          guardrails: { maxIterations: 5, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 900_000 },
          credentials: [{ env: profile.keyEnv, from: 'FAKE_VENDOR_KEY' }],
        },
      ],
    };
    const workerEnv = { FAKE_VENDOR_KEY: 'sk-spend-worker-death' };
    const taskQueue = `spend-death-${cli}-${Date.now().toString(36)}`;
    // Attempt 1 asks to run `touch ran.txt` and waits; the worker dies. Attempt 2 (a fresh process) asks again, is
    // allowed, and ends with an envelope.
    const asking = { toolCalls: [shellCall(cli, 'touch ran.txt', 'call_death_1')], usage: { input: 700, output: 70, cacheRead: 30 } };
    vendor.script(...forCli(cli, asking, { ...asking, toolCalls: [shellCall(cli, 'touch ran.txt', 'call_death_2')] }, { text: envelope('survived'), usage: { input: 300, output: 30 } }));
    const child = spawnNode(['--import', 'tsx', path.join(repo, 'test/support/worker-process.ts')], {
      env: { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: taskQueue, DATA_DIR: dataDir, CATALOG_JSON: JSON.stringify(catalog), WORKFLOW_BUNDLE: inject('workflowBundlePath'), WORKER_ENV_JSON: JSON.stringify(workerEnv) },
    });
    const connection = await Connection.connect({ address: inject('temporalAddress') });
    let w: Awaited<ReturnType<typeof startTestWorker>> | undefined;
    try {
      await expect.poll(() => child.stdoutSoFar(), { timeout: 120_000, interval: 100 }).toContain('ready');
      const client = new Client({ connection });
      const workflowId = `spend-death-${cli}-${Date.now().toString(36)}`;
      await startAgentRun(client, { agent: 'asking', task: 'Run touch ran.txt, then finish.', identity: { tenantId: 't', userId: 'u' }, workflowId, taskQueue });
      const run = getAgentRun(client, workflowId);
      await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: liveTurnTimeoutMs, interval: 200 }).toBe(1);
      const ledgerFile = path.join(dataDir, 'ledger.sqlite');
      const peek = SqliteLedger.open(ledgerFile);
      try {
        // Booked while the CLI waits: before, codex's and gemini's call reached the ledger only after the answer.
        const booked = async () => (await peek.runTotals(workflowId)).usage.input ?? 0;
        if (lostInTheWait[cli] !== 'call') await expect.poll(booked, { timeout: 10_000, interval: 100 }).toBe(700);
      } finally {
        await peek.close();
      }
      child.kill('SIGKILL');
      await child.outcome;
      // Another worker takes over; the turn is retried after the heartbeat timeout and asks again.
      w = await startTestWorker({ catalog, dataDir, taskQueue, env: workerEnv });
      const approved = new Set<string>();
      const approver = (async () => {
        for (let i = 0; i < 3000; i++) {
          const status = await run.status().catch(() => undefined);
          if (!status || !['running', 'starting'].includes(status.state)) return;
          for (const p of status.pendingApprovals ?? []) {
            if (approved.has(p.requestId)) continue;
            approved.add(p.requestId);
            await spawnCli(['approve', workflowId, p.requestId, '--by', 'dana', '--address', inject('temporalAddress')]).outcome;
          }
          await new Promise((r) => setTimeout(r, 250));
        }
      })();
      const result = await run.result();
      await approver;
      expect(result).toMatchObject({ status: 'succeeded', result: 'survived' });
      const matches = turnRequest[cli] ?? (() => true);
      const bill = vendor.served.filter((x) => matches(x.request)).reduce((sum, x) => addUsage(sum, usageOf({ input: x.usage.input, output: x.usage.output + x.usage.reasoning, cacheRead: x.usage.cacheRead })), noUsage);
      // Three calls served: attempt 1's (700/70/30), attempt 2's twice over (the ask, then the envelope).
      expect(bill).toMatchObject({ input: 1700, output: 170, cacheRead: 60 });
      const totals = await w.ledger.runTotals(workflowId);
      const unknown = lostInTheWait[cli];
      const expected = unknown === 'nothing' ? bill : unknown === 'output' ? { ...bill, output: bill.output! - 70 } : { input: bill.input! - 700, output: bill.output! - 70, cacheRead: bill.cacheRead! - 30 };
      expect(totals.usage).toMatchObject(expected);
      expect(result.usage).toMatchObject(expected);
      // Before: the dead attempt's call was in no row, and the run said its cost was known.
      expect(totals.costBlind).toBe(unknown !== 'nothing');
      expect(result.costBlind === true).toBe(unknown !== 'nothing');
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await w?.close();
      await connection.close();
      await vendor.close();
    }
  });
});
