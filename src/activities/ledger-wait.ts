/** How activities wait for a ledger that cannot take a write right now (faults, I/O) instead of failing the run. */
import { Context } from '@temporalio/activity';
import { LedgerFaultError } from '../ledger/types.js';

/** Ledger faults and plain I/O errors are retried; a bug (a TypeError, a constraint the code broke) is not. */
export function isRetryable(err: unknown): boolean {
  if (err instanceof LedgerFaultError) return true;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && /^(SQLITE_(BUSY|LOCKED|IOERR|READONLY|FULL|CANTOPEN)|E[A-Z]+|ECONN|57P|08)/.test(code);
}

/**
 * Retries a short activity's ledger write while the ledger cannot take it (faults, I/O), until shortly before the
 * activity's timeout; anything else (a bug, a constraint) fails at once.
 */
export async function waitForLedger<T>(write: () => Promise<T>): Promise<T> {
  let context: Context | undefined;
  try {
    context = Context.current();
  } catch {
    context = undefined; // called outside an activity: no deadline to respect
  }
  const info = context?.info;
  const deadline = info ? info.currentAttemptScheduledTimestampMs + info.startToCloseTimeoutMs - 2000 : Date.now() + 60_000;
  let delay = 100;
  for (;;) {
    try {
      return await write();
    } catch (err) {
      if (!isRetryable(err) || Date.now() + delay > deadline || context?.cancellationSignal.aborted) throw err;
      context?.log.warn('ledger write failed; retrying', { error: (err as Error).message });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 2000);
    }
  }
}
