/**
 * The guard against a harness wedging its run: the largest turn result, next turn request, run state (status
 * query) and continue-as-new input that anything a harness writes can produce, built with the real bounding and
 * decision functions, encode well under Temporal's 2 MiB payload limit.
 */
import { defaultPayloadConverter } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { MAX_ACTIONS_PER_ENVELOPE_LIMIT } from '../../src/envelope/index.js';
import type { RunPolicy } from '../../src/spec/types.js';
import { DETAILED_PENDING, approvalRequested } from '../../src/workflows/approvals.js';
import { MAX_HARNESS_MESSAGE_CHARS, MAX_SESSION_ID_CHARS, MAX_TURN_PROBLEM_CHARS, actionsStepView, clipText } from '../../src/workflows/bounds.js';
import { applyTurn, beginTurn, continuedInput, initialState, resolved, sessionStarted, statusView } from '../../src/workflows/decide.js';
import type { AgentRunInput, TurnRequest, TurnResult } from '../../src/workflows/types.js';
import { pendingViewOf } from '../../src/activities/approvals.js';

const MiB = 1024 * 1024;
/** What "well under" means here: half of Temporal's limit, whatever the harness wrote. */
const BOUND = MiB;
const bytesOf = (value: unknown) => defaultPayloadConverter.toPayload(value)!.data!.length;
const huge = 'x'.repeat(MiB);
const hostileWrite = { file_path: huge, content: '\x1b'.repeat(MiB) };

// The operator's catalog is not the attacker, but it is generous: many actions with long names.
const policy: RunPolicy = {
  specHash: 'a'.repeat(64),
  agent: 'worst-case-agent',
  harness: 'scripted',
  sessionResume: true,
  priced: true,
  guardrails: { maxIterations: 100, maxTokens: 1e9, maxCostUsd: 1e6, maxWallTimeMs: 3_600_000 },
  actions: Array.from({ length: 40 }, (_, i) => ({ name: `a-rather-long-catalog-action-name-${i}`, maxExecutionsPerRun: 1 })),
  subAgents: [],
  maxMalformedTurns: 3,
  chatTimeoutMs: 1000,
  operatorTimeoutMs: 1000,
  turnAttempts: 3,
  turnTimeoutMs: 600_000,
  inlineTextLimit: 16 * 1024,
  sharesParentWorkspace: false,
};
const input: AgentRunInput = { agent: policy.agent, task: 'the task', identity: { tenantId: 'acme', userId: 'alice' } };
const sandbox = { provider: 'local', id: 'x', workspacePath: '/w/x', hostWorkspacePath: '/host/w/x' };

describe('payload bounds: what a harness writes never pushes a payload toward 2 MiB', () => {
  it('an envelope at the largest cap the catalog allows, every name and problem a megabyte long', () => {
    // Every call both unknown (a long name) and with a parameter problem: more than any real reply can be.
    const envelope = { actions: Array.from({ length: MAX_ACTIONS_PER_ENVELOPE_LIMIT }, (_, i) => ({ name: `${i}${huge}` })), message: huge };
    const view = actionsStepView(envelope, envelope.actions.map(() => huge), () => false);
    const result: TurnResult = {
      usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 },
      costUsd: 0.01,
      costSource: 'price-table',
      usageReported: true,
      externalSessionId: 's'.repeat(MAX_SESSION_ID_CHARS),
      resumeFailed: clipText(huge, MAX_HARNESS_MESSAGE_CHARS),
      permissionRequestsOverCap: { cap: 500, denied: 1e9 },
      step: { ok: true, view },
    };
    const started = sessionStarted(resolved(initialState(input), policy, 0), sandbox, 'the task');
    const { state: running } = beginTurn(started);
    // Requests waiting for an operator, with titles, tools and writes (all escapes, which lengthen when shown) a
    // megabyte long, as the turn activity signals them: more than the state keeps details for.
    let state = running;
    for (let i = 0; i < DETAILED_PENDING + 2; i++) {
      state = approvalRequested(state, pendingViewOf({ workflowId: 'w', runId: 'r', requestId: `t1-${i}`, turn: 1, tool: huge, kind: 'edit', title: huge, input: hostileWrite, status: 'pending', requestedAt: new Date(0).toISOString(), expiresAt: new Date(1).toISOString() }));
    }
    const applied = applyTurn(state, result).state;
    const { state: after, request } = beginTurn(applied);
    const turnRequest: TurnRequest = { ...request, specHash: policy.specHash, sandbox, budget: { tokens: 1e9, costUsd: 1e6 } };
    const figures = {
      turnResult: bytesOf(result),
      turnRequest: bytesOf(turnRequest),
      status: bytesOf(statusView(after)),
      continueAsNew: bytesOf(continuedInput(input, after)),
      approvalSignal: bytesOf(pendingViewOf({ workflowId: 'w', runId: 'r', requestId: 't1-x', turn: 1, tool: huge, kind: 'edit', title: huge, input: hostileWrite, status: 'pending', requestedAt: new Date(0).toISOString() })),
    };
    console.log(`worst-case payload bytes: ${JSON.stringify(figures)}`);
    for (const [what, bytes] of Object.entries(figures)) expect(bytes, what).toBeLessThan(BOUND);
    expect(turnRequest.input).toMatchObject({ kind: 'actions', calls: expect.arrayContaining([expect.objectContaining({ refused: expect.stringContaining('is not allowed for this agent') })]) });
  });

  it('a reply with a megabyte of problems feeds back a bounded problem', () => {
    const result: TurnResult = {
      usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 },
      costUsd: 0,
      costSource: 'price-table',
      usageReported: true,
      step: { ok: false, problem: clipText(huge, MAX_TURN_PROBLEM_CHARS) },
    };
    const started = sessionStarted(resolved(initialState(input), policy, 0), sandbox, 'the task');
    const { request } = beginTurn(applyTurn(beginTurn(started).state, result).state);
    expect(bytesOf(result)).toBeLessThan(8 * 1024);
    expect(bytesOf(request)).toBeLessThan(8 * 1024);
  });
});
