/** `endSession` is compensation: it is retried until it succeeds and never fails the run (issue 8). */
import path from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { LocalSandboxProvider } from '../../src/sandbox/index.js';
import type { SandboxProvider } from '../../src/sandbox/types.js';
import { spawnCli } from '../support/cli.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;
/** How many more times ending a sandbox fails; counted on every call. */
let failEnds = 0;
let endCalls = 0;

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book),
    sandboxes: (dataDir) => {
      const local = new LocalSandboxProvider({ root: path.join(dataDir, 'workspaces') });
      const end: SandboxProvider['end'] = async (ref) => {
        endCalls += 1;
        if (failEnds > 0) {
          failEnds -= 1;
          throw new Error('the sandbox could not be ended (test fault)');
        }
        return local.end(ref);
      };
      const flaky = new Proxy(local, {
        get: (target, key) => {
          if (key === 'end') return end;
          const value = Reflect.get(target, key) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      return { local: flaky };
    },
  });
});
afterAll(() => w?.close());

it('an endSession that keeps failing past its retry policy is retried until it succeeds: the run ends as it should, the ledger row is closed once', { timeout: 90_000 }, async () => {
  // The local activity gives up after 5 attempts; 6 failures need a second round.
  failEnds = 6;
  endCalls = 0;
  const task = book.write('end-retry', [ok('done')]);
  const workflowId = testWorkflowId('end-retry');
  const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'done' });
  expect(failEnds).toBe(0);
  expect(endCalls).toBeGreaterThanOrEqual(7);
  expect((await w.ledger.getRun(workflowId))?.status).toBe('succeeded');
  expect((await w.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'end')).toHaveLength(1);
});

it('an endSession that keeps failing shows in status (API and CLI) while it is retried, and goes once it succeeds', { timeout: 120_000 }, async () => {
  // Three rounds of 5 attempts fail (about 7.5 s each, with 1 s and 2 s pauses between), then it ends: the end is
  // failing from about 7 s to about 28 s, time enough for the CLI.
  failEnds = 16;
  endCalls = 0;
  const run = await w.start({ agent: 'scripted', task: book.write('end-failing', [ok('done')]), workflowId: testWorkflowId('end-failing') });
  await expect.poll(async () => (await run.status()).sessionEnd?.failures ?? 0, { timeout: 60_000, interval: 100 }).toBeGreaterThanOrEqual(1);
  const view = await run.status();
  expect(view.sessionEnd).toMatchObject({ state: 'failing', lastError: expect.stringMatching(/could not be ended \(test fault\)/) });
  const cli = await spawnCli(['status', run.workflowId, '--address', inject('temporalAddress'), '--task-queue', w.taskQueue]).outcome;
  expect(failEnds, cli.stderr).toBeGreaterThan(0); // still failing when the CLI answered
  expect(cli.stderr).toBe("");
  expect(cli.stdout).toMatch(/succeeded: done\nsession end FAILING \(\d+ round\(s\), retried until it succeeds\): .*could not be ended \(test fault\)/);
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'done' });
  expect(failEnds).toBe(0);
  expect((await w.ledger.getRun(run.workflowId))?.status).toBe('succeeded');
});
