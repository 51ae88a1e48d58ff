/**
 * Every token counted, with the REAL pinned CLIs against the fake vendor on 127.0.0.1: `runTurn` (in a
 * MockActivityEnvironment, with the local sandbox and a real SQLite ledger) drives each CLI through its adapter.
 *
 * - a vendor fault after a good model call: the attempt fails, and the good call's tokens are in the ledger,
 *   exactly what the vendor served;
 * - a retried attempt resumes from the session state before the failed one: the turn's prompt reaches the model
 *   once (forking CLIs), in the JSON mode and in the two-way mode a permission gate selects; where the CLI cannot
 *   fork (Gemini) the test records what it does;
 * - thinking tokens are counted as billed, in both modes (gemini's two-way quota misses them: its chat file has them);
 * - a token budget stops the turn: within one model call for CLIs that report usage per call (claude, opencode,
 *   pi), at the end of the turn for those that report it per turn (codex, gemini).
 * A missing binary is a FAILURE, never a skip.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../../src/activities/index.js';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import { defaultDeps } from '../../src/worker.js';
import type { TurnRequest, TurnResult } from '../../src/workflows/types.js';
import { addUsage, billedOutput, noUsage, totalTokens, usageOf } from '../../src/contracts/usage.js';
import { profiles } from '../fixtures/record-more.js';
import { repoRoot } from '../support/worker.js';
import type { FakeVendor, RecordedRequest, ScriptedReply } from './fake-vendor/server.js';
import { shellCall } from './fake-vendor/tool-calls.js';
import { cliBinary, expectInstalled, startVendorFor } from './support/clis.js';

// Not under /tmp: codex's sandbox helper breaks when its home is there.
const dataRoot = path.join(repoRoot, '.data/accounting-live', `${process.pid}`);
afterAll(() => process.env.KEEP_LIVE || rmSync(dataRoot, { recursive: true, force: true }));
const prices = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 };
const quiet = { logger: new DefaultLogger('ERROR') };
const liveTurnTimeoutMs = 300_000;
/** The new tests' budget: a turn, the wait for the state they act in, and the teardown. */
const slowTest = { timeout: liveTurnTimeoutMs + 120_000 };

interface LiveCli {
  readonly name: 'claude' | 'codex' | 'gemini' | 'opencode' | 'pi';
  readonly harness: Record<string, unknown>;
  readonly vendor: () => Promise<FakeVendor>;
  /** The vendor requests that are model turns (not probes, titles or side calls). */
  readonly match: (request: RecordedRequest) => boolean;
  readonly readCall: (workspace: string) => { name: string; input: Record<string, unknown> };
  /** Usage arrives per model call (a budget stops within one call), else only at the end of the turn. */
  readonly perCall: boolean;
  /** Resumed turns fork the session. */
  readonly forks: boolean;
  /**
   * In the two-way mode, whether the call that asks for a tool is fully known after a cancel in the wait for the
   * answer (measured): opencode stores the call's tokens only when the call ends, after its tool; claude holds the
   * call's output count back during the wait but prints it when it is stopped; the others have it before they ask.
   */
  readonly cancelledWaitKnown: boolean;
  /** Writes of a streamed answer that make its opening (the call has begun; no usage yet, except claude's input). */
  readonly openingWrites: number;
}

const isPost = (request: RecordedRequest): boolean => request.method === 'POST';
const viaProfile = (name: 'gemini' | 'opencode' | 'pi', driverClass: string, vendor: string): Omit<LiveCli, 'perCall' | 'forks' | 'cancelledWaitKnown' | 'openingWrites'> => ({
  name,
  harness: {
    driverClass,
    vendor,
    model: profiles[name].model,
    apiKeyEnv: profiles[name].keyEnv,
    executable: profiles[name].executable,
    settings: { apiKeyEnv: profiles[name].keyEnv },
    env: name === 'opencode' ? { npm_config_offline: 'true' } : {},
  },
  vendor: profiles[name].vendor,
  match: profiles[name].match,
  readCall: profiles[name].readToolCall,
});

