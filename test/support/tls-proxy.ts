/**
 * TLS in front of the test's Temporal dev server, which serves plain gRPC only (`temporal server start-dev` has no TLS
 * flags): certificates made with openssl, a TLS-terminating proxy that can require and verify client certificates
 * (mTLS), and an HTTP/2 proxy that checks an API key (`authorization: Bearer KEY`, as Temporal Cloud does) and forwards
 * each gRPC stream, trailers included. They record what they saw so a test can check what reached them.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import tls from 'node:tls';

export interface TestCertificates {
  readonly caCert: string;
  /** Another CA, which signed nothing the proxies present. */
  readonly otherCaCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate (CN durable-harness-test), in `dir`. */
export function makeCertificates(dir: string): TestCertificates {
  // The test CA is made with openssl (.ci/run installs it): missing, the test FAILS, never skips.
  if (spawnSync('openssl', ['version']).status !== 0) throw new Error('openssl is not installed: install it (apt-get install openssl) to make the test CA');
  const file = (name: string) => path.join(dir, name);
  const ca = (name: string, cn: string) =>
    openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=${cn}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-keyout', file(`${name}.key`), '-out', file(`${name}.pem`)]);
  ca('ca', 'durable-harness test CA');
  ca('other-ca', 'some other CA');
  const leaf = (name: string, cn: string, extensions: string) => {
    writeFileSync(file(`${name}.ext`), `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n${extensions}\n`);
    openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, '-keyout', file(`${name}.key`), '-out', file(`${name}.csr`)]);
    openssl(['x509', '-req', '-in', file(`${name}.csr`), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial', '-days', '1', '-extfile', file(`${name}.ext`), '-out', file(`${name}.pem`)]);
  };
  leaf('server', 'localhost', 'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost');
  leaf('client', 'durable-harness-test', 'extendedKeyUsage=clientAuth');
  return {
    caCert: file('ca.pem'),
    otherCaCert: file('other-ca.pem'),
    serverCert: file('server.pem'),
    serverKey: file('server.key'),
    clientCert: file('client.pem'),
    clientKey: file('client.key'),
  };
}

export interface Proxy {
  readonly address: string;
  close(): Promise<void>;
}

export interface TlsProxy extends Proxy {
  /** Every TLS session that completed its handshake: the client certificate's CN, if one was presented. */
  readonly sessions: { clientCn: string | undefined }[];
  /** Handshakes that failed (no client certificate under mTLS, say). */
  readonly refused: string[];
}

/** Listens on a free port of 127.0.0.1; `close` ends the open connections too (a worker's long polls). */
async function listen(server: net.Server): Promise<{ address: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  server.on('connection', (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}

function hostPort(address: string): { host: string; port: number } {
  const [host, port] = address.split(':');
  return { host: host!, port: Number(port) };
}

/** Terminates TLS (and with `requireClientCert`, mTLS against the test CA) and pipes the bytes to the plain server. */
export async function startTlsProxy(upstream: string, certs: TestCertificates, options: { requireClientCert: boolean }): Promise<TlsProxy> {
  const sessions: TlsProxy['sessions'] = [];
  const refused: string[] = [];
  const server = tls.createServer(
    {
      key: readFileSync(certs.serverKey),
      cert: readFileSync(certs.serverCert),
      ca: readFileSync(certs.caCert),
      requestCert: options.requireClientCert,
      rejectUnauthorized: options.requireClientCert,
      ALPNProtocols: ['h2'],
    },
    (socket) => {
      const cn = socket.getPeerCertificate()?.subject?.CN;
      sessions.push({ clientCn: typeof cn === 'string' ? cn : undefined });
      const plain = net.connect(hostPort(upstream));
      socket.pipe(plain).pipe(socket);
      const end = () => {
        socket.destroy();
        plain.destroy();
      };
      socket.on('error', end).on('close', end);
      plain.on('error', end).on('close', end);
    },
  );
  server.on('tlsClientError', (e) => refused.push(e.message));
  return { ...(await listen(server)), sessions, refused };
}

export interface ApiKeyProxy extends Proxy {
  /** The `authorization` header of every gRPC call that reached the proxy (undefined: none). */
  readonly authorizations: (string | undefined)[];
}

/**
 * An HTTP/2 proxy over TLS that lets through only calls carrying `authorization: Bearer <apiKey>` (others get gRPC
 * status 16, UNAUTHENTICATED) and forwards them to the plain server, response headers, data and trailers. Calls whose
 * method matches `refuse` get status 7, PERMISSION_DENIED (what Temporal Cloud answers a worker's operator calls).
 */
export async function startApiKeyProxy(upstream: string, certs: TestCertificates, apiKey: string, options: { refuse?: RegExp } = {}): Promise<ApiKeyProxy> {
  const authorizations: (string | undefined)[] = [];
  const session = http2.connect(`http://${upstream}`);
  session.on('error', () => undefined);
  const server = http2.createSecureServer({ key: readFileSync(certs.serverKey), cert: readFileSync(certs.serverCert), allowHTTP1: false });
  server.on('stream', (stream, headers) => {
    const authorization = headers.authorization;
    authorizations.push(authorization);
    stream.on('error', () => undefined);
    if (authorization !== `Bearer ${apiKey}`) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '16', 'grpc-message': 'missing or wrong API key' }, { endStream: true });
      return;
    }
    if (options.refuse?.test(headers[':path'] ?? '')) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '7', 'grpc-message': 'Request unauthorized (test proxy)' }, { endStream: true });
      return;
    }
    // The upstream session supplies its own :authority and :scheme.
    const { ':authority': _authority, ':scheme': _scheme, ...forwarded } = headers;
    const call = session.request(forwarded);
    call.on('error', () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    stream.on('close', () => call.close());
    stream.pipe(call);
    let trailers: http2.OutgoingHttpHeaders = { 'grpc-status': '0' };
    call.on('trailers', (t) => (trailers = t));
    call.on('response', (responseHeaders) => {
      if ('grpc-status' in responseHeaders) {
        // A trailers-only answer (an error): headers and end of stream in one frame.
        stream.respond(responseHeaders, { endStream: true });
        return;
      }
      stream.respond(responseHeaders, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers(trailers));
      call.pipe(stream);
    });
  });
  const listening = await listen(server);
  return {
    address: listening.address,
    authorizations,
    async close() {
      await listening.close();
      session.destroy();
    },
  };
}
