/**
 * What an operator sees in the Temporal Web UI (served by the dev server), in a real headless Chromium: the run's
 * status as a search attribute and a filter, its summary, its current details and the turn's activity summary —
 * for a running run, one awaiting an operator, a failed one, a cancelled one (docs/OUTCOMES.md) and one whose tool waits
 * for an operator's approval (docs/permissions.md).
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AgentRunHandle } from '../../src/client/index.js';
import { launchBrowser, waitForText } from '../support/browser.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const tenant = `ui-${Date.now().toString(36)}`;
let w: TestWorker;
let browser: Browser;
let page: Page;
let running: AgentRunHandle;
let awaiting: AgentRunHandle;
let failed: AgentRunHandle;
let cancelled: AgentRunHandle;
let asking: AgentRunHandle;

const workflowPage = (id: string) => `${inject('temporalUiUrl')}/namespaces/default/workflows/${encodeURIComponent(id)}`;

/** Polls `check` (errors count as not yet) until it holds; for setup, where expect.poll is not available. */
async function until(check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`not reached within ${timeoutMs} ms: ${check.toString()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Opens the run's page in the UI. */
async function openRun(run: AgentRunHandle): Promise<void> {
  await page.goto(workflowPage(run.workflowId), { waitUntil: 'domcontentloaded' });
  await page.getByRole('heading', { name: run.workflowId }).waitFor();
}

/** The workflow list filtered by `query` (this test's tenant only), once it shows `run`: its text. */
async function listFinding(query: string, run: AgentRunHandle): Promise<string> {
  const scoped = `${query} AND DurableHarnessTenant="${tenant}"`;
  await page.goto(`${inject('temporalUiUrl')}/namespaces/default/workflows?query=${encodeURIComponent(scoped)}`, { waitUntil: 'domcontentloaded' });
  return waitForText(page, run.workflowId);
}

async function openTab(name: string): Promise<void> {
  await page.getByRole('tab', { name, exact: true }).click();
}

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agents: [
        { name: 'fragile', harness: 'scripted', turnAttempts: 1, operatorTimeoutMs: 600_000 },
        { name: 'guarded', harness: 'scripted', actions: ['echo'], permissions: { posture: 'strict', approvalTimeoutMs: 600_000 } },
      ],
    }),
  });
  const identity = { tenantId: tenant, userId: 'operator' };
  running = await w.start({
    agent: 'scripted',
    task: book.write('ui-running', [
      { usage: { input: 25_000, output: 1_000 }, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'hi' } }] } },
      { activity: 'reading files', usage: { input: 39_000, output: 380 }, sleepMs: 120_000, ...ok() },
    ]),
    identity,
    workflowId: testWorkflowId('ui-running'),
  });
  awaiting = await w.start({ agent: 'fragile', task: book.write('ui-awaiting', [{ failTimes: 5, ...ok() }]), identity, workflowId: testWorkflowId('ui-awaiting') });
  failed = await w.start({ agent: 'scripted', task: book.write('ui-failed', [{ envelope: { step: 'failed', reason: 'the tests are red' } }]), identity, workflowId: testWorkflowId('ui-failed') });
  cancelled = await w.start({ agent: 'scripted', task: book.write('ui-cancelled', [{ sleepMs: 120_000, ...ok() }]), identity, workflowId: testWorkflowId('ui-cancelled') });
  const touch = { tool: 'Bash', kind: 'command', input: { command: 'touch ui.txt' }, title: 'touch ui.txt' };
  asking = await w.start({ agent: 'guarded', task: book.write('ui-asking', [{ permissions: [touch], ...ok() }]), identity, workflowId: testWorkflowId('ui-asking') });
  await until(async () => (await running.status()).iteration === 2);
  await until(async () => (await awaiting.status()).state === 'awaiting_operator');
  await until(async () => (await cancelled.status()).state === 'running');
  await until(async () => ((await asking.status()).pendingApprovals?.length ?? 0) === 1);
  await cancelled.cancel('no longer needed');
  await Promise.all([failed.result(), cancelled.result()]);
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await Promise.all([running?.cancel('test done'), awaiting?.cancel('test done'), asking?.cancel('test done')].map((p) => p?.catch(() => undefined)));
  await w?.close();
});

describe('the Temporal Web UI', () => {
  it('a running run: RUNNING, DurableHarnessStatus running, its summary, current details and the turn in progress', async () => {
    await openRun(running);
    await waitForText(page, 'RUNNING');
    // The timeline names the turn activity by its summary.
    await waitForText(page, /runTurn • turn 2 · scripted/);
    // The turn in flight, live from its heartbeats: its tokens before the turn ends, and what the harness does.
    await page.getByRole('tab', { name: /^Pending Activities/ }).click();
    const pending = await waitForText(page, /"tokens":\s*39380/);
    expect(pending).toMatch(/"lastEvent":\s*"sleeping"/);

    await openTab('Search Attributes');
    const attributes = await waitForText(page, '"DurableHarnessStatus": "running"');
    expect(attributes).toContain('"DurableHarnessAgent": "scripted"');
    expect(attributes).toContain(`"DurableHarnessTenant": "${tenant}"`);
    // The cost attribute follows the run by the cent (each upsert is a history event): turn 1 cost $0.027.
    expect(attributes).toMatch(/"DurableHarnessCostUsd": 0\.027\b/);

    await openTab('User Metadata');
    await waitForText(page, 'scripted: do the scripted thing script:ui-running');
    await waitForText(page, /running · turn 2 · scripted/);
  });

  it('a run awaiting an operator: DurableHarnessStatus awaiting_operator, current details with the failure, found by a status filter', async () => {
    await openRun(awaiting);

    await openTab('Search Attributes');
    await waitForText(page, '"DurableHarnessStatus": "awaiting_operator"');

    await openTab('User Metadata');
    await waitForText(page, 'fragile: do the scripted thing script:ui-awaiting');
    await waitForText(page, /awaiting_operator · turn 1 failed after 1 attempts: turn failed \(process-exit\)/);

    // The operator's way to find runs that need them: filter the list by the run's own status.
    const list = await listFinding(`DurableHarnessStatus="awaiting_operator"`, awaiting);
    expect(list).not.toContain(running.workflowId);
  });

  it('a failed run: FAILED, the failure with its type and message, DurableHarnessStatus failed, found by the Failed filter', async () => {
    await openRun(failed);
    await waitForText(page, 'FAILED');
    const failure = await waitForText(page, 'the tests are red');
    expect(failure).toContain('HarnessReportedFailure');

    await openTab('Search Attributes');
    await waitForText(page, '"DurableHarnessStatus": "failed"');

    // Temporal's own status filter finds it (a failed run used to be a green Completed one).
    const list = await listFinding(`ExecutionStatus="Failed"`, failed);
    expect(list).not.toContain(cancelled.workflowId);
    expect(list).not.toContain(awaiting.workflowId);
  });

  it('a run whose tool waits for approval: the request in current details, DurableHarnessPendingApprovals, found by a filter', async () => {
    const [request] = (await asking.status()).pendingApprovals!;
    await openRun(asking);
    await waitForText(page, 'RUNNING');

    await openTab('Search Attributes');
    await waitForText(page, '"DurableHarnessPendingApprovals": 1');

    await openTab('User Metadata');
    await waitForText(page, '1 permission request waiting');
    const details = await waitForText(page, request!.requestId);
    expect(details).toMatch(/command · Bash: touch ui\.txt/);

    // The operator's way to find every run waiting for a decision.
    const list = await listFinding(`DurableHarnessPendingApprovals > 0`, asking);
    expect(list).not.toContain(running.workflowId);
    expect(list).not.toContain(awaiting.workflowId);
  });

  it('a cancelled run: CANCELED, DurableHarnessStatus cancelled, its current details with the reason', async () => {
    await openRun(cancelled);
    await waitForText(page, 'CANCELED');

    await openTab('Search Attributes');
    await waitForText(page, '"DurableHarnessStatus": "cancelled"');

    await openTab('User Metadata');
    await waitForText(page, /cancelled · no longer needed/);
  });
});
