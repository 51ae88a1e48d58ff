/**
 * Live run events (`run.events()`, `durable-harness logs`) on both ledgers, against the real dev server and a real
 * worker running a harness that streams its turn slowly and stamps each line with the time it printed it: a
 * follower sees each line within the stated delay, resumes from a cursor after a restart with nothing seen twice
 * and nothing missing, and ends at the run's end with its outcome; a hostile line prints escaped and bounded.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parseCatalog } from '../../src/catalog/index.js';
import { getAgentRun, postgresEventSource, startAgentRun, type AgentRunHandle, type RunEvent, type RunEventSource } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { ledgerEventSource } from '../../src/ledger/events.js';
import { maxLogLineChars } from '../../src/cli/logs.js';
import { createWorker, type HarnessWorker } from '../../src/worker.js';
import { cliBin, runCli, spawnCli } from '../support/cli.js';
import { waitUntil } from '../support/processes.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';
import { scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

const streamingHarness = path.join(repoRoot, 'test', 'harnesses', 'streaming-harness.mjs');
/** The stated bound: a line the harness printed is visible to a follower within this (README "Live run events"). */
const targetMs = 500;

const catalog = parseCatalog(
  scriptedCatalog(scriptBook(), {
    harnesses: [{ name: 'streaming', driverClass: 'StdioJson', executable: process.execPath, args: [streamingHarness], active: true, vendor: 'testvendor', model: 'scripted-1', prices: { input: 1, output: 2 }, turnTimeoutMs: 60_000 }],
    agents: [
      {
        name: 'streamer',
        description: 'streams its turn',
        harness: 'streaming',
        systemPrompt: 'You stream.',
        actions: [],
        guardrails: { maxIterations: 3, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 120_000 },
        turnAttempts: 1,
      },
      {
        name: 'asker',
        description: 'asks before its tool use',
        harness: 'streaming',
        systemPrompt: 'You ask.',
        actions: [],
        guardrails: { maxIterations: 3, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 120_000 },
        turnAttempts: 1,
        permissions: { posture: 'strict', approvalTimeoutMs: 60_000 },
      },
    ],
  }),
  'test catalog',
  { baseDir: path.join(repoRoot, 'config') },
);

interface Deployment {
  readonly name: 'sqlite' | 'postgres';
  readonly taskQueue: string;
  readonly dataDir: string;
  /** The environment a `durable-harness` process needs to reach this ledger. */
  readonly env: Record<string, string>;
  source(): Promise<RunEventSource>;
  worker: HarnessWorker;
  running: Promise<void>;
  connection: NativeConnection;
  close?: () => Promise<void>;
}

let pg: TestPostgres;
let client: Client;
let clientConnection: Connection;
const deployments: Deployment[] = [];
const figures: string[] = [];

async function deploy(name: Deployment['name']): Promise<Deployment> {
  const address = inject('temporalAddress');
  const connection = await NativeConnection.connect({ address });
  const dataDir = mkdtempSync(path.join(os.tmpdir(), `dh-logs-${name}-`));
  const taskQueue = `logs-${name}-${Date.now().toString(36)}`;
  const url = name === 'postgres' ? (await pg.freshSchema('logs')).url : undefined;
  const env: Record<string, string> = url ? { DATABASE_URL: url } : {};
  const { worker } = await createWorker({
    connection,
    taskQueue,
    catalog: () => catalog,
    dataDir,
    env,
    credentials: new MemoryCredentialStore({}),
    workflowBundle: { codePath: inject('workflowBundlePath') },
    decisions: 'trusted-network',
  });
  const d: Deployment = {
    name,
    taskQueue,
    dataDir,
    env,
    worker,
    running: worker.run(),
    connection,
    source: async () => {
      if (url) return postgresEventSource(url);
      const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
      return ledgerEventSource(ledger, { close: () => ledger.close() });
    },
  };
  deployments.push(d);
  return d;
}

