/** Host ids, host queues and the pure decisions of host affinity. */
import { ActivityFailure, ApplicationFailure, TimeoutFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { hostIdFrom, hostQueueName } from '../../src/temporal/host-queue.js';
import { afterReprovision, hostLossOf, hostLossReason, placement, reprovisionedRequest, shouldReprovision } from '../../src/workflows/affinity.js';
import type { RunState } from '../../src/workflows/state.js';
import type { TurnRequest } from '../../src/workflows/types.js';

describe('host ids', () => {
  it('come from DURABLE_HARNESS_HOST_ID, else the hostname and the data dir, stable for the same dir', () => {
    expect(hostIdFrom({ DURABLE_HARNESS_HOST_ID: 'box-1' }, '/data')).toBe('box-1');
    const a = hostIdFrom({}, '/srv/a/.data', 'worker.example');
    expect(a).toMatch(/^worker\.example-[0-9a-f]{8}$/);
    expect(hostIdFrom({}, '/srv/a/.data', 'worker.example')).toBe(a);
    expect(hostIdFrom({}, '/srv/b/.data', 'worker.example')).not.toBe(a);
    expect(hostQueueName('durable-harness', 'box-1')).toBe('durable-harness@box-1');
    expect(() => hostIdFrom({ DURABLE_HARNESS_HOST_ID: 'a b/c' }, '/data')).toThrow(/Invalid host id "a b\/c" \(DURABLE_HARNESS_HOST_ID\)/);
  });
});

describe('placement and host loss', () => {
  const policy = { hostLoss: { timeoutMs: 4000, action: 'reprovision' as const }, sharesParentWorkspace: false };
  const pinned = { hostQueue: 'q@box-1' };
  const timedOut = new ActivityFailure('activity failed', 'runTurn', '1', undefined, undefined, new TimeoutFailure('timeout', undefined, 'SCHEDULE_TO_START'));

  it('sends a pinned sandbox to its host queue with the host-loss timeout; anything else anywhere', () => {
    expect(placement(policy, pinned)).toEqual({ taskQueue: 'q@box-1', scheduleToStartTimeout: 4000 });
    expect(placement(policy, {})).toEqual({});
    expect(placement(policy, undefined)).toEqual({});
    expect(hostLossOf({})).toEqual({ timeoutMs: 600_000, action: 'await-operator' });
  });

  it('counts a schedule-to-start timeout and a missing workspace as a lost host, nothing else', () => {
    expect(hostLossReason(timedOut, pinned, policy)).toMatch(/host queue "q@box-1" within 4000 ms/);
    expect(hostLossReason(ApplicationFailure.nonRetryable('gone', 'WorkspaceMissing'), pinned, policy)).toBe('gone');
    expect(hostLossReason(ApplicationFailure.retryable('turn failed', 'TurnFailed'), pinned, policy)).toBeUndefined();
    expect(hostLossReason(timedOut, {}, policy)).toBeUndefined();
  });

  it('reprovisions as configured, never a sub-agent in its parent workspace, at most three times', () => {
    expect(shouldReprovision({}, policy)).toBe(true);
    expect(shouldReprovision({ hostMoves: 3 }, policy)).toBe(false);
    expect(shouldReprovision({}, { ...policy, sharesParentWorkspace: true })).toBe(false);
    expect(shouldReprovision({}, { hostLoss: { timeoutMs: 1, action: 'await-operator' }, sharesParentWorkspace: false })).toBe(false);
  });

  it('a moved turn starts a fresh session with the conversation replayed', () => {
    const request: TurnRequest = { turn: 3, specHash: 'h', sandbox: { provider: 'local', workspacePath: '/a', hostQueue: 'q@box-1' }, input: { kind: 'prompt', parts: ['x'] }, resumeSessionId: 's1', envelopeSeq: 7 };
    const sandbox = { provider: 'local', workspacePath: '/b', hostQueue: 'q@box-2' };
    expect(reprovisionedRequest(request, sandbox)).toEqual({ turn: 3, specHash: 'h', sandbox, input: { kind: 'prompt', parts: ['x'] }, replay: true, envelopeSeq: 7 });
    expect(reprovisionedRequest({ ...request, turn: 1 }, sandbox)).not.toHaveProperty('replay');
    const state = { externalSessionId: 's1', lastError: 'x', hostMoves: 1 } as unknown as RunState;
    expect(afterReprovision(state, { ...sandbox, hostWorkspacePath: '/b' })).toMatchObject({ externalSessionId: undefined, lastError: undefined, hostMoves: 2, sandbox: { hostQueue: 'q@box-2' } });
  });
});
