/**
 * What an operator sees in the Temporal Web UI (served by the dev server), in a real headless Chromium: the run's
 * status as a search attribute and a filter, its summary, its current details and the turn's activity summary —
 * for a running run and for one awaiting an operator.
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

const workflowPage = (id: string) => `${inject('temporalUiUrl')}/namespaces/default/workflows/${encodeURIComponent(id)}`;

/** Polls `check` (errors count as not yet) until it holds; for setup, where expect.poll is not available. */
async function until(check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`not reached within ${timeoutMs} ms: ${check.toString()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function openTab(name: string): Promise<void> {
  await page.getByRole('tab', { name, exact: true }).click();
}

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book, { agents: [{ name: 'fragile', harness: 'scripted', turnAttempts: 1, operatorTimeoutMs: 600_000 }] }) });
  const identity = { tenantId: tenant, userId: 'operator' };
  running = await w.start({
    agent: 'scripted',
    task: book.write('ui-running', [
      { usage: { input: 25_000, output: 1_000 }, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'hi' } }] } },
      { activity: 'reading files', sleepMs: 120_000, ...ok() },
    ]),
    identity,
    workflowId: testWorkflowId('ui-running'),
  });
  awaiting = await w.start({ agent: 'fragile', task: book.write('ui-awaiting', [{ failTimes: 5, ...ok() }]), identity, workflowId: testWorkflowId('ui-awaiting') });
  await until(async () => (await running.status()).iteration === 2);
  await until(async () => (await awaiting.status()).state === 'awaiting_operator');
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await Promise.all([running?.cancel('test done'), awaiting?.cancel('test done')].map((p) => p?.catch(() => undefined)));
  await w?.close();
});

describe('the Temporal Web UI', () => {
  it('a running run: RUNNING, DurableHarnessStatus running, its summary, current details and the turn in progress', async () => {
    await page.goto(workflowPage(running.workflowId), { waitUntil: 'domcontentloaded' });
    await page.getByRole('heading', { name: running.workflowId }).waitFor();
    await waitForText(page, 'RUNNING');
    // The timeline names the turn activity by its summary.
    await waitForText(page, /runTurn • turn 2 · scripted/);

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
    await page.goto(workflowPage(awaiting.workflowId), { waitUntil: 'domcontentloaded' });
    await page.getByRole('heading', { name: awaiting.workflowId }).waitFor();

    await openTab('Search Attributes');
    await waitForText(page, '"DurableHarnessStatus": "awaiting_operator"');

    await openTab('User Metadata');
    await waitForText(page, 'fragile: do the scripted thing script:ui-awaiting');
    await waitForText(page, /awaiting_operator · turn 1 failed after 1 attempts: turn failed \(process-exit\)/);

    // The operator's way to find runs that need them: filter the list by the run's own status.
    const query = `DurableHarnessStatus="awaiting_operator" AND DurableHarnessTenant="${tenant}"`;
    await page.goto(`${inject('temporalUiUrl')}/namespaces/default/workflows?query=${encodeURIComponent(query)}`, { waitUntil: 'domcontentloaded' });
    const list = await waitForText(page, awaiting.workflowId);
    expect(list).not.toContain(running.workflowId);
  });
});
