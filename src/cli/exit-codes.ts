/**
 * The command line's exit codes: one table, documented in README.md ("Exit codes") and in `--help`.
 * Scripts branch on these; never exit with a code that is not listed here.
 */
import { isConfigurationFailure } from '../contracts/failures.js';
import type { AgentRunResult, RunPhase, RunStatusView } from '../workflows/types.js';

export const ExitCodes = {
  /** The run succeeded, or the command did what it was asked. */
  succeeded: 0,
  /** An unexpected error: a bug in durable-harness (the message says what happened). */
  internal: 1,
  /** Bad usage or configuration: unknown command or flag, missing argument, broken catalog, unknown agent or run. */
  usage: 2,
  /** Temporal is unreachable at the configured address. */
  unavailable: 3,
  /** No worker polls the task queue (or none picks up the run's tasks). */
  noWorker: 4,
  /** The run's state rejects this operator command (the reason is printed), or the run has already ended. */
  rejected: 5,
  /** A worker polls the run's task queue but did not answer in time: it is busy (or frozen); the run goes on. */
  busy: 6,
  /** The run failed. */
  failed: 10,
  /** The run was stopped by a guardrail (iterations, tokens, cost, wall time). */
  stopped: 11,
  /** The run was cancelled. */
  cancelled: 12,
  /** The run awaits an operator: `retry` or `abandon` it. */
  awaitingOperator: 13,
  /** The run waits for a reply to its question: `reply` to it. */
  waitingForReply: 14,
  /** A permission request of the run waits for an operator: `approve` or `deny` it. */
  awaitingApproval: 15,
  /** Interrupted (Ctrl-C) while following a run; the run itself goes on. */
  interrupted: 130,
} as const;

export type ExitCode = (typeof ExitCodes)[keyof typeof ExitCodes];

/** The table printed by `--help` and copied into README.md. */
export const exitCodeTable: readonly (readonly [ExitCode, string])[] = [
  [ExitCodes.succeeded, 'the run succeeded, or the command did what it was asked'],
  [ExitCodes.internal, 'an unexpected error (a bug: please report it with the message)'],
  [ExitCodes.usage, 'bad usage or configuration: unknown command/flag, missing argument, broken catalog, unknown agent, harness or run id, a run id already taken, a missing credential, a TLS file or profile that cannot be used, a Docker engine or PostgreSQL ledger a worker cannot reach at its start, a run that failed with a configuration failure type'],
  [ExitCodes.unavailable, 'Temporal is unreachable'],
  [ExitCodes.noWorker, 'no worker polls the task queue, or none picks up the run'],
  [ExitCodes.rejected, "the run's state rejects the command (reason printed), or the run has already ended"],
  [ExitCodes.busy, 'a worker polls the task queue but did not answer in time (busy); the run goes on: try again'],
  [ExitCodes.failed, 'the run failed'],
  [ExitCodes.stopped, 'the run was stopped by a guardrail'],
  [ExitCodes.cancelled, 'the run was cancelled'],
  [ExitCodes.awaitingOperator, 'the run awaits an operator: retry or abandon it (the command is printed)'],
  [ExitCodes.waitingForReply, 'the run waits for a reply (the command is printed)'],
  [ExitCodes.awaitingApproval, 'a permission request waits for an operator: approve or deny it (the commands are printed)'],
  [ExitCodes.interrupted, 'interrupted while following; the run goes on'],
];

/** How a finished run maps to an exit code. */
export function exitCodeForResult(result: Pick<AgentRunResult, 'status' | 'failureType'>): ExitCode {
  // Configuration failures come from the one list of failure types (src/workflows/failure-types.ts).
  if (result.status === 'failed' && isConfigurationFailure(result.failureType)) return ExitCodes.usage;
  return ExitCodes[result.status];
}

/** How a run's current state maps to an exit code (`status`); a run still working is 0. */
export function exitCodeForState(state: RunPhase): ExitCode {
  switch (state) {
    case 'awaiting_operator':
      return ExitCodes.awaitingOperator;
    case 'waiting_for_reply':
      return ExitCodes.waitingForReply;
    case 'failed':
    case 'stopped':
    case 'cancelled':
    case 'succeeded':
      return ExitCodes[state];
    default:
      return ExitCodes.succeeded;
  }
}

type PendingApproval = NonNullable<RunStatusView['pendingApprovals']>[number];

/** The permission request a running run waits on an operator for (the oldest), if any. */
export function waitingApproval(view: Pick<RunStatusView, 'state' | 'pendingApprovals'>): PendingApproval | undefined {
  return view.state === 'running' ? view.pendingApprovals?.[0] : undefined;
}

/** How a run's status maps to an exit code: a running run whose permission request waits says so (15). */
export function exitCodeForStatus(view: Pick<RunStatusView, 'state' | 'pendingApprovals'>): ExitCode {
  return waitingApproval(view) ? ExitCodes.awaitingApproval : exitCodeForState(view.state);
}

/** An error that carries the exit code the command line ends with. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: ExitCode,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
