/**
 * Pending permission requests at the workflow level, on a real Temporal dev server with the scripted stdio-JSON
 * harness asking before it runs a shell command: the run shows the request (status query, current details, the
 * DurableHarnessPendingApprovals search attribute), `approve`/`deny` updates decide it (an unknown or already
 * decided request is rejected with a reason), and the approved command really runs — the denied one does not.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunRejectedError, type AgentRunHandle } from '../../src/client/index.js';
import { pendingApprovalsAttribute } from '../../src/workflows/search-attributes.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const agent = (name: string, approvalTimeoutMs: number) => ({
  name,
  harness: 'scripted',
  systemPrompt: 'You follow scripts.',
  actions: ['echo'],
  guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 300_000 },
  permissions: { posture: 'strict', approvalTimeoutMs },
});
const catalog = scriptedCatalog(book, { agents: [agent('guarded', 120_000), agent('hasty', 1500)] });
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog });
});
afterAll(() => w?.close());

const touch = (file: string, editable = false) => ({ tool: 'Bash', kind: 'command', input: { command: `touch ${file}` }, title: `touch ${file}`, ...(editable ? { editable } : {}) });

async function pendingOf(run: AgentRunHandle) {
  await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: 20_000, interval: 100 }).toBe(1);
  return (await run.status()).pendingApprovals![0]!;
}

const attribute = async (run: AgentRunHandle) => (await run.handle.describe()).typedSearchAttributes.get(pendingApprovalsAttribute);
const details = async (run: AgentRunHandle) => (await run.handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';

describe('pending approvals', () => {
  it('are shown in status, details and a search attribute; approve runs the command; a second decision is refused', async () => {
    // The approved command takes a second, so the run is still there for the second decision: an approval now reaches
    // the harness at once, and a run that ended aborts any update still on its way.
    const task = book.write('approve-one', [{ permissions: [{ ...touch('approved.txt'), input: { command: 'touch approved.txt; sleep 1' } }], ...ok('after the approval') }]);
    const run = await w.start({ agent: 'guarded', task, workflowId: testWorkflowId('approve-one') });
    const pending = await pendingOf(run);
    expect(pending).toMatchObject({ turn: 1, tool: 'Bash', kind: 'command', title: 'touch approved.txt' });
    // The view's timeout is the row's expires_at − requested_at: the ledger stamps requested_at itself, a moment (a
    // millisecond, more on another host's clock) after the turn computed expires_at from the agent's 120 s.
    expect(pending.timeoutMs).toBeGreaterThan(119_000);
    expect(pending.timeoutMs).toBeLessThanOrEqual(120_000);
    expect(pending.requestId).toMatch(/^t1-[0-9a-f]{10}$/);
    expect(Math.abs(Date.parse(pending.since) - Date.now())).toBeLessThan(60_000);
    await expect.poll(() => attribute(run), { timeout: 10_000, interval: 100 }).toBe(1);
    expect(await details(run)).toContain(`\`${pending.requestId}\``);
    expect(await details(run)).toMatch(/1 permission request waiting/);

    // Nothing ran before the decision.
    const workspace = (await run.status()).sandbox!.hostWorkspacePath;
    expect(existsSync(path.join(workspace, 'approved.txt'))).toBe(false);

    await expect(run.approve('t1-0000000000')).rejects.toThrow(RunRejectedError);
    await expect(run.approve('t1-0000000000')).rejects.toThrow(/no pending permission request "t1-0000000000" \(pending: t1-/);
    await expect(run.approve(pending.requestId, { by: 'alice' })).resolves.toMatchObject({ requestId: pending.requestId, status: 'allowed', decidedBy: 'unauthenticated:alice' });
    await expect(run.deny(pending.requestId, { reason: 'too late' })).rejects.toThrow(/already allowed \(by unauthenticated:alice\)/);

    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'after the approval' });
    expect(existsSync(path.join(workspace, 'approved.txt'))).toBe(true);
    expect(await attribute(run)).toBe(0);
    expect((await run.status()).pendingApprovals).toEqual([]);
    expect(await w.ledger.getApproval(run.workflowId, pending.requestId)).toMatchObject({ status: 'allowed', decidedBy: 'unauthenticated:alice' });

    // The turn's Temporal timeout covers the harness's turn (60 s) and the approval waits (3 × 120 s), plus a minute.
    const history = await run.handle.fetchHistory();
    const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn')!.activityTaskScheduledEventAttributes!;
    expect(Number(scheduled.startToCloseTimeout!.seconds)).toBe(60 + 3 * 120 + 60);
  });

  it('deny keeps the command from running and tells the harness why; an edit runs the edited command instead', async () => {
    const task = book.write('deny-and-edit', [{ permissions: [touch('denied.txt'), touch('asked.txt', true)], ...ok('decided') }]);
    const run = await w.start({ agent: 'guarded', task, workflowId: testWorkflowId('deny-and-edit') });
    const first = await pendingOf(run);
    await expect(run.approve(first.requestId, { edit: ['not', 'an', 'object'] as never })).rejects.toThrow(/must be a JSON object/);
    await expect(run.deny(first.requestId, { reason: 'not in this workspace', by: 'bob' })).resolves.toMatchObject({ status: 'denied', decidedBy: 'unauthenticated:bob' });
    await expect.poll(async () => (await run.status()).pendingApprovals?.[0]?.requestId, { timeout: 20_000, interval: 100 }).not.toBe(first.requestId);
    const second = await pendingOf(run);
    expect(second.title).toBe('touch asked.txt');
    await run.approve(second.requestId, { edit: { command: 'touch edited.txt' } });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded' });

    const workspace = (await run.status()).sandbox!.hostWorkspacePath;
    expect(existsSync(path.join(workspace, 'denied.txt'))).toBe(false);
    expect(existsSync(path.join(workspace, 'asked.txt'))).toBe(false);
    expect(existsSync(path.join(workspace, 'edited.txt'))).toBe(true);
    expect(await w.ledger.getApproval(run.workflowId, first.requestId)).toMatchObject({ status: 'denied', decidedBy: 'unauthenticated:bob', message: 'not in this workspace' });
    const decisions = (await w.ledger.readEvents(run.workflowId, 0, 1000)).filter((e) => e.type === 'permission-decision').map((e) => e.data);
    expect(decisions).toEqual([
      expect.objectContaining({ decision: 'deny', decidedBy: 'unauthenticated:bob' }),
      expect.objectContaining({ decision: 'allow', decidedBy: 'unauthenticated:operator' }),
    ]);
  });

  it('a request nobody answers leaves the list when its timeout denies it, while the turn goes on', async () => {
    const task = book.write('timeout', [{ permissions: [touch('late.txt')], ...ok('went on') }]);
    const run = await w.start({ agent: 'hasty', task, workflowId: testWorkflowId('timeout') });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded' });
    const status = await run.status();
    expect(status.pendingApprovals).toEqual([]);
    // Settled by the activity's signal (denied by the timeout), not swept up at the end of the turn (expired).
    expect(status.settledApprovals).toEqual([expect.objectContaining({ status: 'denied', by: 'timeout' })]);
    expect(existsSync(path.join(status.sandbox!.hostWorkspacePath, 'late.txt'))).toBe(false);
  });
});
