/** The run loop's decisions, as pure functions: no Temporal, no I/O, milliseconds. */
import { describe, expect, it } from 'vitest';
import type { RunPolicy } from '../../src/spec/types.js';
import {
  afterReply,
  afterSubAgent,
  applyTurn,
  beginTurn,
  childBudget,
  continuedInput,
  guardrailCrossed,
  initialState,
  planActions,
  resolved,
  runResult,
  sessionStarted,
  shouldContinueAsNew,
  subAgentTooDeep,
} from '../../src/workflows/decide.js';
import { idProblem, maxIdLength, subAgentWorkflowId } from '../../src/workflows/ids.js';
import type { RunState } from '../../src/workflows/state.js';
import { workflowVersion, type AgentRunInput, type TurnResult } from '../../src/workflows/types.js';

const policy: RunPolicy = {
  specHash: 'abc',
  agent: 'a',
  harness: 'h',
  sessionResume: true,
  priced: true,
  guardrails: { maxIterations: 5, maxTokens: 1000, maxCostUsd: 1, maxWallTimeMs: 60_000 },
  actions: [{ name: 'echo' }, { name: 'read_file', maxExecutionsPerRun: 1 }],
  subAgents: ['helper'],
  maxMalformedTurns: 1,
  chatTimeoutMs: 1000,
  operatorTimeoutMs: 1000,
  turnAttempts: 2,
  turnTimeoutMs: 1000,
  inlineTextLimit: 100,
  sharesParentWorkspace: false,
};
const input: AgentRunInput = { agent: 'a', task: 'do it', identity: { tenantId: 't', userId: 'u' } };
const sandbox = { provider: 'local', workspacePath: '/w', hostWorkspacePath: '/w', id: 'x' };
const started = (): RunState => sessionStarted(resolved(initialState(input), policy, 1000), sandbox, 'do it');
const turnResult = (step: TurnResult['step'], extra: Partial<TurnResult> = {}): TurnResult => ({
  usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0 },
  costUsd: 0.01,
  costSource: 'price-table',
  usageReported: true,
  externalSessionId: 's1',
  step,
  ...extra,
});
/** Begins a turn and applies its result, as the workflow does. */
const turn = (state: RunState, step: TurnResult['step'], extra?: Partial<TurnResult>) => applyTurn(beginTurn(state).state, turnResult(step, extra));

describe('a run starts', () => {
  it('with the task as the first input, a deadline from the wall-time guardrail, and no replay', () => {
    const s = started();
    expect(s.deadlineMs).toBe(61_000);
    const { request } = beginTurn(s);
    expect(request).toEqual({ turn: 1, envelopeSeq: 1, input: { kind: 'prompt', parts: ['do it'] } });
  });

  it("a parent's earlier deadline wins", () => {
    expect(resolved(initialState(input), policy, 1000, { maxTokens: 1, maxCostUsd: 1, maxIterations: 1, deadlineMs: 5000 }).deadlineMs).toBe(5000);
  });
});

describe('planActions: the only action policy', () => {
  it('refuses unknown actions, invalid parameters and calls over the cap, in that order; numbers the rest', () => {
    const plan = planActions(
      [{ name: 'echo' }, { name: 'rm_rf' }, { name: 'echo', problem: 'text: expected string' }, { name: 'read_file' }, { name: 'read_file' }],
      policy,
      {},
      7,
    );
    expect(plan.planned).toEqual([
      { index: 0, name: 'echo', seq: 8 },
      { index: 1, name: 'rm_rf', refused: 'action "rm_rf" is not allowed for this agent (allowed: echo, read_file); it was not run' },
      { index: 2, name: 'echo', refused: 'invalid parameters, not run: text: expected string' },
      { index: 3, name: 'read_file', seq: 9 },
      { index: 4, name: 'read_file', refused: 'action "read_file" reached its cap of 1 executions in this run; it was not run' },
    ]);
    expect(plan.counts).toEqual({ echo: 1, read_file: 1 });
    expect(plan.stepSeq).toBe(9);
  });

  it('counts caps across the run', () => {
    expect(planActions([{ name: 'read_file' }], policy, { read_file: 1 }, 0).planned[0]).toHaveProperty('refused');
  });

  it('a refusal repeated for every call of an envelope lists a long allow-list only in part', () => {
    const many = { ...policy, actions: Array.from({ length: 60 }, (_, i) => ({ name: `action_number_${i}` })) };
    const [refused] = planActions([{ name: 'nope' }], many, {}, 0).planned;
    expect(refused).toMatchObject({ refused: expect.stringMatching(/^action "nope" is not allowed for this agent \(allowed: action_number_0, .*… \(\d+ characters in all\)\); it was not run$/) });
    expect((refused as { refused: string }).refused.length).toBeLessThan(300);
  });
});

