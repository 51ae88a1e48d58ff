/**
 * How a person's decision reaches a waiting turn: written into the request's ledger row, where the turn
 * activity's broker finds it. Used by whatever takes the decision (a workflow update's activity, the command
 * line, tests); the first decision wins.
 */
import type { ApprovalLedger, ApprovalRecord } from '../ledger/types.js';
import { applyEdit } from './gate.js';
import type { PermissionScope } from './types.js';

/** An operator's answer to one pending request. */
export interface OperatorDecision {
  readonly allow: boolean;
  /** Who decides (`operator:alice`, `update:<id>`); recorded as `decidedBy`. */
  readonly by: string;
  /** Fields that replace the tool input's fields (or a whole new input); allow only. */
  readonly edit?: unknown;
  readonly scope?: PermissionScope;
  /** Shown to the harness, mostly with a denial. */
  readonly message?: string;
}

/** Why a decision was not applied. */
export class ApprovalDecisionError extends Error {
  override readonly name = 'ApprovalDecisionError';
  constructor(
    readonly code: 'ApprovalUnknown' | 'ApprovalAlreadyDecided' | 'ApprovalEditInvalid',
    message: string,
    readonly record?: ApprovalRecord,
  ) {
    super(message);
  }
}

/** Decides a pending request; throws `ApprovalDecisionError` when it is unknown or already decided. */
export async function decidePendingApproval(ledger: ApprovalLedger, workflowId: string, requestId: string, decision: OperatorDecision): Promise<ApprovalRecord> {
  const row = await ledger.getApproval(workflowId, requestId);
  if (!row) throw new ApprovalDecisionError('ApprovalUnknown', `Run ${workflowId} has no permission request "${requestId}".`);
  if (row.status !== 'pending') {
    throw new ApprovalDecisionError('ApprovalAlreadyDecided', `Permission request "${requestId}" of run ${workflowId} is already ${row.status} (by ${row.decidedBy ?? 'unknown'}).`, row);
  }
  if (decision.edit !== undefined && !decision.allow) throw new ApprovalDecisionError('ApprovalEditInvalid', 'An edited input only goes with an approval, not a denial.');
  const after = await ledger.decideApproval(workflowId, requestId, {
    status: decision.allow ? 'allowed' : 'denied',
    decidedBy: decision.by,
    scope: decision.scope ?? 'once',
    ...(decision.edit !== undefined ? { editedInput: applyEdit(row.input, decision.edit) } : {}),
    ...(decision.message !== undefined ? { message: decision.message } : decision.allow ? {} : { message: `Denied by ${decision.by}.` }),
  }, row.runId);
  if (!after || after.decidedBy !== decision.by || after.status === 'pending') {
    throw new ApprovalDecisionError('ApprovalAlreadyDecided', `Permission request "${requestId}" of run ${workflowId} was decided by someone else first.`, after);
  }
  return after;
}
