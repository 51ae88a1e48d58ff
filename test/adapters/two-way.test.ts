/**
 * The five CLI adapters' two-way (permission) modes over conversations recorded from the real pinned binaries
 * (test/fixtures/<cli>/two-way/, recorded by test/fixtures/record-two-way.ts). The replay only prints a line
 * once the adapter has written what the CLI had received by then, so every answer must really be written.
 */
import type { DriverSession, HarnessSessionConfig } from '../support/driver-session.js';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { harnessHome } from '../../src/adapters/harness-home.js';
import type { HarnessEvent } from '../../src/adapters/types.js';
import type { PermissionAnswer } from '../../src/permissions/types.js';
import { addUsage, noUsage } from '../../src/contracts/usage.js';
import { cliNames, type CliName } from '../e2e/fake-vendor/tool-calls.js';
import { cliProfiles, missingSessionIds, ScriptedGate } from '../e2e/support/two-way.js';
import { byMethodOrder, ReplayExecutor, twoWayFixture, type TwoWayFixture } from './two-way-replay.js';

const systemPrompt = 'End every turn with one JSON object: the next-step envelope.';

interface Replayed {
  readonly events: HarnessEvent[];
  readonly gate: ScriptedGate;
  readonly written: string[];
  readonly expectedWrites: string[];
  readonly fixture: TwoWayFixture;
  readonly adapter: DriverSession;
  readonly executor: ReplayExecutor;
}

async function replay(cli: CliName, name: string, resumeSessionId?: string): Promise<Replayed> {
  const fixture = twoWayFixture(cli, name);
  const workspace = mkdtempSync(path.join(os.tmpdir(), `dh-two-way-${cli}-`));
  const executor = new ReplayExecutor([fixture]);
  const profile = cliProfiles[cli];
  const adapter = profile.create();
  adapter.applyPermissionPolicy('strict');
  adapter.setSystemPrompt(systemPrompt);
  await adapter.start({
    runId: `two-way-${cli}`,
    harnessName: cli,
    executable: `/opt/${cli}/bin/${cli}`,
    baseArgs: [],
    model: profile.model,
    workspacePath: workspace,
    hostWorkspacePath: workspace,
    env: { [profile.keyEnv]: 'sk-test' },
    executor,
    baseUrl: 'http://127.0.0.1:9/v1',
    turnTimeoutMs: 20_000,
    ...(profile.settings ? { settings: profile.settings } : {}),
    ...(resumeSessionId ? { resumeSessionId } : {}),
  });
  const gate = new ScriptedGate(fixture.meta.gate.answers as unknown as PermissionAnswer[]);
  const events: HarnessEvent[] = [];
  for await (const event of adapter.runTurn({ prompt: promptOf(name), turn: resumeSessionId ? 2 : 1, gate })) events.push(event);
  await adapter.end();
  // Paths the adapter writes come from its own config (this workspace) or echo the CLI's lines (the recorded one).
  const normal = (line: string) => line.replaceAll(fixture.meta.workspace, '$WORKSPACE').replaceAll(workspace, '$WORKSPACE');
  const written = byMethodOrder(executor.processes[0]!.written).map(normal);
  const expectedWrites = byMethodOrder(fixture.writes.map((w) => w.line)).map(normal);
  return { events, gate, written, expectedWrites, fixture, adapter, executor };
}

function promptOf(name: string): string {
  return { allow: 'Run touch ran.txt, then write out.txt.', deny: 'Run touch ran.txt, then write out.txt.', edit: 'Run touch ran.txt.', resume: 'Finish.', 'resume-missing': 'Continue.', error: 'This will fail.' }[name]!;
}

const of = <T extends HarnessEvent['type']>(events: HarnessEvent[], type: T) => events.filter((e): e is Extract<HarnessEvent, { type: T }> => e.type === type);
/** Input, output and cache reads over the turn's usage events (unknown fields stay undefined). */
const usageSum = (events: readonly Extract<HarnessEvent, { type: 'usage' }>[]) => {
  const u = events.reduce((sum, e) => addUsage(sum, e.usage), noUsage);
  return { input: u.input, output: u.output, cacheRead: u.cacheRead };
};
const terminal = (events: HarnessEvent[]) => events.at(-1)!;

