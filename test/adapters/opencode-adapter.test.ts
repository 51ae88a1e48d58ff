import { driverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, statSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { foldTurn } from '../../src/adapters/fold.js';
import { defaultAdapterRegistry, findDriver } from '../../src/adapters/registry.js';
import { harnessHome } from '../../src/adapters/harness-home.js';
import { openCode, openCodeDriverClass, openCodeLine, readOpenCodeStore } from '../../src/adapters/opencode-adapter.js';
import { collect, fixtureLines, fixtureRun, startWith, terminals, testKey, truncated } from './fixture-replay.js';

const cli = 'opencode';
const options = { keyEnv: 'OPENAI_API_KEY', model: 'fake-model', baseUrl: 'http://127.0.0.1:9/v1', systemPrompt: 'ENVELOPE CONTRACT' };
const sessionOf = (name: string): string => String(fixtureLines(cli, name)[0]?.sessionID);
const stepTokens = (name: string): unknown[] =>
  fixtureLines(cli, name).filter((l) => l.type === 'step_finish').map((l) => (l.part as { tokens: unknown }).tokens);

describe('OpenCodeAdapter over recorded opencode 1.18.33 output', () => {
  it('plain answer: session id, envelope text, usage (input already excludes cached), no model', async () => {
    const adapter = driverSession(openCode);
    await startWith(adapter, [fixtureRun(cli, 'plain')], options);
    const events = await collect(adapter);
    const result = foldTurn(events);
    expect(result.text).toBe('{"step":"success","result":"hello"}');
    expect(result.sessionId).toBe(sessionOf('plain'));
    // Vendor said prompt_tokens 1500 with 300 cached; OpenCode reports input 1200, cache.read 300.
    expect(stepTokens('plain')).toEqual([{ total: 1515, input: 1200, output: 15, reasoning: 0, cache: { write: 0, read: 300 } }]);
    expect(result.usage).toEqual({ input: 1200, cacheRead: 300, cacheWrite: 0, output: 15, reasoning: 0 });
    // The JSON output never names the model.
    expect(result.model).toBeUndefined();
    expect(adapter.reportedModel).toBeUndefined();
    // No prices configured for the custom provider: OpenCode's 0 is not passed on as a cost.
    expect(result.costUsd).toBeUndefined();
    expect(terminals(events)).toHaveLength(1);
  });

  it('tool call: activity for the read, usage summed over both steps, only the last step text', async () => {
    const adapter = driverSession(openCode);
    await startWith(adapter, [fixtureRun(cli, 'tool-call')], options);
    const result = foldTurn(await collect(adapter));
    expect(result.activities.some((a) => a.startsWith('read'))).toBe(true);
    expect(result.text).toBe('{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}');
    expect(stepTokens('tool-call')).toHaveLength(2);
    expect(result.usage).toEqual({ input: 1700, cacheRead: 1500, cacheWrite: 0, output: 42, reasoning: 0 });
  });

  it('reports the step cost when the catalog gave prices', async () => {
    const adapter = driverSession(openCode);
    await startWith(adapter, [fixtureRun(cli, 'tool-call')], { ...options, extra: { settings: { cost: { input: 3, output: 15 } } } });
    expect(foldTurn(await collect(adapter)).costUsd).toBe(0);
  });

  it('reasoning tokens: reported apart from output (output 9, reasoning 100), as the normalised shape wants', async () => {
    const adapter = driverSession(openCode);
    await startWith(adapter, [fixtureRun(cli, 'reasoning')], options);
    expect(foldTurn(await collect(adapter)).usage).toEqual({ input: 200, output: 9, reasoning: 100, cacheRead: 0, cacheWrite: 0 });
  });

  it('a vendor fault after a good call: the good step was reported as it finished, so it counts', async () => {
    const adapter = driverSession(openCode);
    await startWith(adapter, [fixtureRun(cli, 'fault')], options);
    const events = await collect(adapter);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    expect(foldTurn(events).usage).toEqual({ input: 4000, output: 700, reasoning: 0, cacheRead: 0, cacheWrite: 0 });
  });

  it('turn 1 uses --title (no title model call), turn 2 continues it in a fork (--session ID --fork); config in the per-run home', async () => {
    const adapter = driverSession(openCode);
    const { executor, workspace } = await startWith(adapter, [fixtureRun(cli, 'tool-call'), fixtureRun(cli, 'resume')], options);
    await collect(adapter, 'first', 1);
    const second = foldTurn(await collect(adapter, 'second', 2));
    const [turn1, turn2] = executor.requests;
    expect(turn1?.argv).toEqual(['/opt/cli/bin/harness', 'run', '--format', 'json', '-m', 'durable/fake-model', '--title', 'durable-harness run-1']);
    expect(turn2?.argv.slice(-3)).toEqual(['--session', sessionOf('tool-call'), '--fork']);
    expect(turn2?.stdin).toBe('second');
    expect(second.resumed).toBe(true);
    expect(second.sessionId).toBe(sessionOf('resume'));
    expect(second.sessionId).not.toBe(sessionOf('tool-call'));
    expect(second.usage).toEqual({ input: 50, cacheRead: 1750, cacheWrite: 0, output: 9, reasoning: 0 });
    const home = path.join(workspace, '.home/opencode');
    expect(turn1?.env).toMatchObject({ OPENCODE_CONFIG: path.join(home, 'opencode.json'), OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_AUTOUPDATE: '1', XDG_DATA_HOME: path.join(home, 'data') });
    const config = JSON.parse(readFileSync(path.join(home, 'opencode.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({
      provider: { durable: { options: { baseURL: 'http://127.0.0.1:9/v1', apiKey: '{env:OPENAI_API_KEY}' } } },
      permission: { edit: 'allow', bash: 'allow', webfetch: 'deny' },
      instructions: [path.join(home, 'instructions.md')],
    });
    for (const request of executor.requests) expect(request.argv.join(' ')).not.toContain(testKey);
    for (const file of readdirSync(home, { recursive: true, withFileTypes: true }).filter((f) => f.isFile())) {
      expect(readFileSync(path.join(file.parentPath, file.name), 'utf8')).not.toContain(testKey);
    }
  });

  it('strict denies edit and bash in the config', async () => {
    const adapter = driverSession(openCode);
    const { workspace } = await startWith(adapter, [fixtureRun(cli, 'plain')], { ...options, posture: 'strict' });
    // The config is the turn's: written when the turn starts.
    for await (const event of adapter.runTurn({ prompt: 'x', turn: 1 })) void event;
    const config = JSON.parse(readFileSync(path.join(workspace, '.home/opencode/opencode.json'), 'utf8')) as { permission: unknown };
    expect(config.permission).toMatchObject({ edit: 'deny', bash: 'deny' });
  });

  it('an unknown session is a resume-failed error, and the next turn starts fresh', async () => {
    const adapter = driverSession(openCode);
    const { executor } = await startWith(adapter, [fixtureRun(cli, 'resume-missing'), fixtureRun(cli, 'plain')], {
      ...options,
      extra: { resumeSessionId: 'ses_000000000000unknownsession' },
    });
    expect(terminals(await collect(adapter))).toEqual([expect.objectContaining({ code: 'resume-failed', exitCode: 1 })]);
    await collect(adapter, 'again', 2);
    expect(executor.requests[1]?.argv).not.toContain('--session');
  });

  it('a vendor error is exactly one session-error', async () => {
    const adapter = driverSession(openCode);
    await startWith(adapter, [fixtureRun(cli, 'error')], options);
    const events = await collect(adapter);
    expect(terminals(events)).toHaveLength(1);
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'vendor-error', message: expect.stringContaining('API key not valid') });
  });

  it('garbage or truncated output still ends with exactly one terminal event', async () => {
    for (const run of [
      { lines: ['garbage', '{"type":"step_start"'], exitCode: 1, stderr: 'boom' },
      truncated(fixtureRun(cli, 'tool-call')),
      { lines: [], exitCode: 0 },
    ]) {
      const adapter = driverSession(openCode);
      await startWith(adapter, [run], options);
      const events = await collect(adapter);
      expect(terminals(events)).toHaveLength(1);
      expect(events.at(-1)?.type).toBe('session-error');
    }
    expect(openCodeLine.parse({ type: 'something_new' })).toMatchObject({ type: 'something_new' });
    expect(findDriver(defaultAdapterRegistry(), openCodeDriverClass)).toBe(openCode);
  });
});

