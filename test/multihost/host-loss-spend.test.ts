/**
 * The spend of attempts lost with their host reaches the run's own totals (issue 18): worker PROCESSES stand in for
 * hosts (one task queue, one Temporal dev server, one PostgreSQL ledger). A turn spends, then its host dies
 * (SIGKILL) or freezes (SIGSTOP) mid-turn; the run moves on — a fresh workspace on another host (reprovision), or an
 * operator's retry once the host is back (await-operator). What a user checks: the vendor's bill (every workspace's
 * `served.jsonl`), the ledger and the run's result and status say the same number of tokens.
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, it } from 'vitest';
import { startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { addUsage, noUsage, totalTokens, usageOf, type Usage } from '../../src/contracts/usage.js';
import { ok, scriptBook, scriptedCatalog, statelessHarness } from '../support/scripted.js';
import { testWorkflowId } from '../support/worker.js';
import { hostFleet, type HostProcess } from './hosts.js';

const book = scriptBook();
const flags = mkdtempSync(path.join(os.tmpdir(), 'dh-host-loss-flags-'));
const sandbox = { hostLossTimeoutMs: 3000 };
const catalog = scriptedCatalog(book, {
  harnesses: [statelessHarness(book)],
  agents: [
    { name: 'mover', harness: 'stateless', turnAttempts: 3, sandbox: { ...sandbox, onHostLoss: 'reprovision' } },
    { name: 'waiter', harness: 'stateless', turnAttempts: 2, operatorTimeoutMs: 300_000, sandbox },
    { name: 'frozen', harness: 'stateless', turnAttempts: 1, operatorTimeoutMs: 300_000, sandbox },
  ],
});

const fleet = hostFleet('host_loss_spend', catalog);
const start = fleet.start;
const runDir = (host: HostProcess, workflowId: string) => path.join(host.dataDir, 'workspaces', 'runs', workflowId);

/** The vendor's bill for a run: the calls the harness served, in every workspace the run had. */
function served(workflowId: string, on: HostProcess[]): Usage {
  return on.reduce((sum, host) => {
    const file = path.join(runDir(host, workflowId), '.scripted', 'served.jsonl');
    if (!existsSync(file)) return sum;
    const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    return lines.reduce((u, line) => addUsage(u, usageOf((JSON.parse(line) as { usage: Record<string, number> }).usage)), sum);
  }, noUsage);
}

/**
 * Turn 1 asks a question (the run settles on a host); turn 2 makes one call of 330 tokens, then — the first time on
 * this machine — hangs, so its host can be lost mid-turn; a later run of it answers.
 */
function task(name: string, extraCall?: Record<string, unknown>): string {
  const calls = [{ usage: { input: 300, output: 30 } }, ...(extraCall ? [extraCall] : [])];
  return book.write(name, [
    { calls: [{ usage: { input: 100, output: 10 } }], envelope: { step: 'chat', message: 'ready?' } },
    { calls, hangOnce: 120_000, hangOnceFlag: path.join(flags, name), ...ok(`${name} done`) },
  ]);
}

async function untilTurnTwoSpent(workflowId: string, calls = 1): Promise<void> {
  await expect.poll(async () => (await fleet.ledger.listPromptRuns(workflowId)).filter((r) => r.turn === 2).reduce((n, r) => n + r.calls, 0), { timeout: 60_000, interval: 100 }).toBe(calls);
}

async function settled(run: AgentRunHandle, pair: HostProcess[]): Promise<{ holder: HostProcess; other: HostProcess }> {
  await expect.poll(async () => (await run.status()).state, { timeout: 60_000, interval: 200 }).toBe('waiting_for_reply');
  const holder = pair.find((h) => existsSync(runDir(h, run.workflowId)))!;
  return { holder, other: pair.find((h) => h !== holder)! };
}

/** The books agree: the vendor's bill = the ledger = the run's result = its status. */
async function expectBooksAgree(run: AgentRunHandle, on: HostProcess[], result: { usage: Usage }): Promise<void> {
  const bill = served(run.workflowId, on);
  const totals = await fleet.ledger.runTotals(run.workflowId);
  expect(totalTokens(bill)).toBeGreaterThan(0);
  expect(totals.usage).toMatchObject({ input: bill.input, output: bill.output });
  expect(result.usage).toMatchObject({ input: bill.input, output: bill.output });
  expect((await run.status()).totalTokens).toBe(totalTokens(bill));
}

