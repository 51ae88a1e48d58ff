/** Every step type through the real workflow on the real dev server, driven by the scripted harness. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApplicationFailure } from '@temporalio/common';
import proto from '@temporalio/proto';
import { getAgentRun } from '../../src/client/index.js';
import { maxIdLength, subAgentWorkflowId } from '../../src/workflows/ids.js';
import { totalTokens } from '../../src/contracts/usage.js';
import { workflowVersion } from '../../src/workflows/types.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agent: { subAgents: ['helper'], actions: ['write_file', 'echo', { name: 'read_file', maxExecutionsPerRun: 1 }], maxMalformedTurns: 2, chatTimeoutMs: 1500 },
      agents: [
        { name: 'helper', description: 'answers sub-questions', harness: 'scripted', actions: ['echo'] },
        { name: 'frugal', harness: 'scripted', subAgents: ['helper'], guardrails: { maxIterations: 3, maxTokens: 1000 } },
        { name: 'borrower', description: 'works in a parent workspace only', harness: 'scripted', sandbox: { workspaceScope: 'parent' } },
        // Two agents that call each other: a recursion only the run tree's limits end.
        { name: 'ping', harness: 'scripted', subAgents: ['pong'] },
        { name: 'pong', harness: 'scripted', subAgents: ['ping'] },
        { name: 'ping-deep', harness: 'scripted', subAgents: ['pong-deep'], guardrails: { maxIterations: 6, maxTokens: 100_000, maxCostUsd: 100, maxSubAgentDepth: 10 } },
        { name: 'pong-deep', harness: 'scripted', subAgents: ['ping-deep'], guardrails: { maxSubAgentDepth: 10 } },
      ],
    }),
  });
});
afterAll(() => w?.close());

const workspace = (workflowId: string) => path.join(w.dataDir, 'workspaces', 'runs', workflowId);

describe('actions', () => {
  it('runs allowed actions and reports unknown, invalid and over-cap ones back without running them', async () => {
    const task = book.write('actions', [
      act(
        { name: 'write_file', params: { path: 'out/hello.txt', content: 'hi' } },
        { name: 'rm_rf', params: { path: '/' } },
        { name: 'write_file', params: { path: 42 } },
        { name: 'read_file', params: { path: 'out/hello.txt' } },
        { name: 'read_file', params: { path: 'out/hello.txt' } },
      ),
      ok('all reported'),
    ]);
    const workflowId = testWorkflowId('actions');
    const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    expect(readFileSync(path.join(workspace(workflowId), 'out', 'hello.txt'), 'utf8')).toBe('hi');

    const turn2 = (await w.ledger.listPromptRuns(workflowId))[1]!.input;
    expect(turn2).toMatch(/1\. write_file: ok/);
    expect(turn2).toMatch(/2\. rm_rf: error: action "rm_rf" is not allowed/);
    expect(turn2).toMatch(/3\. write_file: error: invalid parameters, not run: .*path/);
    expect(turn2).toMatch(/4\. read_file: ok[\s\S]*hi/);
    expect(turn2).toMatch(/5\. read_file: error: action "read_file" reached its cap of 1/);
    const steps = await w.ledger.listSteps(workflowId);
    expect(steps.filter((s) => s.type.startsWith('action:')).map((s) => s.type)).toEqual(['action:write_file', 'action:read_file']);
  });
});

describe('the command sequence (docs/VERSIONING.md)', () => {
  const { EventType } = proto.temporal.api.enums.v1;

  it('a new run resolves its agent and starts its session in one local activity, and records no patch markers', async () => {
    const workflowId = testWorkflowId('sequence');
    const run = await w.start({ agent: 'scripted', task: book.write('sequence', [act({ name: 'echo', params: { text: 'a' } }), ok('two turns')]), workflowId });
    expect((await run.result()).status).toBe('succeeded');
    const events = (await w.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
    const markers = events.filter((e) => e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED).map((e) => e.markerRecordedEventAttributes?.markerName);
    const firstTurn = events.findIndex((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED);
    const beforeFirstTurn = events.slice(0, firstTurn).filter((e) => e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED);
    // openRun before the first turn, endSession after the last: nothing else, and no patch asked.
    expect(markers).toEqual(['core_local_activity', 'core_local_activity']);
    expect(beforeFirstTurn).toHaveLength(1);
    expect(events[0]!.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]?.data?.toString()).toContain(`"workflowVersion":${workflowVersion}`);
  });

  it('a start without workflowVersion runs the current sequence, and continue-as-new names it', async () => {
    const workflowId = testWorkflowId('unversioned');
    const task = book.write('unversioned', [act({ name: 'echo', params: { text: 'a' } }), ok('two executions')]);
    const handle = await w.client.workflow.start('agentRun', { taskQueue: w.taskQueue, workflowId, args: [{ agent: 'scripted', task, identity: { tenantId: 't', userId: 'u' }, continueAsNewAfterTurns: 1 }] });
    expect((await getAgentRun(w.client, workflowId).result()).status).toBe('succeeded');
    const first = (await w.client.workflow.getHandle(workflowId, handle.firstExecutionRunId).fetchHistory()).events ?? [];
    expect(first.filter((e) => e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED).map((e) => e.markerRecordedEventAttributes?.markerName)).toEqual(['core_local_activity']);
    const next = first.at(-1)?.workflowExecutionContinuedAsNewEventAttributes;
    expect(next?.input?.payloads?.[0]?.data?.toString()).toContain(`"workflowVersion":${workflowVersion}`);
  });

  it('a run of a version newer than the worker waits for a newer worker: its workflow task fails, the run does not', async () => {
    const workflowId = testWorkflowId('future-version');
    const handle = await w.client.workflow.start('agentRun', { taskQueue: w.taskQueue, workflowId, args: [{ agent: 'scripted', task: 'x', identity: { tenantId: 't', userId: 'u' }, workflowVersion: workflowVersion + 1 }] });
    const taskFailure = async () =>
      ((await handle.fetchHistory()).events ?? []).find((e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)?.workflowTaskFailedEventAttributes?.failure?.message;
    await expect.poll(taskFailure, { timeout: 15_000 }).toMatch(new RegExp(`runs workflow version ${workflowVersion}, the run asks for version ${workflowVersion + 1}: deploy the newer worker`));
    expect((await handle.describe()).status.name).toBe('RUNNING');
    // Nothing ran: no session, no ledger row.
    expect(await w.ledger.getRun(workflowId)).toBeUndefined();
    await handle.terminate('test over');
  });

  // A retired version never gets a worker again: the run fails at once, saying why, with nothing started.
  it('a run that asks for a retired version fails at once, non-retryable, naming the version this worker runs', async () => {
    const asked = workflowVersion - 1;
    const workflowId = testWorkflowId(`version-${asked}`);
    await w.client.workflow.start('agentRun', { taskQueue: w.taskQueue, workflowId, args: [{ agent: 'scripted', task: 'x', identity: { tenantId: 't', userId: 'u' }, workflowVersion: asked }] });
    const failure = await w.client.workflow.getHandle(workflowId).result().then(() => undefined, (err: Error) => err.cause as ApplicationFailure);
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({ type: 'WorkflowVersionUnknown', nonRetryable: true });
    expect(failure?.message).toMatch(new RegExp(`this worker runs workflow version ${workflowVersion} only, the run asks for version ${asked}: start the run again without workflowVersion`));
    // Nothing ran: no session, no ledger row.
    expect(await w.ledger.getRun(workflowId)).toBeUndefined();
  });

  // The agent resolves, then its session refuses to start (a parent-scoped agent with no parent): the run had a policy,
  // so it must still close the ledger row its start opened.
  it('a run whose session fails to start after its agent resolved ends failed and closes its record', async () => {
    const workflowId = testWorkflowId('no-session');
    await w.start({ agent: 'borrower', task: 'read the notes', workflowId });
    const result = await getAgentRun(w.client, workflowId).result();
    expect(result).toMatchObject({ status: 'failed', failureType: 'WorkspaceScopeInvalid' });
    expect(result.reason).toMatch(/workspaceScope "parent", which only a sub-agent can use/);
    expect(await w.ledger.getRun(workflowId)).toMatchObject({ status: 'failed', agent: 'borrower' });
  });
});

describe('sub-agents', () => {
  it('runs an allowed sub-agent as a child run whose result and usage feed the parent', async () => {
    book.write('child', [{ usage: { input: 100, output: 50 }, ...ok('child says 42') }]);
    const task = book.write('parent', [
      { usage: { input: 10, output: 5 }, envelope: { step: 'sub-agent', agent: 'helper', message: 'compute script:child', terminateAfter: false } },
      { envelope: { step: 'sub-agent', agent: 'stranger', message: 'x', terminateAfter: false } },
      ok('parent done'),
    ]);
    const workflowId = testWorkflowId('parent');
    const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    expect(result.usage.input).toBe(110);
    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows[1]!.input).toContain('child says 42');
    expect(rows[2]!.input).toMatch(/Sub-agent "stranger" is not allowed/);
    const child = await w.ledger.getRun(`${workflowId}.sub-1`);
    expect(child).toMatchObject({ agent: 'helper', parentWorkflowId: workflowId, status: 'succeeded' });
    expect(rows.map((r) => r.turn)).toEqual([1, 2, 3]);
    expect(result.iterations).toBe(3);
  });

  it("a sub-agent spends the parent's remaining budget, and the parent stops when it is gone", async () => {
    const echo = { usage: { input: 100, output: 100 }, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'more' } }] } };
    book.write('greedy-child', [echo, echo, echo, echo, ok()]);
    const task = book.write('frugal-parent', [{ usage: { input: 50, output: 50 }, envelope: { step: 'sub-agent', agent: 'helper', message: 'spend script:greedy-child', terminateAfter: false } }, ok()]);
    const workflowId = testWorkflowId('budget');
    const result = await (await w.start({ agent: 'frugal', task, workflowId })).result();
    const child = await w.ledger.getRun(`${workflowId}.sub-1`);
    // The parent used 1 of 3 iterations and 200 of 1000 tokens: the child gets 2 iterations and 800 tokens.
    expect(child?.result).toMatchObject({ status: 'stopped', iterations: 2 });
    expect(result).toMatchObject({ status: 'stopped', guardrail: 'iterations', iterations: 1, usage: { input: 250, output: 250 } });
  });

  /** Scripts `<name>-0` … `<name>-<levels>`: each level asks the other agent to go one level deeper, then succeeds. */
  const recursion = (name: string, agents: [string, string], levels: number) => {
    for (let k = 0; k <= levels; k++) {
      book.write(`${name}-${k}`, [
        { usage: { input: 100, output: 100 }, envelope: { step: 'sub-agent', agent: agents[(k + 1) % 2], message: `go deeper script:${name}-${k + 1}`, terminateAfter: false } },
        { usage: { input: 100, output: 100 }, ...ok(`level ${k} done`) },
      ]);
    }
    return `recurse script:${name}-0`;
  };
  /** The run ids of a tree that went down through each level's first turn. */
  const chain = (root: string, levels: number) => Array.from({ length: levels }, (_, i) => i).reduce((ids, _) => [...ids, subAgentWorkflowId(ids.at(-1)!, 1)], [root]);

  it('a↔b recursion stops at maxSubAgentDepth with the reason told to the deepest run; every id stays within the limit', async () => {
    const task = recursion('rec', ['ping', 'pong'], 6);
    // The longest root id a run may have: its sub-agents' ids cannot grow past it.
    const workflowId = `${testWorkflowId('rec')}-${'x'.repeat(200)}`.slice(0, maxIdLength);
    const result = await (await w.start({ agent: 'ping', task, workflowId })).result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'level 0 done', iterations: 2, subAgentIterations: 6 });
    const ids = chain(workflowId, 4);
    for (const id of ids) expect(id.length, id).toBeLessThanOrEqual(maxIdLength);
    expect(new Set(ids).size).toBe(5);
    expect(ids[3]).toMatch(/^rec-.*=[0-9a-f]{14}\.sub-1$/);
    // Three levels below the root ran and succeeded; the fourth was never started.
    for (const [level, id] of ids.slice(1, 4).entries()) expect(await w.ledger.getRun(id), id).toMatchObject({ status: 'succeeded', agent: level % 2 === 0 ? 'pong' : 'ping' });
    expect(await w.ledger.getRun(ids[4]!)).toBeUndefined();
    await expect(w.client.workflow.getHandle(ids[4]!).describe()).rejects.toThrow(/not found/i);
    // The deepest run was told why, in its next turn, and says so in its last error.
    const deepest = await w.ledger.listPromptRuns(ids[3]!);
    expect(deepest[1]!.input).toMatch(/Sub-agent "ping" was not started: this run is already at the deepest sub-agent level its run tree allows \(guardrails\.maxSubAgentDepth/);
    // Tokens of the whole tree are the root's: 8 turns of 200.
    expect(result.usage).toMatchObject({ input: 800, output: 800 });
  });

  it("the root's iteration budget holds for the whole tree, however deep: turns, tokens and cost of all runs within it", async () => {
    const task = recursion('tree', ['ping-deep', 'pong-deep'], 8);
    const workflowId = testWorkflowId('tree');
    const result = await (await w.start({ agent: 'ping-deep', task, workflowId })).result();
    expect(result).toMatchObject({ status: 'stopped', guardrail: 'iterations', iterations: 1, subAgentIterations: 5 });
    const ids = chain(workflowId, 7);
    const rows = (await Promise.all(ids.map((id) => w.ledger.listPromptRuns(id)))).flat();
    // 6 turns in the whole tree, the root's maxIterations — not 6 per run, nor 10 as when grandchildren went uncounted.
    expect(rows).toHaveLength(6);
    expect(await w.ledger.getRun(ids[6]!)).toBeUndefined();
    const tokens = rows.reduce((n, r) => n + totalTokens(r.usage), 0);
    const cost = rows.reduce((n, r) => n + r.costUsd, 0);
    expect(totalTokens(result.usage)).toBe(tokens);
    expect(result.costUsd).toBeCloseTo(cost, 6);
    expect(tokens).toBeLessThanOrEqual(100_000);
  });

  it('terminateAfter ends the parent with the child result', async () => {
    book.write('child2', [ok('final answer from child')]);
    const task = book.write('parent2', [{ envelope: { step: 'sub-agent', agent: 'helper', message: 'go script:child2', terminateAfter: true } }]);
    const result = await (await w.start({ agent: 'scripted', task })).result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'final answer from child' });
  });
});

