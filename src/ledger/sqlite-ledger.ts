/** The embedded run ledger: better-sqlite3 behind the async Ledger interface (PostgreSQL mirrors it). */
import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { unresolvedAccounting } from './accounting.js';
import { totalsOf } from './cost.js';
import { loopbackColumns, loopbackFromRow, modelCallColumns, modelCallFromRow, networkColumns, networkFromRow, networkPage, summaryFromRows, SUMMARY_SQL } from './network-rows.js';
import {
  approvalColumns,
  approvalFromRow,
  decisionColumns,
  DEFAULT_EVENT_PAGE,
  eventFromRow,
  operatorDecisionFromRow,
  pageSize,
  promptRunsFromRows,
  withServedModels,
  runFromRow,
  stepFromRow,
  toJson,
  usageColumns,
  type Row,
} from './rows.js';
import {
  attemptTables,
  blobsTable,
  gatewayTables,
  loopbackTable,
  harnessStateTable,
  operatorDecisionsTable,
  ownedTable,
  runsAndAccountingTables,
  runsTable,
  SQLITE_TYPES as T,
  workspaceClaimsTable,
} from './schema.js';
import {
  LedgerFaultError,
  UnresolvedAccountingError,
  type ApprovalDecisionInput,
  type ApprovalRecord,
  type ApprovalStatus,
  type AttemptFinish,
  type BlobRecord,
  type AttemptStart,
  type CatalogEntries,
  type DecisionRecord,
  type DecisionView,
  type Ledger,
  type LedgerEvent,
  type LedgerHealth,
  type ModelCallEntry,
  type ModelCallRow,
  type LoopbackEntry,
  type LoopbackRow,
  type NetworkEntry,
  type NetworkListOptions,
  type NetworkRow,
  type NetworkSummary,
  type NewApproval,
  type PromptRunRecord,
  type RunRecord,
  type RunStatus,
  type RunStepRecord,
  type RunTotals,
  type RunView,
  type UsageRecord,
  type WorkspaceHolder,
} from './types.js';

/** Ordered migrations; migration N brings the schema to version N (stored in PRAGMA user_version). */
const MIGRATIONS: readonly string[] = [
  runsAndAccountingTables(T),
  // 2: permission requests and decisions (issue 12).
  `${ownedTable(T, 'approvals')}
  CREATE INDEX approvals_by_status ON approvals(status, id);
  `,
  // 3: content-addressed blobs (claim-checked texts, frozen specs; issue 9).
  blobsTable(T),
  // 4: rows keyed by (workflow_id, run_id) so a reused workflow id never mixes two runs; one prompt run per turn
  // ATTEMPT and one row per model call (nullable counts: unknown is not zero). Older prompt runs become
  // attempt "v1:<turn>" with one call carrying their totals.
  `${runsTable(T, { name: 'runs_v2', byRun: true })}
  INSERT INTO runs_v2 SELECT workflow_id, run_id, agent, harness, tenant_id, user_id, task, parent_workflow_id, status,
    result_json, external_session_id, started_at, finished_at FROM runs;
  DROP TABLE runs;
  ALTER TABLE runs_v2 RENAME TO runs;
  CREATE INDEX runs_parent ON runs(parent_workflow_id);
  CREATE INDEX runs_open ON runs(status) WHERE finished_at IS NULL;
  ${attemptTables(T)}
  INSERT INTO attempts (workflow_id, run_id, turn, attempt, attempt_id, status, output_used, priced, prompt_id, model_id,
      vendor_id, reported_model, external_session_id, resumed, duration_ms, input, output, started_at, finished_at)
    SELECT p.workflow_id, COALESCE(r.run_id, ''), p.turn, 1, 'v1:' || p.turn, 'succeeded', 1,
      CASE p.cost_source WHEN 'price-table' THEN 1 ELSE 0 END, p.prompt_id, p.model_id, p.vendor_id, p.reported_model,
      p.external_session_id, p.resumed, p.duration_ms, p.input, p.output, p.created_at, p.created_at
    FROM prompt_runs p LEFT JOIN runs r ON r.workflow_id = p.workflow_id;
  INSERT INTO model_calls (workflow_id, run_id, attempt_id, turn, call, input_tokens, output_tokens, cache_read_tokens,
      cache_write_tokens, price_usd, harness_cost_usd, at)
    SELECT p.workflow_id, COALESCE(r.run_id, ''), 'v1:' || p.turn, p.turn, 1, p.input_tokens, p.output_tokens,
      p.cache_read_tokens, p.cache_write_tokens,
      CASE p.cost_source WHEN 'price-table' THEN p.cost_usd END, CASE p.cost_source WHEN 'harness' THEN p.cost_usd END, p.created_at
    FROM prompt_runs p LEFT JOIN runs r ON r.workflow_id = p.workflow_id;
  DROP TABLE prompt_runs;

  ${ownedTable(T, 'run_steps', { name: 'run_steps_v2', byRun: true })}
  INSERT INTO run_steps_v2 (workflow_id, run_id, seq, turn, type, payload_json, created_at)
    SELECT s.workflow_id, COALESCE(r.run_id, ''), s.seq, s.turn, s.type, s.payload_json, s.created_at
    FROM run_steps s LEFT JOIN runs r ON r.workflow_id = s.workflow_id;
  DROP TABLE run_steps;
  ALTER TABLE run_steps_v2 RENAME TO run_steps;

  ALTER TABLE events ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
  UPDATE events SET run_id = COALESCE((SELECT r.run_id FROM runs r WHERE r.workflow_id = events.workflow_id), '');

  -- Approvals too: a decision of one run must never answer another run's request with the same id.
  ${ownedTable(T, 'approvals', { name: 'approvals_v4', byRun: true })}
  INSERT INTO approvals_v4 (id, workflow_id, run_id, request_id, turn, tool, kind, title, input_json, command, paths_json,
      status, requested_at, expires_at, decided_by, decided_at, edited_input_json, scope, message)
    SELECT a.id, a.workflow_id, COALESCE((SELECT r.run_id FROM runs r WHERE r.workflow_id = a.workflow_id ORDER BY r.rowid DESC LIMIT 1), ''),
      a.request_id, a.turn, a.tool, a.kind, a.title, a.input_json, a.command, a.paths_json, a.status, a.requested_at,
      a.expires_at, a.decided_by, a.decided_at, a.edited_input_json, a.scope, a.message
    FROM approvals a;
  DROP TABLE approvals;
  ALTER TABLE approvals_v4 RENAME TO approvals;
  CREATE INDEX approvals_by_status ON approvals(status, id);
  `,
  // 5: adapters' state between turns (codex's usage totals), out of the harness's reach.
  harnessStateTable(T),
  // 6: operator decisions as accepted (who, verified or not, and the claim), a signature's nonce once only.
  operatorDecisionsTable(T),
  // 7: shared workspaces claimed by one open run at a time (agent and agent-user scopes).
  workspaceClaimsTable(T),
  // 8: the egress gateway's rows: every request from a sandbox, every model call it metered (issue 21).
  gatewayTables(T),
  // 9: the MCP loopback's reads (issue 23).
  loopbackTable(T),
];

