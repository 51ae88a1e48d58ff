/** Claude Code adapter over JSONL recorded from the real pinned CLI (test/fixtures/claude, see its README). */
import { driverSession, type DriverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { claudeCode, claudeBaseUrl } from '../../src/adapters/claude-code-adapter.js';
import { foldTurn } from '../../src/adapters/fold.js';
import { defaultAdapterRegistry, findDriver } from '../../src/adapters/registry.js';
import type { HarnessEvent, PermissionPosture } from '../../src/adapters/types.js';
import { FakeExecutor, type FakeRun } from './fake-executor.js';

const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/claude');
const workspace = mkdtempSync(path.join(tmpdir(), 'claude-adapter-'));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));
const secret = 'sk-ant-test-secret-value';

/** One recorded invocation as a canned run: stdout lines, stderr and exit code exactly as recorded. */
function recorded(name: string): FakeRun {
  const read = (suffix: string): string => readFileSync(path.join(fixtures, `${name}${suffix}`), 'utf8');
  const code = read('.exit.txt').trim();
  return { lines: read('.jsonl').split('\n').filter(Boolean), stderr: read('.stderr.txt'), exitCode: code === 'null' ? null : Number(code) };
}

function fixtureLines(name: string): Record<string, unknown>[] {
  return readFileSync(path.join(fixtures, `${name}.jsonl`), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
}

function config(executor: FakeExecutor, extra: Partial<HarnessSessionConfig> = {}): HarnessSessionConfig {
  return {
    runId: 'run-1', harnessName: 'claude', executable: 'claude', baseArgs: [], model: 'claude-sonnet-4-5',
    workspacePath: workspace, hostWorkspacePath: workspace, env: { ANTHROPIC_API_KEY: secret }, executor,
    baseUrl: 'http://127.0.0.1:9999/v1', turnTimeoutMs: 5000, ...extra,
  };
}

async function turn(adapter: DriverSession, prompt = 'hi', turnNo = 1): Promise<HarnessEvent[]> {
  const out: HarnessEvent[] = [];
  for await (const event of adapter.runTurn({ prompt, turn: turnNo })) out.push(event);
  return out;
}

const terminals = (events: HarnessEvent[]) => events.filter((e) => e.type === 'turn-complete' || e.type === 'session-error');

async function started(runs: FakeRun[], extra: Partial<HarnessSessionConfig> = {}, posture: PermissionPosture = 'auto') {
  const executor = new FakeExecutor(runs);
  const adapter = driverSession(claudeCode);
  adapter.applyPermissionPolicy(posture);
  adapter.setSystemPrompt('ENVELOPE CONTRACT');
  await adapter.start(config(executor, extra));
  return { executor, adapter };
}

describe('ClaudeCode adapter over recorded fixtures', () => {
  it('plain answer: text, per-call usage as it streams (input excludes cache), cost, session and model', async () => {
    const { adapter } = await started([recorded('plain')]);
    const events = await turn(adapter);
    const result = fixtureLines('plain').find((l) => l.type === 'result') as { usage: Record<string, number>; total_cost_usd: number; session_id: string };
    const folded = foldTurn(events);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"hello"}' });
    // Fake vendor script: input 1200 (non-cached), cacheRead 300, cacheWrite 40, output 15.
    expect(folded.usage).toEqual({ input: 1200, output: 15, cacheRead: 300, cacheWrite: 40 });
    expect(folded.usage.input).toBe(result.usage.input_tokens);
    expect(folded.costUsd).toBe(result.total_cost_usd);
    expect(folded.sessionId).toBe(result.session_id);
    expect(adapter.externalSessionId).toBe(result.session_id);
    expect(folded.resumed).toBe(false);
    expect(adapter.resumed).toBe(false);
    expect(adapter.reportedModel).toBe('claude-sonnet-4-5');
    // The call's usage arrives at its message_delta; the result adds nothing but the invocation's cost.
    const usage = events.filter((e) => e.type === 'usage');
    expect(usage).toEqual([
      { type: 'usage', usage: { input: 1200, output: 15, cacheRead: 300, cacheWrite: 40 } },
      { type: 'usage', usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, costUsd: result.total_cost_usd },
    ]);
  });

  it('tool call: the Read tool shows as activity; one usage event per model call, as each finishes', async () => {
    const { adapter } = await started([recorded('tool-call')]);
    const events = await turn(adapter);
    const folded = foldTurn(events);
    expect(events.some((e) => e.type === 'activity' && e.description.startsWith('Read ') && e.description.includes('notes.txt'))).toBe(true);
    expect(folded.text).toBe('{"step":"success","result":"PELICAN"}');
    // Two calls: (1500 in, 0 read, 500 write, 30 out) + (200 in, 1500 read, 60 write, 12 out).
    const calls = events.filter((e) => e.type === 'usage').map((e) => (e as { usage: unknown }).usage);
    expect(calls.slice(0, 2)).toEqual([
      { input: 1500, output: 30, cacheRead: 0, cacheWrite: 500 },
      { input: 200, output: 12, cacheRead: 1500, cacheWrite: 60 },
    ]);
    // The first call's usage came before the tool ran.
    const firstUsage = events.findIndex((e) => e.type === 'usage');
    expect(firstUsage).toBeLessThan(events.findIndex((e) => e.type === 'activity' && e.description === 'tool result'));
    expect(folded.usage).toEqual({ input: 1700, output: 42, cacheRead: 1500, cacheWrite: 560 });
    expect(folded.costUsd).toBeCloseTo(0.00828, 8);
  });

  it('thinking tokens: Anthropic counts them inside output_tokens, so the total is exact and reasoning stays unknown', async () => {
    const { adapter } = await started([recorded('reasoning')]);
    const folded = foldTurn(await turn(adapter));
    // Served: 200 in, 9 out, 100 thinking.
    expect(folded.usage).toEqual({ input: 200, output: 109, cacheRead: 0, cacheWrite: 0 });
    expect(folded.usage.reasoning).toBeUndefined();
  });

  it('killed mid-call: the calls that finished count, and the input of the one in flight, with its output as a call of unknown usage', async () => {
    const lines = recorded('tool-call').lines!;
    // Cut the recording right after the second call's message_start: the process then hangs until the timeout.
    const cut = lines.findIndex((l, i) => i > 5 && l.includes('"message_start"'));
    const { adapter } = await started([{ lines: lines.slice(0, cut + 1), hang: true }], { turnTimeoutMs: 300 });
    const events = await turn(adapter);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'timeout' });
    const calls = events.filter((e) => e.type === 'usage').map((e) => (e as { usage: unknown }).usage);
    expect(calls).toEqual([
      { input: 1500, output: 30, cacheRead: 0, cacheWrite: 500 },
      { input: 200, output: 0, cacheRead: 1500, cacheWrite: 60 },
      {},
    ]);
  });

  it('resume in place (settings.forkSessions: false): turn 2 passes --resume with the id from turn 1', async () => {
    const { adapter, executor } = await started([recorded('resume-setup'), recorded('resume')], { settings: { forkSessions: false } });
    await turn(adapter, 'Remember the number 42.', 1);
    const firstId = adapter.externalSessionId;
    expect(firstId).toBe(fixtureLines('resume-setup')[0]!.session_id);
    expect(adapter.resumed).toBe(false);
    const events = await turn(adapter, 'What number?', 2);
    expect(adapter.resumed).toBe(true);
    expect(adapter.externalSessionId).toBe(firstId);
    const folded = foldTurn(events);
    expect(folded.resumed).toBe(true);
    expect(folded.text).toBe('{"step":"success","result":"42"}');
    // Claude's result usage is per invocation even on --resume (not the session's running total).
    expect(folded.usage).toEqual({ input: 50, output: 9, cacheRead: 950, cacheWrite: 10 });

    const [first, second] = executor.requests.map((r) => r.argv);
    const common = ['--output-format', 'stream-json', '--verbose', '--include-partial-messages', '--permission-mode', 'acceptEdits', '--model', 'claude-sonnet-4-5', '--append-system-prompt', 'ENVELOPE CONTRACT'];
    // --strict-mcp-config: no MCP server from a repository's .mcp.json or a settings file, ever.
    expect(first).toEqual(['claude', '-p', 'Remember the number 42.', ...common, '--strict-mcp-config']);
    expect(second).toEqual(['claude', '-p', 'What number?', ...common, '--strict-mcp-config', '--resume', firstId]);
    for (const request of executor.requests) {
      expect(request.argv.join(' ')).not.toContain(secret);
      expect(request.stdin).toBeUndefined();
      expect(request.env?.ANTHROPIC_API_KEY).toBe(secret);
      expect(request.env?.ANTHROPIC_BASE_URL).toBe('http://127.0.0.1:9999');
      expect(request.env?.CLAUDE_CONFIG_DIR).toBe(path.join(workspace, '.home', 'claude'));
      expect(request.env).toMatchObject({ DISABLE_TELEMETRY: '1', DISABLE_AUTOUPDATER: '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' });
    }
  });

  it('fork (the default): turn 2 continues turn 1 in a branch (--resume ID --fork-session), a new id that counts as resumed', async () => {
    const { adapter, executor } = await started([recorded('fork-setup'), recorded('fork')]);
    await turn(adapter, 'Remember the number 42.', 1);
    const firstId = adapter.externalSessionId!;
    const events = await turn(adapter, 'What number?', 2);
    const folded = foldTurn(events);
    expect(executor.requests[1]!.argv.slice(-3)).toEqual(['--resume', firstId, '--fork-session']);
    expect(folded.text).toBe('{"step":"success","result":"42"}');
    expect(adapter.externalSessionId).toBe(fixtureLines('fork')[0]!.session_id);
    expect(adapter.externalSessionId).not.toBe(firstId);
    expect(folded.resumed).toBe(true);
    expect(adapter.resumed).toBe(true);
    expect(folded.usage).toEqual({ input: 50, output: 9, cacheRead: 950, cacheWrite: 10 });
  });

  it('unknown session: exactly one resume-failed error, and the next turn starts fresh', async () => {
    const missing = '00000000-0000-4000-8000-000000000000';
    const { adapter, executor } = await started([recorded('resume-missing'), recorded('plain')], { resumeSessionId: missing });
    const events = await turn(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'resume-failed' });
    expect(adapter.resumed).toBe(false);
    const next = await turn(adapter, 'replayed context', 2);
    expect(executor.requests[0]!.argv).toContain('--resume');
    expect(executor.requests[1]!.argv).not.toContain('--resume');
    expect(executor.requests[1]!.argv).not.toContain('--fork-session');
    expect(next.at(-1)?.type).toBe('turn-complete');
    expect(adapter.resumed).toBe(false);
  });

  it('vendor error: exactly one vendor-error session-error with the HTTP status', async () => {
    const { adapter } = await started([recorded('error')]);
    const events = await turn(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    expect((events.at(-1) as { message: string }).message).toContain('HTTP 500');
    // The CLI's synthetic error message is not a model report.
    expect(adapter.reportedModel).toBe('claude-sonnet-4-5');
  });

  it('garbage and truncated output: unknown events and exactly one terminal', async () => {
    const plain = recorded('plain').lines!;
    const truncated = [plain[0]!, 'not json at all', '{"type":"assistant","message":{"content":[{"type":"text","text":"par'];
    const { adapter } = await started([{ lines: truncated, exitCode: 0 }]);
    const events = await turn(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.filter((e) => e.type === 'unknown')).toHaveLength(2);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'process-exit' });
  });

  it('an unknown line type maps to unknown and does not end the turn', async () => {
    const lines = recorded('plain').lines!;
    const { adapter } = await started([{ lines: [lines[0]!, '{"type":"brand_new_event","x":1}', ...lines.slice(1)] }]);
    const events = await turn(adapter);
    expect(events).toContainEqual({ type: 'unknown', raw: '{"type":"brand_new_event","x":1}' });
    expect(events.at(-1)?.type).toBe('turn-complete');
  });

  it('translates postures into flags and env honestly', async () => {
    const argvFor = async (posture: PermissionPosture) => {
      const { adapter, executor } = await started([recorded('plain')], {}, posture);
      await turn(adapter);
      return executor.requests[0]!;
    };
    expect((await argvFor('strict')).argv).toEqual(expect.arrayContaining(['--permission-mode', 'default']));
    const dangerous = await argvFor('dangerous');
    expect(dangerous.argv).toContain('--dangerously-skip-permissions');
    expect(dangerous.env?.IS_SANDBOX).toBe('1');
    const adapter = driverSession(claudeCode);
    expect(adapter.applyPermissionPolicy('strict')).toMatchObject({ enforced: true, note: expect.stringContaining('DENIED') as unknown });
  });

  it('maps a catalog key variable onto ANTHROPIC_API_KEY and bounds retries from settings, never via argv', async () => {
    const { adapter, executor } = await started([recorded('plain')], {
      env: { MY_CLAUDE_KEY: secret },
      settings: { apiKeyEnv: 'MY_CLAUDE_KEY', maxRetries: 0 },
    });
    await turn(adapter);
    const request = executor.requests[0]!;
    expect(request.env).toMatchObject({ ANTHROPIC_API_KEY: secret, CLAUDE_CODE_MAX_RETRIES: '0' });
    expect(request.argv.join(' ')).not.toContain(secret);
  });

  it('registers under ClaudeCode and normalises base URLs', () => {
    expect(findDriver(defaultAdapterRegistry(), 'ClaudeCode')).toBe(claudeCode);
    expect(claudeBaseUrl('http://h:1/v1/')).toBe('http://h:1');
    expect(claudeBaseUrl('http://h:1')).toBe('http://h:1');
    expect(driverSession(claudeCode).capabilities).toEqual({ sessionResume: true, sessionFork: true, permissionHooks: true, systemPrompt: true, mcpClient: true });
  });
});
