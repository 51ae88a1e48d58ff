/**
 * The run ledger in PostgreSQL (node-postgres), for several workers on several hosts: the same contract as the
 * SQLite ledger. Selected by DATABASE_URL (see ./open.ts). Migrations run on open, under an advisory lock.
 *
 * Rows are keyed by (workflow_id, run_id) like SQLite's; a call without a run id (or with one the ledger does not
 * know) resolves to the latest run of the workflow id inside the statement itself (`runOf`), so it costs no extra
 * round trip. A write the server cannot take (read-only, unreachable, out of space) raises a LedgerFaultError that
 * writers retry, and `health()` says why.
 */
import pg from 'pg';
import { EVENTS_CHANNEL } from '../contracts/run-events.js';
import { unresolvedAccounting } from './accounting.js';
import { migrate, POSTGRES_MIGRATIONS } from './postgres-migrations.js';
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
  LedgerFaultError,
  UnresolvedAccountingError,
  type ApprovalDecisionInput,
  type ApprovalRecord,
  type ApprovalStatus,
  type AttemptFinish,
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
  type BlobRecord,
  type RunStepRecord,
  type RunTotals,
  type RunView,
  type UsageRecord,
  type WorkspaceHolder,
} from './types.js';

/**
 * SQL for "the run a row belongs to", given the workflow id as `$w` and the run id (or NULL) as `$r`: that run if
 * the ledger knows it, else the latest run of the workflow id, else the given id (or '').
 */
function runOf(w: string, r: string): string {
  return `COALESCE((SELECT run_id FROM runs WHERE workflow_id = ${w} ORDER BY (run_id = ${r}::text) DESC NULLS LAST, seq DESC LIMIT 1), ${r}::text, '')`;
}

/** SQLSTATE classes and codes that mean "this write cannot land now" rather than a bug in the statement. */
function faultKind(err: unknown): 'LedgerReadOnly' | 'LedgerUnavailable' | undefined {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string') return undefined;
  if (code === '25006') return 'LedgerReadOnly'; // read_only_sql_transaction (a hot standby, default_transaction_read_only)
  // connection exceptions, insufficient resources (disk full), operator intervention (shutdown), system errors
  if (/^(08|53|57P|58)/.test(code) || /^E[A-Z]+$/.test(code)) return 'LedgerUnavailable';
  return undefined;
}

export interface PostgresLedgerOptions {
  /** postgres://user:password@host:port/database (`?options=-c search_path=NAME` picks a schema). */
  readonly connectionString: string;
  /** Pool size per worker (default 10). */
  readonly maxConnections?: number;
}

/** The ledger's database cannot be reached or migrated: a configuration to fix (the message says what), not a bug. */
export class LedgerOpenError extends Error {
  constructor(message: string, cause: Error) {
    super(message, { cause });
    // The cause's own kind when it has one (LedgerSchemaTooNewError: upgrade durable-harness), else this.
    this.name = cause.name && cause.name !== 'Error' ? cause.name : 'LedgerOpenError';
  }
}

/** Hides the password when a URL is shown in a message. */
export function redactDatabaseUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable DATABASE_URL)';
  }
}

export class PostgresLedger implements Ledger {
  private readonly pool: pg.Pool;
  /** Resolves once the schema is migrated; every call waits for it. */
  readonly ready: Promise<void>;
  private closed = false;
  private readonly location: string;
  private lastFault: LedgerFaultError | undefined;

  private constructor(options: PostgresLedgerOptions) {
    this.pool = new pg.Pool({ connectionString: options.connectionString, max: options.maxConnections ?? 10 });
    // An idle client that loses its server must not crash the worker; the next query reconnects.
    this.pool.on('error', () => undefined);
    const where = redactDatabaseUrl(options.connectionString);
    this.location = where;
    this.ready = migrate(this.pool).then(
      () => undefined,
      (e: Error) => {
        throw new LedgerOpenError(`cannot open the PostgreSQL ledger at ${where}: ${e.message}. Start PostgreSQL there, or fix DATABASE_URL (unset it for the embedded SQLite ledger)`, e);
      },
    );
    this.ready.catch(() => undefined); // surfaced by the first call (or by connect())
  }

