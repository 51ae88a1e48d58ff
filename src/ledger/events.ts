/**
 * A run's events read from any ledger by a bounded-interval tail: the source a follower of the embedded SQLite
 * ledger uses (SQLite cannot notify another process). Each wait is one `intervalMs`; a row is seen at most that long
 * after it commits, plus one indexed read.
 */
import { pause, type RunEventSource } from '../contracts/run-events.js';
import type { Ledger } from './types.js';

/** How often the tail reads by default: the delay bound of a SQLite follower. */
export const defaultTailIntervalMs = 100;

export function ledgerEventSource(ledger: Pick<Ledger, 'readEvents'>, options: { intervalMs?: number; close?: () => Promise<void> } = {}): RunEventSource {
  const intervalMs = options.intervalMs ?? defaultTailIntervalMs;
  return {
    delay: `at most ${intervalMs} ms after the row commits (a read of the ledger every ${intervalMs} ms)`,
    read: (workflowId, afterCursor, limit) => ledger.readEvents(workflowId, afterCursor, limit),
    wait: (_workflowId, _afterCursor, { signal, maxWaitMs }) => pause(Math.min(intervalMs, maxWaitMs), signal),
    ...(options.close ? { close: options.close } : {}),
  };
}
