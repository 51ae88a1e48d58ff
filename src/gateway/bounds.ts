/**
 * The bounds that keep one run from harming the others on a shared worker: the limits, a token bucket for the request
 * rate, and the recorder that folds refusals over the rate into a count instead of one audit row each.
 */
import type { NetworkRecord } from '../contracts/network.js';

/** A gateway's limits; `openGateway` takes overrides (tests shorten the timeouts). */
export interface GatewayLimits {
  /** Largest request body from the sandbox (413 beyond). */
  readonly maxBodyBytes: number;
  /** Open connections per gateway; more are closed on arrival. */
  readonly maxConnections: number;
  /** Token bucket: requests that may arrive at once, and the refill per second (429 beyond). */
  readonly burst: number;
  readonly perSecond: number;
  /** A connection must finish sending its request head within this (slowloris). */
  readonly headersTimeoutMs: number;
  /** … and its whole request (head and body) within this. */
  readonly requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  readonly keepAliveTimeoutMs: number;
  /** A tunnel with no bytes either way for this long is closed. */
  readonly tunnelIdleMs: number;
  /** At most one `refused:rate` row per kind per this interval, carrying the count suppressed. */
  readonly rateRecordEveryMs: number;
}

export const defaultLimits: GatewayLimits = {
  maxBodyBytes: 32 * 1024 * 1024,
  maxConnections: 64,
  burst: 200,
  perSecond: 50,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 300_000,
  keepAliveTimeoutMs: 5_000,
  tunnelIdleMs: 600_000,
  rateRecordEveryMs: 1_000,
};

/** A token bucket: `take()` is true while the rate allows one more request. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly burst: number,
    private readonly perSecond: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = burst;
    this.last = now();
  }

  take(): boolean {
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.perSecond);
    this.last = t;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/**
 * Emits audit rows. Refusals over the rate are counted per kind; the next row of that kind carries the count in
 * `suppressed`, and a lasting flood makes at most one `refused:rate` row per kind per interval (and one at `flush`).
 */
export class Recorder {
  private readonly suppressed = new Map<NetworkRecord['kind'], number>();
  private readonly lastRateRow = new Map<NetworkRecord['kind'], number>();

  constructor(
    private readonly emit: (record: NetworkRecord) => void,
    private readonly everyMs: number,
  ) {}

  record(record: NetworkRecord): void {
    const pending = this.suppressed.get(record.kind) ?? 0;
    this.suppressed.delete(record.kind);
    this.safeEmit(pending > 0 ? { ...record, suppressed: pending } : record);
  }

  /** A request refused over the rate: a row now and then, a count otherwise. */
  overRate(record: NetworkRecord): void {
    const last = this.lastRateRow.get(record.kind);
    if (last === undefined || record.at - last >= this.everyMs) {
      this.lastRateRow.set(record.kind, record.at);
      this.record(record);
      return;
    }
    this.suppressed.set(record.kind, (this.suppressed.get(record.kind) ?? 0) + 1);
  }

  /** Rows for the counts still pending (at close). */
  flush(at: number): void {
    for (const [kind, count] of this.suppressed) {
      this.safeEmit({ at, kind, method: '', destination: '', path: '', status: 429, bytesIn: 0, bytesOut: 0, decision: 'refused', rule: 'refused:rate', durationMs: 0, suppressed: count });
    }
    this.suppressed.clear();
  }

  /** A throwing sink must not break the gateway's request handling. */
  private safeEmit(record: NetworkRecord): void {
    try {
      this.emit(record);
    } catch {
      // the sink's problem; the request goes on
    }
  }
}
