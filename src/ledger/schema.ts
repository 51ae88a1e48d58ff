/**
 * The ledger's tables, written once for both databases. The SQLite and the PostgreSQL migrations each spell a
 * table from here in their own column types (`SqlTypes`), so the two schemas cannot drift apart. These texts are
 * what applied migrations created: never edit one; a change to a table is a new migration.
 */

/** How a database spells the column types the ledger uses. */
export interface SqlTypes {
  /** An auto-numbered row id that is the primary key. */
  readonly serial: string;
  /** A point in time. */
  readonly time: string;
  /** A count that may outgrow 32 bits (tokens, milliseconds). */
  readonly count: string;
  /** An amount in US dollars. */
  readonly money: string;
  /** A yes/no column, and how its "no" is written. */
  readonly flag: string;
  readonly no: string;
  /** A JSON document column named after `name`. */
  readonly json: (name: string) => string;
}

export const SQLITE_TYPES: SqlTypes = {
  serial: 'INTEGER PRIMARY KEY AUTOINCREMENT',
  time: 'TEXT',
  count: 'INTEGER',
  money: 'REAL',
  flag: 'INTEGER',
  no: '0',
  json: (name) => `${name}_json TEXT`,
};

export const POSTGRES_TYPES: SqlTypes = {
  serial: 'BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY',
  time: 'TIMESTAMPTZ',
  count: 'BIGINT',
  money: 'DOUBLE PRECISION',
  flag: 'BOOLEAN',
  no: 'false',
  json: (name) => `${name} JSONB`,
};

/**
 * How a table is keyed: by workflow id alone (schema 1-3), or by (workflow_id, run_id) so a reused workflow id
 * never mixes two runs (schema 4 on; SQLite rebuilds such tables under a new `name`, PostgreSQL alters them).
 */
export interface TableKey {
  readonly name?: string;
  readonly byRun?: boolean;
}

/** Schema 1: the catalog, runs, prompt runs (one per turn), run steps and live events. */
export function runsAndAccountingTables(t: SqlTypes): string {
  return `
  CREATE TABLE vendors (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    updated_at ${t.time} NOT NULL
  );
  CREATE TABLE models (
    id TEXT PRIMARY KEY,
    vendor_id TEXT NOT NULL REFERENCES vendors(id),
    name TEXT NOT NULL,
    updated_at ${t.time} NOT NULL
  );
  CREATE TABLE prompts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    text TEXT NOT NULL,
    updated_at ${t.time} NOT NULL
  );
  ${runsTable(t)}
  CREATE INDEX runs_parent ON runs (parent_workflow_id);
  CREATE TABLE prompt_runs (
    id ${t.serial},
    workflow_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    prompt_id TEXT NOT NULL REFERENCES prompts(id),
    model_id TEXT NOT NULL REFERENCES models(id),
    vendor_id TEXT NOT NULL REFERENCES vendors(id),
    reported_model TEXT,
    input_tokens ${t.count} NOT NULL,
    output_tokens ${t.count} NOT NULL,
    cache_read_tokens ${t.count} NOT NULL,
    cache_write_tokens ${t.count} NOT NULL,
    cost_usd ${t.money} NOT NULL,
    cost_source TEXT NOT NULL CHECK (cost_source IN ('harness', 'price-table', 'unknown')),
    external_session_id TEXT,
    resumed ${t.flag} NOT NULL,
    duration_ms ${t.count} NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    created_at ${t.time} NOT NULL,
    UNIQUE (workflow_id, turn)
  );
  ${ownedTable(t, 'run_steps')}
  CREATE TABLE events (
    cursor ${t.serial},
    workflow_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    type TEXT NOT NULL,
    data_json TEXT NOT NULL,
    at ${t.time} NOT NULL
  );
  CREATE INDEX events_by_run ON events (workflow_id, cursor);
  `;
}

/** The runs (schema 1; SQLite's schema 4 rebuilds it keyed by run). */
export function runsTable(t: SqlTypes, key: TableKey = {}): string {
  return `
  CREATE TABLE ${key.name ?? 'runs'} (
    workflow_id TEXT ${key.byRun ? 'NOT NULL' : 'PRIMARY KEY'},
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
    started_at ${t.time} NOT NULL,
    finished_at ${t.time}${key.byRun ? ',\n    PRIMARY KEY (workflow_id, run_id)' : ''}
  );`;
}