describe.each(cliNames.map((cli) => ({ cli })))('$cli two-way mode (recorded from the real binary)', ({ cli }) => {
  const profile = cliProfiles[cli];

  it('allowed: asks for the shell command and the file write, writes each answer, and reports session, usage and the envelope', async () => {
    const r = await replay(cli, 'allow');
    expect(r.written).toEqual(r.expectedWrites);
    expect(r.executor.requests[0]!.keepStdinOpen).toBe(true);
    const asked = r.gate.asked;
    expect(asked.map((a) => a.kind)).toEqual(['command', 'edit']);
    expect(asked[0]!.command).toBe('touch ran.txt');
    expect(asked[1]!.paths?.some((p) => p.endsWith('out.txt'))).toBe(true);
    expect(of(r.events, 'permission-decision').map((d) => d.decision)).toEqual(['allow', 'allow']);
    expect(terminal(r.events)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"done"}' });
    expect(r.adapter.externalSessionId).toBe((r.fixture.meta.events.find((e) => e.type === 'session') as { sessionId: string }).sessionId);
    // What the real binary did: both tools ran.
    expect(r.fixture.meta.files).toMatchObject({ 'ran.txt': true, 'out.txt': true });
    if (cli === 'opencode') {
      // The ACP result only has the last call; the store (read live, not replayable) has all three.
      expect(usageSum(of(r.events, 'usage'))).toEqual({ input: 300, output: 30, cacheRead: undefined }); // no cache count there: unknown
      expect(of(r.events, 'activity').some((a) => /session store was not readable/.test(a.description))).toBe(true);
    } else {
      // Three model calls: 100+200+300 input (gemini counts the 20 cached tokens as input: it has no split, so its
      // cache reads are unknown, not zero).
      expect(usageSum(of(r.events, 'usage'))).toEqual(cli === 'gemini' ? { input: 620, output: 60, cacheRead: undefined } : { input: 600, output: 60, cacheRead: 20 });
    }
    if (cli !== 'opencode') expect(r.adapter.reportedModel).toBe(profile.model);
  });

  it('resumed: the second turn continues the session in the two-way mode, in a fork where the CLI has one', async () => {
    const first = twoWayFixture(cli, 'allow').meta.events.find((e) => e.type === 'session') as { sessionId: string };
    const r = await replay(cli, 'resume', first.sessionId);
    expect(r.written).toEqual(r.expectedWrites);
    expect(terminal(r.events)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"resumed"}' });
    if (cli === 'gemini') {
      // No fork in gemini: the session itself continues (a retried attempt would find its prompt there).
      expect(r.adapter.externalSessionId).toBe(first.sessionId);
    } else {
      // A branch with a new id (claude --fork-session, codex thread/fork, opencode session/fork, pi --fork); the
      // original stays as it was for a retried attempt to fork again.
      expect(r.adapter.externalSessionId).toBeDefined();
      expect(r.adapter.externalSessionId).not.toBe(first.sessionId);
      expect(r.written.join('\n') + r.executor.requests[0]!.argv.join(' ')).toMatch(/thread\/fork|session\/fork|--fork-session|--fork /);
    }
    expect(r.adapter.resumed).toBe(true);
    if (cli !== 'opencode') expect(usageSum(of(r.events, 'usage'))).toEqual(cli === 'gemini' ? { input: 650, output: 5, cacheRead: undefined } : { input: 50, output: 5, cacheRead: 600 });
  });

  it('denied: neither tool runs, and the model learns why (natively or in a follow-up prompt)', async () => {
    const r = await replay(cli, 'deny');
    expect(r.written).toEqual(r.expectedWrites);
    expect(of(r.events, 'permission-decision').map((d) => [d.decision, d.message])).toEqual([
      ['deny', 'The operator said no.'],
      ['deny', 'The operator said no.'],
    ]);
    expect(r.fixture.meta.files).toEqual({ 'ran.txt': false, 'edited.txt': false, 'out.txt': false });
    const followUps = r.written.filter((l) => l.includes('Permission decisions on your last tool requests'));
    if (profile.nativeDenyMessage) {
      expect(followUps).toEqual([]);
      expect(r.written.some((l) => l.includes('The operator said no.'))).toBe(true);
    } else {
      expect(followUps.length).toBeGreaterThan(0);
      expect(followUps.join('\n')).toContain('was denied: The operator said no.');
    }
    expect(terminal(r.events).type).toBe('turn-complete');
  });

  it('edited: the edited command runs instead of the asked one', async () => {
    const r = await replay(cli, 'edit');
    expect(r.written).toEqual(r.expectedWrites);
    expect(r.fixture.meta.files).toEqual({ 'ran.txt': false, 'edited.txt': true, 'out.txt': false });
    expect(of(r.events, 'permission-decision')[0]).toMatchObject({ decision: 'allow', edited: true });
    if (profile.nativeEdit) {
      // The CLI takes the edited input in its answer.
      expect(r.gate.asked.map((a) => a.command)).toEqual(['touch ran.txt']);
      expect(r.written.some((l) => l.includes('touch edited.txt'))).toBe(true);
    } else {
      // Emulated: the original is refused, the model is told the edit, asks again with it, and that is allowed.
      expect(r.gate.asked.map((a) => a.command)).toEqual(['touch ran.txt', 'touch edited.txt']);
      expect(r.written.find((l) => l.includes('Permission decisions on your last tool requests'))).toContain('touch edited.txt');
    }
    expect(terminal(r.events)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"edited ran"}' });
  });

  it('a session the CLI does not know ends the turn with resume-failed, and the next turn would start fresh', async () => {
    const r = await replay(cli, 'resume-missing', missingSessionIds[cli]);
    expect(r.written).toEqual(r.expectedWrites);
    expect(terminal(r.events)).toMatchObject({ type: 'session-error', code: 'resume-failed' });
    expect((terminal(r.events) as { message: string }).message).toContain(missingSessionIds[cli]);
  });

  it('a vendor error ends the turn with one session-error', async () => {
    const r = await replay(cli, 'error');
    expect(r.written).toEqual(r.expectedWrites);
    const last = terminal(r.events);
    expect(last).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    expect((last as { message: string }).message).toMatch(/API key not valid/);
    expect(r.events.filter((e) => e.type === 'turn-complete' || e.type === 'session-error')).toHaveLength(1);
  });
});

