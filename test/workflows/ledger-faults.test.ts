/** Ledger faults lose nothing, through a whole run on the real dev server: the run waits for the ledger. */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book) });
});
afterAll(() => w?.close());

it('a ledger that is read-only when the run starts and during its turns: the run waits, then every row lands', async () => {
  const echo = act({ name: 'echo', params: { text: 'x' } });
  const task = book.write('readonly-run', [{ calls: [{ usage: { input: 100, output: 10 } }, { usage: { input: 200, output: 20 } }], ...echo }, { usage: { input: 50, output: 5 }, ...ok('done anyway') }]);
  const workflowId = testWorkflowId('readonly-run');
  w.ledger.setReadOnly(true);
  const run = await w.start({ agent: 'scripted', task, workflowId });
  await new Promise((r) => setTimeout(r, 3000));
  expect(['starting', 'running']).toContain((await run.status()).state);
  w.ledger.setReadOnly(false);
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'done anyway', usage: { input: 350, output: 35 } });
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows.map((r) => [r.turn, r.status, r.calls])).toEqual([
    [1, 'succeeded', 2],
    [2, 'succeeded', 1],
  ]);
  expect((await w.ledger.runTotals(workflowId)).usage).toEqual({ input: 350, output: 35 });
  expect((await w.ledger.listSteps(workflowId)).map((s) => s.type)).toEqual(['step:actions', 'action:echo', 'step:success']);
  expect((await w.ledger.getRun(workflowId))?.status).toBe('succeeded');
});
