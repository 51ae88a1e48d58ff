/**
 * The MCP loopback through a whole run, with a stdio-JSON harness that wires it by hand (test/harnesses/
 * loopback-harness.mjs) behind the run's egress gateway: it reads its status mid-turn, then its steps (an action's
 * result among them) on the next turn; a forged token is refused; the token it leaks into its reply and workspace
 * never reaches the result, history or the ledger; the token dies with the run (endSession closes the door).
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { gatewaySocketFor } from '../../src/sandbox/forwarder.js';
import { scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const harness = path.join(repoRoot, 'test', 'harnesses', 'loopback-harness.mjs');
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      harnesses: [{ name: 'looper', driverClass: 'StdioJson', executable: process.execPath, args: [harness], active: true, vendor: 'testvendor', model: 'm', turnTimeoutMs: 30_000 }],
      agents: [
        {
          name: 'looped',
          harness: 'looper',
          actions: ['echo'],
          sandbox: { networkPolicy: 'vendor' },
          loopback: {},
          guardrails: { maxIterations: 4, maxTokens: 100_000, maxCostUsd: 1, maxWallTimeMs: 60_000 },
        },
      ],
    }),
  });
});
afterAll(() => w?.close());

/** Every gateway socket under `dir`. */
function sockets(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sockets(p));
    else if (entry.isSocket() && entry.name === 'gateway.sock') out.push(p);
  }
  return out;
}

it('a harness reads its status and steps mid-turn; a forged token is refused; its own token never leaves the sandbox and dies with the run', async () => {
  const workflowId = testWorkflowId('loopback');
  const run = await w.start({ agent: 'looped', task: 'read yourself', workflowId });
  const result = await run.result();
  expect(result.status).toBe('succeeded');
  // Turn 2 read the steps, and the echo action's result was among them.
  expect(result.result).toMatch(/^steps \d+, echo seen true, token \[REDACTED\]$/);

  const reads = await w.ledger.listLoopbackReads(workflowId);
  expect(reads.filter((r) => r.read.status === 'ok').map((r) => [r.turn, r.read.target])).toEqual([
    [1, 'run_status'],
    [2, 'list_steps'],
  ]);
  expect(reads.filter((r) => r.read.status === 'refused').map((r) => [r.turn, r.read.method])).toEqual([[1, 'auth']]);
  // The run's state counts the reads, not the refused request (the Temporal UI's current details say so too).
  const status = await run.status();
  expect(status.loopbackReads).toBe(2);
  const details = (await run.handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
  expect(details).toContain("loopback: 2 MCP reads of the run's data (`durable-harness network RUN --loopback`)");

  const token = readFileSync(path.join(w.dataDir, 'workspaces', 'runs', workflowId, '.loopback-token'), 'utf8');
  expect(token).toMatch(/^dh-mcp-[A-Za-z0-9_-]{32}$/);
  const history = JSON.stringify(await run.handle.fetchHistory());
  expect(history).not.toContain(token);
  const ledgerFile = path.join(w.dataDir, 'ledger.sqlite');
  const ledgerBytes = readFileSync(ledgerFile).toString('latin1') + (existsSync(`${ledgerFile}-wal`) ? readFileSync(`${ledgerFile}-wal`).toString('latin1') : '');
  expect(ledgerBytes).toContain('[REDACTED]');
  expect(ledgerBytes).not.toContain(token);
  const events = await w.ledger.readEvents(workflowId, 0, 1000);
  expect(JSON.stringify(events)).not.toContain(token);

  // endSession closed the run's door: its socket is gone (the directory it was in stays), so the token reaches nothing.
  const socket = gatewaySocketFor(path.join(w.dataDir, 'runtime', 'gateway'), workflowId);
  expect(existsSync(path.dirname(socket))).toBe(true);
  expect(existsSync(socket)).toBe(false);
  expect(sockets(w.dataDir)).toEqual([]);
});
