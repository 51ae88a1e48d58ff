/** The run's books as pure functions (issue 8, workflow side): milliseconds, no Temporal. */
import { describe, expect, it } from 'vitest';
import type { RunPolicy } from '../../src/spec/types.js';
import { afterSubAgent, applyTurn, beginTurn, guardrailCrossed, initialState, lostSubAgent, resolved, sessionStarted } from '../../src/workflows/decide.js';
import { checkedUsage, costOf, usageOf, usageProblem } from '../../src/contracts/usage.js';
import type { RunState } from '../../src/workflows/state.js';
import { budgetEnding, foldFailedSpend, turnBudget, untilDoneDelayMs } from '../../src/workflows/turn-spend.js';
import type { TurnResult } from '../../src/workflows/types.js';

const policy = {
  specHash: 'abc',
  agent: 'a',
  harness: 'h',
  sessionResume: true,
  priced: true,
  guardrails: { maxIterations: 5, maxTokens: 1000, maxCostUsd: 1, maxWallTimeMs: 60_000 },
  actions: [{ name: 'echo' }],
  subAgents: [],
  maxMalformedTurns: 1,
  chatTimeoutMs: 1000,
  operatorTimeoutMs: 1000,
  turnAttempts: 2,
  turnTimeoutMs: 1000,
  inlineTextLimit: 100,
  sharesParentWorkspace: false,
} as RunPolicy;
const started = (): RunState =>
  sessionStarted(resolved(initialState({ agent: 'a', task: 't', identity: { tenantId: 't', userId: 'u' } }), policy, 0), { provider: 'local', workspacePath: '/w', hostWorkspacePath: '/w', id: 'x' }, 't');
const result = (extra: Partial<TurnResult> = {}): TurnResult => ({ usage: { input: 10, output: 5 }, costUsd: 0.01, costSource: 'price-table', usageReported: true, step: { ok: true, view: { step: 'actions', calls: [] } }, ...extra });

describe("a failed turn's spend", () => {
  it('counts toward the run and its guardrails', () => {
    const s = foldFailedSpend(started(), { usage: { input: 1200 }, costUsd: 0.2, costBlind: true });
    expect(s).toMatchObject({ usage: { input: 1200 }, costUsd: 0.2, costBlind: true });
    expect(guardrailCrossed(s)).toMatchObject({ guardrail: 'tokens' });
    expect(foldFailedSpend(started(), undefined)).toEqual(started());
  });
});

describe('the budget a turn gets', () => {
  it('is what the run has left, never negative', () => {
    const { state } = applyTurn(beginTurn(started()).state, result({ usage: { input: 600, output: 100 }, costUsd: 0.4 }));
    expect(turnBudget(state)).toEqual({ tokens: 300, costUsd: expect.closeTo(0.6, 10) });
    expect(turnBudget(foldFailedSpend(state, { usage: { input: 5000 }, costUsd: 9, costBlind: false }))).toEqual({ tokens: 0, costUsd: 0 });
  });

  it('a budget-exhausted turn ends the run as the guardrail stop', () => {
    expect(budgetEnding(result({ budgetExhausted: { guardrail: 'cost', message: 'cost budget spent mid-turn' }, step: { ok: false, problem: 'x' } }))).toEqual({ status: 'stopped', guardrail: 'cost', reason: 'cost budget spent mid-turn' });
    expect(budgetEnding(result())).toBeUndefined();
  });
});

it("the turn's costBlind verdict reaches the run, even when it reported usage", () => {
  expect(applyTurn(beginTurn(started()).state, result({ costBlind: true })).state.costBlind).toBe(true);
  expect(applyTurn(beginTurn(started()).state, result()).state.costBlind).toBe(false);
});

it('endSession is retried with a growing pause, at most 5 minutes', () => {
  expect([0, 1, 2, 30].map(untilDoneDelayMs)).toEqual([1000, 2000, 4000, 300_000]);
});

describe('usage values', () => {
  it('are whole numbers from 0 to a billion; a report with any other count is refused as a whole (unknown, never summed)', () => {
    expect(usageOf({ input: 1_000_000_000, output: 0, cacheRead: null })).toEqual({ input: 1_000_000_000, output: 0 });
    for (const bad of [Number.NaN, Infinity, 1e308, 1_000_000_001, 2.5, -1, '7']) expect(usageOf({ input: 10, output: bad })).toEqual({});
    expect(usageProblem({ input: 10, output: 1e308 })).toMatch(/output: 1e\+308/);
    expect(checkedUsage({ input: 3, output: Number.NaN })).toEqual({});
    expect(costOf(0.25)).toBe(0.25);
    for (const bad of [Number.NaN, -0.01, 1e308, Infinity]) expect(costOf(bad)).toBeUndefined();
  });

  it('a sub-agent that is lost or blind makes its parent blind', () => {
    const s = beginTurn(started()).state;
    expect(afterSubAgent(s, 'child', lostSubAgent('c', 'terminated'), false).state.costBlind).toBe(true);
    expect(afterSubAgent(s, 'child', { workflowId: 'c', status: 'succeeded', iterations: 1, usage: { input: 5 }, costUsd: 0, costBlind: true }, false).state.costBlind).toBe(true);
    expect(afterSubAgent(s, 'child', { workflowId: 'c', status: 'succeeded', iterations: 1, usage: { input: 5 }, costUsd: 0 }, false).state.costBlind).toBe(false);
  });
});
