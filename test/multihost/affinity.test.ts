/**
 * Host affinity on the real dev server: two workers stand in for two hosts (one task queue, separate data and
 * workspace roots, one PostgreSQL ledger). A run's turns go to the worker that holds its local workspace; a
 * missing workspace is an error, never a fresh directory; a host gone for good moves the run (reprovision) or
 * hands it to an operator (await-operator), as the agent's config says.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { parseCatalog, type Catalog } from '../../src/catalog/index.js';
import { startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { PostgresLedger } from '../../src/ledger/index.js';
import { createWorker, type HarnessWorker } from '../../src/worker.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';
import { act, ok, scriptBook, scriptedCatalog, statelessHarness } from '../support/scripted.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

const book = scriptBook();
const hostLossTimeoutMs = 3000;
const raw = scriptedCatalog(book, {
  harnesses: [statelessHarness(book)],
  agents: [
    { name: 'pinned', harness: 'stateless', actions: ['write_file', 'read_file'], turnAttempts: 2, operatorTimeoutMs: 120_000, sandbox: { hostLossTimeoutMs } },
    { name: 'patient', harness: 'stateless', actions: ['write_file'], turnAttempts: 3, sandbox: { hostLossTimeoutMs: 120_000 } },
    { name: 'mover', harness: 'stateless', actions: ['write_file', 'read_file'], turnAttempts: 2, sandbox: { hostLossTimeoutMs, onHostLoss: 'reprovision' } },
    { name: 'parent', harness: 'stateless', actions: ['write_file'], subAgents: ['reviewer'], sandbox: { hostLossTimeoutMs } },
    { name: 'reviewer', description: 'reads the notes', harness: 'stateless', actions: ['read_file'], sandbox: { workspaceScope: 'parent', hostLossTimeoutMs } },
  ],
});

let pg: TestPostgres;
let databaseUrl: string;
let catalog: Catalog;
let client: Client;
let clientConnection: Connection;
let ledger: PostgresLedger;
const hosts: Host[] = [];

interface Host {
  readonly hostId: string;
  readonly dataDir: string;
  readonly worker: HarnessWorker;
  readonly running: Promise<void>;
  stop(): Promise<void>;
}

async function startHost(
  taskQueue: string,
  hostId: string,
  dataDir = mkdtempSync(path.join(os.tmpdir(), `dh-aff-${hostId}-`)),
  role: 'all' | 'activities' = 'all',
): Promise<Host> {
  const connection = await NativeConnection.connect({ address: inject('temporalAddress') });
  const { worker } = await createWorker({
    connection,
    taskQueue,
    hostId,
    catalog: () => catalog,
    dataDir,
    env: { DATABASE_URL: databaseUrl },
    credentials: new MemoryCredentialStore({}),
    workflowBundle: { codePath: inject('workflowBundlePath') },
    identity: hostId,
    shutdownGraceTime: '1s',
    role,
    decisions: 'trusted-network',
  });
  const running = worker.run();
  let stopped: Promise<void> | undefined;
  const host: Host = {
    hostId,
    dataDir,
    worker,
    running,
    stop: () =>
      (stopped ??= (async () => {
        worker.shutdown();
        await running.catch(() => undefined);
        await connection.close();
      })()),
  };
  hosts.push(host);
  return host;
}

const runDir = (host: Host, workflowId: string) => path.join(host.dataDir, 'workspaces', 'runs', workflowId);
const start = (taskQueue: string, agent: string, task: string, workflowId: string): Promise<AgentRunHandle> =>
  startAgentRun(client, { agent, task, identity: { tenantId: 'acme', userId: 'u' }, workflowId, taskQueue });

async function waitForState(run: AgentRunHandle, state: string, timeout = 60_000): Promise<void> {
  await expect.poll(async () => (await run.status()).state, { timeout, interval: 200 }).toBe(state);
}

/** The activities the run scheduled on the server (local activities are not among them), with their task queues. */
async function scheduledActivities(workflowId: string): Promise<{ type: string; taskQueue: string }[]> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).flatMap((e) => {
    const a = e.activityTaskScheduledEventAttributes;
    return a ? [{ type: a.activityType?.name ?? '', taskQueue: a.taskQueue?.name ?? '' }] : [];
  });
}

