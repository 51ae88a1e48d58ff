/**
 * Activity side of pending permission requests:
 * - `decideApproval`: the approve/deny updates' local activity, deciding a pending row in the ledger;
 * - `announcingBroker`: wraps the turn's approval broker so the run learns of each request (a signal to its own
 *   workflow when it becomes pending and when it is settled), and so no wait outlives the turn attempt's own
 *   Temporal timeout: a wait that would is denied as a timeout first (fail closed, never a killed attempt).
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { SignalDefinition } from '@temporalio/common';
import type { ApprovalLedger, ApprovalRecord } from '../ledger/types.js';
import { ApprovalDecisionError, answerOf, approvalDetail, decidePendingApproval, type ApprovalBroker, type ApprovalWakeups, type PendingApproval, type PermissionAnswer } from '../permissions/index.js';
import type { ApprovalDecisionResult, ApprovalSettlement, PendingApprovalView } from '../workflows/approvals.js';
import { clipText } from '../workflows/bounds.js';
import { approvalRequestedSignal, approvalSettledSignal } from '../workflows/messages.js';

export interface DecideApprovalInput {
  readonly workflowId: string;
  readonly requestId: string;
  readonly allow: boolean;
  readonly by: string;
  readonly edit?: Record<string, unknown>;
  readonly scope?: 'once' | 'session';
  readonly message?: string;
}

/**
 * The approve/deny updates' activity: the first decision wins; a refused one is a non-retryable failure with its code.
 * A turn on this process that waits for the request is woken at once (`wakeups`); one on another host polls.
 */
export function approvalActivities(ledger: ApprovalLedger, wakeups?: ApprovalWakeups) {
  return {
    async decideApproval(input: DecideApprovalInput): Promise<ApprovalDecisionResult> {
      try {
        const row = await decidePendingApproval(ledger, input.workflowId, input.requestId, {
          allow: input.allow,
          by: input.by,
          ...(input.edit !== undefined ? { edit: input.edit } : {}),
          ...(input.scope !== undefined ? { scope: input.scope } : {}),
          ...(input.message !== undefined ? { message: input.message } : {}),
        });
        wakeups?.notify(input.workflowId, input.requestId);
        return {
          requestId: row.requestId,
          status: row.status === 'allowed' ? 'allowed' : 'denied',
          decidedBy: row.decidedBy ?? input.by,
          ...(row.editedInput !== undefined ? { editedInput: row.editedInput } : {}),
        };
      } catch (err) {
        if (err instanceof ApprovalDecisionError) {
          const first = err.record ? { status: err.record.status, decidedBy: err.record.decidedBy } : undefined;
          throw ApplicationFailure.create({ message: err.message, type: err.code, nonRetryable: true, details: first ? [first] : [] });
        }
        throw err;
      }
    },
  };
}

/** How much of a request's tool name and title the run's signal carries (harness strings, into history). */
const VIEW_TEXT_CHARS = 200;

/**
 * The pending view of a ledger row; `timeoutMs` when known exactly (the row was just created with it). With
 * `detailed`, what the request would do (bounded and escaped: the ledger's input is redacted already).
 */
export function pendingViewOf(record: ApprovalRecord, timeoutMs?: number, detailed = true): PendingApprovalView {
  const expires = record.expiresAt ? Date.parse(record.expiresAt) : NaN;
  const detail = detailed ? approvalDetail(record) : undefined;
  return {
    requestId: record.requestId,
    turn: record.turn,
    tool: clipText(record.tool, VIEW_TEXT_CHARS),
    kind: record.kind,
    title: clipText(record.title, VIEW_TEXT_CHARS),
    since: record.requestedAt,
    timeoutMs: timeoutMs ?? (Number.isFinite(expires) ? Math.max(0, expires - Date.parse(record.requestedAt)) : 0),
    ...(detail !== undefined ? { detail } : {}),
  };
}

export interface AnnouncingBrokerOptions {
  readonly inner: ApprovalBroker;
  readonly ledger: ApprovalLedger;
  /** Tells the run (signal); errors are the caller's to swallow: visibility never decides anything. */
  readonly announce: {
    requested(view: PendingApprovalView): Promise<void>;
    settled(settled: ApprovalSettlement): Promise<void>;
  };
  /** Epoch ms by which every wait must be over (the attempt's Temporal deadline less a margin); none when omitted. */
  readonly deadlineMs?: number;
  readonly now?: () => number;
}

