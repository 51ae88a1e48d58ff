/**
 * Whole-workflow tests for claude and codex: a real `agentRun` workflow on the test Temporal server drives the
 * REAL pinned binary through its adapter; only the model vendor is faked. The harness reads a file with its own
 * tool, asks for an action, gets the result on a resumed session and succeeds.
 * A missing binary is a FAILURE, never a skip.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {  } from '../../src/adapters/claude-code-adapter.js';
import {  } from '../../src/adapters/codex-adapter.js';
import { defaultAdapterRegistry } from '../../src/adapters/registry.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import type { FakeVendor } from './fake-vendor/server.js';
import { cliBinary, expectInstalled, startVendorFor } from './support/clis.js';

// Not under /tmp: codex's sandbox helper breaks when its home is there.
const dataRoot = path.join(repoRoot, '.data/workflow-live-tests', `${process.pid}`);
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';

const clis = [
  {
    name: 'claude' as const,
    harness: { name: 'claude-code', driverClass: 'ClaudeCode', vendor: 'anthropic', model: 'claude-sonnet-4-5', apiKeyEnv: 'ANTHROPIC_API_KEY', settings: { maxRetries: 0 } },
    readCall: (workspace: string) => ({ name: 'Read', input: { file_path: path.join(workspace, 'notes.txt') } }),
    reportedModel: 'claude-sonnet-4-5' as string | null,
    harnessCost: true,
  },
  {
    name: 'codex' as const,
    harness: { name: 'codex', driverClass: 'Codex', vendor: 'openai', model: 'gpt-5.5', apiKeyEnv: 'OPENAI_API_KEY' },
    readCall: () => ({ name: 'exec_command', input: { cmd: 'cat notes.txt' } }),
    reportedModel: null,
    harnessCost: false,
  },
];

describe.each(clis)('$name through the agentRun workflow (real binary, fake vendor)', (cli) => {
  let vendor: FakeVendor;
  let w: TestWorker;
  const dataDir = path.join(dataRoot, cli.name);

  beforeAll(async () => {
    expectInstalled(cliBinary(cli.name));
    vendor = await startVendorFor('claude', 'codex');
    mkdirSync(dataDir, { recursive: true });
    w = await startTestWorker({
      dataDir,
      adapters: defaultAdapterRegistry(),
      env: { FAKE_VENDOR_KEY: 'sk-workflow-test-fake' },
      catalog: {
        harnesses: [
          {
            ...cli.harness,
            executable: cliBinary(cli.name),
            active: true,
            baseUrl: vendor.url,
            turnTimeoutMs: 25_000,
            prices: { input: 3.0, output: 15.0, cacheRead: 0.3, cacheWrite: 3.75 },
          },
        ],
        actions: [{ name: 'echo' }],
        agents: [
          {
            name: `${cli.name}-agent`,
            harness: cli.harness.name,
            systemPrompt: 'Read the workspace with your own tools; use actions for everything else.',
            permissions: 'auto',
            credentials: [{ env: cli.harness.apiKeyEnv, from: 'FAKE_VENDOR_KEY' }],
            actions: ['echo'],
            guardrails: { maxIterations: 4, maxTokens: 100000, maxCostUsd: 1, maxWallTimeMs: 120000 },
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

  it('reads a file with its own tool, asks for an action, resumes and succeeds; prompt-run rows carry tokens, cost and model', async () => {
    const workflowId = testWorkflowId(cli.name);
    const workspace = path.join(dataDir, 'workspaces', 'runs', workflowId);
    mkdirSync(workspace, { recursive: true });
    writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
    vendor.script(
      { toolCalls: [{ id: 'call_wf_1', ...cli.readCall(workspace) }], usage: { input: 1000, output: 20, cacheRead: 0, cacheWrite: 0 } },
      { text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000, cacheWrite: 0 } },
      { text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200, cacheWrite: 0 } },
    );
    const run = await w.start({ agent: `${cli.name}-agent`, task: 'Find the secret word in notes.txt and echo it.', workflowId });
    const result = await run.result();
    expect(result.status).toBe('succeeded');
    expect(result.iterations).toBe(2);

    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.map((r) => r.turn)).toEqual([1, 2]);
    expect(rows.map((r) => r.resumed)).toEqual([false, true]);
    expect(rows[0]!.usage).toMatchObject({ input: 1100, output: 50, cacheRead: 1000, cacheWrite: 0 });
    expect(rows[1]!.usage).toMatchObject({ input: 40, output: 12, cacheRead: 1200, cacheWrite: 0 });
    expect(rows.every((r) => r.costUsd > 0 && r.modelId.length > 0)).toBe(true);
    // Turn 2 continued turn 1's session in a fork of it (a new id; the history carried over, see below).
    expect(rows[1]!.externalSessionId).toBeTruthy();
    expect(rows[1]!.externalSessionId).not.toBe(rows[0]!.externalSessionId);
    // One cost authority: the price table; claude's own figure recorded beside it.
    expect(rows.every((r) => r.costSource === 'price-table')).toBe(true);
    for (const r of rows) {
      if (cli.harnessCost) expect(r.harnessCostUsd).toBeGreaterThan(0);
      else expect(r.harnessCostUsd).toBeUndefined();
    }
    expect(rows.every((r) => (r.reportedModel ?? null) === cli.reportedModel)).toBe(true);

    // The resumed turn carried turn 1's history, and the CLI talked to nothing else on the fake server.
    const posts = vendor.requests.filter((r) => r.method === 'POST');
    expect(posts).toHaveLength(3);
    expect(posts[2]!.rawBody).toContain('The secret word is PELICAN.');
    expect(vendor.unexpected).toEqual([]);
  }, 60_000);
});