describe('applyTurn', () => {
  it('adds usage and cost, keeps the session, and plans the actions for the next turn (envelope seq first)', () => {
    const { state, decision } = turn(started(), { ok: true, view: { step: 'actions', calls: [{ name: 'echo' }, { name: 'echo' }] } });
    expect(decision).toEqual({ kind: 'next' });
    expect(state).toMatchObject({ iteration: 1, stepSeq: 3, usage: { input: 10, output: 5 }, costUsd: 0.01, externalSessionId: 's1', actionCounts: { echo: 2 } });
    expect(state.next).toEqual({ kind: 'actions', envelopeSeq: 1, calls: [{ index: 0, name: 'echo', seq: 2 }, { index: 1, name: 'echo', seq: 3 }] });
    const next = beginTurn(state).request;
    expect(next).toMatchObject({ turn: 2, envelopeSeq: 4, resumeSessionId: 's1' });
    expect(next.replay).toBeUndefined();
  });

  it('adds up the requests the gateway refused, turn by turn; a turn with none leaves the count as it was', () => {
    const actions = { ok: true as const, view: { step: 'actions' as const, calls: [] } };
    const first = turn(started(), actions).state;
    expect(first.networkRefused).toBeUndefined();
    const second = turn(turn(first, actions, { networkRefused: 2 }).state, actions).state;
    expect(turn(second, actions, { networkRefused: 1 }).state.networkRefused).toBe(3);
  });

  it('a harness without native resume replays from the second turn on', () => {
    const s = sessionStarted(resolved(initialState(input), { ...policy, sessionResume: false }, 0), sandbox, 'x');
    const after = turn(s, { ok: true, view: { step: 'actions', calls: [] } }).state;
    expect(beginTurn(after).request).toMatchObject({ turn: 2, replay: true });
    expect(beginTurn(after).request.resumeSessionId).toBeUndefined();
  });

  it('a malformed envelope feeds the problem back, and too many in a row end the run', () => {
    const first = turn(started(), { ok: false, problem: 'no JSON' });
    expect(first.decision).toEqual({ kind: 'next' });
    expect(first.state).toMatchObject({ malformedInARow: 1, lastError: 'no JSON', next: { kind: 'feedback', problem: 'no JSON' } });
    const second = turn(first.state, { ok: false, problem: 'still no JSON' });
    expect(second.decision).toEqual({ kind: 'end', ending: { status: 'failed', failureType: 'MalformedEnvelope', reason: '2 malformed envelopes in a row; the last: still no JSON' } });
  });

  it('a good envelope resets the malformed count', () => {
    const bad = turn(started(), { ok: false, problem: 'x' }).state;
    expect(turn(bad, { ok: true, view: { step: 'actions', calls: [] } }).state.malformedInARow).toBe(0);
  });

  it('success and failed end the run; a large result stays a reference', () => {
    const ref = { blob: 'h', bytes: 5000, preview: 'All done: …' };
    const { state, decision } = turn(started(), { ok: true, view: { step: 'success', result: ref } });
    expect(decision).toEqual({ kind: 'end', ending: { status: 'succeeded', result: ref } });
    if (decision.kind !== 'end') throw new Error('unreachable');
    expect(runResult(state, 'wf', decision.ending)).toMatchObject({ status: 'succeeded', result: 'All done: …', resultRef: ref, iterations: 1 });
    expect(turn(started(), { ok: true, view: { step: 'failed', reason: 'no repo' } }).decision).toEqual({
      kind: 'end',
      ending: { status: 'failed', reason: 'no repo', failureType: 'HarnessReportedFailure' },
    });
  });

  it('a sub-agent outside the allow-list is refused back to the harness; an allowed one is run', () => {
    const refused = turn(started(), { ok: true, view: { step: 'sub-agent', agent: 'stranger', message: 'x', terminateAfter: false } });
    expect(refused.decision).toEqual({ kind: 'next' });
    expect(refused.state.next).toMatchObject({ kind: 'prompt', parts: [expect.stringMatching(/Sub-agent "stranger" is not allowed .*allowed: helper/)] });
    const allowed = turn(started(), { ok: true, view: { step: 'sub-agent', agent: 'helper', message: 'go', terminateAfter: true } });
    expect(allowed.decision).toEqual({ kind: 'sub-agent', agent: 'helper', message: 'go', terminateAfter: true });
  });

  it('a chat step waits for a reply, which becomes the next input', () => {
    const { state, decision } = turn(started(), { ok: true, view: { step: 'chat', message: 'Which branch?' } });
    expect(decision).toEqual({ kind: 'chat', question: 'Which branch?' });
    expect(state).toMatchObject({ state: 'waiting_for_reply', pendingQuestion: 'Which branch?' });
    const replied = afterReply(state, 'main');
    expect(replied.pendingQuestion).toBeUndefined();
    expect(replied.next).toEqual({ kind: 'prompt', parts: ['The user replied:\n', 'main', expect.stringContaining('Continue the task')] });
  });

  it('a forgotten session is noted and replaced by the fresh one', () => {
    const s = { ...started(), externalSessionId: 'old' };
    const { state } = turn(s, { ok: true, view: { step: 'actions', calls: [] } }, { resumeFailed: 'unknown session old', externalSessionId: 'new' });
    expect(state).toMatchObject({ lastError: 'unknown session old', externalSessionId: 'new' });
  });

  it('a turn whose harness asked past the permission cap says so in lastError, once, and the run goes on', () => {
    const { state, decision } = turn(started(), { ok: true, view: { step: 'actions', calls: [{ name: 'echo' }] } }, { permissionRequestsOverCap: { cap: 500, denied: 4500 } });
    expect(decision).toEqual({ kind: 'next' });
    expect(state.lastError).toBe(
      'turn 1: the harness asked more than 500 permission requests, this agent\'s cap per turn (permissions.maxRequestsPerTurn); the 4500 after the first 500 were denied without asking anyone',
    );
    expect(turn(state, { ok: true, view: { step: 'actions', calls: [] } }).state.lastError).toBe(state.lastError);
  });

  it('the state keeps an actions step\'s call names, not why each was refused (that is in the next input)', () => {
    const { state } = turn(started(), { ok: true, view: { step: 'actions', calls: [{ name: 'echo', problem: 'text: expected string' }] } });
    expect(state.lastStep).toEqual({ step: 'actions', calls: [{ name: 'echo' }] });
    expect(state.next).toMatchObject({ calls: [{ refused: 'invalid parameters, not run: text: expected string' }] });
  });

  it('a harness that reports no usage and has no price table makes the cost guardrail blind', () => {
    const s = sessionStarted(resolved(initialState(input), { ...policy, priced: false }, 0), sandbox, 'x');
    expect(turn(s, { ok: true, view: { step: 'actions', calls: [] } }, { usageReported: false }).state.costBlind).toBe(true);
    expect(turn(started(), { ok: true, view: { step: 'actions', calls: [] } }, { usageReported: false }).state.costBlind).toBe(false);
  });
});

