/**
 * Observability, as an operator switches it on: a real `durable-harness worker` process with tracing and Prometheus
 * configured by environment runs an agent run on the real dev server; its spans (run, turns, activities, with tokens
 * and cost) arrive at an OTLP/HTTP collector inside this test, and its Prometheus endpoint serves Temporal's and the
 * project's metrics.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { freePort } from '../../src/temporal/dev-server.js';
import { workflowVersion } from '../../src/workflows/types.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: { key: string; value: OtlpValue }[];
}
interface Span {
  traceId: string;
  name: string;
  attributes: Record<string, string | number | boolean | undefined>;
  service?: string;
}

const spans: Span[] = [];
let collector: http.Server;
let collectorUrl: string;
let worker: ChildProcess;
let workerOutput = '';
let metricsUrl: string;
let client: Client;
let connection: Connection;
const book = scriptBook();
const taskQueue = `otel-${Date.now().toString(36)}`;

const value = (v: OtlpValue) => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? v.boolValue));

/** A minimal OTLP/HTTP (JSON) trace receiver on loopback. */
async function startCollector(): Promise<void> {
  collector = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/traces' && req.method === 'POST') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans: { resource?: { attributes?: { key: string; value: OtlpValue }[] }; scopeSpans: { spans: OtlpSpan[] }[] }[] };
        for (const rs of body.resourceSpans ?? []) {
          const service = rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue;
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) spans.push({ traceId: s.traceId, name: s.name, service, attributes: Object.fromEntries((s.attributes ?? []).map((a) => [a.key, value(a.value)])) });
          }
        }
      }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  collectorUrl = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  await startCollector();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-otel-'));
  const catalogFile = path.join(dataDir, 'catalog.json');
  writeFileSync(catalogFile, JSON.stringify(scriptedCatalog(book)));
  const metricsPort = await freePort();
  metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
  const address = inject('temporalAddress');
  worker = spawn(process.execPath, [path.join(repoRoot, 'bin', 'durable-harness.mjs'), 'worker', '--address', address, '--task-queue', taskQueue, '--catalog', catalogFile, '--data', dataDir], {
    env: {
      ...process.env,
      OTEL_EXPORTER_OTLP_ENDPOINT: collectorUrl,
      OTEL_SERVICE_NAME: 'dh-test-worker',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      DURABLE_HARNESS_PROMETHEUS_ADDRESS: `127.0.0.1:${metricsPort}`,
      // Its scripted agent shares the host's network, which a signed worker refuses for a local sandbox.
      DURABLE_HARNESS_DECISIONS: 'trusted-network',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  worker.stdout!.on('data', (d: Buffer) => (workerOutput += d.toString()));
  worker.stderr!.on('data', (d: Buffer) => (workerOutput += d.toString()));
  const deadline = Date.now() + 90_000;
  while (!/worker polling task queue|durable-harness:/.test(workerOutput) && worker.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  if (!workerOutput.includes(`worker polling task queue "${taskQueue}"`)) throw new Error(`the worker did not start:\n${workerOutput}`);
  connection = await Connection.connect({ address });
  client = new Client({ connection });
});

afterAll(async () => {
  if (worker && worker.exitCode === null) {
    const exited = new Promise((resolve) => worker.once('exit', resolve));
    worker.kill('SIGTERM');
    await exited;
  }
  await connection?.close();
  await new Promise((resolve) => collector?.close(resolve));
});

it('the worker says where telemetry goes', () => {
  expect(workerOutput).toContain(`tracing to ${collectorUrl}/v1/traces as dh-test-worker`);
  expect(workerOutput).toContain(`Prometheus metrics at http://${new URL(metricsUrl).host}/metrics`);
  expect(workerOutput).toMatch(/^ledger: SQLite .*ledger\.sqlite$/m);
});

it('spans for the run, each turn and each activity reach the collector, with tokens and cost', async () => {
  const task = book.write('otel', [
    { usage: { input: 100, output: 20, cacheRead: 5 }, ...act({ name: 'echo', params: { text: 'hi' } }) },
    { usage: { input: 40, output: 10 }, ...ok('traced') },
  ]);
  const workflowId = testWorkflowId('otel');
  const handle = await client.workflow.start('agentRun', { taskQueue, workflowId, args: [{ agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, workflowVersion }] });
  const result = (await handle.result()) as { status: string; costUsd: number };
  expect(result.status).toBe('succeeded');

  const ofRun = () => spans.filter((s) => s.attributes.temporalWorkflowId === workflowId || s.attributes['durable_harness.agent'] === 'scripted');
  await expect.poll(() => spans.find((s) => s.name === 'RunWorkflow:agentRun' && s.attributes['durable_harness.status'] === 'succeeded'), { timeout: 20_000 }).toBeTruthy();
  const run = spans.find((s) => s.name === 'RunWorkflow:agentRun' && s.attributes['durable_harness.status'] === 'succeeded')!;
  expect(run.service).toBe('dh-test-worker');
  expect(run.attributes).toMatchObject({
    'durable_harness.agent': 'scripted',
    'durable_harness.tenant_id': 'acme',
    'durable_harness.iterations': 2,
    'durable_harness.tokens.input': 140,
    'durable_harness.tokens.output': 30,
    'durable_harness.tokens.cache_read': 5,
    'durable_harness.tokens.total': 175,
    'gen_ai.usage.input_tokens': 140,
  });
  expect(run.attributes['durable_harness.cost_usd']).toBeCloseTo(result.costUsd, 9);

  await expect.poll(() => spans.filter((s) => s.traceId === run.traceId && s.name === 'RunActivity:runTurn').length, { timeout: 20_000 }).toBe(2);
  const trace = spans.filter((s) => s.traceId === run.traceId);
  const turns = trace.filter((s) => s.name === 'RunActivity:runTurn').sort((a, b) => Number(a.attributes['durable_harness.turn']) - Number(b.attributes['durable_harness.turn']));
  expect(turns[0]!.attributes).toMatchObject({
    temporalWorkflowId: workflowId,
    'durable_harness.turn': 1,
    'durable_harness.harness': 'scripted',
    'durable_harness.ok': true,
    'durable_harness.tokens.input': 100,
    'durable_harness.tokens.output': 20,
    'durable_harness.tokens.cache_read': 5,
    'durable_harness.cost_source': 'price-table',
    'gen_ai.request.model': 'scripted-1',
  });
  // Prices: input 1, output 2, cache read 0.5 USD per million tokens.
  expect(turns[0]!.attributes['durable_harness.cost_usd']).toBeCloseTo((100 * 1 + 20 * 2 + 5 * 0.5) / 1e6, 12);
  expect(turns[1]!.attributes).toMatchObject({ 'durable_harness.turn': 2, 'durable_harness.tokens.input': 40 });
  // Every activity the run scheduled has a span in the same trace: the run's whole story in one place. (Actions run
  // inside the next turn's activity, so they have no span of their own.)
  const names = new Set(trace.map((s) => s.name));
  for (const name of ['RunActivity:openRun', 'StartActivity:runTurn', 'RunActivity:runTurn', 'RunActivity:endSession']) expect(names, `${name} in ${[...names].join(', ')}`).toContain(name);
  expect(ofRun().length).toBeGreaterThan(0);
});

it("a failed run's span still carries its outcome, although the workflow ends by throwing it (docs/OUTCOMES.md)", async () => {
  const workflowId = testWorkflowId('otel-failed');
  const task = book.write('otel-failed', [{ envelope: { step: 'failed', reason: 'traced failure' } }]);
  const handle = await client.workflow.start('agentRun', { taskQueue, workflowId, args: [{ agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' } }] });
  await expect(handle.result()).rejects.toThrow();
  const failedSpan = () => spans.find((s) => s.name === 'RunWorkflow:agentRun' && s.attributes['durable_harness.status'] === 'failed');
  await expect.poll(failedSpan, { timeout: 20_000 }).toBeTruthy();
  expect(failedSpan()!.attributes).toMatchObject({ 'durable_harness.failure_type': 'HarnessReportedFailure', 'durable_harness.iterations': 1 });
});

it('the Prometheus endpoint serves the SDK runtime metrics and the turn metrics', async () => {
  // The run above has ended; the runtime exports on scrape.
  await expect
    .poll(async () => (await fetch(metricsUrl).then((r) => r.text(), () => '')).includes('durable_harness_tokens'), { timeout: 20_000 })
    .toBe(true);
  const text = await (await fetch(metricsUrl)).text();
  expect(text).toMatch(/^temporal_workflow_completed_total\{.*\} \d+/m);
  expect(text).toMatch(/^temporal_activity_execution_latency_(bucket|sum|count)\{/m);
  const tokens = (kind: string) => Number(new RegExp(`^durable_harness_tokens_total\\{[^}]*kind="${kind}"[^}]*\\} (\\d+)`, 'm').exec(text)?.[1]);
  expect(tokens('input')).toBeGreaterThanOrEqual(140);
  expect(tokens('output')).toBeGreaterThanOrEqual(30);
  expect(text).toMatch(/^durable_harness_turns_total\{[^}]*outcome="ok"[^}]*\} [2-9]/m);
  expect(text).toMatch(/^durable_harness_turn_cost_usd_count\{[^}]*agent="scripted"[^}]*\} [2-9]/m);
  // Buckets sized for per-turn dollars, not the runtime's millisecond defaults.
  expect(text).toMatch(/^durable_harness_turn_cost_usd_bucket\{[^}]*le="0.001"[^}]*\} [2-9]/m);
});
