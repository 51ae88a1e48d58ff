/**
 * Worker processes that freeze or die mid-turn (test/support/worker-process.ts; one task queue, one Temporal dev
 * server, one PostgreSQL ledger):
 * - a worker frozen (SIGSTOP) for longer than its turn's attempts last (2 attempts × the 15 s heartbeat timeout):
 *   the attempts Temporal handed to the frozen worker's open polls never ran, so they do not use up the turn's
 *   attempts — the run does not go to an operator, and finishes once the worker thaws;
 * - an operator's retry after a worker died mid-turn first kills what that turn left running.
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, it } from 'vitest';
import { startAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { processAlive } from '../support/processes.js';
import { ok, scriptBook, scriptedCatalog, statelessHarness } from '../support/scripted.js';
import { testWorkflowId } from '../support/worker.js';
import { hostFleet, type HostProcess } from './hosts.js';

const book = scriptBook();
const flags = mkdtempSync(path.join(os.tmpdir(), 'dh-frozen-flags-'));
const catalog = scriptedCatalog(book, {
  harnesses: [statelessHarness(book)],
  agents: [
    { name: 'thawing', harness: 'stateless', turnAttempts: 2, operatorTimeoutMs: 300_000, sandbox: { hostLossTimeoutMs: 300_000 } },
    // Without a PID namespace a worker's death leaves its harness running: what an operator's retry must kill.
    { name: 'orphaning', harness: 'stateless', turnAttempts: 1, operatorTimeoutMs: 300_000, sandbox: { options: { containment: 'process-group' } } },
  ],
});

const fleet = hostFleet('frozen_worker', catalog);
const start = fleet.start;

const runDir = (host: HostProcess, workflowId: string) => path.join(host.dataDir, 'workspaces', 'runs', workflowId);

/** Turn 1 asks (the run settles on a host); turn 2 makes one call, then — its first time on this machine — hangs. */
function task(name: string, hangMs: number): string {
  return book.write(name, [
    { calls: [{ usage: { input: 100, output: 10 } }], envelope: { step: 'chat', message: 'ready?' } },
    { calls: [{ usage: { input: 300, output: 30 } }], hangOnce: hangMs, hangOnceFlag: path.join(flags, name), ...ok(`${name} done`) },
  ]);
}

async function settled(run: AgentRunHandle, pair: HostProcess[]): Promise<{ holder: HostProcess; other: HostProcess }> {
  await expect.poll(async () => (await run.status()).state, { timeout: 60_000, interval: 200 }).toBe('waiting_for_reply');
  const holder = pair.find((h) => existsSync(runDir(h, run.workflowId)))!;
  return { holder, other: pair.find((h) => h !== holder)! };
}

async function untilTurnTwoSpent(workflowId: string): Promise<void> {
  await expect.poll(async () => (await fleet.ledger.listPromptRuns(workflowId)).filter((r) => r.turn === 2).reduce((n, r) => n + r.calls, 0), { timeout: 60_000, interval: 100 }).toBeGreaterThanOrEqual(1);
}

/** The turn's attempts as Temporal ran them: how each scheduling of `runTurn` for turn 2 ended, and its last attempt. */
async function turnTwoSchedulings(workflowId: string): Promise<{ attempt: number; outcome: string }[]> {
  const scheduled = new Map<string, { attempt: number; outcome: string }>();
  let turns = 0;
  for (const e of (await fleet.client.workflow.getHandle(workflowId).fetchHistory()).events ?? []) {
    if (e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTurn' && ++turns >= 2) scheduled.set(String(e.eventId), { attempt: 0, outcome: 'open' });
    const started = e.activityTaskStartedEventAttributes;
    if (started && scheduled.has(String(started.scheduledEventId))) scheduled.get(String(started.scheduledEventId))!.attempt = started.attempt ?? 0;
    const failed = e.activityTaskFailedEventAttributes;
    if (failed && scheduled.has(String(failed.scheduledEventId))) scheduled.get(String(failed.scheduledEventId))!.outcome = failed.failure?.applicationFailureInfo?.type ?? 'failed';
    const timedOut = e.activityTaskTimedOutEventAttributes;
    if (timedOut && scheduled.has(String(timedOut.scheduledEventId))) scheduled.get(String(timedOut.scheduledEventId))!.outcome = 'timed out';
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && scheduled.has(String(completed.scheduledEventId))) scheduled.get(String(completed.scheduledEventId))!.outcome = 'completed';
  }
  return [...scheduled.values()];
}

