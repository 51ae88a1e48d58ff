/** Run totals from the ledger's rows, by the one cost rule (src/contracts/cost.ts). Pure. */
import { combinedCost } from '../contracts/cost.js';
import { addUsage, noUsage } from '../contracts/usage.js';
import type { PromptRunRecord, RunTotals } from './types.js';

/** Run (or, given `turn`, that turn's) totals from prompt-run views: every call of every attempt, used or not. */
export function totalsOf(runRows: readonly PromptRunRecord[], turn?: number): RunTotals {
  const rows = turn === undefined ? runRows : runRows.filter((r) => r.turn === turn);
  const unused = rows.filter((r) => !r.outputUsed);
  return {
    usage: rows.reduce((sum, r) => addUsage(sum, r.usage), noUsage),
    calls: rows.reduce((n, r) => n + r.calls, 0),
    attempts: rows.length,
    unusedAttempts: unused.length,
    unusedUsage: unused.reduce((sum, r) => addUsage(sum, r.usage), noUsage),
    ...combinedCost(rows),
  };
}
