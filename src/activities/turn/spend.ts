/**
 * What a turn attempt spent, as the workflow counts it: its harness runs' spend priced by the one cost rule, plus
 * what the earlier attempts of its scheduling spent (Temporal hands the workflow only the last attempt's result or
 * failure, so that is where the earlier ones reach it).
 */
import type { Usage } from '../../adapters/types.js';
import type { Ledger } from '../../ledger/types.js';
import type { TurnResult, TurnSpend } from '../../workflows/types.js';
import { addUsage, noUsage } from '../../contracts/usage.js';
import type { TurnAccounting } from './accounting.js';

/** What the attempt's harness runs spent together, priced by the one cost rule (see TurnAccounting.spend). */
export function spendOf(runs: readonly { readonly accounting: TurnAccounting }[], attempt: number, usageMissing = false): TurnSpend {
  const spends = runs.map((r, i) => r.accounting.spend(usageMissing && i === runs.length - 1));
  const harness = spends.flatMap((s) => (s.harnessCostUsd === undefined ? [] : [s.harnessCostUsd]));
  const last = runs.at(-1);
  return {
    usage: spends.reduce((u, s) => addUsage(u, s.usage), noUsage),
    costUsd: spends.reduce((n, s) => n + s.costUsd, 0),
    costSource: spends.some((s) => s.costBlind) ? 'unknown' : (spends.at(-1)?.costSource ?? 'unknown'),
    ...(harness.length > 0 ? { harnessCostUsd: harness.reduce((a, b) => a + b, 0) } : {}),
    costMismatch: spends.some((s) => s.costMismatch),
    costBlind: spends.some((s) => s.costBlind),
    ...(last ? { attemptId: last.accounting.attemptId } : {}),
    attempt,
    calls: spends.reduce((n, s) => n + s.calls, 0),
  };
}

/** The spend of a turn's earlier attempts, from their ledger rows. */
export interface EarlierSpend {
  readonly usage: Usage;
  readonly costUsd: number;
  readonly costBlind: boolean;
}

/** What the attempts of this scheduling before `attemptId` spent, as their ledger rows say; none when there are none. */
export async function earlierSpend(ledger: Ledger, workflowId: string, runId: string, turn: number, scheduling: string, attemptId: string): Promise<EarlierSpend | undefined> {
  const rows = (await ledger.listPromptRuns(workflowId, runId)).filter(
    (r) => r.turn === turn && r.attemptId.startsWith(`${scheduling}:`) && r.attemptId !== attemptId && !r.attemptId.startsWith(`${attemptId}:`),
  );
  if (rows.length === 0) return undefined;
  return { usage: rows.reduce((u, r) => addUsage(u, r.usage), noUsage), costUsd: rows.reduce((n, r) => n + r.costUsd, 0), costBlind: rows.some((r) => r.costBlind) };
}

/** The attempt's spend plus its earlier attempts'. */
export function withEarlier(spend: TurnSpend, earlier: EarlierSpend | undefined): TurnSpend {
  if (!earlier) return spend;
  const costBlind = spend.costBlind === true || earlier.costBlind;
  return { ...spend, usage: addUsage(spend.usage, earlier.usage), costUsd: spend.costUsd + earlier.costUsd, ...(costBlind ? { costBlind: true, costSource: 'unknown' as const } : {}) };
}

/** The accounting part of a turn's result, as the workflow keeps it (small: flags only when set). */
export function resultOf(spend: TurnSpend, run: { readonly usageReported: boolean }): Pick<TurnResult, 'usage' | 'costUsd' | 'costSource' | 'usageReported' | 'costBlind'> {
  return { usage: spend.usage, costUsd: spend.costUsd, costSource: spend.costSource, usageReported: run.usageReported, ...(spend.costBlind ? { costBlind: true } : {}) };
}
