/**
 * The PostgreSQL ledger against a real server: the shared Ledger contract, plus migrations that run safely from
 * several workers at once, the schema-version guard, and selection by DATABASE_URL.
 */
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pgDriver from 'pg';
import {
  LedgerSchemaTooNewError,
  POSTGRES_MIGRATIONS,
  POSTGRES_SCHEMA_VERSION,
  PostgresLedger,
  SqliteLedger,
  describeLedger,
  openLedger,
  migrate,
  redactDatabaseUrl,
} from '../../src/ledger/index.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';
import { approvalLedgerSuite } from './approval-ledger-suite.js';
import { attemptStart, catalog, describeLedgerContract, meteredCall, networkRow, run } from './ledger-contract.js';

let pg: TestPostgres;

beforeAll(async () => {
  pg = await startTestPostgres();
}, 120_000);
afterAll(() => pg?.stop());

describeLedgerContract('PostgresLedger', async () => {
  const { url, drop } = await pg.freshSchema('contract');
  return {
    ledger: await PostgresLedger.connect({ connectionString: url }),
    open: () => PostgresLedger.connect({ connectionString: url }),
    cleanup: drop,
  };
});

approvalLedgerSuite('PostgresLedger', async () => {
  const { url, drop } = await pg.freshSchema('approvals');
  const ledger = await PostgresLedger.connect({ connectionString: url });
  const close = ledger.close.bind(ledger);
  return Object.assign(ledger, {
    close: async () => {
      await close();
      await drop();
    },
  });
});

