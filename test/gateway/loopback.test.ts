/**
 * The MCP loopback as a hostile harness meets it, through the gateway's socket (as the forwarder's clients would):
 * the token (missing, another run's, after the end), reads between turns, resources outside the declared URIs, path
 * escapes and links in a file root, oversized reads, a flood of calls, tools that would act — each refused with a
 * clear error and an audit row, and the reads that are allowed answered within their bounds.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LOOPBACK_PATH, LOOPBACK_TOOLS, type LoopbackRead } from '../../src/contracts/loopback.js';
import { createLoopback, type Loopback, type LoopbackOptions } from '../../src/gateway/index.js';
import { post, startGateway, type TestGateway } from './helpers.js';

const token = 'dh-mcp-test-token-of-run-a-0123456789';
let root: string;
const open: TestGateway[] = [];

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'dh-loopback-'));
  mkdirSync(path.join(root, 'docs', 'guides'), { recursive: true });
  writeFileSync(path.join(root, 'docs', 'guides', 'style.md'), 'Name the attacker in every test.\n');
  writeFileSync(path.join(root, 'docs', 'big.txt'), 'x'.repeat(300 * 1024));
  writeFileSync(path.join(root, 'secret.txt'), 'OPERATOR-ONLY-SECRET\n');
  // Planted links: a file and a directory that lead out of the root.
  symlinkSync(path.join(root, 'secret.txt'), path.join(root, 'docs', 'leak.txt'));
  symlinkSync(root, path.join(root, 'docs', 'up'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));
afterEach(async () => {
  await Promise.all(open.splice(0).map((g) => g.close()));
});

/** A JSON-RPC answer as the tests read it. */
interface Answer {
  readonly result?: {
    readonly content?: readonly { readonly text: string }[];
    readonly isError?: boolean;
    readonly tools?: readonly { readonly name: string; readonly annotations: Record<string, unknown> }[];
    readonly contents?: unknown;
    readonly [key: string]: unknown;
  };
  readonly error?: { readonly code: number; readonly message: string };
}

/** A page of `list_steps`. */
interface StepsPage {
  readonly steps: readonly { readonly seq: number; readonly payload: { readonly bytes?: number } }[];
  readonly next?: unknown;
}

interface Harness {
  readonly t: TestGateway;
  readonly loopback: Loopback;
  readonly reads: LoopbackRead[];
  /** One JSON-RPC request with the given token (default: the run's own). */
  rpc(method: string, params?: Record<string, unknown>, auth?: string | null): Promise<{ status: number; body: Answer }>;
  call(tool: string, args?: Record<string, unknown>): Promise<Answer>;
}

async function harness(options: Partial<LoopbackOptions> = {}, turnOpen = true, parent = false): Promise<Harness> {
  const reads: LoopbackRead[] = [];
  const loopback = createLoopback({
    token,
    data: {
      status: async () => ({ workflowId: 'run-a', turn: 3, budgetLeft: { tokens: 1234 } }),
      steps: async (after, limit) =>
        [
          { seq: 1, turn: 1, type: 'envelope', payload: { step: 'actions', note: { blob: 'a'.repeat(64), bytes: 10, preview: 'p' } } },
          { seq: 2, turn: 1, type: 'action', payload: { result: 'ok' } },
          { seq: 3, turn: 2, type: 'envelope', payload: { step: 'chat', big: 'y'.repeat(40_000) } },
        ].filter((s) => s.seq > after).slice(0, limit),
      blob: async (hash) => (hash === 'a'.repeat(64) ? 'the stored text' : undefined),
      parentSteps: async () => (parent ? [{ seq: 7, turn: 4, type: 'envelope', payload: { step: 'sub-agent' } }] : undefined),
    },
    resources: [
      { uri: 'docs://style', text: 'Use tabs.' },
      { uri: 'docs://big', file: path.join(root, 'docs', 'big.txt') },
      { uri: 'docs://linked', file: path.join(root, 'docs', 'leak.txt') },
      { uri: 'tree://docs/', root: path.join(root, 'docs') },
    ],
    onRead: (r) => void reads.push(r),
    closedReason: () => (turnOpen ? undefined : 'no turn of this run is running: the loopback reads only during a turn'),
    ...options,
  });
  const t = await startGateway({ loopback });
  open.push(t);
  let id = 0;
  const rpc = async (method: string, params: Record<string, unknown> = {}, auth: string | null = token) => {
    const res = await post(t, LOOPBACK_PATH, { jsonrpc: '2.0', id: ++id, method, params }, auth === null ? {} : { authorization: `Bearer ${auth}` });
    return { status: res.status, body: (res.text ? JSON.parse(res.text) : {}) as Answer };
  };
  const call = async (tool: string, args: Record<string, unknown> = {}) => (await rpc('tools/call', { name: tool, arguments: args })).body;
  return { t, loopback, reads, rpc, call };
}

