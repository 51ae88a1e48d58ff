/**
 * runTurn's own accounting (MockActivityEnvironment, the real scripted harness, a real SQLite ledger): usage rows
 * per model call as they stream, failed attempts in the books, the one cost rule, mid-turn budget stops, and ledger
 * faults that lose nothing and never kill a healthy harness.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { createActivities } from '../../src/activities/index.js';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger, type Ledger } from '../../src/ledger/index.js';
import { defaultDeps } from '../../src/worker.js';
import type { TurnBudget, TurnRequest, TurnResult } from '../../src/workflows/types.js';
import type { RunPolicy } from '../../src/spec/index.js';
import type { SandboxRef } from '../../src/sandbox/types.js';
import { totalTokens } from '../../src/contracts/usage.js';
import { TurnStops } from '../../src/activities/turn/stops.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { processAlive, scriptedSleepPids, waitUntilGone } from '../support/processes.js';
import { repoRoot } from '../support/worker.js';

const book = scriptBook();
const unpriced = { name: 'unpriced', driverClass: 'StdioJson', executable: process.execPath, active: true, vendor: 'testvendor', model: 'scripted-1', turnTimeoutMs: 60_000 };
const catalog = parseCatalog(
  scriptedCatalog(book, {
    harnesses: [{ ...unpriced, args: [path.join(repoRoot, 'test/harnesses/scripted-harness.mjs'), '--scripts', book.dir] }],
    agents: [{ name: 'blind', harness: 'unpriced', actions: [] }],
  }),
  'test',
  { baseDir: path.join(repoRoot, 'config') },
);
const quiet = { logger: new DefaultLogger('ERROR') };
const call = (input: number, output: number, extra: Record<string, unknown> = {}) => ({ usage: { input, output }, ...extra });

function setup(wrap?: (ledger: SqliteLedger) => Ledger) {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-acct-'));
  const sqlite = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  const ledger = wrap ? wrap(sqlite) : sqlite;
  const turnStops = new TurnStops();
  const deps = { ...defaultDeps({ catalog: () => catalog, dataDir, env: {}, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network', ledger }), heartbeatIntervalMs: 50, cancelledAccountingGraceMs: 500, turnStops, cancelConfirmMs: 400 };
  return { activities: createActivities(deps), sqlite, dataDir, turnStops };
}

async function begin(activities: ReturnType<typeof createActivities>, workflowId: string, agent = 'scripted') {
  const spec = await activities.resolveAgent({ agent });
  const env = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'r-1' } }, quiet);
  const { sandbox } = (await env.run(activities.startSession, { workflowId, runId: 'r-1', specHash: spec.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<
    ReturnType<typeof activities.startSession>
  >;
  return { spec, sandbox };
}

/** One turn of a run, as the test states it: the workflow's request is built from it. */
interface Input {
  readonly workflowId: string;
  readonly turn: number;
  readonly spec: RunPolicy;
  readonly sandbox: SandboxRef;
  readonly prompt: string;
  readonly budget?: TurnBudget;
}

/** Runs one attempt of `input`'s turn as the workflow's runTurn activity (activity id 7 of run r-1). */
function runTurn(activities: ReturnType<typeof createActivities>, input: Input, attempt = 1, beats?: unknown[]) {
  const env = new MockActivityEnvironment({ attempt, activityId: '7', workflowExecution: { workflowId: input.workflowId, runId: 'r-1' } }, quiet);
  if (beats) env.on('heartbeat', (d: unknown) => beats.push(d));
  const request: TurnRequest = {
    turn: input.turn,
    envelopeSeq: input.turn,
    specHash: input.spec.specHash,
    sandbox: input.sandbox,
    input: { kind: 'prompt', parts: [input.prompt] },
    ...(input.budget ? { budget: input.budget } : {}),
  };
  return { env, done: env.run(activities.runTurn, request) as Promise<TurnResult> };
}

