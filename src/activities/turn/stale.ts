/** A turn attempt handed to this worker while it was frozen, and timed out since, stops before it touches anything. */
import { Context } from '@temporalio/activity';
import type { TurnProgress } from './attempt.js';

/** How long a suspicious attempt waits for the server's answer to its first heartbeat. */
const staleProbeMs = 1000;

/**
 * An attempt that starts more than its heartbeat timeout after it was scheduled may have been handed to this worker
 * while it was frozen (SIGSTOP, swapped out) and timed out meanwhile; the server has given the turn to a newer
 * attempt. It asks with one heartbeat first: a stale attempt is cancelled (timed out / not found) and stops here,
 * before it kills the newer attempt's processes as leftovers or runs a second harness in the workspace. Its end is
 * not another attempt: the server counted the timeout already and ignores what it reports. Attempts that started
 * in time (nearly all) skip the probe.
 */
export async function stopIfStale(turn: number): Promise<void> {
  const ctx = Context.current();
  const { heartbeatTimeoutMs, currentAttemptScheduledTimestampMs, attempt } = ctx.info;
  if (!heartbeatTimeoutMs || Date.now() - currentAttemptScheduledTimestampMs < heartbeatTimeoutMs) return;
  const probe: TurnProgress = { turn, attempt, lastEvent: 'checking that this attempt is still current', tokens: 0, costUsd: 0, events: 0, ledger: 'ok' };
  ctx.heartbeat(probe);
  await ctx.sleep(staleProbeMs).catch(() => undefined);
  if (superseded(ctx.cancellationSignal)) {
    ctx.log.warn('a stale turn attempt (handed to this worker while it did not run, timed out since) stops without touching the sandbox', { turn, attempt });
    throw ctx.cancellationSignal.reason;
  }
}

/** Whether this attempt was cancelled because Temporal handed the activity to another attempt. */
export function superseded(signal: AbortSignal): boolean {
  const reason = signal.aborted ? (signal.reason as { message?: unknown } | undefined)?.message : undefined;
  return reason === 'TIMED_OUT' || reason === 'NOT_FOUND' || reason === 'RESET';
}
