/**
 * Live adapter tests: the REAL pinned Gemini CLI, OpenCode and Pi binaries, driven through their adapters and
 * the local executor, against the fake vendor on 127.0.0.1. Two turns (read a workspace file with the CLI's own
 * tool → actions envelope; resumed → success envelope) and a cancelled turn whose process tree must be gone
 * within 2 s. Each CLI runs under `strace -f -e trace=connect`, and every AF_INET/AF_INET6 connect must go to
 * loopback: proof that it contacted nothing but the fake server. Needs `strace` (apt-get install -y strace).
 * A missing binary or strace is a failure, never a skip.
 */
import type { DriverSession } from '../support/driver-session.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { foldTurn, type TurnResult } from '../../src/adapters/fold.js';
import type { HarnessEvent } from '../../src/adapters/types.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import { profiles, sessionConfig, type RecordedCli } from '../fixtures/record-more.js';
import { processTree, waitUntilGone } from '../support/processes.js';
import type { FakeVendor } from './fake-vendor/server.js';
import { expectInstalled, RecordingExecutor } from './support/clis.js';
import { expectStrace, inetConnects, loopback, readStraceLogs, straceBin, straceConnectArgs } from './support/network.js';

const secret = 'The secret word is PELICAN.';
const systemMarker = 'DURABLE-HARNESS-CONTRACT-7f3a';
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"PELICAN"}';

async function run(adapter: DriverSession, prompt: string, turn: number, signal?: AbortSignal): Promise<{ events: HarnessEvent[]; result: TurnResult }> {
  const events: HarnessEvent[] = [];
  for await (const event of adapter.runTurn({ prompt, turn, signal })) events.push(event);
  return { events, result: foldTurn(events) };
}

function bodyText(request: { rawBody: string }): string {
  return request.rawBody;
}

const clis: RecordedCli[] = ['gemini', 'opencode', 'pi'];

describe.each(clis)('%s: real binary through its adapter against the fake vendor', (cli) => {
  const profile = profiles[cli];
  let vendor: FakeVendor;

  beforeAll(async () => {
    vendor = await profile.vendor();
  });
  afterAll(async () => {
    await vendor?.close();
  });

  it('is installed (a missing binary fails CI), and strace is present', () => {
    expectInstalled(profile.executable);
    expectStrace();
  });

  it('reads a workspace file with its own tool, asks for an action, then succeeds on the resumed session', { timeout: 40_000 }, async () => {
    const workspace = mkdtempSync(path.join(os.tmpdir(), `dh-live-${cli}-`));
    writeFileSync(path.join(workspace, 'notes.txt'), `${secret}\n`);
    const traceLog = path.join(os.tmpdir(), `dh-live-${cli}-${process.pid}.strace`);
    const executor = new LocalExecutor({ workspacePath: workspace });
    const before = vendor.requests.length;
    vendor.script(
      { match: profile.match, toolCalls: [{ id: 'call_read_1', ...profile.readToolCall(workspace) }], usage: { input: 1000, output: 20 } },
      { match: profile.match, text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000 } },
      { match: profile.match, text: successEnvelope, usage: { input: 40, output: 10, cacheRead: 1200 } },
    );
    const adapter = profile.create();
    adapter.applyPermissionPolicy('auto');
    adapter.setSystemPrompt(`Follow the contract. ${systemMarker}`);
    await adapter.start(
      sessionConfig(cli, workspace, vendor, executor, {
        executable: straceBin,
        baseArgs: [...straceConnectArgs(traceLog), profile.executable],
        turnTimeoutMs: 30_000,
      }),
    );
    try {
      const first = await run(adapter, 'Read notes.txt, then ask to echo the secret word.', 1);
      expect(first.result.error).toBeUndefined();
      expect(first.result.text).toBe(actionsEnvelope);
      expect(first.result.resumed).toBe(false);
      expect(first.result.sessionId).toBeTruthy();
      expect(first.result.usage).toMatchObject({ input: 1100, output: 50, cacheRead: 1000 });
      const firstSession = first.result.sessionId;

      const second = await run(adapter, 'The echo action returned PELICAN. Finish.', 2);
      expect(second.result.error).toBeUndefined();
      expect(second.result.text).toBe(successEnvelope);
      expect(second.result.resumed).toBe(true);
      // OpenCode and Pi continue turn 1's session in a fork of it (a new id); Gemini cannot fork, it resumes in place.
      if (cli === 'gemini') expect(second.result.sessionId).toBe(firstSession);
      else expect(second.result.sessionId).not.toBe(firstSession);
      expect(adapter.resumed).toBe(true);
      expect(second.result.usage).toMatchObject({ input: 40, output: 10, cacheRead: 1200 });
      // The model where the CLI says it; OpenCode's JSON never names it.
      expect(second.result.model).toBe(cli === 'opencode' ? undefined : profile.model);

      const turns = vendor.requests.slice(before).filter(profile.match);
      expect(turns).toHaveLength(3);
      // The tool result went back to the model, and the resumed turn carried turn 1's history.
      expect(bodyText(turns[1]!)).toContain('PELICAN');
      expect(bodyText(turns[2]!)).toContain('Read notes.txt');
      expect(bodyText(turns[2]!)).toContain('PELICAN');
      expect(bodyText(turns[2]!)).toContain('echo action returned');
      for (const request of turns) expect(bodyText(request)).toContain(systemMarker);
      expect(vendor.unexpected).toEqual([]);

      const connects = inetConnects(readStraceLogs(traceLog));
      expect(connects.length).toBeGreaterThan(0);
      expect(connects.filter((address) => !loopback.has(address))).toEqual([]);
    } finally {
      await adapter.end();
    }
  });

  it('a cancelled turn kills the whole process tree within 2 s', { timeout: 40_000 }, async () => {
    const workspace = mkdtempSync(path.join(os.tmpdir(), `dh-cancel-${cli}-`));
    const executor = new RecordingExecutor(new LocalExecutor({ workspacePath: workspace }));
    const before = vendor.requests.filter(profile.match).length;
    vendor.script({ match: profile.match, text: successEnvelope, delayMs: 30_000 });
    const adapter = profile.create();
    adapter.applyPermissionPolicy('auto');
    await adapter.start(sessionConfig(cli, workspace, vendor, executor, { turnTimeoutMs: 35_000 }));
    const abort = new AbortController();
    const turn = run(adapter, 'Take your time.', 1, abort.signal);
    try {
      const deadline = Date.now() + 25_000;
      while (vendor.requests.filter(profile.match).length === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(vendor.requests.filter(profile.match).length).toBeGreaterThan(before);
      const root = executor.pids[0];
      expect(root).toBeDefined();
      const tree = processTree(root!);
      const started = Date.now();
      abort.abort();
      const { events } = await turn;
      await waitUntilGone(tree, 2000);
      expect(Date.now() - started).toBeLessThan(2000);
      expect(events.filter((e) => e.type === 'turn-complete' || e.type === 'session-error')).toEqual([
        expect.objectContaining({ type: 'session-error', code: 'cancelled' }),
      ]);
    } finally {
      await adapter.end();
    }
  });
});
