/**
 * Envelopes with 10,000 and 90,000 actions (the second a 3.6 MB reply, under the 4 MiB reply cap) on a real worker
 * and Temporal dev server: none of the calls runs, the harness is told the cap in its next turn, the turn costs a few
 * KB of history (90,000 calls once wedged the run: the next turn's input passed Temporal's 2 MiB), the operator gets
 * an event, and `status` (the query and the command line) names the cap while the run goes on.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DEFAULT_MAX_ACTIONS_PER_ENVELOPE } from '../../src/envelope/index.js';
import { spawnCli } from '../support/cli.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const { EventType } = proto.temporal.api.enums.v1;
const { HistoryEvent } = proto.temporal.api.history.v1;

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book) });
});
afterAll(() => w?.close());

const CAP = DEFAULT_MAX_ACTIONS_PER_ENVELOPE;

describe('actions per envelope', () => {
  it.each([10_000, 90_000])('%d actions in one envelope: none runs, the harness is told the cap, the turn stays small, status names it', { timeout: 180_000 }, async (n) => {
    const actions = Array.from({ length: n }, (_, i) => ({ name: 'echo', params: { text: String(i) } }));
    const task = book.write(`actions-${n}`, [{ envelope: { step: 'actions', actions } }, { envelope: { step: 'chat', message: 'anything else?' } }, ok('capped')]);
    const run = await w.start({ agent: 'scripted', task, workflowId: testWorkflowId(`actions-${n}`) });
    await expect.poll(async () => (await run.status()).state, { timeout: 120_000, interval: 100 }).toBe('waiting_for_reply');

    const problem = `the envelope asks for ${n} actions, over this agent's cap of ${CAP} actions per envelope (maxActionsPerEnvelope), so none of them ran; ask for at most ${CAP} actions per envelope and send the rest in later turns`;
    // The harness's next turn said so.
    const workspace = (await run.status()).sandbox!.hostWorkspacePath;
    const second = JSON.parse(readFileSync(path.join(workspace, '.scripted', 'last-request.json'), 'utf8')) as { prompt: string; turn: number };
    expect(second.turn).toBe(2);
    expect(second.prompt).toContain(`Your last reply was not a valid envelope: ${problem}`);
    // Nothing ran; the ledger has the refusal as its own step and one event.
    const steps = await w.ledger.listSteps(run.workflowId);
    expect(steps.filter((s) => s.type.startsWith('action:'))).toEqual([]);
    expect(steps.filter((s) => s.type === 'actions-over-cap').map((s) => s.payload)).toEqual([{ problem, asked: n, cap: CAP }]);
    const events = await w.ledger.readEvents(run.workflowId, 0, 1000);
    expect(events.filter((e) => e.type === 'actions-over-cap').map((e) => e.data)).toEqual([{ asked: n, cap: CAP }]);

    // The refused turn costs a few KB of history: its result carries the problem, not the calls.
    const history = (await run.handle.fetchHistory()).events ?? [];
    const scheduled = history.findIndex((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED && e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn');
    const completed = history.findIndex((e, i) => i > scheduled && e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED);
    const turnBytes = history.slice(scheduled, completed + 1).reduce((bytes, e) => bytes + HistoryEvent.encode(e).finish().length, 0);
    const nextInput = history.slice(completed).find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn')!;
    const nextInputBytes = HistoryEvent.encode(nextInput).finish().length;
    console.log(`${n} actions: refused turn ${turnBytes} bytes of history, next turn's scheduling ${nextInputBytes} bytes`);
    expect(turnBytes).toBeLessThan(8 * 1024);
    expect(nextInputBytes).toBeLessThan(4 * 1024);

    // Status tells the truth: the query and the command line, with the run waiting for its reply (exit 14), not blamed on a worker.
    expect((await run.status()).lastError).toBe(problem);
    const cli = await spawnCli(['status', run.workflowId, '--address', inject('temporalAddress')]).outcome;
    expect(cli.stdout).toContain(`last problem: ${problem}`);
    expect(cli.code).toBe(14);

    await run.reply('no');
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'capped', iterations: 3 });
  });
});
