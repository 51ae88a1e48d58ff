/**
 * A codec server (Temporal's remote codec contract) so the Web UI and `temporal workflow show --codec-endpoint`
 * can show encrypted payloads decoded to operators who can reach it:
 *
 *   POST /decode, POST /encode (also /{namespace}/decode, /{namespace}/encode)
 *   body and answer: {"payloads":[{"metadata":{"encoding":"<base64>"},"data":"<base64>"}]}   (proto3 JSON)
 *
 * CORS answers the configured origins (the Web UI's address) so the browser may call it. Whoever reaches this
 * server can read every payload: bind it to loopback or put it behind your authentication.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';

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
  /** Origins allowed by CORS (e.g. the Web UI at http://127.0.0.1:8233); `*` allows any. */
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

/** Starts the codec server; resolves once it listens. */
export async function startCodecServer(options: CodecServerOptions): Promise<CodecServer> {
  const origins = new Set(options.corsOrigins ?? []);
  const limit = options.maxBodyBytes ?? 8 * 1024 * 1024;
  const server = http.createServer((req, res) => {
    const origin = req.headers.origin;
    if (origin && (origins.has('*') || origins.has(origin))) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
      res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
      res.setHeader('Access-Control-Max-Age', '600');
      res.setHeader('Vary', 'Origin');
    }
    const route = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '');
    const action = route.endsWith('/decode') ? 'decode' : route.endsWith('/encode') ? 'encode' : undefined;
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (!action) return answer(404, { error: 'not found: POST /decode or /encode' });
    if (req.method === 'OPTIONS') {
      res.writeHead(204);
      return res.end();
    }
    if (req.method !== 'POST') return answer(405, { error: `${req.method} not allowed: POST /${action}` });
    readBody(req, limit)
      .then(async (body) => {
        const payloads = parsePayloads(body).map(payloadFromJson);
        const out = action === 'decode' ? await options.codec.decode(payloads) : await options.codec.encode(payloads);
        answer(200, { payloads: out.map(payloadToJson) });
      })
      .catch((e: unknown) => {
        const status = e instanceof HttpError ? e.status : 400;
        const message = e instanceof Error ? e.message : String(e);
        options.log?.(`codec server: ${action} failed (${status}): ${message}`);
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
