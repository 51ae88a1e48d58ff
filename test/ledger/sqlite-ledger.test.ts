import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  LEDGER_SCHEMA_VERSION,
  SqliteLedger,
  UnresolvedAccountingError,
  type CatalogEntries,
  type PromptRunRecord,
  type RunRecord,
} from '../../src/ledger/index.js';

let dir: string;
let file: string;
let ledger: SqliteLedger;

const catalog: CatalogEntries = {
  vendors: [{ id: 'demo', name: 'demo' }],
  models: [{ id: 'demo/demo-1', vendorId: 'demo', name: 'demo-1' }],
  prompts: [{ id: 'agent:demo', name: 'demo', text: 'You are a demo.' }],
};

const run: RunRecord = {
  workflowId: 'wf-1',
  runId: 'r-1',
  agent: 'demo',
  harness: 'demo',
  tenantId: 't',
  userId: 'u',
  task: 'write hello.txt',
};

function promptRun(overrides: Partial<PromptRunRecord> = {}): PromptRunRecord {
  return {
    workflowId: 'wf-1',
    turn: 1,
    promptId: 'agent:demo',
    modelId: 'demo/demo-1',
    vendorId: 'demo',
    usage: { input: 100, output: 20, cacheRead: 5, cacheWrite: 7 },
    costUsd: 0.0123,
    costSource: 'price-table',
    resumed: false,
    durationMs: 1500,
    input: 'task',
    output: '{"step":"success","result":"ok"}',
    ...overrides,
  };
}

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'dh-ledger-'));
  file = path.join(dir, 'nested', 'deeper', 'ledger.db');
  ledger = SqliteLedger.open(file);
  await ledger.syncCatalog(catalog);
});

afterEach(async () => {
  await ledger.close();
  await rm(dir, { recursive: true, force: true });
});