describe('guardrails', () => {
  const at = (over: Partial<RunState>) => ({ ...started(), ...over });
  it('name the first one crossed: tokens, cost, then iterations (sub-agent turns count)', () => {
    expect(guardrailCrossed(at({}))).toBeUndefined();
    expect(guardrailCrossed(at({ usage: { input: 600, output: 300, cacheRead: 100, cacheWrite: 0 } }))).toEqual({ guardrail: 'tokens', reason: 'token budget spent: 1000 of 1000' });
    expect(guardrailCrossed(at({ costUsd: 1.5 }))?.guardrail).toBe('cost');
    expect(guardrailCrossed(at({ iteration: 2, childIterations: 3 }))).toEqual({ guardrail: 'iterations', reason: 'iteration limit reached: 5 of 5' });
  });

  it('a sub-agent gets what is left, and its usage and turns count here', () => {
    const s = at({ iteration: 2, usage: { input: 100, output: 100, cacheRead: 0, cacheWrite: 0 }, costUsd: 0.25 });
    expect(childBudget(s)).toEqual({ maxTokens: 800, maxCostUsd: 0.75, maxIterations: 3, deadlineMs: s.deadlineMs, maxSubAgentDepth: 2 });
    const child = { workflowId: 'c', status: 'stopped' as const, guardrail: 'iterations' as const, reason: 'r', iterations: 3, usage: { input: 10, output: 10, cacheRead: 0, cacheWrite: 0 }, costUsd: 0.1 };
    const { state, decision } = afterSubAgent(s, 'helper', child, false);
    expect(decision).toEqual({ kind: 'next' });
    expect(state).toMatchObject({ childIterations: 3, usage: { input: 110 }, costUsd: 0.35 });
    expect(guardrailCrossed(state)?.guardrail).toBe('iterations');
  });
});

