/**
 * Progress events of a turn attempt: best effort, off the turn's critical path, and never kill a healthy harness.
 */
import type { Ledger } from '../../ledger/types.js';
import { isRetryable } from '../ledger-wait.js';
import { RetryingWriter } from './retrying-writer.js';

/** Progress events the harness's stream may write per second of a turn, and in one burst (see `ProgressEvents.progress`). */
export const progressEventsPerSecond = 50;
export const progressEventsBurst = 200;

/**
 * Progress events (live view only): bounded, written in the background, dropped when the queue overflows. What the
 * harness streams (`progress`) is also rate-capped per turn; whatever was dropped is counted in one
 * `progress-events-dropped` event at the end of the turn.
 */
export class ProgressEvents {
  private readonly writer: RetryingWriter;
  private queued = 0;
  dropped = 0;
  /** Dropped by the rate cap (a subset of `dropped`). */
  private rateDropped = 0;
  private tokens: number;
  private refilledAt = Date.now();
  private readonly perSecond: number;
  private readonly burst: number;

  constructor(
    private readonly ledger: Ledger,
    private readonly where: { workflowId: string; runId?: string; turn: number },
    options: { maxQueued?: number; perSecond?: number; burst?: number; onFault?: (err: Error | undefined) => void } = {},
  ) {
    this.maxQueued = options.maxQueued ?? 500;
    this.perSecond = options.perSecond ?? progressEventsPerSecond;
    this.burst = options.burst ?? progressEventsBurst;
    this.tokens = this.burst;
    this.writer = new RetryingWriter({ isPermanent: (err) => !isRetryable(err), maxDelayMs: 1000, onFault: options.onFault });
  }

  private readonly maxQueued: number;

  /** Queues one event; never throws, never waits. */
  append(type: string, data: unknown): void {
    if (this.queued >= this.maxQueued) {
      this.dropped += 1;
      return;
    }
    this.queued += 1;
    const { workflowId, runId, turn } = this.where;
    void this.writer
      .enqueue(() => this.ledger.appendEvent(workflowId, turn, type, data, runId))
      .catch(() => {
        this.dropped += 1;
      })
      .finally(() => {
        this.queued -= 1;
      });
  }

  /** Queues one event of the harness's stream within the rate cap (a token bucket); past it, only counts it. */
  progress(type: string, data: unknown): void {
    const now = Date.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.refilledAt) / 1000) * this.perSecond);
    this.refilledAt = now;
    if (this.tokens < 1) {
      this.rateDropped += 1;
      this.dropped += 1;
      return;
    }
    this.tokens -= 1;
    this.append(type, data);
  }

  /** Queues any other best-effort write (e.g. the session id on the run row). */
  write(fn: () => Promise<unknown>): void {
    void this.writer.enqueue(fn).catch(() => undefined);
  }

  /** Waits up to `ms` for the queue, then gives up on what is left (it is progress, not accounting). */
  async close(ms: number): Promise<void> {
    if (this.dropped > 0) {
      // Past the queue's bound on purpose: this one row is how the operator learns the others are missing.
      const { workflowId, runId, turn } = this.where;
      const data = { count: this.dropped, byRateCap: this.rateDropped, perSecond: this.perSecond, burst: this.burst };
      void this.writer.enqueue(() => this.ledger.appendEvent(workflowId, turn, 'progress-events-dropped', data, runId)).catch(() => undefined);
    }
    const drained = await this.writer.drainWithin(ms);
    if (!drained) this.writer.stop('progress events abandoned at the end of the turn');
  }

  get fault(): Error | undefined {
    return this.writer.fault;
  }
}