describe('SqliteLedger', () => {
  it('creates directories, uses WAL and records the schema version', () => {
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    const raw = new Database(file, { readonly: true });
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
  });

  it('prompt runs are idempotent by (workflowId, turn)', async () => {
    expect(await ledger.recordPromptRun(promptRun())).toEqual({ inserted: true });
    expect(await ledger.recordPromptRun(promptRun({ costUsd: 99 }))).toEqual({ inserted: false });
    expect(await ledger.recordPromptRun(promptRun({ turn: 2 }))).toEqual({ inserted: true });
    const rows = await ledger.listPromptRuns('wf-1');
    expect(rows.map((r) => [r.turn, r.costUsd])).toEqual([
      [1, 0.0123],
      [2, 0.0123],
    ]);
  });

  it('keeps token fields apart and round-trips the record', async () => {
    const row = promptRun({ reportedModel: 'demo-1-2025', externalSessionId: 'sess-9', resumed: true, costSource: 'harness' });
    await ledger.recordPromptRun(row);
    const [stored] = await ledger.listPromptRuns('wf-1');
    expect(stored).toEqual(row);
    expect(stored?.usage).toEqual({ input: 100, output: 20, cacheRead: 5, cacheWrite: 7 });
  });

  it('rejects unresolved ids with a message naming which id', async () => {
    const attempt = ledger.recordPromptRun(promptRun({ modelId: 'x' }));
    await expect(attempt).rejects.toBeInstanceOf(UnresolvedAccountingError);
    await expect(ledger.recordPromptRun(promptRun({ modelId: 'x', turn: 3 }))).rejects.toThrow(
      "prompt run for wf-1 turn 3: model id 'x' is not in the catalog — add it to the harness entry",
    );
    await expect(ledger.recordPromptRun(promptRun({ promptId: 'agent:nope' }))).rejects.toThrow(
      /prompt id 'agent:nope' is not in the catalog/,
    );
    await expect(ledger.recordPromptRun(promptRun({ vendorId: 'acme' }))).rejects.toThrow(
      "model id 'demo/demo-1' belongs to vendor 'demo', not 'acme' — fix the harness entry; prompt run for wf-1 turn 1: vendor id 'acme' is not in the catalog",
    );
    expect(await ledger.listPromptRuns('wf-1')).toEqual([]);
  });

  it('catalog sync is an upsert', async () => {
    await ledger.syncCatalog({ ...catalog, prompts: [{ id: 'agent:demo', name: 'demo', text: 'v2' }] });
    await ledger.syncCatalog(catalog);
    expect(await ledger.recordPromptRun(promptRun())).toEqual({ inserted: true });
  });

  it('run steps are idempotent by (workflowId, seq)', async () => {
    expect(await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'actions', payload: { a: 1 } })).toEqual({ inserted: true });
    expect(await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'actions', payload: { a: 'changed' } })).toEqual({ inserted: false });
    await ledger.recordStep({ workflowId: 'wf-1', seq: 2, turn: 2, type: 'success', payload: 'done' });
    await ledger.recordStep({ workflowId: 'wf-2', seq: 1, turn: 1, type: 'chat', payload: null });
    expect(await ledger.listSteps('wf-1')).toEqual([
      { workflowId: 'wf-1', seq: 1, turn: 1, type: 'actions', payload: { a: 1 } },
      { workflowId: 'wf-1', seq: 2, turn: 2, type: 'success', payload: 'done' },
    ]);
  });

  it('reads one step by (workflowId, seq) and completes its payload', async () => {
    await ledger.recordStep({ workflowId: 'wf-1', seq: 3, turn: 2, type: 'action:echo', payload: { started: true } });
    expect(await ledger.getStep('wf-1', 4)).toBeUndefined();
    await ledger.completeStep('wf-1', 3, { outcome: { ok: true } });
    expect(await ledger.getStep('wf-1', 3)).toEqual({ workflowId: 'wf-1', seq: 3, turn: 2, type: 'action:echo', payload: { outcome: { ok: true } } });
  });

  it('stores a blob once by its hash', async () => {
    const big = 'x'.repeat(3 * 1024 * 1024);
    await ledger.putBlob({ hash: 'h1', kind: 'text', content: big });
    await ledger.putBlob({ hash: 'h1', kind: 'text', content: 'ignored: same hash' });
    expect(await ledger.getBlob('h1')).toBe(big);
    expect(await ledger.getBlob('missing')).toBeUndefined();
  });

  it('events page by cursor, per workflow', async () => {
    const cursors: number[] = [];
    for (let i = 0; i < 5; i++) {
      cursors.push(await ledger.appendEvent('wf-1', 1, 'text', { i }));
      await ledger.appendEvent('wf-other', 1, 'text', { i });
    }
    expect([...cursors].sort((a, b) => a - b)).toEqual(cursors);
    const first = await ledger.readEvents('wf-1', 0, 2);
    expect(first.map((e) => e.data)).toEqual([{ i: 0 }, { i: 1 }]);
    const second = await ledger.readEvents('wf-1', first[1]!.cursor, 2);
    expect(second.map((e) => e.data)).toEqual([{ i: 2 }, { i: 3 }]);
    const rest = await ledger.readEvents('wf-1', second[1]!.cursor);
    expect(rest.map((e) => e.data)).toEqual([{ i: 4 }]);
    expect(await ledger.readEvents('wf-1', rest[0]!.cursor)).toEqual([]);
    expect(rest[0]).toMatchObject({ workflowId: 'wf-1', turn: 1, type: 'text' });
    expect(typeof rest[0]!.at).toBe('string');
  });

  it('run lifecycle', async () => {
    expect(await ledger.getRun('wf-1')).toBeUndefined();
    await ledger.startRun(run);
    expect(await ledger.getRun('wf-1')).toEqual({ ...run, status: 'running', result: null });
    await ledger.startRun({ ...run, task: 'a retry must not overwrite' });
    await ledger.setExternalSessionId('wf-1', 'sess-1');
    await ledger.setRunStatus('wf-1', 'waiting_for_reply');
    expect(await ledger.getRun('wf-1')).toMatchObject({ task: run.task, status: 'waiting_for_reply', externalSessionId: 'sess-1' });
    await ledger.finishRun('wf-1', 'succeeded', { result: 'ok' });
    expect(await ledger.getRun('wf-1')).toMatchObject({ status: 'succeeded', result: { result: 'ok' } });
    await ledger.startRun({ ...run, workflowId: 'wf-child', parentWorkflowId: 'wf-1' });
    expect((await ledger.getRun('wf-child'))?.parentWorkflowId).toBe('wf-1');
  });

  it('data persists after reopening the file, and reopening does not re-migrate', async () => {
    await ledger.startRun(run);
    await ledger.recordPromptRun(promptRun());
    await ledger.appendEvent('wf-1', 1, 'text', 'hello');
    await ledger.close();
    await ledger.close(); // idempotent
    ledger = SqliteLedger.open(file);
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    expect((await ledger.getRun('wf-1'))?.task).toBe(run.task);
    expect(await ledger.listPromptRuns('wf-1')).toHaveLength(1);
    expect((await ledger.readEvents('wf-1', 0)).map((e) => e.data)).toEqual(['hello']);
    expect(await ledger.recordPromptRun(promptRun())).toEqual({ inserted: false });
  });

  it('refuses a file from a newer schema', async () => {
    await ledger.close();
    const raw = new Database(file);
    raw.pragma(`user_version = ${LEDGER_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => SqliteLedger.open(file)).toThrow(/newer than this code understands/);
    ledger = SqliteLedger.open(path.join(dir, 'other.db'));
  });
});
