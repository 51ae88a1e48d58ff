/**
 * Redaction: every string that crosses from a harness into the runtime — text, session ids, models, usage,
 * event payloads, error messages, stderr tails — passes through a redactor before it reaches workflow
 * history, the ledger, status, heartbeats or logs. It replaces each known secret value, verbatim and in its
 * JSON-escaped and URL-encoded forms, with `[REDACTED]`.
 */
import type { AgentConfig, Catalog, HarnessConfig } from '../catalog/schema.js';
import { resolveCredentials, vendorFallbackVariable, type CredentialStore } from './resolve.js';

/** Replaces secrets in one string. */
export type Redactor = (text: string) => string;

/** Shortest secret worth redacting; shorter values would mangle ordinary text. */
const MIN_SECRET_LENGTH = 4;

export const redactedMarker = '[REDACTED]';

/** Returns a function that replaces every secret (raw, JSON-escaped, URL-encoded) with `[REDACTED]`. */
export function createRedactor(secrets: Iterable<string>): Redactor {
  const needles = new Set<string>();
  for (const secret of secrets) {
    if (secret.length < MIN_SECRET_LENGTH) continue;
    needles.add(secret);
    needles.add(JSON.stringify(secret).slice(1, -1));
    needles.add(encodeURIComponent(secret));
  }
  // Longest first, so a secret that contains another is replaced whole.
  const ordered = [...needles].sort((a, b) => b.length - a.length);
  return (text: string) => {
    let out = text;
    for (const needle of ordered) {
      if (out.includes(needle)) out = out.split(needle).join(redactedMarker);
    }
    return out;
  };
}

/** A copy of `value` with every string in it — object keys included — redacted. */
export function redactDeep<T>(value: T, redact: Redactor): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return redact(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object' && !(v instanceof Uint8Array)) {
      const out: Record<string, unknown> = {};
      for (const [key, inner] of Object.entries(v)) out[redact(key)] = walk(inner);
      return out;
    }
    return v;
  };
  return walk(value) as T;
}

/** The stream with every item redacted before anyone sees it. */
export async function* redactStream<T>(items: AsyncIterable<T>, redact: Redactor): AsyncIterable<T> {
  for await (const item of items) yield redactDeep(item, redact);
}

/**
 * Every secret value this worker could hand any harness under `catalog`: each agent's grants, the vendor-key
 * fallbacks, and every value in the credential store. A harness that read another agent's key (or the
 * credentials file) still cannot get it into history.
 */
export function knownSecrets(catalog: Pick<Catalog, 'agents' | 'harnesses'>, store: CredentialStore | undefined, env: Readonly<Record<string, string | undefined>>): string[] {
  const secrets = new Set<string>(store?.values?.() ?? []);
  for (const agent of catalog.agents as readonly AgentConfig[]) {
    const harness = (catalog.harnesses as readonly HarnessConfig[]).find((h) => h.name === agent.harness);
    if (!harness) continue;
    try {
      for (const secret of resolveCredentials({ agent, harness, store, env }).secrets) secrets.add(secret);
    } catch {
      // An unmet grant has no value to redact.
    }
  }
  for (const harness of catalog.harnesses as readonly HarnessConfig[]) {
    const value = env[vendorFallbackVariable(harness.driverClass)];
    if (value) secrets.add(value);
  }
  return [...secrets];
}
