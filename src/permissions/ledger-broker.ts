/**
 * The approval broker over the run ledger: a request the policy leaves open becomes a pending row; whoever
 * decides (a workflow update's activity, `durable-harness approve|deny`, a test) writes the decision into that
 * row; the turn activity polls it while it heartbeats and the harness waits. The timeout counts from the FIRST
 * ask, so a retried attempt does not restart it, and it is settled in the ledger too (first decision wins).
 */
import type { ApprovalLedger, ApprovalRecord } from '../ledger/types.js';
import type { ApprovalBroker, PendingApproval, PermissionAnswer } from './types.js';
import { ApprovalWakeups } from './wakeups.js';

export interface LedgerApprovalBrokerOptions {
  readonly ledger: ApprovalLedger;
  /** How often the row is read while waiting (ms): how a decision written on another host arrives. */
  readonly pollMs?: number;
  /** Decisions written on this process wake the wait at once (the approve/deny updates' activity notifies them). */
  readonly wakeups?: ApprovalWakeups;
  /** Called once when a request becomes pending (not when a retried attempt finds it pending already). */
  readonly onPending?: (record: ApprovalRecord) => void | Promise<void>;
  /** Clock, for tests. */
  readonly now?: () => number;
}

/** The answer a decided row stands for. */
export function answerOf(record: ApprovalRecord): PermissionAnswer | undefined {
  if (record.status === 'pending') return undefined;
  const allowed = record.status === 'allowed';
  return {
    decision: allowed ? 'allow' : 'deny',
    scope: record.scope ?? 'once',
    ...(allowed && record.editedInput !== undefined ? { editedInput: record.editedInput } : {}),
    ...(record.message !== undefined ? { message: record.message } : {}),
    decidedBy: record.decidedBy ?? record.status,
    approvalId: record.requestId,
  };
}

/** Creates the ledger-backed broker. */
export function ledgerApprovalBroker(options: LedgerApprovalBrokerOptions): ApprovalBroker {
  const { ledger } = options;
  const pollMs = options.pollMs ?? 500;
  const now = options.now ?? Date.now;
  // Without the worker's wake-ups, a set of its own that nobody notifies: every wait is then the poll.
  const wakeups = options.wakeups ?? new ApprovalWakeups();
  return {
    async ask(request: PendingApproval, signal?: AbortSignal): Promise<PermissionAnswer> {
      const expiresAt = new Date(now() + request.timeoutMs).toISOString();
      // Subscribed before the row is first read: a decision written in between still wakes the wait.
      const waiter = wakeups.subscribe(request.workflowId, request.requestId);
      try {
        const { record, created } = await ledger.requestApproval({ ...request, expiresAt });
        if (created) await options.onPending?.(record);
        let current: ApprovalRecord | undefined = record;
        for (;;) {
          if (!current) throw new Error(`approval ${request.requestId} of ${request.workflowId} disappeared from the ledger`);
          const answer = answerOf(current);
          if (answer) return answer;
          const deadline = Date.parse(current.expiresAt ?? expiresAt);
          if (now() >= deadline) {
            const within = request.timeoutMs < 1000 ? `${request.timeoutMs} ms` : `${Math.round(request.timeoutMs / 1000)} s`;
            current = await ledger.decideApproval(
              request.workflowId,
              request.requestId,
              {
                status: 'denied',
                decidedBy: 'timeout',
                message: `Nobody approved this within ${within}, so it was denied. Do not retry it; continue without it or explain in your envelope.`,
              },
              record.runId,
            );
            continue;
          }
          await waiter.wait(Math.min(pollMs, Math.max(1, deadline - now())), signal);
          current = await ledger.getApproval(request.workflowId, request.requestId, record.runId);
        }
      } finally {
        waiter.close();
      }
    },
  };
}
