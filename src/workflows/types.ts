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

/** What one turn produced, as `runTurn` returns it (secrets already redacted). */
export type TurnOutcome =
  | {
      readonly ok: true;
      readonly text: string;
      readonly usage: Usage;
      readonly costUsd: number;
      readonly costSource: 'harness' | 'price-table' | 'unknown';
      readonly usageReported: boolean;
      readonly model?: string;
      readonly externalSessionId?: string;
      readonly resumed: boolean;
      readonly durationMs: number;
    }
  | {
      /** The harness no longer knows the session: start fresh and replay the conversation. */
      readonly ok: false;
      readonly code: 'resume-failed';
      readonly message: string;
    };

/** validateStep's answer: the step with per-action problems, or the feedback to send back. */
export type StepValidation =
  | { readonly ok: true; readonly step: NextStep; readonly actionProblems: readonly (string | undefined)[] }
  | { readonly ok: false; readonly problem: string; readonly feedback: string };

export interface ActionOutcome {
  readonly ok: boolean;
  readonly output?: unknown;
  readonly error?: string;
}
