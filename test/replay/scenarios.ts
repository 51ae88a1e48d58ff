/**
 * The scenarios whose histories the replay suite keeps: every step type, chat, operator retry, sub-agents,
 * continue-as-new, cancellation and each guardrail. `npm run record-histories` runs them on a dev server and
 * writes test/replay/histories/*.json; test/replay/replay.test.ts replays those files against today's workflow code.
 * No vitest here: the recorder imports it.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { getAgentRun, startAgentRun } from '../../src/client/index.js';
import type { agentRun } from '../../src/workflows/agent-run.js';
import type { AgentRunInput } from '../../src/workflows/types.js';

type Obj = Record<string, unknown>;

export const repoRoot = path.resolve(import.meta.dirname, '..', '..');
const scriptedHarness = path.join(repoRoot, 'test', 'harnesses', 'scripted-harness.mjs');

/** The recorder's catalog: the scripted harness (and a variant with a small reply cap), one agent per behaviour. */
export function recordingCatalog(scriptsDir: string): Obj {
  const scripted = { driverClass: 'StdioJson', executable: process.execPath, args: [scriptedHarness, '--scripts', scriptsDir], active: true, vendor: 'testvendor', model: 'scripted-1', prices: { input: 1, output: 2 }, turnTimeoutMs: 60_000 };
  const guard = { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 120_000 };
  return {
    harnesses: [
      { name: 'scripted', ...scripted },
      { name: 'small-replies', ...scripted, maxReplyBytes: 1000 },
      { name: 'stateless', ...scripted, args: [...scripted.args, '--stateless'], capabilities: { sessionResume: false } },
    ],
    agents: [
      { name: 'scripted', harness: 'scripted', actions: ['write_file', 'echo', { name: 'read_file', maxExecutionsPerRun: 1 }], subAgents: ['helper', 'reviewer'], maxMalformedTurns: 1, chatTimeoutMs: 1500, turnAttempts: 1, operatorTimeoutMs: 1500, guardrails: guard },
      { name: 'helper', description: 'answers sub-questions', harness: 'scripted', actions: ['echo'], guardrails: guard },
      { name: 'reviewer', description: 'reviews notes', harness: 'scripted', actions: ['read_file'], sandbox: { workspaceScope: 'parent' }, guardrails: guard },
      { name: 'few-turns', harness: 'scripted', actions: ['echo'], guardrails: { ...guard, maxIterations: 2 } },
      { name: 'few-tokens', harness: 'scripted', actions: ['echo'], guardrails: { ...guard, maxTokens: 100 } },
      { name: 'cheap', harness: 'scripted', actions: ['echo'], guardrails: { ...guard, maxCostUsd: 0.5 } },
      { name: 'hasty', harness: 'scripted', actions: ['echo'], guardrails: { ...guard, maxWallTimeMs: 1500 } },
      { name: 'terse', harness: 'small-replies', actions: ['echo'], guardrails: guard },
      { name: 'guarded', harness: 'scripted', actions: ['echo'], permissions: { posture: 'strict', approvalTimeoutMs: 60_000 }, guardrails: guard },
      { name: 'watched', harness: 'scripted', actions: ['echo'], progressIntervalMs: 1000, guardrails: guard },
      { name: 'mover', harness: 'stateless', actions: ['echo'], sandbox: { onHostLoss: 'reprovision', hostLossTimeoutMs: 5000 }, guardrails: guard },
    ],
    actions: [{ name: 'write_file' }, { name: 'read_file' }, { name: 'echo' }],
  };
}

const ok = (result = 'done') => ({ envelope: { step: 'success', result } });
const echo = (text: string, usage?: Obj) => ({ ...(usage ? { usage } : {}), envelope: { step: 'actions', actions: [{ name: 'echo', params: { text } }] } });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(run: ReturnType<typeof getAgentRun>, state: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    const s = await run.status().catch(() => undefined);
    if (s?.state === state) return;
    await sleep(100);
  }
  throw new Error(`${run.workflowId} never reached ${state}`);
}

export interface ScenarioContext {
  readonly client: Client;
  readonly taskQueue: string;
  /** The worker's data directory (its local workspaces are under `workspaces/`). */
  readonly dataDir: string;
  /** Writes a script and returns the task that selects it. */
  script(name: string, turns: Obj[]): string;
}

