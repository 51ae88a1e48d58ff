/** The pure side of pending approvals (src/workflows/approvals.ts) and the turn timeout that covers their waits. */
import { describe, expect, it } from 'vitest';
import {
  APPROVAL_WAITS_PER_TURN,
  approvalRequested,
  approvalSettled,
  approvalsOfRunEnded,
  approvalsOfTurnEnded,
  decisionRefusal,
  detailsText,
  SETTLED_KEPT,
  turnStartToCloseMs,
  type PendingApprovalView,
} from '../../src/workflows/approvals.js';
import { initialState } from '../../src/workflows/decide.js';
import type { RunState } from '../../src/workflows/state.js';

const base: RunState = { ...initialState({ agent: 'a', task: 't', identity: { tenantId: 't', userId: 'u' } }), iteration: 2, state: 'running', detail: 'turn 2 · scripted' };
const view = (requestId: string, turn = 2): PendingApprovalView => ({ requestId, turn, tool: 'Bash', kind: 'command', title: `touch ${requestId}`, since: '2026-12-01T05:00:00.000Z', timeoutMs: 60_000 });

describe('pending approvals in the run state', () => {
  it('a request is added once; a retried attempt asking it again changes nothing', () => {
    const one = approvalRequested(base, view('t2-a'));
    expect(one.pendingApprovals).toEqual([view('t2-a')]);
    expect(approvalRequested(one, view('t2-a'))).toBe(one);
    // A late signal of an earlier turn is ignored: its requests ended with it.
    expect(approvalRequested(base, view('t1-a', 1))).toBe(base);
  });

  it('settling removes it and remembers who decided; a settled request is not re-added', () => {
    const settled = approvalSettled(approvalRequested(base, view('t2-a')), { requestId: 't2-a', status: 'allowed', by: 'operator:alice' });
    expect(settled.pendingApprovals).toEqual([]);
    expect(settled.settledApprovals).toEqual([{ requestId: 't2-a', status: 'allowed', by: 'operator:alice' }]);
    expect(approvalRequested(settled, view('t2-a'))).toBe(settled);
    // The activity's own "settled" after the update's: the first report stands.
    expect(approvalSettled(settled, { requestId: 't2-a', status: 'allowed', by: 'operator:alice' })).toBe(settled);
  });

  it('keeps only the last settled requests', () => {
    let s = base;
    for (let i = 0; i < SETTLED_KEPT + 5; i++) s = approvalSettled(approvalRequested(s, view(`t2-${i}`)), { requestId: `t2-${i}`, status: 'denied', by: 'timeout' });
    expect(s.settledApprovals).toHaveLength(SETTLED_KEPT);
    expect(s.settledApprovals![0]!.requestId).toBe('t2-5');
  });

  it('a finished turn and an ended run expire what still waits', () => {
    const two = approvalRequested(approvalRequested(base, view('t2-a')), view('t2-b'));
    expect(approvalsOfTurnEnded(two, 1)).toBe(two);
    const ended = approvalsOfTurnEnded(two, 2);
    expect(ended.pendingApprovals).toEqual([]);
    expect(ended.settledApprovals?.map((s) => s.status)).toEqual(['expired', 'expired']);
    expect(approvalsOfRunEnded(two, 'cancelled').settledApprovals).toEqual([
      { requestId: 't2-a', status: 'expired', by: 'run cancelled' },
      { requestId: 't2-b', status: 'expired', by: 'run cancelled' },
    ]);
    expect(approvalsOfRunEnded(base, 'succeeded')).toBe(base);
  });
});

describe('the approve/deny validator', () => {
  const waiting = approvalRequested(base, view('t2-a'));
  it('accepts a pending request, with an object edit for an approval', () => {
    expect(decisionRefusal(waiting, 't2-a')).toBeUndefined();
    expect(decisionRefusal(waiting, 't2-a', { command: 'ls' })).toBeUndefined();
  });
  it('rejects unknown, already decided, badly edited and unnamed requests with a reason', () => {
    expect(decisionRefusal(waiting, 't9-x')).toBe('run has no pending permission request "t9-x" (pending: t2-a)');
    const decided = approvalSettled(waiting, { requestId: 't2-a', status: 'denied', by: 'timeout' });
    expect(decisionRefusal(decided, 't2-a')).toBe('permission request "t2-a" is already denied (by timeout)');
    expect(decisionRefusal(waiting, 't2-a', ['ls'])).toMatch(/must be a JSON object/);
    expect(decisionRefusal(waiting, 't2-a', { command: 'ls' }, false)).toMatch(/only goes with an approval/);
    expect(decisionRefusal(waiting, '')).toMatch(/name the permission request/);
    expect(decisionRefusal(waiting, 42)).toMatch(/name the permission request/);
  });
});

describe('what the Temporal UI shows', () => {
  it('current details list the waiting requests under the phase line', () => {
    expect(detailsText(base)).toBe('**running** · turn 2 · scripted');
    const text = detailsText(approvalRequested(base, view('t2-a')));
    expect(text).toMatch(/^\*\*running\*\* · turn 2 · scripted\n\n\*\*1 permission request waiting\*\*/);
    expect(text).toContain('- `t2-a` (turn 2) command · ` Bash `: ` touch t2-a ` — since 2026-12-01T05:00:00.000Z, denied after 60 s');
    // Harness text stays text: no image, link or heading of its own, no control character.
    const hostile = detailsText(approvalRequested(base, { ...view('t2-b'), title: '![x](https://tracker.example/p.png) `x`\n# h\x1b[2J' }));
    expect(hostile).toContain('`` ![x](https://tracker.example/p.png) `x`\\n# h\\x1b[2J ``');
  });
  it('an advisory posture says it is not enforced', () => {
    const advisory: RunState = { ...base, policy: { permissions: { posture: 'strict', gated: true, enforced: false, note: 'advisory: harness "x" cannot ask before a tool runs' } } as RunState['policy'] };
    expect(detailsText(advisory)).toContain('permissions: strict **advisory** (not enforced: advisory: harness "x" cannot ask before a tool runs)');
  });
  it('an open network is flagged as development only; a gateway policy adds nothing', () => {
    const withNetwork = (network: string): RunState => ({ ...base, policy: { network } as RunState['policy'] });
    expect(detailsText(withNetwork('open'))).toContain('network: **open** (unconfined: development only');
    for (const policy of ['none', 'vendor', 'allowlist']) expect(detailsText(withNetwork(policy))).toBe('**running** · turn 2 · scripted');
  });
  it('requests the gateway refused are counted under the phase line, with the command that lists them', () => {
    expect(detailsText({ ...base, networkRefused: 3 })).toBe("**running** · turn 2 · scripted\n\nnetwork: **3 requests refused** by the run's egress gateway (`durable-harness network RUN --refused`)");
  });
});

describe("the turn activity's start-to-close timeout", () => {
  it('covers the harness turn plus full approval waits, so Temporal never times out a turn that waits for an operator', () => {
    expect(turnStartToCloseMs({ turnTimeoutMs: 600_000 })).toBe(660_000);
    const waiting = turnStartToCloseMs({ turnTimeoutMs: 600_000, approvalTimeoutMs: 900_000 });
    expect(waiting).toBe(600_000 + APPROVAL_WAITS_PER_TURN * 900_000 + 60_000);
    expect(waiting).toBeGreaterThan(600_000 + 900_000);
  });
});
