/** runTurn in isolation (MockActivityEnvironment): heartbeats, cancellation and the retried-attempt path. */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { createActivities } from '../../src/activities/index.js';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { defaultDeps } from '../../src/worker.js';
import { processAlive, scriptedSleepPids, waitUntilGone } from '../support/processes.js';
import { z } from 'zod';
import { createBuiltinRegistry } from '../../src/actions/index.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot } from '../support/worker.js';
import type { TurnRequest, TurnResult } from '../../src/workflows/types.js';

const book = scriptBook();
const catalog = parseCatalog(scriptedCatalog(book), 'test', { baseDir: path.join(repoRoot, 'config') });

function setup() {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-act-'));
  const deps = defaultDeps({ catalog: () => catalog, dataDir, env: {}, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network' });
  return { deps, activities: createActivities(deps), dataDir };
}

async function begin(activities: ReturnType<typeof createActivities>, workflowId: string) {
  const policy = await activities.resolveAgent({ agent: 'scripted' });
  const mock = (attempt = 1) => new MockActivityEnvironment({ attempt, workflowExecution: { workflowId, runId: 'r' } }, { logger: new DefaultLogger('ERROR') });
  const env = mock();
  const { sandbox } = (await env.run(activities.startSession, { workflowId, runId: 'r', specHash: policy.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<ReturnType<typeof activities.startSession>>;
  const request = (prompt: string, turn = 1): TurnRequest => ({ turn, specHash: policy.specHash, sandbox, input: { kind: 'prompt', parts: [prompt] }, replay: false, envelopeSeq: turn });
  return { policy, sandbox, request, mock };
}

describe('runTurn', () => {
  it('heartbeats progress: the last event and the token count', async () => {
    const { activities, deps } = setup();
    const { request, mock } = await begin(activities, 'hb');
    const env = mock(1);
    const beats: { lastEvent: string; tokens: number }[] = [];
    env.on('heartbeat', (d: unknown) => beats.push(d as { lastEvent: string; tokens: number }));
    const task = book.write('hb', [{ activity: 'reading src/', usage: { input: 40, output: 2 }, sleepMs: 600, ...ok() }]);
    const outcome = await env.run(activities.runTurn, request(task));
    expect(outcome).toMatchObject({ usage: { input: 40, output: 2 }, costSource: 'price-table', step: { ok: true, view: { step: 'success' } } });
    expect(beats).toContainEqual(expect.objectContaining({ lastEvent: 'sleeping', tokens: 42 }));
    const events = await deps.ledger.readEvents('hb', 0, 100);
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['session', 'activity', 'usage', 'turn-complete']));
  });

  it('a quiet turn heartbeats when its progress changes and every 2 s otherwise, not on every tick', async () => {
    const { activities } = setup();
    const { request, mock } = await begin(activities, 'hb-quiet');
    const env = mock(1);
    const beats: number[] = [];
    env.on('heartbeat', () => beats.push(Date.now()));
    const task = book.write('hb-quiet', [{ activity: 'thinking', usage: { input: 5, output: 1 }, sleepMs: 4500, ...ok() }]);
    const started = Date.now();
    await env.run(activities.runTurn, request(task));
    const gaps = beats.map((t, i) => t - (beats[i - 1] ?? started));
    // A few beats for the changes at the start, then the keepalive: never a gap much over 2 s, nowhere near 18 beats.
    expect(beats.length).toBeGreaterThanOrEqual(2);
    expect(beats.length).toBeLessThanOrEqual(7);
    expect(Math.max(...gaps)).toBeLessThan(2600);
  });

  it('kills the harness process tree when cancelled, and reports the cancellation', async () => {
    const { activities } = setup();
    const { sandbox, request, mock } = await begin(activities, 'cancel');
    const env = mock(1);
    const task = book.write('act-cancel', [{ sleepMs: 60_000, ...ok() }]);
    const turn = env.run(activities.runTurn, request(task));
    const pidFile = path.join(sandbox.hostWorkspacePath, '.scripted', 'child.pid');
    await expect.poll(() => existsSync(pidFile), { timeout: 10_000, interval: 20 }).toBe(true);
    const pids = await scriptedSleepPids(sandbox.hostWorkspacePath);
    env.cancel();
    await expect(turn).rejects.toThrow();
    expect(await waitUntilGone(pids, 2000)).toBeLessThan(2000);
  });

  it('on a retried attempt, first kills what an earlier attempt left running', async () => {
    const { activities, deps } = setup();
    const { sandbox, request, mock } = await begin(activities, 'retry');
    // Attempt 1 is abandoned mid-turn without cleanup (a crashed worker): start it, then drop it.
    const first = mock(1);
    const task = book.write('act-retry', [{ sleepMs: 60_000, ...ok() }]);
    void first.run(activities.runTurn, request(task)).catch(() => undefined);
    const pidFile = path.join(sandbox.hostWorkspacePath, '.scripted', 'child.pid');
    await expect.poll(() => existsSync(pidFile), { timeout: 10_000, interval: 20 }).toBe(true);
    const stale = await scriptedSleepPids(sandbox.hostWorkspacePath);
    expect(stale.every(processAlive)).toBe(true);
    const second = mock(2);
    const again = second.run(activities.runTurn, request(book.write('act-retry2', [ok('second attempt')])));
    expect(await again).toMatchObject({ step: { ok: true, view: { step: 'success', result: 'second attempt' } } });
    expect(stale.some(processAlive)).toBe(false);
    expect((await deps.ledger.readEvents('retry', 0, 100)).some((e) => e.type === 'retry')).toBe(true);
    first.cancel();
  });
});

describe('runTurn runs the approved actions of the previous envelope first, each at most once', () => {
  it('a retried attempt reuses recorded outcomes and never runs a started action again', async () => {
    let runs = 0;
    const actions = createBuiltinRegistry().register({
      name: 'count',
      description: 'counts its runs',
      parameters: z.strictObject({ label: z.string() }),
      async execute(params) {
        runs += 1;
        return `counted ${params.label}`;
      },
    });
    const cat = parseCatalog(scriptedCatalog(book, { agent: { actions: ['count', 'echo'] }, actions: [{ name: 'count' }] }), 'test', { baseDir: path.join(repoRoot, 'config'), registry: actions });
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-act-'));
    const deps = defaultDeps({ catalog: () => cat, dataDir, env: {}, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network', actions });
    const activities = createActivities(deps);
    const { request, mock } = await begin(activities, 'once');
    const env = mock(1);
    const task = book.write('once', [act({ name: 'count', params: { label: 'a' } }, { name: 'count', params: { label: 'b' } }, { name: 'echo', params: { text: 'x' } }), ok('counted'), ok('again')]);
    const first = (await env.run(activities.runTurn, request(task))) as TurnResult;
    expect(first.step).toEqual({ ok: true, view: { step: 'actions', calls: [{ name: 'count' }, { name: 'count' }, { name: 'echo' }] } });

    // Turn 2 runs call 0, refuses call 1 (as the workflow decided); call 2 was "started" by a lost attempt.
    await deps.ledger.recordStep({ workflowId: 'once', seq: 3, turn: 1, type: 'action:echo', payload: { call: { name: 'echo', params: { text: 'x' } } } });
    const turn2: TurnRequest = { ...request('', 2), resumeSessionId: first.externalSessionId, input: { kind: 'actions', envelopeSeq: 1, calls: [{ index: 0, name: 'count', seq: 2 }, { index: 1, name: 'count', refused: 'over its cap' }, { index: 2, name: 'echo', seq: 3 }] } };
    const second = (await mock(1).run(activities.runTurn, turn2)) as TurnResult;
    expect(second.step).toMatchObject({ ok: true, view: { step: 'success' } });
    const retried = (await mock(2).run(activities.runTurn, turn2)) as TurnResult;
    expect(retried.step).toMatchObject({ ok: true, view: { step: 'success' } });
    expect(runs).toBe(1);
    const input = (await deps.ledger.listPromptRuns('once'))[1]!.input;
    expect(input).toMatch(/1\. count: ok\n"?counted a/);
    expect(input).toMatch(/2\. count: error: over its cap/);
    expect(input).toMatch(/3\. echo: error: action "echo" was started by an earlier, interrupted attempt/);
  });
});

describe('openRun', () => {
  // A worker killed after openRun started the session but before its result reached the workflow: the local activity
  // runs again on the next worker. The retry must find the same workspace and the same ledger row, not a second of each.
  it('run again for the same run (its worker died mid-start), it reattaches: one workspace, one ledger row, nothing lost', async () => {
    const { activities, deps } = setup();
    const workflowId = 'open-twice';
    const env = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'r' } }, { logger: new DefaultLogger('ERROR') });
    const input = { agent: 'scripted', workflowId, runId: 'r', identity: { tenantId: 't', userId: 'u' }, task: 'x' };
    const first = (await env.run(activities.openRun, input)) as Awaited<ReturnType<typeof activities.openRun>>;
    writeFileSync(path.join(first.sandbox.hostWorkspacePath, 'kept.txt'), 'written before the crash');
    const again = (await env.run(activities.openRun, input)) as Awaited<ReturnType<typeof activities.openRun>>;
    expect(again.policy.specHash).toBe(first.policy.specHash);
    expect(again.sandbox.hostWorkspacePath).toBe(first.sandbox.hostWorkspacePath);
    expect(readFileSync(path.join(again.sandbox.hostWorkspacePath, 'kept.txt'), 'utf8')).toBe('written before the crash');
    expect(await deps.ledger.listRuns(workflowId)).toHaveLength(1);
  });
});

describe('runTurn bounds what the harness wrote before it enters history', () => {
  it('an envelope at the cap of 20 KB unknown names and a 1 MB message, and a 1 MB sub-agent name, come back a few KB', async () => {
    const { activities } = setup();
    const { request, mock } = await begin(activities, 'bounded-names');
    const long = (c: string, n: number) => c.repeat(n);
    const actions = Array.from({ length: 100 }, (_, i) => ({ name: `${i}${long('n', 20_000)}`, params: {} }));
    const outcome = (await mock(1).run(activities.runTurn, request(book.write('bounded-names', [{ envelope: { step: 'actions', actions, message: long('m', 1_000_000) } }])))) as TurnResult;
    const view = outcome.step.ok ? outcome.step.view : undefined;
    expect(view).toMatchObject({ step: 'actions', message: expect.stringMatching(/^m{500}… \(1000000 characters in all\)$/) });
    const calls = view?.step === 'actions' ? view.calls : [];
    expect(calls).toHaveLength(100);
    expect(calls[7]!.name).toBe(`7${long('n', 63)}… (20001 characters in all)`);
    expect(JSON.stringify(outcome).length).toBeLessThan(16 * 1024);

    const agent = await mock(1).run(activities.runTurn, request(book.write('bounded-agent', [{ envelope: { step: 'sub-agent', agent: long('a', 1_000_000), message: 'review it' } }]), 2));
    expect((agent as TurnResult).step).toMatchObject({ ok: true, view: { step: 'sub-agent', agent: `${long('a', 64)}… (1000000 characters in all)` } });
  });

  it('a session id no real harness reports is not kept; a 1 MB error message is clipped in the failure', async () => {
    const { activities, deps } = setup();
    const { request, mock } = await begin(activities, 'bounded-texts');
    const outcome = (await mock(1).run(activities.runTurn, request(book.write('long-session', [{ reportSessionChars: 100_000, ...ok('fine') }])))) as TurnResult;
    expect(outcome).toMatchObject({ step: { ok: true, view: { step: 'success', result: 'fine' } } });
    expect(outcome.externalSessionId).toBeUndefined();
    await expect.poll(async () => (await deps.ledger.readEvents('bounded-texts', 0, 100)).filter((e) => e.type === 'session-id-too-long').map((e) => e.data)).toEqual([{ characters: 100_000, limit: 512 }]);

    const failed = mock(1).run(activities.runTurn, request(book.write('long-error', [{ error: { message: 'E'.repeat(1_000_000) } }]), 2));
    await expect(failed).rejects.toMatchObject({ message: `turn failed (vendor-error): ${'E'.repeat(2000)}… (1000000 characters in all)` });
  });
});
