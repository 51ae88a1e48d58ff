/**
 * The MCP loopback: a read-only MCP server (streamable HTTP, JSON answers, no server-sent stream) that the run's
 * gateway serves at `LOOPBACK_PATH` on the sandbox's side of the door. The harness reads the run's own data — its
 * status and budget, its steps by cursor, the blobs those steps name — and the resources the operator registered,
 * mid-turn; it acts only through the turn-end envelope, as before: no tool here writes, runs or sends anything.
 *
 * Every request needs the run's bearer token (minted with the gateway, forgotten when it closes at `endSession`);
 * reads happen only while a turn of the run is running; each read is bounded in bytes and time, each turn in calls
 * and bytes, and each leaves an audit row (`onRead`). See docs/mcp.md.
 */
import { constants, type Stats } from 'node:fs';
import { lstat, open, readdir, realpath } from 'node:fs/promises';
import type http from 'node:http';
import nodePath from 'node:path';
import { DEFAULT_LOOPBACK_LIMITS, LOOPBACK_SERVER_NAME, type HostResource, type LoopbackLimits, type LoopbackRead, type LoopbackTool } from '../contracts/loopback.js';
import { sameSecret } from './decide.js';

/** The run's data as the loopback reads it (the door supplies it from the ledger). */
export interface LoopbackData {
  /** The run's status and what is left of its budget, as JSON. */
  status(): Promise<unknown>;
  /** The run's steps after `after` (exclusive), oldest first, at most `limit`. */
  steps(after: number, limit: number): Promise<readonly { readonly seq: number; readonly turn: number; readonly type: string; readonly payload: unknown }[]>;
  /** A blob this run's steps name (`undefined`: no such blob, or another run's). */
  blob(hash: string): Promise<string | undefined>;
  /** For a sub-agent: its parent run's steps, as `steps` (`undefined`: this run has no parent). */
  parentSteps?(after: number, limit: number): Promise<readonly { readonly seq: number; readonly turn: number; readonly type: string; readonly payload: unknown }[] | undefined>;
}

export interface LoopbackOptions {
  readonly token: string;
  readonly data: LoopbackData;
  readonly resources?: readonly HostResource[];
  readonly limits?: Partial<LoopbackLimits>;
  /** Every read's audit row. */
  readonly onRead: (read: LoopbackRead) => void;
  /** Why reads are refused now (no turn of the run is running), or `undefined`. */
  readonly closedReason?: () => string | undefined;
  /** A variable of the worker's environment (an upstream MCP server's token, `mcp.bearerEnv`). */
  readonly workerEnv?: (name: string) => string | undefined;
}

export interface Loopback {
  /** Serves one HTTP request for `LOOPBACK_PATH`. */
  handle(req: http.IncomingMessage, res: http.ServerResponse): void;
  /** A new turn: its call and byte counts start at zero. */
  beginTurn(): void;
  /** Reads and bytes this turn. */
  counts(): { readonly calls: number; readonly bytes: number; readonly refused: number };
  /** Forgets the token: every later request is refused. */
  revoke(): void;
}

/** Protocol revisions this server speaks (newest first); it answers a client's own when it knows it. */
const protocolVersions = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
/** Rows written per turn at most; refusals past it are counted in the next row instead. */
const maxRowsPerTurn = 500;
const maxTargetChars = 300;
/** Steps per page, and bytes of one step's payload in a page (a longer one is cut, with its full size said). */
const maxStepsPerPage = 50;
const maxPayloadBytes = 16 * 1024;
/** Entries a directory resource lists, and how deep. */
const maxListed = 200;
const maxDepth = 4;

const readOnly = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false } as const;

