/**
 * The activities' side of redaction: one redactor per catalog with every secret the worker could hand a
 * harness, and failures rebuilt so that no harness string reaches Temporal unredacted (message, details,
 * stack trace).
 */
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type { Catalog } from '../catalog/schema.js';
import { createRedactor, knownSecrets, redactDeep, type CredentialStore, type Redactor } from '../credentials/index.js';

export { redactDeep, redactStream, type Redactor } from '../credentials/index.js';

/** A redactor for every secret the worker could hand any harness under `catalog`, plus `extra`. */
export function harnessRedactor(
  catalog: Catalog,
  store: CredentialStore | undefined,
  env: Readonly<Record<string, string | undefined>>,
  extra: readonly string[] = [],
): Redactor {
  return createRedactor([...knownSecrets(catalog, store, env), ...extra]);
}

/**
 * `error` with every string redacted, ready to throw out of an activity. Cancellation passes through
 * untouched (its message is the runtime's own); anything else is rebuilt, dropping causes and stacks that
 * could still hold the original text.
 */
export function redactFailure(error: unknown, redact: Redactor): unknown {
  if (error instanceof CancelledFailure || (error instanceof Error && error.name === 'AbortError')) return error;
  if (error instanceof ApplicationFailure) {
    return ApplicationFailure.create({
      message: redact(error.message),
      type: error.type ?? undefined,
      nonRetryable: error.nonRetryable ?? undefined,
      details: redactDeep(error.details ?? [], redact) as unknown[],
      nextRetryDelay: error.nextRetryDelay,
      category: error.category ?? undefined,
    });
  }
  if (error instanceof Error) {
    const copy = new Error(redact(error.message));
    copy.name = error.name;
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string') Object.assign(copy, { code: redact(code) });
    copy.stack = error.stack === undefined ? undefined : redact(error.stack);
    return copy;
  }
  return new Error(redact(String(error)));
}