export interface Scenario {
  readonly name: string;
  /** What it covers. */
  readonly covers: string;
  /** How its (first) run must end: `status`, then `:failureType` or `:guardrail` when there is one. */
  readonly expect: string;
  /** Starts the run and drives it to its end; returns the workflow ids whose histories to keep (each execution). */
  run(ctx: ScenarioContext): Promise<string[]>;
}

const start = (ctx: ScenarioContext, name: string, input: Omit<AgentRunInput, 'identity'>) =>
  startAgentRun(ctx.client, { ...input, identity: { tenantId: 'acme', userId: 'alice' }, taskQueue: ctx.taskQueue, workflowId: `replay-${name}` });

const simple = (name: string, covers: string, expect: string, agent: string, turns: Obj[], extra: Partial<AgentRunInput> = {}): Scenario => ({
  name,
  covers,
  expect,
  async run(ctx) {
    const run = await start(ctx, name, { agent, task: ctx.script(name, turns), ...extra });
    await run.result();
    return [run.workflowId];
  },
});

export const scenarios: readonly Scenario[] = [
  simple('actions', 'actions: allowed, unknown, invalid and over-cap calls; success', 'succeeded', 'scripted', [
    { envelope: { step: 'actions', actions: [{ name: 'write_file', params: { path: 'a.txt', content: 'hi' } }, { name: 'rm_rf', params: {} }, { name: 'write_file', params: { path: 1 } }, { name: 'read_file', params: { path: 'a.txt' } }, { name: 'read_file', params: { path: 'a.txt' } }] } },
    ok('all reported'),
  ]),
  simple('failed', 'a failed step', 'failed:HarnessReportedFailure', 'scripted', [{ envelope: { step: 'failed', reason: 'cannot' } }]),
  simple('malformed', 'a malformed envelope, the feedback turn, recovery', 'succeeded', 'scripted', [{ raw: 'no envelope here' }, ok('fixed')]),
  simple('malformed-give-up', 'malformed envelopes past the limit', 'failed:MalformedEnvelope', 'scripted', [{ raw: 'no' }, { raw: 'still no' }]),
  simple('reply-too-large', 'a reply over the size cap gets a feedback turn', 'succeeded', 'terse', [{ padBytes: 2000, ...ok('too long') }, ok('short')]),
  simple('resume-failed', 'a forgotten session: fresh session with the conversation replayed', 'succeeded', 'scripted', [ok('fresh')], { resumeSessionId: 'gone-session' }),
  {
    name: 'chat',
    covers: 'a chat step answered by update',
    expect: 'succeeded',
    async run(ctx) {
      const run = await start(ctx, 'chat', { agent: 'scripted', task: ctx.script('chat', [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok('used it')]) });
      await waitFor(run, 'waiting_for_reply');
      await run.reply('main');
      await run.result();
      return [run.workflowId];
    },
  },
  simple('chat-timeout', 'a chat step nobody answers', 'failed:ChatTimeout', 'scripted', [{ envelope: { step: 'chat', message: 'Anyone?' } }]),
  {
    name: 'sub-agent',
    covers: 'a sub-agent whose result feeds the parent, a refused sub-agent, and a sub-agent in the parent workspace',
    expect: 'succeeded',
    async run(ctx) {
      ctx.script('child', [{ usage: { input: 5, output: 5 }, ...ok('child says 42') }]);
      ctx.script('review', [{ envelope: { step: 'actions', actions: [{ name: 'read_file', params: { path: 'NOTES.md' } }] } }, ok('looks right')]);
      const task = ctx.script('sub-agent', [
        { envelope: { step: 'sub-agent', agent: 'helper', message: 'compute script:child', terminateAfter: false } },
        { envelope: { step: 'sub-agent', agent: 'stranger', message: 'x', terminateAfter: false } },
        { envelope: { step: 'actions', actions: [{ name: 'write_file', params: { path: 'NOTES.md', content: 'notes' } }] } },
        { envelope: { step: 'sub-agent', agent: 'reviewer', message: 'review script:review', terminateAfter: true } },
      ]);
      const run = await start(ctx, 'sub-agent', { agent: 'scripted', task });
      await run.result();
      return [run.workflowId, `${run.workflowId}.sub-1`, `${run.workflowId}.sub-4`];
    },
  },
  {
    name: 'operator-retry',
    covers: 'a turn that exhausts its attempts, awaiting_operator, retried by update',
    expect: 'succeeded',
    async run(ctx) {
      const run = await start(ctx, 'operator-retry', { agent: 'scripted', task: ctx.script('operator-retry', [echo('x'), { failTimes: 1, ...ok('recovered') }]) });
      await waitFor(run, 'awaiting_operator');
      await run.retryTurn();
      await run.result();
      return [run.workflowId];
    },
  },
  {
    name: 'operator-abandon',
    covers: 'awaiting_operator, abandoned by signal',
    expect: 'failed:Abandoned',
    async run(ctx) {
      const run = await start(ctx, 'operator-abandon', { agent: 'scripted', task: ctx.script('operator-abandon', [{ failTimes: 9, ...ok() }]) });
      await waitFor(run, 'awaiting_operator');
      await run.abandon('not worth it');
      await run.result();
      return [run.workflowId];
    },
  },
  simple('operator-timeout', 'awaiting_operator until the operator timeout', 'failed:OperatorTimeout', 'scripted', [{ failTimes: 9, ...ok() }]),
  {
    name: 'continue-as-new',
    covers: 'a start without workflowVersion; continue-as-new after every turn, carrying the state and naming the version',
    expect: 'succeeded',
    async run(ctx) {
      const task = ctx.script('continue-as-new', [echo('a', { input: 1, output: 1 }), echo('b', { input: 1, output: 1 }), ok('long done')]);
      const handle: WorkflowHandle<typeof agentRun> = await ctx.client.workflow.start<typeof agentRun>('agentRun', {
        taskQueue: ctx.taskQueue,
        workflowId: 'replay-continue-as-new',
        // Without workflowVersion, as a service's own client may start it: the current sequence, named from the
        // second execution on (its input says workflowVersion: 3).
        args: [{ agent: 'scripted', task, identity: { tenantId: 'acme', userId: 'alice' }, continueAsNewAfterTurns: 1 }],
      });
      await handle.result();
      return [handle.workflowId];
    },
  },
  {
    name: 'cancel',
    covers: 'a cancel signal during a turn',
    expect: 'cancelled',
    async run(ctx) {
      const run = await start(ctx, 'cancel', { agent: 'scripted', task: ctx.script('cancel', [{ sleepMs: 60_000, ...ok() }]) });
      await waitFor(run, 'running');
      await sleep(1000);
      await run.cancel('changed my mind');
      await run.result();
      return [run.workflowId];
    },
  },
  {
    name: 'temporal-cancel',
    covers: "Temporal's own cancel request during a turn",
    expect: 'cancelled',
    async run(ctx) {
      const run = await start(ctx, 'temporal-cancel', { agent: 'scripted', task: ctx.script('temporal-cancel', [{ sleepMs: 60_000, ...ok() }]) });
      await waitFor(run, 'running');
      await sleep(1000);
      await run.handle.cancel();
      await run.result();
      return [run.workflowId];
    },
  },
  {
    name: 'approvals',
    covers: 'permission requests: pending (signals, the pending-approvals search attribute), approved and denied by update',
    expect: 'succeeded',
    async run(ctx) {
      const touch = (file: string) => ({ tool: 'Bash', kind: 'command', input: { command: `touch ${file}` }, title: `touch ${file}` });
      const run = await start(ctx, 'approvals', { agent: 'guarded', task: ctx.script('approvals', [{ permissions: [touch('a.txt'), touch('b.txt')], ...ok('decided') }]) });
      for (const decide of [(id: string) => run.approve(id, { by: 'alice' }), (id: string) => run.deny(id, { reason: 'no', by: 'bob' })]) {
        let id: string | undefined;
        for (let i = 0; i < 300 && !id; i++) {
          id = (await run.status()).pendingApprovals?.[0]?.requestId;
          if (!id) await sleep(100);
        }
        if (!id) throw new Error('approvals: no request became pending');
        await decide(id);
      }
      await run.result();
      return [run.workflowId];
    },
  },
  // A turn of 5 s whose harness reports a model call a second: progress notes every second (agent `watched`).
  simple('turn-progress', "a turn in flight's progress notes (turnProgress signals, display only) and named timers", 'succeeded', 'watched', [
    { activity: 'working', calls: Array.from({ length: 5 }, () => ({ usage: { input: 100, output: 10 }, sleepMs: 1000 })), ...ok('watched') },
  ]),
  simple('guardrail-iterations', 'the iteration guardrail', 'stopped:iterations', 'few-turns', [echo('1'), echo('2'), ok()]),
  simple('guardrail-tokens', 'the token guardrail', 'stopped:tokens', 'few-tokens', [echo('1', { input: 60, output: 60 }), ok()]),
  // 600,000 input tokens at $1 per million: $0.60, over the agent's $0.50 (the price table is the cost authority).
  simple('guardrail-cost', 'the cost guardrail', 'stopped:cost', 'cheap', [echo('1', { input: 600_000, output: 0 }), ok()]),
  simple('guardrail-wall-time', 'the wall-time guardrail interrupting a turn', 'stopped:wallTime', 'hasty', [{ sleepMs: 60_000, ...ok() }]),
  simple('unknown-agent', 'a run whose agent does not resolve', 'failed:UnknownAgent', 'nobody', [ok()]),
  simple('host-pinned', "host affinity: a local workspace's turns and end on its worker's host queue", 'succeeded', 'scripted', [echo('on my host'), ok('pinned')]),
  {
    name: 'host-reprovision',
    covers: 'host affinity: the workspace is gone, onHostLoss reprovision gives the run a fresh one and replays the conversation',
    expect: 'succeeded',
    async run(ctx) {
      const run = await start(ctx, 'host-reprovision', { agent: 'mover', task: ctx.script('host-reprovision', [{ envelope: { step: 'chat', message: 'Go on?' } }, ok('moved')]) });
      await waitFor(run, 'waiting_for_reply');
      rmSync(path.join(ctx.dataDir, 'workspaces', 'runs', run.workflowId), { recursive: true, force: true });
      await run.reply('yes');
      await run.result();
      return [run.workflowId];
    },
  },
  // Outcomes in Temporal's terms (docs/OUTCOMES.md): failed and stopped runs end Failed, cancelled ones Canceled.
  simple('outcomes-failed', 'a harness-reported failure ending as a Failed workflow', 'failed:HarnessReportedFailure', 'scripted', [{ envelope: { step: 'failed', reason: 'cannot' } }]),
  simple('outcomes-unknown-agent', 'an agent that does not resolve: status failed, then a Failed workflow', 'failed:UnknownAgent', 'nobody', [ok()]),
  simple('outcomes-guardrail', 'a guardrail stop ending as a Failed workflow (GuardrailStopped)', 'stopped:iterations', 'few-turns', [echo('1'), echo('2'), ok()]),
  {
    name: 'outcomes-cancel',
    covers: 'the cancel signal and the cancel request during a turn: a Canceled workflow with the result in the memo',
    expect: 'cancelled',
    async run(ctx) {
      const run = await start(ctx, 'outcomes-cancel', { agent: 'scripted', task: ctx.script('outcomes-cancel', [{ sleepMs: 60_000, ...ok() }]) });
      await waitFor(run, 'running');
      await sleep(1000);
      await run.cancel('changed my mind');
      await run.result();
      return [run.workflowId];
    },
  },
  {
    name: 'outcomes-signal-cancel',
    covers: 'the cancel signal alone while waiting for a reply: the grace timer, then a Failed workflow (Cancelled)',
    expect: 'cancelled',
    async run(ctx) {
      const run = await start(ctx, 'outcomes-signal-cancel', { agent: 'scripted', task: ctx.script('outcomes-signal-cancel', [{ envelope: { step: 'chat', message: 'well?' } }]) });
      await waitFor(run, 'waiting_for_reply');
      await run.handle.signal('cancel', 'bare signal');
      await run.result();
      return [run.workflowId];
    },
  },
  {
    name: 'outcomes-sub-agent-failed',
    covers: "a sub-agent's Failed workflow whose typed result (from the failure details) ends the parent",
    expect: 'failed:HarnessReportedFailure',
    async run(ctx) {
      ctx.script('outcomes-child', [{ usage: { input: 1, output: 1 }, envelope: { step: 'failed', reason: 'child gave up' } }]);
      const task = ctx.script('outcomes-sub-agent-failed', [{ envelope: { step: 'sub-agent', agent: 'helper', message: 'script:outcomes-child', terminateAfter: true } }]);
      const run = await start(ctx, 'outcomes-sub-agent-failed', { agent: 'scripted', task });
      await run.result();
      return [run.workflowId, `${run.workflowId}.sub-1`];
    },
  },
];

/** Writes one history per execution: `<workflowId>.json`, or `<workflowId>.<n>.json` for later executions. */
export function writeHistory(dir: string, workflowId: string, execution: number, json: string): string {
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${workflowId}${execution > 1 ? `.${execution}` : ''}.json`);
  writeFileSync(file, `${JSON.stringify(JSON.parse(json), null, 1)}\n`);
  return file;
}
