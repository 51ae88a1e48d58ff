/** How much workflow history a run costs: events and bytes, in all and per steady-state turn (for tests and the bench). */
import type { Client } from '@temporalio/client';
import proto from '@temporalio/proto';

const { EventType } = proto.temporal.api.enums.v1;
const { History, HistoryEvent } = proto.temporal.api.history.v1;

export interface HistoryFigures {
  /** Executions of the run (1 + continue-as-new count). */
  readonly executions: number;
  readonly events: number;
  /** Encoded size of all executions' histories, bytes. */
  readonly bytes: number;
  /** Largest single execution's history, bytes. */
  readonly largestExecutionBytes: number;
  /** Turn activities scheduled. */
  readonly turns: number;
  /** Median events and bytes from one turn's scheduling to the next's, over the middle turns of each execution. */
  readonly steadyTurnEvents: number;
  readonly steadyTurnBytes: number;
}

function median(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Follows the run's continue-as-new chain from its first execution and measures every history. */
export async function historyFigures(client: Client, workflowId: string, firstRunId?: string): Promise<HistoryFigures> {
  let runId: string | undefined = firstRunId;
  let executions = 0;
  let events = 0;
  let bytes = 0;
  let largest = 0;
  let turns = 0;
  const steadyEvents: number[] = [];
  const steadyBytes: number[] = [];
  for (;;) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    const all = history.events ?? [];
    executions += 1;
    events += all.length;
    const size = History.encode(history).finish().length;
    bytes += size;
    largest = Math.max(largest, size);
    const sizes = all.map((e) => HistoryEvent.encode(e).finish().length);
    const starts = all.flatMap((e, i) => (e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED && e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn' ? [i] : []));
    turns += starts.length;
    // Skip the first and last turn of each execution: they carry the start and the end of the run.
    for (let k = 1; k + 1 < starts.length; k++) {
      steadyEvents.push(starts[k + 1]! - starts[k]!);
      steadyBytes.push(sizes.slice(starts[k]!, starts[k + 1]!).reduce((a, b) => a + b, 0));
    }
    const last = all[all.length - 1];
    const next = last?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId;
    if (!next) break;
    runId = next;
  }
  return { executions, events, bytes, largestExecutionBytes: largest, turns, steadyTurnEvents: median(steadyEvents), steadyTurnBytes: median(steadyBytes) };
}