/**
 * Every turn activity the run scheduled: its task queue, the worker that started it (identity: the host id first)
 * and how it ended (`completed`, or the failure's type).
 */
async function turnActivities(workflowId: string): Promise<{ taskQueue: string; worker?: string; outcome?: string }[]> {
  const turns = new Map<string, { taskQueue: string; worker?: string; outcome?: string }>();
  for (const e of (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? []) {
    const scheduled = e.activityTaskScheduledEventAttributes;
    if (scheduled?.activityType?.name === 'runTurn') turns.set(String(e.eventId), { taskQueue: scheduled.taskQueue?.name ?? '' });
    const started = e.activityTaskStartedEventAttributes;
    const turn = (id: unknown) => turns.get(String(id));
    if (started && turn(started.scheduledEventId)) turn(started.scheduledEventId)!.worker = started.identity?.split(' ')[0];
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && turn(completed.scheduledEventId)) turn(completed.scheduledEventId)!.outcome = 'completed';
    const failed = e.activityTaskFailedEventAttributes;
    if (failed && turn(failed.scheduledEventId)) turn(failed.scheduledEventId)!.outcome = failed.failure?.applicationFailureInfo?.type ?? 'failed';
  }
  return [...turns.values()];
}

/** The pinned turns ran on `hostId`: each was scheduled on its host queue, started there and completed. */
function expectTurnsOnHost(turns: { taskQueue: string; worker?: string; outcome?: string }[], taskQueue: string, hostId: string, count: number): void {
  expect(turns).toEqual(Array.from({ length: count }, () => ({ taskQueue: `${taskQueue}@${hostId}`, worker: hostId, outcome: 'completed' })));
}

const eventsOf = async (workflowId: string, type: string) => (await ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === type);

beforeAll(async () => {
  pg = await startTestPostgres();
  databaseUrl = (await pg.freshSchema('affinity')).url;
  catalog = parseCatalog(raw, 'test catalog', { baseDir: path.join(repoRoot, 'config') });
  clientConnection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection: clientConnection });
  ledger = await PostgresLedger.connect({ connectionString: databaseUrl });
}, 60_000);

afterAll(async () => {
  for (const h of hosts) await h.stop();
  await ledger?.close();
  await clientConnection?.close();
  await pg?.stop();
});

it('every turn of a run runs on the worker that holds its workspace', { timeout: 180_000 }, async () => {
  const taskQueue = `aff-spread-${Date.now().toString(36)}`;
  const [a, b] = [await startHost(taskQueue, 'host-a'), await startHost(taskQueue, 'host-b')];
  const ids = [...Array(6).keys()].map((i) => testWorkflowId(`aff${i}`));
  const results = await Promise.all(
    ids.map(async (workflowId, i) => {
      const task = book.write(`spread-${i}`, [
        act({ name: 'write_file', params: { path: 'NOTES.md', content: `notes of run ${i}` } }),
        act({ name: 'read_file', params: { path: 'NOTES.md' } }),
        ok(`run ${i} done`),
      ]);
      return (await start(taskQueue, 'pinned', task, workflowId)).result();
    }),
  );
  expect(results.map((r) => r.status)).toEqual(ids.map(() => 'succeeded'));
  for (const [i, workflowId] of ids.entries()) {
    // The workspace is on exactly one host, and every turn found it there: no attempt failed, none was retried.
    expect([existsSync(runDir(a, workflowId)), existsSync(runDir(b, workflowId))].filter(Boolean)).toHaveLength(1);
    expect(await eventsOf(workflowId, 'retry')).toEqual([]);
    const read = (await ledger.listSteps(workflowId)).find((s) => s.type === 'action:read_file');
    expect(JSON.stringify(read?.payload)).toContain(`notes of run ${i}`);
    expect((await ledger.listPromptRuns(workflowId)).map((r) => r.turn)).toEqual([1, 2, 3]);
    // The worker running the workflow held the workspace: the session ended there as a local activity, with no
    // server round trip.
    const host = existsSync(runDir(a, workflowId)) ? a : b;
    expectTurnsOnHost(await turnActivities(workflowId), taskQueue, host.hostId, 3);
    expect((await scheduledActivities(workflowId)).filter((a) => a.type !== 'runTurn')).toEqual([]);
    expect((await ledger.getRun(workflowId))?.status).toBe('succeeded');
  }
  await Promise.all([a.stop(), b.stop()]);
});