  /** Opens the pool and starts migrating; calls wait for the migration. */
  static open(options: PostgresLedgerOptions): PostgresLedger {
    return new PostgresLedger(options);
  }

  /** Opens and waits until the schema is migrated (fails fast on a wrong URL or a newer schema). */
  static async connect(options: PostgresLedgerOptions): Promise<PostgresLedger> {
    const ledger = new PostgresLedger(options);
    try {
      await ledger.ready;
    } catch (e) {
      await ledger.close();
      throw e;
    }
    return ledger;
  }

  private async query<R extends Row = Row>(text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
    await this.ready;
    return this.pool.query<R>(text, values);
  }

  /** Runs a write; server faults become LedgerFaultErrors (writers retry them), remembered for `health`. */
  private async write<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) throw new LedgerFaultError('LedgerUnavailable', 'the ledger is closed');
    try {
      const out = await fn();
      this.lastFault = undefined;
      return out;
    } catch (err) {
      const kind = faultKind(err);
      if (!kind) throw err;
      const why = kind === 'LedgerReadOnly' ? 'is read-only' : 'cannot be written';
      const fault = new LedgerFaultError(
        kind,
        `the PostgreSQL ledger at ${this.location} ${why} (${(err as { code?: string }).code}: ${(err as Error).message}); writes wait and retry until it can be written again.`,
        { cause: err },
      );
      this.lastFault = fault;
      throw fault;
    }
  }

  /** Runs `fn` in one transaction on one pooled client. */
  private async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    await this.ready;
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const out = await fn(client);
      await client.query('COMMIT');
      return out;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      client.release();
    }
  }

  /** The run id rows of `workflowId` belong to (see `runOf`). */
  private async resolveRun(workflowId: string, runId?: string): Promise<string> {
    const { rows } = await this.query<{ run_id: string }>(`SELECT ${runOf('$1', '$2')} AS run_id`, [workflowId, runId ?? null]);
    return rows[0]!.run_id;
  }

  async health(): Promise<LedgerHealth> {
    const location = this.location;
    if (this.closed) return { ok: false, location, problem: 'the ledger is closed' };
    try {
      const { rows } = await this.query<{ ro: string }>(`SELECT current_setting('transaction_read_only') AS ro`);
      if (rows[0]?.ro === 'on') return { ok: false, location, problem: `the PostgreSQL ledger at ${location} is read-only (a standby, or default_transaction_read_only); writes wait and retry` };
    } catch (err) {
      return { ok: false, location, problem: `the PostgreSQL ledger at ${location} cannot be reached: ${(err as Error).message}` };
    }
    if (this.lastFault) return { ok: false, location, problem: this.lastFault.message };
    return { ok: true, location };
  }

  /** The migrated schema version. */
  async schemaVersion(): Promise<number> {
    const { rows } = await this.query<{ v: number }>('SELECT max(version) AS v FROM ledger_migrations');
    return rows[0]?.v ?? 0;
  }

  async syncCatalog(entries: CatalogEntries): Promise<void> {
    await this.write(() =>
      this.transaction(async (client) => {
      for (const v of entries.vendors) {
        await client.query(
          `INSERT INTO vendors (id, name, updated_at) VALUES ($1, $2, now())
           ON CONFLICT (id) DO UPDATE SET name = excluded.name, updated_at = excluded.updated_at`,
          [v.id, v.name],
        );
      }
      for (const m of entries.models) {
        await client.query(
          `INSERT INTO models (id, vendor_id, name, updated_at) VALUES ($1, $2, $3, now())
           ON CONFLICT (id) DO UPDATE SET vendor_id = excluded.vendor_id, name = excluded.name, updated_at = excluded.updated_at`,
          [m.id, m.vendorId, m.name],
        );
      }
      for (const p of entries.prompts) {
        await client.query(
          `INSERT INTO prompts (id, name, text, updated_at) VALUES ($1, $2, $3, now())
           ON CONFLICT (id) DO UPDATE SET name = excluded.name, text = excluded.text, updated_at = excluded.updated_at`,
          [p.id, p.name, p.text],
        );
      }
      }),
    );
  }

  async startRun(run: RunRecord): Promise<{ created: boolean }> {
    const result = await this.write(() =>
      this.query(
        `INSERT INTO runs (workflow_id, run_id, agent, harness, tenant_id, user_id, task, parent_workflow_id, status, started_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', now())
         ON CONFLICT (workflow_id, run_id) DO NOTHING`,
        [run.workflowId, run.runId, run.agent, run.harness, run.tenantId, run.userId, run.task, run.parentWorkflowId ?? null],
      ),
    );
    return { created: (result.rowCount ?? 0) > 0 };
  }

  async finishRun(workflowId: string, status: RunStatus, result: unknown, runId?: string): Promise<void> {
    await this.write(() =>
      this.query(`UPDATE runs SET status = $3, result_json = $4, finished_at = now() WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')}`, [
        workflowId,
        runId ?? null,
        status,
        toJson(result),
      ]),
    );
  }

  async setRunStatus(workflowId: string, status: RunStatus, runId?: string): Promise<void> {
    await this.write(() => this.query(`UPDATE runs SET status = $3 WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')}`, [workflowId, runId ?? null, status]));
  }

  async setExternalSessionId(workflowId: string, sessionId: string, runId?: string): Promise<void> {
    await this.write(() =>
      this.query(`UPDATE runs SET external_session_id = $3 WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')}`, [workflowId, runId ?? null, sessionId]),
    );
  }

  async getHarnessState(workflowId: string, key: string): Promise<unknown> {
    const { rows } = await this.query(`SELECT value FROM harness_state WHERE workflow_id = $1 AND key = $2`, [workflowId, key]);
    return rows[0] ? (rows[0].value as unknown) : undefined;
  }

  async setHarnessState(workflowId: string, key: string, value: unknown): Promise<void> {
    await this.write(() =>
      this.query(
        `INSERT INTO harness_state (workflow_id, key, value, updated_at) VALUES ($1, $2, $3::jsonb, now())
         ON CONFLICT (workflow_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`,
        [workflowId, key, JSON.stringify(value)],
      ),
    );
  }

  async claimWorkspace(key: string, holder: WorkspaceHolder): Promise<WorkspaceHolder> {
    return this.write(async () => {
      // Taken when free, or from a holder whose run is closed; one statement, so two workers cannot both win.
      const claimed = await this.query(
        `INSERT INTO workspace_claims (key, workflow_id, run_id, claimed_at) VALUES ($1, $2, $3, now())
         ON CONFLICT (key) DO UPDATE SET workflow_id = EXCLUDED.workflow_id, run_id = EXCLUDED.run_id, claimed_at = EXCLUDED.claimed_at
         WHERE workspace_claims.workflow_id = excluded.workflow_id
            OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.workflow_id = workspace_claims.workflow_id AND r.finished_at IS NULL)
         RETURNING workflow_id, run_id`,
        [key, holder.workflowId, holder.runId],
      );
      const row = claimed.rows[0] ?? (await this.query(`SELECT workflow_id, run_id FROM workspace_claims WHERE key = $1`, [key])).rows[0];
      return row ? { workflowId: String(row.workflow_id), runId: String(row.run_id) } : holder;
    });
  }

  async releaseWorkspace(key: string, holder: WorkspaceHolder): Promise<void> {
    await this.write(() => this.query(`DELETE FROM workspace_claims WHERE key = $1 AND workflow_id = $2`, [key, holder.workflowId]));
  }

  async releaseWorkspacesOf(workflowId: string): Promise<number> {
    return this.write(async () => (await this.query(`DELETE FROM workspace_claims WHERE workflow_id = $1`, [workflowId])).rowCount ?? 0);
  }

  async getRun(workflowId: string, runId?: string): Promise<RunView | undefined> {
    const { rows } = await this.query(`SELECT * FROM runs WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')}`, [workflowId, runId ?? null]);
    return rows[0] ? runFromRow(rows[0]) : undefined;
  }

  async listRuns(workflowId: string): Promise<RunView[]> {
    const { rows } = await this.query(`SELECT * FROM runs WHERE workflow_id = $1 ORDER BY seq`, [workflowId]);
    return rows.map(runFromRow);
  }

  async listOpenRuns(limit = 100): Promise<RunView[]> {
    const { rows } = await this.query(`SELECT * FROM runs WHERE finished_at IS NULL ORDER BY seq LIMIT $1`, [Math.max(1, Math.floor(limit))]);
    return rows.map(runFromRow);
  }

  /** Names every id of `start` that does not resolve, so the operator knows which catalog entry to fix. */
  private async unresolved(start: AttemptStart): Promise<string[]> {
    const { rows } = await this.query<{ prompt: boolean; model_vendor: string | null; vendor: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM prompts WHERE id = $1) AS prompt,
              (SELECT vendor_id FROM models WHERE id = $2) AS model_vendor,
              EXISTS (SELECT 1 FROM vendors WHERE id = $3) AS vendor`,
      [start.promptId, start.modelId, start.vendorId],
    );
    const found = rows[0]!;
    return unresolvedAccounting(start, { promptExists: found.prompt, modelVendor: found.model_vendor ?? undefined, vendorExists: found.vendor });
  }

  async beginAttempt(start: AttemptStart): Promise<{ inserted: boolean }> {
    const problems = await this.unresolved(start);
    if (problems.length > 0) throw new UnresolvedAccountingError(problems.join('; '));
    const inserted = await this.write(() =>
      this.transaction(async (client) => {
        const { rows } = await client.query<{ run_id: string }>(`SELECT ${runOf('$1', '$2')} AS run_id`, [start.workflowId, start.runId ?? null]);
        const runId = rows[0]!.run_id;
        const keys = [start.workflowId, runId, start.turn, start.attemptId];
        // Earlier attempts of the turn still running lost their worker; any earlier attempt's output is not used.
        await client.query(
          `UPDATE attempts SET status = 'lost', finished_at = now()
           WHERE workflow_id = $1 AND run_id = $2 AND turn = $3 AND attempt_id <> $4 AND status = 'running'`,
          keys,
        );
        await client.query(
          `UPDATE attempts SET output_used = false
           WHERE workflow_id = $1 AND run_id = $2 AND turn = $3 AND attempt_id <> $4 AND output_used`,
          keys,
        );
        const result = await client.query(
          `INSERT INTO attempts (workflow_id, run_id, turn, attempt_id, attempt, status, priced, prompt_id, model_id, vendor_id, input, started_at)
           VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8, $9, $10, now())
           ON CONFLICT (workflow_id, run_id, attempt_id) DO NOTHING`,
          [...keys, start.attempt, start.priced, start.promptId, start.modelId, start.vendorId, start.input],
        );
        return (result.rowCount ?? 0) > 0;
      }),
    );
    return { inserted };
  }

  async recordUsage(row: UsageRecord): Promise<{ inserted: boolean }> {
    const u = usageColumns(row.usage);
    const result = await this.write(() =>
      this.query(
        `INSERT INTO model_calls (workflow_id, run_id, attempt_id, turn, call, input_tokens, output_tokens, cache_read_tokens,
           cache_write_tokens, reasoning_tokens, price_usd, harness_cost_usd, at)
         VALUES ($1, ${runOf('$1', '$2')}, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now())
         ON CONFLICT (workflow_id, run_id, attempt_id, call) DO NOTHING`,
        [
          row.workflowId,
          row.runId ?? null,
          row.attemptId,
          row.turn,
          row.call,
          u.input,
          u.output,
          u.cacheRead,
          u.cacheWrite,
          u.reasoning,
          row.priceUsd ?? null,
          row.harnessCostUsd ?? null,
        ],
      ),
    );
    return { inserted: (result.rowCount ?? 0) > 0 };
  }

  async finishAttempt(finish: AttemptFinish): Promise<{ updated: boolean }> {
    // `status = 'running'` is re-checked after waiting on a concurrent finish's row lock, so only the first lands.
    const result = await this.write(() =>
      this.query(
        `UPDATE attempts SET status = $4, output_used = $5, output = $6, error = $7, reported_model = $8, external_session_id = $9,
           resumed = $10, duration_ms = $11, usage_missing = $12, finished_at = now()
         WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND attempt_id = $3 AND status = 'running'`,
        [
          finish.workflowId,
          finish.runId ?? null,
          finish.attemptId,
          finish.status,
          finish.outputUsed,
          finish.output,
          finish.error ?? null,
          finish.reportedModel ?? null,
          finish.externalSessionId ?? null,
          finish.resumed,
          Math.round(finish.durationMs),
          finish.usageMissing === true,
        ],
      ),
    );
    return { updated: (result.rowCount ?? 0) > 0 };
  }

  /** Attempts and their calls, folded into prompt-run views. */
  private async promptRuns(workflowId: string, runId: string | undefined): Promise<PromptRunRecord[]> {
    const run = await this.resolveRun(workflowId, runId);
    const [attempts, calls] = await Promise.all([
      this.query(`SELECT * FROM attempts WHERE workflow_id = $1 AND run_id = $2 ORDER BY turn, id`, [workflowId, run]),
      this.query(`SELECT * FROM model_calls WHERE workflow_id = $1 AND run_id = $2 ORDER BY id`, [workflowId, run]),
    ]);
    return promptRunsFromRows(attempts.rows, calls.rows);
  }

  async listPromptRuns(workflowId: string, runId?: string): Promise<PromptRunRecord[]> {
    const [runs, calls] = await Promise.all([this.promptRuns(workflowId, runId), this.listModelCalls(workflowId, runId !== undefined ? { runId } : {})]);
    return withServedModels(runs, calls);
  }

  async runTotals(workflowId: string, runId?: string, options: { turn?: number } = {}): Promise<RunTotals> {
    return totalsOf(await this.promptRuns(workflowId, runId), options.turn);
  }

  async recordStep(step: RunStepRecord): Promise<{ inserted: boolean }> {
    const result = await this.write(() =>
      this.query(
        `INSERT INTO run_steps (workflow_id, run_id, seq, turn, type, payload_json, created_at) VALUES ($1, ${runOf('$1', '$2')}, $3, $4, $5, $6, now())
         ON CONFLICT (workflow_id, run_id, seq) DO NOTHING`,
        [step.workflowId, step.runId ?? null, step.seq, step.turn, step.type, toJson(step.payload)],
      ),
    );
    return { inserted: (result.rowCount ?? 0) > 0 };
  }

  async getStep(workflowId: string, seq: number, runId?: string): Promise<RunStepRecord | undefined> {
    const { rows } = await this.query(`SELECT * FROM run_steps WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND seq = $3`, [workflowId, runId ?? null, seq]);
    return rows[0] && stepFromRow(rows[0]);
  }

  async completeStep(workflowId: string, seq: number, payload: unknown, runId?: string): Promise<void> {
    await this.write(() =>
      this.query(`UPDATE run_steps SET payload_json = $4 WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND seq = $3`, [workflowId, runId ?? null, seq, toJson(payload)]),
    );
  }

  async putBlob(blob: BlobRecord): Promise<void> {
    await this.write(() =>
      this.query(`INSERT INTO blobs (hash, kind, bytes, content, created_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT (hash) DO NOTHING`, [
        blob.hash,
        blob.kind,
        Buffer.byteLength(blob.content, 'utf8'),
        blob.content,
      ]),
    );
  }

  async getBlob(hash: string): Promise<string | undefined> {
    const { rows } = await this.query<{ content: string }>(`SELECT content FROM blobs WHERE hash = $1`, [hash]);
    return rows[0]?.content;
  }

  async listSteps(workflowId: string, runId?: string): Promise<RunStepRecord[]> {
    const { rows } = await this.query(`SELECT * FROM run_steps WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} ORDER BY seq`, [workflowId, runId ?? null]);
    return rows.map(stepFromRow);
  }

  /**
   * One statement: a lock per workflow id taken before the cursor is drawn (held to commit), so a run's cursors commit
   * in order and a follower reading after its last cursor never skips a row that commits late; then a NOTIFY on
   * EVENTS_CHANNEL (delivered at commit) wakes the run's followers (src/client/postgres-events.ts).
   */
  async appendEvent(workflowId: string, turn: number, type: string, data: unknown, runId?: string): Promise<number> {
    const { rows } = await this.write(() =>
      this.query<{ cursor: string }>(
        `WITH serial AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtext('durable_harness_events'), hashtext($1)) AS locked),
         inserted AS (
           INSERT INTO events (workflow_id, run_id, turn, type, data_json, at)
           SELECT $1, ${runOf('$1', '$2')}, $3, $4, $5, now() FROM serial RETURNING cursor
         )
         SELECT cursor, pg_notify('${EVENTS_CHANNEL}', $1) FROM inserted`,
        [workflowId, runId ?? null, turn, type, toJson(data)],
      ),
    );
    return Number(rows[0]!.cursor);
  }

  async readEvents(workflowId: string, afterCursor: number, limit = DEFAULT_EVENT_PAGE): Promise<LedgerEvent[]> {
    const page = pageSize(limit);
    const { rows } = await this.query(`SELECT * FROM events WHERE workflow_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3`, [workflowId, afterCursor, page]);
    return rows.map(eventFromRow);
  }

  async requestApproval(request: NewApproval): Promise<{ record: ApprovalRecord; created: boolean }> {
    const runId = await this.resolveRun(request.workflowId, request.runId);
    const c = approvalColumns(request, runId);
    // One now() for requested_at and (when already decided) decided_at, as SQLite does. A concurrent insert of the
    // same id waits for the first to commit, then does nothing and reads the committed row below.
    const inserted = await this.write(() =>
      this.query(
        `INSERT INTO approvals (workflow_id, run_id, request_id, turn, tool, kind, title, input_json, command, paths_json, status,
           requested_at, expires_at, decided_by, decided_at, edited_input_json, scope, message)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
           now(), $12, $13, CASE WHEN $11 = 'pending' THEN NULL ELSE now() END, $14, $15, $16)
         ON CONFLICT (workflow_id, run_id, request_id) DO NOTHING
         RETURNING *`,
        [c.workflowId, c.runId, c.requestId, c.turn, c.tool, c.kind, c.title, c.input, c.command, c.paths, c.status, c.expiresAt, c.decidedBy, c.editedInput, c.scope, c.message],
      ),
    );
    if (inserted.rows[0]) return { record: approvalFromRow(inserted.rows[0]), created: true };
    const existing = await this.getApproval(request.workflowId, request.requestId, runId);
    return { record: existing!, created: false };
  }

  async decideApproval(workflowId: string, requestId: string, decision: ApprovalDecisionInput, runId?: string): Promise<ApprovalRecord | undefined> {
    const run = await this.resolveRun(workflowId, runId);
    const c = decisionColumns(decision);
    // `status = 'pending'` is re-checked after waiting on a concurrent decision's row lock, so only the first wins.
    await this.write(() =>
      this.query(
        `UPDATE approvals SET status = $4, decided_by = $5, decided_at = now(), edited_input_json = $6, scope = $7, message = $8
         WHERE workflow_id = $1 AND run_id = $2 AND request_id = $3 AND status = 'pending'`,
        [workflowId, run, requestId, c.status, c.decidedBy, c.editedInput, c.scope, c.message],
      ),
    );
    return this.getApproval(workflowId, requestId, run);
  }

  async getApproval(workflowId: string, requestId: string, runId?: string): Promise<ApprovalRecord | undefined> {
    const { rows } = await this.query(`SELECT * FROM approvals WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND request_id = $3`, [
      workflowId,
      runId ?? null,
      requestId,
    ]);
    return rows[0] ? approvalFromRow(rows[0]) : undefined;
  }

  async listApprovals(filter: { workflowId?: string; runId?: string; status?: ApprovalStatus; limit?: number } = {}): Promise<ApprovalRecord[]> {
    const limit = pageSize(filter.limit);
    const { rows } = await this.query(
      `SELECT * FROM approvals WHERE ($1::text IS NULL OR (workflow_id = $1 AND run_id = ${runOf('$1', '$2')})) AND ($3::text IS NULL OR status = $3)
       ORDER BY id LIMIT $4`,
      [filter.workflowId ?? null, filter.runId ?? null, filter.status ?? null, limit],
    );
    return rows.map(approvalFromRow);
  }

  async listGrants(workflowId: string, turn: number, runId?: string): Promise<ApprovalRecord[]> {
    const { rows } = await this.query(
      `SELECT * FROM approvals WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND status = 'allowed'
         AND (scope = 'session' OR (turn = $3 AND edited_input_json IS NOT NULL))
       ORDER BY id`,
      [workflowId, runId ?? null, turn],
    );
    return rows.map(approvalFromRow);
  }

  async expireApprovals(workflowId: string, reason: string, turn?: number, runId?: string): Promise<number> {
    const result = await this.write(() =>
      this.query(
        `UPDATE approvals SET status = 'expired', decided_by = $3, decided_at = now()
         WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND status = 'pending' AND ($4::integer IS NULL OR turn = $4)`,
        [workflowId, runId ?? null, reason, turn ?? null],
      ),
    );
    return result.rowCount ?? 0;
  }

  async recordDecision(d: DecisionRecord): Promise<{ inserted: boolean }> {
    const runId = await this.resolveRun(d.workflowId, d.runId);
    const result = await this.write(() =>
      this.query(
        `INSERT INTO operator_decisions (nonce, workflow_id, run_id, action, request_id, principal, key_id, authenticated, claim, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
         ON CONFLICT (nonce) DO NOTHING`,
        [d.nonce, d.workflowId, runId, d.action, d.requestId ?? null, d.principal, d.keyId ?? null, d.authenticated, d.claim === undefined ? null : JSON.stringify(d.claim)],
      ),
    );
    return { inserted: (result.rowCount ?? 0) > 0 };
  }

  async listDecisions(workflowId: string, runId?: string): Promise<DecisionView[]> {
    const { rows } = await this.query(`SELECT * FROM operator_decisions WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} ORDER BY id`, [workflowId, runId ?? null]);
    return rows.map(operatorDecisionFromRow);
  }

  /**
   * Inserts a batch in one statement: the rows travel as one JSON parameter (no limit on placeholders), each row's
   * run resolved as `runOf` does, and an `id` already stored is skipped.
   */
  async recordNetwork(rows: readonly NetworkRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.write(() =>
      this.query(
        `INSERT INTO network_requests (id, workflow_id, run_id, turn, attempt_id, at_ms, kind, method, destination, path, status,
           bytes_in, bytes_out, decision, rule, duration_ms, suppressed)
         SELECT x."id", x."workflowId", ${runOf('x."workflowId"', 'x."runId"')}, x."turn", x."attemptId", x."at", x."kind", x."method",
           x."destination", x."path", x."status", x."bytesIn", x."bytesOut", x."decision", x."rule", x."durationMs", x."suppressed"
         FROM jsonb_to_recordset($1::jsonb) AS x("id" text, "workflowId" text, "runId" text, "turn" integer, "attemptId" text,
           "at" bigint, "kind" text, "method" text, "destination" text, "path" text, "status" integer, "bytesIn" bigint,
           "bytesOut" bigint, "decision" text, "rule" text, "durationMs" bigint, "suppressed" bigint)
         ON CONFLICT (id) DO NOTHING`,
        [JSON.stringify(rows.map(networkColumns))],
      ),
    );
  }

  async recordModelCalls(rows: readonly ModelCallRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.write(() =>
      this.query(
        `INSERT INTO metered_calls (id, workflow_id, run_id, turn, attempt_id, at_ms, api, model, input_tokens, output_tokens,
           cache_read_tokens, cache_write_tokens, reasoning_tokens, status, streamed, duration_ms, first_byte_ms)
         SELECT x."id", x."workflowId", ${runOf('x."workflowId"', 'x."runId"')}, x."turn", x."attemptId", x."at", x."api", x."model",
           x."input", x."output", x."cacheRead", x."cacheWrite", x."reasoning", x."status", x."streamed", x."durationMs", x."firstByteMs"
         FROM jsonb_to_recordset($1::jsonb) AS x("id" text, "workflowId" text, "runId" text, "turn" integer, "attemptId" text,
           "at" bigint, "api" text, "model" text, "input" bigint, "output" bigint, "cacheRead" bigint, "cacheWrite" bigint,
           "reasoning" bigint, "status" integer, "streamed" boolean, "durationMs" bigint, "firstByteMs" bigint)
         ON CONFLICT (id) DO NOTHING`,
        [JSON.stringify(rows.map(modelCallColumns))],
      ),
    );
  }

  async recordLoopbackReads(rows: readonly LoopbackRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.write(() =>
      this.query(
        `INSERT INTO loopback_reads (id, workflow_id, run_id, turn, attempt_id, at_ms, method, target, status, bytes, duration_ms, reason, suppressed)
         SELECT x."id", x."workflowId", ${runOf('x."workflowId"', 'x."runId"')}, x."turn", x."attemptId", x."at", x."method", x."target",
           x."status", x."bytes", x."durationMs", x."reason", x."suppressed"
         FROM jsonb_to_recordset($1::jsonb) AS x("id" text, "workflowId" text, "runId" text, "turn" integer, "attemptId" text,
           "at" bigint, "method" text, "target" text, "status" text, "bytes" bigint, "durationMs" bigint, "reason" text, "suppressed" bigint)
         ON CONFLICT (id) DO NOTHING`,
        [JSON.stringify(rows.map(loopbackColumns))],
      ),
    );
  }

  async listLoopbackReads(workflowId: string, options: { runId?: string; turn?: number; afterSeq?: number; limit?: number } = {}): Promise<LoopbackEntry[]> {
    const { rows } = await this.query(
      `SELECT * FROM loopback_reads WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND seq > $3
         AND ($4::integer IS NULL OR turn = $4)
       ORDER BY seq LIMIT $5`,
      [workflowId, options.runId ?? null, options.afterSeq ?? 0, options.turn ?? null, networkPage(options.limit)],
    );
    return rows.map(loopbackFromRow);
  }

  async listNetwork(workflowId: string, options: NetworkListOptions = {}): Promise<NetworkEntry[]> {
    const { rows } = await this.query(
      `SELECT * FROM network_requests WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')} AND seq > $3
         AND ($4::boolean IS NOT TRUE OR decision = 'refused')
       ORDER BY seq LIMIT $5`,
      [workflowId, options.runId ?? null, options.afterSeq ?? 0, options.refusedOnly === true, networkPage(options.limit)],
    );
    return rows.map(networkFromRow);
  }

  async listModelCalls(workflowId: string, options: { runId?: string; attemptId?: string; turn?: number } = {}): Promise<ModelCallEntry[]> {
    const { rows } = await this.query(
      `SELECT * FROM metered_calls WHERE workflow_id = $1 AND run_id = ${runOf('$1', '$2')}
         AND ($3::text IS NULL OR attempt_id = $3) AND ($4::integer IS NULL OR turn = $4)
       ORDER BY seq`,
      [workflowId, options.runId ?? null, options.attemptId ?? null, options.turn ?? null],
    );
    return rows.map(modelCallFromRow);
  }

  async networkSummary(workflowId: string, runId?: string): Promise<NetworkSummary> {
    const run = await this.resolveRun(workflowId, runId);
    const sql = (text: string) => text.replaceAll('$w', '$1').replaceAll('$r', '$2');
    const [requests, last, calls, models] = await Promise.all(
      [SUMMARY_SQL.requests, SUMMARY_SQL.lastRefused, SUMMARY_SQL.calls, SUMMARY_SQL.models].map((text) => this.query(sql(text), [workflowId, run])),
    );
    return summaryFromRows(requests!.rows[0]!, last!.rows[0], calls!.rows[0]!, models!.rows);
  }

  /** Closes the pool; calling it again does nothing. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.ready.catch(() => undefined);
    await this.pool.end();
  }
}

export { POSTGRES_MIGRATIONS };
