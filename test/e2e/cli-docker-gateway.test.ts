/**
 * The five pinned CLIs in Docker behind the egress gateway (issue 21's proof): a real `agentRun` workflow drives each
 * REAL binary inside a container of the test image with network policy `vendor`. The container has no network but
 * its loopback (`NetworkMode: none`); the fake vendor listens on the host's 127.0.0.1, where the container cannot
 * connect: every model call goes through the run's gateway (the forwarder in the container → the run's Unix socket →
 * the gateway in the worker → the vendor). The harness holds a placeholder, never the key.
 *
 * What it asserts, as a user would check: the multi-turn run succeeds; every request the vendor got carried the REAL
 * key (swapped in by the gateway) and nothing the vendor got (which holds all the harness saw: prompts, tool results)
 * contains it; the gateway's metered tokens equal what the vendor served, exactly; and after the run's end the
 * gateway's socket answers nothing.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAdapterRegistry } from '../../src/adapters/registry.js';
import { addUsage, noUsage, type Usage } from '../../src/contracts/usage.js';
import { DockerSandboxProvider } from '../../src/sandbox/docker-provider.js';
import { gatewaySocketFor } from '../../src/sandbox/forwarder.js';
import { requireEngineAndImage, testDocker, testImage } from '../docker/docker-env.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import type { FakeVendor, RecordedRequest } from './fake-vendor/server.js';
import { clis } from './support/cli-table.js';

const docker = testDocker();
// Not under /tmp: codex's sandbox helper breaks when its home is there.
const dataRoot = path.join(repoRoot, '.data/gateway-live-tests', `${process.pid}`);
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';
const task = 'Find the secret word in notes.txt and echo it.';
const prices = { input: 3.0, output: 15.0, cacheRead: 0.3, cacheWrite: 3.75 };

/** The key the request carried, in whichever form its API takes. */
function keyOf(request: RecordedRequest): string | undefined {
  const h = request.headers;
  const bearer = typeof h.authorization === 'string' ? /^Bearer (.+)$/i.exec(h.authorization)?.[1] : undefined;
  const query = new URL(request.url, 'http://x').searchParams.get('key') ?? undefined;
  return (h['x-api-key'] as string | undefined) ?? (h['x-goog-api-key'] as string | undefined) ?? bearer ?? query;
}

/** Whether anything still answers on a Unix socket. */
function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(socket);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

beforeAll(async () => {
  await requireEngineAndImage(docker);
});

describe.each(clis)('$name in Docker behind the egress gateway (policy vendor)', (cli) => {
  const dataDir = path.join(dataRoot, cli.name);
  const secret = `sk-gateway-${cli.name}-${randomBytes(8).toString('hex')}`;
  let vendor: FakeVendor;
  let w: TestWorker;

  beforeAll(async () => {
    vendor = await cli.startVendor();
    w = await startTestWorker({
      dataDir,
      adapters: defaultAdapterRegistry(),
      env: { FAKE_VENDOR_KEY: secret },
      sandboxes: (dir) => ({ docker: new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: path.join(dir, 'workspaces') }) }),
      catalog: {
        harnesses: [
          {
            name: cli.name,
            driverClass: cli.driverClass,
            vendor: cli.vendor,
            model: cli.model,
            apiKeyEnv: cli.keyEnv,
            // The image's CLIs are on the container's PATH (/opt/clis/bin).
            executable: cli.name,
            active: true,
            baseUrl: cli.baseUrl(vendor),
            turnTimeoutMs: 60_000,
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
            // Codex's own sandbox (bubblewrap) cannot nest in a container without capabilities: there the container is
            // the sandbox, and `dangerous` turns codex's off ("only the outer sandbox limits it").
            permissions: cli.name === 'codex' ? 'dangerous' : 'auto',
            sandbox: { provider: 'docker', networkPolicy: 'vendor' },
            credentials: [{ env: cli.keyEnv, from: 'FAKE_VENDOR_KEY' }],
            actions: ['echo'],
            guardrails: { maxIterations: 4, maxTokens: 100000, maxCostUsd: 1, maxWallTimeMs: 180000 },
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

  it('completes a multi-turn run with the vendor reachable only through the gateway; the key never reaches the harness; metered tokens equal the bill', async () => {
    const workflowId = testWorkflowId(`gw-${cli.name}`);
    const workspace = path.join(dataDir, 'workspaces', 'runs', workflowId);
    mkdirSync(workspace, { recursive: true });
    writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
    vendor.script(
      { match: cli.match, toolCalls: [{ id: 'call_gw_1', ...cli.readCall('/workspace') }], usage: { input: 1000, output: 20 } },
      { match: cli.match, text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000 } },
      { match: cli.match, text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200 } },
    );
    const run = await w.start({ agent: `${cli.name}-agent`, task, workflowId });
    const result = await run.result();
    expect(result, JSON.stringify(result)).toMatchObject({ status: 'succeeded', result: 'the secret word is PELICAN', iterations: 2 });

    // The tool result went back to the model: the harness read the workspace inside the container.
    const turns = vendor.requests.filter(cli.match);
    expect(turns.length).toBeGreaterThanOrEqual(3);
    expect(turns[1]!.rawBody).toContain('The secret word is PELICAN.');
    expect(vendor.unexpected).toEqual([]);

    // Every model call reached the vendor with the real key, which the gateway put there; what the vendor got holds
    // everything the harness saw and sent (its prompts, its tool results), and the key is in none of it.
    const posts = vendor.requests.filter((r) => r.method === 'POST');
    expect(posts.length).toBeGreaterThan(0);
    for (const r of posts) expect(keyOf(r)).toBe(secret);
    for (const r of vendor.requests) expect(r.rawBody).not.toContain(secret);

    // The gateway's meter equals the vendor's bill exactly, call by call in total.
    const calls = await w.ledger.listModelCalls(workflowId);
    expect(calls.length).toBe(vendor.served.length);
    const metered = calls.reduce<Usage>((sum, row) => addUsage(sum, row.call.usage), noUsage);
    const billed = vendor.served.reduce<Usage>((sum, s) => addUsage(sum, { input: s.usage.input, output: s.usage.output, cacheRead: s.usage.cacheRead, cacheWrite: s.usage.cacheWrite }), noUsage);
    expect({ input: metered.input, output: metered.output, cacheRead: metered.cacheRead ?? 0 }).toEqual({ input: billed.input, output: billed.output, cacheRead: billed.cacheRead ?? 0 });
    // The served model, from the wire, attributes each prompt run (codex and OpenCode never name theirs).
    const promptRuns = await w.ledger.listPromptRuns(workflowId);
    expect(promptRuns.length).toBe(2);
    for (const row of promptRuns) expect(row.servedModel, row.attemptId).toBe(calls.filter((c) => c.attemptId === row.attemptId).at(-1)?.call.model);
    expect(promptRuns.every((row) => typeof row.servedModel === 'string' && row.servedModel.length > 0)).toBe(true);
    const network = await w.ledger.listNetwork(workflowId);
    expect(network.filter((r) => r.record.kind === 'model' && r.record.decision === 'allowed').length).toBe(calls.length);
    for (const row of network) expect(JSON.stringify(row)).not.toContain(secret);

    // The run is over: its gateway is closed, its placeholder forgotten: nothing answers on the run's socket.
    const socket = gatewaySocketFor(path.join(dataDir, 'runtime', 'gateway'), workflowId);
    expect(existsSync(path.dirname(socket))).toBe(true);
    expect(await answers(socket)).toBe(false);
  }, 240_000);
});
