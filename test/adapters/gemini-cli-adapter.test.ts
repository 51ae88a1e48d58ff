import { driverSession } from '../support/driver-session.js';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultAdapterRegistry, findDriver } from '../../src/adapters/registry.js';
import { foldTurn } from '../../src/adapters/fold.js';
import { geminiCli, geminiCliDriverClass, geminiLine } from '../../src/adapters/gemini-cli-adapter.js';
import { collect, fixtureLines, fixtureRun, startWith, terminals, testKey, truncated } from './fixture-replay.js';

const cli = 'gemini';
const options = { keyEnv: 'GEMINI_API_KEY', model: 'gemini-2.5-flash', baseUrl: 'http://127.0.0.1:9', systemPrompt: 'ENVELOPE CONTRACT' };
const sessionOf = (name: string): string => String(fixtureLines(cli, name).find((l) => l.type === 'init')?.session_id);
const statsOf = (name: string): { input_tokens: number; cached: number; output_tokens: number } =>
  fixtureLines(cli, name).find((l) => l.type === 'result')?.stats as { input_tokens: number; cached: number; output_tokens: number };

describe('GeminiCliAdapter over recorded gemini 0.61.0 output', () => {
  it('plain answer: session, model, envelope text and usage with cached tokens taken out of input', async () => {
    const adapter = driverSession(geminiCli);
    await startWith(adapter, [fixtureRun(cli, 'plain')], options);
    const events = await collect(adapter);
    const result = foldTurn(events);
    const stats = statsOf('plain');
    expect(result.text).toBe('{"step":"success","result":"hello"}');
    expect(result.sessionId).toBe(sessionOf('plain'));
    expect(result.model).toBe('gemini-2.5-flash');
    expect(result.resumed).toBe(false);
    // Fixture: input_tokens 1500 INCLUDING 300 cached.
    expect(stats).toMatchObject({ input_tokens: 1500, cached: 300, output_tokens: 15 });
    // Gemini has no cache-write count: unknown, not zero. total_tokens = in + out, so reasoning is a known 0.
    expect(result.usage).toEqual({ input: 1200, cacheRead: 300, output: 15, reasoning: 0 });
    expect(result.usage.cacheWrite).toBeUndefined();
    expect(result.costUsd).toBeUndefined();
    expect(adapter.externalSessionId).toBe(sessionOf('plain'));
    expect(adapter.reportedModel).toBe('gemini-2.5-flash');
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)?.type).toBe('turn-complete');
  });

  it('tool call: reports the read as activity, keeps only the final message as the envelope, sums both model calls', async () => {
    const adapter = driverSession(geminiCli);
    await startWith(adapter, [fixtureRun(cli, 'tool-call')], options);
    const result = foldTurn(await collect(adapter));
    expect(result.activities.some((a) => a.startsWith('read_file'))).toBe(true);
    expect(result.text).toBe('{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}');
    // Two calls: 1500 + (200 + 1500 cached) = 3200 prompt tokens, 1500 cached.
    expect(statsOf('tool-call')).toMatchObject({ input_tokens: 3200, cached: 1500, output_tokens: 42 });
    expect(result.usage).toEqual({ input: 1700, cacheRead: 1500, output: 42, reasoning: 0 });
  });

  it('thinking tokens: missing from output_tokens but in total_tokens, so reasoning = total − input − output', async () => {
    const adapter = driverSession(geminiCli);
    await startWith(adapter, [fixtureRun(cli, 'reasoning')], options);
    const result = foldTurn(await collect(adapter));
    // Served: 200 in, 9 out, 100 thoughts; recorded stats: total 309, input 200, output 9.
    expect(fixtureLines(cli, 'reasoning').find((l) => l.type === 'result')?.stats).toMatchObject({ total_tokens: 309, input_tokens: 200, output_tokens: 9 });
    expect(result.usage).toEqual({ input: 200, output: 9, reasoning: 100, cacheRead: 0 });
  });

  it('a vendor fault after a good call: the result (status error) still counts the good call', async () => {
    const adapter = driverSession(geminiCli);
    await startWith(adapter, [fixtureRun(cli, 'fault')], options);
    const events = await collect(adapter);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    expect(foldTurn(events).usage).toEqual({ input: 4000, output: 700, cacheRead: 0, reasoning: 0 });
  });

  it('loop detection: the call it cut off is missing from the stats, so one call of unknown usage is added', async () => {
    const adapter = driverSession(geminiCli);
    await startWith(adapter, [fixtureRun(cli, 'loop')], options);
    const events = await collect(adapter);
    const lines = fixtureLines(cli, 'loop');
    expect(lines.some((l) => l.type === 'error' && /Loop detected/.test(String(l.message)))).toBe(true);
    const toolCalls = lines.filter((l) => l.type === 'tool_use').length;
    const stats = lines.find((l) => l.type === 'result')?.stats as { input_tokens: number; tool_calls: number };
    // Recorded: 5 calls served (100 in each), the stats count one fewer.
    expect(stats.input_tokens).toBe(100 * toolCalls);
    const usage = events.filter((e) => e.type === 'usage').map((e) => (e as { usage: unknown }).usage);
    expect(usage).toEqual([{ input: 100 * toolCalls, output: 10 * toolCalls, cacheRead: 0, reasoning: 0 }, {}]);
    expect(foldTurn(events).unknownUsageEvents).toBe(1);
  });

  it('all-zero stats after the model answered (loop detection) are unknown usage, not zero tokens', async () => {
    const lines = fixtureRun(cli, 'tool-call').lines!.slice(0, -1);
    const zero = { total_tokens: 0, input_tokens: 0, output_tokens: 0, cached: 0, input: 0, duration_ms: 5, tool_calls: 1, models: {} };
    const adapter = driverSession(geminiCli);
    await startWith(
      adapter,
      [{ lines: [...lines, JSON.stringify({ type: 'error', severity: 'warning', message: 'Loop detected, stopping execution' }), JSON.stringify({ type: 'result', status: 'success', stats: zero })] }],
      options,
    );
    const events = await collect(adapter);
    const usage = events.filter((e) => e.type === 'usage');
    expect(usage).toEqual([{ type: 'usage', usage: {} }]);
    expect(foldTurn(events).unknownUsageEvents).toBe(1);
    // A vendor refusal before any answer really costs nothing: its zero stats stay a count.
    const refused = driverSession(geminiCli);
    await startWith(refused, [fixtureRun(cli, 'error')], options);
    expect(foldTurn(await collect(refused)).usage).toEqual({ input: 0, output: 0, cacheRead: 0, reasoning: 0 });
  });

  it('turn 1 starts a session; turn 2 resumes it with --resume and reports resumed', async () => {
    const adapter = driverSession(geminiCli);
    const { executor, workspace } = await startWith(adapter, [fixtureRun(cli, 'tool-call'), fixtureRun(cli, 'resume')], options);
    await collect(adapter, 'first', 1);
    expect(adapter.resumed).toBe(false);
    const second = foldTurn(await collect(adapter, 'second', 2));
    const [turn1, turn2] = executor.requests;
    expect(turn1?.argv).toEqual(['/opt/cli/bin/harness', '-p', '', '--output-format', 'stream-json', '--skip-trust', '--approval-mode', 'auto_edit', '-m', 'gemini-2.5-flash']);
    expect(turn2?.argv.slice(-2)).toEqual(['--resume', sessionOf('tool-call')]);
    expect(turn1?.stdin).toBe('first');
    expect(second.resumed).toBe(true);
    expect(adapter.resumed).toBe(true);
    expect(second.text).toBe('{"step":"success","result":"PELICAN"}');
    expect(second.usage).toEqual({ input: 50, cacheRead: 1750, output: 9, reasoning: 0 });
    // Config in the per-run home; the key only in env.
    const home = path.join(workspace, '.home/gemini');
    expect(turn1?.env).toMatchObject({ HOME: home, GOOGLE_GEMINI_BASE_URL: 'http://127.0.0.1:9', GEMINI_API_KEY: testKey, GEMINI_SYSTEM_MD: path.join(home, 'system.md') });
    const settings = JSON.parse(readFileSync(path.join(home, '.gemini/settings.json'), 'utf8')) as Record<string, unknown>;
    expect(settings).toMatchObject({ security: { auth: { selectedType: 'gemini-api-key' } }, telemetry: { enabled: false }, privacy: { usageStatisticsEnabled: false } });
    expect(readFileSync(path.join(home, 'system.md'), 'utf8')).toContain('ENVELOPE CONTRACT');
    for (const request of executor.requests) expect(request.argv.join(' ')).not.toContain(testKey);
    for (const file of readdirSync(home, { recursive: true, withFileTypes: true }).filter((f) => f.isFile())) {
      expect(readFileSync(path.join(file.parentPath, file.name), 'utf8')).not.toContain(testKey);
    }
  });

  it('an unknown session is a resume-failed error, and the next turn starts fresh', async () => {
    const adapter = driverSession(geminiCli);
    const { executor } = await startWith(adapter, [fixtureRun(cli, 'resume-missing'), fixtureRun(cli, 'plain')], {
      ...options,
      extra: { resumeSessionId: '00000000-0000-4000-8000-000000000000' },
    });
    const events = await collect(adapter);
    expect(terminals(events)).toEqual([expect.objectContaining({ type: 'session-error', code: 'resume-failed', exitCode: 42 })]);
    await collect(adapter, 'again', 2);
    expect(executor.requests[1]?.argv).not.toContain('--resume');
    expect(adapter.externalSessionId).toBe(sessionOf('plain'));
  });

  it('a vendor error is exactly one session-error', async () => {
    const adapter = driverSession(geminiCli);
    await startWith(adapter, [fixtureRun(cli, 'error')], options);
    const events = await collect(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error', message: expect.stringContaining('API key not valid') });
  });

  it('garbage or truncated output still ends with exactly one terminal event', async () => {
    for (const run of [
      { lines: ['not json at all', '{"type":"init"'], exitCode: 1, stderr: 'boom' },
      truncated(fixtureRun(cli, 'plain')),
      { lines: [], exitCode: 0 },
    ]) {
      const adapter = driverSession(geminiCli);
      await startWith(adapter, [run], options);
      const events = await collect(adapter);
      expect(terminals(events)).toHaveLength(1);
      expect(events.at(-1)?.type).toBe('session-error');
    }
  });

  it('maps postures to --approval-mode and parses unknown line types to the catch-all', async () => {
    expect(driverSession(geminiCli).applyPermissionPolicy('strict')).toMatchObject({ enforced: true });
    const adapter = driverSession(geminiCli);
    const { executor } = await startWith(adapter, [fixtureRun(cli, 'plain')], { ...options, posture: 'dangerous' });
    await collect(adapter);
    expect(executor.requests[0]?.argv).toContain('yolo');
    expect(geminiLine.parse({ type: 'brand_new_event', x: 1 })).toMatchObject({ type: 'brand_new_event' });
    expect(findDriver(defaultAdapterRegistry(), geminiCliDriverClass)).toBe(geminiCli);
  });
});
