/**
 * A codec server (Temporal's remote codec contract) so the Web UI and `temporal workflow show --codec-endpoint`
 * can show encrypted payloads decoded to operators who can reach it:
 *
 *   POST /decode, POST /encode (also /{namespace}/decode, /{namespace}/encode)
 *   body and answer: {"payloads":[{"metadata":{"encoding":"<base64>"},"data":"<base64>"}]}   (proto3 JSON)
 *
 * Every request carries a configured bearer token (`Authorization: Bearer …`, or `/t/<token>/…` in the path for a
 * Web UI that cannot send headers), and each token names the namespaces it may decode for (codec-auth.ts). CORS
 * answers only the configured origins, and a request from any other origin is refused outright. `/encode` mints
 * payloads the workers accept, so it is off unless enabled.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { CodecAuthorizer, type CodecToken } from './codec-auth.js';
import type { OperatorDirectory } from '../operators/index.js';

/** A payload in proto3 JSON: every bytes field base64. */
export interface JsonPayload {
  metadata?: Record<string, string> | null;
  data?: string | null;
}

export function payloadFromJson(json: JsonPayload): Payload {
  const metadata: Record<string, Uint8Array> = {};
  for (const [key, value] of Object.entries(json.metadata ?? {})) metadata[key] = Buffer.from(value, 'base64');
  return { metadata, data: Buffer.from(json.data ?? '', 'base64') };
}

export function payloadToJson(payload: Payload): JsonPayload {
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(payload.metadata ?? {})) if (value) metadata[key] = Buffer.from(value).toString('base64');
  return { metadata, data: Buffer.from(payload.data ?? new Uint8Array()).toString('base64') };
}

export interface CodecServerOptions {
  readonly codec: PayloadCodec;
  /** Who may call it (see codec-auth.ts): configured tokens, and operators with the `read` role. */
  readonly tokens: readonly CodecToken[];
  /** The operators whose signed read tokens count (src/operators). */
  readonly operators?: () => OperatorDirectory;
  /** Serve `/encode` too (default off: only the Temporal CLI's `--codec-endpoint` for `workflow start` needs it). */
  readonly allowEncode?: boolean;
  /** Origins allowed by CORS (e.g. the Web UI at http://127.0.0.1:8233); a request from any other origin is refused. */
  readonly corsOrigins?: readonly string[];
  readonly host?: string;
  /** 0 picks a free port. */
  readonly port?: number;
  /** Largest request body accepted (default 8 MiB; Temporal payloads are at most 2 MB each). */
  readonly maxBodyBytes?: number;
  readonly log?: (line: string) => void;
}

export interface CodecServer {
  /** e.g. http://127.0.0.1:8888 */
  readonly url: string;
  readonly server: http.Server;
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        reject(new HttpError(413, `request body over ${limit} bytes`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function parsePayloads(body: Buffer): JsonPayload[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new HttpError(400, 'body is not JSON; send {"payloads":[...]}');
  }
  const payloads = (parsed as { payloads?: unknown } | null)?.payloads;
  if (!Array.isArray(payloads)) throw new HttpError(400, 'body has no "payloads" array');
  for (const p of payloads) {
    if (typeof p !== 'object' || p === null) throw new HttpError(400, 'each payload is an object with "metadata" and "data"');
  }
  return payloads as JsonPayload[];
}

/** A request's route: the action, the namespace its path names, and a token its path carries. */
interface Route {
  readonly action: 'decode' | 'encode';
  readonly namespace?: string;
  readonly pathToken?: string;
}

/** `[/t/<token>][/<namespace>]/(decode|encode)`, nothing else. */
function routeOf(url: string | undefined): Route | undefined {
  const parts = (url ?? '/').split('?')[0]!.split('/').filter(Boolean).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return '\0';
    }
  });
  let pathToken: string | undefined;
  if (parts[0] === 't' && parts.length >= 3) {
    pathToken = parts[1];
    parts.splice(0, 2);
  }
  const action = parts.pop();
  if ((action !== 'decode' && action !== 'encode') || parts.length > 1 || parts.some((p) => !/^[\w.-]{1,255}$/.test(p))) return undefined;
  return { action, ...(parts[0] !== undefined ? { namespace: parts[0] } : {}), ...(pathToken !== undefined ? { pathToken } : {}) };
}

function bearer(header: string | undefined): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return match?.[1];
}

/** Starts the codec server; resolves once it listens. Throws `CodecAuthConfigError` without tokens. */
export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  const auth = new CodecAuthorizer(options.tokens, options.operators);
  const origins = new Set(options.corsOrigins ?? []);
  const limit = options.maxBodyBytes ?? 8 * 1024 * 1024;
  const server = http.createServer((req, res) => {
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    const refuse = (status: number, message: string, who?: string) => {
      options.log?.(`codec server: refused ${req.method} ${route?.action ?? 'request'} (${status}): ${message}${who ? ` [${who}]` : ''}`);
      answer(status, { error: message }, status === 401 ? { 'WWW-Authenticate': 'Bearer realm="durable-harness codec"' } : {});
    };
    const route = routeOf(req.url);
    const origin = req.headers.origin;
    // A browser page of another origin never gets an answer, not even to its preflight.
    if (origin !== undefined && !origins.has(origin)) return refuse(403, `origin ${origin} is not allowed; add it with --cors-origin`);
    if (origin !== undefined) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
      res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
      res.setHeader('Access-Control-Max-Age', '600');
      res.setHeader('Vary', 'Origin');
    }
    if (!route) return answer(404, { error: 'not found: POST /decode (or /{namespace}/decode)' });
    if (req.method === 'OPTIONS') {
      res.writeHead(204);
      return res.end();
    }
    if (req.method !== 'POST') return answer(405, { error: `${req.method} not allowed: POST /${route.action}` });
    const token = auth.identify(route.pathToken ?? bearer(req.headers.authorization));
    if (!token) return refuse(401, 'a valid access token is required: send "Authorization: Bearer <token>"');
    const header = req.headers['x-namespace'];
    const named = typeof header === 'string' && header !== '' ? header : undefined;
    if (route.namespace !== undefined && named !== undefined && route.namespace !== named) {
      return refuse(400, `the path names namespace "${route.namespace}" and X-Namespace "${named}"`, token.name);
    }
    const namespace = route.namespace ?? named;
    if (!CodecAuthorizer.allows(token, namespace)) {
      return refuse(403, namespace === undefined ? 'this token is limited to some namespaces: name one (X-Namespace or /{namespace}/decode)' : `this token may not decode for namespace "${namespace}"`, token.name);
    }
    if (route.action === 'encode' && !options.allowEncode) return refuse(403, '/encode is disabled on this codec server (start it with --allow-encode)', token.name);
    readBody(req, limit)
      .then(async (body) => {
        const payloads = parsePayloads(body).map(payloadFromJson);
        const out = route.action === 'decode' ? await options.codec.decode(payloads) : await options.codec.encode(payloads);
        answer(200, { payloads: out.map(payloadToJson) });
      })
      .catch((e: unknown) => {
        const status = e instanceof HttpError ? e.status : 400;
        const message = e instanceof Error ? e.message : String(e);
        options.log?.(`codec server: ${route.action} failed (${status}): ${message}`);
        if (!res.headersSent) answer(status, { error: message });
      });
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const shownHost = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  return {
    url: `http://${shownHost}:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
