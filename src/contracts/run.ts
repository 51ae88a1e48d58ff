/** The run's words: its outcome and phases, budgets, spend, steps and turn inputs. Pure: safe in workflows. */
import type { BlobRef, TextRef } from './text-ref.js';
import type { Usage } from './usage.js';
import type { DeliverableView } from './repository.js';

/** Budget a parent hands to a sub-agent: what it has left. */
export interface InheritedBudget {
  readonly maxTokens: number;
  readonly maxCostUsd: number;
  /** Absolute deadline in epoch ms (workflow time). */
  readonly deadlineMs: number;
  /** Iterations left. */
  readonly maxIterations: number;
  /** Sub-agent levels that may still nest below the child (absent from parents older than the depth limit). */
  readonly maxSubAgentDepth?: number;
}

export type RunOutcome = 'succeeded' | 'failed' | 'stopped' | 'cancelled';
/** Where a run is: the `state` of its status view. */
export type RunPhase = 'starting' | 'running' | 'awaiting_operator' | 'waiting_for_reply' | 'ending' | RunOutcome;
export type GuardrailName = 'iterations' | 'tokens' | 'cost' | 'wallTime';

export interface AgentRunResult {
  readonly workflowId: string;
  readonly status: RunOutcome;
  /** The success result text (its opening, when `resultRef` holds the whole of a large one). */
  readonly result?: string;
  /** A large result, by reference: the whole text is in the ledger's blob store under `resultRef.blob`. */
  readonly resultRef?: BlobRef;
  /** Why the run failed, stopped or was cancelled. */
  readonly reason?: string;
  /** Stable failure type (e.g. `UnknownAgent`, `MalformedEnvelope`), when failed. */
  readonly failureType?: string;
  readonly guardrail?: GuardrailName;
  /** Turns of this run; sub-agents' turns count against its iteration budget but are their own runs' turns. */
  readonly iterations: number;
  /** Turns of its sub-agents, their own sub-agents' included (absent when none ran): the tree's turns are both. */
  readonly subAgentIterations?: number;
  /** Tokens of this run and of its sub-agents. */
  readonly usage: Usage;
  readonly costUsd: number;
  /** Some spend of the run (or of a sub-agent) could not be counted: `usage` and `costUsd` are lower bounds. */
  readonly costBlind?: true;
  readonly externalSessionId?: string;
  /** What a run on a repository delivered: branch, commits, patch, push and pull request (docs/repositories.md). */
  readonly deliverable?: DeliverableView;
}

/**
 * The turn in flight as its heartbeats tell it (the workflow does not see heartbeats: the client reads them from
 * Temporal's pending-activity details and adds them to the status view).
 */
export interface InFlightTurn {
  readonly turn: number;
  /** Attempt of the turn activity (1 = first). */
  readonly attempt: number;
  /** Tokens the harness reported so far in this turn (not yet in the run's `usage`). */
  readonly tokens: number;
  /** Cost the harness reported so far in this turn, when it reports one. */
  readonly costUsd?: number;
  /** What the harness did last (an activity, writing, a permission request). */
  readonly lastEvent: string;
  readonly events: number;
  readonly pendingApproval?: string;
  /** When the last heartbeat arrived (ISO time). */
  readonly lastHeartbeat?: string;
}

/**
 * The run's end of session keeps failing (it is retried until it succeeds): the run's outcome is decided, but its
 * sandbox, credentials and ledger record are not closed yet. `status` shows it rather than a silent outcome.
 */
export interface SessionEndTrouble {
  readonly state: 'failing';
  /** Rounds of `endSession` that failed (each after its own retries). */
  readonly failures: number;
  readonly lastError: string;
}

/** The accounting of one turn attempt, as `runTurn` recorded it in the ledger (a failed attempt's failure details carry it as `spend`). */
export interface TurnSpend {
  /** Tokens of this attempt (every model call it made); fields unknown where the harness did not say. */
  readonly usage: Usage;
  /** The cost that counts: the price table's when configured and able to price it, else the harness's own. */
  readonly costUsd: number;
  readonly costSource: 'harness' | 'price-table' | 'unknown';
  /** The harness's own cost figure, recorded beside the price table's. */
  readonly harnessCostUsd?: number;
  /** Both figures exist and disagree. */
  readonly costMismatch?: boolean;
  /** The cost cannot be known (usage unknown, or neither price table nor harness cost): `costUsd` is a lower bound. */
  readonly costBlind?: boolean;
  /** The attempt's ledger id (see Ledger.beginAttempt) and Temporal attempt number. */
  readonly attemptId?: string;
  readonly attempt?: number;
  /** Usage events recorded for this attempt (model calls, for harnesses that report per call). */
  readonly calls?: number;
}

/** What the run has left when the workflow schedules a turn: the turn stops its harness when streaming usage crosses it. */
export interface TurnBudget {
  /** Tokens left (input, output, reasoning, cache reads and writes). */
  readonly tokens?: number;
  /** USD left. */
  readonly costUsd?: number;
}

/** A step as the workflow sees it: what it needs to decide, with large texts by reference. */
export type StepView =
  | { readonly step: 'success'; readonly result: TextRef }
  | { readonly step: 'failed'; readonly reason: TextRef }
  | {
      readonly step: 'actions';
      /** Each call's name, and why it must not run when validation found its parameters invalid. */
      readonly calls: readonly { readonly name: string; readonly problem?: string }[];
      readonly message?: string;
    }
  | { readonly step: 'sub-agent'; readonly agent: string; readonly message: TextRef; readonly terminateAfter: boolean }
  | { readonly step: 'chat'; readonly message: TextRef };

/** One action call of an `actions` step as the workflow decided it: run (with its ledger seq) or refused. */
export type PlannedCall =
  | { readonly index: number; readonly name: string; readonly seq: number }
  | { readonly index: number; readonly name: string; readonly refused: string };

/** What the next turn gets. The turn activity composes the harness's input from it. */
export type TurnInput =
  /** Text parts joined in order (the task, a reply, a sub-agent's result, ...); large parts by reference. */
  | { readonly kind: 'prompt'; readonly parts: readonly TextRef[] }
  /** The last reply was not a valid envelope (or was too large): tell the harness what was wrong. */
  | { readonly kind: 'feedback'; readonly problem: string }
  /** Run the approved actions of the envelope recorded at `envelopeSeq`, then send their results. */
  | { readonly kind: 'actions'; readonly envelopeSeq: number; readonly calls: readonly PlannedCall[] };

export interface ActionOutcome {
  readonly ok: boolean;
  readonly output?: unknown;
  readonly error?: string;
}

/** One entry of a replayed conversation. */
export interface ConversationEntry {
  readonly role: 'user' | 'assistant';
  readonly text: string;
}
