/**
 * Where and how to reach Temporal, read the way Temporal's own tools read it (@temporalio/envconfig): command-line
 * flags, then the TEMPORAL_* variables, then a profile of the TOML config file, then the embedded defaults. One result
 * serves `Connection.connect` (clients) and `NativeConnection.connect` (workers). The API key comes from the
 * environment or a profile only, and is never part of a message.
 */
import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import type { TLSConfig } from '@temporalio/client';
import { loadClientConfigProfile, toClientOptions, type ClientConfigProfile, type ConfigDataSource } from '@temporalio/envconfig';
import { defaultNamespace, defaultTemporalAddress } from '../worker-defaults.js';

/** A connection setting that cannot be used (a missing certificate file, an unknown profile, a broken config file). */
export class TemporalConfigError extends Error {
  override readonly name = 'TemporalConfigError';
}

/** The connection flags, named as the Temporal CLI names them. */
export interface ConnectionFlags {
  readonly address?: string;
  readonly namespace?: string;
  readonly profile?: string;
  readonly 'config-file'?: string;
  readonly tls?: boolean;
  readonly 'tls-cert-path'?: string;
  readonly 'tls-key-path'?: string;
  readonly 'tls-ca-path'?: string;
  readonly 'tls-server-name'?: string;
}

/** What `Connection.connect` and `NativeConnection.connect` both take. */
export interface TemporalConnectOptions {
  readonly address: string;
  readonly tls?: TLSConfig | boolean;
  readonly apiKey?: string;
  readonly metadata?: Record<string, string>;
}

export interface TemporalConnection {
  readonly address: string;
  readonly namespace: string;
  /** Whether it connects with TLS (a TLS setting, or an API key, turns it on). */
  readonly tls: boolean;
  /** How it connects, for messages ("TLS (CA ca.pem), client certificate client.pem, API key from TEMPORAL_API_KEY"); never the key. */
  readonly security: string;
  /** Reads the certificate files now. The result holds the API key: never print it. */
  connectOptions(): TemporalConnectOptions;
  /** `text` with the API key (should a server echo it) replaced by `***`. */
  redact(text: string): string;
}

type Env = Readonly<Record<string, string | undefined>>;

/** The config file Temporal's tools read when neither --config-file nor TEMPORAL_CONFIG_FILE names one (as envconfig finds it). */
export function defaultConfigFile(env: Env = process.env): string | undefined {
  const home = env.HOME;
  switch (os.platform()) {
    case 'win32':
      return env.APPDATA && path.join(env.APPDATA, 'temporalio', 'temporal.toml');
    case 'darwin':
      return home && path.join(home, 'Library', 'Application Support', 'temporalio', 'temporal.toml');
    default: {
      const xdg = env.XDG_CONFIG_HOME;
      const dir = xdg ? (path.isAbsolute(xdg) ? xdg : undefined) : home && path.join(home, '.config');
      return dir && path.join(dir, 'temporalio', 'temporal.toml');
    }
  }
}