describe('keepChatFiles (gemini 0.61.0 wipes a session loaded in the minute it was written)', () => {
  const geminiHome = (workspace: string) => harnessHome({ hostWorkspacePath: workspace, workspacePath: '/workspace' } as HarnessSessionConfig, 'gemini')!;
  const sessionId = 'b545a306-933c-4714-a1e7-ba8d3ce8c231';
  /** A fresh workspace whose gemini home has one project's chats directory. */
  const chatsIn = () => {
    const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-gemini-ws-'));
    const chats = path.join(workspace, '.home', 'gemini', '.gemini', 'tmp', 'ws', 'chats');
    mkdirSync(chats, { recursive: true });
    return { workspace, chats };
  };

  it('leaves one file of the session in gemini\'s sight: the conversation, under a name gemini never generates', async () => {
    const { keepChatFiles } = await import('../../src/adapters/gemini-cli-adapter.js');
    const { workspace, chats } = chatsIn();
    writeFileSync(path.join(chats, 'session-2026-12-01T03-06-b545a306.jsonl'), 'the whole conversation\n'.repeat(20));
    writeFileSync(path.join(chats, 'session-2026-12-01T03-07-9b1f014e.jsonl'), 'another session\n'.repeat(50));
    keepChatFiles(geminiHome(workspace), sessionId);
    expect(readdirSync(chats).sort()).toEqual(['session-2026-12-01T03-06-kept-b545a306.jsonl', 'session-2026-12-01T03-07-9b1f014e.jsonl']);
    keepChatFiles(geminiHome(workspace), sessionId); // a second load: nothing left to do
    expect(readdirSync(chats).sort()).toEqual(['session-2026-12-01T03-06-kept-b545a306.jsonl', 'session-2026-12-01T03-07-9b1f014e.jsonl']);
    keepChatFiles(geminiHome(path.join(workspace, 'nowhere')), 'b545a306'); // no workspace or gemini home yet: nothing to do
  });

  it('never walks or renames through a link the harness planted in the home (the home is in the workspace)', async () => {
    const { keepChatFiles } = await import('../../src/adapters/gemini-cli-adapter.js');
    const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-gemini-ws-'));
    const outside = mkdtempSync(path.join(os.tmpdir(), 'dh-gemini-outside-'));
    const victim = 'session-2026-12-01T03-06-b545a306.jsonl';
    mkdirSync(path.join(outside, 'ws', 'chats'), { recursive: true });
    writeFileSync(path.join(outside, 'ws', 'chats', victim), '{}\n');
    writeFileSync(path.join(outside, victim), '{}\n');
    const tmp = path.join(workspace, '.home', 'gemini', '.gemini', 'tmp');
    mkdirSync(path.join(tmp, 'real', 'chats'), { recursive: true });
    // A link as the whole tmp directory, as a project, as a chats directory, and as a chat file.
    symlinkSync(outside, path.join(tmp, 'linked-project'));
    mkdirSync(path.join(tmp, 'linked-chats'));
    symlinkSync(path.join(outside, 'ws', 'chats'), path.join(tmp, 'linked-chats', 'chats'));
    symlinkSync(path.join(outside, victim), path.join(tmp, 'real', 'chats', 'session-2026-12-01T03-05-b545a306.jsonl'));
    keepChatFiles(geminiHome(workspace), sessionId);
    expect(readdirSync(path.join(outside, 'ws', 'chats'))).toEqual([victim]);
    expect(readdirSync(path.join(tmp, 'real', 'chats'))).toEqual(['session-2026-12-01T03-05-b545a306.jsonl']);

    const planted = mkdtempSync(path.join(os.tmpdir(), 'dh-gemini-ws-'));
    mkdirSync(path.join(planted, '.home', 'gemini', '.gemini'), { recursive: true });
    symlinkSync(outside, path.join(planted, '.home', 'gemini', '.gemini', 'tmp'));
    keepChatFiles(geminiHome(planted), sessionId);
    expect(readdirSync(path.join(outside, 'ws', 'chats'))).toEqual([victim]);
  });

  it("a second load in the same minute (a retried attempt) never lets gemini's fresh recording replace the kept conversation", async () => {
    const { keepChatFiles } = await import('../../src/adapters/gemini-cli-adapter.js');
    const { workspace, chats } = chatsIn();
    // The first load kept the conversation (gemini appended the failed attempt to it) and left a fresh recording.
    writeFileSync(path.join(chats, 'session-2026-12-01T03-06-kept-b545a306.jsonl'), 'the whole conversation\n'.repeat(20));
    writeFileSync(path.join(chats, 'session-2026-12-01T03-06-b545a306.jsonl'), 'context only\n');
    keepChatFiles(geminiHome(workspace), sessionId);
    // The fresh recording is renamed out of gemini's reach (no session file name), never over the conversation.
    expect(readdirSync(chats).sort()).toEqual([expect.stringMatching(/^session-2026-12-01T03-06-kept-b545a306\.jsonl$/), expect.stringMatching(/^superseded-\d+-0-session-2026-12-01T03-06-b545a306\.jsonl\.aside$/)]);
    expect(readFileSync(path.join(chats, 'session-2026-12-01T03-06-kept-b545a306.jsonl'), 'utf8')).toContain('the whole conversation');
  });

  it('a retry in a later minute than the conversation loads the conversation, not the fresh recording the failed attempt left', async () => {
    const { keepChatFiles } = await import('../../src/adapters/gemini-cli-adapter.js');
    const { workspace, chats } = chatsIn();
    // Turn 1 at 03:06; the failed attempt loaded it at 03:07, appended to the kept file and left a fresh recording
    // of the session under 03:07's name (measured with gemini 0.61.0). Its retry at 03:07 must find one file only.
    writeFileSync(path.join(chats, 'session-2026-12-01T03-06-kept-b545a306.jsonl'), 'the whole conversation\n'.repeat(20));
    writeFileSync(path.join(chats, 'session-2026-12-01T03-07-b545a306.jsonl'), 'context only\n');
    keepChatFiles(geminiHome(workspace), sessionId);
    const visible = readdirSync(chats).filter((f) => f.startsWith('session-'));
    expect(visible).toEqual(['session-2026-12-01T03-06-kept-b545a306.jsonl']);
    expect(readdirSync(chats).filter((f) => f.endsWith('.aside'))).toEqual([expect.stringMatching(/^superseded-\d+-0-session-2026-12-01T03-07-b545a306\.jsonl\.aside$/)]);
  });
  it('a conversation larger than a workspace read (16 MiB) is still the one kept: sizes are taken without reading', async () => {
    const { keepChatFiles } = await import('../../src/adapters/gemini-cli-adapter.js');
    const { maxReadBytes } = await import('../../src/sandbox/workspace-fs.js');
    const { workspace, chats } = chatsIn();
    writeFileSync(path.join(chats, 'session-2026-12-01T03-06-kept-b545a306.jsonl'), Buffer.alloc(maxReadBytes + 1024, 'x'));
    writeFileSync(path.join(chats, 'session-2026-12-01T03-07-b545a306.jsonl'), 'context only\n');
    keepChatFiles(geminiHome(workspace), sessionId);
    expect(readdirSync(chats).filter((f) => f.startsWith('session-'))).toEqual(['session-2026-12-01T03-06-kept-b545a306.jsonl']);
  });
});

