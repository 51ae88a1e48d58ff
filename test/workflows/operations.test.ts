/** What operators and services do to runs: cancel, retry after failure, survive a worker restart, bad input. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidRunInputError } from '../../src/client/index.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { processAlive, scriptedSleepPids, waitUntilGone } from '../support/processes.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const catalog = scriptedCatalog(book, {
  harnesses: [
    { name: 'asleep', driverClass: 'StdioJson', executable: 'node', active: false, vendor: 'testvendor', model: 'm' },
    { name: 'nowhere', driverClass: 'StdioJson', executable: '/opt/nowhere/harness', active: true, vendor: 'testvendor', model: 'm' },
    { name: 'alien', driverClass: 'MartianCli', executable: 'node', active: true, vendor: 'testvendor', model: 'm' },
    { name: 'keyed', driverClass: 'StdioJson', executable: 'node', active: true, vendor: 'testvendor', model: 'm', apiKeyEnv: 'SCRIPTED_API_KEY' },
  ],
  agents: [
    { name: 'patient', harness: 'scripted', turnAttempts: 2, operatorTimeoutMs: 60_000 },
    { name: 'impatient', harness: 'scripted', turnAttempts: 1, operatorTimeoutMs: 1000 },
    { name: 'sleepy', harness: 'asleep' },
    { name: 'lost', harness: 'nowhere' },
    { name: 'martian', harness: 'alien' },
    { name: 'granted', harness: 'scripted', credentials: [{ env: 'SCRIPTED_API_KEY', from: 'SERVER_SECRET_FOR_TESTS' }] },
    { name: 'ungranted', harness: 'scripted', credentials: [{ env: 'SCRIPTED_API_KEY', from: 'NOT_SET_ANYWHERE' }] },
    { name: 'keyless', harness: 'keyed' },
  ],
});
const secret = 'sk-test-0123456789-super-secret-value';
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog, env: { SERVER_SECRET_FOR_TESTS: secret } });
});
afterAll(() => w?.close());

const scratch = (workflowId: string) => path.join(w.dataDir, 'workspaces', 'runs', workflowId, '.scripted');

async function sleepingPids(workflowId: string): Promise<number[]> {
  const file = (f: string) => path.join(scratch(workflowId), f);
  await expect.poll(() => existsSync(file('child.pid')), { timeout: 15_000, interval: 20 }).toBe(true);
  return await scriptedSleepPids(path.dirname(scratch(workflowId)));
}

/** Every string and every byte field (decoded as UTF-8) in the history, so payload contents are searchable. */
function historyText(history: unknown): string {
  const parts: string[] = [];
  const seen = new Set<unknown>();
  const walk = (value: unknown): void => {
    if (value instanceof Uint8Array) parts.push(Buffer.from(value).toString('utf8'));
    else if (typeof value === 'string') parts.push(value);
    else if (value && typeof value === 'object' && !seen.has(value)) {
      seen.add(value);
      for (const v of Object.values(value)) walk(v);
    }
  };
  walk(history);
  return parts.join('\n');
}

async function endEvents(workflowId: string): Promise<number> {
  return (await w.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'end').length;
}

describe('cancellation', () => {
  it('a cancel signal kills the in-flight turn process tree at once (within 1 s) and ends the session once', async () => {
    const task = book.write('cancel-me', [{ sleepMs: 60_000, ...ok() }]);
    const workflowId = testWorkflowId('cancel');
    const run = await w.start({ agent: 'scripted', task, workflowId });
    const pids = await sleepingPids(workflowId);
    expect(pids.every(processAlive)).toBe(true);
    await run.cancel('operator changed their mind');
    const tookMs = await waitUntilGone(pids, 2000);
    // Stopped on this host when the workflow decides (turnStops), not at the turn's next heartbeat (up to 2 s).
    console.info(`cancel: the turn's tree gone ${tookMs} ms after the cancel`);
    expect(tookMs).toBeLessThan(1000);
    const result = await run.result();
    expect(result).toMatchObject({ status: 'cancelled', reason: 'operator changed their mind' });
    expect(await endEvents(workflowId)).toBe(1);
    expect((await w.ledger.getRun(workflowId))?.status).toBe('cancelled');
  });

  it("Temporal's own cancel request does the same", async () => {
    const task = book.write('cancel-me-too', [{ sleepMs: 60_000, ...ok() }]);
    const workflowId = testWorkflowId('tcancel');
    const run = await w.start({ agent: 'scripted', task, workflowId });
    const pids = await sleepingPids(workflowId);
    await run.handle.cancel();
    expect(await waitUntilGone(pids, 2000)).toBeLessThan(2000);
    expect((await run.result()).status).toBe('cancelled');
    expect(await endEvents(workflowId)).toBe(1);
  });
});