it('a worker frozen for longer than the turn\'s attempts last: they are not used up, and the run finishes without an operator once it thaws', { timeout: 300_000 }, async () => {
  const taskQueue = `frozen-${Date.now().toString(36)}`;
  const pair = [await start(taskQueue, 'fz-a'), await start(taskQueue, 'fz-b')];
  const workflowId = testWorkflowId('frozen');
  const run = await startAgentRun(fleet.client, { agent: 'thawing', task: task('frozen', 5000), identity: { tenantId: 't', userId: 'u' }, workflowId, taskQueue });
  const { holder } = await settled(run, pair);
  await run.reply('yes');
  await untilTurnTwoSpent(workflowId);
  const frozenAt = Date.now();
  process.kill(holder.pid, 'SIGSTOP');
  // 2 attempts × 15 s of heartbeat timeout: 30 s used them up (before: the run went to an operator then).
  const states: string[] = [];
  while (Date.now() - frozenAt < 45_000) {
    // The status the run wrote (a search attribute): a query could wait on the frozen worker, which has the workflow cached.
    const description = await run.handle.describe();
    states.push(String(description.searchAttributes?.DurableHarnessStatus?.[0] ?? 'unknown'));
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  process.kill(holder.pid, 'SIGCONT');
  const status = async () => String((await run.handle.describe()).searchAttributes?.DurableHarnessStatus?.[0] ?? 'unknown');
  await expect.poll(status, { timeout: 90_000, interval: 500 }).toMatch(/^(succeeded|failed|awaiting_operator)$/);
  const schedulings = await turnTwoSchedulings(workflowId);
  console.log(`[frozen worker] 45 s frozen: states ${[...new Set(states)].join(', ')}, then ${await status()}; turn 2 schedulings ${JSON.stringify(schedulings)}`);
  if ((await status()) === 'awaiting_operator') await run.handle.terminate('test: the freeze used up the attempts');
  expect(states).not.toContain('awaiting_operator');
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'frozen done' });
  expect(schedulings.at(-1)?.outcome).toBe('completed');
  // Each turn accounted once as used; the attempts lost to the freeze are in the ledger, not in the run's result twice.
  const rows = await fleet.ledger.listPromptRuns(workflowId);
  expect(rows.filter((r) => r.outputUsed).map((r) => r.turn)).toEqual([1, 2]);
});

it("an operator's retry after a worker died mid-turn kills what the turn left running before it runs again", { timeout: 240_000 }, async () => {
  const taskQueue = `orphans-${Date.now().toString(36)}`;
  const pair = [await start(taskQueue, 'or-a'), await start(taskQueue, 'or-b')];
  const workflowId = testWorkflowId('orphans');
  const run = await startAgentRun(fleet.client, { agent: 'orphaning', task: task('orphans', 120_000), identity: { tenantId: 't', userId: 'u' }, workflowId, taskQueue });
  const { holder } = await settled(run, pair);
  await run.reply('yes');
  await untilTurnTwoSpent(workflowId);
  // The turn's harness, as the worker recorded it (outside the workspace).
  const record = JSON.parse(readFileSync(path.join(holder.dataDir, 'runtime', 'local', `${workflowId}.json`), 'utf8')) as { pid: number };
  await holder.kill();
  await expect.poll(async () => (await run.status()).state, { timeout: 90_000, interval: 500 }).toBe('awaiting_operator');
  expect(processAlive(record.pid)).toBe(true); // the dead worker's harness, still hanging in the workspace
  // The host comes back (same data dir and host id); the operator retries.
  await start(taskQueue, holder.hostId, holder.dataDir);
  await run.retryTurn();
  expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'orphans done' });
  expect(processAlive(record.pid)).toBe(false);
  // It was killed before the retried turn ran: the retry is the only attempt that used its output.
  const rows = (await fleet.ledger.listPromptRuns(workflowId)).filter((r) => r.turn === 2);
  expect(rows.map((r) => r.outputUsed)).toEqual([false, true]);
});
