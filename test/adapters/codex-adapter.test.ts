/** Codex adapter over JSONL recorded from the real pinned CLI (test/fixtures/codex, see its README). */
import { driverSession, type DriverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { codex, codexBaseUrl, codexConfigToml } from '../../src/adapters/codex-adapter.js';
import { foldTurn } from '../../src/adapters/fold.js';
import { defaultAdapterRegistry, findDriver } from '../../src/adapters/registry.js';
import type { HarnessEvent, PermissionPosture } from '../../src/adapters/types.js';
import { FakeExecutor, type FakeRun } from './fake-executor.js';

const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/codex');
const workspaces: string[] = [];
afterAll(() => workspaces.forEach((w) => rmSync(w, { recursive: true, force: true })));
const secret = 'sk-openai-test-secret-value';

function recorded(name: string): FakeRun {
  const read = (suffix: string): string => readFileSync(path.join(fixtures, `${name}${suffix}`), 'utf8');
  const code = read('.exit.txt').trim();
  return { lines: read('.jsonl').split('\n').filter(Boolean), stderr: read('.stderr.txt'), exitCode: code === 'null' ? null : Number(code) };
}

function fixtureLines(name: string): Record<string, unknown>[] {
  return readFileSync(path.join(fixtures, `${name}.jsonl`), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function turn(adapter: DriverSession, prompt = 'hi', turnNo = 1): Promise<HarnessEvent[]> {
  const out: HarnessEvent[] = [];
  for await (const event of adapter.runTurn({ prompt, turn: turnNo })) out.push(event);
  return out;
}

const terminals = (events: HarnessEvent[]) => events.filter((e) => e.type === 'turn-complete' || e.type === 'session-error');

async function started(runs: FakeRun[], extra: Partial<HarnessSessionConfig> = {}, posture: PermissionPosture = 'auto') {
  // A fresh workspace per adapter.
  const workspace = mkdtempSync(path.join(tmpdir(), 'codex-adapter-'));
  workspaces.push(workspace);
  const executor = new FakeExecutor(runs);
  const adapter = driverSession(codex);
  adapter.applyPermissionPolicy(posture);
  adapter.setSystemPrompt('ENVELOPE "CONTRACT"');
  await adapter.start({
    runId: 'run-1', harnessName: 'codex', executable: 'codex', baseArgs: [], model: 'gpt-5.5', workspacePath: workspace,
    hostWorkspacePath: workspace, env: { OPENAI_API_KEY: secret }, executor, baseUrl: 'http://127.0.0.1:9999', turnTimeoutMs: 5000,
    ...extra,
  });
  return { executor, adapter, workspace };
}

/** A run's state store as the worker gives it (the ledger), in memory. */
function memoryState() {
  const values = new Map<string, string>();
  return {
    values,
    get: async (key: string) => (values.has(key) ? (JSON.parse(values.get(key)!) as unknown) : undefined),
    set: async (key: string, value: unknown) => void values.set(key, JSON.stringify(value)),
  };
}

describe('Codex adapter over recorded fixtures', () => {
  it("keeps each thread's running total in the run's state, not the workspace: a later activity's adapter measures against it, and a harness that rewrites files in its home changes nothing", async () => {
    const state = memoryState();
    const workspace = mkdtempSync(path.join(tmpdir(), 'codex-adapter-'));
    workspaces.push(workspace);
    const config = (executor: FakeExecutor, resumeSessionId?: string): HarnessSessionConfig => ({
      runId: 'run-1', harnessName: 'codex', executable: 'codex', baseArgs: [], model: 'gpt-5.5', workspacePath: workspace, hostWorkspacePath: workspace,
      env: { OPENAI_API_KEY: secret }, executor, turnTimeoutMs: 5000, settings: { forkSessions: false }, state, ...(resumeSessionId ? { resumeSessionId } : {}),
    });
    const first = driverSession(codex);
    await first.start(config(new FakeExecutor([recorded('resume-setup')])));
    expect(foldTurn(await turn(first, 'Remember the number 42.', 1)).usage).toEqual({ input: 900, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 });
    await first.end();
    const threadId = first.externalSessionId!;
    expect(state.values.get('codex-usage-totals')).toBe(JSON.stringify({ [threadId]: { input: 900, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 } }));
    // The harness lowers "its" totals where the adapter once kept them, and plants a huge one: nothing is read from there.
    writeFileSync(path.join(workspace, '.home/codex/durable-harness-usage.json'), JSON.stringify({ [threadId]: { input: 1_000_000, output: 1_000_000 } }));

    const second = driverSession(codex);
    await second.start(config(new FakeExecutor([recorded('resume')]), threadId));
    // Recorded turn 2 reports the thread's total (1900 in incl. 950 cached, 14 out): this turn alone was 50/950/9.
    expect(foldTurn(await turn(second, 'What number?', 2)).usage).toEqual({ input: 50, output: 9, cacheRead: 950, cacheWrite: 0, reasoning: 0 });
    await second.end();
    expect(JSON.parse(state.values.get('codex-usage-totals')!)).toEqual({ [threadId]: { input: 950, output: 14, cacheRead: 950, cacheWrite: 0, reasoning: 0 } });
  });

  it('plain answer: last agent message, usage with cached tokens subtracted from input, no model', async () => {
    const { adapter } = await started([recorded('plain')]);
    const events = await turn(adapter);
    const folded = foldTurn(events);
    const threadId = fixtureLines('plain')[0]!.thread_id;
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"hello"}' });
    // Recorded turn.completed: input_tokens 1500 INCLUDING cached 300 → 1200 non-cached.
    expect(folded.usage).toEqual({ input: 1200, output: 15, cacheRead: 300, cacheWrite: 0, reasoning: 0 });
    expect(folded.costUsd).toBeUndefined();
    expect(adapter.externalSessionId).toBe(threadId);
    expect(adapter.resumed).toBe(false);
    // Codex does not report the model in its JSONL: undefined, not a guess.
    expect(adapter.reportedModel).toBeUndefined();
    expect(folded.model).toBeUndefined();
  });

  it('tool call: the command execution shows as activity; usage covers both model calls', async () => {
    const { adapter } = await started([recorded('tool-call')]);
    const events = await turn(adapter);
    const folded = foldTurn(events);
    expect(events).toContainEqual({ type: 'activity', description: "command: /bin/bash -lc 'cat notes.txt' → exit 0" });
    expect(folded.text).toBe('{"step":"success","result":"PELICAN"}');
    // (1500 + 0 cached) + (200 + 1500 cached) = 3200 reported, 1500 cached.
    expect(folded.usage).toEqual({ input: 1700, output: 42, cacheRead: 1500, cacheWrite: 0, reasoning: 0 });
  });

  it('resume in place (settings.forkSessions: false): `exec resume THREAD`, resumed=true, the running total turned back into this turn', async () => {
    const { adapter, executor, workspace } = await started([recorded('resume-setup'), recorded('resume')], { settings: { forkSessions: false } });
    const first = foldTurn(await turn(adapter, 'Remember the number 42.', 1));
    const threadId = adapter.externalSessionId;
    expect(threadId).toBe(fixtureLines('resume-setup')[0]!.thread_id);
    expect(first.usage).toEqual({ input: 900, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 });
    const events = await turn(adapter, 'What number?', 2);
    const folded = foldTurn(events);
    expect(adapter.resumed).toBe(true);
    expect(folded.resumed).toBe(true);
    expect(folded.text).toBe('{"step":"success","result":"42"}');
    // Recorded turn 2 reports the thread total (1900 in incl. 950 cached, 14 out); this turn alone was 50/950/9.
    expect(fixtureLines('resume').at(-1)).toMatchObject({ usage: { input_tokens: 1900, cached_input_tokens: 950, output_tokens: 14 } });
    expect(folded.usage).toEqual({ input: 50, output: 9, cacheRead: 950, cacheWrite: 0, reasoning: 0 });

    const [turn1, turn2] = executor.requests.map((r) => r.argv);
    const options = [
      '--json', '--skip-git-repo-check', '-c', 'sandbox_mode="workspace-write"', '-c', 'approval_policy="never"', '-m', 'gpt-5.5',
      '-c', 'developer_instructions="ENVELOPE \\"CONTRACT\\""',
    ];
    expect(turn1).toEqual(['codex', 'exec', ...options, '--', 'Remember the number 42.']);
    expect(turn2).toEqual(['codex', 'exec', 'resume', ...options, '--', threadId, 'What number?']);
    for (const request of executor.requests) {
      expect(request.argv.join(' ')).not.toContain(secret);
      expect(request.stdin).toBeUndefined();
      expect(request.keepStdinOpen).toBeFalsy();
      expect(request.env?.CODEX_HOME).toBe(path.join(workspace, '.home', 'codex'));
      expect(request.env?.OPENAI_API_KEY).toBe(secret);
    }
    const toml = readFileSync(path.join(workspace, '.home/codex/config.toml'), 'utf8');
    expect(toml).toContain('base_url = "http://127.0.0.1:9999/v1"');
    expect(toml).toContain('env_key = "OPENAI_API_KEY"');
    expect(toml).toContain('wire_api = "responses"');
    expect(toml).not.toContain(secret);
  });

  it('fork (the default): `exec fork THREAD` branches a new thread; its total starts from the parent, so the turn is the difference', async () => {
    const { adapter, executor } = await started([recorded('fork-setup'), recorded('fork')]);
    await turn(adapter, 'Remember the number 42.', 1);
    const parent = adapter.externalSessionId!;
    const folded = foldTurn(await turn(adapter, 'What number?', 2));
    expect(executor.requests[1]!.argv.slice(0, 3)).toEqual(['codex', 'exec', 'fork']);
    expect(executor.requests[1]!.argv.slice(-2)).toEqual([parent, 'What number?']);
    expect(adapter.externalSessionId).toBe(fixtureLines('fork')[0]!.thread_id);
    expect(adapter.externalSessionId).not.toBe(parent);
    expect(folded.resumed).toBe(true);
    // Recorded: the fork's first total is 1900 in (950 cached), 14 out — the parent's 900/5 included.
    expect(folded.usage).toEqual({ input: 50, output: 9, cacheRead: 950, cacheWrite: 0, reasoning: 0 });
  });

  it('reasoning tokens: codex counts them inside output_tokens; the adapter reports them apart', async () => {
    const { adapter } = await started([recorded('reasoning')]);
    // Served: 200 in, 9 out, 100 reasoning; recorded turn.completed: output_tokens 109, reasoning_output_tokens 100.
    expect(foldTurn(await turn(adapter)).usage).toEqual({ input: 200, output: 9, reasoning: 100, cacheRead: 0, cacheWrite: 0 });
  });

  it('a vendor fault after a good call: turn.failed has no usage, so the calls are read back from the rollout file', async () => {
    const { adapter, workspace } = await started([recorded('fault')]);
    const threadId = fixtureLines('fault')[0]!.thread_id as string;
    const dir = path.join(workspace, '.home/codex/sessions/2026/12/01');
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, `rollout-2026-12-01T03-20-50-${threadId}.jsonl`), readFileSync(path.join(fixtures, 'fault.rollout.jsonl')));
    const events = await turn(adapter);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    // Served: the tool call (4000 in, 700 out), then the failing call (nothing).
    expect(events.filter((e) => e.type === 'usage')).toEqual([{ type: 'usage', usage: { input: 4000, output: 700, cacheRead: 0, cacheWrite: 0, reasoning: 0 } }]);
  });

  it('unknown thread (nothing on stdout, stderr says so): one resume-failed, then a fresh thread', async () => {
    const missing = '00000000-0000-4000-8000-000000000000';
    const { adapter, executor } = await started([recorded('resume-missing'), recorded('plain')], { resumeSessionId: missing });
    const events = await turn(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'resume-failed', exitCode: 1 });
    const next = await turn(adapter, 'replayed context', 2);
    expect(executor.requests[0]!.argv.slice(0, 3)).toEqual(['codex', 'exec', 'fork']);
    expect(executor.requests[1]!.argv).not.toContain('resume');
    expect(next.at(-1)?.type).toBe('turn-complete');
    expect(adapter.resumed).toBe(false);
  });

  it('vendor error: exactly one vendor-error session-error', async () => {
    const { adapter } = await started([recorded('error')]);
    const events = await turn(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error' });
  });

  it('garbage and truncated output: unknown events and exactly one terminal', async () => {
    const lines = recorded('plain').lines!;
    const { adapter } = await started([{ lines: [lines[0]!, 'Reading additional input…', '{"type":"item.completed","item":{"id":"x","ty'], exitCode: 1 }]);
    const events = await turn(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.filter((e) => e.type === 'unknown')).toHaveLength(2);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'process-exit', exitCode: 1 });
  });

  it('translates postures into sandbox modes (never asks)', async () => {
    const modeFor = async (posture: PermissionPosture) => {
      const { adapter, executor } = await started([recorded('plain')], {}, posture);
      await turn(adapter);
      return executor.requests[0]!.argv;
    };
    expect(await modeFor('strict')).toContain('sandbox_mode="read-only"');
    expect(await modeFor('dangerous')).toContain('sandbox_mode="danger-full-access"');
    expect(driverSession(codex).applyPermissionPolicy('strict')).toMatchObject({ posture: 'strict', enforced: true });
  });

  it('config: custom env key from settings, base URL normalised, registration', () => {
    expect(codexBaseUrl('http://h:1')).toBe('http://h:1/v1');
    expect(codexBaseUrl('http://h:1/v1/')).toBe('http://h:1/v1');
    expect(codexConfigToml({ baseUrl: 'http://h:1', envKey: 'MY_KEY' })).toContain('env_key = "MY_KEY"');
    expect(findDriver(defaultAdapterRegistry(), 'Codex')).toBe(codex);
  });
});
