/**
 * Timers without waiting for them: the chat and operator timeouts (24 h by default) and the wall-time guardrail,
 * on Temporal's time-skipping test server, with the real workflow, activities and scripted harness.
 */
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { parseCatalog } from '../../src/catalog/index.js';
import { startAgentRun, type StartAgentRunInput } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { createWorker, type HarnessWorker } from '../../src/worker.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { timeSkippingEnvironment } from '../support/time-skipping.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

const HOUR = 3_600_000;
const book = scriptBook();
const catalog = parseCatalog(
  scriptedCatalog(book, {
    agents: [
      // The defaults: a day for a reply and for an operator.
      { name: 'patient', harness: 'scripted', turnAttempts: 1, guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 48 * HOUR } },
      { name: 'two-hours', harness: 'scripted', guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 2 * HOUR } },
    ],
  }),
  'time-skipping catalog',
  { baseDir: path.join(repoRoot, 'config') },
);
let env: TestWorkflowEnvironment;
let worker: HarnessWorker;
let running: Promise<void>;
let ledger: SqliteLedger;
const taskQueue = 'time-skipping';

beforeAll(async () => {
  env = await timeSkippingEnvironment();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-timeskip-'));
  ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  ({ worker } = await createWorker({ connection: env.nativeConnection, taskQueue, catalog: () => catalog, dataDir, ledger, env: {}, credentials: new MemoryCredentialStore({}), workflowBundle: { codePath: inject('workflowBundlePath') }, catalogCheck: false, decisions: 'trusted-network' }));
  running = worker.run();
});
afterAll(async () => {
  worker?.shutdown();
  await running;
  await env?.teardown();
  await ledger?.close();
});

const start = (input: Omit<StartAgentRunInput, 'identity' | 'taskQueue'>) => startAgentRun(env.client, { ...input, identity: { tenantId: 't', userId: 'u' }, taskQueue });

it('a chat step nobody answers fails after the 24 h chat timeout, in seconds of real time', async () => {
  const real = Date.now();
  const virtual = await env.currentTimeMs();
  const run = await start({ agent: 'patient', task: book.write('ts-chat', [{ envelope: { step: 'chat', message: 'Anyone?' } }]), workflowId: testWorkflowId('ts-chat') });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'failed', failureType: 'ChatTimeout' });
  expect(result.reason).toMatch(/no reply within 86400000 ms/);
  expect((await env.currentTimeMs()) - virtual).toBeGreaterThanOrEqual(24 * HOUR);
  expect(Date.now() - real).toBeLessThan(30_000);
});

it('a reply after 23 hours of waiting is still taken', async () => {
  const run = await start({ agent: 'patient', task: book.write('ts-late', [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok('used it')]), workflowId: testWorkflowId('ts-late') });
  await expect.poll(async () => (await run.status()).state, { timeout: 20_000 }).toBe('waiting_for_reply');
  await env.sleep('23h');
  await run.reply('main');
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'used it' });
});

it('a failed turn with no operator decision fails after the 24 h operator timeout', async () => {
  const virtual = await env.currentTimeMs();
  const run = await start({ agent: 'patient', task: book.write('ts-operator', [{ failTimes: 99, ...ok() }]), workflowId: testWorkflowId('ts-operator') });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'failed', failureType: 'OperatorTimeout' });
  expect((await env.currentTimeMs()) - virtual).toBeGreaterThanOrEqual(24 * HOUR);
});

it('the wall-time guardrail stops a run that waits longer than its budget', async () => {
  const virtual = await env.currentTimeMs();
  const run = await start({ agent: 'two-hours', task: book.write('ts-wall', [{ envelope: { step: 'chat', message: 'Still there?' } }]), workflowId: testWorkflowId('ts-wall') });
  const result = await run.result();
  // Stopped by the 2 h wall-time timer, not failed by the 24 h chat timeout that was also pending.
  expect(result).toMatchObject({ status: 'stopped', guardrail: 'wallTime', reason: 'wall time limit of 7200000 ms reached' });
  expect((await env.currentTimeMs()) - virtual).toBeGreaterThanOrEqual(2 * HOUR);
});
