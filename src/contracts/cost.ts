/**
 * The one cost rule: the price table prices the tokens when it can price every call; the harness's own figure is
 * kept beside it (and a disagreement flagged); without either the cost is blind. Pure: safe in workflows.
 */
import { billedOutput, type Prices, type Usage } from './usage.js';

/** Where a cost figure came from: the catalog's price table, the harness's own report, or nowhere. */
export type CostSource = 'price-table' | 'harness' | 'unknown';

/** Cost of some calls, from the price table and from the harness, and which one counts. */
export interface CostView {
  /** The figure that counts: the price table's when it could price every call, else the harness's, else what could be priced. */
  readonly costUsd: number;
  readonly costSource: CostSource;
  /** The harness's own figure, recorded beside the price table's. */
  readonly harnessCostUsd?: number;
  /** The price table's figure, when it could price every call. */
  readonly priceUsd?: number;
  /** Both figures exist and disagree (more than rounding). */
  readonly costMismatch: boolean;
  /** The cost cannot be known: usage unknown, or no price table and no harness cost. `costUsd` is then a lower bound. */
  readonly costBlind: boolean;
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

/** One call's figures as the ledger stores them. */
export interface CallCost {
  readonly priceUsd?: number;
  readonly harnessCostUsd?: number;
  /** The call's usage said nothing (tokens were spent, nobody knows how many): the attempt's cost is blind. */
  readonly unknown?: boolean;
}

/** What is known about an attempt beyond its calls. */
export interface AttemptCostFacts {
  /** A price table applied to this attempt. */
  readonly priced: boolean;
  /** The harness reported no usage for a turn that ran: tokens were spent and nobody counted them. */
  readonly usageMissing: boolean;
}

const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);

/** The cost of one attempt from its calls. */
export function attemptCost(calls: readonly CallCost[], facts: AttemptCostFacts): CostView {
  const harness = calls.flatMap((c) => (c.harnessCostUsd === undefined ? [] : [c.harnessCostUsd]));
  const harnessCostUsd = harness.length > 0 ? sum(harness) : undefined;
  const priceable = facts.priced && !facts.usageMissing && calls.every((c) => c.priceUsd !== undefined);
  const priceUsd = priceable ? sum(calls.map((c) => c.priceUsd ?? 0)) : undefined;
  let costUsd: number;
  let costSource: CostSource;
  if (priceUsd !== undefined) {
    costUsd = priceUsd;
    costSource = 'price-table';
  } else if (harnessCostUsd !== undefined) {
    costUsd = harnessCostUsd;
    costSource = 'harness';
  } else {
    costUsd = sum(calls.map((c) => c.priceUsd ?? 0));
    costSource = calls.length === 0 && !facts.usageMissing ? (facts.priced ? 'price-table' : 'unknown') : 'unknown';
  }
  // A call nobody counted is in no figure, the harness's own included (it computes its cost from the usage it saw):
  // what there is stays as a lower bound, and the cost is blind.
  if (calls.some((c) => c.unknown)) costSource = 'unknown';
  const costBlind = costSource === 'unknown' && (calls.length > 0 || facts.usageMissing);
  const costMismatch = priceUsd !== undefined && harnessCostUsd !== undefined && costsDiffer(priceUsd, harnessCostUsd);
  return {
    costUsd,
    costSource,
    ...(harnessCostUsd !== undefined ? { harnessCostUsd } : {}),
    ...(priceUsd !== undefined ? { priceUsd } : {}),
    costMismatch,
    costBlind,
  };
}

/** The cost of several attempts (a turn, a run). */
export function combinedCost(attempts: readonly CostView[]): CostView {
  const harness = attempts.flatMap((a) => (a.harnessCostUsd === undefined ? [] : [a.harnessCostUsd]));
  const priced = attempts.every((a) => a.priceUsd !== undefined);
  const costBlind = attempts.some((a) => a.costBlind);
  const sources = new Set(attempts.map((a) => a.costSource));
  const costSource: CostSource = costBlind || attempts.length === 0 ? 'unknown' : sources.size === 1 ? [...sources][0]! : 'harness';
  return {
    costUsd: sum(attempts.map((a) => a.costUsd)),
    costSource: attempts.length === 0 ? 'unknown' : costSource,
    ...(harness.length > 0 ? { harnessCostUsd: sum(harness) } : {}),
    ...(priced && attempts.length > 0 ? { priceUsd: sum(attempts.map((a) => a.priceUsd ?? 0)) } : {}),
    costMismatch: attempts.some((a) => a.costMismatch),
    costBlind,
  };
}