/**
 * The tables of numbered rows that a run owns (its steps; schema 2: its permission requests), each unique by one
 * column within its owner.
 */
const OWNED_TABLES = {
  run_steps: {
    unique: 'seq',
    columns: (t: SqlTypes) => `
    seq INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at ${t.time} NOT NULL`,
  },
  approvals: {
    unique: 'request_id',
    columns: (t: SqlTypes) => `
    request_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    tool TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    input_json TEXT NOT NULL,
    command TEXT,
    paths_json TEXT,
    status TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
    requested_at ${t.time} NOT NULL,
    expires_at ${t.time},
    decided_by TEXT,
    decided_at ${t.time},
    edited_input_json TEXT,
    scope TEXT CHECK (scope IS NULL OR scope IN ('once', 'session')),
    message TEXT`,
  },
} as const;

/** One of the tables a run owns, keyed as `key` says. */
export function ownedTable(t: SqlTypes, table: keyof typeof OWNED_TABLES, key: TableKey = {}): string {
  const { unique, columns } = OWNED_TABLES[table];
  const owner = key.byRun ? 'workflow_id, run_id' : 'workflow_id';
  return `
  CREATE TABLE ${key.name ?? table} (
    id ${t.serial},
    workflow_id TEXT NOT NULL,${key.byRun ? '\n    run_id TEXT NOT NULL,' : ''}${columns(t)},
    UNIQUE (${owner}, ${unique})
  );`;
}

/** Schema 3: content-addressed blobs (claim-checked texts, frozen specs). */
export function blobsTable(t: SqlTypes): string {
  return `
  CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('text', 'spec')),
    bytes INTEGER NOT NULL,
    content TEXT NOT NULL,
    created_at ${t.time} NOT NULL
  );`;
}

/** Schema 4: every attempt of a turn, and every model call of an attempt (counts NULL where unknown, not zero). */
export function attemptTables(t: SqlTypes): string {
  return `
  CREATE TABLE attempts (
    id ${t.serial},
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    attempt_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'resume-failed', 'budget-exhausted', 'lost')),
    output_used ${t.flag} NOT NULL DEFAULT ${t.no},
    priced ${t.flag} NOT NULL,
    usage_missing ${t.flag} NOT NULL DEFAULT ${t.no},
    prompt_id TEXT NOT NULL REFERENCES prompts(id),
    model_id TEXT NOT NULL REFERENCES models(id),
    vendor_id TEXT NOT NULL REFERENCES vendors(id),
    reported_model TEXT,
    external_session_id TEXT,
    resumed ${t.flag} NOT NULL DEFAULT ${t.no},
    duration_ms ${t.count} NOT NULL DEFAULT 0,
    input TEXT NOT NULL,
    output TEXT NOT NULL DEFAULT '',
    error TEXT,
    started_at ${t.time} NOT NULL,
    finished_at ${t.time},
    UNIQUE (workflow_id, run_id, attempt_id)
  );
  CREATE INDEX attempts_by_turn ON attempts (workflow_id, run_id, turn);
  CREATE TABLE model_calls (
    id ${t.serial},
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    call INTEGER NOT NULL,
    input_tokens ${t.count},
    output_tokens ${t.count},
    cache_read_tokens ${t.count},
    cache_write_tokens ${t.count},
    reasoning_tokens ${t.count},
    price_usd ${t.money},
    harness_cost_usd ${t.money},
    at ${t.time} NOT NULL,
    UNIQUE (workflow_id, run_id, attempt_id, call)
  );`;
}

/** Schema 5: adapters' state between turns (codex's usage totals), out of the harness's reach. */
export function harnessStateTable(t: SqlTypes): string {
  return `
  CREATE TABLE harness_state (
    workflow_id TEXT NOT NULL,
    key TEXT NOT NULL,
    ${t.json('value')} NOT NULL,
    updated_at ${t.time} NOT NULL,
    PRIMARY KEY (workflow_id, key)
  );`;
}

