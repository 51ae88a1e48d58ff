/**
 * Every token counted in the run's own books (issue 8): what a failed turn spent reaches the run's counters and
 * guardrails, and each turn is told what the run has left so the harness stops mid-turn when it is spent.
 * Pure functions of `RunState`; agent-run.ts calls them.
 */
import type { Ending } from './decide.js';
import type { RunState } from './state.js';
import type { TurnBudget, TurnResult } from './types.js';
import { addUsage, totalTokens } from '../contracts/usage.js';
import type { Usage } from '../adapters/types.js';

/** What a turn spent by the ledger's books (`turnSpent`), every attempt included. */
export interface FailedSpend {
  readonly usage: Usage;
  readonly costUsd: number;
  readonly costBlind: boolean;
}

/** Folds a failed turn's spend into the run: its tokens and cost count toward the guardrails like any turn's. */
export function foldFailedSpend(state: RunState, spend: FailedSpend | undefined): RunState {
  if (!spend) return state;
  return { ...state, usage: addUsage(state.usage, spend.usage), costUsd: state.costUsd + spend.costUsd, costBlind: state.costBlind || spend.costBlind };
}

/** What the run has left for the next turn: the harness is stopped mid-turn when its streaming usage crosses it. */
export function turnBudget(state: RunState): TurnBudget {
  const g = state.policy?.guardrails;
  if (!g) return {};
  return { tokens: Math.max(0, g.maxTokens - totalTokens(state.usage)), costUsd: Math.max(0, g.maxCostUsd - state.costUsd) };
}

/** A turn stopped by its budget ends the run as the guardrail stop, before anything the turn asked for runs. */
export function budgetEnding(result: TurnResult): Ending | undefined {
  if (!result.budgetExhausted) return undefined;
  return { status: 'stopped', guardrail: result.budgetExhausted.guardrail, reason: result.budgetExhausted.message };
}

/** The pause before retrying `endSession` after `failures` failed rounds: 1 s doubling, at most 5 minutes. */
export function untilDoneDelayMs(failures: number): number {
  return Math.min(1000 * 2 ** Math.min(failures, 20), 5 * 60_000);
}
