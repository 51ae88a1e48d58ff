/**
 * The run ledger: accounting, run steps and live events. Embedded SQLite by default; PostgreSQL mirrors it.
 *
 * Rows are keyed by (workflowId, runId): two executions that share a workflow id never mix. `runId` is the run's
 * first execution run id (the one `startRun` recorded; continue-as-new keeps it). Wherever it is optional, an
 * omitted `runId` (or one the ledger does not know) means the latest run with that workflow id — at most one
 * execution of a workflow id is open at a time, so that is the open one.
 *
 * Accounting is per turn ATTEMPT and per model CALL: `beginAttempt` → `recordUsage` for every usage event as it
 * streams → `finishAttempt`. All three are idempotent (by attempt id, and by (attempt id, call) for usage), so a
 * retried write changes nothing and a crashed attempt keeps the calls it recorded. `runTotals` sums every call of
 * every attempt, failed ones included: that is what the run spent.
 */
import type { LoopbackRead } from '../contracts/loopback.js';
import type { CostSource, CostView } from '../contracts/cost.js';
import type { ModelCall, NetworkRecord } from '../contracts/network.js';
import type { Usage } from '../contracts/usage.js';

export type { CostSource, CostView };

export type RunStatus =
  | 'running'
  | 'awaiting_operator'
  | 'waiting_for_reply'
  | 'succeeded'
  | 'failed'
  | 'stopped'
  | 'cancelled'
  /** Closed by Temporal without the workflow's own end (reconciled by a worker at start). */
  | 'terminated'
  | 'timed_out';

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

export interface RunView extends RunRecord {
  readonly status: RunStatus;
  readonly result: unknown;
  readonly externalSessionId?: string;
  readonly startedAt: string;
  readonly finishedAt?: string;
}

export interface CatalogEntries {
  readonly vendors: readonly { id: string; name: string }[];
  readonly models: readonly { id: string; vendorId: string; name: string }[];
  readonly prompts: readonly { id: string; name: string; text: string }[];
}

/** Where a turn attempt's accounting belongs. */
export interface AttemptKey {
  readonly workflowId: string;
  /** The run (see the file comment); omitted = the latest run with this workflow id. */
  readonly runId?: string;
  /**
   * Unique id of one attempt of one turn: the activity execution's run id, activity id and attempt number. A
   * Temporal retry, an operator retry and a fresh-session replay of the same turn each get a new one.
   */
  readonly attemptId: string;
}

/** What became of a turn attempt. `running` = started and never finished (its worker died, or it is running). */
export type AttemptStatus = 'running' | 'succeeded' | 'failed' | 'cancelled' | 'resume-failed' | 'budget-exhausted' | 'lost';


/** Opens the accounting of one turn attempt. */
export interface AttemptStart extends AttemptKey {
  readonly turn: number;
  /** Temporal's attempt number (1-based) within this scheduling of the turn. */
  readonly attempt: number;
  readonly promptId: string;
  readonly modelId: string;
  readonly vendorId: string;
  /** A price table applies: every call with known input and output gets a `priceUsd`. */
  readonly priced: boolean;
  /** The turn input, secrets already redacted. */
  readonly input: string;
}

/** One usage event of an attempt: usually one model call. Idempotent by (attempt, call). */
export interface UsageRecord extends AttemptKey {
  readonly turn: number;
  /** 1-based position of the event within its attempt. */
  readonly call: number;
  readonly usage: Usage;
  /** The price table's figure for these tokens; undefined when there is no table or the usage is unknown. */
  readonly priceUsd?: number;
  /** The harness's own figure, when it gave one with this event. */
  readonly harnessCostUsd?: number;
}