/**
 * Schema 6: operator decisions as accepted (who, verified or not, and the claim), a signature's nonce once only.
 * `id` is how the row id was spelled when the migration shipped (PostgreSQL's is a BIGSERIAL).
 */
export function operatorDecisionsTable(t: SqlTypes, id = t.serial): string {
  return `
  CREATE TABLE operator_decisions (
    id ${id},
    nonce TEXT NOT NULL UNIQUE,
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    action TEXT NOT NULL,
    request_id TEXT,
    principal TEXT NOT NULL,
    key_id TEXT,
    authenticated ${t.flag} NOT NULL,
    ${t.json('claim')},
    at ${t.time} NOT NULL
  );
  CREATE INDEX operator_decisions_by_run ON operator_decisions (workflow_id, run_id, id);`;
}

/** Schema 7: shared workspaces claimed by one open run at a time (agent and agent-user scopes). */
export function workspaceClaimsTable(t: SqlTypes): string {
  return `
  CREATE TABLE workspace_claims (
    key TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    claimed_at ${t.time} NOT NULL
  );
  CREATE INDEX workspace_claims_by_workflow ON workspace_claims (workflow_id);`;
}

/**
 * Schema 8: the egress gateway's rows (issue 21): every request a sandbox made through it (`network_requests`), and
 * every model call it metered on the wire (`metered_calls`; apart from `model_calls`, which holds what the harness
 * reported). `id` is the gateway's own (its instance and a counter), unique, so a retried batch inserts nothing twice;
 * `seq` is the arrival order and the cursor. No column holds a query string, a header or a key: the records never
 * carry them. Counts NULL where the vendor did not say (unknown is not zero).
 */
export function gatewayTables(t: SqlTypes): string {
  return `
  CREATE TABLE network_requests (
    seq ${t.serial},
    id TEXT NOT NULL UNIQUE,
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    attempt_id TEXT,
    at_ms ${t.count} NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('model', 'connect', 'http')),
    method TEXT NOT NULL,
    destination TEXT NOT NULL,
    path TEXT NOT NULL,
    status INTEGER NOT NULL,
    bytes_in ${t.count} NOT NULL,
    bytes_out ${t.count} NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('allowed', 'refused')),
    rule TEXT NOT NULL,
    duration_ms ${t.count} NOT NULL,
    suppressed ${t.count} NOT NULL DEFAULT 0
  );
  CREATE INDEX network_requests_by_run ON network_requests (workflow_id, run_id, seq);
  CREATE INDEX network_requests_refused ON network_requests (workflow_id, run_id, seq) WHERE decision = 'refused';
  CREATE TABLE metered_calls (
    seq ${t.serial},
    id TEXT NOT NULL UNIQUE,
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    attempt_id TEXT,
    at_ms ${t.count} NOT NULL,
    api TEXT NOT NULL,
    model TEXT,
    input_tokens ${t.count},
    output_tokens ${t.count},
    cache_read_tokens ${t.count},
    cache_write_tokens ${t.count},
    reasoning_tokens ${t.count},
    status INTEGER NOT NULL,
    streamed ${t.flag} NOT NULL,
    duration_ms ${t.count} NOT NULL,
    first_byte_ms ${t.count}
  );
  CREATE INDEX metered_calls_by_run ON metered_calls (workflow_id, run_id, seq);`;
}

/**
 * Schema 9: the MCP loopback's reads (issue 23): every tool call and resource read a harness made through its run's
 * loopback, and every request refused there (no token, another run's). `id` is the door's own, unique (a retried
 * batch inserts nothing twice); `seq` is the arrival order. No column holds the token or a read's content.
 */
export function loopbackTable(t: SqlTypes): string {
  return `
  CREATE TABLE loopback_reads (
    seq ${t.serial},
    id TEXT NOT NULL UNIQUE,
    workflow_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    attempt_id TEXT,
    at_ms ${t.count} NOT NULL,
    method TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'refused', 'error')),
    bytes ${t.count} NOT NULL,
    duration_ms ${t.count} NOT NULL,
    reason TEXT,
    suppressed ${t.count} NOT NULL DEFAULT 0
  );
  CREATE INDEX loopback_reads_by_run ON loopback_reads (workflow_id, run_id, seq);`;
}
