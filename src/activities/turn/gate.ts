/** The turn's permission gate: the agent's policy, and who answers what it leaves open. */
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { createPermissionGate, ledgerApprovalBroker } from '../../permissions/index.js';
import type { FrozenSpec } from '../../spec/index.js';
import { announcingBroker, attemptDeadlineMs, runAnnouncer } from '../approvals.js';
import type { Deps } from '../deps.js';
import type { Redactor } from '../redaction.js';
import type { Attempt, TurnRun } from './attempt.js';

export type TurnGate = ReturnType<typeof createPermissionGate>;

/**
 * The gate, and how many requests past the policy's cap were denied without asking (set once the harness asked
 * past it; its requests' events are then not written one by one).
 */
export function turnGate(deps: Deps, spec: FrozenSpec, req: TurnRun, attempt: Attempt, redact: Redactor): { gate: TurnGate; overCap: () => { cap: number; denied: number } | undefined } {
  const ctx = Context.current();
  const { progress, events, beat } = attempt;
  let permissionsOverCap: { cap: number; denied: number } | undefined;
  const gate = createPermissionGate({
    ledger: deps.ledger,
    workflowId: req.workflowId,
    runId: req.runId,
    turn: req.turn,
    policy: spec.agent.permissions,
    workspace: req.sandbox.workspacePath,
    broker:
      deps.approvals ??
      announcingBroker({
        inner: ledgerApprovalBroker({
          ledger: deps.ledger,
          pollMs: deps.approvalPollMs,
          wakeups: deps.approvalWakeups,
          onPending: (record) => deps.onPendingApproval?.(record).catch((err: unknown) => ctx.log.warn('onPendingApproval failed', { error: String(err) })),
        }),
        ledger: deps.ledger,
        announce: runAnnouncer(workerClient(ctx), { workflowId: req.workflowId, runId: req.runId }, ctx.log),
        deadlineMs: attemptDeadlineMs(ctx.info),
      }),
    redact,
    onAsk: (request, approvalId) => {
      progress.pendingApproval = approvalId;
      progress.lastEvent = redact(`waiting for approval ${approvalId}: ${request.title}`).slice(0, 200);
      beat();
    },
    onDecision: () => {
      delete progress.pendingApproval;
    },
    onOverCap: (cap, denied) => {
      if (denied === 1) {
        // One event and one log line for the attempt, not one per request (nor their request and decision events).
        events.append('permission-requests-over-cap', { cap });
        ctx.log.warn(`turn ${req.turn} of ${req.workflowId}: more than ${cap} permission requests; the rest are denied without asking`);
      }
      permissionsOverCap = { cap, denied };
    },
  });
  return { gate, overCap: () => permissionsOverCap };
}

/** The worker's client (absent in a mock activity environment). */
export function workerClient(ctx: Context): Client | undefined {
  try {
    return ctx.client;
  } catch {
    return undefined;
  }
}
