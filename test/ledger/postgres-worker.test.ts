/**
 * Workers configured with DATABASE_URL share one ledger: two workers with different data directories on one task
 * queue run agent runs on the real dev server, and every run's accounting lands in the one PostgreSQL ledger
 * (with SQLite each would keep its own file and split the accounting).
 */
import { existsSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { parseCatalog } from '../../src/catalog/index.js';
import { startAgentRun } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { PostgresLedger } from '../../src/ledger/index.js';
import { createWorker, type HarnessWorker } from '../../src/worker.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, testWorkflowId } from '../support/worker.js';

let pg: TestPostgres;
let databaseUrl: string;
const workers: { worker: HarnessWorker; running: Promise<void>; connection: NativeConnection; dataDir: string }[] = [];
let client: Client;
let clientConnection: Connection;
const book = scriptBook();
const taskQueue = `pg-workers-${Date.now().toString(36)}`;

beforeAll(async () => {
  pg = await startTestPostgres();
  databaseUrl = (await pg.freshSchema('workers')).url;
  const catalog = parseCatalog(scriptedCatalog(book), 'test catalog', { baseDir: path.join(repoRoot, 'config') });
  const address = inject('temporalAddress');
  for (let i = 0; i < 2; i++) {
    const connection = await NativeConnection.connect({ address });
    const dataDir = mkdtempSync(path.join(os.tmpdir(), `dh-pgw${i}-`));
    const { worker } = await createWorker({
      connection,
      taskQueue,
      catalog: () => catalog,
      dataDir,
      env: { DATABASE_URL: databaseUrl },
      credentials: new MemoryCredentialStore({}),
      workflowBundle: { codePath: inject('workflowBundlePath') },
      identity: `worker-${i}`,
      decisions: 'trusted-network',
    });
    workers.push({ worker, running: worker.run(), connection, dataDir });
  }
  clientConnection = await Connection.connect({ address });
  client = new Client({ connection: clientConnection });
}, 120_000);

afterAll(async () => {
  for (const w of workers) {
    if (w.worker.getState() === 'RUNNING') w.worker.shutdown();
    await w.running;
    await w.connection.close();
  }
  await clientConnection?.close();
  await pg?.stop();
});

it('every run of either worker is accounted in the one PostgreSQL ledger, once per turn', async () => {
  const ids = [...Array(6).keys()].map((i) => testWorkflowId(`pgw${i}`));
  const results = await Promise.all(
    ids.map(async (workflowId, i) => {
      const task = book.write(`pgw-${i}`, [{ usage: { input: 10 + i, output: 1 }, ...ok(`run ${i} done`) }]);
      const run = await startAgentRun(client, { agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'u' }, workflowId, taskQueue });
      return run.result();
    }),
  );
  expect(results.map((r) => r.status)).toEqual(ids.map(() => 'succeeded'));

  const ledger = await PostgresLedger.connect({ connectionString: databaseUrl });
  try {
    for (const [i, workflowId] of ids.entries()) {
      const rows = await ledger.listPromptRuns(workflowId);
      expect(rows.map((r) => [r.turn, r.usage.input])).toEqual([[1, 10 + i]]);
      expect(await ledger.getRun(workflowId)).toMatchObject({ status: 'succeeded', agent: 'scripted', tenantId: 'acme' });
    }
  } finally {
    await ledger.close();
  }
  // Neither worker wrote a SQLite ledger of its own.
  for (const w of workers) expect(existsSync(path.join(w.dataDir, 'ledger.sqlite'))).toBe(false);
});

it('a worker with a DATABASE_URL it cannot reach fails at start, saying why', async () => {
  const connection = await NativeConnection.connect({ address: inject('temporalAddress') });
  try {
    await expect(
      createWorker({
        connection,
        taskQueue: `${taskQueue}-bad`,
        catalog: () => parseCatalog(scriptedCatalog(book), 'test catalog', { baseDir: path.join(repoRoot, 'config') }),
        dataDir: mkdtempSync(path.join(os.tmpdir(), 'dh-pgw-bad-')),
        env: { DATABASE_URL: 'postgres://ledger:pw@127.0.0.1:1/ledger' },
        workflowBundle: { codePath: inject('workflowBundlePath') },
      }),
    ).rejects.toThrow(/cannot open the PostgreSQL ledger at postgres:\/\/ledger:\*\*\*@127\.0\.0\.1:1\/ledger/);
  } finally {
    await connection.close();
  }
});
