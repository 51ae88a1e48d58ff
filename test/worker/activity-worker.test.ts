/**
 * Activity placement `process`: the workflow worker keeps workflows and local activities, a child process runs
 * the turn. What an operator checks: runs still finish, the turn really ran in the other process, the worker
 * stops loudly when that process dies, and shutting down leaves no process behind.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { activityPlacementFromEnv, createPlacedWorker, defaultActivityPlacement, type PlacedWorker } from '../../src/activity-worker.js';
import { loadCatalog } from '../../src/catalog/index.js';
import { startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { processAlive, waitUntilGone } from '../support/processes.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { testWorkflowId } from '../support/worker.js';

const { EventType } = proto.temporal.api.enums.v1;

try {
  Runtime.install({ logger: new DefaultLogger('WARN') });
} catch {
  // installed by another file in this process
}

const book = scriptBook();
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-placed-'));
const catalogFile = path.join(dataDir, 'catalog.json');
writeFileSync(catalogFile, JSON.stringify(scriptedCatalog(book)));
const catalog = loadCatalog(catalogFile);

let nativeConnection: NativeConnection;
let connection: Connection;
let client: Client;

async function placedWorker(taskQueue: string, eagerTurnSlots?: number): Promise<PlacedWorker> {
  return createPlacedWorker({
    eagerTurnSlots,
    connection: nativeConnection,
    taskQueue,
    catalog: () => catalog,
    dataDir,
    env: {},
    identity: `main-${taskQueue}`,
    workflowBundle: { codePath: inject('workflowBundlePath') },
    placement: 'process',
    processConfig: { address: inject('temporalAddress'), catalogFile, env: {} },
  });
}

beforeAll(async () => {
  nativeConnection = await NativeConnection.connect({ address: inject('temporalAddress') });
  connection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
});

afterAll(async () => {
  await nativeConnection?.close();
  await connection?.close();
});

describe('activity placement "process"', () => {
  it('with no eager turn slots, runs the workflow in the worker and every turn in the activity-worker process', async () => {
    const taskQueue = testWorkflowId('placed');
    const placed = await placedWorker(taskQueue, 0);
    const running = placed.run();
    try {
      expect(placed.activityProcess?.pid).not.toBe(process.pid);
      const task = book.write('two-turns', [act({ name: 'write_file', params: { path: 'a.txt', content: 'hi' } }), ok('written')]);
      const run = await startAgentRun(client, { agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId('placed-run') });
      const result = await run.result();
      expect(result).toMatchObject({ status: 'succeeded', result: 'written', iterations: 2 });

      const events = (await run.handle.fetchHistory()).events ?? [];
      const turnStarts = events.filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED).map((e) => e.activityTaskStartedEventAttributes?.identity);
      const workflowTasks = events.filter((e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED).map((e) => e.workflowTaskStartedEventAttributes?.identity);
      expect(turnStarts).toEqual([`main-${taskQueue}-activities`, `main-${taskQueue}-activities`]);
      expect(new Set(workflowTasks)).toEqual(new Set([`main-${taskQueue}`]));

      // Both processes wrote to the one ledger: the turn's events (child) and its accounting rows (worker).
      const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
      try {
        expect(await ledger.listPromptRuns(run.workflowId)).toHaveLength(2);
      } finally {
        await ledger.close();
      }
    } finally {
      await placed.shutdown();
      await running;
    }
    await waitUntilGone([placed.activityProcess!.pid], 5000);
  });

  it('by default keeps a lone run\'s turns on the workflow worker (eager dispatch) and sends turns beyond its slots to the activity process', async () => {
    const taskQueue = testWorkflowId('placed-eager');
    const placed = await placedWorker(taskQueue);
    const running = placed.run();
    const turnIdentities = async (handle: AgentRunHandle) =>
      ((await handle.handle.fetchHistory()).events ?? [])
        .filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        .map((e) => e.activityTaskStartedEventAttributes?.identity);
    try {
      const lone = await startAgentRun(client, { agent: 'scripted', task: book.write('lone', [ok('alone')]), identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId('lone') });
      expect((await lone.result()).status).toBe('succeeded');
      expect(await turnIdentities(lone)).toEqual([`main-${taskQueue}`]);

      // Six turns of a second at once: the worker keeps at most its slots, the activity process takes the rest.
      const task = book.write('busy', [{ sleepMs: 1000, ...ok('slept') }]);
      const runs = await Promise.all(
        Array.from({ length: 6 }, (_, i) => startAgentRun(client, { agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId(`busy-${i}`) })),
      );
      for (const run of runs) expect((await run.result()).status).toBe('succeeded');
      const where = (await Promise.all(runs.map(turnIdentities))).flat();
      expect(where).toHaveLength(6);
      // The worker holds 2 eager slots plus 1 for its single poll: at most 3 of the 6 can be its own.
      expect(where.filter((id) => id === `main-${taskQueue}-activities`).length).toBeGreaterThanOrEqual(3);
    } finally {
      await placed.shutdown();
      await running;
    }
  });

  it("leaves Ctrl-C to the parent: a SIGINT to the whole group does not kill the activity worker under its turns", async () => {
    const placed = await placedWorker(testWorkflowId('placed-sigint'));
    const running = placed.run();
    try {
      process.kill(placed.activityProcess!.pid, 'SIGINT');
      await new Promise((r) => setTimeout(r, 500));
      expect(processAlive(placed.activityProcess!.pid)).toBe(true);
      expect(placed.worker.getState()).toBe('RUNNING');
    } finally {
      await placed.shutdown();
      await running;
    }
    await waitUntilGone([placed.activityProcess!.pid], 5000);
  });

  it('stops the worker with a clear error when the activity-worker process dies', async () => {
    const placed = await placedWorker(testWorkflowId('placed-dies'));
    const running = placed.run();
    process.kill(placed.activityProcess!.pid, 'SIGKILL');
    await expect(running).rejects.toThrow(/activity worker process exited \(SIGKILL\)/);
    expect(placed.worker.getState()).not.toBe('RUNNING');
    expect(processAlive(placed.activityProcess!.pid)).toBe(false);
  });

  it('is chosen with DURABLE_HARNESS_ACTIVITY_WORKER, and a wrong value says what is allowed', () => {
    expect(activityPlacementFromEnv({ DURABLE_HARNESS_ACTIVITY_WORKER: 'process' })).toBe('process');
    expect(activityPlacementFromEnv({ DURABLE_HARNESS_ACTIVITY_WORKER: 'inline' })).toBe('inline');
    expect(activityPlacementFromEnv({})).toBe(defaultActivityPlacement);
    expect(() => activityPlacementFromEnv({ DURABLE_HARNESS_ACTIVITY_WORKER: 'thread' })).toThrow(/one of inline, process/);
  });
});
