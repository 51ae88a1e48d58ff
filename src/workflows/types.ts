/** Inputs, results and messages of an agent run: shared by the workflow, the activities and the client. Pure. */
import type { BlobRef, TextRef } from '../contracts/text-ref.js';
import type { Usage } from '../contracts/usage.js';
import type { RepositoryRequest } from '../contracts/repository.js';
import type { InheritedBudget, RunOutcome, RunPhase, GuardrailName, AgentRunResult, InFlightTurn, SessionEndTrouble, TurnSpend, TurnBudget, StepView, PlannedCall, TurnInput, ActionOutcome, ConversationEntry } from '../contracts/run.js';
import type { RunIdentity, SandboxRef } from '../sandbox/types.js';
import type { RunPolicy } from '../spec/types.js';
import type { RunState } from './state.js';

export type { BlobRef, TextRef };
export type { InheritedBudget, RunOutcome, RunPhase, GuardrailName, AgentRunResult, InFlightTurn, SessionEndTrouble, TurnSpend, TurnBudget, StepView, PlannedCall, TurnInput, ActionOutcome, ConversationEntry };

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
  /** Run on a git repository: source, ref and branch, over the agent's catalog defaults (docs/repositories.md). */
  readonly repository?: RepositoryRequest;
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

/** Answer of the `status` query: the run's state itself, plus its token total (and, from the client, the turn in flight). */
export type RunStatusView = RunState & { readonly totalTokens: number; readonly inFlight?: InFlightTurn; readonly sessionEnd?: SessionEndTrouble };

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
  /**
   * The harness asked more permission requests in this turn than its agent allows (`permissions.maxRequestsPerTurn`):
   * the first `cap` were decided, the `denied` after them were denied at once without asking anyone.
   */
  readonly permissionRequestsOverCap?: { readonly cap: number; readonly denied: number };
  /** Requests the run's egress gateway refused during the turn (set only when some were). */
  readonly networkRefused?: number;
  /** Reads the harness made through the run's MCP loopback this turn (absent: none). */
  readonly loopbackReads?: number;
  /** The envelope, or what was wrong with the reply. */
  readonly step: { readonly ok: true; readonly view: StepView } | { readonly ok: false; readonly problem: string; readonly tooLarge?: boolean };
}

/** validateStep's answer: the step with per-action parameter problems, or the problem to feed back. */
export type StepValidation =
  | { readonly ok: true; readonly step: import('../contracts/envelope.js').NextStep; readonly actionProblems: readonly (string | undefined)[] }
  | { readonly ok: false; readonly problem: string; readonly feedback: string };