it('a run that ends on a worker other than its host ends its session on the host queue, where the workspace is', { timeout: 120_000 }, async () => {
  const taskQueue = `aff-away-${Date.now().toString(36)}`;
  const first = await startHost(taskQueue, 'host-i');
  const workflowId = testWorkflowId('aff-away');
  const run = await start(taskQueue, 'pinned', book.write('away', [{ envelope: { step: 'chat', message: 'more?' } }, ok('ended away')]), workflowId);
  await waitForState(run, 'waiting_for_reply');
  expect(existsSync(runDir(first, workflowId))).toBe(true);
  // The host keeps only its activities; the workflow moves to another worker with another disk.
  await first.stop();
  const hostActivities = await startHost(taskQueue, 'host-i', first.dataDir, 'activities');
  const other = await startHost(taskQueue, 'host-j');
  await run.reply('no');
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'ended away' });
  const scheduled = await scheduledActivities(workflowId);
  expect(scheduled.at(-1)).toEqual({ type: 'endSession', taskQueue: `${taskQueue}@host-i` });
  // Ended on its host (the workspace stays there, as every run's does), nothing created on the other worker, the
  // record closed once.
  expect(existsSync(runDir(first, workflowId))).toBe(true);
  expect(existsSync(runDir(other, workflowId))).toBe(false);
  expect((await ledger.getRun(workflowId))?.status).toBe('succeeded');
  expect(await eventsOf(workflowId, 'end')).toHaveLength(1);
  await Promise.all([hostActivities.stop(), other.stop()]);
});

it("a sub-agent in its parent's workspace runs its turns on the parent's host, though its workflow runs on another worker", { timeout: 120_000 }, async () => {
  const taskQueue = `aff-sub-${Date.now().toString(36)}`;
  const first = await startHost(taskQueue, 'host-k');
  const workflowId = testWorkflowId('aff-sub');
  book.write('sub-review', [act({ name: 'read_file', params: { path: 'NOTES.md' } }), ok('the notes say: parent notes')]);
  const task = book.write('sub-parent', [
    act({ name: 'write_file', params: { path: 'NOTES.md', content: 'parent notes' } }),
    { envelope: { step: 'chat', message: 'review now?' } },
    { envelope: { step: 'sub-agent', agent: 'reviewer', message: 'review them script:sub-review', terminateAfter: true } },
  ]);
  const run = await start(taskQueue, 'parent', task, workflowId);
  await waitForState(run, 'waiting_for_reply');
  // The host keeps only its activities: the parent's next workflow task and the whole child run on another worker.
  await first.stop();
  const hostActivities = await startHost(taskQueue, 'host-k', first.dataDir, 'activities');
  const other = await startHost(taskQueue, 'host-l');
  await run.reply('yes');
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'the notes say: parent notes' });
  const childId = `${workflowId}.sub-3`;
  // The child's workflow runs on host-l; its turns go to host-k's queue.
  expectTurnsOnHost(await turnActivities(childId), taskQueue, 'host-k', 2);
  const read = (await ledger.listSteps(childId)).find((step) => step.type === 'action:read_file');
  expect(JSON.stringify(read?.payload)).toContain('parent notes');
  expect(existsSync(runDir(other, workflowId))).toBe(false);
  await Promise.all([hostActivities.stop(), other.stop()]);
});

