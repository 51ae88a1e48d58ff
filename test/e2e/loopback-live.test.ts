/**
 * The MCP loopback with the REAL binaries (the proof behind each driver's `mcpClient: true`): a real `agentRun` workflow
 * on the test Temporal server runs the CLI behind its run's egress gateway (network policy `vendor`); the fake vendor's
 * model calls two loopback tools in the CLI's own tool-call form — `read_resource` of an operator-registered document
 * and `run_status` — then ends the turn with the envelope. The tools' answers must reach the vendor in the next
 * request, each read must be a ledger row of the turn, and the token must appear in no argv, config file or request.
 */
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAdapterRegistry } from '../../src/adapters/registry.js';
import { LOOPBACK_PATH, LOOPBACK_TOOLS } from '../../src/contracts/loopback.js';
import { DockerSandboxProvider } from '../../src/sandbox/docker-provider.js';
import { gatewayPort } from '../../src/sandbox/forwarder.js';
import { requireEngineAndImage, testDocker, testImage } from '../docker/docker-env.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import type { FakeVendor, RecordedRequest, ScriptedToolCall } from './fake-vendor/server.js';
import { cliHarness, clis, type TableCli } from './support/cli-table.js';
import { expectInstalled } from './support/clis.js';

const dataRoot = path.join(repoRoot, '.data/loopback-live-tests', `${process.pid}`);
const docker = testDocker();
const successEnvelope = '{"step":"success","result":"read the style guide"}';
const styleGuide = 'House style: every test names the attacker. Code word: MAGPIE-7731.';

/** How each MCP-capable CLI's model sees the loopback's tools, and calls one. */
interface McpForm {
  /** A call of loopback tool `tool` in the CLI's own tool-call form. */
  readonly call: (tool: string, input: Record<string, unknown>, id: string) => ScriptedToolCall;
  /** Replies the model makes first to find the tools (codex defers MCP tools behind its `tool_search`). */
  readonly discover: readonly ScriptedToolCall[];
  /** Where the tools are listed to the model: the request `index` of the turn's model calls, and their names there. */
  readonly listedIn: number;
  readonly listed: (tool: string) => string;
}

const forms: Partial<Record<TableCli['name'], McpForm>> = {
  claude: {
    call: (tool, input, id) => ({ id, name: `mcp__durable-harness__${tool}`, input }),
    discover: [],
    listedIn: 0,
    listed: (tool) => `"mcp__durable-harness__${tool}"`,
  },
  // codex 0.171 always defers MCP tools (feature tool_search_always_defer_mcp_tools): the model searches, codex answers
  // with the loopback's tools in the namespace mcp__durable_harness, and the model calls them there.
  codex: {
    call: (tool, input, id) => ({ id, name: tool, namespace: 'mcp__durable_harness', input }),
    discover: [{ id: 'call_lb_search', name: 'tool_search', toolSearch: true, input: { query: 'durable-harness run status resources', limit: 8 } }],
    listedIn: 1,
    listed: (tool) => `"name":"${tool}"`,
  },
  gemini: {
    call: (tool, input, id) => ({ id, name: `mcp_durable-harness_${tool}`, input }),
    discover: [],
    listedIn: 0,
    listed: (tool) => `"name":"mcp_durable-harness_${tool}"`,
  },
  opencode: {
    call: (tool, input, id) => ({ id, name: `durable-harness_${tool}`, input }),
    discover: [],
    listedIn: 0,
    listed: (tool) => `"name":"durable-harness_${tool}"`,
  },
};

/** Each MCP-capable CLI on the local provider (both modes) and in a Docker container (the image's binary). */
const cases = clis
  .filter((c) => forms[c.name] !== undefined)
  .flatMap((cli) => [
    { cli, provider: 'local' as const, postures: ['auto', 'strict'] },
    // Codex's own sandbox (bubblewrap) cannot nest in a container: there the container is the sandbox (`dangerous`).
    { cli, provider: 'docker' as const, postures: [cli.name === 'codex' ? 'dangerous' : 'auto'] },
  ]);

beforeAll(async () => {
  await requireEngineAndImage(docker);
});

/** Every file under `dir` (no links followed), for the "token written nowhere" check. */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...filesUnder(p));
    else if (entry.isFile() && statSync(p).size < 5_000_000) out.push(p);
  }
  return out;
}

