/** Guardrails are workflow state: crossing one stops the run with the guardrail named. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import { processAlive, scriptedSleepPids } from '../support/processes.js';

const book = scriptBook();
let w: TestWorker;
const echo = act({ name: 'echo', params: { text: 'again' } });

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agents: [
        { name: 'few-turns', harness: 'scripted', actions: ['echo'], guardrails: { maxIterations: 2 } },
        { name: 'few-tokens', harness: 'scripted', actions: ['echo'], guardrails: { maxTokens: 1000 } },
        { name: 'cheap', harness: 'scripted', actions: ['echo'], guardrails: { maxCostUsd: 0.5 } },
        { name: 'hasty', harness: 'scripted', actions: ['echo'], guardrails: { maxWallTimeMs: 2500 } },
      ],
    }),
  });
});
afterAll(() => w?.close());

it('stops at the iteration limit', async () => {
  const task = book.write('loop', [echo, echo, echo, ok()]);
  const result = await (await w.start({ agent: 'few-turns', task })).result();
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'iterations', iterations: 2 });
  expect(result.reason).toMatch(/iteration limit reached: 2 of 2/);
});

it('stops when the token budget is spent, counting cache reads and writes', async () => {
  const task = book.write('tokens', [
    { usage: { input: 100, output: 100, cacheRead: 300, cacheWrite: 0 }, ...echo },
    { usage: { input: 100, output: 100, cacheRead: 300, cacheWrite: 50 }, ...echo },
    ok(),
  ]);
  const workflowId = testWorkflowId('tokens');
  const result = await (await w.start({ agent: 'few-tokens', task, workflowId })).result();
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'tokens', iterations: 2, usage: { input: 200, output: 200, cacheRead: 600, cacheWrite: 50 } });
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows[1]!.usage).toEqual({ input: 100, output: 100, cacheRead: 300, cacheWrite: 50 });
});

it('stops when the cost budget is spent; the price table prices the turns, the harness figure is kept beside it', async () => {
  // $1/M input, $2/M output: 100k in + 100k out = $0.30 per turn. The harness claims $0.90 per turn.
  const turn = { usage: { input: 100_000, output: 100_000, costUsd: 0.9 }, ...echo };
  const task = book.write('cost', [turn, turn, turn, ok()]);
  const workflowId = testWorkflowId('cost');
  const result = await (await w.start({ agent: 'cheap', task, workflowId })).result();
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'cost', iterations: 2 });
  expect(result.costUsd).toBeCloseTo(0.6, 6);
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows.map((r) => [r.costSource, r.costUsd, r.harnessCostUsd, r.costMismatch])).toEqual([
    ['price-table', 0.3, 0.9, true],
    ['price-table', 0.3, 0.9, true],
  ]);
  expect(await w.ledger.runTotals(workflowId)).toMatchObject({ costUsd: 0.6, harnessCostUsd: 1.8, costMismatch: true, costSource: 'price-table' });
});

it('prices turns from the table when the harness reports no cost', async () => {
  const task = book.write('priced', [{ usage: { input: 1_000_000, output: 500_000, cacheRead: 2_000_000 }, ...ok() }]);
  const workflowId = testWorkflowId('priced');
  const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
  // input $1/M, output $2/M, cache read $0.5/M
  expect(result.costUsd).toBeCloseTo(1 + 1 + 1, 6);
  expect((await w.ledger.listPromptRuns(workflowId))[0]!.costSource).toBe('price-table');
});

it('stops at the wall-time limit, killing the in-flight turn and still ending the session', async () => {
  const task = book.write('slow', [{ sleepMs: 60_000, ...ok() }]);
  const workflowId = testWorkflowId('wall');
  const started = Date.now();
  const run = await w.start({ agent: 'hasty', task, workflowId });
  const workspace = path.join(w.dataDir, 'workspaces', 'runs', workflowId);
  await expect.poll(() => existsSync(path.join(workspace, '.scripted', 'child.pid')), { timeout: 15_000, interval: 20 }).toBe(true);
  const pids = await scriptedSleepPids(workspace);
  const result = await run.result();
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'wallTime' });
  expect(Date.now() - started).toBeLessThan(10_000);
  for (const pid of pids) expect(processAlive(pid)).toBe(false);
  const ends = (await w.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'end');
  expect(ends).toHaveLength(1);
  expect((await w.ledger.getRun(workflowId))?.status).toBe('stopped');
});
