/**
 * Followers of the PostgreSQL ledger miss nothing while several workers write one run's events at once: a cursor
 * is drawn only after the run's earlier inserts committed, so reading "after my last cursor" never skips a row that
 * commits late, and each insert's notification wakes the follower.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { followRunEvents, type RunEvent } from '../../src/client/events.js';
import { postgresEventSource } from '../../src/client/postgres-events.js';
import { PostgresLedger } from '../../src/ledger/index.js';
import { startTestPostgres, type TestPostgres } from '../support/postgres.js';

let pg: TestPostgres;
let url: string;

beforeAll(async () => {
  pg = await startTestPostgres();
  url = (await pg.freshSchema('events')).url;
}, 60_000);

afterAll(async () => {
  await pg?.stop();
});

it('four writers on one run, a follower reading as they write: it sees every row once, in cursor order', { timeout: 60_000 }, async () => {
  const writers = await Promise.all([...Array(4).keys()].map(() => PostgresLedger.connect({ connectionString: url, maxConnections: 4 })));
  const workflowId = 'wf-many-writers';
  await writers[0]!.startRun({ workflowId, runId: 'r1', agent: 'a', harness: 'h', tenantId: 't', userId: 'u', task: 'x' });
  const source = await postgresEventSource(url);
  const stop = new AbortController();
  const seen: RunEvent[] = [];
  const following = (async () => {
    for await (const e of followRunEvents(source, workflowId, { signal: stop.signal })) seen.push(e);
  })();
  // Each writer keeps several inserts in flight at once, as a turn's progress queue and its gate can.
  await Promise.all(writers.map((w, i) => Promise.all([...Array(150).keys()].map((n) => w.appendEvent(workflowId, 1, 'activity', { description: `w${i} n${n}` })))));
  await writers[0]!.appendEvent(workflowId, 1, 'end', { status: 'succeeded' });
  await following;
  stop.abort();
  await source.close?.();
  const all = await writers[0]!.readEvents(workflowId, 0, 1000);
  expect(seen.map((e) => Number(e.cursor))).toEqual(all.map((e) => e.cursor));
  expect(seen).toHaveLength(601);
  for (const w of writers) await w.close();
});
