/**
 * Cancelling an `agentRun` during a long turn of each of the five REAL CLIs: the fake vendor holds its reply for
 * 60 s, the test waits until the CLI has sent its request, finds every process running in the run's workspace
 * (and their descendants) from /proc, sends the run's cancel signal, and requires the whole tree to be gone
 * within 2 s and the run to end as `cancelled`. A missing binary is a FAILURE, never a skip.
 */
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAdapterRegistry } from '../../src/adapters/registry.js';
import { profiles } from '../fixtures/record-more.js';
import { processAlive, processesIn, waitUntilGone } from '../support/processes.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import type { FakeVendor, RecordedRequest } from './fake-vendor/server.js';
import { cliBinary, expectInstalled, startVendorFor } from './support/clis.js';

// Not under /tmp: codex's sandbox helper breaks when its home is there.
const dataRoot = path.join(repoRoot, '.data/cancel-workflow-tests', `${process.pid}`);
const successEnvelope = '{"step":"success","result":"too late"}';

interface CancelCli {
  readonly name: string;
  readonly harness: Record<string, unknown>;
  readonly vendor: () => Promise<FakeVendor>;
  /** The vendor request that is the CLI's model turn (not a probe, title or side call). */
  readonly match: (request: RecordedRequest) => boolean;
}

const isPost = (request: RecordedRequest): boolean => request.method === 'POST';

const clis: CancelCli[] = [
  {
    name: 'claude',
    harness: { driverClass: 'ClaudeCode', vendor: 'anthropic', model: 'claude-sonnet-4-5', apiKeyEnv: 'ANTHROPIC_API_KEY', executable: cliBinary('claude'), settings: { maxRetries: 0 } },
    vendor: () => startVendorFor('claude'),
    match: isPost,
  },
  {
    name: 'codex',
    harness: { driverClass: 'Codex', vendor: 'openai', model: 'gpt-5.5', apiKeyEnv: 'OPENAI_API_KEY', executable: cliBinary('codex') },
    vendor: () => startVendorFor('codex'),
    match: isPost,
  },
  ...(['gemini', 'opencode', 'pi'] as const).map((name) => ({
    name,
    harness: {
      driverClass: { gemini: 'GeminiCli', opencode: 'OpenCode', pi: 'Pi' }[name],
      vendor: name === 'gemini' ? 'google' : 'openai',
      model: profiles[name].model,
      apiKeyEnv: profiles[name].keyEnv,
      executable: profiles[name].executable,
      settings: { apiKeyEnv: profiles[name].keyEnv },
      // See support/cli-table.ts: stops OpenCode's background plugin install from the npm registry.
      env: name === 'opencode' ? { npm_config_offline: 'true' } : {},
    },
    vendor: profiles[name].vendor,
    match: profiles[name].match,
  })),
];

describe.each(clis)('$name: cancelling the run during a long turn', (cli) => {
  const dataDir = path.join(dataRoot, cli.name);
  let vendor: FakeVendor;
  let w: TestWorker;

  beforeAll(async () => {
    expectInstalled(cli.harness.executable as string);
    vendor = await cli.vendor();
    mkdirSync(dataDir, { recursive: true });
    w = await startTestWorker({
      dataDir,
      adapters: defaultAdapterRegistry(),
      env: { FAKE_VENDOR_KEY: 'sk-cancel-test-fake' },
      catalog: {
        harnesses: [
          {
            name: cli.name,
            ...cli.harness,
            active: true,
            baseUrl: cli.name === 'opencode' || cli.name === 'pi' ? `${vendor.url}/v1` : vendor.url,
            turnTimeoutMs: 90_000,
          },
        ],
        agents: [
          {
            name: `${cli.name}-agent`,
            harness: cli.name,
            permissions: 'auto',
            credentials: [{ env: cli.harness.apiKeyEnv as string, from: 'FAKE_VENDOR_KEY' }],
            guardrails: { maxIterations: 2, maxTokens: 100000, maxCostUsd: 1, maxWallTimeMs: 120000 },
          },
        ],
      },
    });
  });
  afterAll(async () => {
    await w?.close();
    await vendor?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('kills the whole CLI process tree within 2 s and ends the run as cancelled', async () => {
    const workflowId = testWorkflowId(`cancel-${cli.name}`);
    const workspace = path.join(dataDir, 'workspaces', 'runs', workflowId);
    vendor.script({ match: cli.match, text: successEnvelope, delayMs: 60_000 });
    const run = await w.start({ agent: `${cli.name}-agent`, task: 'Take your time.', workflowId });

    // The CLI is mid-turn once the vendor holds its request.
    await expect.poll(() => vendor.requests.filter(cli.match).length, { timeout: 30_000, interval: 50 }).toBeGreaterThan(0);
    // The tree as it is now (a CLI's short-lived helpers may end between listing and looking).
    const pids = processesIn(workspace).filter(processAlive);
    expect(pids.length).toBeGreaterThan(0);

    const started = Date.now();
    await run.cancel('operator cancelled a long turn');
    const tookMs = await waitUntilGone(pids, 2000);
    expect(tookMs).toBeLessThan(2000);
    // The figure for the closing notes: `npx vitest run test/e2e/cli-cancel-workflow.test.ts` prints it.
    console.info(`${cli.name}: ${pids.length} processes gone ${Date.now() - started} ms after the cancel signal was sent`);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(processesIn(workspace)).toEqual([]);
    const result = await run.result();
    expect(result).toMatchObject({ status: 'cancelled', reason: 'operator cancelled a long turn' });
    expect(vendor.unexpected).toEqual([]);
  }, 60_000);
});
