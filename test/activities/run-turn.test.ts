/** runTurn in isolation (MockActivityEnvironment): heartbeats, cancellation and the retried-attempt path. */
import { existsSync, mkdtempSync } from 'node:fs';
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
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot } from '../support/worker.js';

const book = scriptBook();
const catalog = parseCatalog(scriptedCatalog(book), 'test', { baseDir: path.join(repoRoot, 'config') });

function setup() {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-act-'));
  const deps = defaultDeps({ catalog: () => catalog, dataDir, env: {}, credentials: new MemoryCredentialStore({}) });
  return { deps, activities: createActivities(deps), dataDir };
}

async function begin(activities: ReturnType<typeof createActivities>, workflowId: string) {
  const spec = await activities.resolveAgent({ agent: 'scripted' });
  const env = new MockActivityEnvironment({ attempt: 1 }, { logger: new DefaultLogger('ERROR') });
  const sandbox = (await env.run(activities.startSession, { workflowId, runId: 'r', spec, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<ReturnType<typeof activities.startSession>>;
  return { spec, sandbox };
}


describe('runTurn', () => {
  it('heartbeats progress: the last event and the token count', async () => {
    const { activities, deps } = setup();
    const { spec, sandbox } = await begin(activities, 'hb');
    const env = new MockActivityEnvironment({ attempt: 1 }, { logger: new DefaultLogger('ERROR') });
    const beats: { lastEvent: string; tokens: number }[] = [];
    env.on('heartbeat', (d: unknown) => beats.push(d as { lastEvent: string; tokens: number }));
    const task = book.write('hb', [{ activity: 'reading src/', usage: { input: 40, output: 2 }, sleepMs: 600, ...ok() }]);
    const outcome = await env.run(activities.runTurn, { workflowId: 'hb', runId: 'r', turn: 1, spec, sandbox, prompt: task });
    expect(outcome).toMatchObject({ ok: true, usage: { input: 40, output: 2 }, costSource: 'price-table', resumed: false });
    expect(beats).toContainEqual(expect.objectContaining({ lastEvent: 'sleeping', tokens: 42 }));
    const events = await deps.ledger.readEvents('hb', 0, 100);
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['session', 'activity', 'usage', 'turn-complete']));
  });

  it('kills the harness process tree when cancelled, and reports the cancellation', async () => {
    const { activities } = setup();
    const { spec, sandbox } = await begin(activities, 'cancel');
    const env = new MockActivityEnvironment({ attempt: 1 }, { logger: new DefaultLogger('ERROR') });
    const task = book.write('act-cancel', [{ sleepMs: 60_000, ...ok() }]);
    const turn = env.run(activities.runTurn, { workflowId: 'cancel', runId: 'r', turn: 1, spec, sandbox, prompt: task });
    const pidFile = path.join(sandbox.hostWorkspacePath, '.scripted', 'child.pid');
    await expect.poll(() => existsSync(pidFile), { timeout: 10_000, interval: 20 }).toBe(true);
    const pids = await scriptedSleepPids(sandbox.hostWorkspacePath);
    env.cancel();
    await expect(turn).rejects.toThrow();
    expect(await waitUntilGone(pids, 2000)).toBeLessThan(2000);
  });

  it('on a retried attempt, first kills what an earlier attempt left running', async () => {
    const { activities, deps } = setup();
    const { spec, sandbox } = await begin(activities, 'retry');
    // Attempt 1 is abandoned mid-turn without cleanup (a crashed worker): start it, then drop it.
    const first = new MockActivityEnvironment({ attempt: 1 }, { logger: new DefaultLogger('ERROR') });
    const task = book.write('act-retry', [{ sleepMs: 60_000, ...ok() }]);
    void first.run(activities.runTurn, { workflowId: 'retry', runId: 'r', turn: 1, spec, sandbox, prompt: task }).catch(() => undefined);
    const pidFile = path.join(sandbox.hostWorkspacePath, '.scripted', 'child.pid');
    await expect.poll(() => existsSync(pidFile), { timeout: 10_000, interval: 20 }).toBe(true);
    const stale = await scriptedSleepPids(sandbox.hostWorkspacePath);
    expect(stale.every(processAlive)).toBe(true);
    const second = new MockActivityEnvironment({ attempt: 2 }, { logger: new DefaultLogger('ERROR') });
    const again = second.run(activities.runTurn, { workflowId: 'retry', runId: 'r', turn: 1, spec, sandbox, prompt: book.write('act-retry2', [ok('second attempt')]) });
    expect(await again).toMatchObject({ ok: true, text: expect.stringContaining('second attempt') });
    expect(stale.some(processAlive)).toBe(false);
    expect((await deps.ledger.readEvents('retry', 0, 100)).some((e) => e.type === 'retry')).toBe(true);
    first.cancel();
  });
});
