/**
 * Signals, queries and updates of `agentRun`, shared with the client. Every operator decision (approve, deny, reply,
 * retry, abandon, cancel) takes one object — `{ …what it decides, signed? }` — so the Temporal UI can send it too; a
 * signed one carries the operator's signature over exactly what it decides (src/operators). The positional forms
 * older clients send are still read.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { SignedDecision } from '../operators/index.js';
import type { ApprovalDecisionResult, ApprovalSettlement, ApproveOptions, DenyOptions, PendingApprovalView } from './approvals.js';
import { PREVIEW_CHARS, isBlobRef, type BlobRef, type TextRef } from '../contracts/text-ref.js';
import type { TurnProgressNote } from './progress.js';
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
/**
 * Answers a `chat` step; rejected unless the run is waiting for a reply. A reply longer than `inlineReplyChars`
 * travels by reference (a `BlobRef` into the workers' blob store), so the update's argument — kept in history — stays
 * small.
 */
export const replyUpdate = defineUpdate<string, [request: TextRef | { text: TextRef; signed?: SignedDecision }]>('reply');
/** Cancels the run like `cancelSignal`, as an update: authorized (signed where decisions must be) and answered. */
export const cancelUpdate = defineUpdate<string, [request: { reason?: string; signed?: SignedDecision }]>('cancelRun');

/** What operator inputs may weigh: checked by the client before it sends them, and by the run's validators. */
export const operatorInputLimits = {
  /** A reply of more characters goes by reference; the update carries the reference, never the text. */
  inlineReplyChars: 16 * 1024,
  /** No reply may be larger (UTF-8 bytes), by reference or not. */
  maxReplyBytes: 4 * 1024 * 1024,
  /** A task, reason (cancel, abandon, deny), operator name or approval edit travels inline: at most this (UTF-8 bytes). */
  maxInlineBytes: 16 * 1024,
} as const;

const mib = (bytes: number) => `${bytes / (1024 * 1024)} MiB`;

/** Why a reply cannot be taken as sent (too large, inline when it should be a reference, not a reply), or undefined. */
export function replyProblem(reply: unknown): string | undefined {
  const { inlineReplyChars, maxReplyBytes } = operatorInputLimits;
  if (isBlobRef(reply as TextRef)) {
    const ref = reply as BlobRef;
    if (!/^[0-9a-f]{64}$/.test(ref.blob) || !Number.isInteger(ref.bytes) || ref.bytes < 0 || typeof ref.preview !== 'string' || ref.preview.length > PREVIEW_CHARS) {
      return 'the reply reference is malformed: send the reply through AgentRunHandle.reply or `durable-harness reply`';
    }
    if (ref.bytes > maxReplyBytes) return `the reply is ${ref.bytes} bytes, over the limit of ${maxReplyBytes} bytes (${mib(maxReplyBytes)}): put large content in a file of the workspace and say where it is`;
    return undefined;
  }
  if (typeof reply !== 'string' || !reply.trim()) return 'reply text must be a non-empty string';
  if (reply.length > inlineReplyChars) {
    return `the reply is ${reply.length} characters, over the inline limit of ${inlineReplyChars}: a longer reply travels by reference (AgentRunHandle.reply with { blobs }, or \`durable-harness reply\` where the workers' ledger is)`;
  }
  return undefined;
}

/** Sent by the turn activity to its own run: a permission request now waits for an operator. */
export const approvalRequestedSignal = defineSignal<[view: PendingApprovalView]>('approvalRequested');
/** Sent by the turn activity to its own run: a pending permission request was decided (operator, timeout, …). */
export const approvalSettledSignal = defineSignal<[settled: ApprovalSettlement]>('approvalSettled');
/**
 * Sent by the turn activity to its own run, at most once per the agent's `progressIntervalMs` and only when it changed:
 * the turn in flight's activity, tokens and attempt, for current details only (progress.ts). No handler of its own.
 */
export const turnProgressSignal = defineSignal<[note: TurnProgressNote]>('turnProgress');
/** Allows a pending permission request (optionally with an edited input); rejected when unknown or already decided. */
export const approveUpdate = defineUpdate<ApprovalDecisionResult, [request: string | (ApproveOptions & { requestId: string; signed?: SignedDecision }), options?: ApproveOptions]>('approve');
/** Denies a pending permission request; rejected when unknown or already decided. */
export const denyUpdate = defineUpdate<ApprovalDecisionResult, [request: string | (DenyOptions & { requestId: string; signed?: SignedDecision }), options?: DenyOptions]>('deny');

/** The fields of each operator update's object (besides `by`, an unsigned caller's name, and `signed`). */
const updateFields = {
  approve: { requestId: 'string', edit: 'object', scope: 'once|session' },
  deny: { requestId: 'string', reason: 'string' },
  reply: { text: 'string' },
  retry: {},
  abandon: { reason: 'string' },
  cancel: { reason: 'string' },
} as const satisfies Record<string, Record<string, 'string' | 'object' | 'once|session'>>;

/**
 * Why an operator update's object is malformed (an unknown field, a field of the wrong type), naming what it takes,
 * or undefined. The validators answer with it, so a payload typed into the Temporal UI gets an answer, not silence.
 * Positional forms (a string) and a reply by reference are left to the handlers' own checks.
 */
export function updatePayloadProblem(action: keyof typeof updateFields, arg: unknown): string | undefined {
  if (arg === undefined || typeof arg === 'string') return undefined;
  const takes = { ...updateFields[action], by: 'string', signed: 'object' } as Record<string, string>;
  const shape = `{${Object.entries(takes)
    .map(([k, t]) => `"${k}": ${t === 'once|session' ? '"once"|"session"' : t === 'object' ? '{…}' : '"…"'}${k === 'requestId' || (k === 'text' && action === 'reply') ? '' : '?'}`)
    .join(', ')}}`;
  if (arg === null || typeof arg !== 'object' || Array.isArray(arg)) return `the ${action} update takes one JSON object: ${shape}`;
  if (action === 'reply' && typeof (arg as { blob?: unknown }).blob === 'string') return undefined;
  for (const [key, value] of Object.entries(arg)) {
    const type = takes[key];
    if (type === undefined) return `unknown field "${key}" in the ${action} update: it takes ${shape}`;
    const fits = type === 'once|session' ? value === 'once' || value === 'session' : type === 'object' ? value !== null && typeof value === 'object' && !Array.isArray(value) : typeof value === type || (key === 'text' && value !== null && typeof value === 'object');
    if (!fits) return `"${key}" of the ${action} update must be ${type === 'once|session' ? '"once" or "session"' : type === 'object' ? 'a JSON object' : 'a string'}, got ${JSON.stringify(value)?.slice(0, 80)}: it takes ${shape}`;
  }
  return undefined;
}
