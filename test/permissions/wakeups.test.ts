/**
 * A decision written on the same process wakes the waiting turn at once; the ledger poll stays the way a decision
 * from another host arrives. The poll here is a minute long, so an answer within it came from the wake-up.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteLedger } from '../../src/ledger/index.js';
import { ApprovalWakeups, decidePendingApproval, ledgerApprovalBroker, type PendingApproval } from '../../src/permissions/index.js';

let ledger: SqliteLedger;
beforeEach(() => {
  ledger = SqliteLedger.open(':memory:');
});
afterEach(async () => ledger.close());

const request = (requestId: string): PendingApproval => ({ workflowId: 'wf', requestId, turn: 1, tool: 'bash', kind: 'command', title: 'ls', input: { command: 'ls' }, command: 'ls', timeoutMs: 600_000 });
const pending = async (requestId: string) => {
  for (let i = 0; i < 500 && (await ledger.getApproval('wf', requestId))?.status !== 'pending'; i++) await new Promise((r) => setTimeout(r, 2));
};

describe('approval wake-ups', () => {
  it('a decision notified on this process reaches the waiting ask at once, not at the next poll', async () => {
    const wakeups = new ApprovalWakeups();
    const broker = ledgerApprovalBroker({ ledger, pollMs: 60_000, wakeups });
    const asked = broker.ask(request('r1'));
    await pending('r1');
    const decided = performance.now();
    await decidePendingApproval(ledger, 'wf', 'r1', { allow: true, by: 'operator:dana' });
    wakeups.notify('wf', 'r1');
    const answer = await asked;
    expect(answer).toMatchObject({ decision: 'allow', decidedBy: 'operator:dana' });
    expect(performance.now() - decided).toBeLessThan(1_000);
  });

  it('a wake-up decides nothing: without a decision in the ledger the ask keeps waiting', async () => {
    const wakeups = new ApprovalWakeups();
    const broker = ledgerApprovalBroker({ ledger, pollMs: 60_000, wakeups });
    let settled = false;
    const asked = broker.ask(request('r0')).finally(() => (settled = true));
    await pending('r0');
    for (let i = 0; i < 20; i++) wakeups.notify('wf', 'r0');
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toBe(false);
    expect((await ledger.getApproval('wf', 'r0'))?.status).toBe('pending');
    await decidePendingApproval(ledger, 'wf', 'r0', { allow: false, by: 'operator:dana' });
    wakeups.notify('wf', 'r0');
    await expect(asked).resolves.toMatchObject({ decision: 'deny', decidedBy: 'operator:dana' });
  });

  it('a wake-up that comes before the wait is kept: the next wait returns at once', async () => {
    const wakeups = new ApprovalWakeups();
    const waiter = wakeups.subscribe('wf', 'r2');
    wakeups.notify('wf', 'r2');
    const t = performance.now();
    await waiter.wait(60_000);
    expect(performance.now() - t).toBeLessThan(1_000);
    waiter.close();
  });

  it('another request, another run, or no subscriber is not woken; a closed ask leaves nothing behind', async () => {
    const wakeups = new ApprovalWakeups();
    const waiter = wakeups.subscribe('wf', 'r3');
    wakeups.notify('wf', 'r4');
    wakeups.notify('other', 'r3');
    const outcome = await Promise.race([waiter.wait(150).then(() => 'timer'), new Promise((r) => setTimeout(() => r('late'), 1_000))]);
    expect(outcome).toBe('timer');
    waiter.close();
    wakeups.notify('wf', 'r3'); // nobody waits: a no-op
    expect((wakeups as unknown as { waiters: Map<string, unknown> }).waiters.size).toBe(0);
  });

  it('an abort ends the wait with its reason', async () => {
    const wakeups = new ApprovalWakeups();
    const waiter = wakeups.subscribe('wf', 'r5');
    const controller = new AbortController();
    const waiting = waiter.wait(60_000, controller.signal);
    controller.abort(new Error('turn cancelled'));
    await expect(waiting).rejects.toThrow('turn cancelled');
    waiter.close();
  });
});
