/**
 * Live progress of the turn in flight: its heartbeat details (tokens, cost, attempt, last event), read from
 * Temporal's description of the run — one DescribeWorkflowExecution call, only while the run is running.
 */
import type { WorkflowHandle } from '@temporalio/client';
import { decodeArrayFromPayloads } from '@temporalio/common/lib/internal-non-workflow/index.js';
import type { InFlightTurn } from '../workflows/types.js';

/** The turn activity's heartbeat details (src/activities: TurnProgress). */
interface TurnProgressDetails {
  readonly turn?: unknown;
  readonly attempt?: unknown;
  readonly tokens?: unknown;
  readonly costUsd?: unknown;
  readonly lastEvent?: unknown;
  readonly events?: unknown;
  readonly pendingApproval?: unknown;
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** The pending `runTurn` activity's progress, or undefined when no turn is in flight. */
export async function inFlightTurn(handle: WorkflowHandle): Promise<InFlightTurn | undefined> {
  const { raw } = await handle.describe();
  const pending = raw.pendingActivities?.find((a) => a.activityType?.name === 'runTurn');
  if (!pending) return undefined;
  const payloads = pending.heartbeatDetails?.payloads;
  const [details] = payloads?.length ? ((await decodeArrayFromPayloads(handle.client.options.loadedDataConverter, payloads)) as (TurnProgressDetails | undefined)[]) : [];
  const seconds = pending.lastHeartbeatTime?.seconds;
  const lastHeartbeat = seconds != null ? new Date(Number(seconds) * 1000 + Math.floor((pending.lastHeartbeatTime?.nanos ?? 0) / 1e6)).toISOString() : undefined;
  const costUsd = num(details?.costUsd);
  return {
    turn: num(details?.turn) ?? 0,
    attempt: pending.attempt ?? num(details?.attempt) ?? 1,
    tokens: num(details?.tokens) ?? 0,
    ...(costUsd !== undefined ? { costUsd } : {}),
    lastEvent: typeof details?.lastEvent === 'string' ? details.lastEvent : 'scheduled',
    events: num(details?.events) ?? 0,
    ...(typeof details?.pendingApproval === 'string' ? { pendingApproval: details.pendingApproval } : {}),
    ...(lastHeartbeat ? { lastHeartbeat } : {}),
  };
}
