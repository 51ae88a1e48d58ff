/**
 * The ApprovalLedger contract as one suite, so every ledger implementation runs the same checks; each one's test
 * file (sqlite-ledger.test.ts, postgres-ledger.test.ts) calls it beside describeLedgerContract with a factory for
 * a fresh, empty ledger: `approvalLedgerSuite('SqliteLedger', async () => SqliteLedger.open(':memory:'))`.
 */
import { describe, expect, it } from 'vitest';
import type { ApprovalLedger, NewApproval } from '../../src/ledger/types.js';

const request = (over: Partial<NewApproval> = {}): NewApproval => ({
  workflowId: 'wf-a',
  requestId: 't1-abc',
  turn: 1,
  tool: 'Bash',
  kind: 'command',
  title: 'touch ran.txt',
  input: { command: 'touch ran.txt', description: 'make a file' },
  command: 'touch ran.txt',
  expiresAt: '2030-01-01T00:00:00.000Z',
  ...over,
});

export function approvalLedgerSuite(name: string, open: () => Promise<ApprovalLedger & { close(): Promise<void> }>): void {
  describe(`${name}: approvals`, () => {
    const withLedger = (fn: (ledger: ApprovalLedger) => Promise<void>) => async () => {
      const ledger = await open();
      try {
        await fn(ledger);
      } finally {
        await ledger.close();
      }
    };

    it(
      'a request is stored once: asking again (a retried attempt) returns the same row unchanged',
      withLedger(async (ledger) => {
        const first = await ledger.requestApproval(request());
        expect(first.created).toBe(true);
        expect(first.record).toMatchObject({ workflowId: 'wf-a', requestId: 't1-abc', status: 'pending', tool: 'Bash', kind: 'command', command: 'touch ran.txt', input: { command: 'touch ran.txt', description: 'make a file' }, expiresAt: '2030-01-01T00:00:00.000Z' });
        expect(Date.parse(first.record.requestedAt)).not.toBeNaN();
        const again = await ledger.requestApproval(request({ expiresAt: '2031-01-01T00:00:00.000Z', title: 'changed' }));
        expect(again.created).toBe(false);
        expect(again.record).toEqual(first.record);
      }),
    );

    it(
      'the first decision wins; a later one leaves the row as it is',
      withLedger(async (ledger) => {
        await ledger.requestApproval(request());
        const decided = await ledger.decideApproval('wf-a', 't1-abc', { status: 'allowed', decidedBy: 'operator:alice', editedInput: { command: 'touch edited.txt' }, scope: 'once' });
        expect(decided).toMatchObject({ status: 'allowed', decidedBy: 'operator:alice', editedInput: { command: 'touch edited.txt' }, scope: 'once' });
        expect(Date.parse(decided!.decidedAt!)).not.toBeNaN();
        const late = await ledger.decideApproval('wf-a', 't1-abc', { status: 'denied', decidedBy: 'timeout', message: 'too late' });
        expect(late).toEqual(decided);
        expect(await ledger.decideApproval('wf-a', 'nope', { status: 'denied', decidedBy: 'x' })).toBeUndefined();
      }),
    );

    it(
      'a policy decision is stored already decided, with who decided and when',
      withLedger(async (ledger) => {
        const { record } = await ledger.requestApproval(request({ requestId: 't1-def', decision: { status: 'denied', decidedBy: 'policy:deny[0] command:rm *', message: 'no', scope: 'once' } }));
        expect(record).toMatchObject({ status: 'denied', decidedBy: 'policy:deny[0] command:rm *', message: 'no', scope: 'once' });
        expect(record.decidedAt).toBeDefined();
      }),
    );

    it(
      'lists by run and status, oldest first, and expires what is still pending',
      withLedger(async (ledger) => {
        await ledger.requestApproval(request({ requestId: 'r1' }));
        await ledger.requestApproval(request({ requestId: 'r2', decision: { status: 'allowed', decidedBy: 'builtin:read-in-workspace' } }));
        await ledger.requestApproval(request({ requestId: 'r3' }));
        await ledger.requestApproval(request({ workflowId: 'wf-b', requestId: 'r1' }));
        expect((await ledger.listApprovals({ workflowId: 'wf-a' })).map((r) => r.requestId)).toEqual(['r1', 'r2', 'r3']);
        expect((await ledger.listApprovals({ status: 'pending' })).map((r) => `${r.workflowId}/${r.requestId}`)).toEqual(['wf-a/r1', 'wf-a/r3', 'wf-b/r1']);
        await ledger.requestApproval(request({ requestId: 'r4', turn: 2 }));
        expect(await ledger.expireApprovals('wf-a', 'turn ended', 2)).toBe(1);
        expect(await ledger.getApproval('wf-a', 'r4')).toMatchObject({ status: 'expired', decidedBy: 'turn ended' });
        expect(await ledger.expireApprovals('wf-a', 'run ended')).toBe(2);
        expect((await ledger.listApprovals({ workflowId: 'wf-a', status: 'expired' })).map((r) => [r.requestId, r.decidedBy])).toEqual([['r1', 'run ended'], ['r3', 'run ended'], ['r4', 'turn ended']]);
        expect((await ledger.listApprovals({ status: 'pending' })).map((r) => r.workflowId)).toEqual(['wf-b']);
        expect(await ledger.getApproval('wf-a', 'r2')).toMatchObject({ status: 'allowed' });
      }),
    );

    it(
      "grants: the run's session-scoped approvals, and the edited ones of the turn asked about",
      withLedger(async (ledger) => {
        const allowed = (requestId: string, turn: number, extra: Record<string, unknown> = {}) =>
          ledger.requestApproval(request({ requestId, turn, decision: { status: 'allowed', decidedBy: 'operator:a', ...extra } }));
        await allowed('t1-rule', 1);
        await allowed('t1-session', 1, { scope: 'session' });
        await allowed('t1-edit', 1, { editedInput: { command: 'ls' } });
        await allowed('t2-edit', 2, { editedInput: { command: 'pwd' } });
        await ledger.requestApproval(request({ requestId: 't2-denied', turn: 2, decision: { status: 'denied', decidedBy: 'operator:a', scope: 'session' } }));
        await ledger.requestApproval(request({ workflowId: 'wf-b', requestId: 't2-other-run', turn: 2, decision: { status: 'allowed', decidedBy: 'operator:a', scope: 'session' } }));
        expect((await ledger.listGrants('wf-a', 2)).map((r) => r.requestId)).toEqual(['t1-session', 't2-edit']);
        expect((await ledger.listGrants('wf-a', 1)).map((r) => r.requestId)).toEqual(['t1-session', 't1-edit']);
        expect(await ledger.listGrants('wf-none', 1)).toEqual([]);
      }),
    );
  });
}
