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

/** Raised when a prompt run's prompt, model or vendor id does not resolve. */
export class UnresolvedAccountingError extends Error {
  override readonly name = 'UnresolvedAccountingError';
}

export interface Ledger {
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
