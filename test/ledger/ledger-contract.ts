/**
 * The Ledger contract, run against every implementation (SQLite and PostgreSQL): each test file calls
 * describeLedgerContract with a factory for a fresh, empty ledger.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LoopbackRead } from '../../src/contracts/loopback.js';
import type { ModelCall, NetworkRecord } from '../../src/contracts/network.js';
import { addUsage, noUsage } from '../../src/contracts/usage.js';
import {
  UnresolvedAccountingError,
  type AttemptFinish,
  type AttemptStart,
  type CatalogEntries,
  type Ledger,
  type LoopbackRow,
  type ModelCallRow,
  type NetworkRow,
  type RunRecord,
  type UsageRecord,
} from '../../src/ledger/index.js';

export const catalog: CatalogEntries = {
  vendors: [{ id: 'demo', name: 'demo' }],
  models: [{ id: 'demo/demo-1', vendorId: 'demo', name: 'demo-1' }],
  prompts: [{ id: 'agent:demo', name: 'demo', text: 'You are a demo.' }],
};

export const run: RunRecord = { workflowId: 'wf-1', runId: 'r-1', agent: 'demo', harness: 'demo', tenantId: 't', userId: 'u', task: 'write hello.txt' };

export function attemptStart(overrides: Partial<AttemptStart> = {}): AttemptStart {
  return {
    workflowId: 'wf-1',
    runId: 'r-1',
    attemptId: 'x:1:1',
    turn: 1,
    attempt: 1,
    promptId: 'agent:demo',
    modelId: 'demo/demo-1',
    vendorId: 'demo',
    priced: true,
    input: 'task',
    ...overrides,
  };
}

export function usageRow(overrides: Partial<UsageRecord> = {}): UsageRecord {
  return { workflowId: 'wf-1', runId: 'r-1', attemptId: 'x:1:1', turn: 1, call: 1, usage: { input: 100, output: 20, cacheRead: 5, cacheWrite: 7 }, priceUsd: 0.01, ...overrides };
}

export function attemptFinish(overrides: Partial<AttemptFinish> = {}): AttemptFinish {
  return {
    workflowId: 'wf-1',
    runId: 'r-1',
    attemptId: 'x:1:1',
    status: 'succeeded',
    outputUsed: true,
    output: '{"step":"success","result":"ok"}',
    resumed: false,
    durationMs: 1500,
    ...overrides,
  };
}

/** A request through the gateway: allowed to the vendor unless `overrides` say otherwise. */
export function networkRow(id: string, overrides: Partial<Omit<NetworkRow, 'record'>> = {}, record: Partial<NetworkRecord> = {}): NetworkRow {
  return {
    id,
    workflowId: 'wf-1',
    runId: 'r-1',
    turn: 1,
    attemptId: 'x:1:1',
    ...overrides,
    record: {
      at: 1_700_000_000_000,
      kind: 'model',
      method: 'POST',
      destination: 'api.anthropic.com:443',
      path: '/v1/messages',
      status: 200,
      bytesIn: 1200,
      bytesOut: 34_000,
      decision: 'allowed',
      rule: 'vendor',
      durationMs: 900,
      ...record,
    },
  };
}

/** A refused CONNECT, as the gateway records one. */
export function refusedRow(id: string, destination: string, overrides: Partial<Omit<NetworkRow, 'record'>> = {}, record: Partial<NetworkRecord> = {}): NetworkRow {
  return networkRow(id, overrides, { kind: 'connect', method: 'CONNECT', destination, path: '', status: 403, bytesIn: 0, bytesOut: 0, decision: 'refused', rule: 'refused:not-allowlisted', durationMs: 1, ...record });
}

/** A metered model call. */
export function meteredCall(id: string, overrides: Partial<Omit<ModelCallRow, 'call'>> = {}, call: Partial<ModelCall> = {}): ModelCallRow {
  return {
    id,
    workflowId: 'wf-1',
    runId: 'r-1',
    turn: 1,
    attemptId: 'x:1:1',
    ...overrides,
    call: { at: 1_700_000_000_100, api: 'anthropic-messages', model: 'claude-sonnet-4-5', usage: { input: 100, output: 20, cacheRead: 5 }, status: 200, streamed: true, durationMs: 900, firstByteMs: 120, ...call },
  };
}

