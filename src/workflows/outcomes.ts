/**
 * How a run's outcome shows in Temporal's own terms (docs/OUTCOMES.md):
 *
 * - `succeeded` → the workflow completes with the typed result;
 * - `failed` → the workflow fails with an `ApplicationFailure` whose type is the run's `failureType`;
 * - `stopped` (a guardrail) → the workflow fails with type `GuardrailStopped`;
 * - `cancelled` → the workflow ends Canceled (Temporal's cancel request), the typed result in the memo.
 *
 * Failures carry the typed `AgentRunResult` as their first detail, so `AgentRunHandle.result()` (and a parent run)
 * still gets it. Pure: used by the workflow and by the client.
 */
import { ActivityFailure, ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { FailureTypes } from '../contracts/failures.js';
import type { AgentRunResult, RunOutcome } from './types.js';

/** Memo key of a cancelled run's typed result (a Canceled workflow carries no details). */
export const OUTCOME_MEMO_KEY = 'durableHarnessResult';
/** Failure type of a run a guardrail stopped. */
export const GUARDRAIL_STOPPED = FailureTypes.GuardrailStopped;
/** Failure type of a run cancelled by the `cancel` signal alone, without Temporal's cancel request. */
export const CANCELLED_BY_SIGNAL = FailureTypes.Cancelled;
/** How long a run cancelled by the signal waits for Temporal's cancel request (the client sends both). */
export const CANCEL_REQUEST_GRACE_MS = 10_000;

const outcomes: ReadonlySet<RunOutcome> = new Set(['succeeded', 'failed', 'stopped', 'cancelled']);

/** The failure a failed or stopped run ends with. */
export function runFailure(result: AgentRunResult): ApplicationFailure {
  const type = result.status === 'stopped' ? GUARDRAIL_STOPPED : result.status === 'cancelled' ? CANCELLED_BY_SIGNAL : (result.failureType ?? FailureTypes.RunFailed);
  return ApplicationFailure.create({ type, message: result.reason ?? result.status, details: [result], nonRetryable: true });
}

/** The failure a cancelled run ends with when Temporal's cancel request arrived: the workflow ends Canceled. */
export function runCancelled(result: AgentRunResult): CancelledFailure {
  return new CancelledFailure(result.reason ?? 'cancelled', [result]);
}

export function isRunResult(value: unknown): value is AgentRunResult {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Partial<AgentRunResult>;
  return typeof v.workflowId === 'string' && typeof v.status === 'string' && outcomes.has(v.status) && typeof v.iterations === 'number';
}

/**
 * The typed result a failure carries: the run's own `ApplicationFailure` (or `CancelledFailure`) anywhere in the
 * cause chain (WorkflowFailedError → ApplicationFailure, ChildWorkflowFailure → ApplicationFailure).
 */
export function resultFromFailure(err: unknown): AgentRunResult | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof ApplicationFailure || e instanceof CancelledFailure) {
      const detail = e.details?.[0];
      if (isRunResult(detail)) return detail;
    }
  }
  return undefined;
}

/** An activity failure's own message (its cause's), bounded: it goes into the status answer and the result. */
export function failureMessage(err: unknown): string {
  const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
  const text = cause instanceof Error ? cause.message : String(cause);
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}
