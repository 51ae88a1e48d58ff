/**
 * The gateway as the sandbox meets it: what gets through to the vendor and the allowlist, what is refused and how it
 * is recorded, the key swap, and the bounds. Clients speak to its Unix socket as the forwarder's clients would.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GatewayStartError, openGateway } from '../../src/gateway/index.js';
import { forwarderArgv } from '../../src/sandbox/forwarder.js';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { gemini, geminiPrefix } from '../e2e/fake-vendor/gemini.js';
import { openaiChat, openaiChatPrefix } from '../e2e/fake-vendor/openai-chat.js';
import { startFakeVendor, type FakeVendor } from '../e2e/fake-vendor/server.js';
import { post, raw, sandboxOrigin, startGateway, type TestGateway } from './helpers.js';

const realKey = 'sk-real-0123456789';
let vendor: FakeVendor;
const open: TestGateway[] = [];
const started = async (options: Parameters<typeof startGateway>[0]) => {
  const g = await startGateway(options);
  open.push(g);
  return g;
};
const anthropic = () => started({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey } });

beforeAll(async () => {
  vendor = await startFakeVendor({
    handlers: { '/v1/messages': anthropicMessages, [geminiPrefix]: gemini, [openaiChatPrefix]: openaiChat },
    fallback: () => ({ text: 'ok' }),
  });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((g) => g.close()));
  vendor.requests.splice(0);
});
afterAll(() => vendor.close());

const proxyAuth = (placeholder: string) => `Basic ${Buffer.from(`dh:${placeholder}`).toString('base64')}`;

describe('the key swap', () => {
  it('swaps the placeholder for the real key in x-api-key and sends the vendor its own Host, no hop-by-hop headers', async () => {
    const g = await anthropic();
    const res = await post(g, '/v1/messages?beta=true', { model: 'm', messages: [] }, { 'x-api-key': g.gateway.placeholder, 'proxy-authorization': 'x', 'x-keep': 'yes' });
    expect(res.status).toBe(200);
    const sent = vendor.requests[0]!;
    expect(sent.headers['x-api-key']).toBe(realKey);
    expect(sent.headers.host).toBe(new URL(vendor.url).host);
    expect(sent.headers['x-keep']).toBe('yes');
    expect(sent.headers['proxy-authorization']).toBeUndefined();
    expect(sent.url).toBe('/v1/messages?beta=true');
    expect(JSON.stringify(sent.headers)).not.toContain(g.gateway.placeholder);
    const body = JSON.stringify({ model: 'm', messages: [] });
    expect(g.records).toEqual([
      expect.objectContaining({ kind: 'model', method: 'POST', destination: new URL(vendor.url).host, path: '/v1/messages', status: 200, decision: 'allowed', rule: 'vendor', bytesOut: body.length }),
    ]);
    expect(g.records[0]!.bytesIn).toBe(Buffer.byteLength(res.text));
    // Headers the Connection header names are hop-by-hop too (a raw client: undici will not send them).
    await raw(g.gateway.socketPath, `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${g.gateway.placeholder}\r\nConnection: close, x-drop\r\nx-drop: 1\r\nContent-Length: 2\r\n\r\n{}`);
    expect(vendor.requests[1]!.headers['x-drop']).toBeUndefined();
    expect(vendor.requests[1]!.headers['x-api-key']).toBe(realKey);
  });

  it('swaps Authorization: Bearer, x-goog-api-key and the key query parameter in place', async () => {
    const g = await started({ vendor: { api: 'gemini', upstream: vendor.url, key: realKey } });
    const ph = g.gateway.placeholder;
    expect((await post(g, `/v1beta/models/g:generateContent?alt=json&key=${ph}&x=1`, {}, {})).status).toBe(200);
    expect((await post(g, '/v1beta/models/g:generateContent', {}, { 'x-goog-api-key': ph })).status).toBe(200);
    expect((await post(g, '/v1beta/models/g:generateContent', {}, { authorization: `Bearer ${ph}` })).status).toBe(200);
    const [query, goog, bearer] = vendor.requests;
    expect(query!.url).toBe(`/v1beta/models/g:generateContent?alt=json&key=${realKey}&x=1`);
    expect(goog!.headers['x-goog-api-key']).toBe(realKey);
    expect(bearer!.headers.authorization).toBe(`Bearer ${realKey}`);
    expect(g.records.map((r) => r.path)).toEqual(Array(3).fill('/v1beta/models/g:generateContent'));
  });

  it('refuses a model call with no key, another key, or the placeholder beside another key (401), and records it', async () => {
    const g = await anthropic();
    const ph = g.gateway.placeholder;
    const attempts: Record<string, string>[] = [{}, { 'x-api-key': 'sk-stolen' }, { 'x-api-key': ph, authorization: 'Bearer sk-other' }, { authorization: `Basic ${ph}` }];
    const answers = [];
    for (const headers of attempts) answers.push(await post(g, '/v1/messages', {}, headers));
    expect(answers.map((a) => a.status)).toEqual([401, 401, 401, 401]);
    expect(JSON.parse(answers[0]!.text)).toEqual({ type: 'error', error: { type: 'authentication_error', message: expect.stringContaining('carries no key') } });
    expect(JSON.parse(answers[1]!.text).error.message).toContain('not this run');
    expect(g.records.map((r) => [r.decision, r.rule, r.status])).toEqual([
      ['refused', 'refused:no-credential', 401],
      ['refused', 'refused:wrong-key', 401],
      ['refused', 'refused:wrong-key', 401],
      ['refused', 'refused:wrong-key', 401],
    ]);
    expect(vendor.requests).toHaveLength(0);
    // Neither the real key nor the placeholder appears in a record, a model call or an error text.
    const everything = JSON.stringify([g.records, g.calls, answers]);
    expect(everything).not.toContain(realKey);
    expect(everything).not.toContain(ph);
  });

  it('accepts a placeholder only on its own gateway, and nothing answers after close', async () => {
    const a = await anthropic();
    const b = await anthropic();
    expect(a.gateway.placeholder).toMatch(/^dh-run-[0-9a-f]{32}$/);
    expect(a.gateway.placeholder).not.toBe(b.gateway.placeholder);
    expect((await post(b, '/v1/messages', {}, { 'x-api-key': a.gateway.placeholder })).status).toBe(401);
    expect((await post(a, '/v1/messages', {}, { 'x-api-key': a.gateway.placeholder })).status).toBe(200);
    const socketPath = a.gateway.socketPath;
    await a.gateway.close();
    const error = await new Promise<NodeJS.ErrnoException>((resolve) => net.connect(socketPath).on('error', resolve));
    expect(error.code).toBe('ENOENT');
    expect(vendor.requests).toHaveLength(1);
  });
});

describe('what an origin-form request may be', () => {
  it('refuses a Host header that is not the sandbox loopback', async () => {
    const g = await anthropic();
    const ph = g.gateway.placeholder;
    const answers = [];
    for (const host of ['api.anthropic.com', '127.0.0.1.evil.com', 'localhost:4000', '127.0.0.1:4000', 'LOCALHOST']) {
      answers.push(await request(`${sandboxOrigin}/v1/messages`, { method: 'POST', dispatcher: g.client, headers: { host, 'x-api-key': ph }, body: '{}' }).then((r) => (r.body.dump(), r.statusCode)));
    }
    expect(answers).toEqual([403, 403, 200, 200, 200]);
    expect(g.records.slice(0, 2).map((r) => r.rule)).toEqual(['refused:host-header', 'refused:host-header']);
  });

  it('serves only paths under the upstream\'s path, with no dot segments', async () => {
    const g = await started({ vendor: { api: 'openai-chat', upstream: `${vendor.url}/v1`, key: realKey } });
    const auth = { authorization: `Bearer ${g.gateway.placeholder}` };
    const statuses = [];
    for (const p of ['/admin', '/v1x/chat', '/v1/../admin', '/v1/%2e%2e/admin', '/v1/chat/completions']) statuses.push((await post(g, p, {}, auth)).status);
    expect(statuses).toEqual([403, 403, 403, 403, 200]);
    expect(g.records.slice(0, 4).every((r) => r.rule === 'refused:not-vendor-path')).toBe(true);
    expect(g.gateway.sandboxBaseUrl(4123)).toBe('http://127.0.0.1:4123/v1');
  });

  it('refuses a spent budget in the vendor\'s own error shape with 403, not 429', async () => {
    const shapes = [
      { api: 'anthropic-messages' as const, path: '/v1/messages', headers: (ph: string) => ({ 'x-api-key': ph }), expected: { type: 'error', error: { type: 'permission_error', message: 'durable-harness: the run budget of $1.00 is spent' } } },
      { api: 'openai-chat' as const, path: '/v1/chat/completions', headers: (ph: string) => ({ authorization: `Bearer ${ph}` }), expected: { error: { message: 'durable-harness: the run budget of $1.00 is spent', type: 'permission_denied', code: 'durable_harness_403' } } },
      { api: 'gemini' as const, path: '/v1beta/models/g:generateContent', headers: (ph: string) => ({ 'x-goog-api-key': ph }), expected: { error: { code: 403, message: 'durable-harness: the run budget of $1.00 is spent', status: 'PERMISSION_DENIED' } } },
    ];
    for (const s of shapes) {
      let spent = false;
      const g = await started({ vendor: { api: s.api, upstream: vendor.url, key: realKey }, admitModelCall: () => (spent ? 'the run budget of $1.00 is spent' : undefined) });
      expect((await post(g, s.path, {}, s.headers(g.gateway.placeholder))).status).toBe(200);
      spent = true;
      const refused = await post(g, s.path, {}, s.headers(g.gateway.placeholder));
      expect([refused.status, JSON.parse(refused.text)]).toEqual([403, s.expected]);
      expect(g.records.map((r) => r.rule)).toEqual(['vendor', 'refused:budget']);
      expect(await g.waitCalls(1)).toHaveLength(1);
    }
    expect(vendor.requests).toHaveLength(3);
  });
});

describe('proxy requests reach only the allowlist', () => {
  let plain: http.Server;
  let plainPort: number;
  let echo: net.Server;
  let echoPort: number;
  beforeAll(async () => {
    plain = http.createServer((req, res) => res.end(`plain ${req.method} ${req.url} host=${req.headers.host} auth=${req.headers['proxy-authorization'] ?? ''}`));
    await new Promise<void>((r) => plain.listen(0, '127.0.0.1', r));
    plainPort = (plain.address() as AddressInfo).port;
    echo = net.createServer((s) => s.pipe(s));
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    echoPort = (echo.address() as AddressInfo).port;
  });
  afterAll(async () => {
    plain.closeAllConnections();
    await new Promise((r) => plain.close(r));
    await new Promise((r) => echo.close(r));
  });

  const withAllowlist = () =>
    started({
      vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey },
      allowlist: [
        { host: 'LocalHost', port: plainPort, methods: ['GET'] },
        { host: '127.0.0.1', port: echoPort },
      ],
    });

  const proxied = (g: TestGateway, method: string, url: string, auth: string | undefined) =>
    raw(g.gateway.socketPath, `${method} ${url} HTTP/1.1\r\nHost: ${new URL(url).host}\r\n${auth ? `Proxy-Authorization: ${auth}\r\n` : ''}Connection: close\r\nContent-Length: 0\r\n\r\n`);

  it('forwards an absolute-form request to an allowlisted http host with an allowed method, and nothing else', async () => {
    const g = await withAllowlist();
    const auth = proxyAuth(g.gateway.placeholder);
    const ok = await proxied(g, 'GET', `http://localhost:${plainPort}/x?q=1`, auth);
    expect(ok).toMatch(/^HTTP\/1\.1 200/);
    expect(ok).toContain(`plain GET /x?q=1 host=localhost:${plainPort} auth=`);
    expect(ok).not.toContain(g.gateway.placeholder);
    const refused = [
      await proxied(g, 'POST', `http://localhost:${plainPort}/x`, auth), // method not allowed
      await proxied(g, 'GET', `http://127.0.0.1:${plainPort}/x`, auth), // same server, but not the host the rule names
      await proxied(g, 'GET', `http://evil.localhost:${plainPort}/x`, auth), // no suffix match
      await proxied(g, 'GET', `http://localhost:${plainPort}/x`, undefined), // no credential
      await proxied(g, 'GET', `http://localhost:${plainPort}/x`, proxyAuth('dh-run-other')),
    ];
    expect(refused.map((r) => r.slice(0, 12))).toEqual(['HTTP/1.1 403', 'HTTP/1.1 403', 'HTTP/1.1 403', 'HTTP/1.1 407', 'HTTP/1.1 407']);
    expect(g.records.map((r) => [r.kind, r.rule, r.destination, r.path])).toEqual([
      ['http', `allowlist:localhost:${plainPort}`, `localhost:${plainPort}`, '/x'],
      ['http', 'refused:method', `localhost:${plainPort}`, '/x'],
      ['http', 'refused:not-allowlisted', `127.0.0.1:${plainPort}`, '/x'],
      ['http', 'refused:not-allowlisted', `evil.localhost:${plainPort}`, '/x'],
      ['http', 'refused:no-credential', `localhost:${plainPort}`, '/x'],
      ['http', 'refused:wrong-key', `localhost:${plainPort}`, '/x'],
    ]);
  });

  it('tunnels CONNECT only to an allowlisted destination whose rule has no methods', async () => {
    const g = await withAllowlist();
    const auth = proxyAuth(g.gateway.placeholder);
    const tunnel = await new Promise<string>((resolve) => {
      const s = net.connect(g.gateway.socketPath);
      let got = '';
      s.on('data', (c: Buffer) => {
        got += c.toString();
        if (got.includes('\r\n\r\n') && !got.includes('ping')) s.write('ping');
        if (got.endsWith('ping')) s.end();
      });
      s.on('close', () => resolve(got));
      s.write(`CONNECT 127.0.0.1:${echoPort} HTTP/1.1\r\nHost: 127.0.0.1:${echoPort}\r\nProxy-Authorization: ${auth}\r\n\r\n`);
    });
    expect(tunnel).toBe('HTTP/1.1 200 Connection Established\r\n\r\nping');
    const connect = (target: string, credential?: string) => raw(g.gateway.socketPath, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${credential ? `Proxy-Authorization: ${credential}\r\n` : ''}\r\n`);
    const refused = [await connect(`localhost:${plainPort}`, auth), await connect('example.com:443', auth), await connect(`127.0.0.1:${echoPort}`)];
    expect(refused.map((r) => r.slice(0, 12))).toEqual(['HTTP/1.1 403', 'HTTP/1.1 403', 'HTTP/1.1 407']);
    await new Promise((r) => setTimeout(r, 50));
    expect(g.records.map((r) => [r.kind, r.rule, r.destination, r.status, r.bytesIn, r.bytesOut])).toEqual([
      ['connect', `allowlist:127.0.0.1:${echoPort}`, `127.0.0.1:${echoPort}`, 200, 4, 4],
      ['connect', 'refused:method', `localhost:${plainPort}`, 403, 0, 0],
      ['connect', 'refused:not-allowlisted', 'example.com:443', 403, 0, 0],
      ['connect', 'refused:no-credential', `127.0.0.1:${echoPort}`, 407, 0, 0],
    ]);
  });
});

describe('requests a well-behaved client cannot send', () => {
  it('checks each pipelined request on its own: a disallowed second one never gets through', async () => {
    const g = await anthropic();
    const body = '{"model":"m","messages":[]}';
    const first = `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${g.gateway.placeholder}\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const second = `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: sk-stolen\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const third = `GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n`;
    const answer = await raw(g.gateway.socketPath, first + second + third);
    expect([...answer.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1])).toEqual(['200', '401', '407']);
    expect(vendor.requests).toHaveLength(1);
    // Node parses the next request while the first is answered: the rows come as each request ends.
    expect(g.records.map((r) => r.rule).sort()).toEqual(['refused:no-credential', 'refused:wrong-key', 'vendor']);
  });

  it('refuses a request with both Content-Length and Transfer-Encoding (node\'s parser), and records it', async () => {
    const g = await anthropic();
    const smuggle = `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${g.gateway.placeholder}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
    const answer = await raw(g.gateway.socketPath, smuggle);
    expect(answer).toMatch(/^HTTP\/1\.1 400/);
    expect(vendor.requests).toHaveLength(0);
    expect(g.records.map((r) => [r.rule, r.status])).toEqual([['refused:malformed', 400]]);
  });

  it('refuses a request head over 16 KiB with 431', async () => {
    const g = await anthropic();
    const answer = await raw(g.gateway.socketPath, `POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${g.gateway.placeholder}\r\nx-pad: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 431/);
    expect(vendor.requests).toHaveLength(0);
    expect(g.records.map((r) => [r.rule, r.status])).toEqual([['refused:malformed', 431]]);
  });
});

describe('bounds', () => {
  it('refuses a body over the cap with 413, declared or streamed', async () => {
    const g = await started({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey }, limits: { maxBodyBytes: 1024 } });
    const declared = await post(g, '/v1/messages', { pad: 'x'.repeat(2000) }, { 'x-api-key': g.gateway.placeholder });
    expect(declared.status).toBe(413);
    const chunks = async function* () {
      for (let i = 0; i < 4; i++) yield Buffer.alloc(512, 'a');
    };
    const streamed = await request(`${sandboxOrigin}/v1/messages`, { method: 'POST', dispatcher: g.client, headers: { 'x-api-key': g.gateway.placeholder }, body: Readable.from(chunks()) });
    expect(streamed.statusCode).toBe(413);
    await streamed.body.dump();
    expect(g.records.map((r) => r.status)).toEqual([413, 413]);
    expect(g.records[0]!.rule).toBe('refused:body-too-large');
  });

  it('closes connections over the cap on arrival; the others are served', async () => {
    const g = await started({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey }, limits: { maxConnections: 4 } });
    const held = await Promise.all(Array.from({ length: 4 }, () => new Promise<net.Socket>((resolve) => { const s = net.connect(g.gateway.socketPath, () => resolve(s)); })));
    try {
      const extra = await raw(g.gateway.socketPath, 'GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 2_000);
      expect(extra).toBe('');
      const served = await new Promise<string>((resolve) => {
        const s = held[0]!;
        let got = '';
        s.on('data', (c: Buffer) => {
          got += c.toString();
          if (got.includes('\r\n\r\n')) resolve(got);
        });
        s.write('GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
      });
      expect(served).toMatch(/^HTTP\/1\.1 401/);
      expect(g.records.map((r) => r.rule)).toEqual(['refused:connections', 'refused:no-credential']);
    } finally {
      for (const s of held) s.destroy();
    }
  });

  it('answers 429 over the rate and folds those refusals into a count instead of one record each', async () => {
    const g = await started({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey }, limits: { burst: 5, perSecond: 0.001, rateRecordEveryMs: 60_000 } });
    const statuses = [];
    for (let i = 0; i < 40; i++) statuses.push((await post(g, '/v1/messages', {}, {})).status);
    expect(statuses).toEqual([...Array(5).fill(401), ...Array(35).fill(429)]);
    expect(g.records).toHaveLength(6); // 5 refusals for no key, then one rate row
    await g.gateway.close();
    // The first request over the rate is a row; the 34 after it are a count, flushed at close.
    const rate = g.records.filter((r) => r.rule === 'refused:rate');
    expect(rate.map((r) => [r.status, r.suppressed])).toEqual([[429, undefined], [429, 34]]);
  });

  it('drops a slowloris connection that never finishes its request head', async () => {
    const g = await started({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey }, limits: { headersTimeoutMs: 300, requestTimeoutMs: 600 } });
    const t0 = Date.now();
    const answer = await new Promise<string>((resolve) => {
      const s = net.connect(g.gateway.socketPath);
      let got = '';
      let drips = 0;
      // One header byte every 100 ms, bounded at 50 drips (5 s): the gateway must cut it long before.
      const drip = setInterval(() => (drips++ < 50 && !s.destroyed ? s.write('x') : clearInterval(drip)), 100);
      s.on('data', (c: Buffer) => void (got += c.toString()));
      s.on('error', () => undefined);
      s.on('close', () => {
        clearInterval(drip);
        resolve(got);
      });
      s.write('POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
    });
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
    expect(g.records.map((r) => r.rule)).toEqual(['refused:timeout']);
    expect(vendor.requests).toHaveLength(0);
  });

  it('drops a connection that sends nothing, and one that drips its body past the request timeout', async () => {
    const g = await started({ vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey }, limits: { headersTimeoutMs: 300, requestTimeoutMs: 600 } });
    const t0 = Date.now();
    const silent = raw(g.gateway.socketPath, '', 5_000);
    const dripped = new Promise<string>((resolve) => {
      const s = net.connect(g.gateway.socketPath);
      let got = '';
      let drips = 0;
      const drip = setInterval(() => (drips++ < 50 && !s.destroyed ? s.write('x') : clearInterval(drip)), 100);
      s.on('data', (c: Buffer) => void (got += c.toString()));
      s.on('error', () => undefined);
      s.on('close', () => {
        clearInterval(drip);
        resolve(got);
      });
      s.write(`POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${g.gateway.placeholder}\r\nContent-Length: 1000\r\n\r\n`);
    });
    const [a, b] = await Promise.all([silent, dripped]);
    expect(Date.now() - t0).toBeLessThan(4_000);
    expect(a).toMatch(/^HTTP\/1\.1 408/);
    expect(b).toBe(''); // its request was already on its way to the vendor: the connection is cut, not answered
    expect(g.records.filter((r) => r.rule === 'refused:timeout')).toHaveLength(2);
  });

  it('streams the answer back as it comes and holds the vendor back when the sandbox does not read', async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let upstreamWrote = 0;
    const upstream = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (req.url === '/first') {
        res.write('data: {"first":true}\n\n');
        void released.then(() => res.end('data: [DONE]\n\n'));
        return;
      }
      // Write 1 MiB chunks while the path accepts them, at most 64 (64 MiB): a buffering proxy would take them all.
      const chunk = Buffer.alloc(1024 * 1024, 'a');
      const pump = () => {
        for (let i = 0; i < 64 && upstreamWrote < 64 * chunk.length; i++) {
          upstreamWrote += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    try {
      const g = await started({ vendor: { api: 'any', upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`, key: realKey } });
      const res = await request(`${sandboxOrigin}/first`, { method: 'POST', dispatcher: g.client, headers: { 'x-api-key': g.gateway.placeholder }, body: '{}' });
      const iterator = res.body[Symbol.asyncIterator]();
      const first = await iterator.next();
      expect(String(first.value)).toBe('data: {"first":true}\n\n'); // arrived while the vendor's answer is still open
      release();
      for (let i = 0; i < 10 && !(await iterator.next()).done; i++);

      const socket = net.connect(g.gateway.socketPath);
      socket.write(`POST /big HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: ${g.gateway.placeholder}\r\nContent-Length: 0\r\n\r\n`);
      socket.pause();
      await new Promise((r) => setTimeout(r, 1_000));
      expect(upstreamWrote).toBeLessThan(32 * 1024 * 1024);
      socket.destroy();
    } finally {
      upstream.closeAllConnections();
      await new Promise((r) => upstream.close(r));
    }
  });
});

describe('the socket', () => {
  it('replaces a stale socket, is open to a container user (0666), and will not replace a file', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-gw-'));
    try {
      const socketPath = path.join(dir, 'g.sock');
      const stale = net.createServer();
      await new Promise<void>((r) => stale.listen(socketPath, r));
      const g = await openGateway({ socketPath, onRecord: () => undefined, onModelCall: () => undefined });
      expect(statSync(socketPath).mode & 0o777).toBe(0o666);
      await g.close();
      stale.close();
      const file = path.join(dir, 'file');
      writeFileSync(file, 'not a socket');
      await expect(openGateway({ socketPath: file, onRecord: () => undefined, onModelCall: () => undefined })).rejects.toThrow(GatewayStartError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('listens at a path longer than the 107 bytes of sun_path, and the forwarder reaches it there (a long data directory)', async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'dh-gw-'));
    const dir = path.join(root, 'a-data-directory-as-deep-as-an-operator-makes-it'.repeat(2), 'runtime', 'gateway', '0123456789abcdef');
    mkdirSync(dir, { recursive: true });
    const socketPath = path.join(dir, 'gateway.sock');
    expect(Buffer.byteLength(socketPath)).toBeGreaterThan(107);
    const g = await openGateway({ socketPath, vendor: { api: 'anthropic-messages', upstream: vendor.url, key: realKey }, onRecord: () => undefined, onModelCall: () => undefined });
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const [node, ...args] = forwarderArgv(process.execPath, socketPath, port);
    const forwarder = spawn(node!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      await new Promise<void>((resolve, reject) => {
        forwarder.stdout.on('data', (d: Buffer) => String(d).includes('ready') && resolve());
        forwarder.once('exit', (code) => reject(new Error(`the forwarder exited ${code}`)));
      });
      const res = await request(`http://127.0.0.1:${port}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': g.placeholder },
        body: JSON.stringify({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.statusCode).toBe(200);
      await res.body.text();
      expect(vendor.requests.at(-1)?.headers['x-api-key']).toBe(realKey);
    } finally {
      forwarder.kill('SIGKILL');
      await g.close();
    }
    expect(existsSync(socketPath)).toBe(false);
    rmSync(root, { recursive: true, force: true });
  });
});