describe('PostgresLedger on its own', () => {
  it('migrations run exactly once when many workers start at once', async () => {
    const { url, schema, drop } = await pg.freshSchema('race');
    const ledgers = await Promise.all([...Array(8).keys()].map(() => PostgresLedger.connect({ connectionString: url, maxConnections: 2 })));
    try {
      const { rows } = await pg.admin(`SELECT version, name FROM ${schema}.ledger_migrations ORDER BY version`);
      expect(rows.map((r) => r.version)).toEqual([...Array(POSTGRES_SCHEMA_VERSION).keys()].map((i) => i + 1));
      for (const l of ledgers) expect(await l.schemaVersion()).toBe(POSTGRES_SCHEMA_VERSION);
      // And they all work on the same tables.
      await Promise.all(ledgers.map((l) => l.syncCatalog(catalog)));
      await Promise.all(ledgers.map((l) => l.startRun(run)));
      const inserted = await Promise.all(ledgers.map((l) => l.beginAttempt(attemptStart())));
      expect(inserted.filter((i) => i.inserted)).toHaveLength(1);
    } finally {
      await Promise.all(ledgers.map((l) => l.close()));
      await drop();
    }
  });

  it('migrates a version-2 database: runs keyed by run, prompt runs as one call each, steps, events and approvals joined to their run', async () => {
    const { url, drop } = await pg.freshSchema('v2');
    const pool = new pgDriver.Pool({ connectionString: url, max: 1 });
    try {
      await migrate(pool, POSTGRES_MIGRATIONS.slice(0, 2));
      await pool.query(`
        INSERT INTO vendors VALUES ('demo', 'demo', now());
        INSERT INTO models VALUES ('demo/demo-1', 'demo', 'demo-1', now());
        INSERT INTO prompts VALUES ('agent:demo', 'demo', 'p', now());
        INSERT INTO runs VALUES ('old', 'r-old', 'demo', 'demo', 't', 'u', 'task', NULL, 'succeeded', '{}', 's-1', now(), now());
        INSERT INTO prompt_runs (workflow_id, turn, prompt_id, model_id, vendor_id, reported_model, input_tokens, output_tokens,
          cache_read_tokens, cache_write_tokens, cost_usd, cost_source, external_session_id, resumed, duration_ms, input, output, created_at)
          VALUES ('old', 1, 'agent:demo', 'demo/demo-1', 'demo', NULL, 100, 10, 5, 1, 0.25, 'harness', 's-1', false, 10, 'in', 'out', now());
        INSERT INTO run_steps (workflow_id, seq, turn, type, payload_json, created_at) VALUES ('old', 1, 1, 'step:success', '"ok"', now());
        INSERT INTO events (workflow_id, turn, type, data_json, at) VALUES ('old', 1, 'usage', '{}', now());
        INSERT INTO approvals (workflow_id, request_id, turn, tool, kind, title, input_json, status, requested_at, decided_by, decided_at, scope)
          VALUES ('old', 't1-abc', 1, 'Bash', 'command', 'ls', '{"command":"ls"}', 'allowed', now(), 'operator:alice', now(), 'session');
      `);
    } finally {
      await pool.end();
    }
    const ledger = await PostgresLedger.connect({ connectionString: url });
    try {
      expect(await ledger.schemaVersion()).toBe(POSTGRES_SCHEMA_VERSION);
      expect(await ledger.getRun('old')).toMatchObject({ runId: 'r-old', status: 'succeeded', externalSessionId: 's-1' });
      const [row] = await ledger.listPromptRuns('old');
      expect(row).toMatchObject({ runId: 'r-old', turn: 1, attempt: 1, attemptId: 'v1:1', status: 'succeeded', outputUsed: true, costUsd: 0.25, costSource: 'harness', calls: 1 });
      expect(row!.usage).toEqual({ input: 100, output: 10, cacheRead: 5, cacheWrite: 1 });
      expect(await ledger.listSteps('old')).toEqual([{ workflowId: 'old', runId: 'r-old', seq: 1, turn: 1, type: 'step:success', payload: 'ok' }]);
      expect((await ledger.readEvents('old', 0))[0]).toMatchObject({ runId: 'r-old', type: 'usage' });
      expect(await ledger.getApproval('old', 't1-abc')).toMatchObject({ runId: 'r-old', status: 'allowed', scope: 'session' });
      // The old id may now carry a second run, which sees none of the first one's rows.
      await ledger.startRun({ ...run, workflowId: 'old', runId: 'r-new' });
      expect(await ledger.getApproval('old', 't1-abc')).toBeUndefined();
      expect(await ledger.listPromptRuns('old')).toEqual([]);
    } finally {
      await ledger.close();
      await drop();
    }
  });

  it('migrates a version-7 database (before the gateway): its runs stay, and it takes gateway rows', async () => {
    const { url, drop } = await pg.freshSchema('v7');
    const pool = new pgDriver.Pool({ connectionString: url, max: 1 });
    try {
      await migrate(pool, POSTGRES_MIGRATIONS.slice(0, 7));
      await pool.query(`INSERT INTO runs (workflow_id, run_id, agent, harness, tenant_id, user_id, task, status, started_at)
        VALUES ('old', 'r-old', 'demo', 'demo', 't', 'u', 'task', 'running', now())`);
    } finally {
      await pool.end();
    }
    const ledger = await PostgresLedger.connect({ connectionString: url });
    try {
      expect(await ledger.schemaVersion()).toBe(POSTGRES_SCHEMA_VERSION);
      await ledger.recordNetwork([networkRow('gw:1', { workflowId: 'old', runId: undefined })]);
      await ledger.recordModelCalls([meteredCall('gw:c1', { workflowId: 'old', runId: undefined })]);
      expect((await ledger.listNetwork('old')).map((r) => [r.id, r.runId])).toEqual([['gw:1', 'r-old']]);
      expect(await ledger.networkSummary('old')).toMatchObject({ requests: 1, modelCalls: 1, models: ['claude-sonnet-4-5'] });
    } finally {
      await ledger.close();
      await drop();
    }
  });

  it('workers racing on one approval: one creates it, one decision wins, all read the same row', async () => {
    const { url, drop } = await pg.freshSchema('approval_race');
    const ledgers = await Promise.all([...Array(6).keys()].map(() => PostgresLedger.connect({ connectionString: url, maxConnections: 2 })));
    try {
      const ask = { workflowId: 'wf-r', requestId: 't1-x', turn: 1, tool: 'Bash', kind: 'command', title: 'ls', input: { command: 'ls' } };
      const asked = await Promise.all(ledgers.map((l, i) => l.requestApproval({ ...ask, expiresAt: new Date(Date.UTC(2030, 0, 1 + i)).toISOString() })));
      expect(asked.filter((a) => a.created)).toHaveLength(1);
      for (const a of asked) expect(a.record).toEqual(asked.find((x) => x.created)!.record);
      const decided = await Promise.all(
        ledgers.map((l, i) => l.decideApproval('wf-r', 't1-x', { status: i % 2 ? 'allowed' : 'denied', decidedBy: `operator:${i}` })),
      );
      const winner = await ledgers[0]!.getApproval('wf-r', 't1-x');
      expect(winner!.status).not.toBe('pending');
      for (const d of decided) expect(d).toEqual(winner);
    } finally {
      await Promise.all(ledgers.map((l) => l.close()));
      await drop();
    }
  });

  it('keeps each schema apart (several deployments on one server)', async () => {
    const a = await pg.freshSchema('a');
    const b = await pg.freshSchema('b');
    const [la, lb] = await Promise.all([PostgresLedger.connect({ connectionString: a.url }), PostgresLedger.connect({ connectionString: b.url })]);
    try {
      await la.syncCatalog(catalog);
      await la.startRun(run);
      await la.beginAttempt(attemptStart());
      expect(await lb.listPromptRuns('wf-1')).toEqual([]);
      expect(await la.listPromptRuns('wf-1')).toHaveLength(1);
    } finally {
      await Promise.all([la.close(), lb.close()]);
      await Promise.all([a.drop(), b.drop()]);
    }
  });

  it('refuses a database from a newer schema, naming both versions', async () => {
    const { url, schema, drop } = await pg.freshSchema('newer');
    await (await PostgresLedger.connect({ connectionString: url })).close();
    await pg.admin(`INSERT INTO ${schema}.ledger_migrations (version, name) VALUES ($1, 'from the future')`, [POSTGRES_SCHEMA_VERSION + 1]);
    const attempt = PostgresLedger.connect({ connectionString: url });
    await expect(attempt).rejects.toThrow(`ledger schema version ${POSTGRES_SCHEMA_VERSION + 1} is newer than this code understands (${POSTGRES_SCHEMA_VERSION}); upgrade durable-harness`);
    await expect(attempt).rejects.toMatchObject({ name: LedgerSchemaTooNewError.name });
    await drop();
  });

  it('an unreachable server fails at connect with the URL, password hidden', async () => {
    const url = 'postgres://ledger:s3cret@127.0.0.1:1/ledger';
    const attempt = PostgresLedger.connect({ connectionString: url });
    await expect(attempt).rejects.toThrow(/cannot open the PostgreSQL ledger at postgres:\/\/ledger:\*\*\*@127\.0\.0\.1:1\/ledger: .*ECONNREFUSED/);
    await expect(attempt).rejects.not.toThrow(/s3cret/);
    expect(redactDatabaseUrl(url)).toBe('postgres://ledger:***@127.0.0.1:1/ledger');
  });
});

