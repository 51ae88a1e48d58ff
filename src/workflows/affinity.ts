/**
 * Host affinity (docs/multi-host.md), workflow side. A run whose workspace lives on one worker's disk (the local
 * provider) carries that worker's host queue in its sandbox ref; every activity that touches the workspace is
 * scheduled there, with a schedule-to-start timeout: when nobody takes it in time, the host is gone, and the run
 * either gets a fresh workspace elsewhere (conversation replayed) or waits for an operator, as the agent says.
 * Deterministic: pure decisions plus the few Temporal calls agent-run.ts delegates here.
 */
import { ActivityFailure, ApplicationFailure, TimeoutFailure, proxyActivities } from '@temporalio/workflow';
import type { EndSessionOutcome, createActivities } from '../activities/index.js';
import type { SandboxRef } from '../sandbox/types.js';
import { defaultHostLossTimeoutMs, type HostLossPolicy, type RunPolicy } from '../spec/types.js';
import { FailureTypes } from '../contracts/failures.js';
import type { RunState } from './state.js';
import type { TurnRequest, TurnSandbox } from './types.js';

type Activities = ReturnType<typeof createActivities>;

/** How often one run may be moved to a fresh workspace before the operator decides. */
export const maxHostMoves = 3;

/** The agent's host-loss policy; runs resolved before host affinity get the defaults. */
export function hostLossOf(policy: Pick<RunPolicy, 'hostLoss'>): HostLossPolicy {
  return policy.hostLoss ?? { timeoutMs: defaultHostLossTimeoutMs, action: 'await-operator' };
}

/** Where a workspace activity goes: the host queue of the sandbox (and how long it may wait there), or anywhere. */
export function placement(policy: Pick<RunPolicy, 'hostLoss'>, sandbox: { readonly hostQueue?: string } | undefined): { taskQueue?: string; scheduleToStartTimeout?: number } {
  if (!sandbox?.hostQueue) return {};
  return { taskQueue: sandbox.hostQueue, scheduleToStartTimeout: hostLossOf(policy).timeoutMs };
}

/**
 * Why `err` means the workspace's host is lost, or undefined when it does not: nobody took the activity from the
 * host queue in time, or the worker there no longer has the workspace.
 */
export function hostLossReason(err: unknown, sandbox: { readonly hostQueue?: string } | undefined, policy: Pick<RunPolicy, 'hostLoss'>): string | undefined {
  if (!sandbox?.hostQueue) return undefined;
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof TimeoutFailure && cause.timeoutType === 'SCHEDULE_TO_START') {
    return `no worker took the turn from host queue "${sandbox.hostQueue}" within ${hostLossOf(policy).timeoutMs} ms: the host holding the run's workspace is gone`;
  }
  if (cause instanceof ApplicationFailure && cause.type === FailureTypes.WorkspaceMissing) return cause.message;
  return undefined;
}

/** Whether a lost host gives the run a fresh workspace now (else the operator decides). */
export function shouldReprovision(state: Pick<RunState, 'hostMoves'>, policy: Pick<RunPolicy, 'hostLoss' | 'sharesParentWorkspace'>): boolean {
  // A sub-agent in its parent's workspace cannot move alone; after a few moves, something else is wrong.
  return hostLossOf(policy).action === 'reprovision' && !policy.sharesParentWorkspace && (state.hostMoves ?? 0) < maxHostMoves;
}

/** The run on its fresh workspace: the old harness session lived in the lost one, so the next turns start fresh. */
export function afterReprovision(state: RunState, sandbox: SandboxRef): RunState {
  return { ...state, sandbox, externalSessionId: undefined, hostMoves: (state.hostMoves ?? 0) + 1, lastError: undefined };
}

/** The same turn on the fresh workspace: a new session, with the earlier turns replayed from the ledger. */
export function reprovisionedRequest(request: TurnRequest, sandbox: TurnSandbox): TurnRequest {
  const { resumeSessionId: _resume, replay: _replay, ...rest } = request;
  return { ...rest, sandbox, ...(request.turn > 1 ? { replay: true } : {}) };
}

type EndSessionInput = Parameters<Activities['endSession']>[0];

const { endSession: endSessionOnHost } = proxyActivities<Activities>({ startToCloseTimeout: '2m', retry: { maximumAttempts: 5, initialInterval: '500ms' } });

/**
 * Ends the session where its workspace is: on the host queue when the run is pinned, else through `local` (the
 * local activity on this worker). A pinned run first tries `local` with `onlyOnHost`: the worker that started the
 * session, as a local activity, is usually the one running the workflow still, and then the end costs no server
 * round trip. When the host is gone the run's record is still closed here, the workspace left where it was; any
 * other failure is thrown, for the caller to retry.
 */
export async function endSessionWhereItLives(
  policy: Pick<RunPolicy, 'hostLoss'>,
  input: EndSessionInput,
  local: (input: EndSessionInput) => Promise<EndSessionOutcome | void>,
): Promise<void> {
  const where = input.releaseSandbox ? placement(policy, input.sandbox) : {};
  if (!where.taskQueue) {
    await local(input);
    return;
  }
  const outcome = await local({ ...input, onlyOnHost: where.taskQueue });
  if (outcome && !outcome.elsewhere) return;
  try {
    await endSessionOnHost.executeWithOptions({ ...where, startToCloseTimeout: '2m', retry: { maximumAttempts: 5, initialInterval: '500ms' }, summary: `end session on ${where.taskQueue}` }, [input]);
  } catch (err) {
    if (!hostLossReason(err, input.sandbox, policy)) throw err;
    await local({ ...input, releaseSandbox: false });
  }
}