/** Closes an attempt; only a `running` attempt changes. */
export interface AttemptFinish extends AttemptKey {
  readonly status: Exclude<AttemptStatus, 'running' | 'lost'>;
  /** Whether the workflow gets this attempt's output (its result reaches the run). */
  readonly outputUsed: boolean;
  /** The raw envelope text, redacted; empty for a failed attempt. */
  readonly output: string;
  /** Why the attempt failed, redacted. */
  readonly error?: string;
  /** The model string the harness reported, if any (may differ from modelId's name). */
  readonly reportedModel?: string;
  readonly externalSessionId?: string;
  readonly resumed: boolean;
  readonly durationMs: number;
  /** The harness reported no usage at all for a turn that ran: its tokens are unknown. */
  readonly usageMissing?: boolean;
}


/** One turn attempt as the ledger shows it (a prompt run). */
export interface PromptRunRecord extends CostView {
  readonly workflowId: string;
  readonly runId: string;
  readonly turn: number;
  readonly attempt: number;
  readonly attemptId: string;
  readonly status: AttemptStatus;
  readonly outputUsed: boolean;
  readonly promptId: string;
  readonly modelId: string;
  readonly vendorId: string;
  readonly reportedModel?: string;
  /**
   * The model the vendor says served this attempt's last call, as the egress gateway metered it on the wire (absent
   * without a gateway). Where it differs from `reportedModel`, the wire is right.
   */
  readonly servedModel?: string;
  /** Sum of the attempt's calls. */
  readonly usage: Usage;
  /** Usage events recorded (model calls, for harnesses that report per call). */
  readonly calls: number;
  readonly externalSessionId?: string;
  readonly resumed: boolean;
  readonly durationMs: number;
  readonly input: string;
  readonly output: string;
  readonly error?: string;
}

/** What a run spent, over every call of every attempt (failed and lost ones included). */
export interface RunTotals extends CostView {
  readonly usage: Usage;
  readonly calls: number;
  readonly attempts: number;
  /** Attempts whose output the run did not use (failed, cancelled, lost, superseded). */
  readonly unusedAttempts: number;
  /** Usage of those attempts: spent, and never part of a turn result. */
  readonly unusedUsage: Usage;
}

export interface RunStepRecord {
  readonly workflowId: string;
  /** The run; omitted = the latest run with this workflow id. */
  readonly runId?: string;
  /** Position within the run; (workflowId, runId, seq) is unique. */
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
  readonly runId: string;
  readonly turn: number;
  readonly type: string;
  readonly data: unknown;
  readonly at: string;
}

export type ApprovalStatus = 'pending' | 'allowed' | 'denied' | 'expired';

/** What a permission request asks, as the ledger keeps it. */
export interface ApprovalAsk {
  /** Durable within the run (`t<turn>-<hash of tool and input>[-n]`): a retried attempt asking again finds it. */
  readonly requestId: string;
  readonly turn: number;
  readonly tool: string;
  readonly kind: string;
  readonly title: string;
  readonly input: unknown;
  readonly command?: string;
  readonly paths?: readonly string[];
}

