/**
 * A run Temporal terminated never ran its endSession: a worker closes its ledger row at start (issue 8) and, while it
 * runs, every minute (issue 18).
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { reconcileClosedRuns } from '../../src/temporal/reconcile-runs.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book) });
});
afterAll(() => w?.close());

it('a terminated run is closed in the ledger as terminated, once; finished and running runs are left alone', async () => {
  const done = testWorkflowId('reconcile-done');
  await (await w.start({ agent: 'scripted', task: book.write('reconcile-done', [ok('done')]), workflowId: done })).result();
  const running = testWorkflowId('reconcile-running');
  await w.start({ agent: 'scripted', task: book.write('reconcile-running', [{ sleepMs: 60_000, ...ok() }]), workflowId: running });
  const killed = testWorkflowId('reconcile-killed');
  await w.start({ agent: 'scripted', task: book.write('reconcile-killed', [{ sleepMs: 60_000, ...ok() }]), workflowId: killed });
  await expect.poll(async () => (await w.ledger.getRun(killed))?.status, { timeout: 20_000 }).toBe('running');
  await expect.poll(async () => (await w.ledger.getRun(running))?.status, { timeout: 20_000 }).toBe('running');
  await w.client.workflow.getHandle(killed).terminate('operator pulled the plug');
  // Before: the row stayed "running" for ever.
  expect((await w.ledger.getRun(killed))?.status).toBe('running');

  const closed = await reconcileClosedRuns(w.ledger, w.client);
  expect(closed).toContainEqual({ workflowId: killed, status: 'terminated' });
  expect(closed.map((c) => c.workflowId)).not.toContain(running);
  const row = await w.ledger.getRun(killed);
  expect(row).toMatchObject({ status: 'terminated' });
  expect(row?.finishedAt).toBeDefined();
  expect((await w.ledger.getRun(running))?.status).toBe('running');
  expect((await w.ledger.getRun(done))?.status).toBe('succeeded');
  // Idempotent: a second worker start closes nothing again.
  expect((await reconcileClosedRuns(w.ledger, w.client)).map((c) => c.workflowId)).not.toContain(killed);
  expect((await w.ledger.readEvents(killed, 0, 1000)).filter((e) => e.type === 'end')).toHaveLength(1);
  await w.client.workflow.getHandle(running).terminate('test over');
});

it('a running worker closes a run terminated while it runs, without a restart, and frees its shared workspace', { timeout: 60_000 }, async () => {
  const periodic = await startTestWorker({
    catalog: scriptedCatalog(book, { agents: [{ name: 'sharing', harness: 'scripted', sandbox: { provider: 'local', workspaceScope: 'agent-user' } }] }),
    reconcileIntervalMs: 500,
  });
  try {
    const killed = testWorkflowId('reconcile-live');
    await periodic.start({ agent: 'sharing', task: book.write('reconcile-live', [{ sleepMs: 60_000, ...ok() }]), workflowId: killed });
    await expect.poll(async () => (await periodic.ledger.getRun(killed))?.status, { timeout: 20_000 }).toBe('running');
    await periodic.client.workflow.getHandle(killed).terminate('operator pulled the plug');
    const t0 = Date.now();
    await expect.poll(async () => (await periodic.ledger.getRun(killed))?.status, { timeout: 20_000, interval: 100 }).toBe('terminated');
    console.log(`[reconcile] terminated run closed in the ledger ${Date.now() - t0} ms after the terminate (interval 500 ms)`);
    const [end] = (await periodic.ledger.readEvents(killed, 0, 1000)).filter((e) => e.type === 'end');
    expect(end?.data).toMatchObject({ status: 'terminated', reason: expect.stringMatching(/reconciliation/) });
    // Its claim on the shared workspace went with it: the next run of that user starts at once.
    const next = await periodic.start({ agent: 'sharing', task: book.write('reconcile-next', [ok('next')]), workflowId: testWorkflowId('reconcile-next') });
    expect(await next.result()).toMatchObject({ status: 'succeeded', result: 'next' });
    expect((await periodic.ledger.readEvents(next.workflowId, 0, 1000)).filter((e) => e.type === 'workspace-wait')).toEqual([]);
  } finally {
    await periodic.close();
  }
});