const servedIn = (sandbox: { hostWorkspacePath: string }) => {
  const file = path.join(sandbox.hostWorkspacePath, '.scripted', 'served.jsonl');
  return existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { usage: { input: number; output: number } }) : [];
};

describe('runTurn accounting', () => {
  it('records one usage row per model call as it streams, and prices the attempt from the table', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'calls');
    const task = book.write('calls', [{ calls: [call(1000, 100), call(2000, 200, { sleepMs: 300 })], ...ok() }]);
    const beats: { tokens?: number }[] = [];
    const { done } = runTurn(activities, { workflowId: 'calls', turn: 1, spec, sandbox, prompt: task }, 1, beats);
    // The first call is in the ledger while the second is still being served.
    await expect.poll(async () => (await sqlite.runTotals('calls')).calls, { timeout: 10_000, interval: 20 }).toBe(1);
    const outcome = await done;
    expect(outcome).toMatchObject({ step: { ok: true }, usage: { input: 3000, output: 300 }, costSource: 'price-table' });
    expect(outcome.costBlind).toBeUndefined();
    // $1/M in, $2/M out.
    expect(outcome.costUsd).toBeCloseTo(0.0036, 10);
    expect(beats).toContainEqual(expect.objectContaining({ tokens: 1100 }));
    const [row] = await sqlite.listPromptRuns('calls');
    expect(row).toMatchObject({ turn: 1, attempt: 1, status: 'succeeded', outputUsed: true, calls: 2, usage: { input: 3000, output: 300 }, attemptId: expect.stringMatching(/:7:1:1$/) });
  });

  it("a failed attempt's calls stay in the books, in the failure's details and in the run's totals", async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'crash');
    const task = book.write('crash', [{ calls: [call(4000, 700), call(300, 30, { exit: 3 })] }]);
    const failure = await runTurn(activities, { workflowId: 'crash', turn: 1, spec, sandbox, prompt: task }).done.catch((e: unknown) => e);
    expect(failure).toMatchObject({ type: 'TurnFailed', details: [expect.objectContaining({ spend: expect.objectContaining({ usage: { input: 4300, output: 730 }, calls: 2 }) })] });
    const [row] = await sqlite.listPromptRuns('crash');
    expect(row).toMatchObject({ status: 'failed', outputUsed: false, calls: 2, usage: { input: 4300, output: 730 }, error: expect.stringContaining('exited with code 3') });
    // The ledger holds exactly what was served.
    const served = servedIn(sandbox).reduce((n, s) => n + s.usage.input + s.usage.output, 0);
    expect((await sqlite.runTotals('crash')).usage).toEqual({ input: 4300, output: 730 });
    expect(served).toBe(5030);
  });

  it('exactly once across a lost line: a call served but never read (its worker died) is re-reported by the next attempt and booked to its own attempt', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'unread');
    // Attempt 1 serves two calls; the second's line never reaches the runtime (as when the worker dies just then).
    const task = book.write('unread', [{ calls: [call(1000, 100), call(2000, 200, { unread: true })] }]);
    const input = { workflowId: 'unread', turn: 1, spec, sandbox, prompt: task };
    await runTurn(activities, input, 1).done.catch(() => undefined);
    expect((await sqlite.runTotals('unread')).usage).toEqual({ input: 1000, output: 100 });
    // Attempt 2's harness process re-reports the unacknowledged call first, then does its own work.
    writeFileSync(path.join(book.dir, 'unread.json'), JSON.stringify({ turns: [{ calls: [call(10, 1)], ...ok() }] }));
    const outcome = await runTurn(activities, input, 2).done;
    // The turn's result carries what every attempt of the turn spent (the workflow sees only the last attempt's).
    expect(outcome).toMatchObject({ step: { ok: true }, usage: { input: 3010, output: 301 } });
    const rows = await sqlite.listPromptRuns('unread');
    expect(rows.map((r) => [r.attempt, r.status, r.calls, r.usage])).toEqual([
      [1, 'failed', 2, { input: 3000, output: 300 }],
      [2, 'succeeded', 1, { input: 10, output: 1 }],
    ]);
    const served = servedIn(sandbox).reduce((n, s) => n + s.usage.input + s.usage.output, 0);
    expect(totalTokens((await sqlite.runTotals('unread')).usage)).toBe(served);
    // Re-reports of calls the ledger already had (their acknowledgement was lost) add nothing.
    expect((await sqlite.runTotals('unread')).calls).toBe(3);
  });

  it('one cost authority: the price table prices the turn, the harness figure is kept beside it, the mismatch shows', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'two-costs');
    const task = book.write('two-costs', [{ usage: { input: 1_000_000, output: 0, costUsd: 5 }, ...ok() }]);
    const outcome = await runTurn(activities, { workflowId: 'two-costs', turn: 1, spec, sandbox, prompt: task }).done;
    expect(outcome).toMatchObject({ step: { ok: true }, costUsd: 1, costSource: 'price-table' });
    expect((await sqlite.listPromptRuns('two-costs'))[0]).toMatchObject({ costUsd: 1, harnessCostUsd: 5, costMismatch: true });
  });

  it('a priced harness that reports no usage is cost-blind (its tokens are unknown, not zero)', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'silent');
    const outcome = await runTurn(activities, { workflowId: 'silent', turn: 1, spec, sandbox, prompt: book.write('silent', [ok()]) }).done;
    expect(outcome).toMatchObject({ step: { ok: true }, usageReported: false, costBlind: true, costSource: 'unknown' });
    expect((await sqlite.listPromptRuns('silent'))[0]).toMatchObject({ costBlind: true, calls: 0 });
  });

  it('without a price table the harness cost counts; with neither, the cost is blind', async () => {
    const { activities } = setup();
    const { spec, sandbox } = await begin(activities, 'unpriced', 'blind');
    const task = book.write('unpriced', [{ usage: { input: 10, output: 1, costUsd: 0.25 }, ...ok() }]);
    expect(await runTurn(activities, { workflowId: 'unpriced', turn: 1, spec, sandbox, prompt: task }).done).toMatchObject({
      costUsd: 0.25,
      costSource: 'harness',
    });
    const { spec: s2, sandbox: b2 } = await begin(activities, 'unpriced2', 'blind');
    const task2 = book.write('unpriced2', [{ usage: { input: 10, output: 1 }, ...ok() }]);
    expect(await runTurn(activities, { workflowId: 'unpriced2', turn: 1, spec: s2, sandbox: b2, prompt: task2 }).done).toMatchObject({
      costSource: 'unknown',
      costBlind: true,
    });
  });

  it('mid-turn token budget: the harness is stopped at the call that crosses it (overshoot at most that call)', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'budget');
    const calls = Array.from({ length: 8 }, () => call(90, 10, { sleepMs: 150 }));
    const task = book.write('budget', [{ calls, ...ok('never reached') }]);
    const outcome = await runTurn(activities, { workflowId: 'budget', turn: 1, spec, sandbox, prompt: task, budget: { tokens: 250 } }).done;
    // 100 tokens per call: the third call crosses 250; the harness never serves a fourth.
    expect(outcome).toMatchObject({ step: { ok: false }, budgetExhausted: { guardrail: 'tokens' }, usage: { input: 270, output: 30 } });
    expect((await sqlite.listPromptRuns('budget'))[0]).toMatchObject({ status: 'budget-exhausted', outputUsed: false, calls: 3 });
    // The harness was killed: nothing more is served.
    await new Promise((r) => setTimeout(r, 600));
    expect(servedIn(sandbox)).toHaveLength(3);
  });

  it('a harness that ignores SIGTERM gets no kill grace after its budget is spent: nothing more is served', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'budget-stubborn');
    // Eight calls of 100 tokens, 100 ms apart: the 1 s kill grace would let calls 4-8 all be served and billed.
    const calls = Array.from({ length: 8 }, () => call(90, 10, { sleepMs: 100 }));
    const task = book.write('budget-stubborn', [{ ignoreTerm: true, calls, ...ok('never reached') }]);
    const outcome = await runTurn(activities, { workflowId: 'budget-stubborn', turn: 1, spec, sandbox, prompt: task, budget: { tokens: 250 } }).done;
    expect(outcome).toMatchObject({ budgetExhausted: { guardrail: 'tokens' }, usage: { input: 270, output: 30 } });
    expect((await sqlite.listPromptRuns('budget-stubborn'))[0]).toMatchObject({ status: 'budget-exhausted', calls: 3 });
    // Killed at once: past the time the grace would have given it, nothing after the crossing call was served.
    await new Promise((r) => setTimeout(r, 1200));
    expect(servedIn(sandbox)).toHaveLength(3);
  });

  it('mid-turn cost budget, and a retried attempt counts what the earlier attempts of its turn spent', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'cost-budget');
    // $1/M in, $2/M out: each call 100k in = $0.10. Attempt 1 spends $0.20 and crashes.
    const task = book.write('cost-budget', [{ calls: [call(100_000, 0), call(100_000, 0, { exit: 1 })] }]);
    const input = { workflowId: 'cost-budget', turn: 1, spec, sandbox, prompt: task, budget: { costUsd: 0.35 } };
    await runTurn(activities, input, 1).done.catch(() => undefined);
    // Attempt 2 of the same scheduling: the script is re-served from the same step; $0.15 left → stops at its 2nd call.
    const outcome = await runTurn(activities, input, 2).done.catch((e: unknown) => e);
    expect(outcome).toMatchObject({ step: { ok: false }, budgetExhausted: { guardrail: 'cost' } });
    expect((await sqlite.listPromptRuns('cost-budget')).map((r) => [r.attempt, r.status, r.calls])).toEqual([
      [1, 'failed', 2],
      [2, 'budget-exhausted', 2],
    ]);
  });

  it('a progress-event write that fails never kills a healthy harness', async () => {
    const { activities, sqlite } = setup((ledger) =>
      new Proxy(ledger, {
        get(target, prop, receiver) {
          // The turn's progress events fail; the run's own records (startSession's permission report, turn 0) land.
          if (prop === 'appendEvent') {
            return async (workflowId: string, turn: number, type: string, data: unknown, runId?: string) =>
              turn >= 1 ? Promise.reject(Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR' })) : target.appendEvent(workflowId, turn, type, data, runId);
          }
          const value = Reflect.get(target, prop, receiver) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      }),
    );
    const { spec, sandbox } = await begin(activities, 'progress');
    const task = book.write('progress', [{ activity: 'working', calls: [call(10, 1)], ...ok('still fine') }]);
    const outcome = await runTurn(activities, { workflowId: 'progress', turn: 1, spec, sandbox, prompt: task }).done;
    expect(outcome).toMatchObject({ step: { ok: true, view: { step: 'success', result: expect.stringContaining('still fine') } } });
    expect((await sqlite.runTotals('progress')).usage).toEqual({ input: 10, output: 1 });
  });

  it('a read-only ledger for a while: the turn waits (heartbeating why) and its rows land once it is writable', async () => {
    const { activities, sqlite } = setup();
    const { spec, sandbox } = await begin(activities, 'readonly');
    const task = book.write('readonly', [{ calls: [call(500, 50, { sleepMs: 200 })], ...ok() }]);
    sqlite.setReadOnly(true);
    const beats: { ledger?: string }[] = [];
    const { done } = runTurn(activities, { workflowId: 'readonly', turn: 1, spec, sandbox, prompt: task }, 1, beats);
    await expect.poll(() => beats.some((b) => /waiting for the ledger: .*read-only/.test(b.ledger ?? '')), { timeout: 10_000, interval: 50 }).toBe(true);
    expect((await sqlite.health()).ok).toBe(false);
    await new Promise((r) => setTimeout(r, 500));
    sqlite.setReadOnly(false);
    const outcome = await done;
    expect(outcome).toMatchObject({ step: { ok: true }, usage: { input: 500, output: 50 } });
    expect(await sqlite.listPromptRuns('readonly')).toMatchObject([{ status: 'succeeded', calls: 1 }]);
    expect((await sqlite.runTotals('readonly')).usage).toEqual(servedIn(sandbox)[0]!.usage);
  });

  it('a deleted ledger is detected: accounting waits instead of writing into the void, and says why', async () => {
    const { activities, sqlite, dataDir } = setup();
    const { spec, sandbox } = await begin(activities, 'deleted');
    const file = path.join(dataDir, 'ledger.sqlite');
    const { rmSync } = await import('node:fs');
    rmSync(file);
    const beats: { ledger?: string }[] = [];
    const { env, done } = runTurn(activities, { workflowId: 'deleted', turn: 1, spec, sandbox, prompt: book.write('deleted', [ok()]) }, 1, beats);
    await expect.poll(() => beats.some((b) => /ledger file .* was deleted/.test(b.ledger ?? '')), { timeout: 10_000, interval: 50 }).toBe(true);
    expect((await sqlite.health()).problem).toMatch(/was deleted/);
    // A cancelled turn does not wait for ever: after the grace period its rows go to the log and it ends.
    env.cancel();
    await expect(done).rejects.toThrow();
  });
});

