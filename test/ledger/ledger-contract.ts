/**
 * The Ledger contract, run against every implementation (SQLite and PostgreSQL): each test file calls
 * describeLedgerContract with a factory for a fresh, empty ledger.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { UnresolvedAccountingError, type CatalogEntries, type Ledger, type PromptRunRecord, type RunRecord } from '../../src/ledger/index.js';

export interface LedgerUnderTest {
  readonly ledger: Ledger;
  /** Another handle on the same store (a second worker, or the same one after a restart). */
  open(): Promise<Ledger>;
  /** Removes the store after the test. */
  cleanup(): Promise<void>;
}

export const catalog: CatalogEntries = {
  vendors: [{ id: 'demo', name: 'demo' }],
  models: [{ id: 'demo/demo-1', vendorId: 'demo', name: 'demo-1' }],
  prompts: [{ id: 'agent:demo', name: 'demo', text: 'You are a demo.' }],
};

export const run: RunRecord = {
  workflowId: 'wf-1',
  runId: 'r-1',
  agent: 'demo',
  harness: 'demo',
  tenantId: 't',
  userId: 'u',
  task: 'write hello.txt',
};

export function promptRun(overrides: Partial<PromptRunRecord> = {}): PromptRunRecord {
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

export function describeLedgerContract(name: string, make: () => Promise<LedgerUnderTest>): void {
  describe(`${name} keeps the Ledger contract`, () => {
    let store: LedgerUnderTest;
    let ledger: Ledger;
    const others: Ledger[] = [];

    beforeEach(async () => {
      store = await make();
      ledger = store.ledger;
      await ledger.syncCatalog(catalog);
    });

    afterEach(async () => {
      for (const other of others.splice(0)) await other.close();
      await ledger.close();
      await store.cleanup();
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
      expect(await ledger.getStep('wf-2', 3)).toBeUndefined();
      await ledger.completeStep('wf-1', 3, { outcome: { ok: true } });
      expect(await ledger.getStep('wf-1', 3)).toEqual({ workflowId: 'wf-1', seq: 3, turn: 2, type: 'action:echo', payload: { outcome: { ok: true } } });
    });

    it('stores a blob once by its hash', async () => {
      const big = 'x\u00e9'.repeat(1024 * 1024);
      await ledger.putBlob({ hash: 'h1', kind: 'text', content: big });
      await ledger.putBlob({ hash: 'h1', kind: 'text', content: 'ignored: same hash' });
      await ledger.putBlob({ hash: 'h2', kind: 'spec', content: '{"specVersion":1}' });
      expect(await ledger.getBlob('h1')).toBe(big);
      expect(await ledger.getBlob('h2')).toBe('{"specVersion":1}');
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

    it('data persists across handles, and a closed handle closes once', async () => {
      await ledger.startRun(run);
      await ledger.recordPromptRun(promptRun());
      await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'success', payload: { result: 'ok' } });
      await ledger.appendEvent('wf-1', 1, 'text', 'hello');
      await ledger.close();
      await ledger.close(); // idempotent
      ledger = await store.open();
      expect((await ledger.getRun('wf-1'))?.task).toBe(run.task);
      expect(await ledger.listPromptRuns('wf-1')).toHaveLength(1);
      expect(await ledger.listSteps('wf-1')).toHaveLength(1);
      expect((await ledger.readEvents('wf-1', 0)).map((e) => e.data)).toEqual(['hello']);
      expect(await ledger.recordPromptRun(promptRun())).toEqual({ inserted: false });
    });

    it('two workers on one store: a retried turn is counted once, events keep one order', async () => {
      const second = await store.open();
      others.push(second);
      await Promise.all([ledger.startRun(run), second.startRun({ ...run, task: 'the loser of the race' })]);
      const attempts = await Promise.all([...Array(6).keys()].map((i) => (i % 2 ? second : ledger).recordPromptRun(promptRun({ costUsd: i }))));
      expect(attempts.filter((a) => a.inserted)).toHaveLength(1);
      expect(await second.listPromptRuns('wf-1')).toHaveLength(1);
      const cursors = await Promise.all([...Array(20).keys()].map((i) => (i % 2 ? second : ledger).appendEvent('wf-1', 1, 'text', { i })));
      expect(new Set(cursors).size).toBe(20);
      const events = await ledger.readEvents('wf-1', 0, 1000);
      expect(events.map((e) => e.cursor)).toEqual([...cursors].sort((a, b) => a - b));
      // Both started the run at once: one row, the same for both, whichever won.
      const [a, b] = [await ledger.getRun('wf-1'), await second.getRun('wf-1')];
      expect([run.task, 'the loser of the race']).toContain(a?.task);
      expect(b).toEqual(a);
    });

    it('stores text and JSON exactly: unicode, quotes, large values, nested payloads', async () => {
      const text = `naïve “quotes” 'single' \\backslash\\ emoji 🚀 tab\tnewline\n${'x'.repeat(200_000)}`;
      await ledger.startRun({ ...run, task: text });
      expect((await ledger.getRun('wf-1'))?.task).toBe(text);
      const payload = { nested: { list: [1, 2.5, -3, null, true, 'ü'], empty: {} }, big: 2 ** 53 - 1 };
      await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'actions', payload });
      expect((await ledger.listSteps('wf-1'))[0]!.payload).toEqual(payload);
      await ledger.recordPromptRun(promptRun({ input: text, output: text, usage: { input: 3_000_000_000, output: 1, cacheRead: 0, cacheWrite: 0 } }));
      const [row] = await ledger.listPromptRuns('wf-1');
      expect(row!.input).toBe(text);
      expect(row!.usage.input).toBe(3_000_000_000);
    });
  });
}
