/**
 * `durable-harness network RUN` and the `network:` line of `status`, over a ledger written directly (as the turn
 * activity writes the gateway's batches): what an operator reads, its --json, its paging and its exit codes. Needs
 * no Temporal server: the command reads only the ledger.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCommand } from '../../src/cli/commands.js';
import { withIo } from '../../src/cli/io.js';
import { ledgerStatus, ledgerStatusLines } from '../../src/cli/ledger-status.js';
import type { AgentRunHandle } from '../../src/client/index.js';
import type { LoopbackRead } from '../../src/contracts/loopback.js';
import { SqliteLedger, type LoopbackRow } from '../../src/ledger/index.js';
import { meteredCall, networkRow, refusedRow, run } from '../ledger/ledger-contract.js';

let dir: string;
let ledger: SqliteLedger;
const savedDatabaseUrl = process.env.DATABASE_URL;

/** The command in this process, its output captured (as test/support/cli.ts does, without a worker's imports). */
async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await withIo({ out: (t) => (stdout += t), err: (t) => (stderr += t) }, () => runCommand([...args, '--data', dir]));
  return { code, stdout, stderr };
}

const footer =
  'total: 4 requests, 1 refused (last: CONNECT evil.example:443 refused:not-allowlisted) · 3 model calls metered, 1,234 tokens, served claude-sonnet-4-5';

beforeAll(async () => {
  delete process.env.DATABASE_URL; // the ledger under test is the data dir's SQLite file
  dir = mkdtempSync(path.join(os.tmpdir(), 'dh-network-cli-'));
  ledger = SqliteLedger.open(path.join(dir, 'ledger.sqlite'));
  for (const workflowId of ['wf-net', 'wf-quiet']) await ledger.startRun({ ...run, workflowId, runId: `${workflowId}-r1` });
  await ledger.recordNetwork([
    networkRow('gw:1', { workflowId: 'wf-net', runId: undefined }, { at: Date.UTC(2026, 11, 2, 19, 0, 1) }),
    networkRow('gw:2', { workflowId: 'wf-net', runId: undefined, turn: 2 }, { at: Date.UTC(2026, 11, 2, 19, 0, 2), kind: 'http', method: 'GET', destination: 'pypi.org:80', path: '/simple/\u001b[2Jx', status: 200, bytesIn: 310, bytesOut: 5120, rule: 'allowlist:pypi.org:80' }),
    refusedRow('gw:3', 'evil.example:443', { workflowId: 'wf-net', runId: undefined, turn: 2 }, { at: Date.UTC(2026, 11, 2, 19, 0, 3) }),
    networkRow('gw:4', { workflowId: 'wf-net', runId: undefined, turn: 2 }, { at: Date.UTC(2026, 11, 2, 19, 0, 4) }),
  ]);
  const read = (id: string, turn: number, r: Partial<LoopbackRead>): LoopbackRow => ({
    id, workflowId: 'wf-net', turn, read: { at: Date.UTC(2026, 11, 2, 19, 1, turn), method: 'tools/call', target: 'run_status', status: 'ok', bytes: 512, durationMs: 3, ...r },
  });
  await ledger.recordLoopbackReads([
    read('lb:1', 1, {}),
    read('lb:2', 1, { method: 'resources/read', target: 'docs://\u001b[31mred' }),
    read('lb:3', 2, { method: 'auth', target: '', status: 'refused', bytes: 80, reason: "the request needs this run's loopback token" }),
  ]);
  await ledger.recordModelCalls([
    meteredCall('gw:c1', { workflowId: 'wf-net', runId: undefined }, { usage: { input: 1000, output: 200 } }),
    meteredCall('gw:c2', { workflowId: 'wf-net', runId: undefined }, { usage: { input: 20, cacheRead: 10 } }),
    meteredCall('gw:c3', { workflowId: 'wf-net', runId: undefined }, { usage: { output: 4 } }),
  ]);
});