const toolDefinitions: readonly { name: LoopbackTool; description: string; inputSchema: Record<string, unknown> }[] = [
  {
    name: 'run_status',
    description: "This run's status: its workflow id, the turn running now, what is left of its token and cost budget, and what this turn has read and spent so far.",
    inputSchema: { type: 'object', properties: {}, additionalProperties: false },
  },
  {
    name: 'list_steps',
    description:
      "This run's steps so far, oldest first: each turn's envelope, the actions' results, sub-agents' results, replies. Page with `after` (the last `seq` you saw); at most 50 steps a page.",
    inputSchema: {
      type: 'object',
      properties: { after: { type: 'integer', minimum: 0, description: 'Return steps with a seq greater than this (default 0).' }, limit: { type: 'integer', minimum: 1, maximum: maxStepsPerPage } },
      additionalProperties: false,
    },
  },
  {
    name: 'parent_steps',
    description: "For a sub-agent: its parent run's steps so far (the work it was handed this task from), oldest first, 50 a page (`after`: the last `seq` you saw).",
    inputSchema: {
      type: 'object',
      properties: { after: { type: 'integer', minimum: 0 }, limit: { type: 'integer', minimum: 1, maximum: maxStepsPerPage } },
      additionalProperties: false,
    },
  },
  {
    name: 'read_blob',
    description: 'A large text this run stored by reference (a step payload shows it as {"blob": "<sha256>", "bytes": N}). Read it in ranges with `offset`.',
    inputSchema: {
      type: 'object',
      properties: { blob: { type: 'string', pattern: '^[0-9a-f]{64}$' }, offset: { type: 'integer', minimum: 0, description: 'First character to return (default 0).' } },
      required: ['blob'],
      additionalProperties: false,
    },
  },
  {
    name: 'list_resources',
    description: 'The resources the operator made readable to this run (documents, files under a root), with their exact URIs.',
    inputSchema: { type: 'object', properties: {}, additionalProperties: false },
  },
  {
    name: 'read_resource',
    description: 'Reads one resource by its exact URI (from list_resources).',
    inputSchema: { type: 'object', properties: { uri: { type: 'string' } }, required: ['uri'], additionalProperties: false },
  },
];

/** A refusal or failure the harness is told about (a tool's `isError` answer, or a JSON-RPC error for resources). */
class ReadRefused extends Error {
  constructor(
    message: string,
    readonly status: 'refused' | 'error' = 'refused',
    readonly code = -32602,
    readonly unknownTool = false,
  ) {
    super(message);
  }
}

interface Rpc {
  readonly jsonrpc?: unknown;
  readonly id?: unknown;
  readonly method?: unknown;
  readonly params?: unknown;
}

