/**
 * Signals, queries and updates of `agentRun`, shared with the client. Every operator decision (approve, deny, reply,
 * retry, abandon, cancel) takes one object — `{ …what it decides, signed? }` — so the Temporal UI can send it too; a
 * signed one carries the operator's signature over exactly what it decides (src/operators). The positional forms
 * older clients send are still read.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { SignedDecision } from '../operators/index.js';
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
export const retryTurnUpdate = defineUpdate<string, [request: { signed?: SignedDecision }]>('retryTurn');
/** Ends an `awaiting_operator` run as failed. */
export const abandonSignal = defineSignal<[reason?: string]>('abandon');
/** Same as `abandonSignal`, but rejected (with the reason) unless the run is awaiting an operator. */
export const abandonUpdate = defineUpdate<string, [request: string | { reason?: string; signed?: SignedDecision }]>('abandon');
/** Answers a `chat` step. */
export const replySignal = defineSignal<[text: string]>('reply');
/** Answers a `chat` step; rejected unless the run is waiting for a reply. */
export const replyUpdate = defineUpdate<string, [request: string | { text: string; signed?: SignedDecision }]>('reply');
/** Cancels the run like `cancelSignal`, as an update: authorized (signed where decisions must be) and answered. */
export const cancelUpdate = defineUpdate<string, [request: { reason?: string; signed?: SignedDecision }]>('cancelRun');

/** Sent by the turn activity to its own run: a permission request now waits for an operator. */
export const approvalRequestedSignal = defineSignal<[view: PendingApprovalView]>('approvalRequested');
/** Sent by the turn activity to its own run: a pending permission request was decided (operator, timeout, …). */
export const approvalSettledSignal = defineSignal<[settled: ApprovalSettlement]>('approvalSettled');
/** Allows a pending permission request (optionally with an edited input); rejected when unknown or already decided. */
export const approveUpdate = defineUpdate<ApprovalDecisionResult, [request: string | (ApproveOptions & { requestId: string; signed?: SignedDecision }), options?: ApproveOptions]>('approve');
/** Denies a pending permission request; rejected when unknown or already decided. */
export const denyUpdate = defineUpdate<ApprovalDecisionResult, [request: string | (DenyOptions & { requestId: string; signed?: SignedDecision }), options?: DenyOptions]>('deny');