it("a turn whose host goes away mid-turn waits on the host's queue, no other worker takes it, and the run counts what the lost attempt spent", { timeout: 180_000 }, async () => {
  const taskQueue = `aff-retry-${Date.now().toString(36)}`;
  const first = await startHost(taskQueue, 'host-m');
  const workflowId = testWorkflowId('aff-retry');
  // Turn 2's first run makes one 100-token model call and then hangs; any later run of it answers at once.
  const task = book.write('retry-elsewhere', [{ envelope: { step: 'chat', message: 'go on?' } }, { calls: [{ usage: { input: 100, output: 0 } }], hangOnce: 60_000, ...ok('done at home') }]);
  const run = await start(taskQueue, 'patient', task, workflowId);
  await waitForState(run, 'waiting_for_reply');
  const other = await startHost(taskQueue, 'host-n');
  await run.reply('yes');
  // Turn 2 runs on host-m and spends its call before it hangs.
  await expect.poll(async () => (await ledger.listPromptRuns(workflowId)).find((r) => r.turn === 2)?.calls ?? 0, { timeout: 30_000, interval: 100 }).toBe(1);
  // Host-m goes away mid-turn: Temporal's retry (after the heartbeat timeout) waits on host-m's queue, where host-n
  // never polls, so it cannot run the turn in an empty directory.
  await first.stop();
  const pendingAttempt = async () => (await client.workflow.getHandle(workflowId).describe()).raw.pendingActivities?.[0]?.attempt ?? 0;
  await expect.poll(pendingAttempt, { timeout: 60_000, interval: 200 }).toBeGreaterThanOrEqual(2);
  // Host-m comes back (its activities, same disk): the turn waits on its queue and runs there.
  const home = await startHost(taskQueue, 'host-m', first.dataDir, 'activities');
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'done at home' });
  expectTurnsOnHost(await turnActivities(workflowId), taskQueue, 'host-m', 2);
  expect(existsSync(runDir(other, workflowId))).toBe(false);
  // Every token the ledger saw, the lost attempt's 100 included, is in the run's own totals.
  const rows = await ledger.listPromptRuns(workflowId);
  const ledgerTokens = rows.reduce((n, r) => n + (r.usage.input ?? 0) + (r.usage.output ?? 0), 0);
  expect(rows.filter((r) => r.turn === 2).map((r) => r.outputUsed)).toEqual([false, true]);
  expect(ledgerTokens).toBeGreaterThanOrEqual(100);
  expect((result.usage.input ?? 0) + (result.usage.output ?? 0)).toBe(ledgerTokens);
  await Promise.all([home.stop(), other.stop()]);
});

it('a turn whose workspace is gone fails the run with WorkspaceMissing and never creates an empty one', { timeout: 120_000 }, async () => {
  const taskQueue = `aff-missing-${Date.now().toString(36)}`;
  const host = await startHost(taskQueue, 'host-m');
  const workflowId = testWorkflowId('aff-missing');
  const task = book.write('missing', [{ envelope: { step: 'chat', message: 'anything else?' } }, ok()]);
  const run = await start(taskQueue, 'pinned', task, workflowId);
  await waitForState(run, 'waiting_for_reply');
  expect(existsSync(runDir(host, workflowId))).toBe(true);
  rmSync(runDir(host, workflowId), { recursive: true, force: true });
  await run.reply('go on');
  const result = await run.result();
  expect(result).toMatchObject({ status: 'failed', failureType: 'WorkspaceMissing' });
  expect(result.reason).toMatch(/workspace .* does not exist on this worker/);
  expect(existsSync(runDir(host, workflowId))).toBe(false);
  await host.stop();
});

