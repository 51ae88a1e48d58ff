/**
 * Where a run's live events are read from: the words the ledger (which writes and serves them) and the client (which
 * follows them, src/client/events.ts) share.
 */

/** The channel the PostgreSQL ledger notifies on each event insert; the payload is the run's workflow id. */
export const EVENTS_CHANNEL = 'durable_harness_events';

/** One `events` row of the ledger, as a source reads it. */
export interface StoredEvent {
  readonly cursor: number;
  readonly turn: number;
  readonly type: string;
  readonly data: unknown;
  /** ISO time the row was written. */
  readonly at: string;
}

/** Where a follower reads a run's events: the ledger, through whatever connection the caller has. */
export interface RunEventSource {
  /** The run's rows after `afterCursor` (exclusive), oldest first, at most `limit`. */
  read(workflowId: string, afterCursor: number, limit: number): Promise<readonly StoredEvent[]>;
  /**
   * Resolves when rows after `afterCursor` may have arrived (a notification, or the next tick of a tail), or when
   * `signal` aborts; never later than `maxWaitMs`.
   */
  wait(workflowId: string, afterCursor: number, options: { readonly signal: AbortSignal; readonly maxWaitMs: number }): Promise<void>;
  /** At worst how long after a row commits a follower sees it, in words (for the docs and `logs`). */
  readonly delay: string;
  close?(): Promise<void>;
}

/** Sleeps `ms`, or less when `signal` aborts. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
