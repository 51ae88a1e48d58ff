/**
 * Where the command line connects and keeps its data: flags, then environment, then (for Temporal) a profile of
 * Temporal's config file, then embedded defaults.
 */
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SqliteLedger, openLedger, type Ledger } from '../ledger/index.js';
import { hostAndPort, resolveTemporalConnection, tlsHandshakeProblem, type ConnectionFlags, type TemporalConnection, type TemporalConnectOptions } from '../client/connect.js';
import { defaultNamespace, defaultTaskQueue, defaultTemporalAddress } from '../worker-defaults.js';
import { CliError, ExitCodes } from './exit-codes.js';

export interface Settings {
  readonly address: string;
  readonly namespace: string;
  /** How to reach Temporal (TLS, API key); its `connectOptions()` are for `Connection` and `NativeConnection` alike. */
  readonly temporal: TemporalConnection;
  readonly taskQueue: string;
  /** Catalog file (JSON or YAML). */
  readonly catalogFile: string;
  /** Ledger, workspaces, credentials and the dev server's database live here. */
  readonly dataDir: string;
}

/** The repository (or installed package) root: the parent of src/. */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The flags that say how to reach a Temporal server other than `dev`'s own. */
const remoteFlags = ['profile', 'config-file', 'tls', 'tls-cert-path', 'tls-key-path', 'tls-ca-path', 'tls-server-name'] as const;

/**
 * The settings of one command. `embedded` (dev): Temporal is the server dev starts on this machine, so profiles and
 * TLS settings do not apply (a Cloud profile in the default config file must not send dev elsewhere), and their flags
 * are refused.
 */
export function resolveSettings(
  flags: Partial<Record<'task-queue' | 'catalog' | 'data', string | undefined>> & ConnectionFlags,
  env: Readonly<Record<string, string | undefined>> = process.env,
  options: { embedded?: boolean } = {},
): Settings {
  let temporal: TemporalConnection;
  if (options.embedded) {
    const given = remoteFlags.filter((name) => flags[name] !== undefined);
    if (given.length) throw new CliError(`--${given[0]} is for a Temporal server elsewhere (worker and the client commands); dev starts its own, without TLS`, ExitCodes.usage);
    const address = flags.address ?? env.TEMPORAL_ADDRESS ?? defaultTemporalAddress;
    temporal = { address, namespace: flags.namespace ?? env.TEMPORAL_NAMESPACE ?? defaultNamespace, tls: false, security: 'no TLS', connectOptions: () => ({ address }), redact: (text) => text };
  } else {
    temporal = resolveTemporalConnection(flags, env);
  }
  return {
    address: temporal.address,
    namespace: temporal.namespace,
    temporal,
    taskQueue: flags['task-queue'] ?? env.DURABLE_HARNESS_TASK_QUEUE ?? defaultTaskQueue,
    catalogFile: path.resolve(flags.catalog ?? env.DURABLE_HARNESS_CATALOG ?? path.join(packageRoot, 'config', 'default.yaml')),
    dataDir: path.resolve(flags.data ?? env.DURABLE_HARNESS_DATA ?? '.data'),
  };
}

/** The local ledger, when this machine has one (it adds what the harness is doing to progress lines). */
export function openLedgerIfPresent(s: Pick<Settings, 'dataDir'>): Ledger | undefined {
  if (process.env.DATABASE_URL?.trim()) return openLedger(process.env, s.dataDir);
  const file = path.join(s.dataDir, 'ledger.sqlite');
  return existsSync(file) ? SqliteLedger.open(file) : undefined;
}

/**
 * Temporal could not be reached: why, and what to check. A TLS handshake the server refuses or credentials it
 * rejects are configuration (exit 2); anything else is an unreachable server (3). Never shows the API key.
 */
export async function unreachableError(s: Pick<Settings, 'address' | 'temporal'>, e: unknown): Promise<CliError> {
  const cause = (e as Error).cause as { code?: number; details?: string; message?: string } | undefined;
  const refused = cause?.code === 16 || cause?.code === 7; // UNAUTHENTICATED, PERMISSION_DENIED
  const handshake = s.temporal.tls && !refused ? await tlsHandshakeProblem(s.temporal.connectOptions()) : undefined;
  const reason = handshake ?? `${(e as Error).message.split('\n')[0]}${cause ? `: ${(cause.details ?? cause.message ?? '').split('\n')[0]}` : ''}`;
  const hint = refused
    ? 'The server refused the credentials: check TEMPORAL_API_KEY (or the api_key of the profile), the client certificate and the namespace.'
    : handshake
      ? 'Check the CA (--tls-ca-path, TEMPORAL_TLS_SERVER_CA_CERT_PATH), the server name (--tls-server-name) and, for mTLS, the client certificate and key (--tls-cert-path, --tls-key-path).'
      : s.temporal.tls
        ? 'Check the address and that the server speaks TLS there.'
        : 'Start one with `durable-harness dev`, or set TEMPORAL_ADDRESS (a server with TLS: --tls, or a profile; durable-harness --help).';
  return new CliError(s.temporal.redact(`cannot reach Temporal at ${s.address} (${s.temporal.security}): ${reason}. ${hint}`), refused || handshake ? ExitCodes.usage : ExitCodes.unavailable);
}

/**
 * The options to connect with (certificate files read: a bad one is a configuration error, not an unreachable
 * server), once the address answers (`refuseUnreachableFast`).
 */
export async function connectOptionsFor(s: Pick<Settings, 'address' | 'temporal'>): Promise<TemporalConnectOptions> {
  const options = s.temporal.connectOptions();
  if (options.tls) quietIpServerNameWarning();
  await refuseUnreachableFast(s);
  return options;
}

/**
 * Fails within a second when nothing listens at the address (refused, no such host) — the gRPC client would retry
 * until its 5 s deadline. A server that accepts, or does not answer within `ms`, is left to the connect itself.
 */
export async function refuseUnreachableFast(s: Pick<Settings, 'address' | 'temporal'>, ms = 1000): Promise<void> {
  const at = hostAndPort(s.address);
  if (!at) return;
  const problem = await new Promise<Error | undefined>((resolve) => {
    const socket = net.connect(at);
    const done = (e?: Error) => {
      socket.destroy();
      resolve(e);
    };
    socket.setTimeout(ms, () => done());
    socket.once('connect', () => done());
    socket.once('error', (e) => done(e));
  });
  if (problem) throw await unreachableError(s, problem);
}

/**
 * Drops Node's warning DEP0123 ("Setting the TLS ServerName to an IP address is not permitted by RFC 6066"): the gRPC
 * client sets it for an address such as 10.0.0.5:7233, the certificate is still checked against that IP, and the
 * operator has nothing to change. Every other warning is printed as before.
 */
export function quietIpServerNameWarning(): void {
  const emit = process.emitWarning.bind(process) as (...args: unknown[]) => void;
  process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
    const code = typeof rest[0] === 'object' && rest[0] !== null ? (rest[0] as { code?: string }).code : rest[1];
    if (code !== 'DEP0123') emit(warning, ...rest);
  }) as typeof process.emitWarning;
}