const clis: LiveCli[] = [
  {
    name: 'claude',
    harness: { driverClass: 'ClaudeCode', vendor: 'anthropic', model: 'claude-sonnet-4-5', apiKeyEnv: 'ANTHROPIC_API_KEY', executable: cliBinary('claude'), settings: { maxRetries: 0 } },
    vendor: () => startVendorFor('claude'),
    match: isPost,
    readCall: (workspace) => ({ name: 'Read', input: { file_path: path.join(workspace, 'notes.txt') } }),
    perCall: true,
    forks: true,
    cancelledWaitKnown: true,
    openingWrites: 2,
  },
  {
    name: 'codex',
    harness: { driverClass: 'Codex', vendor: 'openai', model: 'gpt-5.5', apiKeyEnv: 'OPENAI_API_KEY', executable: cliBinary('codex') },
    vendor: () => startVendorFor('codex'),
    match: isPost,
    readCall: () => ({ name: 'exec_command', input: { cmd: 'cat notes.txt' } }),
    perCall: false,
    forks: true,
    cancelledWaitKnown: true,
    openingWrites: 2,
  },
  { ...viaProfile('gemini', 'GeminiCli', 'google'), perCall: false, forks: false, cancelledWaitKnown: true, openingWrites: 1 },
  { ...viaProfile('opencode', 'OpenCode', 'openai'), perCall: true, forks: true, cancelledWaitKnown: false, openingWrites: 2 },
  { ...viaProfile('pi', 'Pi', 'openai'), perCall: true, forks: true, cancelledWaitKnown: true, openingWrites: 2 },
];

/** What the vendor served to model-turn requests since `from`, as normalised usage. */
function servedSince(vendor: FakeVendor, cli: LiveCli, from: number) {
  return vendor.served
    .slice(from)
    .filter((s) => cli.match(s.request))
    .reduce((sum, s) => addUsage(sum, usageOf({ input: s.usage.input, output: s.usage.output + s.usage.reasoning, cacheRead: s.usage.cacheRead, cacheWrite: s.usage.cacheWrite })), noUsage);
}

