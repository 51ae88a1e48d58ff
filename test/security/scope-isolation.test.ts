/**
 * Shared workspaces on the local provider, through the workflow on a real Temporal server: `agent-user` workspaces
 * of two tenants under `sandbox.options.userRange` get two uids, and tenant B's harness cannot read, list or
 * hard-link tenant A's files; `agent-user` with one fixed uid for everyone is refused as a configuration error.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isConfigurationFailure } from '../../src/contracts/failures.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import { publicDir, recordFigures } from './support.js';

const book = scriptBook();
const range = { first: 71_000, last: 71_099 };

const probeDir = publicDir('scope-probe');
const probePath = path.join(probeDir, 'scope-probe.mjs');
writeFileSync(
  probePath,
  `// A stdio-JSON harness: writes its tenant's secret, then tries to reach the other tenant's workspace.
import fs from 'node:fs';
import { createInterface } from 'node:readline';
const emit = (line) => process.stdout.write(JSON.stringify(line) + '\\n');
const attempt = (fn) => { try { return 'ok:' + String(fn()).slice(0, 60); } catch (e) { return 'denied:' + e.code; } };
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  const request = JSON.parse(line); rl.close();
  emit({ type: 'session', id: 'scope-probe', resumed: false });
  const t = JSON.parse(/probe:(\\{.*\\})/s.exec(request.prompt)[1]);
  const results = {
    uid: process.getuid(),
    own: attempt(() => fs.existsSync('secret.txt') ? fs.readFileSync('secret.txt', 'utf8') : 'none yet'),
    wrote: attempt(() => { fs.writeFileSync('secret.txt', t.secret); return 'written'; }),
    ...(t.other ? {
      read: attempt(() => fs.readFileSync(t.other, 'utf8')),
      list: attempt(() => fs.readdirSync(t.otherDir).join(',')),
      link: attempt(() => { fs.linkSync(t.other, 'stolen.txt'); return fs.readFileSync('stolen.txt', 'utf8'); }),
    } : {}),
  };
  fs.writeFileSync('probe.json', JSON.stringify(results));
  emit({ type: 'complete', text: JSON.stringify({ step: 'success', result: 'probed' }) });
  break;
}
`,
);

const catalog = scriptedCatalog(book, {
  harnesses: [{ name: 'scope-probe', driverClass: 'StdioJson', executable: process.execPath, args: [probePath], active: true, vendor: 'testvendor', model: 'probe-1' }],
  agents: [
    { name: 'tenanted', harness: 'scope-probe', sandbox: { provider: 'local', workspaceScope: 'agent-user', options: { userRange: `${range.first}-${range.last}` } } },
    { name: 'serial', harness: 'scripted', actions: ['write_file'], sandbox: { provider: 'local', workspaceScope: 'agent-user' } },
    { name: 'exclusive', harness: 'scripted', sandbox: { provider: 'local', workspaceScope: 'agent-user', concurrentRuns: 'refuse' } },
    { name: 'one-uid', harness: 'scope-probe', sandbox: { provider: 'local', workspaceScope: 'agent-user', options: { user: '71200:71200' } } },
  ],
});

let w: TestWorker;
beforeAll(async () => {
  w = await startTestWorker({ catalog, env: {} });
});
afterAll(() => w?.close());

const workspaceOf = (agent: string, tenantId: string, userId: string) => path.join(w.dataDir, 'workspaces', 'agent-users', agent, tenantId, userId);
const probeOf = (dir: string) => JSON.parse(readFileSync(path.join(dir, 'probe.json'), 'utf8')) as Record<string, string | number>;

async function probe(agent: string, identity: { tenantId: string; userId: string }, targets: Record<string, string>) {
  const run = await w.start({ agent, task: `probe:${JSON.stringify(targets)}`, workflowId: testWorkflowId(`${agent}-${identity.tenantId}`), identity });
  return run.result();
}

describe('agent-user workspaces', () => {
  it('userRange: each tenant user gets its own uid; tenant B cannot read, list or hard-link tenant A\'s files', { timeout: 120_000 }, async () => {
    const alice = { tenantId: 'acme', userId: 'alice' };
    const bob = { tenantId: 'globex', userId: 'bob' };
    const aliceDir = workspaceOf('tenanted', alice.tenantId, alice.userId);
    const bobDir = workspaceOf('tenanted', bob.tenantId, bob.userId);
    expect(await probe('tenanted', alice, { secret: 'ACME-SECRET' })).toMatchObject({ status: 'succeeded' });
    expect(await probe('tenanted', bob, { secret: 'GLOBEX-SECRET', other: path.join(aliceDir, 'secret.txt'), otherDir: aliceDir })).toMatchObject({ status: 'succeeded' });
    const a = probeOf(aliceDir);
    const b = probeOf(bobDir);
    expect(a.uid).not.toBe(b.uid);
    for (const uid of [a.uid, b.uid]) expect(uid).toSatisfy((n: number) => n >= range.first && n <= range.last);
    expect(b).toMatchObject({ wrote: 'ok:written', read: 'denied:EACCES', list: 'denied:EACCES' });
    expect(b.link).toMatch(/^denied:(EACCES|EPERM)$/);
    expect(statSync(aliceDir).uid).toBe(a.uid);
    expect(statSync(aliceDir).mode & 0o777).toBe(0o700);
    // Alice's next run is the same uid in the same workspace: her own files stay hers to read.
    expect(await probe('tenanted', alice, { secret: 'ACME-SECRET-2' })).toMatchObject({ status: 'succeeded' });
    expect(probeOf(aliceDir)).toMatchObject({ uid: a.uid, own: 'ok:ACME-SECRET' });
    recordFigures('agent-user-uids', { alice: a, bob: b });
  });

  it('one fixed uid for every tenant (sandbox.options.user with agent-user) is refused as a configuration error', { timeout: 60_000 }, async () => {
    const result = await probe('one-uid', { tenantId: 'acme', userId: 'carol' }, { secret: 'never-written' });
    expect(result).toMatchObject({ status: 'failed', failureType: 'WorkspaceScopeInvalid' });
    expect(result.reason).toMatch(/sandbox\.options\.userRange/);
    expect(isConfigurationFailure(result.failureType)).toBe(true); // `run` and `status` exit 2
  });
});

describe('two runs of one shared workspace at once', () => {
  const dave = { tenantId: 'acme', userId: 'dave' };

  it('wait (default): the second run waits, saying for whom, and starts when the first has ended', { timeout: 120_000 }, async () => {
    const first = await w.start({
      agent: 'serial',
      task: book.write('serial-first', [act({ name: 'write_file', params: { path: 'owner.txt', content: 'first' } }), { envelope: { step: 'chat', message: 'more?' } }, ok('first done')]),
      workflowId: testWorkflowId('serial-first'),
      identity: dave,
    });
    await expect.poll(async () => (await first.status()).state, { timeout: 60_000, interval: 100 }).toBe('waiting_for_reply');
    const second = await w.start({
      agent: 'serial',
      task: book.write('serial-second', [act({ name: 'write_file', params: { path: 'owner.txt', content: 'second' } }), ok('second done')]),
      workflowId: testWorkflowId('serial-second'),
      identity: dave,
    });
    const waiting = new RegExp(`waiting for the shared workspace .*agent-users/serial/acme/dave: run ${first.workflowId} works in it`);
    await expect.poll(async () => (await second.status()).inFlight?.lastEvent ?? '', { timeout: 60_000, interval: 100 }).toMatch(waiting);
    // While it waits nothing of it ran: the first run's file is as it left it, and the second has no prompt run.
    const workspace = workspaceOf('serial', dave.tenantId, dave.userId);
    expect(readFileSync(path.join(workspace, 'owner.txt'), 'utf8')).toBe('first');
    expect(await w.ledger.listPromptRuns(second.workflowId)).toEqual([]);
    await first.reply('no');
    expect(await first.result()).toMatchObject({ status: 'succeeded', result: 'first done' });
    expect(await second.result()).toMatchObject({ status: 'succeeded', result: 'second done' });
    expect(readFileSync(path.join(workspace, 'owner.txt'), 'utf8')).toBe('second');
    const waits = (await w.ledger.readEvents(second.workflowId, 0, 1000)).filter((e) => e.type === 'workspace-wait');
    expect(waits.map((e) => (e.data as { holder: string }).holder)).toEqual([first.workflowId]);
  });

  it('refuse: the second run fails at once with WorkspaceBusy naming the run that works there', { timeout: 120_000 }, async () => {
    const first = await w.start({ agent: 'exclusive', task: book.write('exclusive-first', [{ envelope: { step: 'chat', message: 'more?' } }, ok()]), workflowId: testWorkflowId('exclusive-first'), identity: dave });
    await expect.poll(async () => (await first.status()).state, { timeout: 60_000, interval: 100 }).toBe('waiting_for_reply');
    const second = await w.start({ agent: 'exclusive', task: book.write('exclusive-second', [ok()]), workflowId: testWorkflowId('exclusive-second'), identity: dave });
    const refused = await second.result();
    expect(refused).toMatchObject({ status: 'failed', failureType: 'WorkspaceBusy' });
    expect(refused.reason).toContain(`in use by run ${first.workflowId}`);
    await first.reply('no');
    expect(await first.result()).toMatchObject({ status: 'succeeded' });
    // Once the first has ended, a new run has the workspace.
    const third = await w.start({ agent: 'exclusive', task: book.write('exclusive-third', [ok('third')]), workflowId: testWorkflowId('exclusive-third'), identity: dave });
    expect(await third.result()).toMatchObject({ status: 'succeeded', result: 'third' });
  });
});
