/** The embedded run ledger: better-sqlite3 behind the async Ledger interface (PostgreSQL will follow). */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Usage } from '../adapters/types.js';
import { unresolvedAccounting } from './accounting.js';
import { approvalColumns, approvalFromRow, decisionColumns, eventFromRow, promptRunFromRow, runFromRow, stepFromRow, toJson, type Row, type RunView } from './rows.js';
import {
  UnresolvedAccountingError,
  type CatalogEntries,
  type Ledger,
  type LedgerEvent,
  type BlobRecord,
  type PromptRunRecord,
  type RunRecord,
  type RunStatus,
  type RunStepRecord,
  type ApprovalDecisionInput,
  type ApprovalRecord,
  type ApprovalStatus,
  type NewApproval,
} from './types.js';

/** Ordered migrations; migration N brings the schema to version N (stored in PRAGMA user_version). */
const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE vendors (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
  CREATE TABLE models (
    id TEXT PRIMARY KEY,
    vendor_id TEXT NOT NULL REFERENCES vendors(id),
    name TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
  CREATE TABLE prompts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    text TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
  CREATE TABLE runs (
    workflow_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    harness TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    task TEXT NOT NULL,
    parent_workflow_id TEXT,
    status TEXT NOT NULL,
    result_json TEXT,
    external_session_id TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT
  );
  CREATE INDEX runs_parent ON runs(parent_workflow_id);
  CREATE TABLE prompt_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    prompt_id TEXT NOT NULL REFERENCES prompts(id),
    model_id TEXT NOT NULL REFERENCES models(id),
    vendor_id TEXT NOT NULL REFERENCES vendors(id),
    reported_model TEXT,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    cost_source TEXT NOT NULL CHECK (cost_source IN ('harness', 'price-table', 'unknown')),
    external_session_id TEXT,
    resumed INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (workflow_id, turn)
  );
  CREATE TABLE run_steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (workflow_id, seq)
  );
  CREATE TABLE events (
    cursor INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    type TEXT NOT NULL,
    data_json TEXT NOT NULL,
    at TEXT NOT NULL
  );
  CREATE INDEX events_by_run ON events(workflow_id, cursor);
  `,
  // 2: permission requests and decisions (issue 12).
  `
  CREATE TABLE approvals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    tool TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    input_json TEXT NOT NULL,
    command TEXT,
    paths_json TEXT,
    status TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
    requested_at TEXT NOT NULL,
    expires_at TEXT,
    decided_by TEXT,
    decided_at TEXT,
    edited_input_json TEXT,
    scope TEXT CHECK (scope IS NULL OR scope IN ('once', 'session')),
    message TEXT,
    UNIQUE (workflow_id, request_id)
  );
  CREATE INDEX approvals_by_status ON approvals(status, id);
  `,
  // 3: content-addressed blobs (claim-checked texts, frozen specs; issue 9).
  `
  CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('text', 'spec')),
    bytes INTEGER NOT NULL,
    content TEXT NOT NULL,
    created_at TEXT NOT NULL
  );
  `,
];

/** Schema version this code writes. */
export const LEDGER_SCHEMA_VERSION = MIGRATIONS.length;

/** Default and maximum page size for readEvents. */
const DEFAULT_EVENT_PAGE = 100;
const MAX_EVENT_PAGE = 1000;

function now(): string {
  return new Date().toISOString();
}

function migrate(db: Database.Database): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(
      `ledger schema version ${current} is newer than this code understands (${MIGRATIONS.length}); upgrade durable-harness`,
    );
  }
  for (let version = current + 1; version <= MIGRATIONS.length; version++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[version - 1]!);
      db.pragma(`user_version = ${version}`);
    })();
  }
}

function prepareStatements(db: Database.Database) {
  return {
    upsertVendor: db.prepare(
      `INSERT INTO vendors (id, name, updated_at) VALUES (@id, @name, @at)
       ON CONFLICT(id) DO UPDATE SET name = excluded.name, updated_at = excluded.updated_at`,
    ),
    upsertModel: db.prepare(
      `INSERT INTO models (id, vendor_id, name, updated_at) VALUES (@id, @vendorId, @name, @at)
       ON CONFLICT(id) DO UPDATE SET vendor_id = excluded.vendor_id, name = excluded.name, updated_at = excluded.updated_at`,
    ),
    upsertPrompt: db.prepare(
      `INSERT INTO prompts (id, name, text, updated_at) VALUES (@id, @name, @text, @at)
       ON CONFLICT(id) DO UPDATE SET name = excluded.name, text = excluded.text, updated_at = excluded.updated_at`,
    ),
    vendorExists: db.prepare(`SELECT 1 FROM vendors WHERE id = ?`).pluck(),
    modelVendor: db.prepare(`SELECT vendor_id FROM models WHERE id = ?`).pluck(),
    promptExists: db.prepare(`SELECT 1 FROM prompts WHERE id = ?`).pluck(),
    insertRun: db.prepare(
      `INSERT INTO runs (workflow_id, run_id, agent, harness, tenant_id, user_id, task, parent_workflow_id, status, started_at)
       VALUES (@workflowId, @runId, @agent, @harness, @tenantId, @userId, @task, @parentWorkflowId, 'running', @at)
       ON CONFLICT(workflow_id) DO NOTHING`,
    ),
    finishRun: db.prepare(
      `UPDATE runs SET status = @status, result_json = @result, finished_at = @at WHERE workflow_id = @workflowId`,
    ),
    setStatus: db.prepare(`UPDATE runs SET status = @status WHERE workflow_id = @workflowId`),
    setSession: db.prepare(`UPDATE runs SET external_session_id = @sessionId WHERE workflow_id = @workflowId`),
    getRun: db.prepare(`SELECT * FROM runs WHERE workflow_id = ?`),
    insertPromptRun: db.prepare(
      `INSERT INTO prompt_runs (workflow_id, turn, prompt_id, model_id, vendor_id, reported_model,
         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, cost_source,
         external_session_id, resumed, duration_ms, input, output, created_at)
       VALUES (@workflowId, @turn, @promptId, @modelId, @vendorId, @reportedModel,
         @inputTokens, @outputTokens, @cacheReadTokens, @cacheWriteTokens, @costUsd, @costSource,
         @externalSessionId, @resumed, @durationMs, @input, @output, @at)
       ON CONFLICT(workflow_id, turn) DO NOTHING`,
    ),
    listPromptRuns: db.prepare(`SELECT * FROM prompt_runs WHERE workflow_id = ? ORDER BY turn`),
    insertStep: db.prepare(
      `INSERT INTO run_steps (workflow_id, seq, turn, type, payload_json, created_at)
       VALUES (@workflowId, @seq, @turn, @type, @payload, @at)
       ON CONFLICT(workflow_id, seq) DO NOTHING`,
    ),
    listSteps: db.prepare(`SELECT * FROM run_steps WHERE workflow_id = ? ORDER BY seq`),
    getStep: db.prepare(`SELECT * FROM run_steps WHERE workflow_id = ? AND seq = ?`),
    completeStep: db.prepare(`UPDATE run_steps SET payload_json = @payload WHERE workflow_id = @workflowId AND seq = @seq`),
    putBlob: db.prepare(
      `INSERT INTO blobs (hash, kind, bytes, content, created_at) VALUES (@hash, @kind, @bytes, @content, @at)
       ON CONFLICT(hash) DO NOTHING`,
    ),
    getBlob: db.prepare(`SELECT content FROM blobs WHERE hash = ?`).pluck(),
    insertEvent: db.prepare(
      `INSERT INTO events (workflow_id, turn, type, data_json, at) VALUES (@workflowId, @turn, @type, @data, @at)`,
    ),
    readEvents: db.prepare(
      `SELECT * FROM events WHERE workflow_id = ? AND cursor > ? ORDER BY cursor LIMIT ?`,
    ),
    insertApproval: db.prepare(
      `INSERT INTO approvals (workflow_id, request_id, turn, tool, kind, title, input_json, command, paths_json, status,
         requested_at, expires_at, decided_by, decided_at, edited_input_json, scope, message)
       VALUES (@workflowId, @requestId, @turn, @tool, @kind, @title, @input, @command, @paths, @status,
         @at, @expiresAt, @decidedBy, @decidedAt, @editedInput, @scope, @message)
       ON CONFLICT(workflow_id, request_id) DO NOTHING`,
    ),
    decideApproval: db.prepare(
      `UPDATE approvals SET status = @status, decided_by = @decidedBy, decided_at = @at, edited_input_json = @editedInput,
         scope = @scope, message = @message
       WHERE workflow_id = @workflowId AND request_id = @requestId AND status = 'pending'`,
    ),
    getApproval: db.prepare(`SELECT * FROM approvals WHERE workflow_id = ? AND request_id = ?`),
    listApprovals: db.prepare(
      `SELECT * FROM approvals WHERE (@workflowId IS NULL OR workflow_id = @workflowId) AND (@status IS NULL OR status = @status)
       ORDER BY id LIMIT @limit`,
    ),
    expireApprovals: db.prepare(
      `UPDATE approvals SET status = 'expired', decided_by = @reason, decided_at = @at
       WHERE workflow_id = @workflowId AND status = 'pending' AND (@turn IS NULL OR turn = @turn)`,
    ),
  };
}

/** The ledger in one SQLite file (WAL mode), safe to share between a worker and a command line on one host. */
export class SqliteLedger implements Ledger {
  private readonly stmts: ReturnType<typeof prepareStatements>;
  private closed = false;

  private constructor(private readonly db: Database.Database) {
    this.stmts = prepareStatements(db);
  }

  /** Opens (creating directories and the file if needed) and migrates the ledger at `file`. */
  static open(file: string): SqliteLedger {
    if (file !== ':memory:') mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    const db = new Database(file);
    try {
      db.pragma('journal_mode = WAL');
      db.pragma('busy_timeout = 5000');
      db.pragma('foreign_keys = ON');
      // WAL + NORMAL is durable across process crashes; only an OS crash can lose the last commits.
      db.pragma('synchronous = NORMAL');
      migrate(db);
      return new SqliteLedger(db);
    } catch (e) {
      db.close();
      throw e;
    }
  }

  /** The schema version of the open file. */
  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  async syncCatalog(entries: CatalogEntries): Promise<void> {
    const at = now();
    this.db.transaction(() => {
      for (const v of entries.vendors) this.stmts.upsertVendor.run({ id: v.id, name: v.name, at });
      for (const m of entries.models) this.stmts.upsertModel.run({ id: m.id, vendorId: m.vendorId, name: m.name, at });
      for (const p of entries.prompts) this.stmts.upsertPrompt.run({ id: p.id, name: p.name, text: p.text, at });
    })();
  }

  async startRun(run: RunRecord): Promise<void> {
    this.stmts.insertRun.run({
      workflowId: run.workflowId,
      runId: run.runId,
      agent: run.agent,
      harness: run.harness,
      tenantId: run.tenantId,
      userId: run.userId,
      task: run.task,
      parentWorkflowId: run.parentWorkflowId ?? null,
      at: now(),
    });
  }

  async finishRun(workflowId: string, status: RunStatus, result: unknown): Promise<void> {
    this.stmts.finishRun.run({ workflowId, status, result: toJson(result), at: now() });
  }

  async setRunStatus(workflowId: string, status: RunStatus): Promise<void> {
    this.stmts.setStatus.run({ workflowId, status });
  }

  async setExternalSessionId(workflowId: string, sessionId: string): Promise<void> {
    this.stmts.setSession.run({ workflowId, sessionId });
  }

  async getRun(workflowId: string): Promise<RunView | undefined> {
    const row = this.stmts.getRun.get(workflowId) as Row | undefined;
    return row ? runFromRow(row) : undefined;
  }

  private unresolved(row: PromptRunRecord): string[] {
    return unresolvedAccounting(row, {
      promptExists: this.stmts.promptExists.get(row.promptId) !== undefined,
      modelVendor: this.stmts.modelVendor.get(row.modelId) as string | undefined,
      vendorExists: this.stmts.vendorExists.get(row.vendorId) !== undefined,
    });
  }

  async recordPromptRun(row: PromptRunRecord): Promise<{ inserted: boolean }> {
    const problems = this.unresolved(row);
    if (problems.length > 0) throw new UnresolvedAccountingError(problems.join('; '));
    const usage: Usage = row.usage;
    const info = this.stmts.insertPromptRun.run({
      workflowId: row.workflowId,
      turn: row.turn,
      promptId: row.promptId,
      modelId: row.modelId,
      vendorId: row.vendorId,
      reportedModel: row.reportedModel ?? null,
      inputTokens: usage.input,
      outputTokens: usage.output,
      cacheReadTokens: usage.cacheRead,
      cacheWriteTokens: usage.cacheWrite,
      costUsd: row.costUsd,
      costSource: row.costSource,
      externalSessionId: row.externalSessionId ?? null,
      resumed: row.resumed ? 1 : 0,
      durationMs: Math.round(row.durationMs),
      input: row.input,
      output: row.output,
      at: now(),
    });
    return { inserted: info.changes > 0 };
  }

  async listPromptRuns(workflowId: string): Promise<PromptRunRecord[]> {
    return (this.stmts.listPromptRuns.all(workflowId) as Row[]).map(promptRunFromRow);
  }

  async recordStep(step: RunStepRecord): Promise<{ inserted: boolean }> {
    const info = this.stmts.insertStep.run({
      workflowId: step.workflowId,
      seq: step.seq,
      turn: step.turn,
      type: step.type,
      payload: toJson(step.payload),
      at: now(),
    });
    return { inserted: info.changes > 0 };
  }

  async getStep(workflowId: string, seq: number): Promise<RunStepRecord | undefined> {
    const r = this.stmts.getStep.get(workflowId, seq) as Row | undefined;
    return r && stepFromRow(r);
  }

  async completeStep(workflowId: string, seq: number, payload: unknown): Promise<void> {
    this.stmts.completeStep.run({ workflowId, seq, payload: toJson(payload) });
  }

  async putBlob(blob: BlobRecord): Promise<void> {
    this.stmts.putBlob.run({ hash: blob.hash, kind: blob.kind, bytes: Buffer.byteLength(blob.content, 'utf8'), content: blob.content, at: now() });
  }

  async getBlob(hash: string): Promise<string | undefined> {
    return this.stmts.getBlob.get(hash) as string | undefined;
  }

  async listSteps(workflowId: string): Promise<RunStepRecord[]> {
    return (this.stmts.listSteps.all(workflowId) as Row[]).map(stepFromRow);
  }

  async appendEvent(workflowId: string, turn: number, type: string, data: unknown): Promise<number> {
    const info = this.stmts.insertEvent.run({ workflowId, turn, type, data: toJson(data), at: now() });
    return Number(info.lastInsertRowid);
  }

  async readEvents(workflowId: string, afterCursor: number, limit = DEFAULT_EVENT_PAGE): Promise<LedgerEvent[]> {
    const page = Math.max(1, Math.min(MAX_EVENT_PAGE, Math.floor(limit)));
    return (this.stmts.readEvents.all(workflowId, afterCursor, page) as Row[]).map(eventFromRow);
  }

  async requestApproval(request: NewApproval): Promise<{ record: ApprovalRecord; created: boolean }> {
    const at = now();
    const columns = approvalColumns(request);
    const info = this.stmts.insertApproval.run({ ...columns, at, decidedAt: columns.status === 'pending' ? null : at });
    const record = await this.getApproval(request.workflowId, request.requestId);
    return { record: record!, created: info.changes > 0 };
  }

  async decideApproval(workflowId: string, requestId: string, decision: ApprovalDecisionInput): Promise<ApprovalRecord | undefined> {
    this.stmts.decideApproval.run({ workflowId, requestId, ...decisionColumns(decision), at: now() });
    return this.getApproval(workflowId, requestId);
  }

  async getApproval(workflowId: string, requestId: string): Promise<ApprovalRecord | undefined> {
    const row = this.stmts.getApproval.get(workflowId, requestId) as Row | undefined;
    return row ? approvalFromRow(row) : undefined;
  }

  async listApprovals(filter: { workflowId?: string; status?: ApprovalStatus; limit?: number } = {}): Promise<ApprovalRecord[]> {
    const limit = Math.max(1, Math.min(MAX_EVENT_PAGE, Math.floor(filter.limit ?? MAX_EVENT_PAGE)));
    const rows = this.stmts.listApprovals.all({ workflowId: filter.workflowId ?? null, status: filter.status ?? null, limit }) as Row[];
    return rows.map(approvalFromRow);
  }

  async expireApprovals(workflowId: string, reason: string, turn?: number): Promise<number> {
    return this.stmts.expireApprovals.run({ workflowId, reason, turn: turn ?? null, at: now() }).changes;
  }

  /** Closes the database; calling it again does nothing. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.db.close();
  }
}
