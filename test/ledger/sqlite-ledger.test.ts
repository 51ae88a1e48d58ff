/** The SQLite ledger: the shared Ledger contract, plus what is SQLite's own (file, WAL, schema version, faults, migrations). */
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LEDGER_SCHEMA_VERSION, LedgerFaultError, SqliteLedger } from '../../src/ledger/index.js';
import { approvalLedgerSuite } from './approval-ledger-suite.js';
import { attemptFinish, attemptStart, catalog, describeLedgerContract, networkRow, run, usageRow } from './ledger-contract.js';

async function tempFile(): Promise<{ dir: string; file: string }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'dh-ledger-'));
  return { dir, file: path.join(dir, 'nested', 'deeper', 'ledger.db') };
}

describeLedgerContract('SqliteLedger', async () => {
  const { dir, file } = await tempFile();
  return { ledger: SqliteLedger.open(file), open: async () => SqliteLedger.open(file), cleanup: () => rm(dir, { recursive: true, force: true }) };
});

approvalLedgerSuite('SqliteLedger', async () => SqliteLedger.open(':memory:'));

/** The schema of a version-1 ledger file (before approvals and per-attempt accounting). */
const v1Schema = `
      CREATE TABLE vendors (id TEXT PRIMARY KEY, name TEXT NOT NULL, updated_at TEXT NOT NULL);
      CREATE TABLE models (id TEXT PRIMARY KEY, vendor_id TEXT NOT NULL REFERENCES vendors(id), name TEXT NOT NULL, updated_at TEXT NOT NULL);
      CREATE TABLE prompts (id TEXT PRIMARY KEY, name TEXT NOT NULL, text TEXT NOT NULL, updated_at TEXT NOT NULL);
      CREATE TABLE runs (workflow_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, agent TEXT NOT NULL, harness TEXT NOT NULL, tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL, task TEXT NOT NULL, parent_workflow_id TEXT, status TEXT NOT NULL, result_json TEXT, external_session_id TEXT,
        started_at TEXT NOT NULL, finished_at TEXT);
      CREATE INDEX runs_parent ON runs(parent_workflow_id);
      CREATE TABLE prompt_runs (id INTEGER PRIMARY KEY AUTOINCREMENT, workflow_id TEXT NOT NULL, turn INTEGER NOT NULL, prompt_id TEXT NOT NULL,
        model_id TEXT NOT NULL, vendor_id TEXT NOT NULL, reported_model TEXT, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
        cache_read_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL, cost_source TEXT NOT NULL,
        external_session_id TEXT, resumed INTEGER NOT NULL, duration_ms INTEGER NOT NULL, input TEXT NOT NULL, output TEXT NOT NULL,
        created_at TEXT NOT NULL, UNIQUE (workflow_id, turn));
      CREATE TABLE run_steps (id INTEGER PRIMARY KEY AUTOINCREMENT, workflow_id TEXT NOT NULL, seq INTEGER NOT NULL, turn INTEGER NOT NULL,
        type TEXT NOT NULL, payload_json TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (workflow_id, seq));
      CREATE TABLE events (cursor INTEGER PRIMARY KEY AUTOINCREMENT, workflow_id TEXT NOT NULL, turn INTEGER NOT NULL, type TEXT NOT NULL,
        data_json TEXT NOT NULL, at TEXT NOT NULL);
`;

