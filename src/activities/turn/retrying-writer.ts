/**
 * A serial queue of ledger writes that retries faults instead of failing the turn (accounting waits until its rows
 * land; progress events give up at the end of the turn).
 */
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });

/** Errors a retry cannot fix: they fail the write at once. Everything else (ledger faults, I/O) is retried. */
export type PermanentCheck = (err: unknown) => boolean;

/**
 * A serial queue of ledger writes, in order. A write that fails with a retryable error is tried again with
 * backoff until it lands or the queue is abandoned; `fault` says what it is waiting on.
 */
export class RetryingWriter {
  private tail: Promise<void> = Promise.resolve();
  private waiting = 0;
  private lastFault: Error | undefined;
  private readonly abandon = new AbortController();

  constructor(
    private readonly options: {
      readonly isPermanent: PermanentCheck;
      readonly initialDelayMs?: number;
      readonly maxDelayMs?: number;
      /** Called when a write starts failing (with the error) and when writes land again (undefined). */
      readonly onFault?: (err: Error | undefined) => void;
      /** Called for each write given up by `stop`, with what it would have written (for the operator's log). */
      readonly onAbandoned?: (row: unknown, reason: string) => void;
    },
  ) {}

  /** Writes queued or retrying. */
  get pending(): number {
    return this.waiting;
  }

  /** The error the queue is waiting on, if any. */
  get fault(): Error | undefined {
    return this.lastFault;
  }

  /** Queues a write; the promise settles when it landed (or failed permanently, or the queue was abandoned). */
  enqueue(write: () => Promise<unknown>, row?: unknown): Promise<void> {
    this.waiting += 1;
    const run = this.tail.then(() => this.attempt(write, row));
    this.tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run.finally(() => {
      this.waiting -= 1;
    });
  }

  /** Resolves once every write queued so far has settled. */
  async drain(): Promise<void> {
    await this.tail;
  }

  /** Resolves once drained, or after `ms` (returns whether it drained). */
  async drainWithin(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    const drained = await Promise.race([this.tail.then(() => true as const), timeout]);
    clearTimeout(timer);
    return drained;
  }

  /** Stops retrying: writes still waiting fail with `reason`. */
  stop(reason: string): void {
    this.abandon.abort(new Error(reason));
  }

  private async attempt(write: () => Promise<unknown>, row: unknown): Promise<void> {
    let delay = this.options.initialDelayMs ?? 100;
    for (;;) {
      if (this.abandon.signal.aborted) {
        const reason = this.abandon.signal.reason as Error;
        if (row !== undefined) this.options.onAbandoned?.(row, reason.message);
        throw reason;
      }
      try {
        await write();
        if (this.lastFault) {
          this.lastFault = undefined;
          this.options.onFault?.(undefined);
        }
        return;
      } catch (err) {
        if (this.options.isPermanent(err)) throw err;
        const error = err instanceof Error ? err : new Error(String(err));
        const changed = this.lastFault?.message !== error.message;
        this.lastFault = error;
        if (changed) this.options.onFault?.(error);
        await sleep(delay, this.abandon.signal);
        delay = Math.min(delay * 2, this.options.maxDelayMs ?? 2000);
      }
    }
  }
}