export interface LedgerUnderTest {
  readonly ledger: Ledger;
  /** Another handle on the same store (a second worker, or the same one after a restart). */
  open(): Promise<Ledger>;
  /** Removes the store after the test. */
  cleanup(): Promise<void>;
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
      await ledger.startRun(run);
    });

    afterEach(async () => {
      for (const other of others.splice(0)) await other.close();
      await ledger.close();
      await store.cleanup();
    });

    it('a turn attempt: begin, one row per model call as it streams, finish; every write is idempotent', async () => {
      expect(await ledger.beginAttempt(attemptStart())).toEqual({ inserted: true });
      expect(await ledger.beginAttempt(attemptStart({ input: 'changed' }))).toEqual({ inserted: false });
      expect(await ledger.recordUsage(usageRow())).toEqual({ inserted: true });
      expect(await ledger.recordUsage(usageRow({ usage: { input: 999 } }))).toEqual({ inserted: false });
      expect(await ledger.recordUsage(usageRow({ call: 2, usage: { input: 50, output: 10, reasoning: 30 }, priceUsd: 0.02, harnessCostUsd: 0.0301 }))).toEqual({ inserted: true });
      expect(await ledger.finishAttempt(attemptFinish({ reportedModel: 'demo-1-2025', externalSessionId: 's-9', resumed: true }))).toEqual({ updated: true });
      expect(await ledger.finishAttempt(attemptFinish({ status: 'failed', outputUsed: false }))).toEqual({ updated: false });
      const [row] = await ledger.listPromptRuns('wf-1');
      expect(row).toMatchObject({
        workflowId: 'wf-1',
        runId: 'r-1',
        turn: 1,
        attempt: 1,
        attemptId: 'x:1:1',
        status: 'succeeded',
        outputUsed: true,
        reportedModel: 'demo-1-2025',
        externalSessionId: 's-9',
        resumed: true,
        calls: 2,
        input: 'task',
        output: '{"step":"success","result":"ok"}',
        costSource: 'price-table',
        harnessCostUsd: 0.0301,
        costMismatch: false,
        costBlind: false,
      });
      expect(row!.usage).toEqual({ input: 150, output: 30, cacheRead: 5, cacheWrite: 7, reasoning: 30 });
      expect(row!.costUsd).toBeCloseTo(0.03, 10);
    });

    it('unknown counts stay unknown (never zero), and make the cost blind when nothing else prices them', async () => {
      await ledger.beginAttempt(attemptStart({ priced: false }));
      await ledger.recordUsage(usageRow({ usage: { input: 10 }, priceUsd: undefined }));
      await ledger.recordUsage(usageRow({ call: 2, usage: {}, priceUsd: undefined }));
      await ledger.finishAttempt(attemptFinish());
      const [row] = await ledger.listPromptRuns('wf-1');
      expect(row!.usage.output).toBeUndefined();
      expect(row!.usage.input).toBe(10);
      expect(row).toMatchObject({ costBlind: true, costSource: 'unknown', calls: 2 });
    });

    it('one cost authority: the price table counts, the harness figure is kept beside it, a mismatch shows', async () => {
      await ledger.beginAttempt(attemptStart());
      await ledger.recordUsage(usageRow({ priceUsd: 0.01, harnessCostUsd: 0.5 }));
      await ledger.finishAttempt(attemptFinish());
      const [row] = await ledger.listPromptRuns('wf-1');
      expect(row).toMatchObject({ costUsd: 0.01, costSource: 'price-table', harnessCostUsd: 0.5, priceUsd: 0.01, costMismatch: true });
      // Without a price table the harness's figure counts.
      await ledger.beginAttempt(attemptStart({ attemptId: 'y:1:1', turn: 2, priced: false }));
      await ledger.recordUsage(usageRow({ attemptId: 'y:1:1', turn: 2, priceUsd: undefined, harnessCostUsd: 0.2 }));
      await ledger.finishAttempt(attemptFinish({ attemptId: 'y:1:1' }));
      expect((await ledger.listPromptRuns('wf-1'))[1]).toMatchObject({ costUsd: 0.2, costSource: 'harness', costMismatch: false, costBlind: false });
    });

    it('a harness that ran a turn and reported no usage is cost-blind, even with a price table', async () => {
      await ledger.beginAttempt(attemptStart());
      await ledger.finishAttempt(attemptFinish({ usageMissing: true }));
      expect((await ledger.listPromptRuns('wf-1'))[0]).toMatchObject({ costBlind: true, costSource: 'unknown', calls: 0 });
    });

    it('run totals sum every call of every attempt: failed and lost attempts too; unused ones are named', async () => {
      // Turn 1, attempt 1: two calls, then the worker dies (never finished).
      await ledger.beginAttempt(attemptStart({ attemptId: 'e:5:1' }));
      await ledger.recordUsage(usageRow({ attemptId: 'e:5:1', usage: { input: 1000, output: 100 }, priceUsd: 0.1 }));
      await ledger.recordUsage(usageRow({ attemptId: 'e:5:1', call: 2, usage: { input: 2000, output: 200 }, priceUsd: 0.2 }));
      // Attempt 2 fails after one call.
      await ledger.beginAttempt(attemptStart({ attemptId: 'e:5:2', attempt: 2 }));
      await ledger.recordUsage(usageRow({ attemptId: 'e:5:2', usage: { input: 500, output: 50 }, priceUsd: 0.05 }));
      await ledger.finishAttempt(attemptFinish({ attemptId: 'e:5:2', status: 'failed', outputUsed: false, output: '', error: 'vendor 500' }));
      // Attempt 3 succeeds.
      await ledger.beginAttempt(attemptStart({ attemptId: 'e:5:3', attempt: 3 }));
      await ledger.recordUsage(usageRow({ attemptId: 'e:5:3', usage: { input: 300, output: 30, cacheRead: 700 }, priceUsd: 0.03 }));
      await ledger.finishAttempt(attemptFinish({ attemptId: 'e:5:3' }));

      const rows = await ledger.listPromptRuns('wf-1');
      expect(rows.map((r) => [r.attempt, r.status, r.outputUsed])).toEqual([
        [1, 'lost', false],
        [2, 'failed', false],
        [3, 'succeeded', true],
      ]);
      const totals = await ledger.runTotals('wf-1');
      expect(totals.usage).toEqual({ input: 3800, output: 380, cacheRead: 700 });
      expect(totals).toMatchObject({ calls: 4, attempts: 3, unusedAttempts: 2, costSource: 'price-table', costBlind: false });
      expect(totals.costUsd).toBeCloseTo(0.38, 10);
      expect(totals.unusedUsage).toEqual({ input: 3500, output: 350 });
      expect((await ledger.runTotals('wf-1', undefined, { turn: 2 })).calls).toBe(0);
    });

    it('a later attempt of a turn marks an earlier one as not used (its result was lost)', async () => {
      await ledger.beginAttempt(attemptStart({ attemptId: 'e:5:1' }));
      await ledger.finishAttempt(attemptFinish({ attemptId: 'e:5:1' }));
      await ledger.beginAttempt(attemptStart({ attemptId: 'e:5:2', attempt: 2 }));
      await ledger.finishAttempt(attemptFinish({ attemptId: 'e:5:2' }));
      expect((await ledger.listPromptRuns('wf-1')).map((r) => r.outputUsed)).toEqual([false, true]);
    });

    it('rejects unresolved ids with a message naming which id, before any row is written', async () => {
      await expect(ledger.beginAttempt(attemptStart({ modelId: 'x' }))).rejects.toBeInstanceOf(UnresolvedAccountingError);
      await expect(ledger.beginAttempt(attemptStart({ modelId: 'x', turn: 3 }))).rejects.toThrow(
        "prompt run for wf-1 turn 3: model id 'x' is not in the catalog — add it to the harness entry",
      );
      await expect(ledger.beginAttempt(attemptStart({ promptId: 'agent:nope' }))).rejects.toThrow(/prompt id 'agent:nope' is not in the catalog/);
      await expect(ledger.beginAttempt(attemptStart({ vendorId: 'acme' }))).rejects.toThrow(
        "model id 'demo/demo-1' belongs to vendor 'demo', not 'acme' — fix the harness entry; prompt run for wf-1 turn 1: vendor id 'acme' is not in the catalog",
      );
      expect(await ledger.listPromptRuns('wf-1')).toEqual([]);
    });

    it('catalog sync is an upsert', async () => {
      await ledger.syncCatalog({ ...catalog, prompts: [{ id: 'agent:demo', name: 'demo', text: 'v2' }] });
      await ledger.syncCatalog(catalog);
      expect(await ledger.beginAttempt(attemptStart())).toEqual({ inserted: true });
    });

    it('two runs under one workflow id never mix: rows are keyed by (workflowId, runId)', async () => {
      await ledger.beginAttempt(attemptStart());
      await ledger.recordUsage(usageRow());
      await ledger.finishAttempt(attemptFinish());
      await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'step:success', payload: 'first' });
      await ledger.finishRun('wf-1', 'succeeded', { result: 'first' });
      // The same workflow id again (a reused id): a second run row, its own attempts, steps and totals.
      expect(await ledger.startRun({ ...run, runId: 'r-2', task: 'second' })).toEqual({ created: true });
      expect(await ledger.startRun({ ...run, runId: 'r-2', task: 'second again' })).toEqual({ created: false });
      await ledger.beginAttempt(attemptStart({ runId: 'r-2' }));
      await ledger.recordUsage(usageRow({ runId: 'r-2', usage: { input: 1, output: 1 } }));
      await ledger.finishAttempt(attemptFinish({ runId: 'r-2' }));
      await ledger.recordStep({ workflowId: 'wf-1', runId: 'r-2', seq: 1, turn: 1, type: 'step:success', payload: 'second' });
      expect((await ledger.listRuns('wf-1')).map((r) => [r.runId, r.task, r.status])).toEqual([
        ['r-1', 'write hello.txt', 'succeeded'],
        ['r-2', 'second', 'running'],
      ]);
      expect(await ledger.getRun('wf-1')).toMatchObject({ runId: 'r-2', task: 'second' });
      expect(await ledger.getRun('wf-1', 'r-1')).toMatchObject({ runId: 'r-1', status: 'succeeded' });
      expect((await ledger.runTotals('wf-1', 'r-1')).usage).toEqual({ input: 100, output: 20, cacheRead: 5, cacheWrite: 7 });
      expect((await ledger.runTotals('wf-1', 'r-2')).usage).toEqual({ input: 1, output: 1 });
      expect((await ledger.listSteps('wf-1', 'r-1')).map((s) => s.payload)).toEqual(['first']);
      expect((await ledger.listSteps('wf-1')).map((s) => s.payload)).toEqual(['second']);
      expect((await ledger.listOpenRuns()).map((r) => r.runId)).toEqual(['r-2']);
    });

    it('run steps are idempotent by (workflowId, runId, seq)', async () => {
      expect(await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'actions', payload: { a: 1 } })).toEqual({ inserted: true });
      expect(await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'actions', payload: { a: 'changed' } })).toEqual({ inserted: false });
      await ledger.recordStep({ workflowId: 'wf-1', seq: 2, turn: 2, type: 'success', payload: 'done' });
      await ledger.recordStep({ workflowId: 'wf-2', seq: 1, turn: 1, type: 'chat', payload: null });
      expect(await ledger.listSteps('wf-1')).toEqual([
        { workflowId: 'wf-1', runId: 'r-1', seq: 1, turn: 1, type: 'actions', payload: { a: 1 } },
        { workflowId: 'wf-1', runId: 'r-1', seq: 2, turn: 2, type: 'success', payload: 'done' },
      ]);
    });

    it('reads one step by (workflowId, runId, seq) and completes its payload; another run of the id has its own', async () => {
      await ledger.recordStep({ workflowId: 'wf-1', seq: 3, turn: 2, type: 'action:echo', payload: { started: true } });
      expect(await ledger.getStep('wf-1', 4)).toBeUndefined();
      expect(await ledger.getStep('wf-2', 3)).toBeUndefined();
      await ledger.completeStep('wf-1', 3, { outcome: { ok: true } });
      expect(await ledger.getStep('wf-1', 3)).toEqual({ workflowId: 'wf-1', runId: 'r-1', seq: 3, turn: 2, type: 'action:echo', payload: { outcome: { ok: true } } });
      await ledger.startRun({ ...run, runId: 'r-2' });
      expect(await ledger.getStep('wf-1', 3)).toBeUndefined();
      expect(await ledger.recordStep({ workflowId: 'wf-1', seq: 3, turn: 1, type: 'action:echo', payload: { started: true } })).toEqual({ inserted: true });
      await ledger.completeStep('wf-1', 3, { outcome: { ok: false } });
      expect((await ledger.getStep('wf-1', 3, 'r-1'))?.payload).toEqual({ outcome: { ok: true } });
      expect((await ledger.getStep('wf-1', 3))?.payload).toEqual({ outcome: { ok: false } });
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
      expect(rest[0]).toMatchObject({ workflowId: 'wf-1', runId: 'r-1', turn: 1, type: 'text' });
      expect(typeof rest[0]!.at).toBe('string');
    });

    it('run lifecycle', async () => {
      expect(await ledger.getRun('wf-none')).toBeUndefined();
      expect(await ledger.getRun('wf-1')).toMatchObject({ ...run, status: 'running', result: null });
      await ledger.startRun({ ...run, task: 'a retry must not overwrite' });
      await ledger.setExternalSessionId('wf-1', 'sess-1');
      await ledger.setRunStatus('wf-1', 'waiting_for_reply');
      expect(await ledger.getRun('wf-1')).toMatchObject({ task: run.task, status: 'waiting_for_reply', externalSessionId: 'sess-1' });
      await ledger.finishRun('wf-1', 'succeeded', { result: 'ok' });
      expect(await ledger.getRun('wf-1')).toMatchObject({ status: 'succeeded', result: { result: 'ok' } });
      expect((await ledger.getRun('wf-1'))?.finishedAt).toBeTruthy();
      await ledger.startRun({ ...run, workflowId: 'wf-child', runId: 'r-c', parentWorkflowId: 'wf-1' });
      expect((await ledger.getRun('wf-child'))?.parentWorkflowId).toBe('wf-1');
    });

    it('data persists across handles, and a closed handle closes once', async () => {
      await ledger.beginAttempt(attemptStart());
      await ledger.recordUsage(usageRow());
      await ledger.finishAttempt(attemptFinish());
      await ledger.recordStep({ workflowId: 'wf-1', seq: 1, turn: 1, type: 'success', payload: { result: 'ok' } });
      await ledger.appendEvent('wf-1', 1, 'text', 'hello');
      await ledger.close();
      await ledger.close(); // idempotent
      ledger = await store.open();
      expect((await ledger.getRun('wf-1'))?.task).toBe(run.task);
      expect(await ledger.listPromptRuns('wf-1')).toHaveLength(1);
      expect(await ledger.listSteps('wf-1')).toHaveLength(1);
      expect((await ledger.readEvents('wf-1', 0)).map((e) => e.data)).toEqual(['hello']);
      expect(await ledger.recordUsage(usageRow())).toEqual({ inserted: false });
      expect(await ledger.beginAttempt(attemptStart())).toEqual({ inserted: false });
    });

    it("keeps an adapter's state per run and key: set replaces, another run or key is separate, it survives a reopen", async () => {
      expect(await ledger.getHarnessState('wf-1', 'codex-usage-totals')).toBeUndefined();
      const totals = { 'thread-a': { input: 1200, output: 15, cacheRead: 300 } };
      await ledger.setHarnessState('wf-1', 'codex-usage-totals', totals);
      await ledger.setHarnessState('wf-2', 'codex-usage-totals', { 'thread-b': { input: 1 } });
      expect(await ledger.getHarnessState('wf-1', 'codex-usage-totals')).toEqual(totals);
      const more = { ...totals, 'thread-c': { input: 7, output: 0 } };
      await ledger.setHarnessState('wf-1', 'codex-usage-totals', more);
      expect(await ledger.getHarnessState('wf-1', 'other')).toBeUndefined();
      await ledger.close();
      ledger = await store.open();
      expect(await ledger.getHarnessState('wf-1', 'codex-usage-totals')).toEqual(more);
      expect(await ledger.getHarnessState('wf-2', 'codex-usage-totals')).toEqual({ 'thread-b': { input: 1 } });
    });

    it('two workers on one store: a retried call is counted once, a racing attempt opens once, events keep one order', async () => {
      const second = await store.open();
      others.push(second);
      await Promise.all([ledger.startRun({ ...run, runId: 'r-race' }), second.startRun({ ...run, runId: 'r-race', task: 'the loser of the race' })]);
      const opened = await Promise.all([...Array(4).keys()].map((i) => (i % 2 ? second : ledger).beginAttempt(attemptStart({ runId: 'r-race' }))));
      expect(opened.filter((o) => o.inserted)).toHaveLength(1);
      const calls = await Promise.all([...Array(6).keys()].map((i) => (i % 2 ? second : ledger).recordUsage(usageRow({ runId: 'r-race', usage: { input: i } }))));
      expect(calls.filter((c) => c.inserted)).toHaveLength(1);
      const finished = await Promise.all([ledger.finishAttempt(attemptFinish({ runId: 'r-race' })), second.finishAttempt(attemptFinish({ runId: 'r-race', status: 'failed' }))]);
      expect(finished.filter((f) => f.updated)).toHaveLength(1);
      expect((await second.runTotals('wf-1', 'r-race')).calls).toBe(1);
      const cursors = await Promise.all([...Array(20).keys()].map((i) => (i % 2 ? second : ledger).appendEvent('wf-1', 1, 'text', { i })));
      expect(new Set(cursors).size).toBe(20);
      const events = await ledger.readEvents('wf-1', 0, 1000);
      expect(events.map((e) => e.cursor)).toEqual([...cursors].sort((a, b) => a - b));
      // Both started the run at once: one row, the same for both, whichever won.
      const [a, b] = [await ledger.getRun('wf-1', 'r-race'), await second.getRun('wf-1', 'r-race')];
      expect([run.task, 'the loser of the race']).toContain(a?.task);
      expect(b).toEqual(a);
    });

    it('stores text and JSON exactly: unicode, quotes, large values, nested payloads, NULL for unknown counts', async () => {
      const text = `naïve “quotes” 'single' \\backslash\\ emoji 🚀 tab\tnewline\n${'x'.repeat(200_000)}`;
      await ledger.startRun({ ...run, runId: 'r-text', task: text });
      expect((await ledger.getRun('wf-1', 'r-text'))?.task).toBe(text);
      const payload = { nested: { list: [1, 2.5, -3, null, true, 'ü'], empty: {} }, big: 2 ** 53 - 1 };
      await ledger.recordStep({ workflowId: 'wf-1', runId: 'r-text', seq: 1, turn: 1, type: 'actions', payload });
      expect((await ledger.listSteps('wf-1', 'r-text'))[0]!.payload).toEqual(payload);
      await ledger.beginAttempt(attemptStart({ runId: 'r-text', input: text }));
      await ledger.recordUsage(usageRow({ runId: 'r-text', usage: { input: 3_000_000_000, output: 1, reasoning: 0 }, priceUsd: 0.000001, harnessCostUsd: 12345.678901 }));
      await ledger.finishAttempt(attemptFinish({ runId: 'r-text', output: text, error: text }));
      const [row] = await ledger.listPromptRuns('wf-1', 'r-text');
      expect(row!.input).toBe(text);
      expect(row!.output).toBe(text);
      expect(row!.error).toBe(text);
      expect(row!.usage).toEqual({ input: 3_000_000_000, output: 1, reasoning: 0 });
      expect(row!.harnessCostUsd).toBe(12345.678901);
      expect(row!.priceUsd).toBe(0.000001);
    });

    it('lists open runs for reconciliation, oldest first, bounded', async () => {
      await ledger.startRun({ ...run, workflowId: 'wf-2', runId: 'r-2' });
      await ledger.startRun({ ...run, workflowId: 'wf-3', runId: 'r-3' });
      await ledger.finishRun('wf-2', 'cancelled', null);
      expect((await ledger.listOpenRuns()).map((r) => r.workflowId)).toEqual(['wf-1', 'wf-3']);
      expect((await ledger.listOpenRuns(1)).map((r) => r.workflowId)).toEqual(['wf-1']);
    });

    it('approvals belong to one run: a reused workflow id never finds the requests, decisions or grants of another run', async () => {
      const ask = { workflowId: 'wf-1', requestId: 't1-abc', turn: 1, tool: 'Bash', kind: 'command', title: 'ls', input: { command: 'ls' }, command: 'ls' };
      const first = await ledger.requestApproval({ ...ask, decision: { status: 'allowed', decidedBy: 'operator:alice', scope: 'session' } });
      expect(first.record).toMatchObject({ runId: 'r-1', status: 'allowed' });
      await ledger.requestApproval({ ...ask, requestId: 't1-def' });
      await ledger.finishRun('wf-1', 'succeeded', null);
      await ledger.startRun({ ...run, runId: 'r-2' });
      expect(await ledger.getApproval('wf-1', 't1-abc')).toBeUndefined();
      expect(await ledger.listApprovals({ workflowId: 'wf-1', status: 'allowed' })).toEqual([]);
      expect(await ledger.getApproval('wf-1', 't1-abc', 'r-1')).toMatchObject({ runId: 'r-1', status: 'allowed' });
      const again = await ledger.requestApproval({ ...ask, runId: 'r-2' });
      expect(again).toMatchObject({ created: true, record: { runId: 'r-2', status: 'pending' } });
      expect(await ledger.decideApproval('wf-1', 't1-def', { status: 'denied', decidedBy: 'x' })).toBeUndefined();
      expect(await ledger.expireApprovals('wf-1', 'run ended')).toBe(1);
      expect((await ledger.listApprovals({ workflowId: 'wf-1', runId: 'r-1' })).map((a) => [a.requestId, a.status])).toEqual([
        ['t1-abc', 'allowed'],
        ['t1-def', 'pending'],
      ]);
      expect((await ledger.listApprovals({ workflowId: 'wf-1' })).map((a) => [a.requestId, a.status])).toEqual([['t1-abc', 'expired']]);
    });

    it('operator decisions: a nonce is accepted once, per run, with the verified principal and key', async () => {
      const decision = { nonce: 'a'.repeat(32), workflowId: 'wf-1', action: 'approve', requestId: 't1-abc', principal: 'operator:alice', keyId: '0123456789abcdef', authenticated: true, claim: { v: 1, scope: 'once' } };
      expect(await ledger.recordDecision(decision)).toEqual({ inserted: true });
      // The same signature again (a replay), even for another action or run, is refused.
      expect(await ledger.recordDecision({ ...decision, action: 'deny' })).toEqual({ inserted: false });
      expect(await ledger.recordDecision({ nonce: 'b'.repeat(32), workflowId: 'wf-1', action: 'retry', principal: 'unauthenticated:operator', authenticated: false })).toEqual({ inserted: true });
      const listed = await ledger.listDecisions('wf-1');
      expect(listed.map((d) => [d.action, d.principal, d.authenticated, d.keyId ?? null, d.runId])).toEqual([
        ['approve', 'operator:alice', true, '0123456789abcdef', 'r-1'],
        ['retry', 'unauthenticated:operator', false, null, 'r-1'],
      ]);
      expect(listed[0]!.claim).toEqual({ v: 1, scope: 'once' });
      expect(Number.isFinite(Date.parse(listed[0]!.at))).toBe(true);
      await ledger.startRun({ ...run, runId: 'r-2' });
      expect(await ledger.listDecisions('wf-1')).toEqual([]);
      expect((await ledger.listDecisions('wf-1', 'r-1')).length).toBe(2);
    });

    it('a shared workspace is claimed by one open run at a time, across handles; closed holders lose it', async () => {
      const other = await store.open();
      others.push(other);
      await ledger.startRun({ ...run, workflowId: 'wf-2', runId: 'r-2' });
      const [first, second] = [{ workflowId: 'wf-1', runId: 'r-1' }, { workflowId: 'wf-2', runId: 'r-2' }];
      // Two claims at once from two handles (two workers): exactly one wins, and both agree which.
      const holders = await Promise.all([ledger.claimWorkspace('ws', first), other.claimWorkspace('ws', second)]);
      expect(holders[0]).toEqual(holders[1]);
      const winner = holders[0]!;
      const loser = winner.workflowId === 'wf-1' ? second : first;
      expect(await ledger.claimWorkspace('ws', loser)).toEqual(winner);
      // The holder claims again (its next turn, or a later execution after continue-as-new): still its.
      expect(await other.claimWorkspace('ws', { workflowId: winner.workflowId, runId: 'after-continue-as-new' })).toMatchObject({ workflowId: winner.workflowId });
      // Its run closes without giving the claim up (terminated, then reconciled): the next claimant takes it.
      await ledger.finishRun(winner.workflowId, 'terminated', {}, winner.runId);
      expect(await other.claimWorkspace('ws', loser)).toEqual(loser);
      await ledger.releaseWorkspace('ws', winner); // not the holder any more: nothing happens
      expect(await ledger.claimWorkspace('ws', winner)).toEqual(loser);
      expect(await ledger.releaseWorkspacesOf(loser.workflowId)).toBe(1);
      expect(await ledger.claimWorkspace('ws', winner)).toEqual(winner);
    });

    it('gateway rows: a retried batch inserts nothing twice, and every field reads back as written', async () => {
      const rows = [networkRow('gw1:1'), refusedRow('gw1:2', 'evil.example:443', {}, { suppressed: 4 }), networkRow('gw1:3', { attemptId: undefined })];
      await ledger.recordNetwork(rows);
      await ledger.recordNetwork(rows); // the activity's retry of the same batch
      await ledger.recordNetwork([rows[1]!, networkRow('gw1:4', {}, { path: '/v1/messages/count_tokens' })]); // overlapping batch
      await ledger.recordNetwork([]);
      const listed = await ledger.listNetwork('wf-1');
      expect(listed.map((r) => r.id)).toEqual(['gw1:1', 'gw1:2', 'gw1:3', 'gw1:4']);
      expect(listed[1]).toEqual({ ...rows[1], runId: 'r-1', seq: listed[1]!.seq });
      expect(listed[2]).not.toHaveProperty('attemptId');
      expect(listed[0]!.record).not.toHaveProperty('suppressed'); // absent = 0, as the gateway writes it

      const calls = [meteredCall('gw1:c1'), meteredCall('gw1:c2', { turn: 2, attemptId: 'x:2:1' }, { model: undefined, usage: { input: 7 }, streamed: false, firstByteMs: undefined })];
      await ledger.recordModelCalls(calls);
      await ledger.recordModelCalls(calls);
      const stored = await ledger.listModelCalls('wf-1');
      expect(stored.map((c) => ({ ...c, seq: 0 }))).toEqual(calls.map((c) => ({ ...c, runId: 'r-1', seq: 0 })));
      expect((await ledger.listModelCalls('wf-1', { turn: 2 })).map((c) => c.id)).toEqual(['gw1:c2']);
      expect((await ledger.listModelCalls('wf-1', { attemptId: 'x:1:1' })).map((c) => c.id)).toEqual(['gw1:c1']);
    });

    it('gateway rows page by seq in arrival order; refusedOnly keeps only the refused; the limit is 1 to 1000', async () => {
      const rows = Array.from({ length: 25 }, (_, i) => (i % 5 === 4 ? refusedRow(`gw:${i}`, `host${i}.example:443`) : networkRow(`gw:${i}`)));
      await ledger.recordNetwork(rows.slice(0, 10));
      await ledger.recordNetwork(rows.slice(10));
      const seen: string[] = [];
      let after = 0;
      for (let page = 0; page < 10; page++) {
        const got = await ledger.listNetwork('wf-1', { afterSeq: after, limit: 7 });
        if (got.length === 0) break;
        expect(got.length).toBeLessThanOrEqual(7);
        seen.push(...got.map((r) => r.id));
        after = got.at(-1)!.seq;
      }
      expect(seen).toEqual(rows.map((r) => r.id));
      const refused = await ledger.listNetwork('wf-1', { refusedOnly: true });
      expect(refused.map((r) => r.record.destination)).toEqual(['host4.example:443', 'host9.example:443', 'host14.example:443', 'host19.example:443', 'host24.example:443']);
      expect((await ledger.listNetwork('wf-1', { refusedOnly: true, afterSeq: refused[1]!.seq, limit: 2 })).map((r) => r.id)).toEqual(['gw:14', 'gw:19']);
      expect(await ledger.listNetwork('wf-1', { limit: 0 })).toHaveLength(1);
      expect(await ledger.listNetwork('wf-1')).toHaveLength(25);
    });

    it('the network summary sums exactly what the rows hold', async () => {
      expect(await ledger.networkSummary('wf-1')).toEqual({ requests: 0, refused: 0, suppressed: 0, modelCalls: 0, usage: {}, models: [] });
      await ledger.recordNetwork([
        networkRow('a'),
        refusedRow('b', 'first.example:443', {}, { at: 10 }),
        networkRow('c', {}, { kind: 'http', method: 'GET', destination: 'pypi.org:80', path: '/simple/', rule: 'allowlist:pypi.org:80' }),
        refusedRow('d', 'evil.example:443', {}, { at: 20, suppressed: 3 }),
      ]);
      const calls = [
        meteredCall('m1', {}, { usage: { input: 1000, output: 200 } }),
        meteredCall('m2', {}, { model: 'claude-haiku-4-5', usage: { input: 10, cacheWrite: 4 } }),
        meteredCall('m3', {}, { usage: { output: 1 } }),
        meteredCall('m4', {}, { model: undefined, usage: {} }),
      ];
      await ledger.recordModelCalls(calls);
      const summary = await ledger.networkSummary('wf-1');
      const listed = await ledger.listNetwork('wf-1');
      expect(summary).toEqual({
        requests: listed.length,
        refused: listed.filter((r) => r.record.decision === 'refused').length,
        suppressed: listed.reduce((n, r) => n + (r.record.suppressed ?? 0), 0),
        modelCalls: calls.length,
        usage: (await ledger.listModelCalls('wf-1')).reduce((u, c) => addUsage(u, c.call.usage), noUsage),
        models: ['claude-haiku-4-5', 'claude-sonnet-4-5'],
        lastRefused: { method: 'CONNECT', destination: 'evil.example:443', rule: 'refused:not-allowlisted', at: 20 },
      });
      expect(summary.usage).toEqual({ input: 1010, output: 201, cacheWrite: 4 }); // cache reads and reasoning: no call said
    });

    it("gateway rows belong to one run: another workflow id's or another run's rows never mix in", async () => {
      await ledger.startRun({ ...run, workflowId: 'wf-other', runId: 'r-x' });
      await ledger.recordNetwork([networkRow('r1:1'), refusedRow('r1:2', 'one.example:443')]);
      await ledger.recordNetwork([networkRow('x:1', { workflowId: 'wf-other', runId: 'r-x' }), refusedRow('x:2', 'other.example:443', { workflowId: 'wf-other', runId: 'r-x' })]);
      await ledger.recordModelCalls([meteredCall('r1:c'), meteredCall('x:c', { workflowId: 'wf-other', runId: 'r-x' }, { model: 'gpt-5' })]);
      // The same workflow id again (a reused id): its rows are its own, and the latest run is what an omitted run id means.
      await ledger.finishRun('wf-1', 'succeeded', {});
      await ledger.startRun({ ...run, runId: 'r-2' });
      await ledger.recordNetwork([refusedRow('r2:1', 'two.example:443', { runId: undefined })]);
      await ledger.recordModelCalls([meteredCall('r2:c', { runId: 'r-2' }, { usage: { input: 1 }, model: 'claude-opus-4-1' })]);

      expect((await ledger.listNetwork('wf-1', { runId: 'r-1' })).map((r) => r.id)).toEqual(['r1:1', 'r1:2']);
      expect((await ledger.listNetwork('wf-1')).map((r) => [r.id, r.runId])).toEqual([['r2:1', 'r-2']]);
      expect((await ledger.listNetwork('wf-other')).map((r) => r.id)).toEqual(['x:1', 'x:2']);
      expect((await ledger.listModelCalls('wf-1', { runId: 'r-1' })).map((c) => c.id)).toEqual(['r1:c']);
      expect((await ledger.listModelCalls('wf-1')).map((c) => c.id)).toEqual(['r2:c']);
      expect(await ledger.networkSummary('wf-1', 'r-1')).toMatchObject({ requests: 2, refused: 1, modelCalls: 1, models: ['claude-sonnet-4-5'], lastRefused: { destination: 'one.example:443' } });
      expect(await ledger.networkSummary('wf-1')).toMatchObject({ requests: 1, refused: 1, modelCalls: 1, usage: { input: 1 }, models: ['claude-opus-4-1'], lastRefused: { destination: 'two.example:443' } });
      expect(await ledger.networkSummary('wf-other')).toMatchObject({ requests: 2, refused: 1, modelCalls: 1, models: ['gpt-5'], lastRefused: { destination: 'other.example:443' } });
      expect(await ledger.networkSummary('wf-none')).toEqual({ requests: 0, refused: 0, suppressed: 0, modelCalls: 0, usage: {}, models: [] });
    });

    it('loopback reads: idempotent by id, read back exactly (refusals with their reason), per run, by turn and page', async () => {
      const read = (id: string, turn: number, extra: Partial<LoopbackRead> = {}, keys: Partial<LoopbackRow> = {}): LoopbackRow => ({
        id,
        workflowId: 'wf-1',
        runId: 'r-1',
        turn,
        attemptId: `x:${turn}:1`,
        ...keys,
        read: { at: 1_700_000_000_000 + turn, method: 'tools/call', target: 'run_status', status: 'ok', bytes: 321, durationMs: 1.6, ...extra },
      });
      const rows = [
        read('lb:1', 1),
        read('lb:2', 1, { method: 'resources/read', target: 'docs://style — “quoted” ✓', bytes: 10 }),
        read('lb:3', 2, { method: 'auth', target: '', status: 'refused', bytes: 90, reason: "the request needs this run's loopback token", suppressed: 4 }),
      ];
      await ledger.recordLoopbackReads(rows);
      await ledger.recordLoopbackReads(rows.slice(1)); // a retried, overlapping batch
      await ledger.recordLoopbackReads([]);
      await ledger.startRun({ ...run, workflowId: 'wf-other', runId: 'r-x' });
      await ledger.recordLoopbackReads([read('other:1', 1, {}, { workflowId: 'wf-other', runId: 'r-x' })]);

      const all = await ledger.listLoopbackReads('wf-1');
      expect(all.map((r) => r.id)).toEqual(['lb:1', 'lb:2', 'lb:3']);
      expect(all[1]).toMatchObject({ runId: 'r-1', turn: 1, attemptId: 'x:1:1', read: { method: 'resources/read', target: 'docs://style — “quoted” ✓', status: 'ok', bytes: 10, durationMs: 2 } });
      expect(all[2]!.read).toEqual({ at: 1_700_000_000_002, method: 'auth', target: '', status: 'refused', bytes: 90, durationMs: 2, reason: "the request needs this run's loopback token", suppressed: 4 });
      expect(all[0]!.read.reason).toBeUndefined();
      expect((await ledger.listLoopbackReads('wf-1', { turn: 2 })).map((r) => r.id)).toEqual(['lb:3']);
      expect((await ledger.listLoopbackReads('wf-1', { afterSeq: all[0]!.seq, limit: 1 })).map((r) => r.id)).toEqual(['lb:2']);
      expect((await ledger.listLoopbackReads('wf-other')).map((r) => r.id)).toEqual(['other:1']);
      expect(await ledger.listLoopbackReads('wf-none')).toEqual([]);
    });

    it('reports itself healthy', async () => {
      expect(await ledger.health()).toMatchObject({ ok: true });
    });
  });
}