export function createLoopback(options: LoopbackOptions): Loopback {
  const limits: LoopbackLimits = { ...DEFAULT_LOOPBACK_LIMITS, ...options.limits };
  let token: string | undefined = options.token;
  let calls = 0;
  let bytes = 0;
  let refused = 0;
  let rows = 0;
  let suppressed = 0;
  const resources = options.resources ?? [];

  const record = (read: LoopbackRead): void => {
    if (read.status !== 'ok' && rows >= maxRowsPerTurn) {
      suppressed += 1;
      return;
    }
    rows += 1;
    const carried = suppressed;
    suppressed = 0;
    try {
      options.onRead(carried > 0 ? { ...read, suppressed: carried } : read);
    } catch {
      // the sink's problem
    }
  };

  const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): number => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers }).end(text);
    return Buffer.byteLength(text);
  };

  const refuseRequest = (res: http.ServerResponse, status: number, message: string, at: number): void => {
    const sent = json(res, status, { jsonrpc: '2.0', id: null, error: { code: -32001, message } }, status === 401 ? { 'www-authenticate': 'Bearer realm="durable-harness"' } : {});
    refused += 1;
    record({ at, method: 'auth', target: '', status: 'refused', bytes: sent, durationMs: 0, reason: message });
  };

  /** A read's answer text, counted against the turn's bounds before it is sent. */
  const charge = (text: string): string => {
    const size = Buffer.byteLength(text);
    if (size > limits.maxReadBytes) throw new ReadRefused(`the answer is ${size} bytes, over the loopback's ${limits.maxReadBytes} bytes per read: read a smaller range`);
    if (bytes + size > limits.maxBytesPerTurn) throw new ReadRefused(`this turn has read ${bytes} bytes through the loopback; ${size} more would pass its ${limits.maxBytesPerTurn} bytes per turn`);
    bytes += size;
    return text;
  };

  const tool = async (name: string, args: Record<string, unknown>): Promise<string> => {
    switch (name as LoopbackTool) {
      case 'run_status':
        return charge(JSON.stringify({ ...((await options.data.status()) as object), loopback: { callsThisTurn: calls, callsLeft: limits.maxCallsPerTurn - calls, bytesThisTurn: bytes } }, null, 2));
      case 'list_steps':
      case 'parent_steps': {
        const after = integer(args.after, 'after') ?? 0;
        const limit = Math.min(integer(args.limit, 'limit') ?? maxStepsPerPage, maxStepsPerPage);
        const steps = name === 'list_steps' ? await options.data.steps(after, limit) : await options.data.parentSteps?.(after, limit);
        if (!steps) throw new ReadRefused('this run is not a sub-agent: it has no parent run to read');
        const page = steps.map((s) => ({ seq: s.seq, turn: s.turn, type: s.type, payload: clippedPayload(s.payload) }));
        const last = page.at(-1);
        return charge(JSON.stringify({ steps: page, ...(page.length === limit && last ? { next: { after: last.seq } } : {}) }, null, 2));
      }
      case 'read_blob': {
        const hash = typeof args.blob === 'string' ? args.blob : '';
        if (!/^[0-9a-f]{64}$/.test(hash)) throw new ReadRefused('`blob` must be the sha256 (64 lowercase hex) a step payload names');
        const offset = integer(args.offset, 'offset') ?? 0;
        const text = await options.data.blob(hash);
        if (text === undefined) throw new ReadRefused(`no blob ${hash} among this run's steps`);
        const chunk = sliceToBytes(text.slice(offset), limits.maxReadBytes - 200);
        const rest = text.length - offset - chunk.length;
        return charge(rest > 0 ? `${chunk}\n\n[${rest} more characters: read_blob with offset ${offset + chunk.length}]` : chunk);
      }
      case 'list_resources':
        return charge(JSON.stringify({ resources: await listResources() }, null, 2));
      case 'read_resource':
        return charge((await readResource(typeof args.uri === 'string' ? args.uri : '')).text);
      default:
        throw new ReadRefused(`no tool ${JSON.stringify(name).slice(0, 80)}: the loopback only reads (${toolDefinitions.map((t) => t.name).join(', ')}); act with the turn-end envelope`, 'refused', -32602, true);
    }
  };

  const listResources = async (): Promise<{ uri: string; name: string; description?: string; mimeType: string }[]> => {
    const out: { uri: string; name: string; description?: string; mimeType: string }[] = [];
    for (const r of resources) {
      const base = { ...(r.description ? { description: r.description } : {}), mimeType: r.mimeType ?? 'text/plain' };
      if ('root' in r) {
        for (const rel of await listFiles(r.root)) out.push({ uri: `${r.uri}${rel}`, name: rel, ...base });
      } else out.push({ uri: r.uri, name: r.uri, ...base });
      if (out.length >= maxListed) break;
    }
    return out.slice(0, maxListed);
  };

  const readResource = async (uri: string): Promise<{ text: string; mimeType: string }> => {
    if (uri === '') throw new ReadRefused('`uri` is required: one of the URIs list_resources gives');
    const exact = resources.find((r) => !('root' in r) && r.uri === uri);
    if (exact) {
      const mimeType = exact.mimeType ?? 'text/plain';
      if ('text' in exact) return { text: exact.text, mimeType };
      if ('file' in exact) return { text: await readFileBounded(exact.file, undefined, limits.maxReadBytes), mimeType };
      if ('mcp' in exact) {
        const token = exact.mcp.bearerEnv ? options.workerEnv?.(exact.mcp.bearerEnv) : undefined;
        if (exact.mcp.bearerEnv && !token) throw new ReadRefused(`the resource's MCP server needs the worker variable ${exact.mcp.bearerEnv}, which is not set`, 'error', -32603);
        return await readUpstream(exact.mcp.url, exact.mcp.uri ?? uri, token, limits.maxReadBytes, limits.callTimeoutMs, mimeType);
      }
    }
    const tree = resources.find((r): r is Extract<HostResource, { root: string }> => 'root' in r && uri.startsWith(r.uri));
    if (tree) return { text: await readFileBounded(tree.root, uri.slice(tree.uri.length), limits.maxReadBytes), mimeType: tree.mimeType ?? 'text/plain' };
    throw new ReadRefused(`${clip(uri)} is not a resource of this run: only the exact URIs list_resources gives can be read`);
  };

  /** One JSON-RPC message's answer (`undefined` for a notification). */
  const answer = async (message: Rpc, at: number): Promise<unknown> => {
    const id = message.id;
    const isRequest = id !== undefined && id !== null;
    if (message.jsonrpc !== '2.0' || typeof message.method !== 'string') return { jsonrpc: '2.0', id: isRequest ? id : null, error: { code: -32600, message: 'not a JSON-RPC 2.0 request' } };
    if (!isRequest) return undefined; // notifications/initialized, cancelled: nothing to answer
    const ok = (result: unknown) => ({ jsonrpc: '2.0', id, result });
    const fail = (code: number, text: string) => ({ jsonrpc: '2.0', id, error: { code, message: text } });
    const params = (typeof message.params === 'object' && message.params !== null ? message.params : {}) as Record<string, unknown>;
    switch (message.method) {
      case 'initialize': {
        const asked = typeof params.protocolVersion === 'string' ? params.protocolVersion : '';
        return ok({
          protocolVersion: protocolVersions.includes(asked) ? asked : protocolVersions[0],
          capabilities: { tools: { listChanged: false }, resources: { listChanged: false, subscribe: false } },
          serverInfo: { name: LOOPBACK_SERVER_NAME, version: '1' },
          instructions: "Read-only access to this durable-harness run's own data and the resources its operator registered. Nothing here acts: end the turn with the envelope to act.",
        });
      }
      case 'ping':
        return ok({});
      case 'tools/list':
        return ok({ tools: toolDefinitions.map((t) => ({ ...t, annotations: { title: t.name, ...readOnly } })) });
      case 'resources/templates/list':
        return ok({ resourceTemplates: [] });
      case 'prompts/list':
        return ok({ prompts: [] });
      case 'tools/call':
      case 'resources/read': {
        const method = message.method;
        const target = clip(method === 'tools/call' ? String(params.name ?? '') : String(params.uri ?? ''));
        const started = performance.now();
        const done = (status: LoopbackRead['status'], size: number, reason?: string) => {
          if (status !== 'ok') refused += 1;
          record({ at, method, target, status, bytes: size, durationMs: Math.round((performance.now() - started) * 100) / 100, ...(reason ? { reason: clip(reason) } : {}) });
        };
        try {
          const closed = options.closedReason?.();
          if (closed) throw new ReadRefused(closed);
          if (calls >= limits.maxCallsPerTurn) throw new ReadRefused(`this turn has made ${calls} loopback reads, its limit: end the turn (the count starts again next turn)`);
          calls += 1;
          const work: Promise<unknown> =
            method === 'tools/call'
              ? tool(String(params.name ?? ''), (typeof params.arguments === 'object' && params.arguments !== null ? params.arguments : {}) as Record<string, unknown>).then((text) => ({
                  content: [{ type: 'text', text }],
                }))
              : readResource(String(params.uri ?? '')).then((r) => ({ contents: [{ uri: String(params.uri), mimeType: r.mimeType, text: charge(r.text) }] }));
          const result = await withDeadline(work, limits.callTimeoutMs);
          done('ok', Buffer.byteLength(JSON.stringify(result)));
          return ok(result);
        } catch (error) {
          const known = error instanceof ReadRefused;
          const text = known ? error.message : 'the read failed on the worker (see its log)';
          done(known ? error.status : 'error', Buffer.byteLength(text), known ? text : (error as Error).message);
          // A tool's failure is the model's to see (isError); an unknown tool or resource is a protocol error.
          if (known && error.unknownTool) return fail(-32602, text);
          if (method === 'tools/call') return ok({ content: [{ type: 'text', text }], isError: true });
          return fail(known ? error.code : -32603, text);
        }
      }
      default:
        return fail(-32601, `method ${clip(message.method)} is not served: the loopback has tools and resources only`);
    }
  };

  const handle = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const at = Date.now();
    if (token === undefined) return refuseRequest(res, 401, "the run's loopback token is revoked: the run has ended", at);
    const auth = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!auth || !sameSecret(auth[1]!, token)) return refuseRequest(res, 401, `the request needs this run's loopback token (Authorization: Bearer $${'DURABLE_HARNESS_MCP_TOKEN'})`, at);
    // A browser page the harness opened must not reach it (DNS rebinding): no foreign Origin.
    const origin = req.headers.origin;
    if (origin !== undefined && !/^https?:\/\/(127\.0\.0\.1|localhost)(:\d+)?$/i.test(origin)) return refuseRequest(res, 403, 'requests from a web origin are refused', at);
    if (req.method === 'GET' || req.method === 'DELETE') {
      // No server-sent stream and no session to end: every answer comes with its request.
      res.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    if (req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limits.maxRequestBytes) {
        if (!over) {
          over = true;
          json(res, 413, { jsonrpc: '2.0', id: null, error: { code: -32600, message: `the request is over ${limits.maxRequestBytes} bytes` } }, { connection: 'close' });
          req.destroy();
        }
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (over) return;
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        json(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'the body is not JSON' } });
        return;
      }
      // A batch is answered in order, one message at a time (its reads count one by one).
      const messages = Array.isArray(body) ? (body as Rpc[]).slice(0, 20) : [body as Rpc];
      void (async () => {
        const answers: unknown[] = [];
        for (const m of messages) {
          const a = await answer(typeof m === 'object' && m !== null ? m : {}, at);
          if (a !== undefined) answers.push(a);
        }
        if (res.destroyed) return;
        if (answers.length === 0) res.writeHead(202).end();
        else json(res, 200, Array.isArray(body) ? answers : answers[0]);
      })();
    });
    req.on('error', () => res.destroy());
  };

  return {
    handle,
    beginTurn: () => {
      calls = 0;
      bytes = 0;
      refused = 0;
      rows = 0;
    },
    counts: () => ({ calls, bytes, refused }),
    revoke: () => {
      token = undefined;
    },
  };
}