/** Where one TLS file may be named: its flag, its variable, its profile key. */
const tlsFiles = {
  serverCACert: { flag: 'tls-ca-path', variable: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', key: 'server_ca_cert_path', what: 'CA certificate' },
  clientCert: { flag: 'tls-cert-path', variable: 'TEMPORAL_TLS_CLIENT_CERT_PATH', key: 'client_cert_path', what: 'client certificate' },
  clientKey: { flag: 'tls-key-path', variable: 'TEMPORAL_TLS_CLIENT_KEY_PATH', key: 'client_key_path', what: 'client key' },
} as const;
type TlsFile = keyof typeof tlsFiles;

/**
 * The connection from `flags` over `env` over the profile (--profile, TEMPORAL_PROFILE, else "default") of the config
 * file (--config-file, TEMPORAL_CONFIG_FILE, else Temporal's default file, which may be absent). Certificate files are
 * read by `connectOptions()`, so a command that never connects does not need them.
 */
export function resolveTemporalConnection(flags: ConnectionFlags = {}, env: Env = process.env): TemporalConnection {
  const named = flags['config-file'] ? { file: flags['config-file'], by: '--config-file' } : env.TEMPORAL_CONFIG_FILE ? { file: env.TEMPORAL_CONFIG_FILE, by: 'TEMPORAL_CONFIG_FILE' } : undefined;
  if (named && !existsSync(named.file)) throw new TemporalConfigError(`the Temporal config file ${named.file} (${named.by}) does not exist: fix the path, or leave ${named.by} out`);
  const configFile = named?.file ?? defaultConfigFile(env);
  const fileExists = configFile !== undefined && existsSync(configFile);
  const profileName = flags.profile ?? env.TEMPORAL_PROFILE;
  const profileBy = flags.profile ? '--profile' : 'TEMPORAL_PROFILE';
  if (profileName && !fileExists) {
    throw new TemporalConfigError(`profile "${profileName}" (${profileBy}) needs a Temporal config file, and there is none${configFile ? ` at ${configFile}` : ''}: name one with --config-file or TEMPORAL_CONFIG_FILE`);
  }
  const overrideEnvVars = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({ profile: profileName, overrideEnvVars, ...(fileExists ? { configSource: { path: configFile } } : { disableFile: true }) });
  } catch (e) {
    const message = (e as Error).message;
    if (profileName && /not found/.test(message)) throw new TemporalConfigError(`profile "${profileName}" (${profileBy}) is not in ${configFile}: check the name (its [profile.NAME] tables)`);
    // The first line only: the parser's next lines quote the file, which may hold an API key.
    throw new TemporalConfigError(`cannot use the Temporal config file ${configFile}: ${message.split('\n')[0]}`);
  }
  const fromProfile = (key: string) => `${key} of profile "${profileName ?? 'default'}" in ${configFile}`;

  // Flags over the environment and the profile. A TLS flag turns TLS on, as in the Temporal CLI.
  const tlsFlagGiven = flags.tls === true || Object.values(tlsFiles).some((f) => flags[f.flag]) || flags['tls-server-name'] !== undefined;
  const tls = tlsFlagGiven ? { ...profile.tls, disabled: false } : profile.tls && { ...profile.tls };
  const origins: Partial<Record<TlsFile, string>> = {};
  if (tls && tls.disabled !== true) {
    for (const [name, f] of Object.entries(tlsFiles) as [TlsFile, (typeof tlsFiles)[TlsFile]][]) {
      const flag = flags[f.flag];
      if (flag) tls[name] = { path: flag };
      const source = tls[name];
      if (source && 'path' in source) origins[name] = flag ? `--${f.flag}` : env[f.variable] === source.path ? f.variable : fromProfile(f.key);
    }
    if (flags['tls-server-name'] !== undefined) tls.serverName = flags['tls-server-name'];
    const [cert, key] = [tls.clientCert, tls.clientKey];
    if ((cert === undefined) !== (key === undefined)) {
      const [has, lacks] = cert ? (['clientCert', 'clientKey'] as const) : (['clientKey', 'clientCert'] as const);
      throw new TemporalConfigError(
        `a ${tlsFiles[has].what} without its ${tlsFiles[lacks].what}: give both (--${tlsFiles.clientCert.flag} and --${tlsFiles.clientKey.flag}, or ${tlsFiles.clientCert.variable} and ${tlsFiles.clientKey.variable})`,
      );
    }
  }
  const resolved: ClientConfigProfile = { ...profile, address: flags.address ?? profile.address ?? defaultTemporalAddress, ...(tls ? { tls } : {}) };
  const address = resolved.address!;
  const namespace = flags.namespace ?? profile.namespace ?? defaultNamespace;
  const apiKeyFrom = profile.apiKey === undefined ? undefined : env.TEMPORAL_API_KEY !== undefined ? 'TEMPORAL_API_KEY' : fromProfile('api_key');
  return {
    address,
    namespace,
    // envconfig's rule: TLS when configured and not disabled, or when an API key is set.
    tls: resolved.tls ? resolved.tls.disabled !== true : apiKeyFrom !== undefined,
    security: describeSecurity(resolved, apiKeyFrom),
    redact: (text) => (resolved.apiKey ? text.split(resolved.apiKey).join('***') : text),
    connectOptions() {
      // Files are read here, each failure naming the file and where it was set.
      const read = (name: TlsFile, source: ConfigDataSource | undefined): ConfigDataSource | undefined => {
        if (!source || !('path' in source)) return source;
        try {
          return { data: readFileSync(source.path) };
        } catch (e) {
          const reason = (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'does not exist' : `cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`;
          throw new TemporalConfigError(`the TLS ${tlsFiles[name].what} ${source.path} (${origins[name]}) ${reason}: fix the path, or leave it out`);
        }
      };
      const withData: ClientConfigProfile = resolved.tls
        ? { ...resolved, tls: { ...resolved.tls, serverCACert: read('serverCACert', resolved.tls.serverCACert), clientCert: read('clientCert', resolved.tls.clientCert), clientKey: read('clientKey', resolved.tls.clientKey) } }
        : resolved;
      const { connectionOptions } = toClientOptions(withData);
      return {
        address,
        ...(connectionOptions.tls != null ? { tls: connectionOptions.tls } : {}),
        ...(connectionOptions.apiKey !== undefined ? { apiKey: connectionOptions.apiKey as string } : {}),
        ...(resolved.grpcMeta ? { metadata: resolved.grpcMeta } : {}),
      };
    },
  };
}

function describeSecurity(profile: ClientConfigProfile, apiKeyFrom: string | undefined): string {
  const tls = profile.tls;
  const tlsOn = tls ? tls.disabled !== true : apiKeyFrom !== undefined;
  const parts = [tlsOn ? 'TLS' : 'no TLS'];
  if (tlsOn && tls) {
    const file = (name: TlsFile) => (tls[name] && 'path' in tls[name] ? tls[name].path : 'given inline');
    if (tls.serverCACert) parts[0] += ` (CA ${file('serverCACert')})`;
    if (tls.clientCert) parts.push(`client certificate ${file('clientCert')}`);
    if (tls.serverName) parts.push(`server name ${tls.serverName}`);
  }
  if (apiKeyFrom) parts.push(`API key from ${apiKeyFrom}`);
  return parts.join(', ');
}

/**
 * Refuses `--api-key` on a command line: every process on the machine can read a command's arguments, and shells keep
 * them in history. Only the flag's name is named, never what follows it.
 */
export function refuseApiKeyArgument(argv: readonly string[]): void {
  const end = argv.indexOf('--');
  const flags = end === -1 ? argv : argv.slice(0, end);
  if (flags.some((a) => a === '--api-key' || a.startsWith('--api-key='))) {
    throw new TemporalConfigError('--api-key is not taken on the command line (other processes can read arguments, and shells keep them in history): set TEMPORAL_API_KEY, or api_key in a profile of the Temporal config file');
  }
}

/** The host and port of a Temporal address (`host:port`, `[v6]:port`), or undefined for another form. */
export function hostAndPort(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d+)$/.exec(address);
  return m ? { host: m[1] ?? m[2]!, port: Number(m[3]) } : undefined;
}