describe('chat', () => {
  it('waits durably for a reply sent by update and feeds it to the next turn', async () => {
    const task = book.write('chat', [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok('used the branch')]);
    const workflowId = testWorkflowId('chat');
    const run = await w.start({ agent: 'scripted', task, workflowId });
    await expect.poll(async () => (await run.status()).state, { timeout: 10_000 }).toBe('waiting_for_reply');
    expect((await run.status()).pendingQuestion).toBe('Which branch?');
    await expect(run.retryTurn()).rejects.toThrow(/not awaiting_operator/);
    await run.reply('main please');
    expect((await run.result()).status).toBe('succeeded');
    expect((await w.ledger.listPromptRuns(workflowId))[1]!.input).toContain('main please');
  });

  it('fails when no reply comes within the chat timeout', async () => {
    const task = book.write('chat-timeout', [{ envelope: { step: 'chat', message: 'Anyone?' } }]);
    const result = await (await w.start({ agent: 'scripted', task })).result();
    expect(result).toMatchObject({ status: 'failed', failureType: 'ChatTimeout' });
  });
});

describe('malformed envelopes', () => {
  it('sends exact feedback and recovers', async () => {
    const task = book.write('malformed', [{ raw: 'I think we are done here.' }, { raw: '```json\n{"step":"done"}\n```' }, ok('fixed')]);
    const workflowId = testWorkflowId('malformed');
    const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows[1]!.input).toMatch(/^Your last reply was not a valid envelope: no JSON object with a "step" field/);
    expect(rows[2]!.input).toMatch(/"step" must be one of success, failed, actions, sub-agent, chat/);
  });

  it('gives up after the configured number in a row, naming the problem', async () => {
    const task = book.write('malformed-forever', [{ raw: 'no' }, { raw: 'still no' }, { raw: '{"step": "success"}' }]);
    const result = await (await w.start({ agent: 'scripted', task })).result();
    expect(result.status).toBe('failed');
    expect(result.failureType).toBe('MalformedEnvelope');
    expect(result.reason).toMatch(/3 malformed envelopes in a row; the last: .*result/);
  });
});

