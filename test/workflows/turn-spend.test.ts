/**
 * Every token counted in the run's own books (issue 8, workflow side), on the real dev server: what failed attempts
 * spent reaches the run's counters and guardrails, and a turn is stopped mid-way when the run's budget is spent.
 */
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;
const call = (input: number, extra: Record<string, unknown> = {}) => ({ usage: { input, output: 0 }, ...extra });

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agents: [
        // Two attempts per turn; an operator who never comes is given up on quickly.
        { name: 'crashy', harness: 'scripted', actions: ['echo'], turnAttempts: 2, operatorTimeoutMs: 3000, guardrails: { maxTokens: 1000 } },
        { name: 'crashy-rich', harness: 'scripted', actions: ['echo'], turnAttempts: 2, operatorTimeoutMs: 2000 },
        { name: 'budgeted', harness: 'scripted', actions: ['echo'], guardrails: { maxTokens: 250 } },
      ],
    }),
  });
});
afterAll(() => w?.close());

it("a turn that fails for good: every attempt's tokens are in the run's result", async () => {
  // Every run of the step serves two calls of 400 tokens, then the harness crashes: 800 per attempt, 1,600 in all.
  const task = book.write('crashy-rich', [{ calls: [call(400), call(400, { exit: 1 })] }, ok('never')]);
  const workflowId = testWorkflowId('crashy-rich');
  const result = await (await w.start({ agent: 'crashy-rich', task, workflowId })).result();
  // Before: the run showed 0 tokens, though the vendor served 1,600.
  expect(result).toMatchObject({ status: 'failed', failureType: 'OperatorTimeout', usage: { input: 1600, output: 0 } });
  expect((await w.ledger.runTotals(workflowId)).usage).toMatchObject({ input: 1600 });
});

it("a crashed attempt's tokens count toward the token guardrail: the retry is stopped as soon as the run's budget is gone", async () => {
  // The second call comes 1.5 s after the first: a harness that is stopped at its first call never makes it.
  const task = book.write('crashy', [{ calls: [call(400), call(400, { exit: 1, sleepMs: 1500 })] }, ok('never')]);
  const workflowId = testWorkflowId('crashy');
  const run = await w.start({ agent: 'crashy', task, workflowId });
  const result = await run.result();
  // Attempt 1 spent 800 and crashed; attempt 2 knows it (from the ledger) and is stopped at its first call:
  // 1,200 ≥ 1,000. Before, the run showed 0 tokens and waited for an operator.
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'tokens', usage: { input: 1200, output: 0 } });
  const totals = await w.ledger.runTotals(workflowId);
  expect(totals.usage).toMatchObject({ input: 1200 });
  expect(totals.attempts).toBe(2);
  // The vendor's bill agrees: three calls served, the last attempt's second one never made.
  const workspace = (await run.status()).sandbox?.workspacePath;
  expect(readFileSync(`${workspace}/.scripted/served.jsonl`, 'utf8').trim().split('\n')).toHaveLength(3);
});

it('the run tells each turn what it has left: a turn that crosses the token budget is stopped mid-turn, and its actions never run', async () => {
  // Eight calls of 100 tokens, then an echo action; the budget is 250 tokens.
  const calls = Array.from({ length: 8 }, () => ({ usage: { input: 90, output: 10 }, sleepMs: 150 }));
  const task = book.write('budgeted', [{ calls, ...act({ name: 'echo', params: { text: 'never run' } }) }, ok('never')]);
  const workflowId = testWorkflowId('budgeted');
  const run = await w.start({ agent: 'budgeted', task, workflowId });
  const result = await run.result();
  // Stopped at the third call (300 ≥ 250): overshoot less than one call. Without the budget the turn ran all eight.
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'tokens', iterations: 1, usage: { input: 270, output: 30 } });
  expect(result.reason).toMatch(/token budget spent mid-turn/);
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows.map((r) => [r.status, r.calls])).toEqual([['budget-exhausted', 3]]);
  expect((await w.ledger.listSteps(workflowId)).filter((s) => s.type.startsWith('action:'))).toEqual([]);
  const served = (await run.status()).sandbox?.workspacePath;
  if (served && existsSync(`${served}/.scripted/served.jsonl`)) expect(readFileSync(`${served}/.scripted/served.jsonl`, 'utf8').trim().split('\n')).toHaveLength(3);
});

