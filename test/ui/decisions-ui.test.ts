/**
 * Deciding from the Temporal Web UI, in a real headless Chromium (issue 19): in a trusted-network deployment the
 * UI's own "Send an Update" approves with a single JSON payload, recorded as unauthenticated; in a signed
 * deployment the same click is refused, the UI shows why and how to sign, and the request stays pending.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AgentRunHandle } from '../../src/client/index.js';
import { parseOperators } from '../../src/operators/index.js';
import { launchBrowser } from '../support/browser.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const catalog = scriptedCatalog(book, { agents: [{ name: 'guarded', harness: 'scripted', actions: ['echo'], permissions: { posture: 'strict', approvalTimeoutMs: 600_000 }, sandbox: { provider: 'local', networkPolicy: 'none' } }] });
let trusted: TestWorker;
let signed: TestWorker;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  [trusted, signed] = await Promise.all([
    startTestWorker({ catalog, decisions: 'trusted-network' }),
    startTestWorker({ catalog, decisions: 'signed', operators: parseOperators('operators: []', 'none') }),
  ]);
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await Promise.all([trusted?.close(), signed?.close()]);
});

const touch = { tool: 'Bash', kind: 'command', input: { command: 'touch ui.txt' }, title: 'touch ui.txt' };

async function askingRun(w: TestWorker, name: string): Promise<{ run: AgentRunHandle; requestId: string }> {
  const run = await w.start({ agent: 'guarded', task: book.write(name, [{ permissions: [touch], ...ok(`${name} done`) }]), workflowId: testWorkflowId(name) });
  await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: 30_000, interval: 200 }).toBe(1);
  return { run, requestId: (await run.status()).pendingApprovals![0]!.requestId };
}

/** Sends an update from the run's page as an operator would: More Actions → Send an Update → name → data → Submit. */
async function sendUpdate(run: AgentRunHandle, name: string, data: unknown): Promise<void> {
  await page.goto(`${inject('temporalUiUrl')}/namespaces/default/workflows/${encodeURIComponent(run.workflowId)}`, { waitUntil: 'domcontentloaded' });
  await page.getByRole('heading', { name: run.workflowId }).waitFor();
  await page.getByRole('button', { name: 'More Actions' }).click();
  await page.getByRole('menuitem', { name: 'Send an Update' }).click();
  const modal = '#modal-content-update-confirmation-modal';
  await page.locator(`${modal} label[for="update-select"] + button:visible`).click();
  // The picker lists the run's updates with their descriptions: what each takes is there.
  const option = page.locator('li[role=option]:visible').filter({ has: page.locator(`span:text-is("${name}")`) });
  expect(await option.innerText()).toMatch(/signed by `durable-harness/);
  await option.click();
  await page.locator(`${modal} [role=textbox][aria-label=Data]:visible`).click();
  await page.keyboard.type(JSON.stringify(data));
  await page.keyboard.press('Tab'); // the editor hands its text to the form when it loses focus
  await page.locator('button:visible', { hasText: 'Submit' }).click();
}

describe('deciding from the Temporal UI', () => {
  it('trusted-network: the UI approves with a single payload, recorded as unauthenticated', async () => {
    const { run, requestId } = await askingRun(trusted, 'ui-trusted');
    await sendUpdate(run, 'approve', { requestId, by: 'ui-operator' });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'ui-trusted done' });
    expect(await trusted.ledger.getApproval(run.workflowId, requestId)).toMatchObject({ status: 'allowed', decidedBy: 'unauthenticated:ui-operator' });
  });

  it('signed: the same click is refused, the UI says how to sign, and the request stays pending', async () => {
    const { run, requestId } = await askingRun(signed, 'ui-signed');
    await sendUpdate(run, 'approve', { requestId, by: 'security-officer', scope: 'session' });
    // The refusal shows as a toast, outside the page's <main>: read the whole body.
    await expect.poll(() => page.locator('body').innerText(), { timeout: 20_000 }).toMatch(/accepts only signed operator decisions.*--key FILE/s);
    expect((await run.status()).pendingApprovals!.map((p) => p.requestId)).toEqual([requestId]);
    expect(await signed.ledger.getApproval(run.workflowId, requestId)).toMatchObject({ status: 'pending' });
    await run.cancel('test done').catch(() => undefined);
  });
});
