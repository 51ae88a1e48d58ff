/**
 * The run ledger in PostgreSQL (node-postgres), for several workers on several hosts: the same contract as the
 * SQLite ledger. Selected by DATABASE_URL (see ./open.ts). Migrations run on open, under an advisory lock.
 */
import pg from 'pg';
import { unresolvedAccounting } from './accounting.js';
import { migrate, POSTGRES_MIGRATIONS } from './postgres-migrations.js';
import { approvalColumns, approvalFromRow, decisionColumns, eventFromRow, promptRunFromRow, runFromRow, stepFromRow, toJson, type Row, type RunView } from './rows.js';
import {
  UnresolvedAccountingError,
  type ApprovalDecisionInput,
  type ApprovalRecord,
  type ApprovalStatus,
  type NewApproval,
  type CatalogEntries,
  type Ledger,
  type LedgerEvent,
  type PromptRunRecord,
  type RunRecord,
  type RunStatus,
  type BlobRecord,
  type RunStepRecord,
} from './types.js';

const DEFAULT_EVENT_PAGE = 100;
const MAX_EVENT_PAGE = 1000;

export interface PostgresLedgerOptions {
  /** postgres://user:password@host:port/database (`?options=-c search_path=NAME` picks a schema). */
  readonly connectionString: string;
  /** Pool size per worker (default 10). */
  readonly maxConnections?: number;
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