describe("OpenCode's session store is read from a private copy (it lives in the harness-writable workspace)", () => {
  const homeOf = (workspace: string) => harnessHome({ hostWorkspacePath: workspace, workspacePath: '/workspace' } as HarnessSessionConfig, 'opencode')!;
  const message = (modelID: string, input: number) => JSON.stringify({ role: 'assistant', modelID, tokens: { input, output: 1, cache: { read: 0, write: 0 } } });

  function makeStore(file: string, rows: [string, number, string][]): Database.Database {
    mkdirSync(path.dirname(file), { recursive: true });
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    db.pragma('wal_autocheckpoint = 0'); // keep the rows in the log, as a running OpenCode may
    db.exec('CREATE TABLE message (session_id TEXT, time_created INTEGER, data TEXT)');
    const insert = db.prepare('INSERT INTO message VALUES (?, ?, ?)');
    for (const row of rows) insert.run(...row);
    return db;
  }

  it('reads committed rows that are still only in the write-ahead log, and leaves the store as it was', () => {
    const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-opencode-ws-'));
    const dir = path.join(workspace, '.home', 'opencode', 'data', 'opencode');
    const live = makeStore(path.join(dir, 'opencode.db'), [
      ['s1', 10, message('m-old', 1)],
      ['s1', 20, message('m-a', 100)],
      ['s1', 30, message('m-b', 200)],
      ['s2', 40, message('m-other', 7)],
    ]);
    try {
      expect(statSync(path.join(dir, 'opencode.db-wal')).size).toBeGreaterThan(0);
      const before = readdirSync(dir).sort();
      const rows = readOpenCodeStore(homeOf(workspace), 's1', 20);
      expect(rows.map((r) => [r.modelID, r.tokens?.input])).toEqual([['m-a', 100], ['m-b', 200]]);
      expect(readdirSync(dir).sort()).toEqual(before);
    } finally {
      live.close();
    }
  });

  it('a link planted as the store or its directory is refused, never opened (no read, no -shm beside its target)', () => {
    const outside = mkdtempSync(path.join(os.tmpdir(), 'dh-opencode-outside-'));
    makeStore(path.join(outside, 'opencode.db'), [['s1', 1, message('host-secret-model', 5)]]).close();
    const entriesOutside = readdirSync(outside).sort();
    for (const plant of ['file', 'directory'] as const) {
      const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-opencode-ws-'));
      const data = path.join(workspace, '.home', 'opencode', 'data');
      mkdirSync(plant === 'file' ? path.join(data, 'opencode') : data, { recursive: true });
      if (plant === 'file') symlinkSync(path.join(outside, 'opencode.db'), path.join(data, 'opencode', 'opencode.db'));
      else symlinkSync(outside, path.join(data, 'opencode'));
      expect(() => readOpenCodeStore(homeOf(workspace), 's1', 0), plant).toThrow(/symbolic link/);
    }
    expect(readdirSync(outside).sort()).toEqual(entriesOutside);
  });
});
