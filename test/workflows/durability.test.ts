/**
 * Runs that survive config edits and big outputs, and stay lean: a frozen spec, claim-checked texts, a reply cap,
 * a 300-turn run of a harness without native resume, continue-as-new by history size, a shared workspace.
 *
 * History ceiling asserted here: a steady-state turn (one turn scheduled to the next) costs at most
 * STEADY_TURN_EVENTS events and STEADY_TURN_BYTES bytes of history, whatever the size of the replies.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { workflowVersion } from '../../src/workflows/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LedgerBlobStore } from '../../src/blobs/index.js';
import { historyFigures } from '../support/history-figures.js';
import { act, ok, scriptBook, scriptedCatalog, statelessHarness } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const STEADY_TURN_EVENTS = 8;
const STEADY_TURN_BYTES = 2048;
const MB = 1024 * 1024;

const book = scriptBook();
const extra = {
  harnesses: [statelessHarness(book)],
  agents: [
    { name: 'marathon', harness: 'stateless', actions: ['echo'], guardrails: { maxIterations: 400, maxTokens: 10_000_000, maxCostUsd: 100, maxWallTimeMs: 600_000 } },
    { name: 'mutable', harness: 'scripted', actions: ['echo'], systemPrompt: 'version one' },
    { name: 'writer', harness: 'scripted', actions: ['write_file'], subAgents: ['reviewer'] },
    { name: 'reviewer', description: 'reviews notes', harness: 'scripted', actions: ['read_file'], sandbox: { workspaceScope: 'parent' } },
  ],
};
const catalog = scriptedCatalog(book, extra);
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog });
});
afterAll(() => w?.close());

const echo = (text: string) => act({ name: 'echo', params: { text } });

it('a run finishes unchanged when its agent is edited and then removed from the catalog mid-run', async () => {
  const task = book.write('frozen', [{ sleepMs: 1500, ...echo('one') }, echo('two'), ok('finished as started')]);
  const workflowId = testWorkflowId('frozen');
  const run = await w.start({ agent: 'mutable', task, workflowId });
  await expect.poll(async () => (await run.status()).detail, { timeout: 15_000, interval: 50 }).toMatch(/turn 1/);
  // Edit: the harness now points nowhere, the action is gone, the prompt changed ...
  const edited = scriptedCatalog(book, {
    ...extra,
    harnesses: extra.harnesses,
    agents: extra.agents.map((a) => (a.name === 'mutable' ? { ...a, systemPrompt: 'version two', actions: [] } : a)),
  });
  (edited.harnesses as Record<string, unknown>[])[0]!.executable = '/opt/nowhere/harness';
  w.replaceCatalog(edited);
  await expect.poll(async () => (await run.status()).iteration, { timeout: 15_000, interval: 50 }).toBeGreaterThanOrEqual(2);
  // ... then the agent is removed altogether.
  w.replaceCatalog({ ...edited, agents: extra.agents.filter((a) => a.name !== 'mutable') });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'finished as started', iterations: 3 });
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows[1]!.input).toMatch(/1\. echo: ok\n"?one/);
  expect(rows[2]!.input).toMatch(/1\. echo: ok\n"?two/);
  w.replaceCatalog(catalog);
});

describe('big outputs', () => {
  it('a run of 1 MB replies completes, and its history grows by a small, fixed amount per turn', async () => {
    const big = (i: number) => ({ padBytes: MB, ...echo(`reply ${i}`) });
    const task = book.write('megabytes', [big(1), big(2), big(3), big(4), { padBytes: MB, ...ok('x'.repeat(2 * MB)) }]);
    const workflowId = testWorkflowId('megabytes');
    const run = await w.start({ agent: 'scripted', task, workflowId });
    const result = await run.result();
    expect(result.status).toBe('succeeded');
    // A 2 MB result comes back by reference: its opening inline, the whole in the blob store.
    expect(result.resultRef?.bytes).toBe(2 * MB);
    expect(result.result!.length).toBeLessThan(1000);
    expect((await w.ledger.getBlob(result.resultRef!.blob))?.length).toBe(2 * MB);
    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.every((r) => r.output.length > MB)).toBe(true);
    const h = await historyFigures(w.client, workflowId, (run.handle as unknown as { firstExecutionRunId: string }).firstExecutionRunId);
    expect(h.turns).toBe(5);
    expect(h.steadyTurnEvents).toBeLessThanOrEqual(STEADY_TURN_EVENTS);
    expect(h.steadyTurnBytes).toBeLessThanOrEqual(STEADY_TURN_BYTES);
    expect(h.bytes).toBeLessThan(32 * 1024); // five 1 MB replies and a 2 MB result: the history never holds them
  });

  it('a 5 MB reply is refused with a clear error to the harness (a feedback turn) and to the operator', async () => {
    const task = book.write('too-big', [{ padBytes: 5 * MB, ...ok('never seen') }, ok('short this time')]);
    const workflowId = testWorkflowId('too-big');
    const run = await w.start({ agent: 'scripted', task, workflowId });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'short this time', iterations: 2 });
    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows[1]!.input).toMatch(/^Your last reply was not a valid envelope: the reply was \d{7} bytes, over this harness's limit of 4194304 bytes/);
    expect(rows[0]!.output.length).toBeLessThan(100 * 1024);
    expect(rows[0]!.output).toMatch(/refused at the limit of 4194304/);
    const events = await w.ledger.readEvents(workflowId, 0, 1000);
    expect(events.filter((e) => e.type === 'reply-too-large').map((e) => e.data)).toEqual([{ bytes: expect.any(Number), limit: 4194304 }]);
    expect((await w.ledger.listSteps(workflowId)).map((s) => s.type)).toContain('reply-too-large');
  });

  it('a large chat reply and a large task travel by reference', async () => {
    const bigTask = `${'context '.repeat(10_000)} script:chatty`;
    book.write('chatty', [{ envelope: { step: 'chat', message: 'Paste the log?' } }, ok('read it')]);
    const workflowId = testWorkflowId('chatty');
    const run = await w.start({ agent: 'scripted', task: bigTask, workflowId });
    await expect.poll(async () => (await run.status()).state, { timeout: 15_000 }).toBe('waiting_for_reply');
    const log = 'log line\n'.repeat(50_000);
    // The client stores a reply over the inline limit in the workers' blob store and sends its reference.
    await run.reply(log, { blobs: new LedgerBlobStore(w.ledger) });
    expect((await run.result()).status).toBe('succeeded');
    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows[0]!.input).toBe(bigTask);
    expect(rows[1]!.input).toContain(log);
    const h = await historyFigures(w.client, workflowId, (run.handle as unknown as { firstExecutionRunId: string }).firstExecutionRunId);
    // The task is in the start event, once: nothing else carries it. The reply is not in history at all.
    expect(h.bytes).toBeLessThan(JSON.stringify(bigTask).length + 16 * 1024);
  });
});

it('a 300-turn run of a harness without native resume completes, with a fixed history cost per turn', { timeout: 600_000 }, async () => {
  const turns = 300;
  const task = book.write('marathon', [...Array.from({ length: turns - 1 }, (_, i) => ({ usage: { input: 10, output: 5 }, ...echo(`step ${i + 1}`) })), ok('ran the marathon')]);
  const workflowId = testWorkflowId('marathon');
  const run = await w.start({ agent: 'marathon', task, workflowId });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'ran the marathon', iterations: turns });
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows).toHaveLength(turns);
  expect(rows.every((r) => !r.resumed)).toBe(true);
  const h = await historyFigures(w.client, workflowId, (run.handle as unknown as { firstExecutionRunId: string }).firstExecutionRunId);
  console.log(`300-turn run: ${h.events} events, ${h.bytes} bytes, ${h.executions} execution(s); steady turn ${h.steadyTurnEvents} events, ${h.steadyTurnBytes} bytes`);
  expect(h.turns).toBe(turns);
  expect(h.steadyTurnEvents).toBeLessThanOrEqual(STEADY_TURN_EVENTS);
  expect(h.steadyTurnBytes).toBeLessThanOrEqual(STEADY_TURN_BYTES);
  expect(h.bytes / turns).toBeLessThanOrEqual(STEADY_TURN_BYTES);
});

it('continues as new when the history passes the size threshold, carrying only the state', async () => {
  const task = book.write('sized', [...Array.from({ length: 7 }, (_, i) => echo(`n${i}`)), ok('sized done')]);
  const workflowId = testWorkflowId('sized');
  const run = await w.client.workflow.start('agentRun', {
    taskQueue: w.taskQueue,
    workflowId,
    args: [{ agent: 'scripted', task, identity: { tenantId: 't', userId: 'u' }, continueAsNewAtHistoryBytes: 8 * 1024, workflowVersion }],
  });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', iterations: 8 });
  const h = await historyFigures(w.client, workflowId, run.firstExecutionRunId);
  expect(h.executions).toBeGreaterThanOrEqual(2);
  expect(h.largestExecutionBytes).toBeLessThan(16 * 1024);
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows.map((r) => r.turn)).toEqual(Array.from({ length: 8 }, (_, i) => i + 1));
});

it("README example: a reviewer sub-agent with workspaceScope parent reads the parent's NOTES.md", async () => {
  book.write('review', [act({ name: 'read_file', params: { path: 'NOTES.md' } }), ok('NOTES.md looks right: it says hello')]);
  const task = book.write('write-then-review', [
    act({ name: 'write_file', params: { path: 'NOTES.md', content: '# Notes\nhello from the writer\n' } }),
    { envelope: { step: 'sub-agent', agent: 'reviewer', message: 'review NOTES.md script:review', terminateAfter: false } },
    ok('written and reviewed'),
  ]);
  const workflowId = testWorkflowId('review');
  const result = await (await w.start({ agent: 'writer', task, workflowId })).result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'written and reviewed' });
  const child = `${workflowId}.sub-2`;
  expect((await w.ledger.listPromptRuns(child))[1]!.input).toContain('hello from the writer');
  expect((await w.ledger.listPromptRuns(workflowId))[2]!.input).toContain('NOTES.md looks right');
  // The parent's workspace is still there, untouched by the child's end.
  expect(readFileSync(path.join(w.dataDir, 'workspaces', 'runs', workflowId, 'NOTES.md'), 'utf8')).toContain('hello from the writer');
});
