/**
 * The workflow side of pending permission requests: the signals the turn activity sends about them, the
 * `approve`/`deny` updates (validated against the run's state, decided in the ledger by a local activity), and the
 * `DurableHarnessPendingApprovals` search attribute. Decisions themselves are pure (approvals.ts).
 */
import { ActivityFailure, ApplicationFailure, proxyLocalActivities, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import {
  approvalRequested,
  approvalSettled,
  approvalsOfRunEnded,
  approvalsOfTurnEnded,
  decisionRefusal,
  operatorOf,
  pendingOf,
  type ApprovalDecisionResult,
} from './approvals.js';
import { approvalRequestedSignal, approvalSettledSignal, approveUpdate, denyUpdate } from './messages.js';
import { pendingApprovalsAttribute } from './search-attributes.js';
import type { RunState } from './state.js';
import type { Since } from './versions.js';

type Activities = ReturnType<typeof createActivities>;

/** The patch that introduced the pending-approvals search attribute (docs/VERSIONING.md). */
export const PENDING_APPROVALS_PATCH = 'perm12b-pending-approvals';

const { decideApproval } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 3, initialInterval: '500ms', nonRetryableErrorTypes: ['ApprovalUnknown', 'ApprovalAlreadyDecided', 'ApprovalEditInvalid'] },
});

/** What the handlers need of the workflow: its state, and how to change it (which also refreshes the details). */
export interface ApprovalHost {
  readonly workflowId: string;
  state(): RunState;
  update(next: RunState): void;
  /** Whether a patched change applies to this run (versions.ts). */
  since: Since;
}

export interface ApprovalHandlers {
  /** A turn returned: its requests nobody decided are gone (expired by the turn activity). */
  turnEnded(turn: number): void;
  /** The run ends: every pending request is gone (expired by endSession). */
  runEnded(status: string): void;
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
    if (!host.since(PENDING_APPROVALS_PATCH)) return;
    upsertSearchAttributes([{ key: pendingApprovalsAttribute, value: count }]);
    host.update({ ...state, attributes: { ...state.attributes, pendingApprovals: count } });
  };

  setHandler(approvalRequestedSignal, (view) => change(approvalRequested(host.state(), view)));
  setHandler(approvalSettledSignal, (settled) => change(approvalSettled(host.state(), settled)));

  const decide = async (requestId: string, allow: boolean, options: { by?: string; edit?: Record<string, unknown>; scope?: 'once' | 'session'; message?: string }): Promise<ApprovalDecisionResult> => {
    try {
      const result = await decideApproval({ workflowId: host.workflowId, requestId, allow, by: operatorOf(options.by), edit: options.edit, scope: options.scope, message: options.message });
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

  setHandler(approveUpdate, (requestId, options = {}) => decide(requestId, true, { by: options.by, edit: options.edit, scope: options.scope }), {
    validator: (requestId, options = {}) => {
      const refusal = decisionRefusal(host.state(), requestId, options.edit, true);
      if (refusal) throw new Error(refusal);
    },
  });
  setHandler(denyUpdate, (requestId, options = {}) => decide(requestId, false, { by: options.by, message: options.reason }), {
    validator: (requestId, _options = {}) => {
      const refusal = decisionRefusal(host.state(), requestId, undefined, false);
      if (refusal) throw new Error(refusal);
    },
  });

  return {
    turnEnded: (turn) => change(approvalsOfTurnEnded(host.state(), turn)),
    runEnded: (status) => change(approvalsOfRunEnded(host.state(), status)),
  };
}