describe.each(cases)('$cli.name calls the MCP loopback on the $provider provider (real binary, fake vendor)', ({ cli, provider, postures }) => {
  const dataDir = path.join(dataRoot, `${cli.name}-${provider}`);
  let vendor: FakeVendor;
  let w: TestWorker;

  beforeAll(async () => {
    expectInstalled(cli.executable);
    vendor = await cli.startVendor();
    mkdirSync(dataDir, { recursive: true });
    w = await startTestWorker({
      dataDir,
      adapters: defaultAdapterRegistry(),
      ...(provider === 'docker' ? { sandboxes: (dir: string) => ({ docker: new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: path.join(dir, 'workspaces') }) }) } : {}),
      env: { FAKE_VENDOR_KEY: 'sk-loopback-test-fake' },
      catalog: {
        // In the container: the image's pinned CLI on its PATH (/opt/clis/bin).
        harnesses: [cliHarness(cli, vendor, provider === 'docker' ? { executable: cli.name } : {})],
        agents: [
          ...postures.map((posture) => ({
            name: `${cli.name}-${posture}`,
            harness: cli.name,
            permissions: posture === 'strict' ? { posture, approvalTimeoutMs: 60_000 } : posture,
            sandbox: { provider, networkPolicy: 'vendor' },
            credentials: [{ env: cli.keyEnv, from: 'FAKE_VENDOR_KEY' }],
            loopback: { resources: [{ uri: 'docs://style-guide', description: 'The house style', text: styleGuide }] },
            guardrails: { maxIterations: 3, maxTokens: 100000, maxCostUsd: 1, maxWallTimeMs: 120000 },
          })),
        ],
      },
    });
  });
  afterAll(async () => {
    await w?.close();
    await vendor?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it.each(postures)('posture %s (strict runs the two-way mode): lists the tools, calls read_resource and run_status mid-turn; the answers reach the model; each read is a ledger row', async (posture) => {
    const workflowId = testWorkflowId(`${cli.name}-${posture}-loopback`);
    const form = forms[cli.name]!;
    const before = vendor.requests.length;
    vendor.script(
      ...(form.discover.length ? [{ match: cli.match, toolCalls: form.discover }] : []),
      // Held a moment, so the turn is in flight while the host tries the sandbox's address (below).
      { match: cli.match, toolCalls: [form.call('read_resource', { uri: 'docs://style-guide' }, 'call_lb_1'), form.call('run_status', {}, 'call_lb_2')], delayMs: 300 },
      { match: cli.match, text: successEnvelope },
    );
    const run = await w.start({ agent: `${cli.name}-${posture}`, task: 'Read the house style guide through your durable-harness MCP server.', workflowId });
    // From outside the sandbox, its loopback address is nothing: the forwarder listens in the sandbox's own namespace.
    const deadline = Date.now() + 30_000;
    while (vendor.requests.length === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await expect(fetch(`http://127.0.0.1:${gatewayPort}${LOOPBACK_PATH}`, { method: 'POST', body: '{}' })).rejects.toThrow();
    const result = await run.result();
    expect(vendor.unexpected).toEqual([]);
    expect(result).toMatchObject({ status: 'succeeded', result: 'read the style guide' });

    const turns = vendor.requests.slice(before).filter(cli.match);
    // The CLI listed the loopback's tools to its model …
    const listing = turns[form.listedIn]!.rawBody;
    for (const tool of LOOPBACK_TOOLS) expect(listing).toContain(form.listed(tool));
    // … and the tools' answers went back to it in the request after the calls.
    const afterCalls = form.discover.length + 1;
    expect(turns.length).toBe(afterCalls + 1);
    const next = turns[afterCalls]!.rawBody;
    expect(next).toContain('MAGPIE-7731');
    expect(next).toContain(workflowId);

    const reads = await w.ledger.listLoopbackReads(workflowId);
    const ok = reads.filter((r) => r.read.status === 'ok');
    expect(ok.map((r) => r.read.target).sort()).toEqual(['read_resource', 'run_status']);
    expect(ok.every((r) => r.turn === 1 && r.read.method === 'tools/call' && r.read.bytes > 0)).toBe(true);
    expect(reads.filter((r) => r.read.status !== 'ok')).toEqual([]);
    // Read-only tools never reach the permission gate, in either mode.
    expect(await w.ledger.listApprovals({ workflowId })).toEqual([]);

    // The token is in the harness's environment only: in no request the vendor saw, and in no file of the workspace.
    const token = (await loopbackTokenSeen(turns)) ?? '';
    expect(token).toBe('');
    const workspace = path.join(dataDir, 'workspaces', 'runs', workflowId);
    for (const file of filesUnder(workspace)) expect(readFileSync(file, 'latin1'), file).not.toMatch(/dh-mcp-[A-Za-z0-9_-]{20,}/);
  }, 120_000);
});

/** A loopback token in anything the vendor received (there must be none). */
async function loopbackTokenSeen(requests: readonly RecordedRequest[]): Promise<string | undefined> {
  for (const r of requests) {
    const hit = /dh-mcp-[A-Za-z0-9_-]{20,}/.exec(r.rawBody + JSON.stringify(r.headers));
    if (hit) return hit[0];
  }
  return undefined;
}