/**
 * Why a TLS connection fails, found with a handshake of our own: the gRPC client of the command line only says it
 * could not connect before its deadline. Undefined when the handshake succeeds and the server keeps the connection, or
 * when nothing answers at the address (that is not a TLS problem).
 */
export function tlsHandshakeProblem(options: TemporalConnectOptions, timeoutMs = 3000): Promise<string | undefined> {
  if (!options.tls) return Promise.resolve(undefined);
  const config = options.tls === true ? {} : options.tls;
  const at = hostAndPort(options.address);
  if (!at) return Promise.resolve(undefined);
  const { host, port } = at;
  return new Promise((resolve) => {
    const socket = tls.connect({
      host,
      port,
      servername: config.serverNameOverride ?? (net.isIP(host) ? undefined : host),
      ALPNProtocols: ['h2'],
      ...(config.serverRootCACertificate ? { ca: Buffer.from(config.serverRootCACertificate) } : {}),
      ...(config.clientCertPair ? { cert: Buffer.from(config.clientCertPair.crt), key: Buffer.from(config.clientCertPair.key) } : {}),
    });
    const done = (problem: string | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(problem);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    // An error of a system call (connection refused, no such host) is the network's, not TLS's.
    socket.once('error', (e: NodeJS.ErrnoException) => {
      // OpenSSL's messages are `…:SSL routines:FUNCTION:REASON:FILE:LINE:…`: the reason is the part for a person.
      const reason = /SSL routines:[^:]*:([^:]+)/.exec(e.message)?.[1] ?? e.message.split('\n')[0];
      done(e.syscall ? undefined : `TLS handshake failed: ${reason}${e.code ? ` (${e.code})` : ''}`);
    });
    // A server that refuses the client's certificate (or its absence) says so after the handshake (TLS 1.3).
    socket.once('secureConnect', () => setTimeout(() => done(undefined), 500).unref());
    socket.once('close', () => done('the server closed the connection after the TLS handshake (does it require a client certificate? --tls-cert-path and --tls-key-path)'));
  });
}
