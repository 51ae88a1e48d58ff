/**
 * A worker killed (SIGKILL, in its own process) while a permission request waits: nothing unapproved runs, the
 * request stays pending in the ledger and visible on the run, the retried attempt on another worker waits for the
 * same request (same id, same deadline), and after `durable-harness approve` the run completes — the approved
 * command having run exactly once.
 */
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, expect, inject, it } from 'vitest';
import { getAgentRun, startAgentRun } from '../../src/client/index.js';
import { spawnCli, spawnNode, type NodeProcess } from '../support/cli.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const catalog = scriptedCatalog(book, {
  agents: [
    {
      name: 'guarded',
      harness: 'scripted',
      systemPrompt: 'You follow scripts.',
      actions: ['echo'],
      turnAttempts: 3,
      guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 300_000 },
      permissions: { posture: 'strict', approvalTimeoutMs: 240_000 },
    },
  ],
});
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-worker-death-'));
const taskQueue = `test-${path.basename(dataDir)}`;
let child: NodeProcess | undefined;
let w: TestWorker | undefined;
let connection: Connection | undefined;

afterAll(async () => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  await w?.close();
  await connection?.close();
});

it('a worker killed while a request waits runs nothing unapproved; after approve on another worker the run completes', { timeout: 180_000 }, async () => {
  child = spawnNode(['--import', 'tsx', path.join(repoRoot, 'test/support/worker-process.ts')], {
    env: { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: taskQueue, DATA_DIR: dataDir, CATALOG_JSON: JSON.stringify(catalog), WORKFLOW_BUNDLE: inject('workflowBundlePath') },
  });
  await expect.poll(() => child!.stdoutSoFar(), { timeout: 60_000, interval: 100 }).toContain('ready');

  connection = await Connection.connect({ address: inject('temporalAddress') });
  const client = new Client({ connection });
  const task = book.write('worker-death', [{ permissions: [{ tool: 'Bash', kind: 'command', input: { command: 'echo ran >> ran.txt' }, title: 'append to ran.txt' }], ...ok('survived') }]);
  const started = await startAgentRun(client, { agent: 'guarded', task, identity: { tenantId: 'acme', userId: 'alice' }, workflowId: testWorkflowId('worker-death'), taskQueue });
  const run = getAgentRun(client, started.workflowId);
  await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: 30_000, interval: 100 }).toBe(1);
  const status = await run.status();
  const pending = status.pendingApprovals![0]!;
  const workspace = status.sandbox!.hostWorkspacePath;

  // The worker dies mid-wait: no shutdown, no cancellation, nothing answered.
  child.kill('SIGKILL');
  await child.outcome;
  expect(existsSync(path.join(workspace, 'ran.txt'))).toBe(false);
  const asked = await (async () => {
    const { SqliteLedger } = await import('../../src/ledger/index.js');
    const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
    try {
      return await ledger.getApproval(run.workflowId, pending.requestId);
    } finally {
      await ledger.close();
    }
  })();
  expect(asked).toMatchObject({ status: 'pending', requestId: pending.requestId });

  // Another worker takes over: the turn is retried (after the heartbeat timeout) and asks the same request again.
  w = await startTestWorker({ catalog, dataDir, taskQueue });
  await expect
    .poll(async () => (await w!.ledger.readEvents(run.workflowId, 0, 1000)).some((e) => e.type === 'retry'), { timeout: 90_000, interval: 250 })
    .toBe(true);
  await expect.poll(async () => (await w!.ledger.readEvents(run.workflowId, 0, 1000)).filter((e) => e.type === 'permission-request').length, { timeout: 30_000, interval: 100 }).toBe(2);
  expect(await w.ledger.getApproval(run.workflowId, pending.requestId)).toMatchObject({ status: 'pending', requestedAt: asked!.requestedAt, expiresAt: asked!.expiresAt });
  expect((await run.status()).pendingApprovals?.map((p) => p.requestId)).toEqual([pending.requestId]);
  expect(existsSync(path.join(workspace, 'ran.txt'))).toBe(false);

  const approved = await spawnCli(['approve', run.workflowId, pending.requestId, '--by', 'dana', '--address', inject('temporalAddress')]).outcome;
  expect(approved).toMatchObject({ code: 0 });
  await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'survived' });
  expect(readFileSync(path.join(workspace, 'ran.txt'), 'utf8')).toBe('ran\n');
  expect(await w.ledger.listApprovals({ workflowId: run.workflowId })).toEqual([expect.objectContaining({ requestId: pending.requestId, status: 'allowed', decidedBy: 'unauthenticated:dana' })]);
});
