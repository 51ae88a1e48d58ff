/**
 * Worker processes standing in for hosts (test/support/worker-process.ts): each with its own data and workspace
 * root, all on one task queue, one Temporal server and one PostgreSQL ledger. Used by the many-workers test and by
 * `npm run bench -- workers`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, inject } from 'vitest';
import { PostgresLedger } from '../../src/ledger/index.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';

const script = path.join(import.meta.dirname, '..', 'support', 'worker-process.ts');

export interface HostProcess {
  readonly hostId: string;
  readonly dataDir: string;
  readonly child: ChildProcess;
  readonly pid: number;
  /** Where its stdout and stderr go. */
  readonly logFile: string;
  /** SIGKILL: the host is gone, with no chance to clean up. */
  kill(): Promise<void>;
  /** SIGTERM and wait (a graceful stop). */
  stop(): Promise<void>;
}

export interface HostOptions {
  readonly temporalAddress: string;
  readonly taskQueue: string;
  readonly databaseUrl: string;
  readonly catalog: unknown;
  readonly hostId: string;
  readonly workflowBundle?: string;
  readonly dataDir?: string;
}

/** Starts one host process and resolves once it polls. */
export async function startHostProcess(options: HostOptions): Promise<HostProcess> {
  const dataDir = options.dataDir ?? mkdtempSync(path.join(os.tmpdir(), `dh-host-${options.hostId}-`));
  const logFile = path.join(dataDir, 'worker.log');
  const log = openSync(logFile, 'a');
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      TEMPORAL_ADDRESS: options.temporalAddress,
      TASK_QUEUE: options.taskQueue,
      DATA_DIR: dataDir,
      HOST_ID: options.hostId,
      DATABASE_URL: options.databaseUrl,
      CATALOG_JSON: JSON.stringify(options.catalog),
      ...(options.workflowBundle ? { WORKFLOW_BUNDLE: options.workflowBundle } : {}),
      // Every host gets the same catalog here; the check (one query per start) is skipped, as it always was for hosts.
      CATALOG_CHECK: 'off',
      LOG_LEVEL: 'WARN',
    },
    cwd: path.resolve(import.meta.dirname, '..', '..'),
    stdio: ['ignore', 'pipe', log],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`host ${options.hostId} did not start within 120 s (see ${logFile})`)), 120_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready ')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`host ${options.hostId} exited with ${code} before it was ready (see ${logFile})`));
    });
  });
  return {
    hostId: options.hostId,
    dataDir,
    child,
    pid: child.pid!,
    logFile,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/**
 * Worker processes standing in for hosts on one PostgreSQL ledger (a fresh `schema`) and the suite's Temporal
 * server, for one test file: `start` adds a host; after the file every host is thawed (a test may have
 * SIGSTOPped it) and stopped, and the ledger, client and database are closed.
 */
export function hostFleet(schema: string, catalog: unknown) {
  let pg: TestPostgres | undefined;
  let connection: Connection | undefined;
  const hosts: HostProcess[] = [];
  const fleet = {
    databaseUrl: '',
    client: undefined as unknown as Client,
    ledger: undefined as unknown as PostgresLedger,
    start: async (taskQueue: string, hostId: string, dataDir?: string): Promise<HostProcess> => {
      const host = await startHostProcess({ temporalAddress: inject('temporalAddress'), taskQueue, databaseUrl: fleet.databaseUrl, catalog, hostId, workflowBundle: inject('workflowBundlePath'), ...(dataDir ? { dataDir } : {}) });
      hosts.push(host);
      return host;
    },
  };
  beforeAll(async () => {
    pg = await startTestPostgres();
    fleet.databaseUrl = (await pg.freshSchema(schema)).url;
    fleet.ledger = await PostgresLedger.connect({ connectionString: fleet.databaseUrl });
    connection = await Connection.connect({ address: inject('temporalAddress') });
    fleet.client = new Client({ connection });
  }, 120_000);
  afterAll(async () => {
    for (const h of hosts) {
      try {
        process.kill(h.pid, 'SIGCONT');
      } catch {
        // gone already
      }
    }
    await Promise.all(hosts.map((h) => h.stop()));
    await fleet.ledger?.close();
    await connection?.close();
    await pg?.stop();
  });
  return fleet;
}
