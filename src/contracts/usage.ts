/**
 * Token arithmetic shared by the workflow, the activities, the adapters, the ledger and the command line.
 * Pure: safe in workflows. Every read or combination of `Usage` fields goes through here, so the representation
 * (fields `number | undefined`, unknown is not zero) can change in one place.
 */
/**
 * Token usage, normalised. A field is `undefined` when the harness did not say: unknown is not zero.
 * `input` excludes cached tokens; `output` excludes `reasoning` (thinking tokens, billed as output) where the
 * harness reports them apart; a harness that folds thinking into its output count leaves `reasoning` undefined.
 * Read and combine it only through this module (`addUsage`, `totalTokens`, `usageKnown`, …).
 */
export interface Usage {
  readonly input?: number | undefined;
  readonly output?: number | undefined;
  readonly cacheRead?: number | undefined;
  readonly cacheWrite?: number | undefined;
  readonly reasoning?: number | undefined;
}

/** A price table: USD per million tokens (the catalog's `prices`, checked there). */
export interface Prices {
  readonly input: number;
  readonly output: number;
  readonly cacheRead: number;
  readonly cacheWrite: number;
}

/** The usage fields, in a fixed order. */
export const usageFields = ['input', 'output', 'cacheRead', 'cacheWrite', 'reasoning'] as const;
export type UsageField = (typeof usageFields)[number];

/** Nothing counted yet: every field unknown. The neutral element of `addUsage`. */
export const noUsage: Usage = Object.freeze({});

/**
 * The largest token count one usage report may carry in a field: a billion. No model call comes near it (context
 * windows hold a few million tokens), and sums of such counts stay exact. A count must be a whole number from 0 to
 * this; a report with any other count is refused as a whole (see `usageOf`).
 */
export const maxReportedTokens = 1_000_000_000;

/** The largest cost one usage report may carry: a million US dollars (a larger figure is refused, unknown). */
export const maxReportedCostUsd = 1_000_000;

/** Raw counts as a harness gives them: `null`/`undefined` = not said. */
export type RawCounts = { readonly [K in UsageField]?: unknown };

/** What is wrong with a report's counts (`input: NaN`, `output: 1e+308`), or `undefined` when every given count is valid. */
export function usageProblem(fields: RawCounts): string | undefined {
  const bad = usageFields.filter((f) => fields[f] !== undefined && fields[f] !== null && !validCount(fields[f]));
  if (bad.length === 0) return undefined;
  return `${bad.map((f) => `${f}: ${String(fields[f])}`).join(', ')} (a count must be a whole number from 0 to ${maxReportedTokens.toLocaleString('en-US')})`;
}

/** Whether `v` is a count a usage report may carry: a whole number from 0 to `maxReportedTokens`. */
export function validCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= maxReportedTokens;
}

/**
 * A `Usage` from raw counts: `null` and `undefined` are unknown fields, never zero. A report with any count that is not
 * a whole number from 0 to `maxReportedTokens` (NaN, 1e308, 1.5, -1, a string) is refused AS A WHOLE: it says tokens
 * were spent and cannot be read, so it becomes unknown usage (cost-blind), and none of its numbers is summed.
 */
export function usageOf(fields: RawCounts): Usage {
  if (usageProblem(fields) !== undefined) return noUsage;
  const out: { -readonly [K in UsageField]?: number } = {};
  for (const f of usageFields) {
    const v = fields[f];
    if (validCount(v)) out[f] = v;
  }
  return out;
}

/** A harness's cost figure: a finite, non-negative number up to `maxReportedCostUsd`, else `undefined` (unknown). */
export function costOf(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 && v <= maxReportedCostUsd ? v : undefined;
}

/** A `Usage` from untrusted JSON (a stored or attached object), refused like a report (`usageOf`). */
export function usageFromJson(value: unknown): Usage | undefined {
  if (!value || typeof value !== 'object') return undefined;
  return usageOf(value as RawCounts);
}

/**
 * A usage event's counts as the books take them, whoever made them: `usage` itself when every field is a valid
 * count, else unknown (`noUsage`). Adapters build `Usage` through `usageOf`; this guards the ones that do not.
 */
export function checkedUsage(usage: Usage): Usage {
  return usageProblem(usage) === undefined ? usage : noUsage;
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



/** `1,234 in · 56 out · 7 reasoning · 890 cache read · 0 cache write`, with `?` for unknown fields. */
export function formatUsage(u: Usage): string {
  const n = (v: number | undefined) => (v === undefined ? '?' : v.toLocaleString('en-US'));
  const parts = [`${n(u.input)} in`, `${n(u.output)} out`];
  if (u.reasoning !== undefined) parts.push(`${n(u.reasoning)} reasoning`);
  parts.push(`${n(u.cacheRead)} cache read`, `${n(u.cacheWrite)} cache write`);
  return parts.join(' · ');
}
