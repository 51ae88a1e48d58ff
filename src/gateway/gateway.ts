/**
 * The per-run egress gateway: an HTTP/1.1 server on a Unix socket the worker makes per run, which the sandbox reaches
 * only through its forwarder. It is the sandbox's one door: model calls (origin-form, the harness's base URL points
 * here) are forwarded to the vendor with the run's placeholder swapped for the real key and metered on the way back;
 * proxy requests (absolute-form and CONNECT, through HTTPS_PROXY) reach only the allowlist; everything else is refused
 * and recorded. Decisions are in decide.ts, limits in bounds.ts, metering in meter.ts. See docs/network.md.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, lstatSync, openSync, unlinkSync } from 'node:fs';
import http, { STATUS_CODES } from 'node:http';
import net from 'node:net';
import nodePath from 'node:path';
import { Transform, pipeline, type Readable } from 'node:stream';
import { Agent } from 'undici';
import { LOOPBACK_PATH } from '../contracts/loopback.js';
import type { AllowRule, ModelCall, NetworkRecord, VendorApi } from '../contracts/network.js';
import { Recorder, TokenBucket, defaultLimits, type GatewayLimits } from './bounds.js';
import { checkHostHeader, checkProxyCredential, decideConnect, decideHttp, endToEnd, hasDotSegments, parseAuthority, ruleName, swapKey, type Refusal } from './decide.js';
import type { Loopback } from './loopback.js';
import { createMeter, type Meter } from './meter.js';
import { vendorError } from './vendor-errors.js';

export interface GatewayOptions {
  /** Host path of the socket; its directory exists. A stale socket there is replaced; the socket is made 0666. */
  readonly socketPath: string;
  /** The model vendor: its API, its real base URL and the real key (`undefined`: none to swap in). */
  readonly vendor?: { readonly api: VendorApi; readonly upstream: string; readonly key: string | undefined };
  readonly allowlist?: readonly AllowRule[];
  /** Every request's audit row. */
  readonly onRecord: (record: NetworkRecord) => void;
  /** Every metered model call. */
  readonly onModelCall: (call: ModelCall) => void;
  /** Asked before each model call: a refusal reason (the budget is spent) or `undefined` to let it through. */
  readonly admitModelCall?: () => string | undefined;
  /** Overrides of the default limits (bounds.ts). */
  readonly limits?: Partial<GatewayLimits>;
  /** The run's MCP loopback (loopback.ts), served at `LOOPBACK_PATH` on the sandbox's side. */
  readonly loopback?: Loopback;
}

export interface Gateway {
  /** What the harness gets as its key; accepted by this gateway only, until `close`. */
  readonly placeholder: string;
  readonly socketPath: string;
  /** The sandbox-side base URL for a forwarder port: `http://127.0.0.1:<port>` + the upstream's path (no trailing /). */
  sandboxBaseUrl(port: number): string;
  /** Stops listening, ends open streams and tunnels, forgets the placeholder and removes the socket. */
  close(): Promise<void>;
}

/** The gateway could not start (its socket path is taken by something that is not a socket, or listen failed). */
export class GatewayStartError extends Error {
  override readonly name = 'GatewayStartError';
}

interface Upstream {
  readonly api: VendorApi;
  readonly origin: string;
  readonly basePath: string;
  readonly destination: string;
  readonly key: string | undefined;
}

function upstreamOf(vendor: NonNullable<GatewayOptions['vendor']>): Upstream {
  const url = new URL(vendor.upstream);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new GatewayStartError(`the vendor's base URL ${url.origin} is not http or https`);
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  return { api: vendor.api, origin: url.origin, basePath: url.pathname.replace(/\/+$/, ''), destination: `${url.hostname}:${port}`, key: vendor.key };
}