  private constructor(options: PostgresLedgerOptions) {
    this.pool = new pg.Pool({ connectionString: options.connectionString, max: options.maxConnections ?? 10 });
    // An idle client that loses its server must not crash the worker; the next query reconnects.
    this.pool.on('error', () => undefined);
    const where = redactDatabaseUrl(options.connectionString);
    this.ready = migrate(this.pool).then(
      () => undefined,
      (e: Error) => {
        throw Object.assign(new Error(`cannot open the PostgreSQL ledger at ${where}: ${e.message}`, { cause: e }), { name: e.name });
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

  /** The migrated schema version. */
  async schemaVersion(): Promise<number> {
    const { rows } = await this.query<{ v: number }>('SELECT max(version) AS v FROM ledger_migrations');
    return rows[0]?.v ?? 0;
  }

  async syncCatalog(entries: CatalogEntries): Promise<void> {
    await this.ready;
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
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
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      client.release();
    }
  }

  async startRun(run: RunRecord): Promise<void> {
    await this.query(
      `INSERT INTO runs (workflow_id, run_id, agent, harness, tenant_id, user_id, task, parent_workflow_id, status, started_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', now())
       ON CONFLICT (workflow_id) DO NOTHING`,
      [run.workflowId, run.runId, run.agent, run.harness, run.tenantId, run.userId, run.task, run.parentWorkflowId ?? null],
    );
  }

  async finishRun(workflowId: string, status: RunStatus, result: unknown): Promise<void> {
    await this.query(`UPDATE runs SET status = $2, result_json = $3, finished_at = now() WHERE workflow_id = $1`, [workflowId, status, toJson(result)]);
  }

  async setRunStatus(workflowId: string, status: RunStatus): Promise<void> {
    await this.query(`UPDATE runs SET status = $2 WHERE workflow_id = $1`, [workflowId, status]);
  }

  async setExternalSessionId(workflowId: string, sessionId: string): Promise<void> {
    await this.query(`UPDATE runs SET external_session_id = $2 WHERE workflow_id = $1`, [workflowId, sessionId]);
  }

  async getRun(workflowId: string): Promise<RunView | undefined> {
    const { rows } = await this.query(`SELECT * FROM runs WHERE workflow_id = $1`, [workflowId]);
    return rows[0] ? runFromRow(rows[0]) : undefined;
  }

  async recordPromptRun(row: PromptRunRecord): Promise<{ inserted: boolean }> {
    const { rows } = await this.query<{ prompt: boolean; model_vendor: string | null; vendor: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM prompts WHERE id = $1) AS prompt,
              (SELECT vendor_id FROM models WHERE id = $2) AS model_vendor,
              EXISTS (SELECT 1 FROM vendors WHERE id = $3) AS vendor`,
      [row.promptId, row.modelId, row.vendorId],
    );
    const found = rows[0]!;
    const problems = unresolvedAccounting(row, { promptExists: found.prompt, modelVendor: found.model_vendor ?? undefined, vendorExists: found.vendor });
    if (problems.length > 0) throw new UnresolvedAccountingError(problems.join('; '));
    const result = await this.query(
      `INSERT INTO prompt_runs (workflow_id, turn, prompt_id, model_id, vendor_id, reported_model,
         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, cost_source,
         external_session_id, resumed, duration_ms, input, output, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, now())
       ON CONFLICT (workflow_id, turn) DO NOTHING`,
      [
        row.workflowId,
        row.turn,
        row.promptId,
        row.modelId,
        row.vendorId,
        row.reportedModel ?? null,
        row.usage.input,
        row.usage.output,
        row.usage.cacheRead,
        row.usage.cacheWrite,
        row.costUsd,
        row.costSource,
        row.externalSessionId ?? null,
        row.resumed,
        Math.round(row.durationMs),
        row.input,
        row.output,
      ],
    );
    return { inserted: (result.rowCount ?? 0) > 0 };
  }

  async listPromptRuns(workflowId: string): Promise<PromptRunRecord[]> {
    const { rows } = await this.query(`SELECT * FROM prompt_runs WHERE workflow_id = $1 ORDER BY turn`, [workflowId]);
    return rows.map(promptRunFromRow);
  }

  async recordStep(step: RunStepRecord): Promise<{ inserted: boolean }> {
    const result = await this.query(
      `INSERT INTO run_steps (workflow_id, seq, turn, type, payload_json, created_at) VALUES ($1, $2, $3, $4, $5, now())
       ON CONFLICT (workflow_id, seq) DO NOTHING`,
      [step.workflowId, step.seq, step.turn, step.type, toJson(step.payload)],
    );
    return { inserted: (result.rowCount ?? 0) > 0 };
  }

  async getStep(workflowId: string, seq: number): Promise<RunStepRecord | undefined> {
    const { rows } = await this.query(`SELECT * FROM run_steps WHERE workflow_id = $1 AND seq = $2`, [workflowId, seq]);
    return rows[0] && stepFromRow(rows[0]);
  }

  async completeStep(workflowId: string, seq: number, payload: unknown): Promise<void> {
    await this.query(`UPDATE run_steps SET payload_json = $3 WHERE workflow_id = $1 AND seq = $2`, [workflowId, seq, toJson(payload)]);
  }

  async putBlob(blob: BlobRecord): Promise<void> {
    await this.query(
      `INSERT INTO blobs (hash, kind, bytes, content, created_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT (hash) DO NOTHING`,
      [blob.hash, blob.kind, Buffer.byteLength(blob.content, 'utf8'), blob.content],
    );
  }

  async getBlob(hash: string): Promise<string | undefined> {
    const { rows } = await this.query<{ content: string }>(`SELECT content FROM blobs WHERE hash = $1`, [hash]);
    return rows[0]?.content;
  }

  async listSteps(workflowId: string): Promise<RunStepRecord[]> {
    const { rows } = await this.query(`SELECT * FROM run_steps WHERE workflow_id = $1 ORDER BY seq`, [workflowId]);
    return rows.map(stepFromRow);
  }

  async appendEvent(workflowId: string, turn: number, type: string, data: unknown): Promise<number> {
    const { rows } = await this.query<{ cursor: string }>(
      `INSERT INTO events (workflow_id, turn, type, data_json, at) VALUES ($1, $2, $3, $4, now()) RETURNING cursor`,
      [workflowId, turn, type, toJson(data)],
    );
    return Number(rows[0]!.cursor);
  }

  async readEvents(workflowId: string, afterCursor: number, limit = DEFAULT_EVENT_PAGE): Promise<LedgerEvent[]> {
    const page = Math.max(1, Math.min(MAX_EVENT_PAGE, Math.floor(limit)));
    const { rows } = await this.query(`SELECT * FROM events WHERE workflow_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3`, [workflowId, afterCursor, page]);
    return rows.map(eventFromRow);
  }

  async requestApproval(request: NewApproval): Promise<{ record: ApprovalRecord; created: boolean }> {
    const c = approvalColumns(request);
    // One now() for requested_at and (when already decided) decided_at, as SQLite does. A concurrent insert of the
    // same id waits for the first to commit, then does nothing and reads the committed row below.
    const inserted = await this.query(
      `INSERT INTO approvals (workflow_id, request_id, turn, tool, kind, title, input_json, command, paths_json, status,
         requested_at, expires_at, decided_by, decided_at, edited_input_json, scope, message)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
         now(), $11, $12, CASE WHEN $10 = 'pending' THEN NULL ELSE now() END, $13, $14, $15)
       ON CONFLICT (workflow_id, request_id) DO NOTHING
       RETURNING *`,
      [c.workflowId, c.requestId, c.turn, c.tool, c.kind, c.title, c.input, c.command, c.paths, c.status, c.expiresAt, c.decidedBy, c.editedInput, c.scope, c.message],
    );
    if (inserted.rows[0]) return { record: approvalFromRow(inserted.rows[0]), created: true };
    const existing = await this.getApproval(request.workflowId, request.requestId);
    return { record: existing!, created: false };
  }

  async decideApproval(workflowId: string, requestId: string, decision: ApprovalDecisionInput): Promise<ApprovalRecord | undefined> {
    const c = decisionColumns(decision);
    // `status = 'pending'` is re-checked after waiting on a concurrent decision's row lock, so only the first wins.
    await this.query(
      `UPDATE approvals SET status = $3, decided_by = $4, decided_at = now(), edited_input_json = $5, scope = $6, message = $7
       WHERE workflow_id = $1 AND request_id = $2 AND status = 'pending'`,
      [workflowId, requestId, c.status, c.decidedBy, c.editedInput, c.scope, c.message],
    );
    return this.getApproval(workflowId, requestId);
  }

  async getApproval(workflowId: string, requestId: string): Promise<ApprovalRecord | undefined> {
    const { rows } = await this.query(`SELECT * FROM approvals WHERE workflow_id = $1 AND request_id = $2`, [workflowId, requestId]);
    return rows[0] ? approvalFromRow(rows[0]) : undefined;
  }

  async listApprovals(filter: { workflowId?: string; status?: ApprovalStatus; limit?: number } = {}): Promise<ApprovalRecord[]> {
    const limit = Math.max(1, Math.min(MAX_EVENT_PAGE, Math.floor(filter.limit ?? MAX_EVENT_PAGE)));
    const { rows } = await this.query(
      `SELECT * FROM approvals WHERE ($1::text IS NULL OR workflow_id = $1) AND ($2::text IS NULL OR status = $2) ORDER BY id LIMIT $3`,
      [filter.workflowId ?? null, filter.status ?? null, limit],
    );
    return rows.map(approvalFromRow);
  }

  async expireApprovals(workflowId: string, reason: string, turn?: number): Promise<number> {
    const result = await this.query(
      `UPDATE approvals SET status = 'expired', decided_by = $2, decided_at = now()
       WHERE workflow_id = $1 AND status = 'pending' AND ($3::integer IS NULL OR turn = $3)`,
      [workflowId, reason, turn ?? null],
    );
    return result.rowCount ?? 0;
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
