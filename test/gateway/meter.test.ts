/**
 * Metering on the wire: the project's fake vendor serves each of the four protocols, streamed and not, through the
 * gateway; the usage the gateway metered must equal what the vendor served (its bill), normalised as
 * contracts/usage.ts says, field for field, and the model must be the one the vendor named.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import type { VendorApi } from '../../src/contracts/network.js';
import type { Usage } from '../../src/contracts/usage.js';
import { createMeter } from '../../src/gateway/index.js';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { gemini, geminiPrefix } from '../e2e/fake-vendor/gemini.js';
import { openaiChat, openaiChatPrefix } from '../e2e/fake-vendor/openai-chat.js';
import { openaiResponses } from '../e2e/fake-vendor/openai-responses.js';
import { startFakeVendor, type FakeVendor, type ScriptedUsage } from '../e2e/fake-vendor/server.js';
import { post, startGateway, type TestGateway } from './helpers.js';

/**
 * The served usage as each wire format can carry it: Anthropic folds thinking into output (reasoning unknown);
 * the OpenAI APIs and Gemini have no cache-write count.
 */
function expectedUsage(api: Exclude<VendorApi, 'any'>, u: Required<ScriptedUsage>): Usage {
  switch (api) {
    case 'anthropic-messages':
      return { input: u.input, output: u.output + u.reasoning, cacheRead: u.cacheRead, cacheWrite: u.cacheWrite };
    case 'openai-responses':
    case 'openai-chat':
    case 'gemini':
      return { input: u.input, output: u.output, cacheRead: u.cacheRead, reasoning: u.reasoning };
  }
}

interface Case {
  readonly api: Exclude<VendorApi, 'any'>;
  readonly streamed: boolean;
  readonly path: string;
  readonly body: Record<string, unknown>;
  readonly model: string;
}

const cases: Case[] = [
  { api: 'anthropic-messages', streamed: true, path: '/v1/messages?beta=true', body: { model: 'claude-x', stream: true, messages: [] }, model: 'claude-x' },
  { api: 'anthropic-messages', streamed: false, path: '/v1/messages', body: { model: 'claude-y', messages: [] }, model: 'claude-y' },
  { api: 'openai-responses', streamed: true, path: '/v1/responses', body: { model: 'gpt-x', stream: true, input: [] }, model: 'gpt-x' },
  { api: 'openai-responses', streamed: false, path: '/v1/responses', body: { model: 'gpt-y', input: [] }, model: 'gpt-y' },
  { api: 'openai-chat', streamed: true, path: '/v1/chat/completions', body: { model: 'chat-x', stream: true, stream_options: { include_usage: true }, messages: [] }, model: 'chat-x' },
  { api: 'openai-chat', streamed: false, path: '/v1/chat/completions', body: { model: 'chat-y', messages: [] }, model: 'chat-y' },
  { api: 'gemini', streamed: true, path: '/v1beta/models/gemini-x:streamGenerateContent?alt=sse', body: { contents: [] }, model: 'gemini-x' },
  { api: 'gemini', streamed: false, path: '/v1beta/models/gemini-y:generateContent', body: { contents: [] }, model: 'gemini-y' },
];

const usages: ScriptedUsage[] = [
  { input: 1234, output: 56, cacheRead: 789, cacheWrite: 12, reasoning: 34 },
  { input: 7, output: 3, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
];

let vendor: FakeVendor | undefined;
let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  await vendor?.close();
  gw = vendor = undefined;
});

/** A fake vendor speaking all four protocols, each on its own path. */
function vendorFor(): Promise<FakeVendor> {
  return startFakeVendor({
    handlers: { '/v1/messages': anthropicMessages, '/v1/responses': openaiResponses, [openaiChatPrefix]: openaiChat, [geminiPrefix]: gemini },
  });
}

/** The key form each vendor's CLI uses. */
function keyHeader(api: VendorApi, placeholder: string): Record<string, string> {
  if (api === 'anthropic-messages') return { 'x-api-key': placeholder };
  if (api === 'gemini') return { 'x-goog-api-key': placeholder };
  return { authorization: `Bearer ${placeholder}` };
}

