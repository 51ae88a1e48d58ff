/**
 * Many workers: three worker PROCESSES stand in for three hosts (separate data and workspace roots, one task
 * queue, one Temporal dev server, one PostgreSQL ledger). Runs spread across them; one host is SIGKILLed while a
 * turn runs on it. No run is lost, no turn is accounted twice, no process of the killed host survives it, and the
 * runs whose workspace was on it move to another host (onHostLoss: reprovision) with the conversation replayed.
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { startAgentRun } from '../../src/client/index.js';
import { PostgresLedger } from '../../src/ledger/index.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';
import { processesIn } from '../support/processes.js';
import { act, ok, scriptBook, scriptedCatalog, statelessHarness } from '../support/scripted.js';
import { testWorkflowId } from '../support/worker.js';
import { startHostProcess, type HostProcess } from './hosts.js';

const book = scriptBook();
const catalog = scriptedCatalog(book, {
  harnesses: [statelessHarness(book)],
  agents: [
    {
      name: 'mover',
      harness: 'stateless',
      actions: ['write_file', 'read_file'],
      turnAttempts: 3,
      guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 600_000 },
      sandbox: { hostLossTimeoutMs: 3000, onHostLoss: 'reprovision' },
    },
  ],
});

let pg: TestPostgres;
let databaseUrl: string;
let client: Client;
let connection: Connection;
let ledger: PostgresLedger;
const hosts: HostProcess[] = [];
const taskQueue = `many-${Date.now().toString(36)}`;

beforeAll(async () => {
  pg = await startTestPostgres();
  databaseUrl = (await pg.freshSchema('many')).url;
  ledger = await PostgresLedger.connect({ connectionString: databaseUrl });
  const started = await Promise.all(
    ['h1', 'h2', 'h3'].map((hostId) =>
      startHostProcess({ temporalAddress: inject('temporalAddress'), taskQueue, databaseUrl, catalog, hostId, workflowBundle: inject('workflowBundlePath') }),
    ),
  );
  hosts.push(...started);
  connection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
}, 180_000);

afterAll(async () => {
  await Promise.all(hosts.map((h) => h.stop()));
  await ledger?.close();
  await connection?.close();
  await pg?.stop();
});

const runDir = (host: HostProcess, workflowId: string) => path.join(host.dataDir, 'workspaces', 'runs', workflowId);
const holderOf = (workflowId: string) => hosts.filter((h) => existsSync(runDir(h, workflowId)));

it('SIGKILL of one host mid-turn: every run finishes, each turn is accounted once, nothing of the host survives it', { timeout: 300_000 }, async () => {
  const ids = [...Array(6).keys()].map((i) => testWorkflowId(`many${i}`));
  const runs = await Promise.all(
    ids.map((workflowId, i) => {
      const task = book.write(`many-${i}`, [
        act({ name: 'write_file', params: { path: 'NOTES.md', content: `run ${i}` } }),
        { sleepMs: 6000, ...act({ name: 'read_file', params: { path: 'NOTES.md' } }) },
        ok(`run ${i} done`),
      ]);
      return startAgentRun(client, { agent: 'mover', task, identity: { tenantId: 'acme', userId: 'u' }, workflowId, taskQueue });
    }),
  );
  // Wait until a host is in the middle of a turn (the harness sleeps in turn 2), then kill that host.
  let victim: HostProcess | undefined;
  await expect
    .poll(
      () => {
        victim = hosts.find((h) => ids.some((id) => existsSync(path.join(runDir(h, id), '.scripted', 'sleeping.pid'))));
        return victim !== undefined;
      },
      { timeout: 60_000, interval: 50 },
    )
    .toBe(true);
  const killed = victim!;
  const pinned = ids.filter((id) => existsSync(runDir(killed, id)));
  const inFlight = processesIn(path.join(killed.dataDir, 'workspaces'));
  expect(inFlight.length).toBeGreaterThan(0);
  await killed.kill();

  // No orphan: every process working in the killed host's workspaces dies with it.
  await expect.poll(() => processesIn(path.join(killed.dataDir, 'workspaces')), { timeout: 10_000, interval: 100 }).toEqual([]);

  const results = await Promise.all(runs.map((r) => r.result()));
  expect(results.map((r) => r.status)).toEqual(ids.map(() => 'succeeded'));
  for (const [i, workflowId] of ids.entries()) {
    expect(results[i]!.result).toBe(`run ${i} done`);
    // Each turn's output used exactly once, whatever attempts and hosts it took; an attempt the kill cut short keeps
    // its own row (what it spent was spent), never a second used one.
    const rows = await ledger.listPromptRuns(workflowId);
    expect(rows.filter((r) => r.outputUsed).map((r) => r.turn)).toEqual([1, 2, 3]);
    expect(new Set(rows.map((r) => r.attemptId)).size).toBe(rows.length);
    expect((await ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'end')).toHaveLength(1);
    const moves = (await ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'host-lost');
    if (pinned.includes(workflowId)) {
      // Moved off the killed host to a live one.
      expect(moves).toHaveLength(1);
      expect(moves[0]!.data).toMatchObject({ lostHostQueue: `${taskQueue}@${killed.hostId}` });
      expect(holderOf(workflowId).filter((h) => h !== killed)).toHaveLength(1);
    } else {
      expect(moves).toEqual([]);
    }
  }
  expect(pinned.length).toBeGreaterThan(0);
  // The runs really spread: workspaces on more than one host.
  expect(hosts.filter((h) => existsSync(path.join(h.dataDir, 'workspaces', 'runs')) && readdirSync(path.join(h.dataDir, 'workspaces', 'runs')).length > 0).length).toBeGreaterThan(1);
});