const text = (answer: Answer | undefined): string => answer?.result?.content?.[0]?.text ?? answer?.error?.message ?? '';

describe('MCP loopback: the allowed reads', () => {
  it('initializes, lists exactly the read-only tools (annotated read-only), and answers them', async () => {
    const h = await harness();
    const init = await h.rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } });
    expect(init.status).toBe(200);
    expect(init.body.result).toMatchObject({ protocolVersion: '2025-06-18', serverInfo: { name: 'durable-harness' }, capabilities: { tools: {}, resources: {} } });
    const tools = (await h.rpc('tools/list')).body.result?.tools ?? [];
    expect(tools.map((t) => t.name)).toEqual([...LOOPBACK_TOOLS]);
    expect(tools.every((t) => t.annotations.readOnlyHint === true && t.annotations.destructiveHint === false)).toBe(true);

    expect(JSON.parse(text(await h.call('run_status')))).toMatchObject({ workflowId: 'run-a', turn: 3, budgetLeft: { tokens: 1234 }, loopback: { callsThisTurn: 1 } });
    const page = JSON.parse(text(await h.call('list_steps', { after: 0, limit: 2 }))) as StepsPage;
    expect(page.steps.map((s) => s.seq)).toEqual([1, 2]);
    expect(page.next).toEqual({ after: 2 });
    // A large step payload is cut with its size, not sent whole.
    const last = JSON.parse(text(await h.call('list_steps', { after: 2 }))) as StepsPage;
    expect(last.steps[0]!.payload.bytes).toBeGreaterThan(40_000);
    expect(text(await h.call('read_blob', { blob: 'a'.repeat(64) }))).toBe('the stored text');
    expect(text(await h.call('read_resource', { uri: 'docs://style' }))).toBe('Use tabs.');
    expect(text(await h.call('read_resource', { uri: 'tree://docs/guides/style.md' }))).toBe('Name the attacker in every test.\n');
    const listed = (JSON.parse(text(await h.call('list_resources'))) as { resources: { uri: string }[] }).resources.map((r) => r.uri);
    expect(listed).toEqual(expect.arrayContaining(['docs://style', 'docs://big', 'tree://docs/guides/style.md', 'tree://docs/big.txt']));
    // Links are never listed.
    expect(listed.some((u: string) => u.includes('leak') || u.includes('/up/'))).toBe(false);

    expect(text(await h.call('parent_steps'))).toMatch(/this run is not a sub-agent/);
    const child = await harness({}, true, true);
    expect((JSON.parse(text(await child.call('parent_steps'))) as StepsPage).steps.map((s) => s.seq)).toEqual([7]);

    const rr = await h.rpc('resources/read', { uri: 'docs://style' });
    expect(rr.body.result?.contents).toEqual([{ uri: 'docs://style', mimeType: 'text/plain', text: 'Use tabs.' }]);
    expect(h.reads.filter((r) => r.status === 'ok').map((r) => r.target)).toEqual([
      'run_status', 'list_steps', 'list_steps', 'read_blob', 'read_resource', 'read_resource', 'list_resources', 'docs://style',
    ]);
    expect(h.loopback.counts().calls).toBe(9);
  });
});