describe('the gateway meters each vendor protocol to the token', () => {
  for (const c of cases) {
    it(`${c.api}, ${c.streamed ? 'streamed' : 'one JSON body'}`, async () => {
      vendor = await vendorFor();
      const openai = c.api === 'openai-responses' || c.api === 'openai-chat';
      gw = await startGateway({ vendor: { api: c.api, upstream: openai ? `${vendor.url}/v1` : vendor.url, key: 'sk-real' } });
      for (const usage of usages) {
        vendor.script({ text: 'hello there, metered world', usage });
        const res = await post(gw, c.path, c.body, keyHeader(c.api, gw.gateway.placeholder));
        expect(res.status).toBe(200);
        expect(res.headers['content-type']).toContain(c.streamed ? 'text/event-stream' : 'application/json');
      }
      const calls = await gw.waitCalls(usages.length);
      expect(vendor.served).toHaveLength(usages.length);
      expect(calls.map((call) => call.usage)).toEqual(vendor.served.map((s) => expectedUsage(c.api, s.usage)));
      expect(calls.map((call) => [call.model, call.streamed, call.status, call.api])).toEqual(usages.map(() => [c.model, c.streamed, 200, c.api]));
      for (const call of calls) {
        expect(call.firstByteMs).toBeGreaterThan(0);
        expect(call.durationMs).toBeGreaterThanOrEqual(call.firstByteMs!);
      }
    });
  }

  it('`any` tells the four protocols apart by the response shape', async () => {
    vendor = await vendorFor();
    gw = await startGateway({ vendor: { api: 'any', upstream: vendor.url, key: 'sk-real' } });
    const auth = { authorization: `Bearer ${gw.gateway.placeholder}` };
    for (const c of cases) {
      vendor.script({ text: 'told apart', usage: usages[0] });
      expect((await post(gw, c.path, c.body, auth)).status).toBe(200);
    }
    const calls = await gw.waitCalls(cases.length);
    expect(calls.map((call) => call.usage)).toEqual(cases.map((c, i) => expectedUsage(c.api, vendor!.served[i]!.usage)));
    expect(calls.map((call) => call.model)).toEqual(cases.map((c) => c.model));
  });
});

describe('the meter reads a copy and never guesses', () => {
  /** An upstream that answers fixed bytes with fixed headers. */
  async function fixedUpstream(headers: http.OutgoingHttpHeaders, bytes: Buffer): Promise<{ url: string; close: () => Promise<void> }> {
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, headers).end(bytes));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((r) => server.close(() => r())) };
  }

  it('meters a gzip-compressed answer and passes its compressed bytes through unchanged', async () => {
    const json = JSON.stringify({ type: 'message', model: 'claude-z', usage: { input_tokens: 11, output_tokens: 22, cache_read_input_tokens: 3, cache_creation_input_tokens: 4 } });
    const gz = zlib.gzipSync(json);
    const upstream = await fixedUpstream({ 'content-type': 'application/json', 'content-encoding': 'gzip' }, gz);
    try {
      gw = await startGateway({ vendor: { api: 'anthropic-messages', upstream: upstream.url, key: 'k' } });
      const { request } = await import('undici');
      const res = await request('http://127.0.0.1:4000/v1/messages', { method: 'POST', dispatcher: gw.client, headers: { 'x-api-key': gw.gateway.placeholder }, body: '{}' });
      expect(res.headers['content-encoding']).toBe('gzip');
      expect(Buffer.from(await res.body.arrayBuffer()).equals(gz)).toBe(true);
      const [call] = await gw.waitCalls(1);
      expect(call).toMatchObject({ model: 'claude-z', usage: { input: 11, output: 22, cacheRead: 3, cacheWrite: 4 } });
    } finally {
      await gw?.close();
      gw = undefined;
      await upstream.close();
    }
  });

  it('leaves usage unknown (not zero) for an answer it cannot read, and passes it on as is', async () => {
    const broken = Buffer.from('{"type":"message","usage":{"input_tokens":');
    const upstream = await fixedUpstream({ 'content-type': 'application/json' }, broken);
    try {
      gw = await startGateway({ vendor: { api: 'anthropic-messages', upstream: upstream.url, key: 'k' } });
      const res = await post(gw, '/v1/messages', {}, { 'x-api-key': gw.gateway.placeholder });
      expect(res.text).toBe(broken.toString());
      const [call] = await gw.waitCalls(1);
      expect(call!.usage).toEqual({});
    } finally {
      await gw?.close();
      gw = undefined;
      await upstream.close();
    }
  });

  it('takes the last of Gemini\'s cumulative chunks and a count that is not a whole number makes usage unknown', async () => {
    const meter = createMeter('gemini', 'text/event-stream', undefined);
    const chunk = (n: number) => `data: ${JSON.stringify({ usageMetadata: { promptTokenCount: n, candidatesTokenCount: n }, modelVersion: 'g' })}\n\n`;
    for (const part of [chunk(5), chunk(9)]) meter.write(Buffer.from(part));
    expect(await meter.finish()).toEqual({ model: 'g', usage: { input: 9, output: 9, cacheRead: 0, reasoning: 0 }, streamed: true });
    const bad = createMeter('openai-chat', 'application/json', undefined);
    bad.write(Buffer.from(JSON.stringify({ object: 'chat.completion', usage: { prompt_tokens: 1.5, completion_tokens: 2 } })));
    expect((await bad.finish()).usage).toEqual({});
  });

  it('reads SSE split at any byte (one byte per chunk)', async () => {
    const meter = createMeter('anthropic-messages', 'text/event-stream', undefined);
    const text =
      'event: message_start\ndata: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":4,"output_tokens":1,"cache_read_input_tokens":2,"cache_creation_input_tokens":0}}}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":9}}\n\n';
    for (const byte of Buffer.from(text)) meter.write(Buffer.from([byte]));
    expect(await meter.finish()).toEqual({ model: 'm', usage: { input: 4, output: 9, cacheRead: 2, cacheWrite: 0 }, streamed: true });
  });
});
