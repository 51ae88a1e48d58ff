/**
 * Token arithmetic shared by the workflow, the activities, the adapters, the ledger and the command line.
 * Pure: safe in workflows. Every read or combination of `Usage` fields goes through here, so the representation
 * (fields `number | undefined`, unknown is not zero) can change in one place.
 */
import type { Usage } from '../adapters/types.js';
import type { Prices } from '../catalog/schema.js';

export type { Usage };

/** The usage fields, in a fixed order. */
export const usageFields = ['input', 'output', 'cacheRead', 'cacheWrite', 'reasoning'] as const;
export type UsageField = (typeof usageFields)[number];

/** Nothing counted yet: every field unknown. The neutral element of `addUsage`. */
export const noUsage: Usage = Object.freeze({});

/** A `Usage` from raw counts: non-finite or negative counts and `null` become unknown (undefined), never zero. */
export function usageOf(fields: { readonly [K in UsageField]?: number | null | undefined }): Usage {
  const out: { -readonly [K in UsageField]?: number } = {};
  for (const f of usageFields) {
    const v = fields[f];
    if (typeof v === 'number' && Number.isFinite(v) && v >= 0) out[f] = v;
  }
  return out;
}

/** A `Usage` from untrusted JSON (a stored or attached object): only finite, non-negative numbers count. */
export function usageFromJson(value: unknown): Usage | undefined {
  if (!value || typeof value !== 'object') return undefined;
  return usageOf(value as { readonly [K in UsageField]?: number });
}

/** Field-wise sum; a field stays unknown only when it is unknown on both sides. */
export function addUsage(a: Usage, b: Usage): Usage {
  const out: { -readonly [K in UsageField]?: number } = {};
  for (const f of usageFields) {
    const x = a[f];
    const y = b[f];
    if (x !== undefined || y !== undefined) out[f] = (x ?? 0) + (y ?? 0);
  }
  return out;
}

/** `total - before`, field-wise and never below zero (for harnesses that report running totals). */
export function subtractUsage(total: Usage, before: Usage): Usage {
  const out: { -readonly [K in UsageField]?: number } = {};
  for (const f of usageFields) {
    const x = total[f];
    if (x !== undefined) out[f] = Math.max(0, x - (before[f] ?? 0));
  }
  return out;
}

/** Whether the harness said anything about these tokens (at least one field known). */
export function usageKnown(u: Usage): boolean {
  return usageFields.some((f) => u[f] !== undefined);
}

/** What the token guardrail counts: every known field — input, output, reasoning, cache reads and cache writes. */
export function totalTokens(u: Usage): number {
  let sum = 0;
  for (const f of usageFields) sum += u[f] ?? 0;
  return sum;
}

/** One field as a number for display, `undefined` when unknown. */
export function usageField(u: Usage, f: UsageField): number | undefined {
  return u[f];
}

/** Output tokens as billed: output plus reasoning (thinking tokens are billed at the output price). */
export function billedOutput(u: Usage): number {
  return (u.output ?? 0) + (u.reasoning ?? 0);
}

/**
 * Cost from a price table (USD per million tokens), or `undefined` when the input or output count is unknown: a
 * price table cannot price tokens nobody counted. Unknown cache and reasoning counts price as none.
 */
export function priceUsage(prices: Prices, u: Usage): number | undefined {
  if (u.input === undefined || u.output === undefined) return undefined;
  return ((u.input ?? 0) * prices.input + billedOutput(u) * prices.output + (u.cacheRead ?? 0) * prices.cacheRead + (u.cacheWrite ?? 0) * prices.cacheWrite) / 1_000_000;
}

/** Whether two cost figures for the same tokens disagree by more than rounding (1 % and a hundredth of a cent). */
export function costsDiffer(a: number, b: number): boolean {
  const diff = Math.abs(a - b);
  return diff > 0.0001 && diff > 0.01 * Math.max(Math.abs(a), Math.abs(b));
}

/** `1,234 in · 56 out · 7 reasoning · 890 cache read · 0 cache write`, with `?` for unknown fields. */
export function formatUsage(u: Usage): string {
  const n = (v: number | undefined) => (v === undefined ? '?' : v.toLocaleString('en-US'));
  const parts = [`${n(u.input)} in`, `${n(u.output)} out`];
  if (u.reasoning !== undefined) parts.push(`${n(u.reasoning)} reasoning`);
  parts.push(`${n(u.cacheRead)} cache read`, `${n(u.cacheWrite)} cache write`);
  return parts.join(' · ');
}