/** Opens a gateway listening on `options.socketPath`. */
export async function openGateway(options: GatewayOptions): Promise<Gateway> {
  const limits: GatewayLimits = { ...defaultLimits, ...options.limits };
  const upstream = options.vendor ? upstreamOf(options.vendor) : undefined;
  const allowlist = options.allowlist ?? [];
  const api: VendorApi = upstream?.api ?? 'any';
  let placeholder: string | undefined = `dh-run-${randomBytes(16).toString('hex')}`;
  const issued = placeholder;
  const bucket = new TokenBucket(limits.burst, limits.perSecond);
  const recorder = new Recorder(options.onRecord, limits.rateRecordEveryMs);
  const agent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: 600_000, bodyTimeout: 600_000, connections: limits.maxConnections });
  const sockets = new Set<net.Socket>();

  const onRequest = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const at = Date.now();
    const started = performance.now();
    const url = req.url ?? '/';
    const absolute = !url.startsWith('/');
    const base = { at, kind: absolute ? ('http' as const) : ('model' as const), method: req.method ?? 'GET' };
    const since = () => Math.round((performance.now() - started) * 100) / 100;
    const refuse = (refusal: Refusal, destination: string, path: string, over = false) => {
      res.writeHead(refusal.status, { 'content-type': 'application/json', ...(refusal.status === 413 ? { connection: 'close' } : {}) });
      const body = vendorError(absolute ? 'any' : api, refusal.status, refusal.message);
      res.end(body);
      const record: NetworkRecord = { ...base, destination, path, status: refusal.status, bytesIn: Buffer.byteLength(body), bytesOut: 0, decision: 'refused', rule: refusal.rule, durationMs: since() };
      if (over) recorder.overRate(record);
      else recorder.record(record);
    };
    if (placeholder === undefined) {
      res.destroy();
      return;
    }
    if (!bucket.take()) {
      refuse({ status: 429, rule: 'refused:rate', message: 'too many requests from this sandbox; slow down' }, '', '', true);
      return;
    }
    if (absolute) proxyHttp(req, res, placeholder, refuse, since, base);
    else if (options.loopback && url.split('?')[0] === LOOPBACK_PATH) {
      const hostRefusal = checkHostHeader(req.headers.host);
      if (hostRefusal) return refuse(hostRefusal, 'loopback', LOOPBACK_PATH);
      options.loopback.handle(req, res);
    } else modelCall(req, res, placeholder, refuse, since, base);
  };

  type Refuse = (refusal: Refusal, destination: string, path: string) => void;
  type Base = Pick<NetworkRecord, 'at' | 'kind' | 'method'>;

  const modelCall = (req: http.IncomingMessage, res: http.ServerResponse, current: string, refuse: Refuse, since: () => number, base: Base): void => {
    const url = req.url ?? '/';
    const path = url.split('?')[0]!;
    if (!upstream) return refuse({ status: 403, rule: 'refused:no-vendor', message: 'this sandbox has no model vendor to call' }, '', path);
    const hostRefusal = checkHostHeader(req.headers.host);
    if (hostRefusal) return refuse(hostRefusal, upstream.destination, path);
    const inBase = upstream.basePath === '' || path === upstream.basePath || path.startsWith(`${upstream.basePath}/`);
    if (!inBase || hasDotSegments(url)) {
      return refuse({ status: 403, rule: 'refused:not-vendor-path', message: `only the model API under ${upstream.basePath || '/'} is served here` }, upstream.destination, path);
    }
    const swapped = swapKey(req.headers, url, current, upstream.key);
    if ('status' in swapped) return refuse(swapped, upstream.destination, path);
    const tooLarge = bodyTooLarge(req, limits.maxBodyBytes);
    if (tooLarge) return refuse(tooLarge, upstream.destination, path);
    const metered = base.method === 'POST';
    if (metered) {
      const reason = options.admitModelCall?.();
      if (reason !== undefined) return refuse({ status: 403, rule: 'refused:budget', message: reason }, upstream.destination, path);
    }
    forward(req, res, {
      origin: upstream.origin,
      path: swapped.path,
      headers: endToEnd(swapped.headers),
      meter: metered ? (type, encoding) => createMeter(upstream.api, type, encoding) : undefined,
      done: (status, bytesIn, bytesOut, firstByte, read) => {
        recorder.record({ ...base, destination: upstream.destination, path, status, bytesIn, bytesOut, decision: 'allowed', rule: 'vendor', durationMs: since() });
        if (!read) return;
        void read.then((m) => {
          const call: ModelCall = {
            at: base.at,
            api: upstream.api,
            ...(m.model === undefined ? {} : { model: m.model }),
            usage: m.usage,
            status,
            streamed: m.streamed,
            durationMs: since(),
            ...(firstByte === undefined ? {} : { firstByteMs: firstByte }),
          };
          try {
            options.onModelCall(call);
          } catch {
            // the sink's problem
          }
        });
      },
      since,
    });
  };

  const proxyHttp = (req: http.IncomingMessage, res: http.ServerResponse, current: string, refuse: Refuse, since: () => number, base: Base): void => {
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      return refuse({ status: 400, rule: 'refused:bad-url', message: 'the request target is not a URL' }, '', '');
    }
    const port = Number(target.port || (target.protocol === 'https:' ? 443 : 80));
    const destination = `${target.hostname.toLowerCase()}:${port}`;
    const path = target.pathname;
    const credential = checkProxyCredential(req.headers['proxy-authorization'], current);
    if (credential) return refuse(credential, destination, path);
    if (target.protocol !== 'http:') return refuse({ status: 403, rule: 'refused:scheme', message: `only http:// is forwarded; use CONNECT for ${target.protocol}//` }, destination, path);
    const host = req.headers.host;
    if (host !== undefined && host.toLowerCase() !== target.host.toLowerCase()) {
      return refuse({ status: 403, rule: 'refused:host-header', message: 'the Host header does not name the request target' }, destination, path);
    }
    const decision = decideHttp(allowlist, target.hostname, port, base.method);
    if ('status' in decision) return refuse(decision, destination, path);
    const tooLarge = bodyTooLarge(req, limits.maxBodyBytes);
    if (tooLarge) return refuse(tooLarge, destination, path);
    forward(req, res, {
      origin: `http://${target.host}`,
      path: `${target.pathname}${target.search}`,
      headers: endToEnd(req.headers),
      done: (status, bytesIn, bytesOut) => {
        recorder.record({ ...base, destination, path, status, bytesIn, bytesOut, decision: 'allowed', rule: ruleName(decision), durationMs: since() });
      },
      since,
    });
  };

  interface Forward {
    readonly origin: string;
    readonly path: string;
    readonly headers: Record<string, string | string[]>;
    readonly meter?: ((contentType: string | undefined, contentEncoding: string | undefined) => Meter) | undefined;
    /** Called once: the status answered, bytes back to the sandbox, bytes from it, ms to the first byte back. */
    readonly done: (status: number, bytesIn: number, bytesOut: number, firstByteMs: number | undefined, read?: ReturnType<Meter['finish']>) => void;
    readonly since: () => number;
  }

  /** Sends the request on with undici and streams the answer back as it comes (backpressure through `pipeline`). */
  const forward = (req: http.IncomingMessage, res: http.ServerResponse, f: Forward): void => {
    const abort = new AbortController();
    let bytesOut = 0;
    let bytesIn = 0;
    let firstByte: number | undefined;
    let tooLarge = false;
    const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
    let body: Readable | undefined;
    if (hasBody) {
      const counted = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          bytesOut += chunk.length;
          if (bytesOut > limits.maxBodyBytes) {
            tooLarge = true;
            callback(new Error('request body too large'));
          } else callback(null, chunk);
        },
      });
      body = pipeline(req, counted, () => undefined);
    }
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const headers = { ...f.headers };
    delete headers.expect; // node answered 100-continue already; undici refuses the header
    agent
      .request({ origin: f.origin, path: f.path, method: (req.method ?? 'GET') as 'GET', headers, body: body ?? null, signal: abort.signal })
      .then(
        (answer) => {
          const meter = f.meter?.(header(answer.headers['content-type']), header(answer.headers['content-encoding']));
          res.writeHead(answer.statusCode, endToEnd(answer.headers));
          // Hand-piped rather than through a Transform: one listener per chunk on the hot path, and the vendor is
          // paused whenever the sandbox's side is full (backpressure), resumed on drain.
          const source = answer.body;
          let finished = false;
          const finish = () => {
            if (finished) return;
            finished = true;
            firstByte ??= f.since();
            f.done(answer.statusCode, bytesIn, bytesOut, firstByte, meter?.finish());
          };
          source.on('data', (chunk: Buffer) => {
            firstByte ??= f.since();
            bytesIn += chunk.length;
            meter?.write(chunk);
            if (!res.write(chunk)) source.pause();
          });
          res.on('drain', () => source.resume());
          source.on('end', () => res.end(finish));
          source.on('error', () => {
            res.destroy();
            finish();
          });
          res.on('close', () => {
            if (res.writableFinished) return;
            source.destroy();
            finish();
          });
        },
        () => {
          if (res.headersSent || res.destroyed) {
            res.destroy();
            f.done(0, bytesIn, bytesOut, firstByte);
            return;
          }
          const status = tooLarge ? 413 : 502;
          const message = tooLarge ? `the request body is over ${limits.maxBodyBytes} bytes` : 'the destination could not be reached';
          const answer = vendorError(f.meter ? api : 'any', status, message);
          res.writeHead(status, { 'content-type': 'application/json', connection: 'close' }).end(answer);
          f.done(status, Buffer.byteLength(answer), bytesOut, undefined);
        },
      );
  };

  const onConnect = (req: http.IncomingMessage, socket: net.Socket, head: Buffer): void => {
    const at = Date.now();
    const started = performance.now();
    const since = () => Math.round((performance.now() - started) * 100) / 100;
    const base = { at, kind: 'connect' as const, method: 'CONNECT', path: '' };
    const refuse = (refusal: Refusal, destination: string, over = false) => {
      const body = vendorError('any', refusal.status, refusal.message);
      const extra = refusal.status === 407 ? 'proxy-authenticate: Basic realm="durable-harness"\r\n' : '';
      socket.end(`HTTP/1.1 ${refusal.status} ${STATUS_CODES[refusal.status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`);
      const record: NetworkRecord = { ...base, destination, status: refusal.status, bytesIn: 0, bytesOut: 0, decision: 'refused', rule: refusal.rule, durationMs: since() };
      if (over) recorder.overRate(record);
      else recorder.record(record);
    };
    socket.on('error', () => socket.destroy());
    if (placeholder === undefined) return void socket.destroy();
    if (!bucket.take()) return refuse({ status: 429, rule: 'refused:rate', message: 'too many requests from this sandbox; slow down' }, '', true);
    const authority = parseAuthority(req.url ?? '');
    const destination = authority ? `${authority.host.toLowerCase()}:${authority.port}` : '';
    const credential = checkProxyCredential(req.headers['proxy-authorization'], placeholder);
    if (credential) return refuse(credential, destination);
    if (!authority) return refuse({ status: 400, rule: 'refused:bad-url', message: 'CONNECT needs host:port' }, '');
    const decision = decideConnect(allowlist, authority.host, authority.port);
    if ('status' in decision) return refuse(decision, destination);
    let bytesIn = 0;
    let bytesOut = head.length;
    let status = 0;
    let recorded = false;
    const upstreamSocket = net.connect({ host: authority.host.replace(/^\[(.*)\]$/, '$1'), port: authority.port });
    sockets.add(upstreamSocket);
    const finish = () => {
      socket.destroy();
      upstreamSocket.destroy();
      sockets.delete(upstreamSocket);
      if (recorded) return;
      recorded = true;
      recorder.record({ ...base, destination, status, bytesIn, bytesOut, decision: 'allowed', rule: ruleName(decision), durationMs: since() });
    };
    upstreamSocket.once('connect', () => {
      status = 200;
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstreamSocket.write(head);
      socket.on('data', (chunk: Buffer) => void (bytesOut += chunk.length));
      upstreamSocket.on('data', (chunk: Buffer) => void (bytesIn += chunk.length));
      socket.pipe(upstreamSocket);
      upstreamSocket.pipe(socket);
    });
    upstreamSocket.on('error', () => {
      if (status === 0 && !socket.destroyed) {
        status = 502;
        const body = vendorError('any', 502, 'the destination could not be reached');
        socket.end(`HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
      }
      finish();
    });
    socket.setTimeout(limits.tunnelIdleMs, finish);
    upstreamSocket.setTimeout(limits.tunnelIdleMs, finish);
    socket.on('close', finish);
    upstreamSocket.on('close', finish);
  };

  const server = http.createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
      requireHostHeader: false, // a missing Host is refused and recorded by the gateway itself
    },
    onRequest,
  );
  server.maxConnections = limits.maxConnections;
  server.timeout = 0; // a model call may think for minutes: the limits above bound the request, not the answer
  server.on('connection', (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.on('drop', () => {
    // Over the connection cap: node closed it on arrival. A row now and then, a count otherwise (like the rate).
    recorder.overRate({ at: Date.now(), kind: 'http', method: '', destination: '', path: '', status: 0, bytesIn: 0, bytesOut: 0, decision: 'refused', rule: 'refused:connections', durationMs: 0 });
  });
  server.on('connect', onConnect);
  server.on('clientError', (error: NodeJS.ErrnoException, socket: net.Socket) => {
    const code = error.code ?? '';
    // The client went away (a killed harness, a closed keep-alive connection): nothing was asked, nothing to record.
    if (code === 'ECONNRESET' || code === 'EPIPE') {
      socket.destroy();
      return;
    }
    const status = code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
    if (socket.writable && !(socket as net.Socket & { _httpMessage?: unknown })._httpMessage) {
      socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    } else socket.destroy();
    const record: NetworkRecord = { at: Date.now(), kind: 'http', method: '', destination: '', path: '', status, bytesIn: 0, bytesOut: 0, decision: 'refused', rule: status === 408 ? 'refused:timeout' : 'refused:malformed', durationMs: 0 };
    if (bucket.take()) recorder.record(record);
    else recorder.overRate(record);
  });

  removeStaleSocket(options.socketPath);
  // Bound through a descriptor of its directory: a socket's path is capped at 107 bytes (sun_path), a data directory
  // is not. The descriptor stays open until the server has closed (which unlinks through the same path).
  let directory: number;
  try {
    directory = openSync(nodePath.dirname(options.socketPath), 'r');
  } catch (error) {
    throw new GatewayStartError(`the gateway could not open the directory of ${options.socketPath}: ${(error as Error).message}`);
  }
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error) => reject(new GatewayStartError(`the gateway could not listen on ${options.socketPath}: ${error.message}`)));
      server.listen(`/proc/self/fd/${directory}/${nodePath.basename(options.socketPath)}`, () => resolve());
    });
    chmodSync(options.socketPath, 0o666);
  } catch (error) {
    server.close();
    closeSync(directory);
    throw error;
  }

  let closing: Promise<void> | undefined;
  return {
    placeholder: issued,
    socketPath: options.socketPath,
    sandboxBaseUrl: (port) => `http://127.0.0.1:${port}${upstream?.basePath ?? ''}`,
    close: () =>
      (closing ??= (async () => {
        placeholder = undefined;
        options.loopback?.revoke();
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const socket of sockets) socket.destroy();
        await stopped;
        closeSync(directory);
        await agent.destroy();
        recorder.flush(Date.now());
        removeStaleSocket(options.socketPath);
      })()),
  };
}

/** A request whose declared length is over the cap: refused before any byte is forwarded. */
function bodyTooLarge(req: http.IncomingMessage, max: number): Refusal | undefined {
  const length = Number(req.headers['content-length'] ?? 0);
  if (length <= max) return undefined;
  return { status: 413, rule: 'refused:body-too-large', message: `the request body is over ${max} bytes` };
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Removes a socket left by an earlier gateway at `path`; anything else there is an error, not ours to delete. */
function removeStaleSocket(path: string): void {
  let stat;
  try {
    stat = lstatSync(path);
  } catch {
    return;
  }
  if (!stat.isSocket()) throw new GatewayStartError(`${path} exists and is not a socket: the gateway will not replace it; remove it or choose another path`);
  unlinkSync(path);
}
