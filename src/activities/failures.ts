/**
 * The one failure mapper: an error of a known class, or with a stable `code` from the one list (failure-types.ts),
 * becomes the Temporal failure of that type, so the workflow matches on the type, never on `instanceof`.
 */
import { ApplicationFailure } from '@temporalio/activity';
import { BlobMissingError } from '../blobs/index.js';
import { UnresolvedAccountingError } from '../ledger/types.js';
import { FailureTypes } from '../contracts/failures.js';

/** Coded failures a retry can fix: the Docker engine comes back, a gone container is started again. */
const transient = new Set<string>([FailureTypes.DockerUnavailable, FailureTypes.SandboxContainerGone]);

/**
 * The failure `err` stands for. With `fallback` (a catalog lookup) any other error is permanent too, typed by its
 * own `code` or else `fallback`; without it, an error of no known class or code is returned as it is (unknown
 * errors stay retryable).
 */
export function failureOf(err: unknown, fallback?: string): unknown {
  if (err instanceof ApplicationFailure) return err;
  const message = err instanceof Error ? err.message : String(err);
  // Retrying cannot bring a missing blob back, nor make an id resolve.
  if (err instanceof BlobMissingError) return ApplicationFailure.nonRetryable(message, FailureTypes.BlobMissing);
  if (err instanceof UnresolvedAccountingError) return ApplicationFailure.nonRetryable(message, FailureTypes.AccountingUnresolved);
  const code = (err as { code?: unknown } | null | undefined)?.code;
  if (typeof code === 'string' && code in FailureTypes) {
    return transient.has(code) ? ApplicationFailure.retryable(message, code) : ApplicationFailure.nonRetryable(message, code);
  }
  if (fallback !== undefined) return ApplicationFailure.nonRetryable(message, typeof code === 'string' ? code : fallback);
  return err;
}

/** Runs a blob, ledger-id or sandbox call and throws what it fails with as `failureOf` maps it. */
export async function mapped<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw failureOf(err);
  }
}

/** Runs a catalog lookup; whatever it throws is a non-retryable failure with a stable type (`type` by default). */
export function permanent<T>(fn: () => T, type: string): T {
  try {
    return fn();
  } catch (err) {
    throw failureOf(err, type);
  }
}