afterAll(async () => {
  await ledger?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (savedDatabaseUrl !== undefined) process.env.DATABASE_URL = savedDatabaseUrl;
});

describe('durable-harness network RUN', () => {
  it('prints one line per request, oldest first, with the sandbox’s bytes escaped, and the run’s totals', async () => {
    const { code, stdout, stderr } = await cli(['network', 'wf-net']);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^SEQ +TIME +TURN +KIND +METHOD +DESTINATION +PATH +STATUS +BYTES IN\/OUT +DECISION +RULE$/);
    expect(lines).toHaveLength(6);
    expect(lines[1]).toMatch(/^ *\d+ +2026-12-02T19:00:01Z +1 +model +POST +api\.anthropic\.com:443 +\/v1\/messages +200 +1,200\/34,000 +allowed +vendor$/);
    expect(lines[2]).toMatch(/ +2 +http +GET +pypi\.org:80 +\/simple\/\\x1b\[2Jx +200 +310\/5,120 +allowed +allowlist:pypi\.org:80$/);
    expect(stdout).not.toContain('\u001b');
    expect(lines[3]).toMatch(/ +2 +connect +CONNECT +evil\.example:443 +403 +0\/0 +refused +refused:not-allowlisted$/);
    expect(lines[5]).toBe(footer);
  });

  it('--refused lists only the refused requests; the totals stay the run’s', async () => {
    const { code, stdout } = await cli(['network', 'wf-net', '--refused']);
    expect(code).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toContain('evil.example:443');
    expect(lines[2]).toBe(footer);
  });

  it('--json: the page of requests as stored, the run id and the summary', async () => {
    const { code, stdout } = await cli(['network', 'wf-net', '--json']);
    expect(code).toBe(0);
    const page = JSON.parse(stdout) as Record<string, unknown>;
    expect(page).toMatchObject({
      workflowId: 'wf-net',
      runId: 'wf-net-r1',
      summary: {
        requests: 4,
        refused: 1,
        suppressed: 0,
        modelCalls: 3,
        usage: { input: 1020, output: 204, cacheRead: 10 },
        models: ['claude-sonnet-4-5'],
        lastRefused: { method: 'CONNECT', destination: 'evil.example:443', rule: 'refused:not-allowlisted' },
      },
    });
    expect(page).not.toHaveProperty('nextAfter');
    const requests = page.requests as { id: string; turn: number; record: { path: string; decision: string } }[];
    expect(requests.map((r) => [r.id, r.turn, r.record.decision])).toEqual([
      ['gw:1', 1, 'allowed'],
      ['gw:2', 2, 'allowed'],
      ['gw:3', 2, 'refused'],
      ['gw:4', 2, 'allowed'],
    ]);
    expect(requests[1]!.record.path).toBe('/simple/\u001b[2Jx'); // JSON carries the bytes as data, escaped by JSON itself
  });

  it('--limit pages and names the command for the next page, which --after follows to the end', async () => {
    const first = await cli(['network', 'wf-net', '--limit', '3']);
    expect(first.code).toBe(0);
    const more = /^more: durable-harness network wf-net --limit 3 --data (\S+) --after (\d+)$/m.exec(first.stdout);
    expect(more?.[1]).toBe(dir);
    expect(first.stdout.trimEnd().split('\n')).toHaveLength(1 + 3 + 2);
    const second = await cli(['network', 'wf-net', '--limit', '3', '--after', more![2]!]);
    expect(second.stdout).not.toMatch(/^more:/m);
    const lines = second.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(/2026-12-02T19:00:04Z/);
    const past = await cli(['network', 'wf-net', '--after', '999999']);
    expect(past.stdout.trimEnd().split('\n')).toEqual(['no request on this page', footer]);
  });

  it('a run without gateway rows says so and exits 0; an unknown run, a missing ledger or a bad flag exit 2', async () => {
    const quiet = await cli(['network', 'wf-quiet']);
    expect(quiet.code).toBe(0);
    expect(quiet.stdout).toMatch(/^run wf-quiet has no request through an egress gateway recorded in this ledger$/m);

    const unknown = await cli(['network', 'wf-nobody']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/holds no run wf-nobody\. Check the id/);

    const empty = mkdtempSync(path.join(os.tmpdir(), 'dh-network-empty-'));
    try {
      let stderr = '';
      const code = await withIo({ out: () => undefined, err: (t) => (stderr += t) }, () => runCommand(['network', 'wf-net', '--data', empty]));
      expect(code).toBe(2);
      expect(stderr).toContain(`no ledger here to read run wf-net's network from (no DATABASE_URL, no ${path.join(empty, 'ledger.sqlite')})`);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }

    for (const bad of ['--limit=0', '--limit=1001', '--limit=ten', '--after=-1', '--after=1.5']) {
      const r = await cli(['network', 'wf-net', bad]);
      expect(r.code, bad).toBe(2);
      expect(r.stderr).toContain(`${bad.split('=')[0]} must be a whole number`);
    }
    expect((await cli(['network'])).code).toBe(2);
  });

  it('--loopback lists the harness\'s loopback reads, escaped, with refusals and their reason; --json as stored', async () => {
    const { code, stdout, stderr } = await cli(['network', 'wf-net', '--loopback']);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^SEQ\s+TIME\s+TURN\s+METHOD\s+TARGET\s+STATUS\s+BYTES\s+MS\s+REASON$/);
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatch(/^\s*1\s+2026-12-02T19:01:01Z\s+1\s+tools\/call\s+run_status\s+ok\s+512\s+3$/);
    expect(lines[2]).toContain('docs://\\x1b[31mred');
    expect(lines[3]).toMatch(/auth\s+refused\s+80\s+3\s+the request needs this run's loopback token$/);
    const json = JSON.parse((await cli(['network', 'wf-net', '--loopback', '--json'])).stdout) as { reads: { id: string }[] };
    expect(json.reads.map((r) => r.id)).toEqual(['lb:1', 'lb:2', 'lb:3']);
    const quiet = await cli(['network', 'wf-quiet', '--loopback']);
    expect(quiet).toMatchObject({ code: 0, stdout: 'run wf-quiet made no read through an MCP loopback recorded in this ledger\n' });
    expect((await cli(['network', 'wf-nobody', '--loopback'])).code).toBe(2);
  });

  it('--help lists the command', async () => {
    const { code, stdout } = await cli(['--help']);
    expect(code).toBe(0);
    expect(stdout).toContain('durable-harness network RUN_ID [--refused | --loopback] [--json] [--limit 100] [--after SEQ]');
  });
});