describe('a turn that exhausts its retries', () => {
  it('waits for an operator, then the retried turn completes the run', async () => {
    // 2 attempts per turn: runs 1-2 fail, the operator retries, runs 3-4 fail, the operator retries, run 5 succeeds.
    const task = book.write('flaky', [act({ name: 'echo', params: { text: 'x' } }), { failTimes: 4, ...ok('recovered') }]);
    const workflowId = testWorkflowId('operator');
    const failures = path.join(scratch(workflowId), 'counters', 'flaky.1.failures');
    const runsOfTurn2 = () => (existsSync(failures) ? Number(readFileSync(failures, 'utf8')) : 0);
    const run = await w.start({ agent: 'patient', task, workflowId });
    await expect.poll(async () => (await run.status()).state, { timeout: 30_000, interval: 100 }).toBe('awaiting_operator');
    const status = await run.status();
    expect(status.lastError).toMatch(/transient failure/);
    expect(status.iteration).toBe(2);
    expect(runsOfTurn2()).toBe(2);
    await run.retryTurn();
    await expect.poll(async () => runsOfTurn2() === 4 && (await run.status()).state, { timeout: 30_000, interval: 100 }).toBe('awaiting_operator');
    await run.retryTurn();
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'recovered', iterations: 2 });
    expect(runsOfTurn2()).toBe(5);
    // One prompt-run row per attempt: the four failed runs of turn 2 are in the books, unused.
    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.map((r) => [r.turn, r.status, r.outputUsed])).toEqual([
      [1, 'succeeded', true],
      [2, 'failed', false],
      [2, 'failed', false],
      [2, 'failed', false],
      [2, 'failed', false],
      [2, 'succeeded', true],
    ]);
    expect(rows.filter((r) => r.status === 'failed').every((r) => /transient failure/.test(r.error ?? ''))).toBe(true);
    // Operator retries schedule the turn anew: attempt numbers restart, attempt ids never repeat.
    expect(rows.map((r) => r.attempt)).toEqual([1, 1, 2, 1, 2, 1]);
    expect(new Set(rows.map((r) => r.attemptId)).size).toBe(6);
  });

  it('abandon ends it as failed', async () => {
    const task = book.write('broken', [{ failTimes: 99, ...ok() }]);
    const run = await w.start({ agent: 'patient', task });
    await expect.poll(async () => (await run.status()).state, { timeout: 30_000, interval: 100 }).toBe('awaiting_operator');
    await run.abandon('not worth it');
    expect(await run.result()).toMatchObject({ status: 'failed', failureType: 'Abandoned' });
  });

  it('fails when no operator decides in time', async () => {
    const task = book.write('broken2', [{ failTimes: 99, ...ok() }]);
    const result = await (await w.start({ agent: 'impatient', task })).result();
    expect(result).toMatchObject({ status: 'failed', failureType: 'OperatorTimeout' });
    expect(result.reason).toMatch(/transient failure/);
  });
});