/** A request reaching this margin before the attempt's deadline is denied rather than left to Temporal's timeout. */
export const ATTEMPT_DEADLINE_MARGIN_MS = 30_000;

export function announcingBroker(options: AnnouncingBrokerOptions): ApprovalBroker {
  const { inner, ledger, announce } = options;
  const now = options.now ?? Date.now;
  return {
    async ask(request: PendingApproval, signal?: AbortSignal): Promise<PermissionAnswer> {
      // Create (or find, on a retried attempt) the row first, so the run is told the request's real start.
      const { record, created } = await ledger.requestApproval({ ...request, expiresAt: new Date(now() + request.timeoutMs).toISOString() });
      // The run reads the request (and its detail) from the ledger: the notification stays small in history.
      if (record.status === 'pending') await announce.requested(pendingViewOf(record, created ? request.timeoutMs : undefined, false));
      const answer = await withinDeadline(request, signal);
      await announce.settled({ requestId: request.requestId, status: answer.decision === 'allow' ? 'allowed' : 'denied', by: answer.decidedBy });
      return answer;
    },
  };

  async function withinDeadline(request: PendingApproval, signal?: AbortSignal): Promise<PermissionAnswer> {
    if (options.deadlineMs === undefined) return inner.ask(request, signal);
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    const cutOff = new Promise<'cut-off'>((resolve) => {
      timer = setTimeout(() => resolve('cut-off'), Math.max(0, options.deadlineMs! - now()));
    });
    try {
      const asked = inner.ask(request, stop.signal);
      asked.catch(() => undefined); // rejects when cut off: that is handled below
      const outcome = await Promise.race([asked, cutOff]);
      if (outcome !== 'cut-off') return outcome;
      stop.abort(new Error('the turn attempt reaches its time limit'));
      const row = await ledger.decideApproval(request.workflowId, request.requestId, {
        status: 'denied',
        decidedBy: 'timeout',
        message: "Nobody approved this before the turn's time limit, so it was denied. Do not retry it; continue without it or explain in your envelope.",
      });
      // First decision wins: an operator who decided at the last moment is honoured.
      return (row && answerOf(row)) ?? { decision: 'deny', scope: 'once', decidedBy: 'timeout', approvalId: request.requestId, message: "Denied: the turn's time limit was reached." };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }
}

/**
 * Signals the turn's own run about its pending requests, through the worker's client; without one (a mock
 * environment) or when the signal fails, the run just does not show the request — the decision path is the
 * ledger either way.
 */
export function runAnnouncer(
  client: Client | undefined,
  run: { workflowId: string; runId: string },
  log: { warn(message: string, meta?: Record<string, unknown>): void },
): AnnouncingBrokerOptions['announce'] {
  const handle = client?.workflow.getHandle(run.workflowId, run.runId);
  const send = async <T>(definition: SignalDefinition<[T]>, arg: T) => {
    if (!client || !handle) return;
    try {
      await client.withDeadline(Date.now() + 5000, () => handle.signal(definition, arg));
    } catch (err) {
      log.warn(`could not tell run ${run.workflowId} about a permission request`, { error: String(err) });
    }
  };
  return {
    requested: (view) => send(approvalRequestedSignal, view),
    settled: (settled) => send(approvalSettledSignal, settled),
  };
}

/**
 * The epoch ms by which this attempt's approval waits must be over: its start-to-close deadline less a margin.
 * Undefined when unknown, or when it lies in the past already (not a real attempt: a mock environment's info).
 */
export function attemptDeadlineMs(info: { currentAttemptScheduledTimestampMs?: number; startToCloseTimeoutMs?: number }, nowMs = Date.now()): number | undefined {
  const { currentAttemptScheduledTimestampMs: start, startToCloseTimeoutMs: limit } = info;
  if (!start || !limit) return undefined;
  const deadline = start + limit - Math.min(ATTEMPT_DEADLINE_MARGIN_MS, Math.floor(limit / 10));
  return deadline > nowMs ? deadline : undefined;
}
