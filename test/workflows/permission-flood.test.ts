/**
 * A harness that asks 5,000 permissions in one turn, all allowed by a rule, on a real worker and Temporal dev server:
 * the turn completes in its first attempt, the ledger has one row per request up to the cap, the rest are denied at
 * once with a message that says why, the operator is told once — and meanwhile a normal run on the same worker keeps
 * its turn pace, its status queries answer, and a reply to a waiting run lands promptly. A retried attempt (the
 * harness dies mid-flood) reuses the first attempt's rows: no duplicates, exactly one row per request occurrence.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AgentRunHandle } from '../../src/client/index.js';
import { defaultMaxRequestsPerTurn } from '../../src/permissions/index.js';
import { spawnCli } from '../support/cli.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const { EventType } = proto.temporal.api.enums.v1;
const { HistoryEvent } = proto.temporal.api.history.v1;

const book = scriptBook();
const flooder = {
  name: 'flooder',
  harness: 'scripted',
  systemPrompt: 'You follow scripts.',
  actions: ['echo'],
  guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 300_000 },
  turnAttempts: 2,
  permissions: { posture: 'strict', allow: ['tool:lookup'] },
};
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book, { agents: [flooder] }) });
});
afterAll(() => w?.close());

const CAP = defaultMaxRequestsPerTurn;
const capMessage = `Denied without asking: this turn already made ${CAP} permission requests, the most this agent allows in one turn (permissions.maxRequestsPerTurn). Ask nothing more in this turn: finish it with your JSON envelope; the next turn may ask again.`;
const echo = (text: string) => act({ name: 'echo', params: { text } });
const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;
const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const quantile = (xs: readonly number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

/** Each runTurn of a run: when it was scheduled and completed (server time), its attempt, and its events' bytes. */
async function turnsOf(run: AgentRunHandle) {
  const events = (await run.handle.fetchHistory()).events ?? [];
  const turns: { scheduledMs: number; completedMs: number; attempt: number; bytes: number }[] = [];
  events.forEach((e, i) => {
    if (e.eventType !== EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED || e.activityTaskScheduledEventAttributes?.activityType?.name !== 'runTurn') return;
    const id = Number(e.eventId);
    const started = events.find((x) => Number(x.activityTaskStartedEventAttributes?.scheduledEventId ?? -1) === id);
    const end = events.findIndex((x) => Number(x.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === id);
    if (end < 0) return;
    turns.push({
      scheduledMs: ms(e.eventTime),
      completedMs: ms(events[end]!.eventTime),
      attempt: started?.activityTaskStartedEventAttributes?.attempt ?? 0,
      bytes: events.slice(i, end + 1).reduce((n, x) => n + HistoryEvent.encode(x).finish().length, 0),
    });
  });
  return { turns, signals: events.filter((e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED).length };
}

/** Runs a normal five-turn run to its end while timing its status queries (as `durable-harness status` asks them). */
async function neighbour(label: string) {
  const run = await w.start({ agent: 'scripted', task: book.write(label, [echo('1'), echo('2'), echo('3'), echo('4'), ok('neighbour done')]), workflowId: testWorkflowId(label) });
  const queries: number[] = [];
  let done = false;
  const finished = run.result().finally(() => (done = true));
  while (!done) {
    const t = performance.now();
    await run.status();
    queries.push(performance.now() - t);
    await new Promise((r) => setTimeout(r, 25));
  }
  await expect(finished).resolves.toMatchObject({ status: 'succeeded', result: 'neighbour done' });
  const { turns } = await turnsOf(run);
  return { run, queries, turnMs: turns.map((t) => t.completedMs - t.scheduledMs), turns };
}

/** A run waiting for a reply; returns how long the `reply` update took. */
async function waitingForReply(label: string) {
  const run = await w.start({ agent: 'scripted', task: book.write(label, [{ envelope: { step: 'chat', message: 'which one?' } }, ok('replied')]), workflowId: testWorkflowId(label) });
  await expect.poll(async () => (await run.status()).state, { timeout: 30_000, interval: 50 }).toBe('waiting_for_reply');
  return {
    run,
    async reply() {
      const t = performance.now();
      await run.reply('the second');
      return performance.now() - t;
    },
  };
}

/** Every ledger event of a run, page by page. */
async function eventsOf(workflowId: string) {
  const all: Awaited<ReturnType<TestWorker['ledger']['readEvents']>> = [];
  for (let page = await w.ledger.readEvents(workflowId, 0, 1000); page.length > 0; page = await w.ledger.readEvents(workflowId, page.at(-1)!.cursor, 1000)) all.push(...page);
  return all;
}

const floodOf = (workspace: string) =>
  readFileSync(path.join(workspace, '.scripted', 'flood.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { allowed: number; denied: number; messages: Record<string, number> });

describe('a permission flood', () => {
  it('5,000 requests in one turn: one attempt, rows up to the cap, the rest denied with the cap message; the neighbours keep their pace', { timeout: 300_000 }, async () => {
    // The same neighbour alone first: its pace is what the flood must not spoil.
    const alone = await neighbour('neighbour-alone');
    const aloneReply = await waitingForReply('reply-alone');
    const aloneReplyMs = await aloneReply.reply();

    const chat = await waitingForReply('reply-during');
    const task = book.write('flood', [{ permissionFlood: { count: 5000 }, ...echo('flooded') }, { envelope: { step: 'chat', message: 'anything else?' } }, ok('flood over')]);
    const flood = await w.start({ agent: 'flooder', task, workflowId: testWorkflowId('flood') });
    // The flood is under way before the neighbour starts.
    await expect.poll(async () => (await w.ledger.listApprovals({ workflowId: flood.workflowId, limit: 1 })).length, { timeout: 60_000, interval: 20 }).toBe(1);
    const [during, replyMs] = await Promise.all([neighbour('neighbour-during'), new Promise((r) => setTimeout(r, 300)).then(() => chat.reply())]);
    await expect(chat.run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'replied' });

    await expect.poll(async () => (await flood.status()).state, { timeout: 120_000, interval: 100 }).toBe('waiting_for_reply');
    const { turns: floodTurns, signals } = await turnsOf(flood);
    const floodTurn = floodTurns[0]!;
    const figures = {
      floodTurnMs: Math.round(floodTurn.completedMs - floodTurn.scheduledMs),
      neighbourTurnMs: { alone: Math.round(mean(alone.turnMs)), during: Math.round(mean(during.turnMs)) },
      statusQueryMs: { aloneP95: Math.round(quantile(alone.queries, 0.95)), duringP95: Math.round(quantile(during.queries, 0.95)), duringMax: Math.round(Math.max(...during.queries)) },
      replyMs: { alone: Math.round(aloneReplyMs), during: Math.round(replyMs) },
    };
    console.log(`permission flood figures: ${JSON.stringify(figures)}`);

    // The flooding turn: one attempt, small in history, no signal per request.
    expect(floodTurn.attempt).toBe(1);
    const events = await eventsOf(flood.workflowId);
    expect(events.some((e) => e.type === 'retry')).toBe(false);
    expect(signals).toBe(0);
    expect(floodTurn.bytes).toBeLessThan(8 * 1024);
    // One row per request up to the cap, each allowed by the rule; the rest denied at once with the cap message.
    const rows = await w.ledger.listApprovals({ workflowId: flood.workflowId });
    expect(rows).toHaveLength(CAP);
    expect(new Set(rows.map((r) => `${r.status} ${r.decidedBy}`))).toEqual(new Set(['allowed policy:allow[0] tool:lookup']));
    const workspace = (await flood.status()).sandbox!.hostWorkspacePath;
    expect(floodOf(workspace)).toEqual([{ allowed: CAP, denied: 5000 - CAP, messages: { [capMessage]: 5000 - CAP } }]);
    // The operator is told once: one event, the run's lastError, and status.
    expect(events.filter((e) => e.type === 'permission-requests-over-cap').map((e) => e.data)).toEqual([{ cap: CAP }]);
    expect(events.filter((e) => e.type === 'permission-decision').length).toBeLessThanOrEqual(CAP);
    const lastError = `turn 1: the harness asked more than ${CAP} permission requests, this agent's cap per turn (permissions.maxRequestsPerTurn); the ${5000 - CAP} after the first ${CAP} were denied without asking anyone`;
    expect((await flood.status()).lastError).toBe(lastError);
    const cli = await spawnCli(['status', flood.workflowId, '--address', inject('temporalAddress')]).outcome;
    expect(cli.stdout).toContain(`last problem: ${lastError}`);

    // The neighbours: the normal run's turns overlapped the flood and kept their pace; status and reply answered.
    expect(during.turns[0]!.scheduledMs).toBeLessThan(floodTurn.completedMs);
    expect(mean(during.turnMs)).toBeLessThan(3 * mean(alone.turnMs) + 250);
    expect(quantile(during.queries, 0.95)).toBeLessThan(3 * quantile(alone.queries, 0.95) + 250);
    expect(Math.max(...during.queries)).toBeLessThan(2000);
    expect(replyMs).toBeLessThan(2000);

    await flood.reply('no');
    await expect(flood.result()).resolves.toMatchObject({ status: 'succeeded', result: 'flood over' });
  });

  it('a retried attempt finds the rows of the first: no duplicates, one row per request occurrence', { timeout: 180_000 }, async () => {
    // 1,000 requests of 300 distinct inputs (occurrences -2, -3, -4 are ids too); the first attempt dies after 200 answers.
    const task = book.write('flood-retry', [{ permissionFlood: { count: 1000, distinct: 300, crashAfter: 200 }, ...ok('retried flood') }]);
    const run = await w.start({ agent: 'flooder', task, workflowId: testWorkflowId('flood-retry') });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'retried flood' });
    const { turns } = await turnsOf(run);
    expect(turns[0]!.attempt).toBe(2);
    expect((await eventsOf(run.workflowId)).filter((e) => e.type === 'retry')).toHaveLength(1);

    const rows = await w.ledger.listApprovals({ workflowId: run.workflowId });
    expect(rows).toHaveLength(CAP);
    expect(new Set(rows.map((r) => r.requestId)).size).toBe(CAP);
    // Requests 1-500: 300 first occurrences, 200 second ones (inputs 1-200 again), none a third.
    expect(rows.filter((r) => /^t1-[0-9a-f]{10}$/.test(r.requestId))).toHaveLength(300);
    expect(rows.filter((r) => r.requestId.endsWith('-2'))).toHaveLength(200);
    // The first attempt's rows stand as it wrote them: at least the 200 its harness was answered.
    const history = (await run.handle.fetchHistory()).events ?? [];
    const secondAttemptMs = ms(history.find((e) => e.activityTaskStartedEventAttributes?.attempt === 2)!.eventTime);
    expect(rows.filter((r) => Date.parse(r.decidedAt!) < secondAttemptMs).length).toBeGreaterThanOrEqual(200);
    const workspace = (await run.status()).sandbox!.hostWorkspacePath;
    expect(floodOf(workspace)).toEqual([{ allowed: CAP, denied: 1000 - CAP, messages: { [capMessage]: 1000 - CAP } }]);
  });
});