describe('MCP loopback: who may read', () => {
  it('refuses a request without the token, with another run\'s token, and after the run ended — each an audit row, none a read', async () => {
    const a = await harness();
    const b = await harness({ token: 'dh-mcp-test-token-of-run-b-9876543210' });
    expect((await a.rpc('tools/list', {}, null)).status).toBe(401);
    // Run B's token at run A's door (and A's at B's): refused.
    const crossed = await a.rpc('tools/call', { name: 'run_status' }, 'dh-mcp-test-token-of-run-b-9876543210');
    expect(crossed.status).toBe(401);
    expect(crossed.body.error?.message).toMatch(/this run's loopback token/);
    expect((await b.rpc('tools/call', { name: 'run_status' }, token)).status).toBe(401);
    expect(a.reads.filter((r) => r.status === 'ok')).toEqual([]);
    expect(a.reads.map((r) => [r.method, r.status])).toEqual([['auth', 'refused'], ['auth', 'refused']]);
    // Nothing the sandbox sent is recorded as the token.
    expect(JSON.stringify(a.reads)).not.toContain('token-of-run');

    // endSession revokes: the token stops working the moment the door's loopback is revoked, and the gateway closes.
    a.loopback.revoke();
    const after = await a.rpc('tools/call', { name: 'run_status' });
    expect(after.status).toBe(401);
    expect(after.body.error?.message).toMatch(/revoked: the run has ended/);
    await a.t.gateway.close();
    await expect(a.rpc('tools/call', { name: 'run_status' })).rejects.toThrow();
  });

  it('reads only while a turn of the run is running; refuses a web origin', async () => {
    const h = await harness({}, false);
    const answer = await h.call('run_status');
    expect(answer.result?.isError).toBe(true);
    expect(text(answer)).toMatch(/no turn of this run is running/);
    const open = await harness();
    const res = await post(open.t, LOOPBACK_PATH, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { authorization: `Bearer ${token}`, origin: 'https://evil.example' });
    expect(res.status).toBe(403);
  });
});

describe('MCP loopback: hostile reads', () => {
  it('refuses URIs that were not declared, path escapes, links and non-files in a root', async () => {
    const h = await harness();
    const refused = async (uri: string, pattern: RegExp) => {
      const answer = await h.call('read_resource', { uri });
      expect(answer.result?.isError, uri).toBe(true);
      expect(text(answer), uri).toMatch(pattern);
      expect(text(answer), uri).not.toContain('OPERATOR-ONLY-SECRET');
    };
    await refused('docs://other', /not a resource of this run/);
    await refused(`file://${path.join(root, 'secret.txt')}`, /not a resource of this run/);
    await refused('tree://docs/../secret.txt', /not a path inside the resource's root/);
    await refused('tree://docs//etc/passwd', /not a path inside/);
    await refused('tree://docs/guides/./style.md', /not a path inside/);
    await refused('tree://docs/guides\\..\\..\\secret.txt', /not a path inside/);
    await refused('tree://docs/leak.txt', /link/);
    await refused('tree://docs/up/secret.txt', /link/);
    await refused('docs://linked', /link/);
    await refused('tree://docs/guides', /not a regular file/);
    await refused('tree://docs/missing.md', /no resource/);
    // resources/read says the same as a protocol error.
    const rr = await h.rpc('resources/read', { uri: 'tree://docs/../secret.txt' });
    expect(rr.body.error?.message).toMatch(/not a path inside/);
    expect(h.reads.filter((r) => r.status === 'refused').length).toBe(12);
  });

  it('refuses an oversized read with its size, a blob no step names, and a step page past the read cap', async () => {
    const h = await harness({ limits: { maxReadBytes: 16 * 1024 } });
    expect(text(await h.call('read_resource', { uri: 'docs://big' }))).toMatch(/307200 bytes, over the loopback's 16384 bytes per read/);
    expect(text(await h.call('read_blob', { blob: 'b'.repeat(64) }))).toMatch(/no blob b{64} among this run's steps/);
    expect(text(await h.call('read_blob', { blob: '../../etc/passwd' }))).toMatch(/must be the sha256/);
    expect(text(await h.call('list_steps', { after: 2 }))).toMatch(/over the loopback's 16384 bytes per read/);
    expect(text(await h.call('list_steps', { after: -1 }))).toMatch(/whole number/);
  });

  it('has no tool that acts: an unknown tool or method is a protocol error, and a flood is cut at the per-turn cap', async () => {
    const h = await harness({ limits: { maxCallsPerTurn: 20 } });
    for (const tool of ['write_file', 'run_command', 'approve', 'send_envelope']) {
      const answer = await h.call(tool, { path: '/etc/passwd', content: 'x' });
      expect(answer.error?.code).toBe(-32602);
      expect(answer.error?.message).toMatch(/the loopback only reads/);
    }
    expect((await h.rpc('prompts/get', { name: 'x' })).body.error?.code).toBe(-32601);
    // A flood: 100 more calls, 20 at a time (the gateway's connection cap stops more at once), each counted; past 20 a
    // turn, refused with the cap named.
    const answers: Answer[] = [];
    for (let i = 0; i < 5; i++) answers.push(...(await Promise.all(Array.from({ length: 20 }, () => h.call('run_status')))));
    const ok = answers.filter((a) => !a.result?.isError && a.result);
    expect(ok.length).toBe(16); // the 4 unknown tools counted against the cap too
    expect(text(answers.at(-1))).toMatch(/limit: end the turn/);
    // The next turn starts again from zero.
    h.loopback.beginTurn();
    expect((JSON.parse(text(await h.call('run_status'))) as { loopback: { callsThisTurn: number } }).loopback.callsThisTurn).toBe(1);
  });

  it('refuses a request body over its cap and a body that is not JSON-RPC', async () => {
    const h = await harness({ limits: { maxRequestBytes: 1024 } });
    const big = await post(h.t, LOOPBACK_PATH, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'run_status', arguments: { pad: 'z'.repeat(5000) } } }, { authorization: `Bearer ${token}` });
    expect(big.status).toBe(413);
    const notRpc = await post(h.t, LOOPBACK_PATH, { hello: 'world' }, { authorization: `Bearer ${token}` });
    expect((JSON.parse(notRpc.text) as Answer).error?.code).toBe(-32600);
  });
});

describe('MCP loopback: a resource proxied from another MCP server', () => {
  interface Seen { readonly method: string; readonly auth?: string; readonly session?: string; readonly params?: unknown }
  let upstream: http.Server;
  let url = '';
  const seen: Seen[] = [];
  beforeAll(async () => {
    upstream = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const m = JSON.parse(body) as { id?: number; method: string; params?: { uri?: string } };
        seen.push({ method: m.method, auth: req.headers.authorization, session: req.headers['mcp-session-id'] as string | undefined, params: m.params });
        if (m.id === undefined) return void res.writeHead(202).end();
        if (m.method === 'initialize') {
          res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'up-session-1' });
          return void res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: '2025-06-18', capabilities: { resources: {} }, serverInfo: { name: 'up', version: '1' } } }));
        }
        const uri = m.params?.uri ?? '';
        if (uri === 'upstream://hang') return; // never answers
        if (uri === 'upstream://missing') {
          res.writeHead(200, { 'content-type': 'application/json' });
          return void res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, error: { code: -32002, message: 'Resource not found' } }));
        }
        const text = uri === 'upstream://huge' ? 'h'.repeat(40_000) : `ticket ${uri}: the build is red`;
        // Answered as a server-sent stream, as many servers do.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { contents: [{ uri, mimeType: 'text/markdown', text }] } })}\n\n`);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/mcp`;
  });
  afterAll(() => new Promise<void>((resolve) => {
    upstream.closeAllConnections();
    upstream.close(() => resolve());
  }));

  const proxied = () =>
    harness({
      resources: [
        { uri: 'tickets://1', mcp: { url, uri: 'upstream://ticket/1', bearerEnv: 'TICKETS_TOKEN' } },
        { uri: 'tickets://missing', mcp: { url, uri: 'upstream://missing', bearerEnv: 'TICKETS_TOKEN' } },
        { uri: 'tickets://hang', mcp: { url, uri: 'upstream://hang', bearerEnv: 'TICKETS_TOKEN' } },
        { uri: 'tickets://huge', mcp: { url, uri: 'upstream://huge', bearerEnv: 'TICKETS_TOKEN' } },
        { uri: 'tickets://unset', mcp: { url, bearerEnv: 'NOT_SET' } },
      ],
      limits: { callTimeoutMs: 500, maxReadBytes: 16 * 1024 },
      workerEnv: (name) => (name === 'TICKETS_TOKEN' ? 'up-token-from-the-worker' : undefined),
    });

  it('reads exactly the declared URI upstream, with the worker\'s token and the server\'s session; nothing else is ever asked', async () => {
    const h = await proxied();
    seen.splice(0);
    expect(text(await h.call('read_resource', { uri: 'tickets://1' }))).toBe('ticket upstream://ticket/1: the build is red');
    expect(seen.map((s) => s.method)).toEqual(['initialize', 'notifications/initialized', 'resources/read']);
    expect(seen.every((s) => s.auth === 'Bearer up-token-from-the-worker')).toBe(true);
    expect(seen.slice(1).every((s) => s.session === 'up-session-1')).toBe(true);
    expect(seen[2]!.params).toEqual({ uri: 'upstream://ticket/1' });
    const rr = await h.rpc('resources/read', { uri: 'tickets://1' });
    expect(rr.body.result?.contents).toEqual([{ uri: 'tickets://1', mimeType: 'text/markdown', text: 'ticket upstream://ticket/1: the build is red' }]);
    // An undeclared URI — of the same server too — never reaches it.
    seen.splice(0);
    expect(text(await h.call('read_resource', { uri: 'tickets://2' }))).toMatch(/not a resource of this run/);
    expect(text(await h.call('read_resource', { uri: 'upstream://ticket/2' }))).toMatch(/not a resource of this run/);
    expect(seen).toEqual([]);
    // Nothing the harness can see holds the upstream token.
    expect(JSON.stringify(h.reads)).not.toContain('up-token-from-the-worker');
  });

  it('says what went wrong upstream: its refusal, no answer within the deadline, an answer over the bound, a token variable not set', async () => {
    const h = await proxied();
    expect(text(await h.call('read_resource', { uri: 'tickets://missing' }))).toMatch(/refused the read: Resource not found/);
    const started = Date.now();
    expect(text(await h.call('read_resource', { uri: 'tickets://hang' }))).toMatch(/no answer within 500 ms|took longer than 500 ms/);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(text(await h.call('read_resource', { uri: 'tickets://huge' }))).toMatch(/40000 bytes, over the loopback's 16384 bytes per read/);
    expect(text(await h.call('read_resource', { uri: 'tickets://unset' }))).toMatch(/needs the worker variable NOT_SET, which is not set/);
  });
});
