/**
 * Whole-workflow tests over the table of the five pinned CLIs (support/cli-table.ts): a real `agentRun` workflow on
 * the test Temporal server drives the REAL binary through its adapter; only the model vendor is faked. The harness
 * reads a file with its own tool, asks for an action, gets the result on a resumed session and succeeds.
 * Each turn's CLI runs under `strace -ff -e trace=connect` (the catalog's executable is strace, the CLI its first
 * argument), and every AF_INET/AF_INET6 connect must go to loopback. A missing binary or strace is a FAILURE,
 * never a skip.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAdapterRegistry } from '../../src/adapters/registry.js';
import { priceUsage } from '../../src/contracts/cost.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import type { FakeVendor } from './fake-vendor/server.js';
import { clis } from './support/cli-table.js';
import { expectInstalled } from './support/clis.js';
import { expectStrace, inetConnects, loopback, straceBin, straceConnectArgs, straceLogs } from './support/network.js';

// Not under /tmp: codex's sandbox helper breaks when its home is there.
const dataRoot = path.join(repoRoot, '.data/workflow-live-tests', `${process.pid}`);
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';
const task = 'Find the secret word in notes.txt and echo it.';
/** USD per million tokens; OpenCode and Pi compute the cost themselves from this table (`settings.cost`). */
const prices = { input: 3.0, output: 15.0, cacheRead: 0.3, cacheWrite: 3.75 };

describe.each(clis)('$name through the agentRun workflow (real binary, fake vendor)', (cli) => {
  const dataDir = path.join(dataRoot, cli.name);
  const traceDir = path.join(dataDir, 'strace');
  let vendor: FakeVendor;
  let w: TestWorker;

  beforeAll(async () => {
    expectInstalled(cli.executable);
    expectStrace();
    vendor = await cli.startVendor();
    mkdirSync(traceDir, { recursive: true });
    w = await startTestWorker({
      dataDir,
      adapters: defaultAdapterRegistry(),
      env: { FAKE_VENDOR_KEY: 'sk-workflow-test-fake' },
      catalog: {
        harnesses: [
          {
            name: cli.name,
            driverClass: cli.driverClass,
            vendor: cli.vendor,
            model: cli.model,
            apiKeyEnv: cli.keyEnv,
            // strace follows every process of every turn, one log per pid (-ff).
            executable: straceBin,
            args: [...straceConnectArgs(path.join(traceDir, 'connect')), cli.executable],
            active: true,
            baseUrl: cli.baseUrl(vendor),
            turnTimeoutMs: 30_000,
            prices,
            settings: { apiKeyEnv: cli.keyEnv, ...cli.settings, ...(cli.pricesItself ? { cost: prices } : {}) },
            env: cli.env,
          },
        ],
        actions: [{ name: 'echo' }],
        agents: [
          {
            name: `${cli.name}-agent`,
            harness: cli.name,
            systemPrompt: 'Read the workspace with your own tools; use actions for everything else.',
            permissions: 'auto',
            credentials: [{ env: cli.keyEnv, from: 'FAKE_VENDOR_KEY' }],
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

  it('reads a file with its own tool, asks for an action, resumes and succeeds; rows carry tokens, cost and model; loopback only', async () => {
    const workflowId = testWorkflowId(cli.name);
    const workspace = path.join(dataDir, 'workspaces', 'runs', workflowId);
    mkdirSync(workspace, { recursive: true });
    writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
    const cacheWrite = cli.cacheWrite !== undefined ? { cacheWrite: 0 } : {};
    vendor.script(
      { match: cli.match, toolCalls: [{ id: 'call_wf_1', ...cli.readCall(workspace) }], usage: { input: 1000, output: 20, ...cacheWrite } },
      { match: cli.match, text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000, ...cacheWrite } },
      { match: cli.match, text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200, ...cacheWrite } },
    );
    const run = await w.start({ agent: `${cli.name}-agent`, task, workflowId });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'the secret word is PELICAN', iterations: 2 });

    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.map((r) => r.turn)).toEqual([1, 2]);
    expect(rows.map((r) => r.resumed)).toEqual([false, true]);
    expect(rows[0]!.usage).toMatchObject({ input: 1100, output: 50, cacheRead: 1000, ...cacheWrite });
    expect(rows[1]!.usage).toMatchObject({ input: 40, output: 12, cacheRead: 1200, ...cacheWrite });
    expect(rows[0]!.externalSessionId).toBeTruthy();
    expect(rows[1]!.externalSessionId).toBeTruthy();
    // A forking CLI continues turn 1's session in a branch of it: a new id that carried the history (see below).
    if (cli.forks) expect(rows[1]!.externalSessionId).not.toBe(rows[0]!.externalSessionId);
    else expect(rows[1]!.externalSessionId).toBe(rows[0]!.externalSessionId);
    for (const row of rows) {
      // One cost authority: the price table; the CLI's own figure recorded beside it.
      expect(row.costSource).toBe('price-table');
      expect(row.costUsd).toBeGreaterThan(0);
      expect(row.costUsd).toBeCloseTo(priceUsage(prices, row.usage)!, 9);
      if (cli.pricesItself) expect(row.harnessCostUsd).toBeCloseTo(row.costUsd, 9);
      else if (cli.reportsCost) expect(row.harnessCostUsd).toBeGreaterThan(0);
      else expect(row.harnessCostUsd).toBeUndefined();
      // claude prices with its own table, which need not agree with the catalog's.
      if (!cli.reportsCost) expect(row.costMismatch).toBe(false);
      expect(row.modelId.length).toBeGreaterThan(0);
      expect(row.reportedModel ?? undefined).toBe(cli.reportedModel);
      expect(row.durationMs).toBeGreaterThan(0);
    }

    // The tool result went back to the model, and the resumed turn carried turn 1's history.
    const turns = vendor.requests.filter(cli.match);
    expect(turns).toHaveLength(3);
    expect(turns[1]!.rawBody).toContain('The secret word is PELICAN.');
    expect(turns[2]!.rawBody).toContain(task);
    expect(turns[2]!.rawBody).toContain('The secret word is PELICAN.');
    expect(turns[2]!.rawBody).toContain(actionsEnvelope.replaceAll('"', '\\"'));
    expect(vendor.unexpected).toEqual([]);

    const logs = straceLogs(path.join(traceDir, 'connect'));
    expect(logs.length).toBeGreaterThan(0);
    const connects = logs.flatMap((log) => inetConnects(readFileSync(log, 'utf8')));
    expect(connects.length).toBeGreaterThan(0);
    expect(connects.filter((address) => !loopback.has(address))).toEqual([]);
  }, 90_000);
});
