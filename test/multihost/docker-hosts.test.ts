/**
 * Docker runs on two workers (one task queue, one PostgreSQL ledger, the real engine at DOCKER_HOST), in both
 * layouts docs/multi-host.md allows:
 * - each worker with its own data dir and workspace root: a Docker run is pinned to the worker that started it (its
 *   workspace is a bind mount of that worker's directory), so its turns and its end find the workspace even when
 *   its workflow runs on the other worker;
 * - one shared workspace root with pinning off: any worker runs any turn.
 * And the layout that cannot work (pinning off, separate roots) fails at once with WorkspaceMissing naming the
 * setting, instead of retrying into awaiting_operator.
 */
import { chmodSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { parseCatalog, type Catalog } from '../../src/catalog/index.js';
import { startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { PostgresLedger } from '../../src/ledger/index.js';
import { DockerSandboxProvider, dockerLabels } from '../../src/sandbox/docker-provider.js';
import { DockerClient } from '../../src/sandbox/docker-client.js';
import { createWorker } from '../../src/worker.js';
import { requireEngineAndImage, testDocker, testImage } from '../docker/docker-env.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

const docker = testDocker();
const book = scriptBook();
chmodSync(book.dir, 0o755); // the container user (1000) reads the scripts
const readOnlyMounts = [
  { host: path.join(repoRoot, 'test', 'harnesses'), container: '/opt/dh-test/harnesses' },
  { host: book.dir, container: '/opt/dh-test/scripts' },
];
const raw = scriptedCatalog(book, {
  harnesses: [
    {
      name: 'scripted-docker',
      driverClass: 'StdioJson',
      executable: '/usr/local/bin/node',
      args: ['/opt/dh-test/harnesses/scripted-harness.mjs', '--scripts', '/opt/dh-test/scripts'],
      active: true,
      vendor: 'testvendor',
      model: 'scripted-1',
      prices: { input: 1, output: 2 },
      turnTimeoutMs: 60_000,
    },
  ],
  agents: [
    {
      name: 'boxed',
      harness: 'scripted-docker',
      actions: ['write_file', 'read_file'],
      turnAttempts: 2,
      operatorTimeoutMs: 60_000,
      sandbox: { provider: 'docker', networkPolicy: 'none', hostLossTimeoutMs: 60_000 },
    },
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
  readonly workspaces: string;
  readonly dataDir: string;
  stop(): Promise<void>;
}

async function startHost(taskQueue: string, hostId: string, options: { workspaces?: string; dataDir?: string; affinity?: boolean; role?: 'all' | 'activities' } = {}): Promise<Host> {
  const dataDir = options.dataDir ?? mkdtempSync(path.join(os.tmpdir(), `dh-dock-${hostId}-`));
  const workspaces = options.workspaces ?? path.join(dataDir, 'workspaces');
  const connection = await NativeConnection.connect({ address: inject('temporalAddress') });
  const { worker } = await createWorker({
    connection,
    taskQueue,
    hostId,
    hostAffinity: options.affinity ?? true,
    catalog: () => catalog,
    dataDir,
    env: { DATABASE_URL: databaseUrl },
    credentials: new MemoryCredentialStore({}),
    sandboxes: { docker: new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: workspaces, deployment: taskQueue, readOnlyMounts }) },
    workflowBundle: { codePath: inject('workflowBundlePath') },
    identity: hostId,
    shutdownGraceTime: '1s',
    role: options.role ?? 'all',
    decisions: 'trusted-network',
    catalogCheck: false,
  });
  const running = worker.run();
  let stopped: Promise<void> | undefined;
  const host: Host = {
    hostId,
    workspaces,
    dataDir,
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

const runDir = (host: Host, workflowId: string) => path.join(host.workspaces, 'runs', workflowId);
const start = (taskQueue: string, task: string, workflowId: string): Promise<AgentRunHandle> =>
  startAgentRun(client, { agent: 'boxed', task, identity: { tenantId: 'acme', userId: 'u' }, workflowId, taskQueue });

/** The workers (identity: host id) that started each completed turn, in order. */
async function turnWorkers(workflowId: string): Promise<string[]> {
  const started = new Map<string, string>();
  const done: string[] = [];
  const scheduled = new Set<string>();
  for (const e of (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? []) {
    if (e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn') scheduled.add(String(e.eventId));
    const s = e.activityTaskStartedEventAttributes;
    if (s && scheduled.has(String(s.scheduledEventId))) started.set(String(s.scheduledEventId), s.identity?.split(' ')[0] ?? '?');
    const c = e.activityTaskCompletedEventAttributes;
    if (c && started.has(String(c.scheduledEventId))) done.push(started.get(String(c.scheduledEventId))!);
  }
  return done;
}

async function containersOf(taskQueue: string): Promise<number> {
  return (await new DockerClient(docker).list([`${dockerLabels.managed}=true`, `${dockerLabels.deployment}=${taskQueue}`])).length;
}

const notesTask = (name: string, content: string) =>
  book.write(name, [act({ name: 'write_file', params: { path: 'NOTES.md', content } }), { envelope: { step: 'chat', message: 'go on?' } }, act({ name: 'read_file', params: { path: 'NOTES.md' } }), ok(`read ${content}`)]);

beforeAll(async () => {
  await requireEngineAndImage(docker);
  pg = await startTestPostgres();
  databaseUrl = (await pg.freshSchema('docker_hosts')).url;
  catalog = parseCatalog(raw, 'test catalog', { baseDir: path.join(repoRoot, 'config') });
  clientConnection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection: clientConnection });
  ledger = await PostgresLedger.connect({ connectionString: databaseUrl });
}, 120_000);

afterAll(async () => {
  for (const h of hosts) await h.stop();
  await ledger?.close();
  await clientConnection?.close();
  await pg?.stop();
});

it('separate data dirs: a Docker run is pinned to its starting worker, also when its workflow moves to the other one', { timeout: 240_000 }, async () => {
  const taskQueue = `dock-pin-${Date.now().toString(36)}`;
  const first = await startHost(taskQueue, 'dock-a');
  const ids = [0, 1, 2].map((i) => testWorkflowId(`dock-pin${i}`));
  const runs = await Promise.all(ids.map((id, i) => start(taskQueue, notesTask(`pin-${id}`, `notes ${i}`), id)));
  for (const run of runs) await expect.poll(async () => (await run.status()).state, { timeout: 90_000, interval: 200 }).toBe('waiting_for_reply');
  // The first worker keeps only its activities (its disk); workflows now run on a second worker with another disk.
  await first.stop();
  const home = await startHost(taskQueue, 'dock-a', { dataDir: first.dataDir, role: 'activities' });
  const other = await startHost(taskQueue, 'dock-b');
  await Promise.all(runs.map((run) => run.reply('yes')));
  const results = await Promise.all(runs.map((run) => run.result()));
  expect(results.map((r) => [r.status, r.result])).toEqual([0, 1, 2].map((i) => ['succeeded', `read notes ${i}`]));
  for (const id of ids) {
    expect(await turnWorkers(id)).toEqual(['dock-a', 'dock-a', 'dock-a', 'dock-a']);
    expect(readFileSync(path.join(runDir(home, id), 'NOTES.md'), 'utf8')).toMatch(/^notes \d$/);
    expect(existsSync(runDir(other, id))).toBe(false);
    expect((await ledger.getRun(id))?.status).toBe('succeeded');
    expect((await ledger.readEvents(id, 0, 1000)).filter((e) => e.type === 'end')).toHaveLength(1);
  }
  // Every session ended on its host: no container left.
  expect(await containersOf(taskQueue)).toBe(0);
  await Promise.all([home.stop(), other.stop()]);
});

it('one shared workspace root with pinning off: turns run on whichever worker takes them', { timeout: 240_000 }, async () => {
  const taskQueue = `dock-shared-${Date.now().toString(36)}`;
  const shared = mkdtempSync(path.join(os.tmpdir(), 'dh-dock-shared-'));
  const first = await startHost(taskQueue, 'dock-c', { workspaces: shared, affinity: false });
  const id = testWorkflowId('dock-shared');
  const run = await start(taskQueue, notesTask(`shared-${id}`, 'shared notes'), id);
  await expect.poll(async () => (await run.status()).state, { timeout: 90_000, interval: 200 }).toBe('waiting_for_reply');
  // Only the second worker is left: it takes the rest of the run, in the same workspace.
  const second = await startHost(taskQueue, 'dock-d', { workspaces: shared, affinity: false });
  await first.stop();
  await run.reply('yes');
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'read shared notes' });
  expect(await turnWorkers(id)).toEqual(['dock-c', 'dock-c', 'dock-d', 'dock-d']);
  expect(await containersOf(taskQueue)).toBe(0);
  await second.stop();
});

it('pinning off with separate roots fails the run at once with WorkspaceMissing naming DURABLE_HARNESS_WORKSPACES', { timeout: 240_000 }, async () => {
  const taskQueue = `dock-split-${Date.now().toString(36)}`;
  const first = await startHost(taskQueue, 'dock-e', { affinity: false });
  const id = testWorkflowId('dock-split');
  const run = await start(taskQueue, notesTask(`split-${id}`, 'split notes'), id);
  await expect.poll(async () => (await run.status()).state, { timeout: 90_000, interval: 200 }).toBe('waiting_for_reply');
  const second = await startHost(taskQueue, 'dock-f', { affinity: false });
  await first.stop();
  const t0 = Date.now();
  await run.reply('yes');
  const result = await run.result();
  expect(result).toMatchObject({ status: 'failed', failureType: 'WorkspaceMissing' });
  expect(result.reason).toMatch(/DURABLE_HARNESS_WORKSPACES/);
  expect(Date.now() - t0).toBeLessThan(30_000); // no retries into awaiting_operator
  expect(await containersOf(taskQueue)).toBe(0);
  await second.stop();
});
