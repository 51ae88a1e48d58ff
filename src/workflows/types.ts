/** Inputs, results and views of an agent run: shared by the workflow, the activities and the client. */
import type { Capabilities, PermissionPosture, Usage } from '../adapters/types.js';
import type { NextStep } from '../envelope/types.js';
import type { PermissionPolicy } from '../permissions/policy.js';
import type { RunIdentity, SandboxRef, SandboxSpec } from '../sandbox/types.js';

/** Budget a parent hands to a sub-agent: what it has left. */
export interface InheritedBudget {
  readonly maxTokens: number;
  readonly maxCostUsd: number;
  /** Absolute deadline in epoch ms (workflow time). */
  readonly deadlineMs: number;
  /** Iterations left. */
  readonly maxIterations: number;
}

export interface AgentRunInput {
  /** The agent's name in the catalog. */
  readonly agent: string;
  readonly task: string;
  /** Verified identity from the caller's authentication, never from model output. */
  readonly identity: RunIdentity;
  readonly parentWorkflowId?: string;
  /** Start by resuming this harness session (e.g. from a previous run). */
  readonly resumeSessionId?: string;
  /** Set by a parent run: the child shares the parent's remaining budget. */
  readonly budget?: InheritedBudget;
  /** Continue-as-new after this many turns in one execution (default: when Temporal suggests it). */
  readonly continueAsNewAfterTurns?: number;
  /** State carried across continue-as-new; not for callers. */
  readonly carried?: CarriedState;
}

export type RunOutcome = 'succeeded' | 'failed' | 'stopped' | 'cancelled';
export type RunState = 'starting' | 'running' | 'awaiting_operator' | 'waiting_for_reply' | 'ending' | RunOutcome;
export type GuardrailName = 'iterations' | 'tokens' | 'cost' | 'wallTime';

export interface AgentRunResult {
  readonly workflowId: string;
  readonly status: RunOutcome;
  /** The success result text. */
  readonly result?: string;
  /** Why the run failed, stopped or was cancelled. */
  readonly reason?: string;
  /** Stable failure type (e.g. `UnknownAgent`, `MalformedEnvelope`), when failed. */
  readonly failureType?: string;
  readonly guardrail?: GuardrailName;
  /** Turns of this run; sub-agents' turns count against its iteration budget but are their own runs' turns. */
  readonly iterations: number;
  /** Tokens of this run and of its sub-agents. */
  readonly usage: Usage;
  readonly costUsd: number;
  readonly externalSessionId?: string;
}

/** Answer of the `status` query. */
export interface RunStatusView {
  readonly state: RunState;
  readonly agent: string;
  readonly harness?: string;
  readonly iteration: number;
  readonly usage: Usage;
  readonly totalTokens: number;
  readonly costUsd: number;
  /** True when the harness reports no usage and no price applies: the cost guardrail is blind. */
  readonly costBlind: boolean;
  readonly lastStep?: NextStep;
  readonly externalSessionId?: string;
  /** What is happening now, in words. */
  readonly detail: string;
  readonly pendingQuestion?: string;
  readonly lastError?: string;
  readonly malformedInARow: number;
  readonly actionCounts: Readonly<Record<string, number>>;
}

/** The agent as resolved from the catalog at run start; frozen into history so config changes never break replay. */
export interface AgentSpec {
  readonly agent: string;
  readonly harness: string;
  readonly driverClass: string;
  readonly vendor: string;
  readonly model: string;
  readonly promptId: string;
  readonly capabilities: Capabilities;
  readonly permissions: PermissionPosture;
  /** The agent's permission policy (posture + rules); absent in specs frozen before policies existed. */
  readonly permissionPolicy?: PermissionPolicy;
  /**
   * Whether the policy is really enforced: false only when the catalog accepted it as advisory on a harness that
   * cannot ask before a tool runs (`permissions.advisory: true`). Status and ledger show it.
   */
  readonly permissionsEnforced?: boolean;
  readonly sandbox: SandboxSpec;
  readonly guardrails: { maxIterations: number; maxTokens: number; maxCostUsd: number; maxWallTimeMs: number };
  readonly actions: readonly { name: string; maxExecutionsPerRun?: number }[];
  readonly subAgents: readonly string[];
  readonly maxMalformedTurns: number;
  readonly chatTimeoutMs: number;
  readonly operatorTimeoutMs: number;
  readonly turnAttempts: number;
  readonly turnTimeoutMs: number;
  /** Whether a price table exists for this harness. */
  readonly priced: boolean;
}

export interface ConversationEntry {
  readonly role: 'user' | 'assistant';
  readonly text: string;
}

/** State carried across continue-as-new. */
export interface CarriedState {
  readonly spec: AgentSpec;
  readonly sandbox: SandboxRef;
  readonly iteration: number;
  readonly childIterations: number;
  readonly usage: Usage;
  readonly costUsd: number;
  readonly nextPrompt: string;
  readonly externalSessionId?: string;
  readonly conversation: readonly ConversationEntry[];
  readonly actionCounts: Readonly<Record<string, number>>;
  readonly malformedInARow: number;
  readonly deadlineMs: number;
  readonly stepSeq: number;
  readonly costBlind: boolean;
}

/** The accounting of one turn attempt, as `runTurn` recorded it in the ledger (secrets never in it). */
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

/**
 * What one turn produced, as `runTurn` returns it (secrets already redacted). Every variant carries the attempt's
 * spend: it is already in the ledger, so the workflow only adds it to its counters.
 */
export type TurnOutcome =
  | (TurnSpend & {
      readonly ok: true;
      readonly text: string;
      /** The harness reported usage for this turn (false: its tokens are unknown, see `costBlind`). */
      readonly usageReported: boolean;
      readonly model?: string;
      readonly externalSessionId?: string;
      readonly resumed: boolean;
      readonly durationMs: number;
    })
  | (TurnSpend & {
      /** The harness no longer knows the session: start fresh and replay the conversation. */
      readonly ok: false;
      readonly code: 'resume-failed';
      readonly message: string;
    })
  | (TurnSpend & {
      /** Streaming usage crossed the run's remaining budget (`TurnInput.budget`): the harness was stopped mid-turn. */
      readonly ok: false;
      readonly code: 'budget-exhausted';
      readonly guardrail: 'tokens' | 'cost';
      readonly message: string;
      readonly externalSessionId?: string;
      readonly durationMs: number;
    });

/** validateStep's answer: the step with per-action problems, or the feedback to send back. */
export type StepValidation =
  | { readonly ok: true; readonly step: NextStep; readonly actionProblems: readonly (string | undefined)[] }
  | { readonly ok: false; readonly problem: string; readonly feedback: string };

export interface ActionOutcome {
  readonly ok: boolean;
  readonly output?: unknown;
  readonly error?: string;
}