describe('status: the network line', () => {
  /** A run handle whose workflow cannot be described (no server): status's ledger part still reads the books. */
  const handle = (workflowId: string) => ({ workflowId, handle: { describe: () => Promise.reject(new Error('no server')) } }) as unknown as AgentRunHandle;

  it('one network: line with the totals and the last refusal, and a network object for --json', async () => {
    const books = await ledgerStatus(handle('wf-net'), ledger);
    const lines = ledgerStatusLines(books);
    expect(lines.filter((l) => l.startsWith('network:'))).toEqual([footer.replace(/^total:/, 'network:')]);
    expect(lines.filter((l) => l.startsWith('loopback:'))).toEqual(['loopback: 3 reads (turn 1: 2, turn 2: 1), 1 refused · `network RUN --loopback` lists them']);
    expect(JSON.parse(JSON.stringify(books))).toMatchObject({ network: { requests: 4, refused: 1, modelCalls: 3, models: ['claude-sonnet-4-5'] } });
  });

  it('nothing about the network when the run has no gateway rows', async () => {
    const books = await ledgerStatus(handle('wf-quiet'), ledger);
    expect(books).not.toHaveProperty('network');
    expect(ledgerStatusLines(books).some((l) => l.startsWith('network') || l.startsWith('loopback'))).toBe(false);
  });
});
