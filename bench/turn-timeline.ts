/**
 * Where a run's turns sat in time, from its history's server timestamps: the one reading of a history that the
 * orchestration bench (phases) and the scale bench (overhead, dispatch, eager offers) share.
 */
import type proto from '@temporalio/proto';

type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

/** A protobuf timestamp in epoch ms. */
const timestampMs = (t: { seconds?: unknown; nanos?: number | null } | null | undefined): number =>
  Number(String(t?.seconds ?? 0)) * 1000 + (t?.nanos ?? 0) / 1e6;

export interface TurnTimeline {
  /** The history's first and last events. */
  readonly firstMs: number;
  readonly lastMs: number;
  /** Per turn activity started / completed, in order. */
  readonly startedMs: number[];
  readonly completedMs: number[];
  /** Per turn activity started: scheduled → started (0 with eager dispatch). */
  readonly dispatchMs: number[];
}

/** The turns (activities of type `turnActivity`) of one history. */
export function turnTimeline(events: readonly HistoryEvent[], turnActivity = 'runTurn'): TurnTimeline {
  const scheduled = new Map<string, number>();
  const timeline = { firstMs: events[0] ? timestampMs(events[0].eventTime) : 0, lastMs: events.at(-1) ? timestampMs(events.at(-1)!.eventTime) : 0, startedMs: [] as number[], completedMs: [] as number[], dispatchMs: [] as number[] };
  for (const e of events) {
    const at = timestampMs(e.eventTime);
    const s = e.activityTaskScheduledEventAttributes;
    if (s?.activityType?.name === turnActivity) scheduled.set(String(e.eventId), at);
    const started = e.activityTaskStartedEventAttributes;
    if (started && scheduled.has(String(started.scheduledEventId))) {
      timeline.startedMs.push(at);
      timeline.dispatchMs.push(at - scheduled.get(String(started.scheduledEventId))!);
    }
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && scheduled.has(String(completed.scheduledEventId))) timeline.completedMs.push(at);
  }
  return timeline;
}
