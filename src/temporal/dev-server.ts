/** Starts `temporal server start-dev` as a child process and waits until it serves. */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { allSearchAttributes } from '../workflows/search-attributes.js';

/** The CLI's names of the search attribute types the runs use. */
const searchAttributeTypeName = { KEYWORD: 'Keyword', DOUBLE: 'Double', INT: 'Int' } as const;

export interface DevServerOptions {
  readonly cliPath: string;
  readonly ip?: string;
  readonly port?: number;
  /** SQLite file for persistence across restarts; in-memory when omitted. */
  readonly dbFile?: string;
  readonly ui?: boolean;
  readonly uiPort?: number;
  /** The codec server the Web UI decodes payloads with (e.g. http://127.0.0.1:8234). */
  readonly uiCodecEndpoint?: string;
  readonly namespace?: string;
  readonly logFile?: string;
  readonly startTimeoutMs?: number;
}

export interface DevServer {
  readonly address: string;
  readonly uiUrl?: string;
  readonly process: ChildProcess;
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

/**
 * `argv` run under `setpriv --pdeathsig KILL` when setpriv is installed: the kernel kills the process when the thread
 * that spawned it dies (Node spawns on the main thread: when the process dies). Elsewhere `argv` as it is.
 */
export function withParentDeathSignal(argv: readonly string[]): string[] {
  const setpriv = setprivPaths.find((p) => {
    try {
      accessSync(p, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
  return setpriv ? [setpriv, '--pdeathsig', 'KILL', '--', ...argv] : [...argv];
}

export async function startDevServer(options: DevServerOptions): Promise<DevServer> {
  const ip = options.ip ?? '127.0.0.1';
  const port = options.port ?? (await freePort());
  const uiPort = options.uiPort ?? (options.ui ? await freePort() : undefined);
  const args = ['server', 'start-dev', '--ip', ip, '--port', String(port), '--log-level', 'error', '--namespace', options.namespace ?? 'default'];
  if (options.dbFile) {
    mkdirSync(path.dirname(options.dbFile), { recursive: true });
    // Without WAL every workflow task waits on a rollback-journal fsync: +20-50 ms per turn on these machines.
    args.push('--db-filename', options.dbFile, '--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=normal');
  }
  if (options.ui) {
    args.push('--ui-port', String(uiPort), '--ui-ip', ip);
    if (options.uiCodecEndpoint) args.push('--ui-codec-endpoint', options.uiCodecEndpoint);
  } else {
    args.push('--headless');
  }
  // Eager activity dispatch hands the turn to this worker in the workflow-task response: one round trip less per turn.
  args.push('--dynamic-config-value', 'system.enableActivityEagerExecution=true');
  // The default (20/s) throttles the transfer queue after a burst of fast workflow tasks: ~30-40 ms per turn.
  args.push('--dynamic-config-value', 'history.transferProcessorMaxPollRPS=1000');
  for (const key of allSearchAttributes) args.push('--search-attribute', `${key.name}=${searchAttributeTypeName[key.type as keyof typeof searchAttributeTypeName] ?? 'Keyword'}`);
  // Under setpriv's parent-death signal the server dies with the process that started it, even a SIGKILLed one
  // (no handler of ours runs then): `dev` never leaves an orphaned server holding its port and database.
  const [file, ...argv] = withParentDeathSignal([options.cliPath, ...args]);
  const child = spawn(file!, argv, { stdio: ['ignore', 'ignore', 'pipe'], detached: false });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const address = `${ip}:${port}`;
  const deadline = Date.now() + (options.startTimeoutMs ?? 60_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`temporal server start-dev exited with code ${child.exitCode}: ${stderr.trim()}`);
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await connection.workflowService.describeNamespace({ namespace: options.namespace ?? 'default' });
        break;
      } finally {
        await connection.close();
      }
    } catch (err) {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`Temporal dev server did not become ready at ${address}: ${String(err)}\n${stderr.trim()}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return {
    address,
    uiUrl: options.ui ? `http://${ip}:${uiPort}` : undefined,
    process: child,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
