/** The run ledger: accounting, run steps and live events. Embedded SQLite by default; PostgreSQL later. */
import type { Usage } from '../adapters/types.js';

export type RunStatus =
  | 'running'
  | 'awaiting_operator'
  | 'waiting_for_reply'
  | 'succeeded'
  | 'failed'
  | 'stopped'
  | 'cancelled';

export interface RunRecord {
  readonly workflowId: string;
  readonly runId: string;
  readonly agent: string;
  readonly harness: string;
  readonly tenantId: string;
  readonly userId: string;
  readonly task: string;
  readonly parentWorkflowId?: string;
}

export interface CatalogEntries {
  readonly vendors: readonly { id: string; name: string }[];
  readonly models: readonly { id: string; vendorId: string; name: string }[];
  readonly prompts: readonly { id: string; name: string; text: string }[];
}

/** One accounting row per turn. (workflowId, turn) is unique: a retried write changes nothing. */
export interface PromptRunRecord {
  readonly workflowId: string;
  readonly turn: number;
  readonly promptId: string;
  readonly modelId: string;
  readonly vendorId: string;
  /** The model string the harness reported, if any (may differ from modelId's name). */
  readonly reportedModel?: string;
  readonly usage: Usage;
  readonly costUsd: number;
  /** Where the cost came from. */
  readonly costSource: 'harness' | 'price-table' | 'unknown';
  readonly externalSessionId?: string;
  readonly resumed: boolean;
  readonly durationMs: number;
  /** The turn input and the raw envelope, secrets already redacted. */
  readonly input: string;
  readonly output: string;
}

export interface RunStepRecord {
  readonly workflowId: string;
  /** Position within the run; (workflowId, seq) is unique. */
  readonly seq: number;
  readonly turn: number;
  readonly type: string;
  readonly payload: unknown;
}

/** A content-addressed blob: a claim-checked text or a frozen run spec, stored once under its sha256. */
export interface BlobRecord {
  /** Lowercase hex sha256 of `content` (UTF-8). */
  readonly hash: string;
  readonly kind: 'text' | 'spec';
  readonly content: string;
}

export interface LedgerEvent {
  readonly cursor: number;
  readonly workflowId: string;
  readonly turn: number;
  readonly type: string;
  readonly data: unknown;
  readonly at: string;
}

export type ApprovalStatus = 'pending' | 'allowed' | 'denied' | 'expired';

/** A permission request of a run and what became of it: every decision, by a rule or a person, is one row. */
export interface ApprovalRecord {
  readonly workflowId: string;
  /** Durable within the run (`t<turn>-<hash of tool and input>[-n]`): a retried attempt asking again finds it. */
  readonly requestId: string;
  readonly turn: number;
  readonly tool: string;
  readonly kind: string;
  readonly title: string;
  readonly input: unknown;
  readonly command?: string;
  readonly paths?: readonly string[];
  readonly status: ApprovalStatus;
  /** ISO time of the first ask. */
  readonly requestedAt: string;
  /** When a pending request is denied by timeout (ISO). */
  readonly expiresAt?: string;
  /** Who or which rule decided: `policy:deny[0] command:rm *`, `operator:alice`, `timeout`, … */
  readonly decidedBy?: string;
  readonly decidedAt?: string;
  readonly editedInput?: unknown;
  readonly scope?: 'once' | 'session';
  readonly message?: string;
}

/** A new request: pending (for a human), or already decided (by the policy or a grant). */
export interface NewApproval {
  readonly workflowId: string;
  readonly requestId: string;
  readonly turn: number;
  readonly tool: string;
  readonly kind: string;
  readonly title: string;
  readonly input: unknown;
  readonly command?: string;
  readonly paths?: readonly string[];
  readonly expiresAt?: string;
  readonly decision?: ApprovalDecisionInput;
}

/** A decision on a pending request. */
export interface ApprovalDecisionInput {
  readonly status: 'allowed' | 'denied';
  readonly decidedBy: string;
  readonly editedInput?: unknown;
  readonly scope?: 'once' | 'session';
  readonly message?: string;
}

/** Durable permission requests and decisions; the turn activity polls it while the harness waits. */
export interface ApprovalLedger {
  /** Records the request; if the run already has one with this id (a retried attempt), returns that one unchanged. */
  requestApproval(request: NewApproval): Promise<{ record: ApprovalRecord; created: boolean }>;
  /** Decides a pending request; the first decision wins and later ones return the row as it stands. */
  decideApproval(workflowId: string, requestId: string, decision: ApprovalDecisionInput): Promise<ApprovalRecord | undefined>;
  getApproval(workflowId: string, requestId: string): Promise<ApprovalRecord | undefined>;
  /** Oldest first; `status` filters, `workflowId` narrows to one run. */
  listApprovals(filter?: { workflowId?: string; status?: ApprovalStatus; limit?: number }): Promise<ApprovalRecord[]>;
  /** Marks a run's still-pending requests (of one turn, if given) `expired`: nobody waits for them; returns how many. */
  expireApprovals(workflowId: string, reason: string, turn?: number): Promise<number>;
}

/** Raised when a prompt run's prompt, model or vendor id does not resolve. */
export class UnresolvedAccountingError extends Error {
  override readonly name = 'UnresolvedAccountingError';
}

export interface Ledger extends ApprovalLedger {
  /** Upserts vendors, models and prompts so prompt runs can reference them. */
  syncCatalog(entries: CatalogEntries): Promise<void>;
  /** Creates the run row, or leaves an existing one as it is. */
  startRun(run: RunRecord): Promise<void>;
  finishRun(workflowId: string, status: RunStatus, result: unknown): Promise<void>;
  setRunStatus(workflowId: string, status: RunStatus): Promise<void>;
  setExternalSessionId(workflowId: string, sessionId: string): Promise<void>;
  getRun(workflowId: string): Promise<(RunRecord & { status: RunStatus; result: unknown; externalSessionId?: string }) | undefined>;
  /** Idempotent by (workflowId, turn); throws UnresolvedAccountingError when an id does not resolve. */
  recordPromptRun(row: PromptRunRecord): Promise<{ inserted: boolean }>;
  listPromptRuns(workflowId: string): Promise<PromptRunRecord[]>;
  /** Idempotent by (workflowId, seq): `inserted` is false when the step was already recorded (and nothing changed). */
  recordStep(step: RunStepRecord): Promise<{ inserted: boolean }>;
  /** The step at (workflowId, seq), if recorded. */
  getStep(workflowId: string, seq: number): Promise<RunStepRecord | undefined>;
  /** Replaces the payload of a recorded step (an action's outcome, after its start was recorded). */
  completeStep(workflowId: string, seq: number, payload: unknown): Promise<void>;
  listSteps(workflowId: string): Promise<RunStepRecord[]>;
  /** Stores a blob once; storing the same hash again changes nothing. */
  putBlob(blob: BlobRecord): Promise<void>;
  /** The content stored under `hash`, if any. */
  getBlob(hash: string): Promise<string | undefined>;
  appendEvent(workflowId: string, turn: number, type: string, data: unknown): Promise<number>;
  /** Events after `cursor` (exclusive), oldest first. */
  readEvents(workflowId: string, afterCursor: number, limit?: number): Promise<LedgerEvent[]>;
  close(): Promise<void>;
}
