/**
 * The PostgreSQL ledger's schema, as ordered migrations. Every worker runs `migrate()` on start; an advisory
 * lock (per schema) serialises them, so many workers starting at once apply each migration exactly once.
 * Append new migrations; never edit an applied one.
 */
import type pg from 'pg';
import {
  attemptTables,
  blobsTable,
  gatewayTables,
  loopbackTable,
  harnessStateTable,
  operatorDecisionsTable,
  ownedTable,
  POSTGRES_TYPES as P,
  runsAndAccountingTables,
  workspaceClaimsTable,
} from './schema.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export const POSTGRES_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'runs, accounting, steps and events',
    // The PostgreSQL ledger also finds a tenant's runs by start time.
    sql: `${runsAndAccountingTables(P)}
      CREATE INDEX runs_tenant ON runs (tenant_id, started_at);
    `,
  },
  {
    version: 2,
    name: 'permission requests and decisions',
    // Times are TIMESTAMPTZ (read back as ISO UTC, millisecond precision); the JSON columns stay TEXT like the
    // other *_json columns, so a record reads back exactly as written, as in SQLite.
    sql: `${ownedTable(P, 'approvals')}
      CREATE INDEX approvals_by_status ON approvals (status, id);
    `,
  },
  {
    version: 3,
    name: 'content-addressed blobs (claim-checked texts, frozen specs)',
    sql: blobsTable(P),
  },
  {
    version: 4,
    name: 'rows keyed by run; accounting per turn attempt and per model call',
    // Like SQLite's migration 4: a reused workflow id never mixes two runs (runs, steps, events and approvals are
    // keyed by (workflow_id, run_id); `seq` orders a workflow id's runs, the latest is the open one), and every
    // attempt of a turn and every model call is a row, counts NULL where the harness did not say (unknown is not
    // zero). An older prompt run becomes attempt "v1:<turn>" with one call carrying its totals.
    sql: `
      ALTER TABLE runs DROP CONSTRAINT runs_pkey;
      ALTER TABLE runs ADD PRIMARY KEY (workflow_id, run_id);
      ALTER TABLE runs ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY;
      CREATE INDEX runs_latest ON runs (workflow_id, seq);
      CREATE INDEX runs_open ON runs (seq) WHERE finished_at IS NULL;

      ${attemptTables(P)}
      INSERT INTO attempts (workflow_id, run_id, turn, attempt, attempt_id, status, output_used, priced, prompt_id, model_id,
          vendor_id, reported_model, external_session_id, resumed, duration_ms, input, output, started_at, finished_at)
        SELECT p.workflow_id, COALESCE(r.run_id, ''), p.turn, 1, 'v1:' || p.turn, 'succeeded', true, p.cost_source = 'price-table',
          p.prompt_id, p.model_id, p.vendor_id, p.reported_model, p.external_session_id, p.resumed, p.duration_ms, p.input, p.output,
          p.created_at, p.created_at
        FROM prompt_runs p LEFT JOIN runs r ON r.workflow_id = p.workflow_id ORDER BY p.id;
      INSERT INTO model_calls (workflow_id, run_id, attempt_id, turn, call, input_tokens, output_tokens, cache_read_tokens,
          cache_write_tokens, price_usd, harness_cost_usd, at)
        SELECT p.workflow_id, COALESCE(r.run_id, ''), 'v1:' || p.turn, p.turn, 1, p.input_tokens, p.output_tokens,
          p.cache_read_tokens, p.cache_write_tokens,
          CASE p.cost_source WHEN 'price-table' THEN p.cost_usd END, CASE p.cost_source WHEN 'harness' THEN p.cost_usd END, p.created_at
        FROM prompt_runs p LEFT JOIN runs r ON r.workflow_id = p.workflow_id ORDER BY p.id;
      DROP TABLE prompt_runs;

      ALTER TABLE run_steps ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
      UPDATE run_steps s SET run_id = r.run_id FROM runs r WHERE r.workflow_id = s.workflow_id;
      ALTER TABLE run_steps DROP CONSTRAINT run_steps_workflow_id_seq_key;
      ALTER TABLE run_steps ADD CONSTRAINT run_steps_run_seq_key UNIQUE (workflow_id, run_id, seq);

      ALTER TABLE events ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
      UPDATE events e SET run_id = r.run_id FROM runs r WHERE r.workflow_id = e.workflow_id;

      ALTER TABLE approvals ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
      UPDATE approvals a SET run_id = r.run_id FROM runs r WHERE r.workflow_id = a.workflow_id;
      ALTER TABLE approvals DROP CONSTRAINT approvals_workflow_id_request_id_key;
      ALTER TABLE approvals ADD CONSTRAINT approvals_run_request_key UNIQUE (workflow_id, run_id, request_id);
    `,
  },
  {
    version: 5,
    name: "adapters' state between turns (codex's usage totals), out of the harness's reach",
    sql: harnessStateTable(P),
  },
  {
    version: 6,
    name: 'operator decisions as accepted (who, verified or not, and the claim), a signature\'s nonce once only',
    sql: operatorDecisionsTable(P, 'BIGSERIAL PRIMARY KEY'),
  },
  {
    version: 7,
    name: 'shared workspaces claimed by one open run at a time (agent and agent-user scopes)',
    sql: workspaceClaimsTable(P),
  },
  {
    version: 8,
    name: "the egress gateway's rows: every request from a sandbox, every model call it metered",
    sql: gatewayTables(P),
  },
  {
    version: 9,
    name: "the MCP loopback's reads",
    sql: loopbackTable(P),
  },
];

/** Schema version this code writes. */
export const POSTGRES_SCHEMA_VERSION = POSTGRES_MIGRATIONS.length;

/** Raised when the database holds a newer schema than this code knows: upgrade the worker, never downgrade the data. */
export class LedgerSchemaTooNewError extends Error {
  override readonly name = 'LedgerSchemaTooNewError';
}

/**
 * Brings the schema in the connection's current schema (search_path) up to date, in one transaction under a
 * transaction-scoped advisory lock: concurrent callers wait, then find the work done. Returns the version.
 */
export async function migrate(pool: pg.Pool, migrations: readonly Migration[] = POSTGRES_MIGRATIONS): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.durable_harness_ledger_migrations'))`);
    await client.query(`CREATE TABLE IF NOT EXISTS ledger_migrations (
      version INTEGER PRIMARY KEY,
      name TEXT NOT NULL,
      applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )`);
    const { rows } = await client.query<{ version: number | null }>('SELECT max(version) AS version FROM ledger_migrations');
    const current = rows[0]?.version ?? 0;
    if (current > migrations.length) {
      throw new LedgerSchemaTooNewError(`ledger schema version ${current} is newer than this code understands (${migrations.length}); upgrade durable-harness`);
    }
    for (const m of migrations.slice(current)) {
      await client.query(m.sql);
      await client.query('INSERT INTO ledger_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
    }
    await client.query('COMMIT');
    return migrations.length;
  } catch (e) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    client.release();
  }
}
