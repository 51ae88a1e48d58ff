/**
 * Hostile stdout through the workflow, on a real worker and Temporal dev server: four runs flood at once — a 600 MB
 * line with a newline, one without (the line ends at end of output), 1,000,000 tiny lines, 100,000 junk lines — while
 * a normal run on the same worker finishes at its usual pace and its status queries answer. The worker (this
 * process) stays within a memory bound, and each flood's turn ends with what the operator needs to know:
 * `line-too-large` with the byte count, or the count of lines the runtime did not understand, sampled.
 */
import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentRunHandle } from '../../src/client/index.js';
import { sampledLinesPerTurn } from '../../src/adapters/engine.js';
import { maxStdioJsonLineBytes } from '../../src/adapters/stdio-json-adapter.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const { EventType } = proto.temporal.api.enums.v1;

const MB = 1024 * 1024;
const book = scriptBook();
const flooder = {
  name: 'flooder',
  harness: 'scripted',
  systemPrompt: 'You follow scripts.',
  actions: ['echo'],
  guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 300_000 },
  turnAttempts: 1,
};
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book, { agents: [flooder] }) });
});
afterAll(() => w?.close());

const echo = (text: string) => act({ name: 'echo', params: { text } });
const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;
const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const quantile = (xs: readonly number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

/** Each runTurn of a run: when it was scheduled and when it closed (server time). */
async function turnsOf(run: AgentRunHandle) {
  const events = (await run.handle.fetchHistory()).events ?? [];
  const closed = new Set([EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED, EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT]);
  const turns: { scheduledMs: number; closedMs: number }[] = [];
  for (const e of events) {
    if (e.eventType !== EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED || e.activityTaskScheduledEventAttributes?.activityType?.name !== 'runTurn') continue;
    const id = Number(e.eventId);
    const end = events.find((x) => closed.has(x.eventType!) && Number((x.activityTaskCompletedEventAttributes ?? x.activityTaskFailedEventAttributes ?? x.activityTaskTimedOutEventAttributes)?.scheduledEventId ?? -1) === id);
    if (end) turns.push({ scheduledMs: ms(e.eventTime), closedMs: ms(end.eventTime) });
  }
  return turns;
}

/** A normal five-turn run to its end, timing its status queries (as `durable-harness status` asks them). */
async function neighbour(label: string) {
  const run = await w.start({ agent: 'scripted', task: book.write(label, [echo('1'), echo('2'), echo('3'), echo('4'), ok('neighbour done')]), workflowId: testWorkflowId(label) });
  const queries: number[] = [];
  let done = false;
  const finished = run.result().finally(() => (done = true));
  for (const deadline = Date.now() + 120_000; !done && Date.now() < deadline; ) {
    const t = performance.now();
    await run.status();
    queries.push(performance.now() - t);
    await new Promise((r) => setTimeout(r, 25));
  }
  await expect(finished).resolves.toMatchObject({ status: 'succeeded', result: 'neighbour done' });
  const turns = await turnsOf(run);
  return { queries, turns, turnMs: turns.map((t) => t.closedMs - t.scheduledMs) };
}

/** The worker's peak RSS (this process) while `fn` runs, sampled every 20 ms. */
async function peakRss<T>(fn: () => Promise<T>): Promise<{ value: T; peak: number }> {
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  try {
    return { value: await fn(), peak };
  } finally {
    clearInterval(timer);
  }
}

async function eventsOf(workflowId: string) {
  const all: Awaited<ReturnType<TestWorker['ledger']['readEvents']>> = [];
  for (let page = await w.ledger.readEvents(workflowId, 0, 1000); page.length > 0; page = await w.ledger.readEvents(workflowId, page.at(-1)!.cursor, 1000)) all.push(...page);
  return all;
}

describe('an output flood', () => {
  it('four floods at once: the neighbour keeps its pace, status answers, memory stays bounded, each flood ends saying what it was', { timeout: 300_000 }, async () => {
    const alone = await neighbour('out-neighbour-alone');
    const floods = {
      line: { outputFlood: { line: 600 * MB }, ...ok('line flood over') },
      lineAtEof: { outputFlood: { line: 600 * MB, newline: false } },
      tiny: { outputFlood: { tinyLines: 1_000_000 }, ...ok('tiny flood over') },
      junk: { outputFlood: { junkLines: 100_000 }, ...ok('junk flood over') },
    };
    const rssBefore = process.memoryUsage().rss;
    const { value, peak } = await peakRss(async () => {
      const runs = await Promise.all(
        Object.entries(floods).map(async ([name, step]) => [name, await w.start({ agent: 'flooder', task: book.write(`out-${name}`, [step]), workflowId: testWorkflowId(`out-${name}`) })] as const),
      );
      // Every flood is under way (its harness wrote its first line) before the neighbour starts.
      for (const [, run] of runs) await expect.poll(async () => (await w.ledger.readEvents(run.workflowId, 0, 10)).some((e) => e.type === 'session'), { timeout: 60_000, interval: 20 }).toBe(true);
      const during = await neighbour('out-neighbour-during');
      // The flood without a newline fails its only attempt: the run waits for an operator, who gives it up.
      const eof = runs.find(([name]) => name === 'lineAtEof')![1];
      await expect.poll(async () => (await eof.status()).state, { timeout: 120_000, interval: 100 }).toBe('awaiting_operator');
      const eofStatus = await eof.status();
      await eof.abandon('flood test');
      const results = Object.fromEntries(await Promise.all(runs.map(async ([name, run]) => [name, { run, result: await run.result() }] as const)));
      return { during, results, eofStatus };
    });
    const { during, results, eofStatus } = value;
    const floodTurns = await Promise.all(Object.values(results).map(async ({ run }) => (await turnsOf(run))[0]!));
    const figures = {
      rssMb: { before: Math.round(rssBefore / MB), peak: Math.round(peak / MB) },
      neighbourTurnMs: { alone: Math.round(mean(alone.turnMs)), during: Math.round(mean(during.turnMs)) },
      statusQueryMs: { aloneP95: Math.round(quantile(alone.queries, 0.95)), duringP95: Math.round(quantile(during.queries, 0.95)), duringMax: Math.round(Math.max(...during.queries)) },
      floodTurnMs: Object.fromEntries(Object.keys(results).map((name, i) => [name, Math.round(floodTurns[i]!.closedMs - floodTurns[i]!.scheduledMs)])),
    };
    console.log(`output flood figures: ${JSON.stringify(figures)}`);

    // The floods: each ends, and says what it was.
    expect(results.line!.result).toMatchObject({ status: 'succeeded', result: 'line flood over' });
    const lineEvents = await eventsOf(results.line!.run.workflowId);
    expect(lineEvents.filter((e) => e.type === 'line-too-large').map((e) => e.data)).toEqual([{ type: 'line-too-large', bytes: 600 * MB, limit: maxStdioJsonLineBytes, opening: expect.stringMatching(/^x+$/) }]);

    expect(results.lineAtEof!.result.status).toBe('failed');
    expect(eofStatus.lastError).toContain(`it printed a line of ${600 * MB} bytes, over the limit of ${maxStdioJsonLineBytes} bytes, which was not read`);
    expect((await eventsOf(results.lineAtEof!.run.workflowId)).filter((e) => e.type === 'line-too-large')).toHaveLength(1);

    for (const [name, lines] of [['tiny', 1_000_000], ['junk', 100_000]] as const) {
      expect(results[name]!.result).toMatchObject({ status: 'succeeded', result: `${name} flood over` });
      const events = await eventsOf(results[name]!.run.workflowId);
      expect(events.filter((e) => e.type === 'unknown')).toHaveLength(sampledLinesPerTurn);
      expect(events.filter((e) => e.type === 'output-sampled').map((e) => e.data)).toEqual([
        { type: 'output-sampled', unknownLines: lines, unknownReported: sampledLinesPerTurn, tooLargeLines: 0, tooLargeReported: 0 },
      ]);
      expect(events.length).toBeLessThan(100);
    }

    // The neighbour overlapped the floods and kept its pace; its status queries answered throughout.
    expect(during.turns[0]!.scheduledMs).toBeLessThan(Math.max(...floodTurns.map((t) => t.closedMs)));
    expect(mean(during.turnMs)).toBeLessThan(3 * mean(alone.turnMs) + 250);
    expect(quantile(during.queries, 0.95)).toBeLessThan(3 * quantile(alone.queries, 0.95) + 250);
    expect(Math.max(...during.queries)).toBeLessThan(2000);
    // 1.2 GB of lines and 1.1 million more went through this process: it grew by far less than one of them.
    expect(peak - rssBefore).toBeLessThan(200 * MB);
  });
});