/** Schema version this code writes. */
export const LEDGER_SCHEMA_VERSION = MIGRATIONS.length;

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
       ON CONFLICT(workflow_id, run_id) DO NOTHING`,
    ),
    latestRunId: db.prepare(`SELECT run_id FROM runs WHERE workflow_id = ? ORDER BY rowid DESC LIMIT 1`).pluck(),
    runExists: db.prepare(`SELECT 1 FROM runs WHERE workflow_id = ? AND run_id = ?`).pluck(),
    finishRun: db.prepare(
      `UPDATE runs SET status = @status, result_json = @result, finished_at = @at WHERE workflow_id = @workflowId AND run_id = @runId`,
    ),
    setStatus: db.prepare(`UPDATE runs SET status = @status WHERE workflow_id = @workflowId AND run_id = @runId`),
    setSession: db.prepare(`UPDATE runs SET external_session_id = @sessionId WHERE workflow_id = @workflowId AND run_id = @runId`),
    getHarnessState: db.prepare(`SELECT value_json FROM harness_state WHERE workflow_id = ? AND key = ?`),
    setHarnessState: db.prepare(
      `INSERT INTO harness_state (workflow_id, key, value_json, updated_at) VALUES (@workflowId, @key, @value, @at)
       ON CONFLICT (workflow_id, key) DO UPDATE SET value_json = excluded.value_json, updated_at = excluded.updated_at`,
    ),
    claimWorkspace: db.prepare(
      `INSERT INTO workspace_claims (key, workflow_id, run_id, claimed_at) VALUES (@key, @workflowId, @runId, @at)
       ON CONFLICT (key) DO UPDATE SET workflow_id = excluded.workflow_id, run_id = excluded.run_id, claimed_at = excluded.claimed_at
       WHERE workspace_claims.workflow_id = excluded.workflow_id
            OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.workflow_id = workspace_claims.workflow_id AND r.finished_at IS NULL)`,
    ),
    workspaceHolder: db.prepare(`SELECT workflow_id, run_id FROM workspace_claims WHERE key = ?`),
    releaseWorkspace: db.prepare(`DELETE FROM workspace_claims WHERE key = ? AND workflow_id = ?`),
    releaseWorkspacesOf: db.prepare(`DELETE FROM workspace_claims WHERE workflow_id = ?`),
    getRun: db.prepare(`SELECT * FROM runs WHERE workflow_id = ? AND run_id = ?`),
    listRuns: db.prepare(`SELECT * FROM runs WHERE workflow_id = ? ORDER BY rowid`),
    listOpenRuns: db.prepare(`SELECT * FROM runs WHERE finished_at IS NULL ORDER BY rowid LIMIT ?`),
    insertAttempt: db.prepare(
      `INSERT INTO attempts (workflow_id, run_id, turn, attempt, attempt_id, status, priced, prompt_id, model_id, vendor_id, input, started_at)
       VALUES (@workflowId, @runId, @turn, @attempt, @attemptId, 'running', @priced, @promptId, @modelId, @vendorId, @input, @at)
       ON CONFLICT(workflow_id, run_id, attempt_id) DO NOTHING`,
    ),
    loseEarlierAttempts: db.prepare(
      `UPDATE attempts SET status = 'lost', finished_at = @at
       WHERE workflow_id = @workflowId AND run_id = @runId AND turn = @turn AND attempt_id != @attemptId AND status = 'running'`,
    ),
    unuseEarlierAttempts: db.prepare(
      `UPDATE attempts SET output_used = 0
       WHERE workflow_id = @workflowId AND run_id = @runId AND turn = @turn AND attempt_id != @attemptId AND output_used = 1`,
    ),
    finishAttempt: db.prepare(
      `UPDATE attempts SET status = @status, output_used = @outputUsed, output = @output, error = @error, reported_model = @reportedModel,
         external_session_id = @externalSessionId, resumed = @resumed, duration_ms = @durationMs, usage_missing = @usageMissing, finished_at = @at
       WHERE workflow_id = @workflowId AND run_id = @runId AND attempt_id = @attemptId AND status = 'running'`,
    ),
    insertCall: db.prepare(
      `INSERT INTO model_calls (workflow_id, run_id, attempt_id, turn, call, input_tokens, output_tokens, cache_read_tokens,
         cache_write_tokens, reasoning_tokens, price_usd, harness_cost_usd, at)
       VALUES (@workflowId, @runId, @attemptId, @turn, @call, @input, @output, @cacheRead, @cacheWrite, @reasoning, @priceUsd, @harnessCostUsd, @at)
       ON CONFLICT(workflow_id, run_id, attempt_id, call) DO NOTHING`,
    ),
    listAttempts: db.prepare(`SELECT * FROM attempts WHERE workflow_id = ? AND run_id = ? ORDER BY turn, id`),
    listCalls: db.prepare(`SELECT * FROM model_calls WHERE workflow_id = ? AND run_id = ? ORDER BY id`),
    insertStep: db.prepare(
      `INSERT INTO run_steps (workflow_id, run_id, seq, turn, type, payload_json, created_at)
       VALUES (@workflowId, @runId, @seq, @turn, @type, @payload, @at)
       ON CONFLICT(workflow_id, run_id, seq) DO NOTHING`,
    ),
    listSteps: db.prepare(`SELECT * FROM run_steps WHERE workflow_id = ? AND run_id = ? ORDER BY seq`),
    getStep: db.prepare(`SELECT * FROM run_steps WHERE workflow_id = ? AND run_id = ? AND seq = ?`),
    completeStep: db.prepare(`UPDATE run_steps SET payload_json = @payload WHERE workflow_id = @workflowId AND run_id = @runId AND seq = @seq`),
    putBlob: db.prepare(
      `INSERT INTO blobs (hash, kind, bytes, content, created_at) VALUES (@hash, @kind, @bytes, @content, @at)
       ON CONFLICT(hash) DO NOTHING`,
    ),
    getBlob: db.prepare(`SELECT content FROM blobs WHERE hash = ?`).pluck(),
    insertEvent: db.prepare(
      `INSERT INTO events (workflow_id, run_id, turn, type, data_json, at) VALUES (@workflowId, @runId, @turn, @type, @data, @at)`,
    ),
    readEvents: db.prepare(`SELECT * FROM events WHERE workflow_id = ? AND cursor > ? ORDER BY cursor LIMIT ?`),
    insertApproval: db.prepare(
      `INSERT INTO approvals (workflow_id, run_id, request_id, turn, tool, kind, title, input_json, command, paths_json, status,
         requested_at, expires_at, decided_by, decided_at, edited_input_json, scope, message)
       VALUES (@workflowId, @runId, @requestId, @turn, @tool, @kind, @title, @input, @command, @paths, @status,
         @at, @expiresAt, @decidedBy, @decidedAt, @editedInput, @scope, @message)
       ON CONFLICT(workflow_id, run_id, request_id) DO NOTHING`,
    ),
    decideApproval: db.prepare(
      `UPDATE approvals SET status = @status, decided_by = @decidedBy, decided_at = @at, edited_input_json = @editedInput,
         scope = @scope, message = @message
       WHERE workflow_id = @workflowId AND run_id = @runId AND request_id = @requestId AND status = 'pending'`,
    ),
    getApproval: db.prepare(`SELECT * FROM approvals WHERE workflow_id = ? AND run_id = ? AND request_id = ?`),
    listApprovals: db.prepare(
      `SELECT * FROM approvals WHERE (@workflowId IS NULL OR (workflow_id = @workflowId AND run_id = @runId)) AND (@status IS NULL OR status = @status)
       ORDER BY id LIMIT @limit`,
    ),
    listGrants: db.prepare(
      `SELECT * FROM approvals WHERE workflow_id = @workflowId AND run_id = @runId AND status = 'allowed'
         AND (scope = 'session' OR (turn = @turn AND edited_input_json IS NOT NULL))
       ORDER BY id`,
    ),
    insertDecision: db.prepare(
      `INSERT INTO operator_decisions (nonce, workflow_id, run_id, action, request_id, principal, key_id, authenticated, claim_json, at)
       VALUES (@nonce, @workflowId, @runId, @action, @requestId, @principal, @keyId, @authenticated, @claim, @at)
       ON CONFLICT(nonce) DO NOTHING`,
    ),
    listDecisions: db.prepare(`SELECT * FROM operator_decisions WHERE workflow_id = ? AND run_id = ? ORDER BY id`),
    insertNetwork: db.prepare(
      `INSERT INTO network_requests (id, workflow_id, run_id, turn, attempt_id, at_ms, kind, method, destination, path, status,
         bytes_in, bytes_out, decision, rule, duration_ms, suppressed)
       VALUES (@id, @workflowId, @runId, @turn, @attemptId, @at, @kind, @method, @destination, @path, @status,
         @bytesIn, @bytesOut, @decision, @rule, @durationMs, @suppressed)
       ON CONFLICT(id) DO NOTHING`,
    ),
    insertMeteredCall: db.prepare(
      `INSERT INTO metered_calls (id, workflow_id, run_id, turn, attempt_id, at_ms, api, model, input_tokens, output_tokens,
         cache_read_tokens, cache_write_tokens, reasoning_tokens, status, streamed, duration_ms, first_byte_ms)
       VALUES (@id, @workflowId, @runId, @turn, @attemptId, @at, @api, @model, @input, @output,
         @cacheRead, @cacheWrite, @reasoning, @status, @streamed, @durationMs, @firstByteMs)
       ON CONFLICT(id) DO NOTHING`,
    ),
    listNetwork: db.prepare(
      `SELECT * FROM network_requests WHERE workflow_id = @workflowId AND run_id = @runId AND seq > @afterSeq
         AND (@refusedOnly = 0 OR decision = 'refused')
       ORDER BY seq LIMIT @limit`,
    ),
    listMeteredCalls: db.prepare(
      `SELECT * FROM metered_calls WHERE workflow_id = @workflowId AND run_id = @runId
         AND (@attemptId IS NULL OR attempt_id = @attemptId) AND (@turn IS NULL OR turn = @turn)
       ORDER BY seq`,
    ),
    insertLoopback: db.prepare(
      `INSERT INTO loopback_reads (id, workflow_id, run_id, turn, attempt_id, at_ms, method, target, status, bytes, duration_ms, reason, suppressed)
       VALUES (@id, @workflowId, @runId, @turn, @attemptId, @at, @method, @target, @status, @bytes, @durationMs, @reason, @suppressed)
       ON CONFLICT(id) DO NOTHING`,
    ),
    listLoopback: db.prepare(
      `SELECT * FROM loopback_reads WHERE workflow_id = @workflowId AND run_id = @runId AND seq > @afterSeq
         AND (@turn IS NULL OR turn = @turn)
       ORDER BY seq LIMIT @limit`,
    ),
    summaryRequests: db.prepare(SUMMARY_SQL.requests),
    summaryLastRefused: db.prepare(SUMMARY_SQL.lastRefused),
    summaryCalls: db.prepare(SUMMARY_SQL.calls),
    summaryModels: db.prepare(SUMMARY_SQL.models),
    expireApprovals: db.prepare(
      `UPDATE approvals SET status = 'expired', decided_by = @reason, decided_at = @at
       WHERE workflow_id = @workflowId AND run_id = @runId AND status = 'pending' AND (@turn IS NULL OR turn = @turn)`,
    ),
  };
}

/** A file's identity: a deleted or replaced ledger file has another one (or none). */
interface FileIdentity {
  readonly dev: number;
  readonly ino: number;
}

function identityOf(file: string): FileIdentity | undefined {
  try {
    const s = statSync(file);
    return { dev: s.dev, ino: s.ino };
  } catch {
    return undefined;
  }
}

/** SQLite error codes that mean "this write cannot land now" rather than a bug in the statement. */
const faultCodes: Readonly<Record<string, 'LedgerReadOnly' | 'LedgerUnavailable'>> = {
  SQLITE_READONLY: 'LedgerReadOnly',
  SQLITE_READONLY_DBMOVED: 'LedgerReadOnly',
  SQLITE_READONLY_RECOVERY: 'LedgerReadOnly',
  SQLITE_READONLY_CANTLOCK: 'LedgerReadOnly',
  SQLITE_READONLY_DIRECTORY: 'LedgerReadOnly',
  SQLITE_BUSY: 'LedgerUnavailable',
  SQLITE_LOCKED: 'LedgerUnavailable',
  SQLITE_IOERR: 'LedgerUnavailable',
  SQLITE_FULL: 'LedgerUnavailable',
  SQLITE_CANTOPEN: 'LedgerUnavailable',
};

/**
 * The ledger in one SQLite file (WAL mode), safe to share between a worker and a command line on one host.
 * Every write first checks that the file is still the one it opened: SQLite keeps writing into a deleted (or
 * replaced) file's old inode, where nobody will ever read it, so such a write is refused with a LedgerFaultError
 * instead of silently lost. Read-only and I/O failures become LedgerFaultErrors too; writers retry them.
 */
export class SqliteLedger implements Ledger {
  private readonly stmts: ReturnType<typeof prepareStatements>;
  private closed = false;
  private readOnly = false;
  private lastFault: LedgerFaultError | undefined;

  private constructor(
    private readonly db: Database.Database,
    private readonly file: string,
    private readonly identity: FileIdentity | undefined,
  ) {
    this.stmts = prepareStatements(db);
  }

  /** Opens (creating directories and the file if needed) and migrates the ledger at `file`. */
  static open(file: string): SqliteLedger {
    const resolved = file === ':memory:' ? file : path.resolve(file);
    if (resolved !== ':memory:') mkdirSync(path.dirname(resolved), { recursive: true });
    const db = new Database(resolved);
    try {
      db.pragma('journal_mode = WAL');
      db.pragma('busy_timeout = 5000');
      db.pragma('foreign_keys = ON');
      // WAL + NORMAL is durable across process crashes; only an OS crash can lose the last commits.
      db.pragma('synchronous = NORMAL');
      migrate(db);
      return new SqliteLedger(db, resolved, resolved === ':memory:' ? undefined : identityOf(resolved));
    } catch (e) {
      db.close();
      throw e;
    }
  }

  /** The schema version of the open file. */
  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  /**
   * Refuses (on) or allows (off) writes, as a read-only database would: SQLite itself rejects them
   * (`PRAGMA query_only`). For maintenance windows and fault drills; writers wait and retry meanwhile.
   */
  setReadOnly(on: boolean): void {
    this.readOnly = on;
    this.db.pragma(`query_only = ${on ? 'ON' : 'OFF'}`);
  }

  /** Checks the file is still the one opened; throws LedgerFaultError when it was deleted or replaced. */
  private checkIdentity(): void {
    if (!this.identity) return;
    const current = identityOf(this.file);
    if (!current) {
      throw new LedgerFaultError(
        'LedgerMissing',
        `the ledger file ${this.file} was deleted while the worker had it open; writes would be lost. Restore the file (or move the data directory back) and restart the worker.`,
      );
    }
    if (current.dev !== this.identity.dev || current.ino !== this.identity.ino) {
      throw new LedgerFaultError(
        'LedgerReplaced',
        `the ledger file ${this.file} was replaced by another file while the worker had it open; writes would go to the old one. Restart the worker to open the new file.`,
      );
    }
  }

  /** Runs one write: identity check first, SQLite faults as LedgerFaultError, remembered for `health`. */
  private write<T>(fn: () => T): T {
    if (this.closed) throw new LedgerFaultError('LedgerUnavailable', 'the ledger is closed');
    try {
      this.checkIdentity();
      const out = fn();
      this.lastFault = undefined;
      return out;
    } catch (err) {
      const fault = err instanceof LedgerFaultError ? err : this.asFault(err);
      if (fault) {
        this.lastFault = fault;
        throw fault;
      }
      throw err;
    }
  }

  private asFault(err: unknown): LedgerFaultError | undefined {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string') return undefined;
    const kind = faultCodes[code] ?? (code.startsWith('SQLITE_IOERR') ? 'LedgerUnavailable' : undefined);
    if (!kind) return undefined;
    const why = kind === 'LedgerReadOnly' ? 'is read-only' : 'cannot be written';
    return new LedgerFaultError(kind, `the ledger ${this.file} ${why} (${code}: ${(err as Error).message}); writes wait and retry until it can be written again.`, {
      cause: err,
    });
  }

  /** The run a row belongs to: the given one if the ledger knows it, else the latest run with this workflow id. */
  private runOf(workflowId: string, runId?: string): string {
    if (runId !== undefined && this.stmts.runExists.get(workflowId, runId) !== undefined) return runId;
    return (this.stmts.latestRunId.get(workflowId) as string | undefined) ?? runId ?? '';
  }

  /** Runs one write statement; whether it changed a row (an insert that met its key already did not). */
  private changed(statement: Database.Statement, params: Record<string, unknown>): boolean {
    return this.write(() => statement.run(params).changes > 0);
  }

  /** A row's workflow id and the run it belongs to (see `runOf`), as statement parameters. */
  private keysOf(row: { workflowId: string; runId?: string | undefined }): { workflowId: string; runId: string } {
    return { workflowId: row.workflowId, runId: this.runOf(row.workflowId, row.runId) };
  }

  async health(): Promise<LedgerHealth> {
    const location = this.file;
    if (this.closed) return { ok: false, location, problem: 'the ledger is closed' };
    try {
      this.checkIdentity();
    } catch (err) {
      return { ok: false, location, problem: (err as Error).message };
    }
    if (this.readOnly) return { ok: false, location, problem: `the ledger ${this.file} is read-only (set by the operator); writes wait and retry` };
    if (this.lastFault) return { ok: false, location, problem: this.lastFault.message };
    return { ok: true, location };
  }

  async syncCatalog(entries: CatalogEntries): Promise<void> {
    const at = now();
    this.write(() =>
      this.db.transaction(() => {
        for (const v of entries.vendors) this.stmts.upsertVendor.run({ id: v.id, name: v.name, at });
        for (const m of entries.models) this.stmts.upsertModel.run({ id: m.id, vendorId: m.vendorId, name: m.name, at });
        for (const p of entries.prompts) this.stmts.upsertPrompt.run({ id: p.id, name: p.name, text: p.text, at });
      })(),
    );
  }

  async startRun(run: RunRecord): Promise<{ created: boolean }> {
    const created = this.changed(this.stmts.insertRun, {
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
    return { created };
  }

  async finishRun(workflowId: string, status: RunStatus, result: unknown, runId?: string): Promise<void> {
    this.write(() => this.stmts.finishRun.run({ workflowId, runId: this.runOf(workflowId, runId), status, result: toJson(result), at: now() }));
  }

  async setRunStatus(workflowId: string, status: RunStatus, runId?: string): Promise<void> {
    this.write(() => this.stmts.setStatus.run({ workflowId, runId: this.runOf(workflowId, runId), status }));
  }

  async setExternalSessionId(workflowId: string, sessionId: string, runId?: string): Promise<void> {
    this.write(() => this.stmts.setSession.run({ workflowId, runId: this.runOf(workflowId, runId), sessionId }));
  }

  async getHarnessState(workflowId: string, key: string): Promise<unknown> {
    const row = this.stmts.getHarnessState.get(workflowId, key) as { value_json: string } | undefined;
    return row ? (JSON.parse(row.value_json) as unknown) : undefined;
  }

  async setHarnessState(workflowId: string, key: string, value: unknown): Promise<void> {
    this.write(() => this.stmts.setHarnessState.run({ workflowId, key, value: JSON.stringify(value), at: now() }));
  }

  async claimWorkspace(key: string, holder: WorkspaceHolder): Promise<WorkspaceHolder> {
    return this.write(() =>
      this.db.transaction(() => {
        this.stmts.claimWorkspace.run({ key, workflowId: holder.workflowId, runId: holder.runId, at: now() });
        const row = this.stmts.workspaceHolder.get(key) as { workflow_id: string; run_id: string } | undefined;
        return row ? { workflowId: row.workflow_id, runId: row.run_id } : holder;
      })(),
    );
  }

  async releaseWorkspace(key: string, holder: WorkspaceHolder): Promise<void> {
    this.write(() => this.stmts.releaseWorkspace.run(key, holder.workflowId));
  }

  async releaseWorkspacesOf(workflowId: string): Promise<number> {
    return this.write(() => this.stmts.releaseWorkspacesOf.run(workflowId).changes);
  }

  async getRun(workflowId: string, runId?: string): Promise<RunView | undefined> {
    const row = this.stmts.getRun.get(workflowId, this.runOf(workflowId, runId)) as Row | undefined;
    return row ? runFromRow(row) : undefined;
  }

  async listRuns(workflowId: string): Promise<RunView[]> {
    return (this.stmts.listRuns.all(workflowId) as Row[]).map(runFromRow);
  }

  async listOpenRuns(limit = 100): Promise<RunView[]> {
    return (this.stmts.listOpenRuns.all(Math.max(1, Math.floor(limit))) as Row[]).map(runFromRow);
  }

  /** Names every id of `row` that does not resolve, so the operator knows which catalog entry to fix. */
  private unresolved(row: AttemptStart): string[] {
    return unresolvedAccounting(row, {
      promptExists: this.stmts.promptExists.get(row.promptId) !== undefined,
      modelVendor: this.stmts.modelVendor.get(row.modelId) as string | undefined,
      vendorExists: this.stmts.vendorExists.get(row.vendorId) !== undefined,
    });
  }

  async beginAttempt(start: AttemptStart): Promise<{ inserted: boolean }> {
    const problems = this.unresolved(start);
    if (problems.length > 0) throw new UnresolvedAccountingError(problems.join('; '));
    const runId = this.runOf(start.workflowId, start.runId);
    const at = now();
    const info = this.write(() =>
      this.db.transaction(() => {
        const keys = { workflowId: start.workflowId, runId, turn: start.turn, attemptId: start.attemptId, at };
        this.stmts.loseEarlierAttempts.run(keys);
        this.stmts.unuseEarlierAttempts.run(keys);
        return this.stmts.insertAttempt.run({
          ...keys,
          attempt: start.attempt,
          priced: start.priced ? 1 : 0,
          promptId: start.promptId,
          modelId: start.modelId,
          vendorId: start.vendorId,
          input: start.input,
        });
      })(),
    );
    return { inserted: info.changes > 0 };
  }

  async recordUsage(row: UsageRecord): Promise<{ inserted: boolean }> {
    const u = row.usage;
    const inserted = this.changed(this.stmts.insertCall, {
      ...this.keysOf(row),
      attemptId: row.attemptId,
      turn: row.turn,
      call: row.call,
      ...usageColumns(u),
      priceUsd: row.priceUsd ?? null,
      harnessCostUsd: row.harnessCostUsd ?? null,
      at: now(),
    });
    return { inserted };
  }

  async finishAttempt(finish: AttemptFinish): Promise<{ updated: boolean }> {
    const updated = this.changed(this.stmts.finishAttempt, {
      ...this.keysOf(finish),
      attemptId: finish.attemptId,
      status: finish.status,
      outputUsed: finish.outputUsed ? 1 : 0,
      output: finish.output,
      error: finish.error ?? null,
      reportedModel: finish.reportedModel ?? null,
      externalSessionId: finish.externalSessionId ?? null,
      resumed: finish.resumed ? 1 : 0,
      durationMs: Math.round(finish.durationMs),
      usageMissing: finish.usageMissing ? 1 : 0,
      at: now(),
    });
    return { updated };
  }

  /** Attempts and their calls, folded into prompt-run views. */
  private promptRuns(workflowId: string, runId: string): PromptRunRecord[] {
    return promptRunsFromRows(this.stmts.listAttempts.all(workflowId, runId) as Row[], this.stmts.listCalls.all(workflowId, runId) as Row[]);
  }

  async listPromptRuns(workflowId: string, runId?: string): Promise<PromptRunRecord[]> {
    const run = this.runOf(workflowId, runId);
    return withServedModels(this.promptRuns(workflowId, run), await this.listModelCalls(workflowId, { runId: run }));
  }

  async runTotals(workflowId: string, runId?: string, options: { turn?: number } = {}): Promise<RunTotals> {
    return totalsOf(this.promptRuns(workflowId, this.runOf(workflowId, runId)), options.turn);
  }

  async recordStep(step: RunStepRecord): Promise<{ inserted: boolean }> {
    const inserted = this.changed(this.stmts.insertStep, {
      ...this.keysOf(step),
      seq: step.seq,
      turn: step.turn,
      type: step.type,
      payload: toJson(step.payload),
      at: now(),
    });
    return { inserted };
  }

  async getStep(workflowId: string, seq: number, runId?: string): Promise<RunStepRecord | undefined> {
    const r = this.stmts.getStep.get(workflowId, this.runOf(workflowId, runId), seq) as Row | undefined;
    return r && stepFromRow(r);
  }

  async completeStep(workflowId: string, seq: number, payload: unknown, runId?: string): Promise<void> {
    this.write(() => this.stmts.completeStep.run({ workflowId, runId: this.runOf(workflowId, runId), seq, payload: toJson(payload) }));
  }

  async putBlob(blob: BlobRecord): Promise<void> {
    this.write(() => this.stmts.putBlob.run({ hash: blob.hash, kind: blob.kind, bytes: Buffer.byteLength(blob.content, 'utf8'), content: blob.content, at: now() }));
  }

  async getBlob(hash: string): Promise<string | undefined> {
    return this.stmts.getBlob.get(hash) as string | undefined;
  }

  async listSteps(workflowId: string, runId?: string): Promise<RunStepRecord[]> {
    return (this.stmts.listSteps.all(workflowId, this.runOf(workflowId, runId)) as Row[]).map(stepFromRow);
  }

  async appendEvent(workflowId: string, turn: number, type: string, data: unknown, runId?: string): Promise<number> {
    const info = this.write(() =>
      this.stmts.insertEvent.run({ workflowId, runId: this.runOf(workflowId, runId), turn, type, data: toJson(data), at: now() }),
    );
    return Number(info.lastInsertRowid);
  }

  async readEvents(workflowId: string, afterCursor: number, limit = DEFAULT_EVENT_PAGE): Promise<LedgerEvent[]> {
    const page = pageSize(limit);
    return (this.stmts.readEvents.all(workflowId, afterCursor, page) as Row[]).map(eventFromRow);
  }

  async requestApproval(request: NewApproval): Promise<{ record: ApprovalRecord; created: boolean }> {
    const at = now();
    const runId = this.runOf(request.workflowId, request.runId);
    const columns = approvalColumns(request, runId);
    const info = this.write(() => this.stmts.insertApproval.run({ ...columns, at, decidedAt: columns.status === 'pending' ? null : at }));
    const record = await this.getApproval(request.workflowId, request.requestId, runId);
    return { record: record!, created: info.changes > 0 };
  }

  async decideApproval(workflowId: string, requestId: string, decision: ApprovalDecisionInput, runId?: string): Promise<ApprovalRecord | undefined> {
    const run = this.runOf(workflowId, runId);
    this.write(() =>
      this.stmts.decideApproval.run({ workflowId, runId: run, requestId, ...decisionColumns(decision), at: now() }),
    );
    return this.getApproval(workflowId, requestId, run);
  }

  async getApproval(workflowId: string, requestId: string, runId?: string): Promise<ApprovalRecord | undefined> {
    const row = this.stmts.getApproval.get(workflowId, this.runOf(workflowId, runId), requestId) as Row | undefined;
    return row ? approvalFromRow(row) : undefined;
  }

  async listApprovals(filter: { workflowId?: string; runId?: string; status?: ApprovalStatus; limit?: number } = {}): Promise<ApprovalRecord[]> {
    const limit = pageSize(filter.limit);
    const runId = filter.workflowId !== undefined ? this.runOf(filter.workflowId, filter.runId) : null;
    const rows = this.stmts.listApprovals.all({ workflowId: filter.workflowId ?? null, runId, status: filter.status ?? null, limit }) as Row[];
    return rows.map(approvalFromRow);
  }

  async listGrants(workflowId: string, turn: number, runId?: string): Promise<ApprovalRecord[]> {
    const rows = this.stmts.listGrants.all({ workflowId, runId: this.runOf(workflowId, runId), turn }) as Row[];
    return rows.map(approvalFromRow);
  }

  async expireApprovals(workflowId: string, reason: string, turn?: number, runId?: string): Promise<number> {
    const run = this.runOf(workflowId, runId);
    return this.write(() => this.stmts.expireApprovals.run({ workflowId, runId: run, reason, turn: turn ?? null, at: now() }).changes);
  }

  async recordDecision(d: DecisionRecord): Promise<{ inserted: boolean }> {
    const runId = this.runOf(d.workflowId, d.runId);
    const changes = this.write(
      () =>
        this.stmts.insertDecision.run({
          nonce: d.nonce,
          workflowId: d.workflowId,
          runId,
          action: d.action,
          requestId: d.requestId ?? null,
          principal: d.principal,
          keyId: d.keyId ?? null,
          authenticated: d.authenticated ? 1 : 0,
          claim: d.claim === undefined ? null : JSON.stringify(d.claim),
          at: now(),
        }).changes,
    );
    return { inserted: changes > 0 };
  }

  async listDecisions(workflowId: string, runId?: string): Promise<DecisionView[]> {
    return (this.stmts.listDecisions.all(workflowId, this.runOf(workflowId, runId)) as Row[]).map(operatorDecisionFromRow);
  }

  async recordNetwork(rows: readonly NetworkRow[]): Promise<void> {
    if (rows.length === 0) return;
    this.write(() =>
      this.db.transaction(() => {
        for (const row of rows) this.stmts.insertNetwork.run({ ...networkColumns(row), ...this.keysOf(row) });
      })(),
    );
  }

  async recordModelCalls(rows: readonly ModelCallRow[]): Promise<void> {
    if (rows.length === 0) return;
    this.write(() =>
      this.db.transaction(() => {
        for (const row of rows) {
          const columns = modelCallColumns(row);
          this.stmts.insertMeteredCall.run({ ...columns, ...this.keysOf(row), streamed: columns.streamed ? 1 : 0 });
        }
      })(),
    );
  }

  async recordLoopbackReads(rows: readonly LoopbackRow[]): Promise<void> {
    if (rows.length === 0) return;
    this.write(() =>
      this.db.transaction(() => {
        for (const row of rows) this.stmts.insertLoopback.run({ ...loopbackColumns(row), ...this.keysOf(row) });
      })(),
    );
  }

  async listLoopbackReads(workflowId: string, options: { runId?: string; turn?: number; afterSeq?: number; limit?: number } = {}): Promise<LoopbackEntry[]> {
    const rows = this.stmts.listLoopback.all({
      workflowId,
      runId: this.runOf(workflowId, options.runId),
      afterSeq: options.afterSeq ?? 0,
      turn: options.turn ?? null,
      limit: networkPage(options.limit),
    }) as Row[];
    return rows.map(loopbackFromRow);
  }

  async listNetwork(workflowId: string, options: NetworkListOptions = {}): Promise<NetworkEntry[]> {
    const rows = this.stmts.listNetwork.all({
      workflowId,
      runId: this.runOf(workflowId, options.runId),
      afterSeq: options.afterSeq ?? 0,
      refusedOnly: options.refusedOnly ? 1 : 0,
      limit: networkPage(options.limit),
    }) as Row[];
    return rows.map(networkFromRow);
  }

  async listModelCalls(workflowId: string, options: { runId?: string; attemptId?: string; turn?: number } = {}): Promise<ModelCallEntry[]> {
    const rows = this.stmts.listMeteredCalls.all({
      workflowId,
      runId: this.runOf(workflowId, options.runId),
      attemptId: options.attemptId ?? null,
      turn: options.turn ?? null,
    }) as Row[];
    return rows.map(modelCallFromRow);
  }

  async networkSummary(workflowId: string, runId?: string): Promise<NetworkSummary> {
    const keys = { w: workflowId, r: this.runOf(workflowId, runId) };
    return this.db.transaction(() =>
      summaryFromRows(
        this.stmts.summaryRequests.get(keys) as Row,
        this.stmts.summaryLastRefused.get(keys) as Row | undefined,
        this.stmts.summaryCalls.get(keys) as Row,
        this.stmts.summaryModels.all(keys) as Row[],
      ),
    )();
  }

  /** Closes the database; calling it again does nothing. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.db.close();
  }
}