it('a worker stopped mid-turn hands the run to a new worker; the interrupted attempt keeps its own row', async () => {
  // The turn outlasts the worker's 5 s shutdown grace, so the stop really interrupts it.
  const task = book.write('restart', [act({ name: 'echo', params: { text: 'one' } }), { sleepMs: 8000, ...act({ name: 'echo', params: { text: 'two' } }) }, ok('finished elsewhere')]);
  const workflowId = testWorkflowId('restart');
  const first = await startTestWorker({ catalog, env: {}, taskQueue: `restart-${workflowId}` });
  const second: { w?: TestWorker } = {};
  try {
    const run = await first.start({ agent: 'scripted', task, workflowId });
    const pids = await (async () => {
      const file = (f: string) => path.join(first.dataDir, 'workspaces', 'runs', workflowId, '.scripted', f);
      await expect.poll(() => existsSync(file('child.pid')), { timeout: 15_000, interval: 20 }).toBe(true);
      return await scriptedSleepPids(path.join(first.dataDir, 'workspaces', 'runs', workflowId));
    })();
    const stopAt = Date.now();
    await first.stopWorker();
    await waitUntilGone(pids, 7000);
    expect(Date.now() - stopAt).toBeLessThan(7500); // killed by the stop, not finished by itself (8 s)
    second.w = await startTestWorker({ catalog, env: {}, taskQueue: first.taskQueue, dataDir: first.dataDir });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'finished elsewhere', iterations: 3 });
    const rows = await second.w.ledger.listPromptRuns(workflowId);
    // The interrupted attempt keeps its row (cancelled by the worker's shutdown, unused); no turn is counted twice.
    expect(rows.map((r) => [r.turn, r.attempt, r.status, r.outputUsed])).toEqual([
      [1, 1, 'succeeded', true],
      [2, 1, 'cancelled', false],
      [2, 2, 'succeeded', true],
      [3, 1, 'succeeded', true],
    ]);
    const retries = (await second.w.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'retry');
    expect(retries.map((e) => e.turn)).toEqual([2]);
  } finally {
    await first.close();
    await second.w?.close();
  }
});

describe('bad configuration and input fail clearly, without retrying', () => {
  const cases: [agent: string, type: string, message: RegExp][] = [
    ['nobody', 'UnknownAgent', /nobody.*(known|available).*scripted/i],
    ['sleepy', 'InactiveHarness', /inactive.*active: true/],
    ['lost', 'HarnessBinaryMissing', /\/opt\/nowhere\/harness.*was not found.*Install it.*"executable"/],
    ['martian', 'UnknownDriver', /MartianCli.*Registered: .*StdioJson/],
    ['ungranted', 'CredentialMissing', /SCRIPTED_API_KEY.*NOT_SET_ANYWHERE/],
    // A harness that names its key variable fails at resolution, naming the grant to add (not 3 keyless attempts).
    ['keyless', 'CredentialMissing', /harness "keyed" takes its key from SCRIPTED_API_KEY.*add credentials: \[\{ env: SCRIPTED_API_KEY, from: <NAME> \}\] to agent "keyless"/],
  ];
  for (const [agent, type, message] of cases) {
    it(`${agent} → ${type}`, async () => {
      const task = book.write(`never-${agent}`, [ok()]);
      const result = await (await w.start({ agent, task })).result();
      expect(result.status).toBe('failed');
      expect(result.failureType).toBe(type);
      expect(result.reason).toMatch(message);
    });
  }

  it('rejects run input that cannot start, naming the field', async () => {
    await expect(w.start({ agent: 'scripted', task: '' })).rejects.toThrow(InvalidRunInputError);
    await expect(w.start({ agent: 'scripted', task: 'x', identity: { tenantId: '', userId: 'u' } })).rejects.toThrow(/identity.tenantId/);
  });
});

it('secrets reach the harness as environment only: never in argv, history, the ledger or the result', async () => {
  const task = book.write('secret', [{ echoEnv: 'SCRIPTED_API_KEY', sleepMs: 300, raw: '{"step":"success","result":"key is ${env:SCRIPTED_API_KEY}"}' }]);
  const workflowId = testWorkflowId('secret');
  const run = await w.start({ agent: 'granted', task, workflowId });
  const [harnessPid] = await sleepingPids(workflowId);
  const environ = readFileSync(`/proc/${harnessPid}/environ`, 'utf8').split('\0');
  const cmdline = readFileSync(`/proc/${harnessPid}/cmdline`, 'utf8');
  expect(environ).toContain(`SCRIPTED_API_KEY=${secret}`);
  expect(cmdline).not.toContain(secret);
  const result = await run.result();
  expect(result.status).toBe('succeeded');
  expect(result.result).toBe('key is [REDACTED]');

  const history = historyText(await run.handle.fetchHistory());
  expect(history).toContain('script:secret'); // the decoding works: payloads are readable here
  expect(history).toContain('[REDACTED]');
  expect(history).not.toContain(secret);
  const ledgerBytes = readFileSync(path.join(w.dataDir, 'ledger.sqlite')).toString('latin1') + (existsSync(path.join(w.dataDir, 'ledger.sqlite-wal')) ? readFileSync(path.join(w.dataDir, 'ledger.sqlite-wal')).toString('latin1') : '');
  expect(ledgerBytes).toContain('[REDACTED]');
  expect(ledgerBytes).not.toContain(secret);
});
