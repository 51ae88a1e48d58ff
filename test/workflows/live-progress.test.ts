/**
 * Live progress: while a turn runs, status() adds what its heartbeats say (tokens and cost so far, attempt, the
 * harness's last activity) although the run's own counters only move when the turn ends.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book, { agents: [{ name: 'retrying', harness: 'scripted', turnAttempts: 3 }] }) });
});
afterAll(() => w?.close());

it('status() shows the in-flight turn: tokens and cost so far, the last activity, the attempt', async () => {
  const task = book.write('live', [{ failTimes: 1, activity: 'reading the repo', usage: { input: 39_000, output: 380, costUsd: 0.0421 }, sleepMs: 60_000, ...ok() }]);
  const run = await w.start({ agent: 'retrying', task, workflowId: testWorkflowId('live') });
  // The first attempt fails; the second reports usage, then sleeps.
  await expect.poll(async () => (await run.status()).inFlight?.tokens, { timeout: 30_000, interval: 200 }).toBe(39_380);
  const status = await run.status();
  expect(status.totalTokens).toBe(0); // the run's own counters: the turn has not ended
  // The price table prices it ($1/M in, $2/M out), not the harness's own $0.0421 (one cost authority).
  expect(status.inFlight).toMatchObject({ turn: 1, attempt: 2, tokens: 39_380, lastEvent: 'sleeping' });
  expect(status.inFlight!.costUsd).toBeCloseTo(39_000 / 1e6 + (380 * 2) / 1e6, 8);
  expect(Date.parse(status.inFlight!.lastHeartbeat!)).toBeGreaterThan(Date.now() - 30_000);
  expect((await run.status({ live: false })).inFlight).toBeUndefined();
  await run.cancel('seen enough');
  expect(await run.result()).toMatchObject({ status: 'cancelled' });
});
