/**
 * A cancel reaches a turn on another host. On the turn's own host the workflow stops it at once (a sink,
 * src/activities/turn/stops.ts); when the workflow task runs on another worker, nothing there runs the turn, and
 * Temporal's cancellation must reach it with the turn's next heartbeat response (at most `heartbeatThrottle` later).
 * Host A opens the run and runs its turn; A stops polling workflows, so the cancel's workflow task runs on host B.
 */
import { existsSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, expect, it } from 'vitest';
import { inject } from 'vitest';
import { startAgentRun } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { parseCatalog } from '../../src/catalog/index.js';
import { createWorker } from '../../src/worker.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { scriptedSleepPids, waitUntilGone } from '../support/processes.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

const book = scriptBook();
const catalog = parseCatalog(scriptedCatalog(book), 'test catalog', { baseDir: path.join(repoRoot, 'config') });
const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
});

it('a cancel decided on another host reaches the turn with its next heartbeat', async () => {
  const address = inject('temporalAddress');
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-hosts-'));
  const taskQueue = `test-hosts-${path.basename(dataDir)}`;
  const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  closers.push(() => ledger.close());
  const connection = await NativeConnection.connect({ address });
  closers.push(() => connection.close());
  const host = (hostId: string) =>
    createWorker({
      connection,
      taskQueue,
      hostId,
      catalog: () => catalog,
      dataDir,
      ledger,
      env: {},
      credentials: new MemoryCredentialStore({}),
      workflowBundle: { codePath: inject('workflowBundlePath') },
      decisions: 'trusted-network',
      catalogCheck: false,
      reconcileIntervalMs: 0,
    });
  const a = (await host('host-a')).worker;
  // A's two pollers run on their own: its workflows stop, its turns go on.
  const aMain = a.main.run();
  const aHost = a.host!.run();
  closers.push(async () => {
    for (const w of [a.main, a.host!]) if (w.getState() === 'RUNNING') w.shutdown();
    await Promise.allSettled([aMain, aHost]);
  });
  const clientConnection = await Connection.connect({ address });
  closers.push(() => clientConnection.close());
  const client = new Client({ connection: clientConnection });

  const workflowId = testWorkflowId('cancel-hosts');
  const run = await startAgentRun(client, { agent: 'scripted', task: book.write('cancel-across', [{ sleepMs: 60_000, ...ok() }]), workflowId, taskQueue, identity: { tenantId: 'acme', userId: 'alice' } });
  const workspace = path.join(dataDir, 'workspaces', 'runs', workflowId);
  await expect.poll(() => existsSync(path.join(workspace, '.scripted', 'child.pid')), { timeout: 15_000, interval: 20 }).toBe(true);
  const pids = await scriptedSleepPids(workspace);
  expect(pids.length).toBeGreaterThan(0);

  // A runs workflows no more; B takes the run's next workflow task (once A's sticky queue times out).
  a.main.shutdown();
  await aMain;
  const b = (await host('host-b')).worker;
  const bRunning = b.run();
  closers.push(async () => {
    b.shutdown();
    await bRunning.catch(() => undefined);
  });

  await run.cancel('cancelled from another host');
  await waitUntilGone(pids, 30_000);
  const goneAt = Date.now();
  const events = (await run.handle.fetchHistory()).events ?? [];
  const requested = events.find((e) => e.activityTaskCancelRequestedEventAttributes);
  expect(requested, 'the turn was cancelled through Temporal').toBeDefined();
  const requestedAt = Number(requested!.eventTime!.seconds) * 1000 + Math.floor((requested!.eventTime!.nanos ?? 0) / 1e6);
  // Delivered with the next heartbeat (≤ 2 s) and killed within the 1 s grace.
  console.info(`cancel across hosts: the turn's tree gone ${goneAt - requestedAt} ms after Temporal recorded the cancel request`);
  expect(goneAt - requestedAt).toBeLessThan(3_500);
  expect(await run.result()).toMatchObject({ status: 'cancelled', reason: 'cancelled from another host' });
}, 90_000);
