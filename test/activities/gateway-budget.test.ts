/**
 * The gateway's meter is the budget's last word, whatever the harness reports: a stdio-JSON harness that makes model
 * calls through its door (policy vendor, the local sandbox) and reports almost nothing is stopped once the calls
 * metered on the wire spend the run's tokens: the gateway refuses the next call and the turn ends as a spent budget.
 * The vendor is the fake on 127.0.0.1, where the sandbox cannot connect but through the gateway; it sees the real key,
 * the harness only the placeholder.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { startFakeVendor, type FakeVendor } from '../e2e/fake-vendor/server.js';
import { openDoorSession } from '../support/door-session.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-gw-budget-'));
chmodSync(dir, 0o711);
const secret = `sk-gw-budget-${Math.random().toString(36).slice(2)}`;
/** A harness that lies: it calls its model until told no, and reports one token per call. */
const liar = path.join(dir, 'liar.mjs');
writeFileSync(
  liar,
  `import { createInterface } from 'node:readline';
const out = (l) => process.stdout.write(JSON.stringify(l) + '\\n');
for await (const line of createInterface({ input: process.stdin })) { if (line.trim()) break; }
out({ type: 'session', id: 'liar-1', resumed: false, model: 'liar' });
const seen = [];
for (let i = 0; i < 20; i++) {
  const res = await fetch(process.env.DURABLE_HARNESS_BASE_URL + '/v1/messages', { method: 'POST', headers: { 'x-api-key': process.env.DURABLE_HARNESS_API_KEY, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body: JSON.stringify({ model: 'claude-x', max_tokens: 10, messages: [{ role: 'user', content: 'hi ' + i + ' ' + process.env.DURABLE_HARNESS_API_KEY }] }) });
  const text = await res.text();
  seen.push(res.status);
  out({ type: 'usage', input: 1, output: 0 });
  if (res.status !== 200) { out({ type: 'activity', description: 'refused: ' + text.slice(0, 300) }); break; }
}
process.stdout.write(JSON.stringify({ type: 'complete', text: JSON.stringify({ step: 'success', result: seen.join(',') }) }) + '\\n', () => process.exit(0));
`,
);
let vendor: FakeVendor;

beforeAll(async () => {
  vendor = await startFakeVendor({ handlers: { '/v1/messages': anthropicMessages }, fallback: () => ({ text: 'ok', usage: { input: 1000, output: 10 } }) });
});
afterAll(async () => {
  await vendor?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the gateway meters what the harness does not report', () => {
  it('a lying harness is stopped when the calls on the wire spend the budget: the next call is refused, the turn ends as a spent budget', { timeout: 60_000 }, async () => {
    const session = await openDoorSession({ dir, workflowId: 'gw-liar', script: liar, vendorUrl: vendor.url, secret, sandbox: { provider: 'local', networkPolicy: 'vendor' }, guardrails: { maxTokens: 2500 } });
    const { deps, sandbox } = session;
    expect(sandbox.gateway).toBeDefined();
    const result = await session.turn({ budget: { tokens: 2500 } });

    // 1,010 tokens a call on the wire: the third crosses 2,500, the fourth is refused at the door.
    expect(vendor.served).toHaveLength(3);
    expect(result.budgetExhausted).toMatchObject({ guardrail: 'tokens', message: expect.stringMatching(/token budget is spent \(3,030 tokens metered this turn, 2,500 were left\)/) });
    const calls = await deps.ledger.listModelCalls('gw-liar');
    expect(calls.map((c) => c.call.usage)).toEqual(Array(3).fill({ input: 1000, output: 10, cacheRead: 0, cacheWrite: 0 }));
    const refused = await deps.ledger.listNetwork('gw-liar', { refusedOnly: true });
    expect(refused.map((r) => r.record.rule)).toEqual(['refused:budget']);
    // The workflow learns the count from the turn's result (the Temporal UI's current details show it).
    expect(result.networkRefused).toBe(1);
    // The vendor saw the real key; what the harness sent as text carried only its placeholder.
    for (const r of vendor.requests) expect(r.headers['x-api-key']).toBe(secret);
    for (const r of vendor.requests) expect(r.rawBody).toMatch(/dh-run-[0-9a-f]+/);
    for (const r of vendor.requests) expect(r.rawBody).not.toContain(secret);
    await session.end();
  });
});
