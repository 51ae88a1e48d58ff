/**
 * One run never harms the others: a flood of requests on gateway A (bounded: 3,000 requests, 10 s at most) while
 * gateway B's model calls go on. B keeps its latency within a generous factor of quiet, and A's flood makes a
 * bounded number of audit rows (the rate cap folds the rest into `suppressed`).
 */
import { Pool, request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { startFakeVendor, type FakeVendor } from '../e2e/fake-vendor/server.js';
import { sandboxOrigin, startGateway, type TestGateway } from './helpers.js';

let vendor: FakeVendor;
let a: TestGateway;
let b: TestGateway;
beforeAll(async () => {
  vendor = await startFakeVendor({ handlers: { '/v1/messages': anthropicMessages }, fallback: () => ({ text: 'fine', usage: { input: 3, output: 2 } }) });
  a = await startGateway({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: 'sk-a' } });
  b = await startGateway({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: 'sk-b' } });
});
afterAll(async () => {
  await a.close();
  await b.close();
  await vendor.close();
});

/** One streamed model call through B: ms until the whole answer is read. */
async function callB(): Promise<number> {
  const t0 = performance.now();
  const res = await request(`${sandboxOrigin}/v1/messages`, {
    method: 'POST',
    dispatcher: b.client,
    headers: { 'x-api-key': b.gateway.placeholder, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
  });
  await res.body.text();
  expect(res.statusCode).toBe(200);
  return performance.now() - t0;
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;

it('a flood on one gateway does not slow another run\'s model calls, and makes a bounded number of records', async () => {
  for (let i = 0; i < 10; i++) await callB(); // warm both paths
  const quiet: number[] = [];
  for (let i = 0; i < 40; i++) quiet.push(await callB());

  const flooder = new Pool(sandboxOrigin, { connections: 16, connect: { socketPath: a.gateway.socketPath } });
  const total = 3_000;
  let sent = 0;
  const statuses = new Map<number, number>();
  const deadline = performance.now() + 10_000;
  const floodStart = performance.now();
  const worker = async () => {
    while (sent < total && performance.now() < deadline) {
      sent++;
      const res = await flooder.request({ path: '/v1/messages', method: 'POST', headers: { 'x-api-key': 'sk-guess', 'content-type': 'application/json' }, body: '{}' });
      await res.body.dump();
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
    }
  };
  const flood = Promise.all(Array.from({ length: 16 }, worker));
  const flooded: number[] = [];
  while (flooded.length < 40 && sent < total) flooded.push(await callB());
  await flood;
  const floodSeconds = (performance.now() - floodStart) / 1000;
  await flooder.close();

  expect(sent).toBe(total);
  expect(flooded.length).toBeGreaterThanOrEqual(10);
  // Generous: B's median under the flood within 4x its quiet median plus 10 ms (one event loop serves both).
  expect(median(flooded)).toBeLessThan(median(quiet) * 4 + 10);
  // The rate cap answered most of the flood: 401 within the bucket (burst 200, 50/s), 429 beyond.
  expect(statuses.get(429) ?? 0).toBeGreaterThan(total / 2);
  // Rows: one per request within the rate, plus at most one rate row a second.
  const bound = 200 + 50 * floodSeconds + floodSeconds + 2;
  expect(a.records.length).toBeLessThanOrEqual(bound);
  // Every request is accounted for, as a row or in a count (the last count is flushed at close).
  await a.gateway.close();
  const flushed = a.records.filter((r) => r.method === '').length;
  expect(a.records.length - flushed + a.records.reduce((n, r) => n + (r.suppressed ?? 0), 0)).toBe(total);
  console.log(`flood: ${total} requests in ${floodSeconds.toFixed(2)} s → ${a.records.length} rows; B p50 quiet ${median(quiet).toFixed(2)} ms, flooded ${median(flooded).toFixed(2)} ms (${flooded.length} calls)`);
}, 30_000);