describe('the run tree', () => {
  const at = (over: Partial<RunState>, depth?: number) => ({ ...started(), ...over, policy: { ...policy, guardrails: { ...policy.guardrails, ...(depth !== undefined ? { maxSubAgentDepth: depth } : {}) } } });
  const child = (iterations: number, subAgentIterations?: number) => ({ workflowId: 'c', status: 'succeeded' as const, iterations, ...(subAgentIterations ? { subAgentIterations } : {}), usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 }, costUsd: 0 });

  it('a sub-agent gets one level less of depth; at the last level a sub-agent step is refused back to the harness', () => {
    expect(childBudget(at({}, 3)).maxSubAgentDepth).toBe(2);
    // A policy resolved before the limit existed gets the default.
    expect(childBudget(at({})).maxSubAgentDepth).toBe(2);
    expect(childBudget(at({}, 0)).maxSubAgentDepth).toBe(0);
    expect(subAgentTooDeep(at({}, 1), 'helper')).toBeUndefined();
    const refused = subAgentTooDeep(at({}, 0), 'helper')!;
    expect(refused.decision).toEqual({ kind: 'next' });
    expect(refused.state.next).toEqual({ kind: 'prompt', parts: [expect.stringMatching(/^Sub-agent "helper" was not started: this run is already at the deepest sub-agent level/)] });
    expect(refused.state.lastError).toMatch(/sub-agent "helper" refused: the run tree's sub-agent depth limit/);
  });

  it("a sub-agent's own sub-agents' turns count against the parent's iterations, and its result says how many", () => {
    const s = at({ iteration: 1 });
    expect(afterSubAgent(s, 'helper', child(1, 3), false).state.childIterations).toBe(4);
    expect(afterSubAgent(s, 'helper', child(1), false).state.childIterations).toBe(1);
    expect(guardrailCrossed(afterSubAgent(s, 'helper', child(1, 3), false).state)?.guardrail).toBe('iterations');
    expect(runResult({ ...s, childIterations: 4 }, 'w', { status: 'succeeded', result: 'r' }).subAgentIterations).toBe(4);
    expect(runResult(s, 'w', { status: 'succeeded', result: 'r' })).not.toHaveProperty('subAgentIterations');
  });

  it('sub-agent workflow ids stay within the id limit at any depth, unique and readable from the root', () => {
    expect(subAgentWorkflowId('run-a', 3)).toBe('run-a.sub-3');
    const root = `run-${'r'.repeat(196)}`;
    let ids = [root];
    for (let depth = 0; depth < 50; depth++) ids = [...ids, subAgentWorkflowId(ids.at(-1)!, depth + 1)];
    for (const id of ids) {
      expect(id.length).toBeLessThanOrEqual(maxIdLength);
      expect(id.startsWith('run-rrrr')).toBe(true);
      expect(idProblem(id, 'identity')).toBeUndefined(); // a valid directory name
    }
    expect(new Set(ids).size).toBe(ids.length);
    // Siblings differ by their turn; cousins whose parents share the opening differ by the hash.
    expect(subAgentWorkflowId(ids[5]!, 1)).not.toBe(subAgentWorkflowId(ids[5]!, 2));
    expect(subAgentWorkflowId(`${root}.sub-1`, 1)).not.toBe(subAgentWorkflowId(`${root}.sub-2`, 1));
  });
});

describe('continue-as-new', () => {
  const now = { turnsThisExecution: 3, suggested: false, historyBytes: 10_000 };
  it('happens on the server suggestion, past the history size, or after N turns — never before a first turn', () => {
    expect(shouldContinueAsNew({}, now)).toBe(false);
    expect(shouldContinueAsNew({}, { ...now, suggested: true })).toBe(true);
    expect(shouldContinueAsNew({ continueAsNewAtHistoryBytes: 10_000 }, now)).toBe(true);
    expect(shouldContinueAsNew({}, { ...now, historyBytes: 4 * 1024 * 1024 })).toBe(true);
    expect(shouldContinueAsNew({ continueAsNewAfterTurns: 3 }, now)).toBe(true);
    expect(shouldContinueAsNew({ continueAsNewAfterTurns: 1 }, { ...now, turnsThisExecution: 0, suggested: true })).toBe(false);
  });

  it('carries the state and a short task, never the conversation or the full task', () => {
    const big = { ...input, task: 'x'.repeat(10_000), resumeSessionId: 'gone', continueAsNewAfterTurns: 5, workflowVersion: 7 };
    const s = turn(started(), { ok: true, view: { step: 'actions', calls: [{ name: 'echo' }] } }).state;
    const next = continuedInput(big, s);
    expect(next.carried).toEqual({ ...s, continuedTimes: 1 });
    expect(typeof next.task === 'string' && next.task.length).toBeLessThan(300);
    expect(next).not.toHaveProperty('resumeSessionId');
    expect(next.continueAsNewAfterTurns).toBe(5);
    // The next execution keeps the command sequence the run started with (docs/VERSIONING.md), named even when the
    // start left it out.
    expect(next.workflowVersion).toBe(7);
    expect(continuedInput(input, s).workflowVersion).toBe(workflowVersion);
    expect(JSON.stringify(next).length).toBeLessThan(2500);
  });
});