describe("gemini's two-way usage comes from its chat file (the ACP quota misses thinking tokens)", () => {
  it('reads the gemini messages of the session since the prompt started, once each, with thoughts as reasoning', async () => {
    const { geminiChatUsage, readGeminiChatCalls } = await import('../../src/adapters/gemini-cli-adapter.js');
    const { mkdirSync, writeFileSync } = await import('node:fs');
    const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-gemini-chat-'));
    const home = harnessHome({ hostWorkspacePath: workspace, workspacePath: '/workspace' } as HarnessSessionConfig, 'gemini')!;
    const chats = path.join(workspace, '.home', 'gemini', '.gemini', 'tmp', 'ws', 'chats');
    mkdirSync(chats, { recursive: true });
    const msg = (id: string, at: string, tokens: Record<string, number>) => JSON.stringify({ id, timestamp: at, type: 'gemini', content: 'x', tokens, model: 'gemini-2.5-flash' });
    const old = msg('m0', '2026-12-01T05:00:00.000Z', { input: 50, output: 1 });
    const call1 = msg('m1', '2026-12-01T05:10:00.000Z', { input: 220, output: 9, cached: 20, thoughts: 100, tool: 0, total: 329 });
    const call2 = msg('m2', '2026-12-01T05:10:01.000Z', { input: 300, output: 5, cached: 0, thoughts: 0, tool: 7 });
    const head = (id: string) => JSON.stringify({ sessionId: id, kind: 'main' });
    writeFileSync(path.join(chats, 'session-2026-12-01T05-00-kept-s1.jsonl'), [head('s1'), old, call1, '{"$set":{"lastUpdated":"x"}}', ''].join('\n'));
    writeFileSync(path.join(chats, 'session-2026-12-01T05-10-s1.jsonl'), [head('s1'), call1, call2, ''].join('\n'));
    writeFileSync(path.join(chats, 'session-2026-12-01T05-10-other.jsonl'), [head('other'), msg('o1', '2026-12-01T05:10:00.000Z', { input: 999, output: 9 }), ''].join('\n'));
    const calls = readGeminiChatCalls(home, 's1', Date.parse('2026-12-01T05:05:00.000Z'));
    expect(calls.map((c) => c.id)).toEqual(['m1', 'm2']);
    expect(calls.map((c) => geminiChatUsage(c.tokens!))).toEqual([
      { input: 200, output: 9, cacheRead: 20, reasoning: 100 },
      { input: 307, output: 5, cacheRead: 0, reasoning: 0 },
    ]);
    expect(readGeminiChatCalls(harnessHome({ hostWorkspacePath: path.join(workspace, 'nowhere'), workspacePath: '/workspace' }, 'gemini')!, 's1', 0)).toEqual([]);
  });

  it('a chat file of any size yields the whole turn: read from its end back past the turn start, chunk by chunk', async () => {
    const { readGeminiChatCalls } = await import('../../src/adapters/gemini-cli-adapter.js');
    const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-gemini-chat-'));
    const home = harnessHome({ hostWorkspacePath: workspace, workspacePath: '/workspace' } as HarnessSessionConfig, 'gemini')!;
    const chats = path.join(workspace, '.home', 'gemini', '.gemini', 'tmp', 'ws', 'chats');
    mkdirSync(chats, { recursive: true });
    const at = (minute: number, second: number) => `2026-12-01T05:${String(minute).padStart(2, '0')}:${String(second).padStart(2, '0')}.000Z`;
    const msg = (id: string, timestamp: string) => JSON.stringify({ id, timestamp, type: 'gemini', content: 'y'.repeat(200), tokens: { input: 10, output: 1 }, model: 'gemini-2.5-flash' });
    // 40 earlier calls, then the turn's 30 calls: ~9 KB of file read in 1 KB chunks, each chunk cutting a line.
    const earlier = Array.from({ length: 40 }, (_, i) => msg(`old-${i}`, at(0, i)));
    const turn = Array.from({ length: 30 }, (_, i) => msg(`new-${i}`, at(10, i)));
    writeFileSync(path.join(chats, 'session-2026-12-01T05-00-kept-s1.jsonl'), [JSON.stringify({ sessionId: 's1', kind: 'main' }), ...earlier, ...turn, ''].join('\n'));
    const since = Date.parse(at(5, 0));
    const ids = Array.from({ length: 30 }, (_, i) => `new-${i}`);
    expect(readGeminiChatCalls(home, 's1', since, 1024).map((c) => c.id)).toEqual(ids);
    // Chunks smaller than one line, and one chunk for the whole file, give the same.
    expect(readGeminiChatCalls(home, 's1', since, 97).map((c) => c.id)).toEqual(ids);
    expect(readGeminiChatCalls(home, 's1', since).map((c) => c.id)).toEqual(ids);
    // A file past one workspace read (16 MiB): the turn at its end is still found whole.
    const { maxReadBytes } = await import('../../src/sandbox/workspace-fs.js');
    const huge = JSON.stringify({ id: 'huge', timestamp: at(0, 59), type: 'gemini', content: 'z'.repeat(maxReadBytes), tokens: { input: 1, output: 1 } });
    writeFileSync(path.join(chats, 'session-2026-12-01T05-00-kept-s1.jsonl'), [JSON.stringify({ sessionId: 's1', kind: 'main' }), huge, ...turn, ''].join('\n'));
    expect(readGeminiChatCalls(home, 's1', since).map((c) => c.id)).toEqual(ids);
    // A harness can write any size: past the cap without reaching the turn's start, the file is not read on (its
    // calls are not taken from part of the turn; the adapter falls back to the ACP quota and says so).
    writeFileSync(path.join(chats, 'session-2026-12-01T05-00-kept-s1.jsonl'), [JSON.stringify({ sessionId: 's1', kind: 'main' }), ...Array.from({ length: 200 }, () => 'x'.repeat(100)), ...turn, ''].join('\n'));
    expect(readGeminiChatCalls(home, 's1', since, 1024, 8 * 1024).map((c) => c.id)).toEqual([]);
    expect(readGeminiChatCalls(home, 's1', since, 1024, 64 * 1024).map((c) => c.id)).toEqual(ids);
  });
});
