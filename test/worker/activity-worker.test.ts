/**
 * Activity placement `process`: the workflow worker keeps workflows and local activities, a child process runs
 * the turn. What an operator checks: runs still finish, the turn really ran in the other process, the worker
 * stops loudly when that process dies, and shutting down leaves no process behind; the child encodes payloads
 * with the same keys, traces and meters its turns, and the catalog check neither refuses the worker's own child
 * nor lets a child with another catalog serve beside it.
 */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { activityPlacementFromEnv, activityProcessMetrics, createPlacedWorker, defaultActivityPlacement, type PlacedWorker } from '../../src/activity-worker.js';
import { catalogHash, loadCatalog } from '../../src/catalog/index.js';
import { createAgentClient, startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { generatePayloadKey } from '../../src/codec/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { observabilityFromEnvironment } from '../../src/observability/index.js';
import { freePort } from '../../src/temporal/dev-server.js';
import { workerIdentity } from '../../src/temporal/task-queue.js';
import { CatalogMismatchError } from '../../src/worker.js';
import { processAlive, waitUntilGone } from '../support/processes.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { testWorkflowId } from '../support/worker.js';

const { EventType } = proto.temporal.api.enums.v1;

try {
  Runtime.install({ logger: new DefaultLogger('WARN') });
} catch {
  // installed by another file in this process
}

const book = scriptBook();
const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-placed-'));
const catalogFile = path.join(dataDir, 'catalog.json');
writeFileSync(catalogFile, JSON.stringify(scriptedCatalog(book)));
const catalog = loadCatalog(catalogFile);
const hash = catalogHash(catalog);
/** What the server shows for a worker given `base` as identity: the catalog hash is appended. */
const id = (base: string) => workerIdentity(hash, base);

let nativeConnection: NativeConnection;
let connection: Connection;
let client: Client;

async function placedWorker(taskQueue: string, eagerTurnSlots?: number, hostAffinity?: boolean): Promise<PlacedWorker> {
  return createPlacedWorker({
    eagerTurnSlots,
    ...(hostAffinity !== undefined ? { hostAffinity } : {}),
    connection: nativeConnection,
    taskQueue,
    catalog: () => catalog,
    dataDir,
    env: {},
    identity: `main-${taskQueue}`,
    decisions: 'trusted-network',
    workflowBundle: { codePath: inject('workflowBundlePath') },
    placement: 'process',
    processConfig: { address: inject('temporalAddress'), catalogFile, env: {} },
  });
}

beforeAll(async () => {
  nativeConnection = await NativeConnection.connect({ address: inject('temporalAddress') });
  connection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
});

afterAll(async () => {
  await nativeConnection?.close();
  await connection?.close();
});

/** Activity-worker processes this test process started and that still run. */
function activityChildren(): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === process.pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('activity-worker-main') && processAlive(Number(pid));
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** A free port whose next port is free too (the activity process serves its metrics there). */
async function portWithNextFree(): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
  for (;;) {
    const port = await freePort();
    if (port < 65535 && (await free(port + 1))) return port;
  }
}

interface Span {
  name: string;
  service?: string;
  attributes: Record<string, string | number | boolean | undefined>;
}

/** A minimal OTLP/HTTP (JSON) trace receiver on loopback. */
async function startCollector(): Promise<{ url: string; spans: Span[]; close(): Promise<void> }> {
  type Value = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };
  const value = (v: Value) => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));
  const spans: Span[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans?: { resource?: { attributes?: { key: string; value: Value }[] }; scopeSpans?: { spans?: { name: string; attributes?: { key: string; value: Value }[] }[] }[] }[];
        };
        for (const rs of body.resourceSpans ?? []) {
          const service = rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue;
          for (const ss of rs.scopeSpans ?? []) {
            for (const span of ss.spans ?? []) spans.push({ name: span.name, service, attributes: Object.fromEntries((span.attributes ?? []).map((a) => [a.key, value(a.value)])) });
          }
        }
      }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