describe.each(clis)('$name: every token counted (real binary, fake vendor)', (cli) => {
  let vendor: FakeVendor;
  let ledger: SqliteLedger;
  let activities: ReturnType<typeof createActivities>;
  const dataDir = path.join(dataRoot, cli.name);

  beforeAll(async () => {
    expectInstalled(String(cli.harness.executable));
    vendor = await cli.vendor();
    mkdirSync(dataDir, { recursive: true });
    const baseUrl = cli.name === 'opencode' || cli.name === 'pi' ? `${vendor.url}/v1` : vendor.url;
    const catalog = parseCatalog(
      {
        // A starved machine delays a cold CLI a lot (opencode took 40 s to print its first line beside other suites).
        harnesses: [{ name: cli.name, active: true, baseUrl, turnTimeoutMs: liveTurnTimeoutMs, prices, ...cli.harness }],
        agents: [
          { name: 'agent', harness: cli.name, permissions: 'auto', credentials: [{ env: String(cli.harness.apiKeyEnv), from: 'FAKE_VENDOR_KEY' }] },
          // strict: the turn has an interactive permission gate, so the adapter drives the CLI's two-way mode; the
          // policy lets the test's one tool call (reading notes.txt, a command on codex) through without an operator.
          {
            name: 'strict-agent',
            harness: cli.name,
            permissions: { posture: 'strict', allow: ['read', 'command:cat notes.txt'] },
            credentials: [{ env: String(cli.harness.apiKeyEnv), from: 'FAKE_VENDOR_KEY' }],
          },
          // strict with no rule: every tool that asks waits for an operator.
          { name: 'asking-agent', harness: cli.name, permissions: { posture: 'strict' }, credentials: [{ env: String(cli.harness.apiKeyEnv), from: 'FAKE_VENDOR_KEY' }] },
        ],
      },
      'accounting-live',
      { baseDir: repoRoot },
    );
    ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
    const deps = defaultDeps({ catalog: () => catalog, dataDir, env: { FAKE_VENDOR_KEY: 'sk-accounting-live-fake' }, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network', ledger });
    activities = createActivities(deps);
  });
  afterAll(async () => {
    await ledger?.close();
    await vendor?.close();
  });

  async function session(workflowId: string, agent = 'agent') {
    const spec = await activities.resolveAgent({ agent });
    const env = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'r-1' } }, quiet);
    const { sandbox } = (await env.run(activities.startSession, { workflowId, runId: 'r-1', specHash: spec.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<
      ReturnType<typeof activities.startSession>
    >;
    writeFileSync(path.join(sandbox.hostWorkspacePath, 'notes.txt'), 'The secret word is PELICAN.\n');
    /** A turn request: `prompt` as the turn's input. */
    const request = (turnNo: number, prompt: string, extra: Partial<TurnRequest> = {}): TurnRequest => ({
      turn: turnNo,
      specHash: spec.specHash,
      sandbox,
      input: { kind: 'prompt', parts: [prompt] },
      envelopeSeq: turnNo * 10,
      ...extra,
    });
    return { spec, sandbox, request, workflowId };
  }

  const turn = (workflowId: string, input: TurnRequest, attempt = 1, activityId = '1') =>
    new MockActivityEnvironment({ attempt, activityId, workflowExecution: { workflowId, runId: 'r-1' } }, quiet).run(activities.runTurn, input) as Promise<TurnResult>;
  /** A turn cancelled (as Temporal cancels an activity) once `when` holds; resolves with the cancellation. */
  const cancelledTurn = async (workflowId: string, input: TurnRequest, when: () => boolean | Promise<boolean>) => {
    const env = new MockActivityEnvironment({ attempt: 1, activityId: '1', workflowExecution: { workflowId, runId: 'r-1' } }, quiet);
    const running = (env.run(activities.runTurn, input) as Promise<TurnResult>).then(
      (r) => r as TurnResult | Error,
      (e: unknown) => e as Error,
    );
    await expect.poll(when, { timeout: liveTurnTimeoutMs, interval: 100 }).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    env.cancel();
    return running;
  };
  const script = (...replies: ScriptedReply[]) => vendor.script(...replies.map((r) => ({ ...r, match: cli.match })));

  it.each([
    { mode: 'one-way (JSON) mode', agent: 'agent' },
    { mode: 'two-way (permission) mode', agent: 'strict-agent' },
  ])('thinking tokens are counted as billed, in the $mode', { timeout: 60_000 }, async ({ agent }) => {
    const workflowId = `thinking-${cli.name}-${agent}`;
    const { request } = await session(workflowId, agent);
    const from = vendor.served.length;
    script({ text: '{"step":"success","result":"ok"}', usage: { input: 200, output: 9, reasoning: 100 } });
    const outcome = await turn(workflowId, request(1, 'Think, then answer.'));
    expect(outcome).toMatchObject({ step: { ok: true } });
    expect(outcome.costBlind).toBeUndefined();
    // Served: 200 in, 9 out, 100 thinking (billed as output). Claude and pi fold thinking into output (109).
    expect(servedSince(vendor, cli, from)).toMatchObject({ input: 200, output: 109 });
    expect(totalTokens(outcome.usage)).toBe(309);
    expect(billedOutput(outcome.usage)).toBe(109);
    expect(totalTokens((await ledger.runTotals(workflowId)).usage)).toBe(309);
  });

  it('a vendor fault after a good model call: the attempt fails and the good call is in the ledger, as served', { timeout: 60_000 }, async () => {
    const workflowId = `fault-${cli.name}`;
    const { sandbox, request } = await session(workflowId);
    const from = vendor.served.length;
    script({ toolCalls: [{ id: 'call_good_1', ...cli.readCall(sandbox.hostWorkspacePath) }], usage: { input: 4000, output: 700 } }, { error: { status: 400, message: 'bad request after a good call (fake vendor)' } });
    const failure = await turn(workflowId, request(1, 'Read notes.txt and tell me the secret word.')).catch((e: unknown) => e);
    expect(failure).toMatchObject({ type: 'TurnFailed' });
    const served = servedSince(vendor, cli, from);
    expect(served).toEqual({ input: 4000, output: 700, cacheRead: 0, cacheWrite: 0 });
    const [row] = await ledger.listPromptRuns(workflowId);
    expect(row).toMatchObject({ status: 'failed', outputUsed: false, costSource: 'price-table' });
    expect(row!.usage).toMatchObject({ input: 4000, output: 700 });
    expect((await ledger.runTotals(workflowId)).costUsd).toBeCloseTo((4000 * 3 + 700 * 15) / 1e6, 10);
  });

  it.each([
    { mode: 'one-way (JSON) mode', agent: 'agent' },
    { mode: 'two-way (permission) mode', agent: 'strict-agent' },
  ])('a retried attempt resumes from the session before the failed one, in the $mode: the prompt reaches the model once', { timeout: 90_000 }, async ({ agent }) => {
    const workflowId = `retry-${cli.name}-${agent}`;
    const { sandbox, request } = await session(workflowId, agent);
    script({ text: '{"step":"chat","message":"Go on?"}', usage: { input: 300, output: 10 } });
    const first = await turn(workflowId, request(1, 'FIRST-PROMPT-1f2e'));
    expect(first).toMatchObject({ step: { ok: true } });
    const parent = first.externalSessionId;
    expect(parent).toBeTruthy();
    // Turn 2, attempt 1: one good call, then the vendor fails. Attempt 2 gets the same input (same session).
    const input = request(2, 'SECOND-PROMPT-9c8d', { resumeSessionId: parent });
    script({ toolCalls: [{ id: 'call_retry_1', ...cli.readCall(sandbox.hostWorkspacePath) }], usage: { input: 500, output: 20 } }, { error: { status: 400, message: 'fail the attempt (fake vendor)' } });
    await expect(turn(workflowId, input, 1, '2')).rejects.toMatchObject({ type: 'TurnFailed' });
    script({ text: '{"step":"success","result":"ok"}', usage: { input: 400, output: 12 } });
    const second = await turn(workflowId, input, 2, '2');
    expect(second).toMatchObject({ step: { ok: true } });
    const last = vendor.requests.filter(cli.match).at(-1)!;
    const copies = last.rawBody.split('SECOND-PROMPT-9c8d').length - 1;
    if (cli.forks) {
      expect(copies).toBe(1);
      expect(second.externalSessionId).toBeTruthy();
      expect(second.externalSessionId).not.toBe(parent);
    } else {
      // Gemini cannot fork: the failed attempt's prompt (and its tool call) stay in the session it resumes.
      expect(copies).toBe(2);
    }
    // Every attempt is in the books: turn 1, turn 2's failed attempt (its good call) and the one that succeeded.
    expect((await ledger.listPromptRuns(workflowId)).map((r) => [r.turn, r.status, r.outputUsed])).toEqual([
      [1, 'succeeded', true],
      [2, 'failed', false],
      [2, 'succeeded', true],
    ]);
  });

  /**
   * Three calls of 1,010 tokens, then an answer, with a budget of 1,500 tokens: the turn is stopped. Later calls answer
   * slowly, like a real model, so a stop after call 2 lands before call 3 is served.
   */
  async function budgetStop(workflowId: string, agent: string) {
    vendor.clearScript();
    const { sandbox, request } = await session(workflowId, agent);
    const from = vendor.served.length;
    const read = (i: number) => ({ toolCalls: [{ id: `call_${workflowId}_${i}`, ...cli.readCall(sandbox.hostWorkspacePath) }], usage: { input: 1000, output: 10 } });
    script(read(1), read(2), { ...read(3), delayMs: 3000 }, { text: '{"step":"success","result":"spent"}', usage: { input: 1000, output: 10 }, delayMs: 3000 });
    const outcome = await turn(workflowId, request(1, 'Read notes.txt three times.', { budget: { tokens: 1500 } }));
    expect(outcome).toMatchObject({ step: { ok: false }, budgetExhausted: { guardrail: 'tokens' } });
    await new Promise((r) => setTimeout(r, 3500));
    return { outcome, from, served: servedSince(vendor, cli, from), totals: await ledger.runTotals(workflowId) };
  }

  it(`a token budget stops the turn ${cli.perCall ? 'within one model call' : 'at the end of the turn (usage comes per turn)'}`, { timeout: 90_000 }, async () => {
    const workflowId = `budget-${cli.name}`;
    const { from, served, totals } = await budgetStop(workflowId, 'agent');
    if (cli.perCall) {
      // Stopped at call 2 (2,020 ≥ 1,500): overshoot 520 tokens, less than one call; call 3 was never answered.
      expect(vendor.served.slice(from).filter((s) => cli.match(s.request))).toHaveLength(2);
      expect(totals.usage).toMatchObject({ input: 2000, output: 20 });
    } else {
      expect(totals.usage).toMatchObject({ input: served.input, output: served.output });
    }
    // Whatever was served is in the ledger.
    expect(totals.usage).toMatchObject({ input: served.input, output: served.output });
    expect((await ledger.listPromptRuns(workflowId))[0]).toMatchObject({ status: 'budget-exhausted', outputUsed: false });
    // Drop what the stopped CLI left in the script, so the next test starts clean.
    vendor.clearScript();
  });

  it('a token budget stops the turn in the two-way mode too: every call the vendor served is in the ledger once', slowTest, async () => {
    const workflowId = `budget-two-way-${cli.name}`;
    const { outcome, served, totals } = await budgetStop(workflowId, 'strict-agent');
    // The vendor's bill, the ledger and the turn's own spend agree: before, codex's app-server booked each call and
    // then its thread's total on top (twice what was served).
    expect(totals.usage).toMatchObject({ input: served.input, output: served.output });
    expect(outcome.usage).toMatchObject({ input: served.input, output: served.output });
    expect((await ledger.listPromptRuns(workflowId))[0]).toMatchObject({ status: 'budget-exhausted', outputUsed: false });
    vendor.clearScript();
  });

  it(`a cancel while the turn waits for an approval: the call that asked is ${cli.cancelledWaitKnown ? 'booked, as served' : 'unknown: the cost is blind'}`, slowTest, async () => {
    const workflowId = `cancel-wait-${cli.name}`;
    vendor.clearScript();
    const { request } = await session(workflowId, 'asking-agent');
    const from = vendor.served.length;
    script({ toolCalls: [shellCall(cli.name, 'touch ran.txt', 'call_wait_1')], usage: { input: 700, output: 70, cacheRead: 30 } }, { text: '{"step":"success","result":"never"}', usage: { input: 5, output: 5 } });
    const pending = async () => (await ledger.listApprovals({ workflowId, status: 'pending' })).length > 0;
    const outcome = await cancelledTurn(workflowId, request(1, 'Run touch ran.txt, then finish.'), pending);
    expect(outcome).toBeInstanceOf(Error);
    const served = servedSince(vendor, cli, from);
    expect(served).toMatchObject({ input: 700, output: 70 });
    const totals = await ledger.runTotals(workflowId);
    const [row] = await ledger.listPromptRuns(workflowId);
    expect(row).toMatchObject({ status: 'cancelled' });
    if (cli.cancelledWaitKnown) {
      // Before: gemini read its usage only at the prompt's end, so a cancel in the wait booked nothing.
      expect(totals.usage).toMatchObject({ input: served.input, output: served.output });
      expect(totals.costBlind).toBe(false);
    } else {
      // OpenCode had not finished the call (its tokens come when its tool ran): nothing known, and the cost says so.
      expect(totals.usage.input ?? 0).toBe(0);
      expect(totals.usage.output ?? 0).toBe(0);
      expect(totals).toMatchObject({ costBlind: true, costSource: 'unknown' });
    }
    vendor.clearScript();
  });

  it('a streaming call killed before its usage arrives: the calls that finished count, and the cost is blind', slowTest, async () => {
    const workflowId = `killed-stream-${cli.name}`;
    vendor.clearScript();
    const { sandbox, request } = await session(workflowId);
    const from = vendor.served.length;
    // Call 1 reads notes.txt; call 2 begins to stream and then goes silent, as a vendor mid-answer does.
    script({ toolCalls: [{ id: 'call_stream_1', ...cli.readCall(sandbox.hostWorkspacePath) }], usage: { input: 800, output: 8 } }, { text: '{"step":"success","result":"never"}', usage: { input: 900, output: 9 }, cut: { afterWrites: cli.openingWrites, then: 'hang' } });
    const streaming = () => vendor.served.slice(from).filter((r) => cli.match(r.request)).length >= 2;
    const outcome = await cancelledTurn(workflowId, request(1, 'Read notes.txt, then answer.'), streaming);
    expect(outcome).toBeInstanceOf(Error);
    const totals = await ledger.runTotals(workflowId);
    // Call 1 as served (claude also said call 2's input before it went silent); call 2's output nobody knows.
    expect(totals.usage).toMatchObject({ input: 800 + (cli.name === 'claude' ? 900 : 0), output: 8 });
    // Before: codex, pi, gemini and opencode booked nothing for call 2 and said the cost was known.
    expect(totals).toMatchObject({ costBlind: true, costSource: 'unknown' });
    vendor.clearScript();
  });
});

describe('claude: the non-streamed call it falls back to after a cut stream is counted', () => {
  it('the cut call and its fallback are both in the ledger; the cut call\'s output is unknown (cost-blind)', { timeout: 120_000 }, async () => {
    const vendor = await startVendorFor('claude');
    const dataDir = path.join(dataRoot, 'claude-fallback');
    mkdirSync(dataDir, { recursive: true });
    const catalog = parseCatalog(
      {
        harnesses: [{ name: 'claude', active: true, baseUrl: vendor.url, turnTimeoutMs: 30_000, prices, ...clis[0]!.harness }],
        agents: [{ name: 'agent', harness: 'claude', permissions: 'auto', credentials: [{ env: 'ANTHROPIC_API_KEY', from: 'FAKE_VENDOR_KEY' }] }],
      },
      'accounting-live',
      { baseDir: repoRoot },
    );
    const ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
    try {
      const activities = createActivities(defaultDeps({ catalog: () => catalog, dataDir, env: { FAKE_VENDOR_KEY: 'sk-accounting-live-fake' }, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network', ledger }));
      const workflowId = 'claude-fallback';
      const spec = await activities.resolveAgent({ agent: 'agent' });
      const env = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'r-1' } }, quiet);
      const { sandbox } = (await env.run(activities.startSession, { workflowId, runId: 'r-1', specHash: spec.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<ReturnType<typeof activities.startSession>>;
      // The stream is cut after message_start; claude then asks again without streaming (measured on 2.1.197).
      vendor.script({ text: '{"step":"success","result":"cut"}', usage: { input: 5000, output: 210 }, cut: { afterWrites: 2, then: 'destroy' } }, { text: '{"step":"success","result":"fallback"}', usage: { input: 5001, output: 209 } });
      const outcome = (await new MockActivityEnvironment({ attempt: 1, activityId: '1', workflowExecution: { workflowId, runId: 'r-1' } }, quiet).run(activities.runTurn, {
        turn: 1,
        specHash: spec.specHash,
        sandbox,
        input: { kind: 'prompt' as const, parts: ['Answer.'] },
        envelopeSeq: 10,
      })) as TurnResult;
      expect(outcome).toMatchObject({ step: { ok: true } });
      expect(vendor.requests.filter((r) => r.method === 'POST').map((r) => (r.body as { stream?: boolean }).stream ?? false)).toEqual([true, false]);
      const totals = await ledger.runTotals(workflowId);
      // Before: the fallback's 5,210 tokens were in no row (claude's result.usage says 0), so no budget saw them.
      expect(totals.usage).toMatchObject({ input: 5000 + 5001, output: 209 });
      expect(totals).toMatchObject({ costBlind: true });
      expect(outcome).toMatchObject({ usage: { input: 10_001, output: 209 }, costBlind: true });
    } finally {
      await ledger.close();
      await vendor.close();
    }
  });
});