it('onHostLoss reprovision: when the host is gone, the turn runs in a fresh workspace on another worker with the conversation replayed', { timeout: 180_000 }, async () => {
  const taskQueue = `aff-move-${Date.now().toString(36)}`;
  const [a, b] = [await startHost(taskQueue, 'host-c'), await startHost(taskQueue, 'host-d')];
  const workflowId = testWorkflowId('aff-move');
  const task = book.write('move', [act({ name: 'write_file', params: { path: 'NOTES.md', content: 'first host' } }), { envelope: { step: 'chat', message: 'shall I go on?' } }, ok('moved and done')]);
  const run = await start(taskQueue, 'mover', task, workflowId);
  await waitForState(run, 'waiting_for_reply');
  const [lost, survivor] = existsSync(runDir(a, workflowId)) ? [a, b] : [b, a];
  await lost.stop();
  await run.reply('yes');
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'moved and done' });
  const [moved] = await eventsOf(workflowId, 'host-lost');
  expect(moved?.data).toMatchObject({ lostHostQueue: `${taskQueue}@${lost.hostId}`, hostQueue: `${taskQueue}@${survivor.hostId}` });
  expect(String((moved?.data as { reason: string }).reason)).toMatch(/within 3000 ms/);
  // The fresh workspace is on the survivor; the lost one was left alone; each turn is accounted once.
  expect(existsSync(runDir(survivor, workflowId))).toBe(true);
  expect(existsSync(path.join(runDir(lost, workflowId), 'NOTES.md'))).toBe(true);
  const rows = await ledger.listPromptRuns(workflowId);
  expect(rows.map((r) => r.turn)).toEqual([1, 2, 3]);
  // The fresh session got the conversation so far, replayed from the ledger.
  const request = JSON.parse(readFileSync(path.join(runDir(survivor, workflowId), '.scripted', 'last-request.json'), 'utf8')) as { prompt: string };
  expect(request.prompt).toContain('shall I go on?');
  expect(request.prompt).toContain('script:move');
  await survivor.stop();
});

it('onHostLoss await-operator: the run waits for an operator, and a retry after the host is back finishes it there', { timeout: 180_000 }, async () => {
  const taskQueue = `aff-wait-${Date.now().toString(36)}`;
  const [a, b] = [await startHost(taskQueue, 'host-e'), await startHost(taskQueue, 'host-f')];
  const workflowId = testWorkflowId('aff-wait');
  const task = book.write('wait', [{ envelope: { step: 'chat', message: 'ready?' } }, ok('done on the same host')]);
  const run = await start(taskQueue, 'pinned', task, workflowId);
  await waitForState(run, 'waiting_for_reply');
  const [lost, survivor] = existsSync(runDir(a, workflowId)) ? [a, b] : [b, a];
  await lost.stop();
  await run.reply('yes');
  await waitForState(run, 'awaiting_operator');
  expect((await run.status()).lastError).toMatch(new RegExp(`host queue "${taskQueue}@${lost.hostId}" within 3000 ms`));
  // The host comes back (same data dir, same host id) and the operator retries.
  const back = await startHost(taskQueue, lost.hostId, lost.dataDir);
  await run.retryTurn();
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'done on the same host' });
  expect(await eventsOf(workflowId, 'host-lost')).toEqual([]);
  expect(existsSync(runDir(survivor, workflowId))).toBe(false);
  expect((await ledger.listPromptRuns(workflowId)).map((r) => r.turn)).toEqual([1, 2]);
  await Promise.all([back.stop(), survivor.stop()]);
});

it('a run ended while its host is gone still closes its record: endSession waits hostLossTimeoutMs, then ends elsewhere', { timeout: 120_000 }, async () => {
  const taskQueue = `aff-end-${Date.now().toString(36)}`;
  const [a, b] = [await startHost(taskQueue, 'host-g'), await startHost(taskQueue, 'host-h')];
  const workflowId = testWorkflowId('aff-end');
  const run = await start(taskQueue, 'pinned', book.write('end', [{ envelope: { step: 'chat', message: 'still there?' } }, ok()]), workflowId);
  await waitForState(run, 'waiting_for_reply');
  const [lost, survivor] = existsSync(runDir(a, workflowId)) ? [a, b] : [b, a];
  await lost.stop();
  const cancelledAt = Date.now();
  await run.cancel('host is gone anyway');
  expect(await run.result()).toMatchObject({ status: 'cancelled', reason: 'host is gone anyway' });
  expect(Date.now() - cancelledAt).toBeGreaterThanOrEqual(hostLossTimeoutMs - 500);
  expect((await ledger.getRun(workflowId))?.status).toBe('cancelled');
  expect(await eventsOf(workflowId, 'end')).toHaveLength(1);
  expect(existsSync(runDir(lost, workflowId))).toBe(true); // left where it was
  await survivor.stop();
});