describe('SqliteLedger: the file', () => {
  let dir: string;
  let file: string;
  let ledger: SqliteLedger;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'dh-ledger-'));
    file = path.join(dir, 'nested', 'deeper', 'ledger.db');
    ledger = SqliteLedger.open(file);
    await ledger.syncCatalog(catalog);
    await ledger.startRun(run);
  });

  afterEach(async () => {
    await ledger.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('creates directories, uses WAL and records the schema version', () => {
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    const raw = new Database(file, { readonly: true });
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
  });

  it('data persists after reopening the file, and reopening does not re-migrate', async () => {
    await ledger.beginAttempt(attemptStart());
    await ledger.recordUsage(usageRow());
    await ledger.finishAttempt(attemptFinish());
    await ledger.appendEvent('wf-1', 1, 'text', 'hello');
    await ledger.close();
    await ledger.close(); // idempotent
    ledger = SqliteLedger.open(file);
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    expect((await ledger.getRun('wf-1'))?.task).toBe(run.task);
    expect(await ledger.listPromptRuns('wf-1')).toHaveLength(1);
    expect((await ledger.readEvents('wf-1', 0)).map((e) => e.data)).toEqual(['hello']);
    expect(await ledger.recordUsage(usageRow())).toEqual({ inserted: false });
  });

  it('refuses a file from a newer schema', async () => {
    await ledger.close();
    const raw = new Database(file);
    raw.pragma(`user_version = ${LEDGER_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => SqliteLedger.open(file)).toThrow(/newer than this code understands/);
    ledger = SqliteLedger.open(path.join(dir, 'other.db'));
  });

  it('a deleted ledger file is detected: writes are refused with LedgerMissing (not lost into the unlinked file), health says why', async () => {
    rmSync(file);
    const write = ledger.appendEvent('wf-1', 1, 'text', 'into the void?');
    await expect(write).rejects.toBeInstanceOf(LedgerFaultError);
    await expect(ledger.recordUsage(usageRow())).rejects.toMatchObject({ code: 'LedgerMissing', message: expect.stringContaining('was deleted') });
    expect(await ledger.health()).toMatchObject({ ok: false, problem: expect.stringContaining('was deleted') });
  });

  it('a replaced ledger file is detected: LedgerReplaced', async () => {
    renameSync(file, `${file}.old`);
    writeFileSync(file, '');
    await expect(ledger.recordUsage(usageRow())).rejects.toMatchObject({ code: 'LedgerReplaced' });
    expect((await ledger.health()).problem).toMatch(/replaced by another file/);
  });

  it('read-only: SQLite refuses writes (LedgerReadOnly, health says so); writable again, they land', async () => {
    ledger.setReadOnly(true);
    await expect(ledger.beginAttempt(attemptStart())).rejects.toMatchObject({ code: 'LedgerReadOnly' });
    expect((await ledger.health()).problem).toMatch(/read-only/);
    expect(await ledger.listPromptRuns('wf-1')).toEqual([]); // reads still work
    ledger.setReadOnly(false);
    expect(await ledger.beginAttempt(attemptStart())).toEqual({ inserted: true });
    expect(await ledger.health()).toMatchObject({ ok: true });
  });

  it('migrates a version-1 file: runs, prompt runs (as one call each), steps and events keep their data', async () => {
    await ledger.close();
    const old = path.join(dir, 'v1.db');
    const raw = new Database(old);
    raw.exec(v1Schema);
    raw.exec(`
      INSERT INTO vendors VALUES ('demo', 'demo', 'x');
      INSERT INTO models VALUES ('demo/demo-1', 'demo', 'demo-1', 'x');
      INSERT INTO prompts VALUES ('agent:demo', 'demo', 'p', 'x');
      INSERT INTO runs VALUES ('old', 'r-old', 'demo', 'demo', 't', 'u', 'task', NULL, 'succeeded', '{}', 's-1', 'x', 'y');
      INSERT INTO prompt_runs VALUES (1, 'old', 1, 'agent:demo', 'demo/demo-1', 'demo', NULL, 100, 10, 5, 1, 0.25, 'harness', 's-1', 0, 10, 'in', 'out', 'x');
      INSERT INTO run_steps VALUES (1, 'old', 1, 1, 'step:success', '"ok"', 'x');
      INSERT INTO events VALUES (7, 'old', 1, 'usage', '{}', 'x');
    `);
    raw.pragma('user_version = 1');
    raw.close();
    ledger = SqliteLedger.open(old);
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    expect(await ledger.getRun('old')).toMatchObject({ runId: 'r-old', status: 'succeeded', externalSessionId: 's-1' });
    const [row] = await ledger.listPromptRuns('old');
    expect(row).toMatchObject({ runId: 'r-old', turn: 1, attempt: 1, status: 'succeeded', outputUsed: true, costUsd: 0.25, costSource: 'harness', calls: 1 });
    expect(row!.usage).toEqual({ input: 100, output: 10, cacheRead: 5, cacheWrite: 1 });
    expect(await ledger.listSteps('old')).toEqual([{ workflowId: 'old', runId: 'r-old', seq: 1, turn: 1, type: 'step:success', payload: 'ok' }]);
    expect((await ledger.readEvents('old', 0))[0]).toMatchObject({ cursor: 7, runId: 'r-old' });
  });

  it('migrates a version-2 file (approvals without runs): each approval joins the latest run of its workflow id', async () => {
    await ledger.close();
    const old = path.join(dir, 'v2.db');
    const raw = new Database(old);
    raw.exec(v1Schema);
    raw.exec(`
      CREATE TABLE approvals (id INTEGER PRIMARY KEY AUTOINCREMENT, workflow_id TEXT NOT NULL, request_id TEXT NOT NULL, turn INTEGER NOT NULL,
        tool TEXT NOT NULL, kind TEXT NOT NULL, title TEXT NOT NULL, input_json TEXT NOT NULL, command TEXT, paths_json TEXT,
        status TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'expired')), requested_at TEXT NOT NULL, expires_at TEXT,
        decided_by TEXT, decided_at TEXT, edited_input_json TEXT, scope TEXT CHECK (scope IS NULL OR scope IN ('once', 'session')), message TEXT,
        UNIQUE (workflow_id, request_id));
      CREATE INDEX approvals_by_status ON approvals(status, id);
      INSERT INTO vendors VALUES ('demo', 'demo', 'x');
      INSERT INTO models VALUES ('demo/demo-1', 'demo', 'demo-1', 'x');
      INSERT INTO prompts VALUES ('agent:demo', 'demo', 'p', 'x');
      INSERT INTO runs VALUES ('old', 'r-old', 'demo', 'demo', 't', 'u', 'task', NULL, 'running', NULL, NULL, 'x', NULL);
      INSERT INTO approvals VALUES (3, 'old', 't1-abc', 1, 'Bash', 'command', 'ls', '{"command":"ls"}', 'ls', NULL, 'allowed', 'x', NULL,
        'operator:alice', 'y', NULL, 'session', NULL);
      INSERT INTO approvals VALUES (4, 'no-run', 't1-def', 1, 'Bash', 'command', 'ls', '{}', NULL, NULL, 'pending', 'x', NULL, NULL, NULL, NULL, NULL, NULL);
    `);
    raw.pragma('user_version = 2');
    raw.close();
    ledger = SqliteLedger.open(old);
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    expect(await ledger.getApproval('old', 't1-abc')).toMatchObject({ runId: 'r-old', status: 'allowed', decidedBy: 'operator:alice', scope: 'session' });
    expect(await ledger.getApproval('no-run', 't1-def')).toMatchObject({ runId: '', status: 'pending' });
    // A new run under the old id does not inherit the old run's grant.
    await ledger.startRun({ ...run, workflowId: 'old', runId: 'r-new' });
    expect(await ledger.getApproval('old', 't1-abc')).toBeUndefined();
    expect(await ledger.listApprovals({ workflowId: 'old', status: 'allowed' })).toEqual([]);
  });

  it('migrates a version-7 file (before the gateway): its runs stay, and it takes gateway rows', async () => {
    await ledger.close();
    // A version-7 file is today's schema without the gateway's tables.
    const raw = new Database(file);
    raw.exec('DROP TABLE network_requests; DROP TABLE metered_calls; DROP TABLE loopback_reads;');
    raw.pragma('user_version = 7');
    raw.close();
    ledger = SqliteLedger.open(file);
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    expect(await ledger.getRun('wf-1')).toMatchObject({ runId: 'r-1', task: run.task });
    await ledger.recordNetwork([networkRow('gw:1')]);
    expect((await ledger.listNetwork('wf-1')).map((r) => [r.id, r.runId])).toEqual([['gw:1', 'r-1']]);
    expect(await ledger.networkSummary('wf-1')).toMatchObject({ requests: 1, refused: 0 });
  });
});