it('continues as new on long runs and carries the session, counters and conversation along', async () => {
  const task = book.write('long', [
    { usage: { input: 1, output: 1 }, ...act({ name: 'echo', params: { text: 'a' } }) },
    { usage: { input: 1, output: 1 }, ...act({ name: 'echo', params: { text: 'b' } }) },
    { usage: { input: 1, output: 1 }, ...ok('long done') },
  ]);
  const workflowId = testWorkflowId('long');
  const run = await w.client.workflow.start('agentRun', {
    taskQueue: w.taskQueue,
    workflowId,
    args: [{ agent: 'scripted', task, identity: { tenantId: 't', userId: 'u' }, continueAsNewAfterTurns: 1, workflowVersion }],
  });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', iterations: 3, usage: { input: 3, output: 3 } });
  expect(result.externalSessionId).toBeTruthy();
  const rows = await w.ledger.listPromptRuns(workflowId);
  expect(rows.map((r) => [r.turn, r.resumed])).toEqual([[1, false], [2, true], [3, true]]);
  expect((await w.ledger.getRun(workflowId))?.status).toBe('succeeded');
  expect(existsSync(workspace(workflowId))).toBe(true);
});

it('starts a fresh session with the conversation replayed when the harness forgot the session', async () => {
  const workflowId = testWorkflowId('forgotten');
  const run = await w.start({ agent: 'scripted', task: book.write('fresh', [ok('fresh start worked')]), workflowId, resumeSessionId: 'gone-session' });
  const result = await run.result();
  expect(result).toMatchObject({ status: 'succeeded', result: 'fresh start worked' });
  expect(result.externalSessionId).not.toBe('gone-session');
  expect((await run.status()).lastError).toMatch(/unknown session gone-session/);
});
