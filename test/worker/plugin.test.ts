/**
 * The worker as a Temporal plugin, the way a service composes it: its own worker, its own plugin beside
 * `durableHarnessPlugin`, no `createWorker`. The demo run goes end to end and the service's plugin still does its part.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { SimplePlugin } from '@temporalio/plugin';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { loadCatalog } from '../../src/catalog/index.js';
import { startAgentRun } from '../../src/client/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { defaultDeps, durableHarnessPlugin } from '../../src/worker.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

try {
  Runtime.install({ logger: new DefaultLogger('WARN') });
} catch {
  // installed by another file in this process
}

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-plugin-'));
const taskQueue = `plugin-${path.basename(dataDir)}`;
const catalog = loadCatalog(path.join(repoRoot, 'config', 'default.yaml'));
const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
/** The service's own plugin: an activity interceptor that sees every activity the harness runs. */
const seen: string[] = [];
const servicePlugin = new SimplePlugin({
  name: 'service-audit',
  workerInterceptors: { activity: [(ctx) => ({ inbound: { execute: (input, next) => (seen.push(ctx.info.activityType), next(input)) } })] },
});

let nativeConnection: NativeConnection;
let connection: Connection;
let worker: Worker;
let running: Promise<void>;

beforeAll(async () => {
  nativeConnection = await NativeConnection.connect({ address: inject('temporalAddress') });
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const deps = defaultDeps({ catalog: () => catalog, dataDir, ledger, env: {}, decisions: 'trusted-network' });
  worker = await Worker.create({
    connection: nativeConnection,
    taskQueue,
    plugins: [servicePlugin, durableHarnessPlugin({ deps, workflowBundle: { codePath: inject('workflowBundlePath') } })],
  });
  running = worker.run();
});

afterAll(async () => {
  worker?.shutdown();
  await running;
  await nativeConnection?.close();
  await connection?.close();
  await ledger.close();
});

it('a worker built from durableHarnessPlugin beside a service plugin runs the demo agent to success', async () => {
  const workflowId = testWorkflowId('plugin-demo');
  const run = await startAgentRun(new Client({ connection }), { agent: 'demo', task: 'Summarise this workspace into NOTES.md', identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId });
  const result = await run.result();
  expect(result.status).toBe('succeeded');
  expect(result.iterations).toBe(2);
  expect(readFileSync(path.join(dataDir, 'workspaces', 'runs', workflowId, 'NOTES.md'), 'utf8')).toContain('Summarise this workspace');
  expect((await ledger.getRun(workflowId))?.status).toBe('succeeded');
  // The service's interceptor ran around the harness's own activities.
  expect(seen).toContain('runTurn');
});
