/**
 * The embedded Temporal dev server (`dev`, the tests, the benches): `@temporalio/testing`'s `createLocal` on the
 * installed Temporal CLI, started through a tiny wrapper so it dies with the process that started it.
 */
import { accessSync, chmodSync, closeSync, constants, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { allSearchAttributes } from '../workflows/search-attributes.js';

export interface DevServerOptions {
  /** The Temporal CLI; without one the SDK downloads it (which fails on a machine without internet). */
  readonly cliPath?: string;
  readonly ip?: string;
  readonly port?: number;
  /** SQLite file for persistence across restarts; in-memory when omitted. */
  readonly dbFile?: string;
  readonly ui?: boolean;
  readonly uiPort?: number;
  /** The codec server the Web UI decodes payloads with (e.g. http://127.0.0.1:8234). */
  readonly uiCodecEndpoint?: string;
  readonly namespace?: string;
  /** Where the server's output goes (appended); by default its stdout is dropped and its stderr is ours. */
  readonly logFile?: string;
  /** Serve the server's Prometheus metrics on this port (`metricsUrl`); the benches count its requests by them. */
  readonly metricsPort?: number;
}

export interface DevServer {
  readonly address: string;
  readonly uiUrl?: string;
  /** The server's process id (the benches measure its CPU); undefined for a downloaded server. */
  readonly pid?: number;
  /** `http://ip:port/metrics`, with `metricsPort`. */
  readonly metricsUrl?: string;
  stop(): Promise<void>;
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** util-linux setpriv, where the machine has it (Linux). */
const setprivPaths = ['/usr/bin/setpriv', '/bin/setpriv'];

const shellQuote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`;

/**
 * The executable the SDK starts: a shell script that records its pid and `exec`s the CLI under `setpriv --pdeathsig
 * KILL`, so the kernel kills the server when the thread that spawned it dies — even with a SIGKILLed parent, where no
 * handler of ours runs: `dev` never leaves an orphaned server holding its port and database. `exec` keeps the pid, so
 * the SDK's own stop (SIGKILL to its child) reaches the server itself.
 */
function writeLauncher(dir: string, cliPath: string, logFile: string | undefined): string {
  const setpriv = setprivPaths.find((p) => {
    try {
      accessSync(p, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
  const output = logFile ? `>>${shellQuote(logFile)} 2>&1` : '>/dev/null';
  const file = path.join(dir, 'temporal-dev-server.sh');
  const command = [...(setpriv ? [setpriv, '--pdeathsig', 'KILL', '--'] : []), cliPath].map(shellQuote).join(' ');
  writeFileSync(file, `#!/bin/sh\necho $$ > ${shellQuote(path.join(dir, 'pid'))}\nexec ${command} "$@" ${output}\n`, { mode: 0o755 });
  return file;
}

export async function startDevServer(options: DevServerOptions): Promise<DevServer> {
  const ip = options.ip ?? '127.0.0.1';
  const uiPort = options.ui ? (options.uiPort ?? (await freePort())) : undefined;
  const extraArgs: string[] = [
    // Eager activity dispatch hands the turn to this worker in the workflow-task response: one round trip less per turn.
    '--dynamic-config-value', 'system.enableActivityEagerExecution=true',
    // The default (20/s) throttles the transfer queue after a burst of fast workflow tasks: ~30-40 ms per turn.
    '--dynamic-config-value', 'history.transferProcessorMaxPollRPS=1000',
  ];
  if (options.dbFile) {
    mkdirSync(path.dirname(options.dbFile), { recursive: true });
    // Without WAL every workflow task waits on a rollback-journal fsync: +20-50 ms per turn on these machines.
    extraArgs.push('--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=normal');
  }
  if (options.metricsPort !== undefined) extraArgs.push('--metrics-port', String(options.metricsPort));
  if (options.ui) extraArgs.push('--ui-ip', ip, ...(options.uiCodecEndpoint ? ['--ui-codec-endpoint', options.uiCodecEndpoint] : []));
  if (options.logFile) {
    // The server's log names runs and queues: as private as its database (the shell's `>>` would create it 0644).
    mkdirSync(path.dirname(options.logFile), { recursive: true });
    closeSync(openSync(options.logFile, 'a', 0o600));
    chmodSync(options.logFile, 0o600);
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-temporal-'));
  try {
    const start = () => TestWorkflowEnvironment.createLocal({
      server: {
        ...(options.cliPath ? { executable: { type: 'existing-path', path: writeLauncher(dir, options.cliPath, options.logFile) } } : {}),
        ip,
        port: options.port,
        ui: options.ui ?? false,
        uiPort,
        dbFilename: options.dbFile,
        namespace: options.namespace ?? 'default',
        log: { format: 'pretty', level: 'error' },
        searchAttributes: [...allSearchAttributes],
        extraArgs,
      },
    });
    // The SDK gives the server 5 s to answer (then kills it); a machine busy with other work can take longer once.
    const env = await start().catch((error: Error) => (/did not start within/.test(error.message) ? start() : Promise.reject(error)));
    const pid = options.cliPath ? Number(readFileSync(path.join(dir, 'pid'), 'utf8')) : undefined;
    return {
      address: env.address,
      uiUrl: uiPort === undefined ? undefined : `http://${ip}:${uiPort}`,
      pid,
      ...(options.metricsPort !== undefined ? { metricsUrl: `http://${ip}:${options.metricsPort}/metrics` } : {}),
      async stop() {
        await env.teardown();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