function integer(value: unknown, name: string): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw new ReadRefused(`\`${name}\` must be a whole number ≥ 0`);
  return value;
}

function clip(text: string): string {
  return text.length > maxTargetChars ? `${text.slice(0, maxTargetChars)}…` : text;
}

/** A step payload as a page shows it: whole when small, else its opening and its size. */
function clippedPayload(payload: unknown): unknown {
  const text = JSON.stringify(payload) ?? 'null';
  if (Buffer.byteLength(text) <= maxPayloadBytes) return payload;
  return { clipped: `${sliceToBytes(text, maxPayloadBytes)}…`, bytes: Buffer.byteLength(text) };
}

/** The longest prefix of `text` within `max` UTF-8 bytes. */
function sliceToBytes(text: string, max: number): string {
  if (Buffer.byteLength(text) <= max) return text;
  let end = Math.min(text.length, max);
  while (end > 0 && Buffer.byteLength(text.slice(0, end)) > max) end = Math.floor(end * 0.9);
  return text.slice(0, end);
}

function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ReadRefused(`the read took longer than ${ms} ms`, 'error', -32603)), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Reads a regular file — `root` itself, or `rel` below it — never following a link and never leaving the root; at
 * most `max` bytes (a larger file is refused with its size: the loopback never hands out part of a file unsaid).
 */
