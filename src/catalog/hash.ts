/** A short content hash of a catalog: workers on one task queue must serve the same one. */
import { createHash } from 'node:crypto';
import type { Catalog } from './schema.js';

/** JSON with object keys sorted, so the same catalog always hashes the same. */
function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** 12 hex digits of the SHA-256 of the parsed catalog (formatting and comments do not count). */
export function catalogHash(catalog: Catalog): string {
  return createHash('sha256').update(stableJson(catalog)).digest('hex').slice(0, 12);
}
