/**
 * `RunState`: the one state of an agent run. It is the workflow's state, the answer of the status query (with
 * its token total) and the continue-as-new payload — so it stays small: counters, references and short texts,
 * never the conversation (that is in the ledger, and the turn activity replays it from there).
 */
import type { Usage } from '../adapters/types.js';
import type { RunRepository } from '../contracts/repository.js';
import type { SandboxRef } from '../sandbox/types.js';
import type { RunPolicy } from '../spec/types.js';
import type { PendingApprovalView, SettledApprovalView } from './approvals.js';
import type { RunPhase, StepView, TurnInput } from './types.js';

export interface RunState {
  /** Where the run is. */
  readonly state: RunPhase;
  /** What is happening now, in words. */
  readonly detail: string;
  readonly agent: string;
  readonly harness?: string;
  /** The frozen spec's hash and the fields decisions need; set once the agent is resolved. */
  readonly policy?: RunPolicy;
  readonly sandbox?: SandboxRef;
  /** The run's repository, checked out in its workspace (docs/repositories.md); absent on a plain workspace. */
  readonly repository?: RunRepository;
  /** Absolute wall-time deadline (epoch ms, workflow time). */
  readonly deadlineMs: number;
  /** Turns of this run so far. */
  readonly iteration: number;
  /** Turns taken by sub-agents: they share this run's iteration budget. */
  readonly childIterations: number;
  readonly usage: Usage;
  readonly costUsd: number;
  /** True when the harness reports no usage and no price applies: the cost guardrail is blind. */
  readonly costBlind: boolean;
  readonly externalSessionId?: string;
  readonly actionCounts: Readonly<Record<string, number>>;
  readonly malformedInARow: number;
  /** Cursor into the ledger: the last run-step seq handed out (envelopes and actions). */
  readonly stepSeq: number;
  /** What the next turn gets. */
  readonly next?: TurnInput;
  readonly lastStep?: StepView;
  readonly lastError?: string;
  /** The open chat question (its opening, if long). */
  readonly pendingQuestion?: string;
  /** Search-attribute values last written, so they are upserted only when they change. */
  readonly attributes: { readonly status?: string; readonly costUsd?: number; readonly pendingApprovals?: number };
  /** Permission requests waiting for an operator (src/workflows/approvals.ts); absent in runs that never had one. */
  readonly pendingApprovals?: readonly PendingApprovalView[];
  /** The last requests that left the pending list, and who decided them. */
  readonly settledApprovals?: readonly SettledApprovalView[];
  /** Nonces of the signed decisions this run acted on, until they expire: a signature is used once (operator-decisions.ts). */
  readonly decisionNonces?: readonly { readonly nonce: string; readonly expiresAt: string }[];
  /** Executions of this run before the current one (continue-as-new). */
  readonly continuedTimes: number;
  /** Times the run was given a fresh workspace because the host holding it was lost (affinity.ts). */
  readonly hostMoves?: number;
  /** Requests the run's egress gateway refused so far (absent until one was): the Temporal UI's current details say so. */
  readonly networkRefused?: number;
  /** Reads through the run's MCP loopback so far (absent until one was). */
  readonly loopbackReads?: number;
}