async function readFileBounded(root: string, rel: string | undefined, max: number): Promise<string> {
  let file = root;
  if (rel !== undefined) {
    const segments = rel.split('/');
    if (rel === '' || rel.includes('\0') || rel.includes('\\') || rel.startsWith('/') || segments.some((s) => s === '' || s === '.' || s === '..')) {
      throw new ReadRefused(`${clip(rel)} is not a path inside the resource's root: use a relative path of plain segments (no "..", no leading "/")`);
    }
    const realRoot = await realpath(root).catch(() => {
      throw new ReadRefused('the resource root is not readable on this worker', 'error', -32603);
    });
    // Every segment must be a real directory (the last a regular file), none a link: nothing outside the root.
    let at = realRoot;
    for (const [i, segment] of segments.entries()) {
      at = nodePath.join(at, segment);
      const stat = await lstat(at).catch(() => undefined);
      if (!stat) throw new ReadRefused(`no resource ${clip(rel)} under this root`);
      if (stat.isSymbolicLink()) throw new ReadRefused(`${clip(rel)} passes through a link: links are not followed`);
      if (i < segments.length - 1 && !stat.isDirectory()) throw new ReadRefused(`no resource ${clip(rel)} under this root`);
    }
    file = at;
  }
  let handle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new ReadRefused(code === 'ELOOP' ? 'the resource is a link: links are not followed' : 'the resource file cannot be read on this worker', code === 'ELOOP' ? 'refused' : 'error', -32603);
  }
  try {
    const stat: Stats = await handle.stat();
    if (!stat.isFile()) throw new ReadRefused('the resource is not a regular file');
    if (stat.size > max) throw new ReadRefused(`the resource is ${stat.size} bytes, over the loopback's ${max} bytes per read`);
    const buffer = Buffer.alloc(Math.min(stat.size, max) + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    if (bytesRead > max) throw new ReadRefused(`the resource is over the loopback's ${max} bytes per read`);
    const content = buffer.subarray(0, bytesRead);
    if (content.includes(0)) throw new ReadRefused('the resource is not text');
    return content.toString('utf8');
  } finally {
    await handle.close();
  }
}

