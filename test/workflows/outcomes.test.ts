/**
 * Outcomes in Temporal's own terms (docs/OUTCOMES.md): a failed or stopped run is a Failed workflow, a cancelled one
 * Canceled, with DurableHarnessStatus right on every path — and the typed result still reaches clients.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunRejectedError } from '../../src/client/index.js';
import { cancelSignal } from '../../src/workflows/messages.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agent: { subAgents: ['helper'] },
      agents: [
        { name: 'helper', harness: 'scripted', actions: ['echo'] },
        { name: 'few-turns', harness: 'scripted', actions: ['echo'], guardrails: { maxIterations: 1 } },
        { name: 'patient', harness: 'scripted', turnAttempts: 1, operatorTimeoutMs: 60_000 },
        { name: 'ungranted', harness: 'scripted', credentials: [{ env: 'SCRIPTED_API_KEY', from: 'NOT_SET_ANYWHERE' }] },
      ],
    }),
  });
});
afterAll(() => w?.close());

/** How Temporal itself closed the run, and the failure a plain Temporal client sees. */
async function closed(workflowId: string) {
  const handle = w.client.workflow.getHandle(workflowId);
  const failure = await handle.result().then(
    () => undefined,
    (e: unknown) => e,
  );
  const description = await handle.describe();
  return { temporal: description.status.name, status: description.searchAttributes.DurableHarnessStatus?.[0], failure, memo: description.memo };
}

describe('a failed run', () => {
  it('is a Failed workflow whose ApplicationFailure has the failure type and the typed result; result() still returns it', async () => {
    const workflowId = testWorkflowId('outcome-failed');
    const run = await w.start({ agent: 'scripted', task: book.write('gives-up', [{ envelope: { step: 'failed', reason: 'cannot do it' } }]), workflowId });
    expect(await run.result()).toMatchObject({ workflowId, status: 'failed', failureType: 'HarnessReportedFailure', reason: 'cannot do it', iterations: 1 });
    const end = await closed(workflowId);
    expect(end).toMatchObject({ temporal: 'FAILED', status: 'failed' });
    expect(end.failure).toBeInstanceOf(WorkflowFailedError);
    const cause = (end.failure as WorkflowFailedError).cause;
    expect(cause).toBeInstanceOf(ApplicationFailure);
    expect(cause).toMatchObject({ type: 'HarnessReportedFailure', message: 'cannot do it', nonRetryable: true });
    expect((cause as ApplicationFailure).details?.[0]).toMatchObject({ status: 'failed', failureType: 'HarnessReportedFailure' });
  });

  it('an unknown agent fails with DurableHarnessStatus failed, not starting', async () => {
    const workflowId = testWorkflowId('outcome-unknown');
    const run = await w.start({ agent: 'nobody-by-that-name', task: 'x', workflowId });
    expect(await run.result()).toMatchObject({ status: 'failed', failureType: 'UnknownAgent' });
    const end = await closed(workflowId);
    expect(end).toMatchObject({ temporal: 'FAILED', status: 'failed' });
    expect((end.failure as WorkflowFailedError).cause).toMatchObject({ type: 'UnknownAgent' });
  });

  it('a missing credential fails at resolution with DurableHarnessStatus failed', async () => {
    const workflowId = testWorkflowId('outcome-credential');
    const run = await w.start({ agent: 'ungranted', task: book.write('never', [ok()]), workflowId });
    expect(await run.result()).toMatchObject({ status: 'failed', failureType: 'CredentialMissing' });
    expect(await closed(workflowId)).toMatchObject({ temporal: 'FAILED', status: 'failed' });
  });
});