beforeAll(async () => {
  try {
    Runtime.install({ logger: new DefaultLogger('WARN') });
  } catch {
    // Installed already in this process.
  }
  pg = await startTestPostgres();
  clientConnection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection: clientConnection });
}, 120_000);

afterAll(async () => {
  for (const d of deployments) {
    if (d.worker.getState() === 'RUNNING') d.worker.shutdown();
    await d.running;
    await d.connection.close();
  }
  await clientConnection?.close();
  await pg?.stop();
  for (const line of figures) console.log(line);
});

const start = (d: Deployment, label: string, task: string, agent = 'streamer'): Promise<AgentRunHandle> =>
  startAgentRun(client, { agent, task, identity: { tenantId: 'acme', userId: 'alice' }, workflowId: testWorkflowId(label), taskQueue: d.taskQueue });

/** `tick I printed-at MS` → MS. */
const printedAt = (e: RunEvent): number | undefined => (e.type === 'activity' ? Number(/printed-at (\d+)/.exec(e.description)?.[1]) || undefined : undefined);

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Every stored event of the run, after it ended (the list the followers are compared against). */
async function allEvents(run: AgentRunHandle, source: RunEventSource): Promise<RunEvent[]> {
  const all: RunEvent[] = [];
  for await (const e of run.events({ source, follow: false })) all.push(e);
  return all;
}

