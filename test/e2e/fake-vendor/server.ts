/**
 * A fake model-vendor server on 127.0.0.1: the only thing faked in the end-to-end tests.
 * It answers scripted replies in order, records every request, and fails clearly when the script runs out.
 * Each wire protocol (Anthropic Messages, OpenAI Responses, Gemini, OpenAI chat completions) is a
 * `ProtocolHandler` in its own file, mounted on a path prefix.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A tool call the scripted model makes: JSON arguments, or (`freeform`) a raw text input for grammar tools. */
export interface ScriptedToolCall {
  readonly id?: string;
  readonly name: string;
  readonly input: Record<string, unknown>;
  /** Send as a freeform (custom) tool call with this raw input, where the protocol has them (OpenAI Responses). */
  readonly freeform?: string;
  /** The function's namespace (OpenAI Responses: a deferred tool, e.g. an MCP server's, found by `tool_search`). */
  readonly namespace?: string;
  /** Send as a client-executed `tool_search_call` with `input` as its arguments (OpenAI Responses); `name` is ignored. */
  readonly toolSearch?: true;
}

/** One scripted model reply: text and/or tool calls, with the usage to report, or an error. */
export interface ScriptedReply {
  /** Only requests this predicate accepts consume the reply (e.g. skip a CLI's title-generation call). */
  readonly match?: (request: RecordedRequest) => boolean;
  readonly text?: string;
  readonly toolCalls?: readonly ScriptedToolCall[];
  /**
   * Usage to report, normalised: `input` without cached tokens, `output` without `reasoning` (thinking tokens).
   * Each protocol writes it in its own wire shape (some fold reasoning into output, some report it apart).
   */
  readonly usage?: ScriptedUsage;
  /** Answer with this HTTP error instead. */
  readonly error?: { readonly status: number; readonly message: string };
  /** Delay before answering (for cancellation tests). */
  readonly delayMs?: number;
  /**
   * Stop the answer after its first `afterWrites` writes (a streamed reply's first events): `hang` keeps the connection
   * open and silent (a call in flight when its client is killed), `destroy` cuts it (a dropped stream). The reply is
   * still in `served`: a vendor bills a call it began to answer.
   */
  readonly cut?: { readonly afterWrites: number; readonly then: 'hang' | 'destroy' };
}

export interface ScriptedUsage {
  readonly input?: number;
  readonly output?: number;
  readonly cacheRead?: number;
  readonly cacheWrite?: number;
  readonly reasoning?: number;
}

/** The defaults a handler reports for fields a reply leaves out (see `servedUsage`). */
export const defaultServedUsage = { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 } as const;

/** The usage a reply really serves (what a vendor would bill), defaults filled in; zero for an error reply. */
export function servedUsage(reply: ScriptedReply): Required<ScriptedUsage> {
  if (reply.error) return { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 };
  return { ...defaultServedUsage, ...reply.usage };
}

export interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: unknown;
  readonly rawBody: string;
}

/** Writes one reply in a protocol's wire format (streaming or not, as the request asked). */
export type ProtocolHandler = (request: RecordedRequest, reply: ScriptedReply, res: http.ServerResponse) => void;

export interface FakeVendorOptions {
  /** Path prefix → handler, e.g. `{ '/v1/messages': anthropicMessages }`. Longest prefix wins. */
  readonly handlers: Readonly<Record<string, ProtocolHandler>>;
  /** Answer for requests no scripted reply matches (e.g. title calls); default: fail with HTTP 599. */
  readonly fallback?: (request: RecordedRequest) => ScriptedReply | undefined;
}

export interface FakeVendor {
  /** Base URL, e.g. `http://127.0.0.1:12345`. */
  readonly url: string;
  /** Every request received, in order. */
  readonly requests: RecordedRequest[];
  /** Requests that found no handler or no scripted reply: a test should assert this is empty. */
  readonly unexpected: RecordedRequest[];
  /** Every reply answered (scripted or fallback), in order, with the usage it served. */
  readonly served: { readonly request: RecordedRequest; readonly reply: ScriptedReply; readonly usage: Required<ScriptedUsage> }[];
  /** Appends replies to the script. */
  script(...replies: ScriptedReply[]): void;
  /** Replies not yet consumed. */
  remaining(): number;
  /** Drops the replies not yet consumed (after a test that stopped a CLI mid-script). */
  clearScript(): void;
  close(): Promise<void>;
}

export async function startFakeVendor(options: FakeVendorOptions): Promise<FakeVendor> {
  const queue: ScriptedReply[] = [];
  const requests: RecordedRequest[] = [];
  const unexpected: RecordedRequest[] = [];
  const served: FakeVendor['served'] = [];
  const prefixes = Object.keys(options.handlers).sort((a, b) => b.length - a.length);

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      let body: unknown = undefined;
      try {
        body = rawBody ? JSON.parse(rawBody) : undefined;
      } catch {
        body = rawBody;
      }
      const recorded: RecordedRequest = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body, rawBody };
      requests.push(recorded);
      const path = recorded.url.split('?')[0] ?? '/';
      const prefix = prefixes.find((p) => path.startsWith(p));
      if (recorded.method === 'HEAD' || recorded.method === 'GET') {
        // Connectivity probes (claude sends HEAD /) and model listings: answer empty, consume nothing.
        res.writeHead(200, { 'content-type': 'application/json' }).end(recorded.method === 'GET' ? '{"data":[],"models":[]}' : undefined);
        return;
      }
      if (!prefix) {
        unexpected.push(recorded);
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `fake vendor: no handler for ${path}` } }));
        return;
      }
      const index = queue.findIndex((r) => !r.match || r.match(recorded));
      const reply = index >= 0 ? queue.splice(index, 1)[0] : options.fallback?.(recorded);
      if (!reply) {
        unexpected.push(recorded);
        res.writeHead(599, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'fake vendor: script exhausted' } }));
        return;
      }
      const answer = () => {
        if (!res.destroyed) served.push({ request: recorded, reply, usage: servedUsage(reply) });
        if (reply.error) {
          res.writeHead(reply.error.status, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { type: 'api_error', message: reply.error.message, code: reply.error.status } }));
          return;
        }
        options.handlers[prefix]!(recorded, reply, reply.cut ? cutAfter(res, reply.cut) : res);
      };
      if (reply.delayMs) setTimeout(answer, reply.delayMs);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    unexpected,
    served,
    script: (...replies) => void queue.push(...replies),
    remaining: () => queue.length,
    clearScript: () => void queue.splice(0, queue.length),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** `res` as a handler sees it, cut after `afterWrites` writes (see `ScriptedReply.cut`). */
function cutAfter(res: http.ServerResponse, cut: NonNullable<ScriptedReply['cut']>): http.ServerResponse {
  let writes = 0;
  const stopped = () => writes >= cut.afterWrites;
  return new Proxy(res, {
    get(target, key, receiver) {
      if (key === 'write') {
        return (...args: Parameters<http.ServerResponse['write']>) => {
          if (stopped()) return true;
          writes += 1;
          const written = target.write(...args);
          if (stopped() && cut.then === 'destroy') setTimeout(() => target.socket?.destroy(), 20);
          return written;
        };
      }
      if (key === 'end') {
        return (...args: unknown[]) => {
          if (!stopped()) return (target.end as (...a: unknown[]) => http.ServerResponse)(...args);
          return target;
        };
      }
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** Writes one server-sent event. */
export function sse(res: http.ServerResponse, data: unknown, event?: string): void {
  if (event) res.write(`event: ${event}\n`);
  res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
}
