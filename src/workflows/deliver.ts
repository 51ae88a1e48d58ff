/**
 * The deliverable of a run on a repository (docs/repositories.md), workflow side: at the run's end, when its outcome
 * is one the agent delivers on, `deliverWork` runs where the workspace lives (the host queue of a pinned run). Its
 * steps are idempotent, so its retries are safe; when they are spent, the run still ends — its result says the
 * delivery failed and why. Runs without a repository schedule nothing here: their command sequence is unchanged.
 */
import { CancellationScope, isCancellation, proxyActivities } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { DeliverableView } from '../contracts/repository.js';
import type { RunOutcome } from '../contracts/run.js';
import type { RunPolicy } from '../spec/types.js';
import { placement } from './affinity.js';
import { failureMessage } from './outcomes.js';
import type { RunState } from './state.js';

type Activities = ReturnType<typeof createActivities>;

// It heartbeats every 2 s (DELIVERY_HEARTBEAT_MS): a worker lost mid-delivery is retried after 20 s, on the host again.
const { deliverWork } = proxyActivities<Activities>({ startToCloseTimeout: '10m', heartbeatTimeout: '20s', retry: { maximumAttempts: 5, initialInterval: '1s', backoffCoefficient: 2 } });

/** Whether the run's end delivers: a repository of its own, and an outcome the agent delivers on. */
export function delivers(state: RunState, status: RunOutcome): boolean {
  return state.repository !== undefined && state.sandbox !== undefined && !state.policy?.sharesParentWorkspace && state.repository.deliverOn.includes(status);
}

/** Delivers the run's work; never throws but for a cancellation of the workflow itself (the delivery is not cancelled). */
export async function deliverRun(
  policy: RunPolicy,
  state: RunState,
  ending: { readonly workflowId: string; readonly status: RunOutcome; readonly summary: string },
): Promise<DeliverableView> {
  const repository = state.repository!;
  const sandbox = state.sandbox!;
  const input = { workflowId: ending.workflowId, specHash: policy.specHash, sandbox, repository, status: ending.status, summary: ending.summary, turn: state.iteration };
  try {
    return await CancellationScope.nonCancellable(() =>
      // The proxy's timeout and retries, on the workspace's host queue.
      deliverWork.executeWithOptions({ ...placement(policy, sandbox), summary: `deliver ${repository.branch}` }, [input]),
    );
  } catch (err) {
    if (isCancellation(err)) throw err;
    return { state: 'failed', mode: repository.deliver, branch: repository.branch, base: repository.base, problem: failureMessage(err) };
  }
}