it.each([
  ['signal', (run: Awaited<ReturnType<TestWorker['start']>>) => run.cancel('enough')],
  ['request', (run: Awaited<ReturnType<TestWorker['start']>>) => run.handle.cancel()],
])("a cancelled turn's tokens are in the run's result: cancelled mid-turn after two calls (%s: the run's cancel signal, or Temporal's cancel request alone)", async (how, cancel) => {
  // Two calls of 300 tokens, then the harness takes its time: the run is cancelled while it waits.
  const task = book.write(`cancelled-mid-turn-${how}`, [{ calls: [call(300), call(300), { usage: { input: 0, output: 0 }, sleepMs: 60_000 }] }, ok('never')]);
  const workflowId = testWorkflowId('cancelled-spend');
  const run = await w.start({ agent: 'crashy-rich', task, workflowId });
  await expect.poll(async () => (await w.ledger.runTotals(workflowId)).usage.input ?? 0, { timeout: 30_000, interval: 100 }).toBe(600);
  await cancel(run);
  const result = await run.result();
  expect(result).toMatchObject({ status: 'cancelled', usage: { input: 600, output: 0 } });
  expect(result.costUsd).toBeGreaterThan(0);
  expect((await w.ledger.runTotals(workflowId)).usage).toMatchObject({ input: 600 });
});

it("a run cancelled while its failed turn waits to be retried still counts what the failed attempt spent", async () => {
  // Attempt 1 spends 400 and crashes; Temporal waits 1 s before attempt 2, and the run is cancelled in that pause.
  const task = book.write('cancelled-in-backoff', [{ calls: [call(400, { exit: 1 })] }, ok('never')]);
  const workflowId = testWorkflowId('cancelled-backoff');
  const run = await w.start({ agent: 'crashy-rich', task, workflowId });
  await expect.poll(async () => (await w.ledger.listPromptRuns(workflowId)).map((r) => r.status), { timeout: 30_000, interval: 50 }).toEqual(['failed']);
  await run.cancel('enough');
  const result = await run.result();
  expect(result).toMatchObject({ status: 'cancelled', usage: { input: 400, output: 0 } });
  expect((await w.ledger.runTotals(workflowId)).usage).toMatchObject({ input: 400 });
});

it('usage that cannot be true (NaN, 1e308, fractional) is refused as unknown, never summed, and the run itself says costBlind', async () => {
  // Four calls served; the harness reports the first truly and lies about the other three.
  const lie = (report: string) => ({ usage: { input: 50, output: 5 }, report });
  const task = book.write('lying-usage', [
    { calls: [call(100), lie('{"type":"usage","input":NaN,"output":5}'), lie('{"type":"usage","input":1e308,"output":5}'), lie('{"type":"usage","input":2.5,"output":5}')], ...ok('spent') },
  ]);
  const workflowId = testWorkflowId('lying-usage');
  const run = await w.start({ agent: 'crashy-rich', task, workflowId });
  const result = await run.result();
  // Before: 1e308 made the run's tokens Infinity at $0.0000, and the NaN line was dropped with costBlind false.
  expect(result).toMatchObject({ status: 'succeeded', usage: { input: 100, output: 0 }, costBlind: true });
  expect(Number.isFinite(result.costUsd)).toBe(true);
  expect(await run.status()).toMatchObject({ costBlind: true, totalTokens: 100 });
  const totals = await w.ledger.runTotals(workflowId);
  expect(totals).toMatchObject({ usage: { input: 100, output: 0 }, calls: 4, costBlind: true, costSource: 'unknown' });
  const served = readFileSync(`${(await run.status()).sandbox?.workspacePath}/.scripted/served.jsonl`, 'utf8').trim().split('\n');
  expect(served).toHaveLength(4);
  const refused = (await w.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'activity' && JSON.stringify(e.data).includes('usage line refused'));
  expect(refused).toHaveLength(3);
});