describe.each(['sqlite', 'postgres'] as const)('live run events from the %s ledger', (name) => {
  let d: Deployment;
  beforeAll(async () => {
    d = await deploy(name);
  }, 60_000);

  it(`run.events(): each streamed line within ${targetMs} ms; a restarted follower resumes from its cursor, nothing twice, nothing missing; ends with the outcome`, { timeout: 90_000 }, async () => {
    const run = await start(d, `ev-${name}`, 'stream:16:120 tool');
    const delays: number[] = [];
    const seen: RunEvent[] = [];
    const follow = async (source: RunEventSource, since: string | undefined, stopAfterTick?: number) => {
      try {
        for await (const e of run.events({ source, ...(since !== undefined ? { since } : {}) })) {
          const at = printedAt(e);
          if (at !== undefined) delays.push(Date.now() - at);
          seen.push(e);
          if (stopAfterTick !== undefined && e.type === 'activity' && e.description.startsWith(`tick ${stopAfterTick} `)) return;
        }
      } finally {
        await source.close?.();
      }
    };
    // The first follower stops after tick 5 (a service restarting); the second resumes after the last cursor it got.
    await follow(await d.source(), undefined, 5);
    const resumeAt = seen.at(-1)!.cursor;
    await follow(await d.source(), resumeAt);

    const full = await allEvents(run, await d.source());
    expect(seen.map((e) => e.cursor)).toEqual(full.map((e) => e.cursor));
    expect(new Set(seen.map((e) => e.cursor)).size).toBe(seen.length);
    expect(seen.filter((e) => printedAt(e) !== undefined)).toHaveLength(16);

    // What a service reads: typed tool use, usage per call, the session, the step, the end with its outcome.
    expect(seen).toContainEqual(expect.objectContaining({ type: 'activity', tool: { name: 'Bash', kind: 'command', target: 'ls -la /tmp' } }));
    expect(seen.filter((e) => e.type === 'usage').map((e) => (e as Extract<RunEvent, { type: 'usage' }>).usage)).toEqual(Array(16).fill({ input: 10, output: 1 }));
    expect(seen).toContainEqual(expect.objectContaining({ type: 'session', model: 'streaming-1' }));
    expect(seen).toContainEqual(expect.objectContaining({ type: 'step', step: 'step:success' }));
    expect(seen.at(-1)).toMatchObject({ type: 'end', status: 'succeeded' });
    expect((await run.result()).status).toBe('succeeded');

    const p50 = quantile(delays, 0.5);
    const max = Math.max(...delays);
    figures.push(`run.events() from ${name}: line printed → follower ${delays.length} lines, p50 ${p50} ms, p90 ${quantile(delays, 0.9)} ms, max ${max} ms (target ${targetMs} ms)`);
    expect(p50).toBeLessThanOrEqual(targetMs / 2);
    expect(max).toBeLessThanOrEqual(targetMs);
  });

  it(`logs --follow --json: a process sees each line within ${targetMs} ms and exits as status would for the outcome`, { timeout: 90_000 }, async () => {
    // The run waits 8 s before it streams, so the command (a process start through tsx) is following by then.
    const run = await start(d, `cli-${name}`, 'delay:8000 stream:10:120 fail');
    const child = spawn(process.execPath, [cliBin, 'logs', run.workflowId, '--follow', '--json', '--address', inject('temporalAddress'), '--data', d.dataDir], {
      cwd: repoRoot,
      env: { ...process.env, ...d.env, DATABASE_URL: d.env.DATABASE_URL ?? '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines: { at: number; event: RunEvent }[] = [];
    let buffered = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      const now = Date.now();
      buffered += chunk.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const part of parts) lines.push({ at: now, event: JSON.parse(part) as RunEvent });
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(stderr).toBe('');
    // A failed run exits 10, as `status` and `run` would.
    expect(code).toBe(10);
    expect(lines.at(-1)!.event).toMatchObject({ type: 'end', status: 'failed', reason: 'gave up on purpose' });
    expect(lines.filter((l) => printedAt(l.event) !== undefined)).toHaveLength(10);
    // Measured on the lines printed once the command was following (its first line had arrived).
    const ticks = lines.filter((l) => printedAt(l.event)! > lines[0]!.at);
    expect(ticks.length).toBeGreaterThanOrEqual(5);
    const delays = ticks.map((l) => l.at - printedAt(l.event)!);
    const full = await allEvents(run, await d.source());
    expect(lines.map((l) => l.event.cursor)).toEqual(full.map((e) => e.cursor));
    figures.push(`logs --follow --json from ${name}: line printed → process stdout ${delays.length} lines, p50 ${quantile(delays, 0.5)} ms, max ${Math.max(...delays)} ms`);
    expect(Math.max(...delays)).toBeLessThanOrEqual(targetMs);
  });
});

describe('logs on a hostile harness line', () => {
  let d: Deployment;
  let run: AgentRunHandle;
  beforeAll(async () => {
    d = deployments.find((x) => x.name === 'sqlite') ?? (await deploy('sqlite'));
    run = await start(d, 'hostile', 'hostile');
    await run.result();
  }, 90_000);

  const logs = (...args: string[]) => runCli(['logs', run.workflowId, '--address', inject('temporalAddress'), '--data', d.dataDir, ...args]);

  it('prints terminal escapes as visible escapes and a 1 MB line as one bounded line', async () => {
    const { code, stdout, stderr } = await logs();
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout).not.toMatch(/[\u001b\u202e]/);
    expect(stdout).toContain('evil \\x1b[2J\\x1b[31mred\\u202eesrever\\nforged line');
    expect(stdout).not.toMatch(/^forged line/m);
    const lines = stdout.trimEnd().split('\n');
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(maxLogLineChars + 40);
    expect(lines.find((l) => l.includes('hhhh'))).toMatch(/characters( in all)?\)$/);
    expect(lines.at(-1)).toMatch(/run succeeded/);
  });

  it('--json carries every event with its cursor, the 1 MB line clipped', async () => {
    const { code, stdout } = await logs('--json');
    expect(code).toBe(0);
    const events = stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as RunEvent);
    const big = events.find((e) => e.type === 'activity' && e.description.startsWith('hhhh'));
    expect(big && big.type === 'activity' && big.description.length).toBeLessThan(4200);
    expect(big && big.type === 'activity' && big.description).toMatch(/1000000 characters in all\)$/);
    expect(Math.max(...stdout.split('\n').map((l) => l.length))).toBeLessThan(10_000);
    // --since resumes after a cursor: exactly the events after it.
    const after = await logs('--json', '--since', events[2]!.cursor);
    expect(after.stdout.trimEnd().split('\n').map((l) => (JSON.parse(l) as RunEvent).cursor)).toEqual(events.slice(3).map((e) => e.cursor));
  });

  it('refuses a cursor no event gave and an unknown run, naming the problem (exit 2)', async () => {
    const bad = await logs('--since', 'yesterday');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/cursor "yesterday" is not one an event gave/);
    const unknown = await runCli(['logs', 'no-such-run-here', '--address', inject('temporalAddress'), '--data', d.dataDir]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/no run with id no-such-run-here/);
  });

  it('a permission request and the operator\'s decision on it reach the follower, naming the request', { timeout: 60_000 }, async () => {
    const asking = await start(d, 'asked', 'ask', 'asker');
    const source = await d.source();
    const events: RunEvent[] = [];
    try {
      for await (const e of asking.events({ source })) {
        events.push(e);
        if (e.type === 'approval-requested') {
          const [pending] = await asking.pendingApprovals();
          await asking.approve(pending!.requestId, { by: 'alice' });
        }
      }
    } finally {
      await source.close?.();
    }
    const ledger = SqliteLedger.open(path.join(d.dataDir, 'ledger.sqlite'));
    const [pending] = await ledger.listApprovals({ workflowId: asking.workflowId }).finally(() => ledger.close());
    expect(events).toContainEqual(expect.objectContaining({ type: 'approval-requested', tool: { name: 'Bash', kind: 'command', target: 'echo asked' } }));
    expect(events).toContainEqual(expect.objectContaining({ type: 'approval-decided', tool: 'Bash', decidedBy: 'unauthenticated:alice', requestId: pending!.requestId }));
    expect(events).toContainEqual(expect.objectContaining({ type: 'activity', description: 'permission p1: allowed' }));
    expect(events.at(-1)).toMatchObject({ type: 'end', status: 'succeeded' });
  });

  it('logs --follow stops on Ctrl-C (exit 130) and says the cursor to resume from; the run goes on', { timeout: 60_000 }, async () => {
    // Long enough for the command to start (through tsx) and follow before the run streams.
    const live = await start(d, 'interrupted', 'delay:30000 stream:2:100');
    const child = spawnCli(['logs', live.workflowId, '--follow', '--address', inject('temporalAddress'), '--data', d.dataDir], { env: { ...process.env, DATABASE_URL: '' } });
    expect(await waitUntil(() => /session stream-/.test(child.stdoutSoFar()), 20_000)).toBe(true);
    child.kill('SIGINT');
    const { code, stderr, stdout } = await child.outcome;
    expect({ code, stderr, stdout }).toMatchObject({ code: 130, stderr: expect.stringMatching(/stopped following .*; the run goes on; resume with --since \d+/) });
    expect((await live.handle.describe()).status.name).toBe('RUNNING');
    await live.cancel('done with the test');
  });

  it('without a ledger, run.events() samples Temporal: the activity, the totals and the end', { timeout: 60_000 }, async () => {
    const live = await start(d, 'sampled', 'delay:1500 stream:4:600');
    const events: RunEvent[] = [];
    for await (const e of getAgentRun(client, live.workflowId).events()) events.push(e);
    expect(events.at(-1)).toMatchObject({ type: 'end', status: 'succeeded', source: 'temporal' });
    expect(events.some((e) => e.type === 'activity' && e.description.startsWith('tick '))).toBe(true);
    expect(events.some((e) => e.type === 'totals' && e.tokens > 0)).toBe(true);
    expect(() => live.events({ since: '3' })).toThrow(/needs the ledger/);
  });
});
