/** Folds a turn's event stream into one result: the envelope text or the error, usage, identity. */
import { addUsage, noUsage, usageKnown } from '../contracts/usage.js';
import type { HarnessEvent, SessionErrorCode, Usage } from './types.js';

const keptActivities = 5;

/** What one turn amounted to. */
export interface TurnResult {
  /** Raw envelope text from `turn-complete`. */
  readonly text?: string;
  /** The failure from `session-error`. */
  readonly error?: {
    readonly code: SessionErrorCode;
    readonly message: string;
    readonly exitCode?: number | null;
    readonly stderrTail?: string;
  };
  /** Sum of the turn's incremental usage events (fields unknown where no event said). */
  readonly usage: Usage;
  /** Usage events seen (model calls, for harnesses that report per call). */
  readonly usageEvents: number;
  /** Usage events that said tokens were spent without saying how many: the turn's true usage is unknown. */
  readonly unknownUsageEvents: number;
  /** Re-reported calls of earlier attempts (not part of this turn's usage; the ledger books them to their attempt). */
  readonly recoveredEvents: number;
  /** Sum of the harness's own costs; absent when the harness reported none. */
  readonly costUsd?: number;
  readonly sessionId?: string;
  readonly resumed: boolean;
  readonly model?: string;
  /** The last few activity descriptions, oldest first. */
  readonly activities: readonly string[];
  readonly eventCount: number;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** A fold in progress: `add` each event in order, then `result`. */
function turnFold(): { add(event: HarnessEvent): void; result(): TurnResult } {
  const result: Mutable<TurnResult> = { usage: noUsage, usageEvents: 0, unknownUsageEvents: 0, recoveredEvents: 0, resumed: false, activities: [], eventCount: 0 };
  const activities: string[] = [];
  return {
    add: (event) => {
      result.eventCount += 1;
      applyEvent(result, activities, event);
    },
    result: () => ({ ...result, activities: activities.slice(-keptActivities) }),
  };
}

/** Folds a turn's events (in order) into a `TurnResult`. */
export function foldTurn(events: Iterable<HarnessEvent>): TurnResult {
  const fold = turnFold();
  for (const event of events) fold.add(event);
  return fold.result();
}

function applyEvent(result: Mutable<TurnResult>, activities: string[], event: HarnessEvent): void {
  switch (event.type) {
    case 'usage':
      if (event.recovered) {
        result.recoveredEvents += 1;
        return;
      }
      result.usage = addUsage(result.usage, event.usage);
      result.usageEvents += 1;
      if (!usageKnown(event.usage)) result.unknownUsageEvents += 1;
      if (event.costUsd !== undefined) result.costUsd = (result.costUsd ?? 0) + event.costUsd;
      return;
    case 'session':
      result.sessionId = event.sessionId;
      if (event.resumed !== undefined) result.resumed = event.resumed;
      if (event.model !== undefined) result.model = event.model;
      return;
    case 'activity':
      activities.push(event.description);
      if (activities.length > keptActivities * 2) activities.splice(0, activities.length - keptActivities);
      return;
    case 'turn-complete':
      result.text = event.text;
      return;
    case 'session-error': {
      const { type: _type, ...error } = event;
      result.error = error;
      return;
    }
    default:
      return;
  }
}

/**
 * Drains an async event stream and folds it as it goes (a turn's events are never all kept: a flooding harness can
 * make millions); `onEvent` sees each event first (for progress).
 */
export async function collectTurn(
  stream: AsyncIterable<HarnessEvent>,
  onEvent?: (event: HarnessEvent) => void | Promise<void>,
): Promise<TurnResult> {
  const fold = turnFold();
  for await (const event of stream) {
    await onEvent?.(event);
    fold.add(event);
  }
  return fold.result();
}