/** A permission request of a run and what became of it: every decision, by a rule or a person, is one row. */
export interface ApprovalRecord extends ApprovalAsk {
  readonly workflowId: string;
  /** The run of `workflowId` it belongs to: a decision never answers another run's request. */
  readonly runId: string;
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
export interface NewApproval extends ApprovalAsk {
  readonly workflowId: string;
  /** The run (its first execution run id); absent or unknown to the ledger = the latest run of `workflowId`. */
  readonly runId?: string;
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

/**
 * Durable permission requests and decisions; the turn activity polls it while the harness waits. Rows are keyed by
 * (workflowId, runId, requestId); a method without `runId` (or with one the ledger does not know) addresses the
 * latest run of `workflowId`, so a reused workflow id never finds another run's decisions.
 */
export interface ApprovalLedger {
  /** Records the request; if the run already has one with this id (a retried attempt), returns that one unchanged. */
  requestApproval(request: NewApproval): Promise<{ record: ApprovalRecord; created: boolean }>;
  /** Decides a pending request; the first decision wins and later ones return the row as it stands. */
  decideApproval(workflowId: string, requestId: string, decision: ApprovalDecisionInput, runId?: string): Promise<ApprovalRecord | undefined>;
  getApproval(workflowId: string, requestId: string, runId?: string): Promise<ApprovalRecord | undefined>;
  /** Oldest first; `status` filters, `workflowId` (and `runId`) narrows to one run. */
  listApprovals(filter?: { workflowId?: string; runId?: string; status?: ApprovalStatus; limit?: number }): Promise<ApprovalRecord[]>;
  /** Marks a run's still-pending requests (of one turn, if given) `expired`: nobody waits for them; returns how many. */
  expireApprovals(workflowId: string, reason: string, turn?: number, runId?: string): Promise<number>;
  /**
   * The run's allowed requests that allow more than themselves, oldest first: those allowed for the session (any
   * turn), and those of `turn` an operator allowed with an edited input. Operators' decisions, so few: what the
   * permission gate reads once per turn attempt instead of every allowed row per request.
   */
  listGrants(workflowId: string, turn: number, runId?: string): Promise<ApprovalRecord[]>;
}

/** Whether the ledger can take writes; `problem` says what is wrong and how to fix it. */
/** An operator decision as a worker accepted it: who (verified or not), what, and the claim they signed. */
export interface DecisionRecord {
  /** The signed claim's nonce (a signature is accepted once), or a fresh id for an unsigned decision. */
  readonly nonce: string;
  readonly workflowId: string;
  readonly runId?: string;
  readonly action: string;
  readonly requestId?: string;
  /** `operator:<name>` when verified; `unauthenticated:<name>` when a trusted-network deployment took it unsigned. */
  readonly principal: string;
  readonly keyId?: string;
  readonly authenticated: boolean;
  /** The claim as signed (small: no reply text, only its digest). */
  readonly claim?: unknown;
}

export interface DecisionView extends DecisionRecord {
  readonly at: string;
}

export interface LedgerHealth {
  readonly ok: boolean;
  /** Where the ledger lives (a file, a database URL without credentials). */
  readonly location: string;
  readonly problem?: string;
}

/** Raised when a prompt run's prompt, model or vendor id does not resolve. */
export class UnresolvedAccountingError extends Error {
  override readonly name = 'UnresolvedAccountingError';
}

/** Why the ledger cannot take a write right now. Writers wait and retry; nothing is dropped. */
export type LedgerFaultCode = 'LedgerMissing' | 'LedgerReplaced' | 'LedgerReadOnly' | 'LedgerUnavailable';

/** Raised by a write the ledger cannot take (deleted or replaced file, read-only, I/O error). */
export class LedgerFaultError extends Error {
  override readonly name = 'LedgerFaultError';
  constructor(
    readonly code: LedgerFaultCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface Ledger extends ApprovalLedger, NetworkLedger {
  /** Upserts vendors, models and prompts so prompt runs can reference them. */
  syncCatalog(entries: CatalogEntries): Promise<void>;
  /** Creates the run row for (workflowId, runId), or leaves an existing one as it is. */
  startRun(run: RunRecord): Promise<{ created: boolean }>;
  finishRun(workflowId: string, status: RunStatus, result: unknown, runId?: string): Promise<void>;
  setRunStatus(workflowId: string, status: RunStatus, runId?: string): Promise<void>;
  setExternalSessionId(workflowId: string, sessionId: string, runId?: string): Promise<void>;
  /**
   * Small state a harness adapter keeps between the turns of a run (codex's per-thread usage totals), held here and
   * never in the workspace, where the harness could rewrite it. `undefined` when never set.
   */
  getHarnessState(workflowId: string, key: string): Promise<unknown>;
  /** Replaces the value under `key` for the run (JSON-serializable). */
  setHarnessState(workflowId: string, key: string, value: unknown): Promise<void>;
  /**
   * Claims a shared workspace (`key`: its host and path) for a run, atomically across workers: taken when free, when
   * its holder's run is closed in the ledger, or when the same workflow holds it (an earlier execution before a
   * continue-as-new). Returns the holder afterwards (this run, or the open run that works in it).
   */
  claimWorkspace(key: string, holder: WorkspaceHolder): Promise<WorkspaceHolder>;
  /** Gives up the workflow's claim on `key` (nothing when another run holds it). */
  releaseWorkspace(key: string, holder: WorkspaceHolder): Promise<void>;
  /** Gives up every claim of the workflow's runs (its end, or its reconciliation after a terminate). */
  releaseWorkspacesOf(workflowId: string): Promise<number>;
  getRun(workflowId: string, runId?: string): Promise<RunView | undefined>;
  /** Every run recorded under this workflow id, oldest first (more than one only when an id was reused). */
  listRuns(workflowId: string): Promise<RunView[]>;
  /** Runs still `running` (or waiting) in the ledger, for reconciliation against Temporal. */
  listOpenRuns(limit?: number): Promise<RunView[]>;

  /**
   * Opens an attempt's prompt run; throws UnresolvedAccountingError when an id does not resolve. Earlier attempts
   * of the same turn still `running` become `lost` (their worker died), and any earlier attempt of the turn is
   * marked not used.
   */
  beginAttempt(start: AttemptStart): Promise<{ inserted: boolean }>;
  /** Records one usage event of an attempt. Idempotent by (workflowId, runId, attemptId, call). */
  recordUsage(row: UsageRecord): Promise<{ inserted: boolean }>;
  /** Closes a running attempt. Idempotent: a finished attempt stays as it is. */
  finishAttempt(finish: AttemptFinish): Promise<{ updated: boolean }>;
  /** One row per turn attempt, by turn then attempt order. */
  listPromptRuns(workflowId: string, runId?: string): Promise<PromptRunRecord[]>;
  /** What the run spent: every call of every attempt; `turn` narrows it to one turn. */
  runTotals(workflowId: string, runId?: string, options?: { turn?: number }): Promise<RunTotals>;

  /** Idempotent by (workflowId, runId, seq): `inserted` is false when the step was already recorded (and nothing changed). */
  recordStep(step: RunStepRecord): Promise<{ inserted: boolean }>;
  /** The step at (workflowId, runId, seq), if recorded. */
  getStep(workflowId: string, seq: number, runId?: string): Promise<RunStepRecord | undefined>;
  /** Replaces the payload of a recorded step (an action's outcome, after its start was recorded). */
  completeStep(workflowId: string, seq: number, payload: unknown, runId?: string): Promise<void>;
  listSteps(workflowId: string, runId?: string): Promise<RunStepRecord[]>;
  /** Stores a blob once; storing the same hash again changes nothing. Blobs are content-addressed, not per run. */
  putBlob(blob: BlobRecord): Promise<void>;
  /** The content stored under `hash`, if any. */
  getBlob(hash: string): Promise<string | undefined>;
  appendEvent(workflowId: string, turn: number, type: string, data: unknown, runId?: string): Promise<number>;
  /** Events after `cursor` (exclusive), oldest first, of every run with this workflow id. */
  readEvents(workflowId: string, afterCursor: number, limit?: number): Promise<LedgerEvent[]>;

  /** Whether writes can land; never throws. */
  /** Records an accepted operator decision; `inserted: false` when its nonce was recorded before (a replay). */
  recordDecision(decision: DecisionRecord): Promise<{ inserted: boolean }>;
  /** The run's accepted operator decisions, oldest first. */
  listDecisions(workflowId: string, runId?: string): Promise<DecisionView[]>;
  health(): Promise<LedgerHealth>;
  close(): Promise<void>;
}

/**
 * One request through a run's egress gateway, as the turn activity writes it. `id` is the gateway's (its instance and a
 * counter), unique across the ledger: a retried batch inserts nothing twice.
 */
export interface NetworkRow {
  readonly id: string;
  readonly workflowId: string;
  /** The run; omitted (or unknown to the ledger) = the latest run with this workflow id. */
  readonly runId?: string;
  readonly turn: number;
  readonly attemptId?: string;
  readonly record: NetworkRecord;
}

/** A stored request row: its run resolved, and `seq`, its place in arrival order (the paging cursor). */
export interface NetworkEntry extends NetworkRow {
  readonly runId: string;
  readonly seq: number;
}

/** One model call the gateway metered; idempotent by `id` like `NetworkRow`. */
export interface ModelCallRow {
  readonly id: string;
  readonly workflowId: string;
  readonly runId?: string;
  readonly turn: number;
  readonly attemptId?: string;
  readonly call: ModelCall;
}

/** A stored metered call, its run resolved, in arrival order. */
export interface ModelCallEntry extends ModelCallRow {
  readonly runId: string;
  readonly seq: number;
}

export interface NetworkListOptions {
  /** Omitted (or unknown) = the latest run of the workflow id. */
  readonly runId?: string;
  /** Rows after this `seq` (exclusive). */
  readonly afterSeq?: number;
  /** Page size: default 100, at most 1000. */
  readonly limit?: number;
  /** Only the refused requests. */
  readonly refusedOnly?: boolean;
}

/** What a run's gateway saw, for `status` (one indexed query per table, over the run's rows only). */
export interface NetworkSummary {
  /** Requests recorded one by one. */
  readonly requests: number;
  /** Of those, refused. */
  readonly refused: number;
  /** Refused requests not recorded one by one (the gateway's rate cap); counted in no row but this. */
  readonly suppressed: number;
  readonly modelCalls: number;
  /** The metered calls' usage, summed as `addUsage` does (a field is unknown only when no call knew it). */
  readonly usage: Usage;
  /** The distinct models the vendor said served the calls, sorted. */
  readonly models: string[];
  readonly lastRefused?: { readonly method: string; readonly destination: string; readonly rule: string; readonly at: number };
}

/** The ledger's rows of the egress gateway (issue 21). */
export interface NetworkLedger {
  /** Inserts the rows not yet stored (by `id`); a retried batch changes nothing. */
  recordNetwork(rows: readonly NetworkRow[]): Promise<void>;
  /** Inserts the metered calls not yet stored (by `id`). */
  recordModelCalls(rows: readonly ModelCallRow[]): Promise<void>;
  /** The run's requests in arrival order, a page at a time (`afterSeq` = the last row's `seq`). */
  listNetwork(workflowId: string, options?: NetworkListOptions): Promise<NetworkEntry[]>;
  /** The run's metered calls in arrival order; `attemptId` or `turn` narrow them. */
  listModelCalls(workflowId: string, options?: { runId?: string; attemptId?: string; turn?: number }): Promise<ModelCallEntry[]>;
  networkSummary(workflowId: string, runId?: string): Promise<NetworkSummary>;
  /** Inserts the loopback reads not yet stored (by `id`). */
  recordLoopbackReads(rows: readonly LoopbackRow[]): Promise<void>;
  /** The run's loopback reads in arrival order (`turn` narrows them), a page at a time (`afterSeq`). */
  listLoopbackReads(workflowId: string, options?: { runId?: string; turn?: number; afterSeq?: number; limit?: number }): Promise<LoopbackEntry[]>;
}

/** One read through a run's MCP loopback (issue 23); idempotent by `id` like `NetworkRow`. */
export interface LoopbackRow {
  readonly id: string;
  readonly workflowId: string;
  readonly runId?: string;
  readonly turn: number;
  readonly attemptId?: string;
  readonly read: LoopbackRead;
}

/** A stored loopback read, its run resolved, in arrival order. */
export interface LoopbackEntry extends LoopbackRow {
  readonly runId: string;
  readonly seq: number;
}

/** The run that works in a shared workspace (`Ledger.claimWorkspace`). */
export interface WorkspaceHolder {
  readonly workflowId: string;
  readonly runId: string;
}
