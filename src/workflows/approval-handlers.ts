/**
 * The workflow side of pending permission requests: the notifications the turn activity sends about them, the
 * `approve`/`deny` updates (validated against the run's state, authorized by a worker — operator-decisions.ts —
 * and decided in the ledger by a local activity), and the `DurableHarnessPendingApprovals` search attribute.
 * Decisions themselves are pure (approvals.ts).
 *
 * The notifications are not controls: anyone who reaches Temporal can send a signal by name, so their payload is
 * never trusted. They only prompt the run to read its requests from the ledger, and they have no handler of their
 * own (the run's default signal handler hands them to `notified`), so the Temporal UI does not offer them beside the
 * operator's messages.
 */
import { ActivityFailure, ApplicationFailure, proxyLocalActivities, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import {
  approvalRequested,
  approvalSettled,
  approvalsOfRunEnded,
  approvalsOfTurnEnded,
  decisionRefusal,
  pendingOf,
  type ApprovalDecisionResult,
} from './approvals.js';
import { approvalRequestedSignal, approvalSettledSignal, approveUpdate, denyUpdate, updatePayloadProblem } from './messages.js';
import { decisionRequest, takeDecision, type DecisionRequest } from './operator-decisions.js';
import { pendingApprovalsAttribute } from './search-attributes.js';
import type { RunState } from './state.js';

type Activities = ReturnType<typeof createActivities>;

const { pendingApprovalsOf } = proxyLocalActivities<Activities>({ startToCloseTimeout: '30s', retry: { maximumAttempts: 3, initialInterval: '500ms' } });

const { decideApproval } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 3, initialInterval: '500ms', nonRetryableErrorTypes: ['ApprovalUnknown', 'ApprovalAlreadyDecided', 'ApprovalEditInvalid'] },
});

/** What the handlers need of the workflow: its state, and how to change it (which also refreshes the details). */
export interface ApprovalHost {
  readonly workflowId: string;
  state(): RunState;
  update(next: RunState): void;
}

export interface ApprovalHandlers {
  /** A turn returned: its requests nobody decided are gone (expired by the turn activity). */
  turnEnded(turn: number): void;
  /** The run ends: every pending request is gone (expired by endSession). */
  runEnded(status: string): void;
  /** A signal without a handler of its own (the run's default signal handler): an approval notification is taken. */
  notified(name: string): Promise<void> | undefined;
}

export function installApprovalHandlers(host: ApprovalHost): ApprovalHandlers {
  const change = (next: RunState) => {
    if (next === host.state()) return;
    host.update(next);
    syncAttribute();
  };

  /** Writes the pending count when it changed; a run that never had a pending request writes nothing. */
  const syncAttribute = () => {
    const state = host.state();
    const count = pendingOf(state).length;
    if ((state.attributes.pendingApprovals ?? 0) === count) return;
    upsertSearchAttributes([{ key: pendingApprovalsAttribute, value: count }]);
    host.update({ ...state, attributes: { ...state.attributes, pendingApprovals: count } });
  };

  /** Reads the run's requests from the ledger, one read at a time (notifications arriving meanwhile share it). */
  let refreshing: Promise<void> | undefined;
  let again = false;
  const refresh = async (): Promise<void> => {
    if (refreshing) {
      again = true;
      return refreshing;
    }
    refreshing = (async () => {
      do {
        again = false;
        const known = pendingOf(host.state()).map((p) => p.requestId);
        const { pending, settled } = await pendingApprovalsOf({ workflowId: host.workflowId, runId: workflowInfo().firstExecutionRunId, known });
        let next = host.state();
        for (const view of pending) next = approvalRequested(next, view);
        for (const s of settled) next = approvalSettled(next, s);
        change(next);
      } while (again);
    })().finally(() => {
      refreshing = undefined;
    });
    return refreshing;
  };

  const decide = async (request: DecisionRequest, allow: boolean): Promise<ApprovalDecisionResult> => {
    const taken = await takeDecision(host, allow ? 'approve' : 'deny', request);
    const requestId = request.requestId!;
    const by = taken.principal;
    try {
      const result = await decideApproval({ workflowId: host.workflowId, requestId, allow, by, edit: allow ? request.edit : undefined, scope: allow ? request.scope : undefined, message: allow ? undefined : request.reason });
      change(approvalSettled(host.state(), { requestId, status: result.status, by: result.decidedBy }));
      return result;
    } catch (err) {
      const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
      if (cause instanceof ApplicationFailure) {
        // Decided elsewhere first (the timeout, another operator): the state learns it too.
        const first = cause.details?.[0] as { status?: string; decidedBy?: string | null } | undefined;
        if (cause.type === 'ApprovalAlreadyDecided' && first?.status && first.status !== 'pending') {
          change(approvalSettled(host.state(), { requestId, status: first.status as 'allowed', by: first.decidedBy || 'unknown' }));
        }
        throw ApplicationFailure.create({ message: cause.message, type: cause.type ?? undefined, nonRetryable: true });
      }
      throw err;
    }
  };

  setHandler(approveUpdate, (request, options?) => decide(decisionRequest('approve', [request, options]), true), {
    description:
      'Allow a pending permission request: {"requestId": "t3-…", "edit": {…}?, "scope": "once"|"session"?} — signed by `durable-harness approve RUN REQUEST` where decisions must be signed.',
    validator: (arg, options?) => {
      const request = decisionRequest('approve', [arg, options]);
      const refusal = updatePayloadProblem('approve', arg) ?? decisionRefusal(host.state(), request.requestId, request.edit, true);
      if (refusal) throw new Error(refusal);
    },
  });
  setHandler(denyUpdate, (request, options?) => decide(decisionRequest('deny', [request, options]), false), {
    description: 'Deny a pending permission request: {"requestId": "t3-…", "reason": "shown to the harness"?} — signed by `durable-harness deny RUN REQUEST` where decisions must be signed.',
    validator: (arg, options?) => {
      const request = decisionRequest('deny', [arg, options]);
      const refusal = updatePayloadProblem('deny', arg) ?? decisionRefusal(host.state(), request.requestId, undefined, false);
      if (refusal) throw new Error(refusal);
    },
  });

  return {
    turnEnded: (turn) => change(approvalsOfTurnEnded(host.state(), turn)),
    runEnded: (status) => change(approvalsOfRunEnded(host.state(), status)),
    notified: (name) => (name === approvalRequestedSignal.name || name === approvalSettledSignal.name ? refresh() : undefined),
  };
}