describe('a guardrail stop', () => {
  it('is a Failed workflow of type GuardrailStopped; result() says stopped and names the guardrail', async () => {
    const workflowId = testWorkflowId('outcome-stopped');
    const run = await w.start({ agent: 'few-turns', task: book.write('loops', [act({ name: 'echo', params: { text: 'again' } }), ok()]), workflowId });
    expect(await run.result()).toMatchObject({ status: 'stopped', guardrail: 'iterations' });
    const end = await closed(workflowId);
    expect(end).toMatchObject({ temporal: 'FAILED', status: 'stopped' });
    expect((end.failure as WorkflowFailedError).cause).toMatchObject({ type: 'GuardrailStopped', message: expect.stringMatching(/iteration limit reached/) });
  });

  it("a sub-agent's failure reaches its parent as a typed result through the failure details", async () => {
    const workflowId = testWorkflowId('outcome-parent');
    const task = book.write('parent-of-failure', [{ envelope: { step: 'sub-agent', agent: 'helper', message: 'script:child-fails', terminateAfter: true } }]);
    book.write('child-fails', [{ usage: { input: 7, output: 3 }, envelope: { step: 'failed', reason: 'child gave up' } }]);
    const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
    // Without the details the parent would only know "sub-agent failed" (SubAgentFailed) and none of the usage.
    expect(result).toMatchObject({ status: 'failed', failureType: 'HarnessReportedFailure', reason: 'child gave up', usage: { input: 7, output: 3 } });
    expect((await closed(`${workflowId}.sub-1`)).temporal).toBe('FAILED');
  });
});

describe('a cancelled run', () => {
  it('is a Canceled workflow; result() returns the typed result with the reason', async () => {
    const workflowId = testWorkflowId('outcome-cancelled');
    const run = await w.start({ agent: 'scripted', task: book.write('sleeps', [{ sleepMs: 60_000, ...ok() }]), workflowId });
    await expect.poll(async () => (await run.status()).state, { timeout: 15_000 }).toBe('running');
    await run.cancel('changed my mind');
    expect(await run.result()).toMatchObject({ workflowId, status: 'cancelled', reason: 'changed my mind' });
    const end = await closed(workflowId);
    expect(end).toMatchObject({ temporal: 'CANCELLED', status: 'cancelled' });
    expect((end.failure as WorkflowFailedError).cause).toBeInstanceOf(CancelledFailure);
    expect(end.memo?.durableHarnessResult).toMatchObject({ status: 'cancelled', reason: 'changed my mind' });
  });

  it('the cancel signal alone (no cancel request) ends Failed with type Cancelled, after a short grace', async () => {
    const workflowId = testWorkflowId('outcome-signal');
    const run = await w.start({ agent: 'scripted', task: book.write('waits', [{ envelope: { step: 'chat', message: 'well?' } }]), workflowId });
    await expect.poll(async () => (await run.status()).state, { timeout: 15_000 }).toBe('waiting_for_reply');
    await run.handle.signal(cancelSignal, 'bare signal');
    expect(await run.result()).toMatchObject({ status: 'cancelled', reason: 'bare signal' });
    const end = await closed(workflowId);
    expect(end).toMatchObject({ temporal: 'FAILED', status: 'cancelled' });
    expect((end.failure as WorkflowFailedError).cause).toMatchObject({ type: 'Cancelled' });
  }, 40_000);
});

describe('abandon', () => {
  it('is rejected with the reason while the run is not awaiting an operator, and changes nothing', async () => {
    const run = await w.start({ agent: 'patient', task: book.write('asks', [{ envelope: { step: 'chat', message: 'which?' } }, ok('went on')]) });
    await expect.poll(async () => (await run.status()).state, { timeout: 15_000 }).toBe('waiting_for_reply');
    const rejected = await run.abandon('no').catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(RunRejectedError);
    expect((rejected as Error).message).toBe('run is waiting_for_reply, not awaiting_operator: nothing to abandon (to stop it, cancel it)');
    await run.reply('that one');
    expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'went on' });
  });

  it('is accepted by update when the run awaits an operator, and the run ends Failed (Abandoned)', async () => {
    const workflowId = testWorkflowId('outcome-abandon');
    const run = await w.start({ agent: 'patient', task: book.write('broken', [{ failTimes: 99, ...ok() }]), workflowId });
    await expect.poll(async () => (await run.status()).state, { timeout: 30_000, interval: 100 }).toBe('awaiting_operator');
    expect(await run.abandon('not worth it')).toBe('abandoned: the run ends as failed');
    expect(await run.result()).toMatchObject({ status: 'failed', failureType: 'Abandoned' });
    expect(await closed(workflowId)).toMatchObject({ temporal: 'FAILED', status: 'failed' });
  });
});