/**
 * Reads one resource of another MCP server over streamable HTTP, as a minimal client: initialize, initialized,
 * `resources/read` of exactly `uri`. The answer (JSON or a server-sent stream) is read up to a bound and within the
 * read's deadline; only text content is passed on.
 */
async function readUpstream(url: string, uri: string, token: string | undefined, max: number, timeoutMs: number, mimeType: string): Promise<{ text: string; mimeType: string }> {
  const signal = AbortSignal.timeout(timeoutMs);
  let session: string | undefined;
  const cap = max + 64 * 1024;
  const post = async (body: Record<string, unknown>): Promise<Record<string, unknown> | undefined> => {
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        signal,
        redirect: 'error',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(session ? { 'mcp-session-id': session } : {}),
        },
        body: JSON.stringify(body),
      });
    } catch (error) {
      throw new ReadRefused(`the resource's MCP server could not be read (${(error as Error).name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : 'unreachable'})`, 'error', -32603);
    }
    session ??= res.headers.get('mcp-session-id') ?? undefined;
    if (body.id === undefined) {
      await res.body?.cancel();
      return undefined;
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new ReadRefused(`the resource's MCP server answered HTTP ${res.status}`, 'error', -32603);
    }
    const text = await boundedBody(res, cap);
    const stream = (res.headers.get('content-type') ?? '').includes('text/event-stream');
    const messages = stream ? text.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()) : [text];
    for (const m of messages) {
      try {
        const parsed = JSON.parse(m) as Record<string, unknown>;
        if (parsed.id === body.id) return parsed;
      } catch {
        // not this message
      }
    }
    throw new ReadRefused("the resource's MCP server gave no answer to the read", 'error', -32603);
  };
  await post({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'durable-harness-loopback', version: '1' } } });
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  const answer = await post({ jsonrpc: '2.0', id: 2, method: 'resources/read', params: { uri } });
  const error = answer?.error as { message?: unknown } | undefined;
  if (error) throw new ReadRefused(`the resource's MCP server refused the read: ${clip(String(error.message ?? 'no message'))}`, 'error', -32603);
  const contents = (answer?.result as { contents?: unknown } | undefined)?.contents;
  const first = Array.isArray(contents) ? (contents[0] as { text?: unknown; mimeType?: unknown } | undefined) : undefined;
  if (typeof first?.text !== 'string') throw new ReadRefused("the resource's MCP server answered no text content", 'error', -32603);
  if (Buffer.byteLength(first.text) > max) throw new ReadRefused(`the resource is ${Buffer.byteLength(first.text)} bytes, over the loopback's ${max} bytes per read`);
  return { text: first.text, mimeType: typeof first.mimeType === 'string' ? first.mimeType : mimeType };
}

/** A response body as text, refused past `cap` bytes. */
async function boundedBody(res: Response, cap: number): Promise<string> {
  const reader = res.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > cap) {
      await reader.cancel();
      throw new ReadRefused(`the resource's MCP server answered over ${cap} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Regular files under `root` (relative paths), breadth first, bounded in count and depth; links are skipped. */
async function listFiles(root: string): Promise<string[]> {
  const out: string[] = [];
  let level: string[] = [''];
  for (let depth = 0; depth < maxDepth && level.length > 0 && out.length < maxListed; depth++) {
    const next: string[] = [];
    for (const dir of level) {
      const entries = await readdir(nodePath.join(root, dir), { withFileTypes: true }).catch(() => []);
      for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
        const rel = dir ? `${dir}/${entry.name}` : entry.name;
        if (entry.isFile()) out.push(rel);
        else if (entry.isDirectory()) next.push(rel);
        if (out.length >= maxListed) break;
      }
    }
    level = next;
  }
  return out;
}
