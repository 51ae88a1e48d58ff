/**
 * Who may use the codec server: every decode or encode needs a configured token, each token its namespaces, a
 * foreign origin gets nothing (not even a preflight), and /encode is off unless enabled. The server is real (HTTP on
 * 127.0.0.1); the payloads are real ciphertext of the project's codec.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AesGcmPayloadCodec,
  CodecAuthConfigError,
  codecTokensFromEnvironment,
  generateCodecToken,
  generatePayloadKey,
  parseCodecTokens,
  parseCorsOrigins,
  payloadToJson,
  startCodecServer,
  type CodecServer,
  type JsonPayload,
} from '../../src/codec/index.js';
import { generateOperatorKey, mintReadToken, parseOperators, signerFromKeyFile } from '../../src/operators/index.js';

const codec = new AesGcmPayloadCodec({ keys: new Map([['k1', Buffer.from(generatePayloadKey(), 'base64')]]), currentKeyId: 'k1' });
const ui = 'http://127.0.0.1:8233';
const everywhere = generateCodecToken();
const teamA = generateCodecToken();
const logged: string[] = [];
let server: CodecServer;
let encodes: CodecServer;
let secret: JsonPayload;

beforeAll(async () => {
  const tokens = [
    { name: 'ops', token: everywhere, namespaces: ['*'] },
    { name: 'team-a', token: teamA, namespaces: ['team-a'] },
  ];
  server = await startCodecServer({ codec, tokens, corsOrigins: [ui], log: (line) => logged.push(line) });
  encodes = await startCodecServer({ codec, tokens, allowEncode: true, corsOrigins: [ui] });
  const [encrypted] = await codec.encode([{ metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"the task: rotate the keys"') }]);
  secret = payloadToJson(encrypted!);
});
afterAll(async () => {
  await Promise.all([server?.close(), encodes?.close()]);
});

async function decode(base: string, route: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string; allowOrigin: string | null }> {
  const res = await fetch(`${base}${route}`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify({ payloads: [secret] }) });
  return { status: res.status, text: await res.text(), allowOrigin: res.headers.get('access-control-allow-origin') };
}
const plaintext = (text: string) => Buffer.from((JSON.parse(text) as { payloads: JsonPayload[] }).payloads[0]!.data!, 'base64').toString();

describe('a request without a valid token decodes nothing', () => {
  it.each([
    ['no Authorization header', {}],
    ['a wrong token', { Authorization: `Bearer ${generateCodecToken()}` }],
    ['a token of the right length with one character changed', { Authorization: `Bearer ${everywhere.slice(0, -1)}${everywhere.endsWith('A') ? 'B' : 'A'}` }],
    ['a Basic credential', { Authorization: `Basic ${Buffer.from(`ops:${everywhere}`).toString('base64')}` }],
    ['the token without the Bearer scheme', { Authorization: everywhere }],
  ])('%s: 401 and no plaintext', async (_what, headers) => {
    const res = await decode(server.url, '/decode', headers);
    expect(res.status).toBe(401);
    expect(res.text).not.toContain('rotate the keys');
    expect(res.text).toMatch(/a valid access token is required/);
  });

  it('a token in the path works like the header (the Web UI cannot send one); a wrong one there is refused too', async () => {
    expect(plaintext((await decode(server.url, `/t/${everywhere}/decode`)).text)).toBe('"the task: rotate the keys"');
    expect((await decode(server.url, `/t/${generateCodecToken()}/decode`)).status).toBe(401);
  });

  it('a refusal is logged with the token holder, never with the token', async () => {
    await decode(server.url, '/elsewhere-ns/decode', { Authorization: `Bearer ${teamA}` });
    const line = logged.find((l) => l.includes('team-a') && l.includes('elsewhere-ns'));
    expect(line).toBeDefined();
    expect(logged.join('\n')).not.toContain(teamA);
    expect(logged.join('\n')).not.toContain(everywhere);
  });
});

describe('tokens are authorized per namespace', () => {
  it('a namespace token decodes its namespace, named in the path or by X-Namespace', async () => {
    const auth = { Authorization: `Bearer ${teamA}` };
    expect(plaintext((await decode(server.url, '/team-a/decode', auth)).text)).toBe('"the task: rotate the keys"');
    expect(plaintext((await decode(server.url, '/decode', { ...auth, 'X-Namespace': 'team-a' })).text)).toBe('"the task: rotate the keys"');
  });

  it('and nothing else: another namespace, no namespace, or a path and header that disagree', async () => {
    const auth = { Authorization: `Bearer ${teamA}` };
    expect((await decode(server.url, '/team-b/decode', auth)).status).toBe(403);
    expect((await decode(server.url, '/decode', { ...auth, 'X-Namespace': 'team-b' })).status).toBe(403);
    expect((await decode(server.url, '/decode', auth)).status).toBe(403);
    expect((await decode(server.url, '/team-a/decode', { ...auth, 'X-Namespace': 'team-b' })).status).toBe(400);
    expect((await decode(server.url, '/team-b/decode', { Authorization: `Bearer ${everywhere}` })).status).toBe(200);
  });
});

describe('CORS answers only the configured origins', () => {
  it('the UI origin gets its preflight and its answer', async () => {
    const preflight = await fetch(`${server.url}/decode`, { method: 'OPTIONS', headers: { Origin: ui, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,x-namespace' } });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
    const res = await decode(server.url, '/decode', { Origin: ui, Authorization: `Bearer ${everywhere}` });
    expect(res.status).toBe(200);
    expect(res.allowOrigin).toBe(ui);
  });

  it('a foreign origin is refused, preflight and request, even with a valid token', async () => {
    const preflight = await fetch(`${server.url}/decode`, { method: 'OPTIONS', headers: { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST' } });
    expect(preflight.status).toBe(403);
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    const res = await decode(server.url, '/decode', { Origin: 'http://evil.example', Authorization: `Bearer ${everywhere}` });
    expect(res.status).toBe(403);
    expect(res.text).not.toContain('rotate the keys');
    // A look-alike of the UI's origin is another origin.
    expect((await decode(server.url, '/decode', { Origin: 'http://127.0.0.1:8233.evil.example', Authorization: `Bearer ${everywhere}` })).status).toBe(403);
  });
});

describe('/encode mints payloads the workers accept, so it is off unless enabled', () => {
  const plain = { payloads: [{ metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from('{"allow":true}').toString('base64') }] };
  const encode = (base: string, token: string | undefined) =>
    fetch(`${base}/default/encode`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(plain) });

  it('refused by default, with how to turn it on', async () => {
    const res = await encode(server.url, everywhere);
    expect(res.status).toBe(403);
    expect(await res.text()).toMatch(/--allow-encode/);
  });

  it('served when enabled, still only with a token', async () => {
    expect((await encode(encodes.url, undefined)).status).toBe(401);
    const res = await encode(encodes.url, everywhere);
    expect(res.status).toBe(200);
    const [payload] = ((await res.json()) as { payloads: JsonPayload[] }).payloads;
    expect(Buffer.from(payload!.metadata!.encoding!, 'base64').toString()).toBe('binary/encrypted');
  });
});

describe('configuration', () => {
  it('a server without tokens does not start', async () => {
    await expect(startCodecServer({ codec, tokens: [] })).rejects.toThrow(CodecAuthConfigError);
    await expect(startCodecServer({ codec, tokens: [] })).rejects.toThrow(/DURABLE_HARNESS_CODEC_TOKENS/);
  });

  it('parses NAME=TOKEN[@NS|NS] entries and names the broken one', () => {
    const t = generateCodecToken();
    expect(parseCodecTokens(`ops=${t}\n# a comment\nteam=${t}x@a|b`, 'f')).toEqual([
      { name: 'ops', token: t, namespaces: ['*'] },
      { name: 'team', token: `${t}x`, namespaces: ['a', 'b'] },
    ]);
    expect(() => parseCodecTokens('ops=short', 'f')).toThrow(/f entry 1 \("ops"\): the token is shorter than 24 characters/);
    expect(() => parseCodecTokens(`=${t}`, 'f')).toThrow(/expected NAME=TOKEN/);
    expect(() => parseCodecTokens(`a=${t},a=${t}y`, 'f')).toThrow(/"a" is given twice/);
    expect(() => codecTokensFromEnvironment({ DURABLE_HARNESS_CODEC_TOKENS_FILE: '/nonexistent/tokens' })).toThrow(/cannot be read/);
  });

  it('refuses "*" and non-origins for CORS', () => {
    expect(parseCorsOrigins([' http://ui:8080 ', ''])).toEqual(['http://ui:8080']);
    expect(() => parseCorsOrigins(['*'])).toThrow(/"\*" is not accepted/);
    expect(() => parseCorsOrigins(['http://ui:8080/path'])).toThrow(/not an origin/);
  });
});

describe('operators with the read role decode with a token signed by their own key', () => {
  const reader = generateOperatorKey('rita');
  const approver = generateOperatorKey('adam');
  const directory = parseOperators(
    JSON.stringify({ operators: [{ name: 'rita', roles: ['read'], keys: [reader.publicKey] }, { name: 'adam', roles: ['approve'], keys: [approver.publicKey] }] }),
    'operators.json',
  );
  let current = directory;
  let opServer: CodecServer;
  beforeAll(async () => {
    opServer = await startCodecServer({ codec, tokens: [], operators: () => current, corsOrigins: [ui] });
  });
  afterAll(() => opServer?.close());
  const rita = signerFromKeyFile(JSON.stringify(reader), 'rita');

  it('a read token decodes its namespaces; expired, tampered, role-less or revoked ones do not', async () => {
    const token = mintReadToken(rita, { namespaces: ['team-a'], ttlMs: 60_000 });
    expect(plaintext((await decode(opServer.url, '/team-a/decode', { Authorization: `Bearer ${token}` })).text)).toBe('"the task: rotate the keys"');
    expect((await decode(opServer.url, '/team-b/decode', { Authorization: `Bearer ${token}` })).status).toBe(403);
    const old = mintReadToken(rita, { namespaces: ['*'], ttlMs: 60_000, nowMs: Date.now() - 3600_000 });
    expect((await decode(opServer.url, '/team-a/decode', { Authorization: `Bearer ${old}` })).status).toBe(401);
    const [p, body, sig] = token.split('.');
    const widened = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(body!, 'base64url').toString()), namespaces: ['*'] })).toString('base64url');
    expect((await decode(opServer.url, '/team-b/decode', { Authorization: `Bearer ${p}.${widened}.${sig}` })).status).toBe(401);
    const adam = mintReadToken(signerFromKeyFile(JSON.stringify(approver), 'adam'), { namespaces: ['*'], ttlMs: 60_000 });
    expect((await decode(opServer.url, '/team-a/decode', { Authorization: `Bearer ${adam}` })).status).toBe(401);
    // Removing rita from the operators file stops her token at the next request, without a restart.
    current = parseOperators('operators: []', 'operators.json');
    expect((await decode(opServer.url, '/team-a/decode', { Authorization: `Bearer ${token}` })).status).toBe(401);
    current = directory;
  });

  it('a codec server with neither tokens nor readers does not start', async () => {
    await expect(startCodecServer({ codec, tokens: [], operators: () => parseOperators(JSON.stringify({ operators: [{ name: 'adam', roles: ['approve'], keys: [approver.publicKey] }] }), 'f') })).rejects.toThrow(/role "read"/);
  });
});
