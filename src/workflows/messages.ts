/** Signals, queries and updates of `agentRun`, shared with the client. */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { ApprovalDecisionResult, ApprovalSettlement, ApproveOptions, DenyOptions, PendingApprovalView } from './approvals.js';
import type { RunStatusView } from './types.js';

/** Current state, counters, usage, cost, last step and external session id. */
export const statusQuery = defineQuery<RunStatusView>('status');
/**
 * Ends the run as `cancelled`: the in-flight turn is killed and `endSession` runs. Send Temporal's cancel request
 * too (the client's `cancel()` does) so the workflow ends Canceled; the signal carries the reason.
 */
export const cancelSignal = defineSignal<[reason?: string]>('cancel');
/** Runs the failed turn again when the run is `awaiting_operator`. */
export const retryTurnSignal = defineSignal('retryTurn');
/** Same as `retryTurnSignal`, but rejected unless the run is awaiting an operator. */
export const retryTurnUpdate = defineUpdate<string>('retryTurn');
/** Ends an `awaiting_operator` run as failed. */
export const abandonSignal = defineSignal<[reason?: string]>('abandon');
/** Same as `abandonSignal`, but rejected (with the reason) unless the run is awaiting an operator. */
export const abandonUpdate = defineUpdate<string, [reason: string]>('abandon');
/** Answers a `chat` step. */
export const replySignal = defineSignal<[text: string]>('reply');
/** Answers a `chat` step; rejected unless the run is waiting for a reply. */
export const replyUpdate = defineUpdate<string, [text: string]>('reply');

/** Sent by the turn activity to its own run: a permission request now waits for an operator. */
export const approvalRequestedSignal = defineSignal<[view: PendingApprovalView]>('approvalRequested');
/** Sent by the turn activity to its own run: a pending permission request was decided (operator, timeout, …). */
export const approvalSettledSignal = defineSignal<[settled: ApprovalSettlement]>('approvalSettled');
/** Allows a pending permission request (optionally with an edited input); rejected when unknown or already decided. */
export const approveUpdate = defineUpdate<ApprovalDecisionResult, [requestId: string, options?: ApproveOptions]>('approve');
/** Denies a pending permission request; rejected when unknown or already decided. */
export const denyUpdate = defineUpdate<ApprovalDecisionResult, [requestId: string, options?: DenyOptions]>('deny');
