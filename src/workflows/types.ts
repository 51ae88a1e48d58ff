/** Inputs, results and messages of an agent run: shared by the workflow, the activities and the client. Pure. */
import type { Usage } from '../adapters/types.js';
import type { BlobRef, TextRef } from '../blobs/text-ref.js';
import type { RunIdentity, SandboxRef } from '../sandbox/types.js';
import type { RunPolicy } from '../spec/types.js';
import type { RunState } from './state.js';

export type { BlobRef, TextRef };

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

export interface AgentRunInput {
  /** The agent's name in the catalog. */
  readonly agent: string;
  /** The task; a parent may hand a large one to a sub-agent by reference. */
  readonly task: TextRef;
  /** Verified identity from the caller's authentication, never from model output. */
  readonly identity: RunIdentity;
  readonly parentWorkflowId?: string;
  /** Set by a parent run: its sandbox, for a sub-agent with `workspaceScope: parent`. */
  readonly parentSandbox?: SandboxRef;
  /** Start by resuming this harness session (e.g. from a previous run). */
  readonly resumeSessionId?: string;
  /** Set by a parent run: the child shares the parent's remaining budget. */
  readonly budget?: InheritedBudget;
  /** Continue-as-new after this many turns in one execution (default: when Temporal suggests it, or by history size). */
  readonly continueAsNewAfterTurns?: number;
  /** Continue-as-new once the history passes this many bytes (default 4 MB). */
  readonly continueAsNewAtHistoryBytes?: number;
  /** State carried across continue-as-new; not for callers. */
  readonly carried?: RunState;
  /**
   * The command sequence the run follows (docs/VERSIONING.md): `startAgentRun`, a parent run and continue-as-new set
   * it to `workflowVersion`; a start without it runs the current one. A worker fails a run that names a version it
   * does not run. Not for callers.
   */
  readonly workflowVersion?: number;
}

/**
 * The command sequence this worker runs, and new runs get. 3: the baseline of 2026-12-02, every earlier patch applied
 * without asking and no eager dispatch of pinned turns; versions 1 and 2 were retired (docs/VERSIONING.md).
 */
export const workflowVersion = 3;

/** The details of a failed `openRun` whose agent resolved before its session failed to start. */
export interface OpenRunFailure {
  readonly policy: RunPolicy;
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

/** Answer of the `status` query: the run's state itself, plus its token total (and, from the client, the turn in flight). */
export type RunStatusView = RunState & { readonly totalTokens: number; readonly inFlight?: InFlightTurn; readonly sessionEnd?: SessionEndTrouble };

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

/** A sandbox reference as a turn request carries it. */
export type TurnSandbox = Omit<SandboxRef, 'hostWorkspacePath'> & { readonly hostWorkspacePath?: string };

/** The sandbox reference without what repeats itself; `expandSandbox` undoes it. */
export function compactSandbox(ref: SandboxRef): TurnSandbox {
  const { hostWorkspacePath, ...rest } = ref;
  return hostWorkspacePath === ref.workspacePath ? rest : ref;
}

export function expandSandbox(ref: TurnSandbox): SandboxRef {
  return { ...ref, hostWorkspacePath: ref.hostWorkspacePath ?? ref.workspacePath };
}

/** The turn activity's request: references and small values only (the run's ids come from the activity's info). */
export interface TurnRequest {
  readonly turn: number;
  readonly specHash: string;
  /** The sandbox; `hostWorkspacePath` is left out when it equals `workspacePath` (bytes of history per turn). */
  readonly sandbox: TurnSandbox;
  readonly input: TurnInput;
  /** Resume this harness session; without it the turn starts fresh, with earlier turns replayed if `replay`. */
  readonly resumeSessionId?: string;
  /** Replay this run's earlier turns (from the ledger) into a fresh session. */
  readonly replay?: boolean;
  /** Ledger seq for this turn's envelope step. */
  readonly envelopeSeq: number;
  /** The run's budget left: streaming usage that crosses it stops the harness mid-turn (`budgetExhausted`). */
  readonly budget?: TurnBudget;
  /** No longer set by the workflow (eager dispatch of pinned turns is gone); read by the activities until they drop it. */
  readonly onlyOnHost?: true;
  /** Kill what earlier attempts of this turn may have left running before starting (a retry after frozen attempts or an operator's). */
  readonly cleanFirst?: true;
}

/** What a turn produced, as the workflow keeps it (secrets redacted, large texts by reference). */
export interface TurnResult {
  readonly usage: Usage;
  readonly costUsd: number;
  readonly costSource: 'harness' | 'price-table' | 'unknown';
  readonly usageReported: boolean;
  readonly externalSessionId?: string;
  /** Set when the harness had forgotten the session: the turn started fresh with the conversation replayed. */
  readonly resumeFailed?: string;
  /** The cost cannot be known (tokens spent that nobody counted, or no price table and no harness cost): set only when true. */
  readonly costBlind?: true;
  /** The turn's streaming usage crossed `TurnRequest.budget`: the harness was stopped mid-turn (the step is not ok). */
  readonly budgetExhausted?: { readonly guardrail: 'tokens' | 'cost'; readonly message: string };
  /** No longer read by the workflow (eager dispatch of pinned turns is gone); set by the activities until they drop it. */
  readonly hostIdle?: true;
  /**
   * The harness asked more permission requests in this turn than its agent allows (`permissions.maxRequestsPerTurn`):
   * the first `cap` were decided, the `denied` after them were denied at once without asking anyone.
   */
  readonly permissionRequestsOverCap?: { readonly cap: number; readonly denied: number };
  /** The envelope, or what was wrong with the reply. */
  readonly step: { readonly ok: true; readonly view: StepView } | { readonly ok: false; readonly problem: string; readonly tooLarge?: boolean };
}

/** validateStep's answer: the step with per-action parameter problems, or the problem to feed back. */
export type StepValidation =
  | { readonly ok: true; readonly step: import('../envelope/types.js').NextStep; readonly actionProblems: readonly (string | undefined)[] }
  | { readonly ok: false; readonly problem: string; readonly feedback: string };

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
