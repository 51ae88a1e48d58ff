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
import { addUsage, billedOutput, noUsage, totalTokens, usageOf } from '../../src/workflows/usage.js';
import { profiles } from '../fixtures/record-more.js';
import { repoRoot } from '../support/worker.js';
import type { FakeVendor, RecordedRequest, ScriptedReply } from './fake-vendor/server.js';
import { cliBinary, expectInstalled, startVendorFor } from './support/clis.js';

// Not under /tmp: codex's sandbox helper breaks when its home is there.
const dataRoot = path.join(repoRoot, '.data/accounting-live', `${process.pid}`);
afterAll(() => process.env.KEEP_LIVE || rmSync(dataRoot, { recursive: true, force: true }));
const prices = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 };
const quiet = { logger: new DefaultLogger('ERROR') };

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
}

const isPost = (request: RecordedRequest): boolean => request.method === 'POST';
const viaProfile = (name: 'gemini' | 'opencode' | 'pi', driverClass: string, vendor: string): Omit<LiveCli, 'perCall' | 'forks'> => ({
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
  },
  {
    name: 'codex',
    harness: { driverClass: 'Codex', vendor: 'openai', model: 'gpt-5.5', apiKeyEnv: 'OPENAI_API_KEY', executable: cliBinary('codex') },
    vendor: () => startVendorFor('codex'),
    match: isPost,
    readCall: () => ({ name: 'exec_command', input: { cmd: 'cat notes.txt' } }),
    perCall: false,
    forks: true,
  },
  { ...viaProfile('gemini', 'GeminiCli', 'google'), perCall: false, forks: false },
  { ...viaProfile('opencode', 'OpenCode', 'openai'), perCall: true, forks: true },
  { ...viaProfile('pi', 'Pi', 'openai'), perCall: true, forks: true },
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
        harnesses: [{ name: cli.name, active: true, baseUrl, turnTimeoutMs: 30_000, prices, ...cli.harness }],
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
        ],
      },
      'accounting-live',
      { baseDir: repoRoot },
    );
    ledger = SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
    const deps = defaultDeps({ catalog: () => catalog, dataDir, env: { FAKE_VENDOR_KEY: 'sk-accounting-live-fake' }, credentials: new MemoryCredentialStore({}), ledger });
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

  it(`a token budget stops the turn ${cli.perCall ? 'within one model call' : 'at the end of the turn (usage comes per turn)'}`, { timeout: 90_000 }, async () => {
    const workflowId = `budget-${cli.name}`;
    const { sandbox, request } = await session(workflowId);
    const from = vendor.served.length;
    const read = (i: number) => ({ toolCalls: [{ id: `call_budget_${i}`, ...cli.readCall(sandbox.hostWorkspacePath) }], usage: { input: 1000, output: 10 } });
    // Three calls of 1,010 tokens, then an answer; the budget is 1,500 tokens. Later calls answer slowly, like a
    // real model, so a stop after call 2 lands before call 3 is served.
    script(read(1), read(2), { ...read(3), delayMs: 3000 }, { text: '{"step":"success","result":"spent"}', usage: { input: 1000, output: 10 }, delayMs: 3000 });
    const outcome = await turn(workflowId, request(1, 'Read notes.txt three times.', { budget: { tokens: 1500 } }));
    expect(outcome).toMatchObject({ step: { ok: false }, budgetExhausted: { guardrail: 'tokens' } });
    await new Promise((r) => setTimeout(r, 3500));
    const served = servedSince(vendor, cli, from);
    const totals = await ledger.runTotals(workflowId);
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
});