describe('a turn its run stops on this host (turnStops: the workflow decided to cancel it)', () => {
  it('dies at once, and ends as cancelled when Temporal\'s cancellation follows', async () => {
    const { activities, sqlite, turnStops } = setup();
    const { spec, sandbox } = await begin(activities, 'stopped');
    const { env, done } = runTurn(activities, { workflowId: 'stopped', turn: 1, spec, sandbox, prompt: book.write('stopped', [{ sleepMs: 60_000, ...ok() }]) });
    const pids = await scriptedSleepPids(sandbox.hostWorkspacePath);
    expect(pids.every(processAlive)).toBe(true);
    // Another execution of the same workflow id is not this turn's run: nothing stops.
    expect(turnStops.stop('stopped', 'r-other', 'not mine')).toBe(0);
    expect(turnStops.stop('stopped', 'r-1', 'cancelled by signal')).toBe(1);
    expect(await waitUntilGone(pids, 2000)).toBeLessThan(2000);
    // The activity waits for Temporal's cancellation (the next heartbeat response), then ends as cancelled.
    env.cancel();
    await expect(done).rejects.toThrow();
    expect(await sqlite.listPromptRuns('stopped')).toMatchObject([{ status: 'cancelled' }]);
  });

  it('fails retryably when Temporal\'s cancellation never follows (the workflow task that decided it was lost)', async () => {
    const { activities, sqlite, turnStops } = setup();
    const { spec, sandbox } = await begin(activities, 'orphan-stop');
    const { done } = runTurn(activities, { workflowId: 'orphan-stop', turn: 1, spec, sandbox, prompt: book.write('orphan-stop', [{ sleepMs: 60_000, ...ok() }]) });
    const pids = await scriptedSleepPids(sandbox.hostWorkspacePath);
    const stoppedAt = Date.now();
    turnStops.stop('orphan-stop', 'r-1', 'cancelled by signal');
    await expect(done).rejects.toMatchObject({ type: 'TurnStopped', nonRetryable: false, message: expect.stringMatching(/cancellation did not follow/) });
    // One confirmation window (400 ms here), not one per place that asks.
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(400);
    expect(Date.now() - stoppedAt).toBeLessThan(750); // twice the window was 830 ms
    expect(pids.some(processAlive)).toBe(false);
    expect(await sqlite.listPromptRuns('orphan-stop')).toMatchObject([{ status: 'failed' }]);
  });
});
