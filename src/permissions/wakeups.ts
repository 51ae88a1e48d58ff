/**
 * Wakes a turn that waits for an operator's decision when that decision is written on the same worker process (the
 * approve/deny update's local activity), so an instant approval reaches the harness in milliseconds instead of at the
 * next ledger poll. The poll stays: it is how a decision written by another host, or before a restart, arrives.
 *
 * A waiter subscribes before it first reads the row, so a decision written between the read and the wait is not
 * lost: it is remembered and the next wait returns at once.
 */

/** One ask's subscription: `wait` returns after `ms`, on a wake-up (also one that came before it), or on abort. */
export interface ApprovalWaiter {
  wait(ms: number, signal?: AbortSignal): Promise<void>;
  close(): void;
}

export class ApprovalWakeups {
  private readonly waiters = new Map<string, Set<{ woken: boolean; wake?: () => void }>>();

  /** Subscribes to the decision of one request. Close it when the ask is over (the map holds only open asks). */
  subscribe(workflowId: string, requestId: string): ApprovalWaiter {
    const key = keyOf(workflowId, requestId);
    const entry: { woken: boolean; wake?: () => void } = { woken: false };
    let set = this.waiters.get(key);
    if (!set) this.waiters.set(key, (set = new Set()));
    set.add(entry);
    return {
      wait: (ms, signal) =>
        new Promise<void>((resolve, reject) => {
          if (signal?.aborted) return reject(signal.reason ?? new Error('aborted'));
          if (entry.woken) {
            entry.woken = false;
            return resolve();
          }
          const done = (): void => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            entry.wake = undefined;
            entry.woken = false;
            resolve();
          };
          const onAbort = (): void => {
            clearTimeout(timer);
            entry.wake = undefined;
            reject(signal?.reason ?? new Error('aborted'));
          };
          const timer = setTimeout(done, ms);
          entry.wake = done;
          signal?.addEventListener('abort', onAbort, { once: true });
        }),
      close: () => {
        set.delete(entry);
        if (set.size === 0) this.waiters.delete(key);
      },
    };
  }

  /** A decision of this request was written: every waiter of it reads the row now. */
  notify(workflowId: string, requestId: string): void {
    for (const entry of this.waiters.get(keyOf(workflowId, requestId)) ?? []) {
      if (entry.wake) entry.wake();
      else entry.woken = true;
    }
  }
}

const keyOf = (workflowId: string, requestId: string): string => `${workflowId}\u0000${requestId}`;
