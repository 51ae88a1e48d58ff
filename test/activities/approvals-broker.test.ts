/**
 * The turn activity's approval broker wrapper (src/activities/approvals.ts): the run is told when a request waits and
 * when it is settled, and no wait outlives the attempt's Temporal timeout — it is denied as a timeout first.
 */
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { announcingBroker, attemptDeadlineMs, ATTEMPT_DEADLINE_MARGIN_MS, approvalActivities } from '../../src/activities/approvals.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { decidePendingApproval, ledgerApprovalBroker, type PendingApproval } from '../../src/permissions/index.js';
import type { ApprovalSettlement, PendingApprovalView } from '../../src/workflows/approvals.js';

const ledgers: SqliteLedger[] = [];
afterEach(async () => {
  for (const l of ledgers.splice(0)) await l.close();
});

function setup(deadlineMs?: number) {
  const ledger = SqliteLedger.open(path.join(mkdtempSync(path.join(os.tmpdir(), 'dh-broker-')), 'ledger.sqlite'));
  ledgers.push(ledger);
  const told: (PendingApprovalView | ApprovalSettlement)[] = [];
  const broker = announcingBroker({
    inner: ledgerApprovalBroker({ ledger, pollMs: 10 }),
    ledger,
    announce: { requested: async (v) => void told.push(v), settled: async (s) => void told.push(s) },
    deadlineMs,
  });
  return { ledger, told, broker };
}

const request: PendingApproval = { workflowId: 'wf', requestId: 't1-abc', turn: 1, tool: 'Bash', kind: 'command', title: 'touch x', input: { command: 'touch x' }, command: 'touch x', timeoutMs: 60_000 };

describe('announcingBroker', () => {
  it('tells the run when a request waits and when the operator settled it', async () => {
    const { ledger, told, broker } = setup();
    const answer = broker.ask(request);
    await expect.poll(() => told.length).toBe(1);
    expect(told[0]).toMatchObject({ requestId: 't1-abc', turn: 1, tool: 'Bash', kind: 'command', title: 'touch x', timeoutMs: 60_000 });
    await decidePendingApproval(ledger, 'wf', 't1-abc', { allow: true, by: 'operator:alice' });
    await expect(answer).resolves.toMatchObject({ decision: 'allow', decidedBy: 'operator:alice' });
    expect(told[1]).toEqual({ requestId: 't1-abc', status: 'allowed', by: 'operator:alice' });
  });

  it("denies as a timeout before the attempt's own deadline instead of waiting into Temporal's timeout", async () => {
    const { ledger, told, broker } = setup(Date.now() + 300);
    const started = Date.now();
    await expect(broker.ask(request)).resolves.toMatchObject({ decision: 'deny', decidedBy: 'timeout', message: expect.stringMatching(/before the turn's time limit/) });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(await ledger.getApproval('wf', 't1-abc')).toMatchObject({ status: 'denied', decidedBy: 'timeout' });
    expect(told.at(-1)).toEqual({ requestId: 't1-abc', status: 'denied', by: 'timeout' });
  });

  it('a retried attempt finds the request with its first deadline and is told about it again', async () => {
    const { ledger, told, broker } = setup();
    void broker.ask(request).catch(() => undefined);
    await expect.poll(() => told.length).toBe(1);
    const first = await ledger.getApproval('wf', 't1-abc');
    const again = setup();
    const retried = announcingBroker({ inner: ledgerApprovalBroker({ ledger, pollMs: 10 }), ledger, announce: { requested: async (v) => void again.told.push(v), settled: async () => undefined } });
    const answer = retried.ask({ ...request, timeoutMs: 999_999 });
    await expect.poll(() => again.told.length).toBe(1);
    // The first deadline (the ledger stamps the request's time itself: within a few ms of the caller's clock).
    expect(again.told[0]).toMatchObject({ since: first!.requestedAt });
    expect(Math.abs((again.told[0] as PendingApprovalView).timeoutMs - 60_000)).toBeLessThan(1000);
    await decidePendingApproval(ledger, 'wf', 't1-abc', { allow: false, by: 'operator:bob' });
    await expect(answer).resolves.toMatchObject({ decision: 'deny', decidedBy: 'operator:bob' });
  });
});

describe('attemptDeadlineMs', () => {
  it("is the attempt's start-to-close deadline less a margin", () => {
    expect(attemptDeadlineMs({ currentAttemptScheduledTimestampMs: 1_000_000, startToCloseTimeoutMs: 3_600_000 }, 1_000_000)).toBe(1_000_000 + 3_600_000 - ATTEMPT_DEADLINE_MARGIN_MS);
    expect(attemptDeadlineMs({ currentAttemptScheduledTimestampMs: 1_000, startToCloseTimeoutMs: 10_000 }, 1_000)).toBe(10_000);
    expect(attemptDeadlineMs({})).toBeUndefined();
    // A deadline already past is no real attempt's (a mock environment's info): no cut-off rather than denying all.
    expect(attemptDeadlineMs({ currentAttemptScheduledTimestampMs: 1, startToCloseTimeoutMs: 1000 }, 5_000)).toBeUndefined();
  });
});

describe('decideApproval (the update activity)', () => {
  it('decides a pending row; unknown and already decided requests fail non-retryably with their code and the first decision', async () => {
    const { ledger } = setup();
    const { decideApproval } = approvalActivities(ledger);
    await ledger.requestApproval({ ...request, expiresAt: new Date(Date.now() + 60_000).toISOString() });
    await expect(decideApproval({ workflowId: 'wf', requestId: 't1-abc', allow: true, by: 'operator:alice', edit: { command: 'ls' } })).resolves.toEqual({
      requestId: 't1-abc',
      status: 'allowed',
      decidedBy: 'operator:alice',
      editedInput: { command: 'ls' },
    });
    await expect(decideApproval({ workflowId: 'wf', requestId: 't1-abc', allow: false, by: 'operator:bob' })).rejects.toMatchObject({
      type: 'ApprovalAlreadyDecided',
      nonRetryable: true,
      details: [{ status: 'allowed', decidedBy: 'operator:alice' }],
    });
    await expect(decideApproval({ workflowId: 'wf', requestId: 'nope', allow: true, by: 'operator:bob' })).rejects.toMatchObject({ type: 'ApprovalUnknown', nonRetryable: true });
  });
});
