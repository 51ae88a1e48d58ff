/** `turnSpent`: what one turn spent by the ledger's books. */
import type { Usage } from '../adapters/types.js';
import type { Deps } from './deps.js';
import { waitForLedger } from './ledger-wait.js';

export interface TurnSpentInput {
  readonly workflowId: string;
  readonly runId: string;
  readonly turn: number;
}

/**
 * Every call of every attempt (failed, cancelled, lost with its worker). The workflow asks when a run is
 * interrupted mid-turn, whose spend no turn result or failure brought it.
 */
export async function turnSpent(deps: Deps, input: TurnSpentInput): Promise<{ usage: Usage; costUsd: number; costBlind: boolean; attempts?: number }> {
  const totals = await waitForLedger(() => deps.ledger.runTotals(input.workflowId, input.runId, { turn: input.turn }));
  // `attempts`: how many attempts of the turn began (the workflow tells attempts a frozen worker never ran).
  return { usage: totals.usage, costUsd: totals.costUsd, costBlind: totals.costBlind, attempts: totals.attempts };
}