it('reprovision: the host dies mid-turn; the attempt it lost is in the run\'s totals after the turn reruns elsewhere', { timeout: 240_000 }, async () => {
  const taskQueue = `loss-move-${Date.now().toString(36)}`;
  const pair = [await start(taskQueue, 'lm-a'), await start(taskQueue, 'lm-b')];
  const workflowId = testWorkflowId('loss-move');
  const run = await startAgentRun(fleet.client, { agent: 'mover', task: task('loss-move'), identity: { tenantId: 't', userId: 'u' }, workflowId, taskQueue });
  const { holder, other } = await settled(run, pair);
  await run.reply('yes');
  await untilTurnTwoSpent(workflowId);
  await holder.kill();
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'loss-move done' });
  expect(existsSync(runDir(other, workflowId))).toBe(true);
  // Served: turn 1 (110), turn 2 on the lost host (330) and again on the fresh one (330). Before, the run's result
  // said 440: the lost attempt's 330 were in the ledger only, so no guardrail saw them.
  expect(totalTokens(result.usage)).toBe(770);
  await expectBooksAgree(run, pair, result);
});

it('await-operator: the host dies mid-turn; while the run waits for an operator, and after the retry, its totals hold the lost attempt', { timeout: 240_000 }, async () => {
  const taskQueue = `loss-wait-${Date.now().toString(36)}`;
  const pair = [await start(taskQueue, 'lw-a'), await start(taskQueue, 'lw-b')];
  const workflowId = testWorkflowId('loss-wait');
  const run = await startAgentRun(fleet.client, { agent: 'waiter', task: task('loss-wait'), identity: { tenantId: 't', userId: 'u' }, workflowId, taskQueue });
  const { holder, other } = await settled(run, pair);
  await run.reply('yes');
  await untilTurnTwoSpent(workflowId);
  await holder.kill();
  await expect.poll(async () => (await run.status()).state, { timeout: 90_000, interval: 200 }).toBe('awaiting_operator');
  // The operator sees what the turn cost before deciding: the lost attempt included (before: 110).
  expect((await run.status()).totalTokens).toBe(440);
  const back = await start(taskQueue, holder.hostId, holder.dataDir);
  await run.retryTurn();
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'loss-wait done' });
  expect(totalTokens(result.usage)).toBe(770);
  await expectBooksAgree(run, [back, other], result);
});

it('a frozen host (SIGSTOP): what its attempt books once it thaws, before the operator\'s retry completes, is in the run\'s totals', { timeout: 240_000 }, async () => {
  const taskQueue = `loss-frozen-${Date.now().toString(36)}`;
  const pair = [await start(taskQueue, 'lf-a'), await start(taskQueue, 'lf-b')];
  const workflowId = testWorkflowId('loss-frozen');
  // Turn 2's second call comes 6 s after the first: the harness serves it while its worker is frozen. One attempt
  // per turn, so a frozen worker's long poll cannot take a retry it would sit on.
  const run = await startAgentRun(fleet.client, { agent: 'frozen', task: task('loss-frozen', { usage: { input: 50, output: 5 }, sleepMs: 6000 }), identity: { tenantId: 't', userId: 'u' }, workflowId, taskQueue });
  const { holder, other } = await settled(run, pair);
  await run.reply('yes');
  await untilTurnTwoSpent(workflowId);
  process.kill(holder.pid, 'SIGSTOP');
  // The attempt's heartbeats stop: the turn fails to an operator, with what the ledger had then (110 + 330).
  await expect.poll(async () => (await run.status()).state, { timeout: 90_000, interval: 500 }).toBe('awaiting_operator');
  expect((await run.status()).totalTokens).toBe(440);
  // The worker thaws and books the call its harness served meanwhile; then the operator retries.
  process.kill(holder.pid, 'SIGCONT');
  await untilTurnTwoSpent(workflowId, 2);
  await run.retryTurn();
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'loss-frozen done' });
  // 110 + 385 booked by the frozen attempt (55 of them after it thawed) + 385 by the retry. Before: 495.
  expect(totalTokens(result.usage)).toBe(880);
  await expectBooksAgree(run, [holder, other], result);
});