describe('activity placement "process"', () => {
  it('with no eager turn slots, runs the workflow in the worker and every turn in the activity-worker process', async () => {
    const taskQueue = testWorkflowId('placed');
    const placed = await placedWorker(taskQueue, 0);
    const running = placed.run();
    try {
      expect(placed.activityProcess?.pid).not.toBe(process.pid);
      const task = book.write('two-turns', [act({ name: 'write_file', params: { path: 'a.txt', content: 'hi' } }), ok('written')]);
      const run = await startAgentRun(client, { agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId('placed-run') });
      const result = await run.result();
      expect(result).toMatchObject({ status: 'succeeded', result: 'written', iterations: 2 });

      const events = (await run.handle.fetchHistory()).events ?? [];
      // The turns (runTurn); with host affinity the session's end is a regular activity on the host queue too.
      const turnIds = new Set(events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn').map((e) => String(e.eventId)));
      const turnStarts = events
        .filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED && turnIds.has(String(e.activityTaskStartedEventAttributes?.scheduledEventId)))
        .map((e) => e.activityTaskStartedEventAttributes?.identity);
      const workflowTasks = events.filter((e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED).map((e) => e.workflowTaskStartedEventAttributes?.identity);
      expect(turnStarts).toEqual([id(`main-${taskQueue}-activities`), id(`main-${taskQueue}-activities`)]);
      expect(new Set(workflowTasks)).toEqual(new Set([id(`main-${taskQueue}`)]));

      // Both processes wrote to the one ledger: the turn's events (child) and its accounting rows (worker).
      const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
      try {
        expect(await ledger.listPromptRuns(run.workflowId)).toHaveLength(2);
      } finally {
        await ledger.close();
      }
    } finally {
      await placed.shutdown();
      await running;
    }
    await waitUntilGone([placed.activityProcess!.pid], 5000);
  });

  it('by default keeps a lone run\'s turns on the workflow worker (eager dispatch) and sends turns beyond its slots to the activity process', async () => {
    const taskQueue = testWorkflowId('placed-eager');
    // Eager dispatch is for unpinned turns: host affinity off, as with a workspace root every worker shares. A pinned
    // turn goes to its host queue, where either process of that host takes it (docs/multi-host.md).
    const placed = await placedWorker(taskQueue, undefined, false);
    const running = placed.run();
    const turnIdentities = async (handle: AgentRunHandle) =>
      ((await handle.handle.fetchHistory()).events ?? [])
        .filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        .map((e) => e.activityTaskStartedEventAttributes?.identity);
    try {
      const lone = await startAgentRun(client, { agent: 'scripted', task: book.write('lone', [ok('alone')]), identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId('lone') });
      expect((await lone.result()).status).toBe('succeeded');
      expect(await turnIdentities(lone)).toEqual([id(`main-${taskQueue}`)]);

      // Six turns of a second at once: the worker keeps at most its slots, the activity process takes the rest.
      const task = book.write('busy', [{ sleepMs: 1000, ...ok('slept') }]);
      const runs = await Promise.all(
        Array.from({ length: 6 }, (_, i) => startAgentRun(client, { agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId(`busy-${i}`) })),
      );
      for (const run of runs) expect((await run.result()).status).toBe('succeeded');
      const where = (await Promise.all(runs.map(turnIdentities))).flat();
      expect(where).toHaveLength(6);
      // The worker holds 2 eager slots plus 1 for its single poll: at most 3 of the 6 can be its own.
      expect(where.filter((w) => w === id(`main-${taskQueue}-activities`)).length).toBeGreaterThanOrEqual(3);
    } finally {
      await placed.shutdown();
      await running;
    }
  });

  it("leaves Ctrl-C to the parent: a SIGINT to the whole group does not kill the activity worker under its turns", async () => {
    const placed = await placedWorker(testWorkflowId('placed-sigint'));
    const running = placed.run();
    try {
      process.kill(placed.activityProcess!.pid, 'SIGINT');
      await new Promise((r) => setTimeout(r, 500));
      expect(processAlive(placed.activityProcess!.pid)).toBe(true);
      expect(placed.worker.getState()).toBe('RUNNING');
    } finally {
      await placed.shutdown();
      await running;
    }
    await waitUntilGone([placed.activityProcess!.pid], 5000);
  });

  it('stops the worker with a clear error when the activity-worker process dies', async () => {
    const placed = await placedWorker(testWorkflowId('placed-dies'));
    const running = placed.run();
    process.kill(placed.activityProcess!.pid, 'SIGKILL');
    await expect(running).rejects.toThrow(/activity worker process exited \(SIGKILL\)/);
    expect(placed.worker.getState()).not.toBe('RUNNING');
    expect(processAlive(placed.activityProcess!.pid)).toBe(false);
  });

  it('checks the catalog once for both processes: not refused by its own child, refused beside another catalog, and never serving beside a child that loaded another; a failed start leaves no child', async () => {
    const taskQueue = testWorkflowId('placed-catalog');
    const otherFile = path.join(dataDir, 'other-catalog.json');
    writeFileSync(otherFile, JSON.stringify(scriptedCatalog(book, { agents: [{ name: 'extra', harness: 'scripted' }] })));
    const other = loadCatalog(otherFile);
    const setup = (queue: string, name: string, file: string, served = catalog) => ({
      connection: nativeConnection,
      taskQueue: queue,
      catalog: () => served,
      dataDir,
      env: {},
      identity: `${name}-${queue}`,
      workflowBundle: { codePath: inject('workflowBundlePath') },
      placement: 'process' as const,
      processConfig: { address: inject('temporalAddress'), catalogFile: file, env: {} },
    });
    const first = await placedWorker(taskQueue); // its own child polls first: the check must not refuse it
    const running = first.run();
    const before = activityChildren();
    try {
      // (A second worker with the same catalog on the same queue needs its own process: test/cli/long-running.test.ts.)
      await expect(createPlacedWorker(setup(taskQueue, 'third', otherFile, other))).rejects.toThrow(
        new RegExp(`task queue "${taskQueue}" is already served by a worker with another catalog .*this worker's catalog is ${catalogHash(other)}`),
      );
      // The file the child reads disagrees with the catalog the worker serves: refused, its child stopped.
      const mismatch = createPlacedWorker(setup(testWorkflowId('placed-mismatch'), 'fourth', otherFile));
      await expect(mismatch).rejects.toThrow(CatalogMismatchError);
      await expect(mismatch).rejects.toThrow(`the activity worker process loaded catalog ${catalogHash(other)} from ${otherFile}, but this worker serves catalog ${hash}`);
      await expect.poll(() => activityChildren().filter((pid) => !before.includes(pid)), { timeout: 10_000 }).toEqual([]);
    } finally {
      await first.shutdown();
      await running;
    }
  });

  it("encodes payloads with the parent's keys, and traces and meters its turns with the parent's telemetry settings", async () => {
    const taskQueue = testWorkflowId('placed-keys');
    const keyId = 'placed-1';
    const env = { DURABLE_HARNESS_PAYLOAD_KEYS: `${keyId}:${generatePayloadKey()}` };
    const collector = await startCollector();
    const metricsPort = await portWithNextFree();
    const observability = observabilityFromEnvironment({
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_SERVICE_NAME: 'dh-placed',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      DURABLE_HARNESS_PROMETHEUS_ADDRESS: `127.0.0.1:${metricsPort}`,
    });
    const placed = await createPlacedWorker({
      eagerTurnSlots: 0, // every turn in the child
      connection: nativeConnection,
      taskQueue,
      catalog: () => catalog,
      dataDir,
      env,
      identity: `main-${taskQueue}`,
    decisions: 'trusted-network',
      workflowBundle: { codePath: inject('workflowBundlePath') },
      placement: 'process',
      processConfig: { address: inject('temporalAddress'), catalogFile, env, observability },
    });
    const running = placed.run();
    try {
      const childMetrics = `http://127.0.0.1:${metricsPort + 1}/metrics`;
      expect(placed.activityProcess?.metrics).toBe(childMetrics);
      const marker = `RESULTMARK-${Date.now().toString(36)}`;
      const task = book.write('placed-keys', [{ usage: { input: 100, output: 20 }, ...ok(marker) }]);
      const run = await startAgentRun(createAgentClient(connection, { env }), { agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, taskQueue, workflowId: testWorkflowId('placed-keys-run') });
      expect(await run.result()).toMatchObject({ status: 'succeeded', result: marker });

      // As the server stores it: the turn the child completed carries an encrypted result, and the marker is unreadable.
      const events = (await client.workflowService.getWorkflowExecutionHistory({ namespace: 'default', execution: { workflowId: run.workflowId } })).history?.events ?? [];
      const turnScheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn')!;
      const turnCompleted = events.find((e) => String(e.activityTaskCompletedEventAttributes?.scheduledEventId) === String(turnScheduled.eventId))!.activityTaskCompletedEventAttributes!;
      expect(turnCompleted.identity).toBe(id(`main-${taskQueue}-activities`));
      const payload = turnCompleted.result!.payloads![0]!;
      expect(Buffer.from(payload.metadata!.encoding!).toString()).toBe('binary/encrypted');
      expect(Buffer.from(payload.metadata!['encryption-key-id']!).toString()).toBe(keyId);
      expect(Buffer.from(proto.temporal.api.history.v1.History.encode({ events }).finish()).includes(marker)).toBe(false);

      await expect.poll(() => collector.spans.find((s) => s.name === 'RunActivity:runTurn' && s.attributes.temporalWorkflowId === run.workflowId), { timeout: 20_000 }).toMatchObject({
        service: 'dh-placed',
        attributes: { 'durable_harness.tokens.input': 100, 'durable_harness.tokens.output': 20, 'durable_harness.ok': true },
      });
      const scrape = () => fetch(childMetrics).then((r) => r.text(), () => '');
      // The turn metrics come from the child, tagged as its series (label order is the exporter's).
      const inputTokens = (text: string) =>
        text.split('\n').find((l) => l.startsWith('durable_harness_tokens_total{') && l.includes('durable_harness_process="activities"') && l.includes('kind="input"')) ?? text;
      await expect.poll(async () => inputTokens(await scrape()), { timeout: 20_000 }).toMatch(/\} 100$/);
    } finally {
      await placed.shutdown();
      await running;
      await collector.close();
    }
  });

  it('gives the activity process its own metrics endpoint (the next port) and a tag, so its series never collide with the parent\'s', () => {
    const prometheus = { prometheus: { bindAddress: '0.0.0.0:9464', countersTotalSuffix: true } };
    expect(activityProcessMetrics(prometheus)).toEqual({ globalTags: { durable_harness_process: 'activities' }, prometheus: { bindAddress: '0.0.0.0:9465', countersTotalSuffix: true } });
    expect(activityProcessMetrics({ ...prometheus, prometheus: { bindAddress: '[::1]:9000' } })).toMatchObject({ prometheus: { bindAddress: '[::1]:9001' } });
    const otel = { otel: { url: 'http://collector:4318/v1/metrics', http: true }, globalTags: { env: 'prod' } };
    expect(activityProcessMetrics(otel)).toEqual({ ...otel, globalTags: { env: 'prod', durable_harness_process: 'activities' } });
    expect(() => activityProcessMetrics({ prometheus: { bindAddress: '127.0.0.1:65535' } })).toThrow(/no next port/);
  });

  it('refuses settings the activity process could not honour: an injected data converter, or tracing it is not told about', async () => {
    const base = { connection: nativeConnection, taskQueue: testWorkflowId('placed-refused'), catalog: () => catalog, dataDir, placement: 'process' as const, processConfig: { address: inject('temporalAddress'), catalogFile } };
    await expect(createPlacedWorker({ ...base, dataConverter: {} })).rejects.toThrow(/pass the keys through env instead of a dataConverter/);
    const tracing = { plugins: [], shutdown: async () => undefined } as unknown as Parameters<typeof createPlacedWorker>[0]['tracing'];
    await expect(createPlacedWorker({ ...base, tracing })).rejects.toThrow(/needs processConfig\.observability\.tracing/);
  });

  it('is chosen with DURABLE_HARNESS_ACTIVITY_WORKER, and a wrong value says what is allowed', () => {
    expect(activityPlacementFromEnv({ DURABLE_HARNESS_ACTIVITY_WORKER: 'process' })).toBe('process');
    expect(activityPlacementFromEnv({ DURABLE_HARNESS_ACTIVITY_WORKER: 'inline' })).toBe('inline');
    expect(activityPlacementFromEnv({})).toBe(defaultActivityPlacement);
    expect(() => activityPlacementFromEnv({ DURABLE_HARNESS_ACTIVITY_WORKER: 'thread' })).toThrow(/one of inline, process/);
  });
});
