import { driverSession } from '../support/driver-session.js';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { foldTurn } from '../../src/adapters/fold.js';
import { defaultAdapterRegistry, findDriver } from '../../src/adapters/registry.js';
import { pi, piDriverClass, piLine } from '../../src/adapters/pi-adapter.js';
import { collect, fixtureLines, fixtureRun, startWith, terminals, testKey, truncated } from './fixture-replay.js';

const cli = 'pi';
const options = { keyEnv: 'OPENAI_API_KEY', model: 'fake-model', baseUrl: 'http://127.0.0.1:9/v1', systemPrompt: 'ENVELOPE CONTRACT' };
const sessionOf = (name: string): string => String(fixtureLines(cli, name)[0]?.id);
const assistantUsage = (name: string): unknown[] =>
  fixtureLines(cli, name)
    .filter((l) => l.type === 'message_end' && (l.message as { role: string }).role === 'assistant')
    .map((l) => (l.message as { usage: { input: number; output: number; cacheRead: number; cacheWrite: number } }).usage)
    .map(({ input, output, cacheRead, cacheWrite }) => ({ input, output, cacheRead, cacheWrite }));

describe('PiAdapter over recorded pi 0.73.1 output', () => {
  it('plain answer: session id, model, envelope text, usage (input already excludes cached)', async () => {
    const adapter = driverSession(pi);
    await startWith(adapter, [fixtureRun(cli, 'plain')], options);
    const events = await collect(adapter);
    const result = foldTurn(events);
    expect(result.text).toBe('{"step":"success","result":"hello"}');
    expect(result.sessionId).toBe(sessionOf('plain'));
    expect(result.model).toBe('fake-model');
    // Vendor said prompt_tokens 1500 with 300 cached; pi reports input 1200, cacheRead 300.
    expect(assistantUsage('plain')).toEqual([{ input: 1200, output: 15, cacheRead: 300, cacheWrite: 0 }]);
    expect(result.usage).toEqual({ input: 1200, cacheRead: 300, cacheWrite: 0, output: 15 });
    expect(result.costUsd).toBeUndefined();
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)?.type).toBe('turn-complete');
  });

  it('tool call: activity for the read, usage summed over both model calls, the final message as the envelope', async () => {
    const adapter = driverSession(pi);
    await startWith(adapter, [fixtureRun(cli, 'tool-call')], options);
    const result = foldTurn(await collect(adapter));
    expect(result.activities.some((a) => a.startsWith('read'))).toBe(true);
    expect(result.text).toBe('{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}');
    expect(assistantUsage('tool-call')).toHaveLength(2);
    expect(result.usage).toEqual({ input: 1700, cacheRead: 1500, cacheWrite: 0, output: 42 });
  });

  it("reports pi's computed cost only when the catalog gave prices", async () => {
    const adapter = driverSession(pi);
    const { workspace } = await startWith(adapter, [fixtureRun(cli, 'plain')], { ...options, extra: { settings: { cost: { input: 3, output: 15 } } } });
    expect(foldTurn(await collect(adapter)).costUsd).toBe(0);
    const models = JSON.parse(readFileSync(path.join(workspace, '.home/pi/agent/models.json'), 'utf8')) as { providers: { durable: { models: unknown[] } } };
    expect(models.providers.durable.models[0]).toMatchObject({ id: 'fake-model', cost: { input: 3, output: 15 } });
  });

  it('reasoning tokens: pi folds them into output (the completions count); the total is exact, reasoning unknown', async () => {
    const adapter = driverSession(pi);
    await startWith(adapter, [fixtureRun(cli, 'reasoning')], options);
    expect(foldTurn(await collect(adapter)).usage).toEqual({ input: 200, output: 109, cacheRead: 0, cacheWrite: 0 });
  });

  it('a vendor fault after a good call: the good call was reported at its message_end, so it counts', async () => {
    const adapter = driverSession(pi);
    await startWith(adapter, [fixtureRun(cli, 'fault')], options);
    const events = await collect(adapter);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    expect(foldTurn(events).usage).toEqual({ input: 4000, output: 700, cacheRead: 0, cacheWrite: 0 });
  });

  it('turn 2 continues turn 1 in a fork (--fork ID); system prompt by file; config and key handling', async () => {
    const adapter = driverSession(pi);
    const { executor, workspace } = await startWith(adapter, [fixtureRun(cli, 'tool-call'), fixtureRun(cli, 'resume')], options);
    await collect(adapter, 'first', 1);
    expect(adapter.resumed).toBe(false);
    const second = foldTurn(await collect(adapter, 'second', 2));
    const [turn1, turn2] = executor.requests;
    const home = path.join(workspace, '.home/pi');
    expect(turn1?.argv).toEqual([
      '/opt/cli/bin/harness', '-p', '--mode', 'json', '--provider', 'durable', '--model', 'fake-model',
      '--append-system-prompt', path.join(home, 'system-prompt.md'),
    ]);
    expect(turn2?.argv).not.toContain('--session');
    expect(turn2?.argv[turn2.argv.indexOf('--fork') + 1]).toBe(sessionOf('tool-call'));
    expect(turn2?.stdin).toBe('second');
    expect(second.resumed).toBe(true);
    expect(second.sessionId).toBe(sessionOf('resume'));
    expect(second.sessionId).not.toBe(sessionOf('tool-call'));
    expect(second.usage).toEqual({ input: 50, cacheRead: 1750, cacheWrite: 0, output: 9 });
    expect(turn1?.env).toMatchObject({ HOME: home, PI_CODING_AGENT_DIR: path.join(home, 'agent'), PI_OFFLINE: '1', OPENAI_API_KEY: testKey });
    const models = JSON.parse(readFileSync(path.join(home, 'agent/models.json'), 'utf8')) as Record<string, unknown>;
    expect(models).toMatchObject({ providers: { durable: { baseUrl: 'http://127.0.0.1:9/v1', api: 'openai-completions', apiKey: 'OPENAI_API_KEY' } } });
    expect(readFileSync(path.join(home, 'system-prompt.md'), 'utf8')).toContain('ENVELOPE CONTRACT');
    for (const request of executor.requests) expect(request.argv.join(' ')).not.toContain(testKey);
    for (const file of readdirSync(home, { recursive: true, withFileTypes: true }).filter((f) => f.isFile())) {
      expect(readFileSync(path.join(file.parentPath, file.name), 'utf8')).not.toContain(testKey);
    }
  });

  it('strict is enforced by the gate in RPC mode; a turn without a gate is narrowed to read-only tools', async () => {
    const adapter = driverSession(pi);
    expect(adapter.applyPermissionPolicy('strict')).toMatchObject({ posture: 'strict', enforced: true, note: expect.stringContaining('not enforced') as unknown });
    const { executor } = await startWith(adapter, [fixtureRun(cli, 'plain')], { ...options, posture: 'strict' });
    await collect(adapter);
    expect(executor.requests[0]?.argv.slice(-2)).toEqual(['--tools', 'read,grep,find,ls']);
  });

  it('an unknown session is a resume-failed error, and the next turn starts fresh', async () => {
    const adapter = driverSession(pi);
    const { executor } = await startWith(adapter, [fixtureRun(cli, 'resume-missing'), fixtureRun(cli, 'plain')], {
      ...options,
      extra: { resumeSessionId: '00000000-0000-4000-8000-000000000000' },
    });
    expect(terminals(await collect(adapter))).toEqual([expect.objectContaining({ code: 'resume-failed', exitCode: 1 })]);
    await collect(adapter, 'again', 2);
    expect(executor.requests[1]?.argv).not.toContain('--session');
  });

  it('a vendor error (exit code 0, stopReason "error") is exactly one session-error', async () => {
    const adapter = driverSession(pi);
    await startWith(adapter, [fixtureRun(cli, 'error')], options);
    expect(fixtureRun(cli, 'error').exitCode).toBe(0);
    const events = await collect(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error', message: '400 API key not valid (fake vendor)' });
  });

  it('garbage or truncated output still ends with exactly one terminal event', async () => {
    for (const run of [
      { lines: ['garbage', '{"type":"session"'], exitCode: 1, stderr: 'boom' },
      truncated(fixtureRun(cli, 'tool-call')),
      { lines: [], exitCode: 0 },
    ]) {
      const adapter = driverSession(pi);
      await startWith(adapter, [run], options);
      const events = await collect(adapter);
      expect(terminals(events)).toHaveLength(1);
      expect(events.at(-1)?.type).toBe('session-error');
    }
    expect(piLine.parse({ type: 'compaction_start', reason: 'threshold' })).toMatchObject({ type: 'compaction_start' });
    expect(findDriver(defaultAdapterRegistry(), piDriverClass)).toBe(pi);
  });
});