describe('openLedger', () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-open-ledger-'));

  it('uses PostgreSQL when DATABASE_URL is set, else SQLite in the data dir', async () => {
    const { url, drop } = await pg.freshSchema('open');
    const viaEnv = openLedger({ DATABASE_URL: url, DATABASE_POOL_SIZE: '3' }, dataDir);
    expect(viaEnv).toBeInstanceOf(PostgresLedger);
    await viaEnv.syncCatalog(catalog);
    expect(await viaEnv.startRun(run)).toEqual({ created: true });
    expect(await viaEnv.beginAttempt(attemptStart())).toEqual({ inserted: true });
    await viaEnv.close();
    await drop();
    const local = openLedger({}, dataDir);
    expect(local).toBeInstanceOf(SqliteLedger);
    await local.close();
    expect(describeLedger({}, dataDir)).toBe(`SQLite ${path.join(dataDir, 'ledger.sqlite')}`);
    expect(describeLedger({ DATABASE_URL: 'postgresql://u:pw@db:5432/ledger' }, dataDir)).toBe('PostgreSQL postgresql://u:***@db:5432/ledger');
  });

  it('says what is wrong with DATABASE_URL and DATABASE_POOL_SIZE', () => {
    expect(() => openLedger({ DATABASE_URL: 'mysql://u:pw@db/x' }, dataDir)).toThrow('DATABASE_URL must be a postgres:// or postgresql:// URL, got mysql://u:***@db/x');
    expect(() => openLedger({ DATABASE_URL: 'postgres://db/x', DATABASE_POOL_SIZE: 'many' }, dataDir)).toThrow(/DATABASE_POOL_SIZE="many" must be a positive whole number/);
  });
});
