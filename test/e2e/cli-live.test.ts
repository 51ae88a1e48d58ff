/**
 * Live adapter tests over the table of the five pinned CLIs (support/cli-table.ts): each REAL binary driven through
 * its adapter and the local executor against the fake vendor on 127.0.0.1; only the model vendor is faked. Two turns
 * (read a workspace file with the CLI's own tool → actions envelope; resumed → success envelope) and a cancelled turn
 * whose process tree must be gone within 2 s.
 *
 * Network proof: each binary runs under `strace -ff -e trace=connect`; every AF_INET/AF_INET6 connect of the whole
 * process tree must go to loopback. CI must install strace (`apt-get install -y strace` in .ci/run).
 * A missing binary or strace is a FAILURE here, never a skip.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { foldTurn, type TurnResult } from '../../src/adapters/fold.js';
import type { HarnessEvent } from '../../src/adapters/types.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import type { SandboxExecutor } from '../../src/sandbox/types.js';
import type { DriverSession, HarnessSessionConfig } from '../support/driver-session.js';
import { processTree, waitUntilGone } from '../support/processes.js';
import type { FakeVendor, ScriptedReply } from './fake-vendor/server.js';
import { clis, type TableCli } from './support/cli-table.js';
import { expectInstalled, RecordingExecutor } from './support/clis.js';
import { expectStrace, inetConnects, loopback, readStraceLogs, straceBin, straceConnectArgs } from './support/network.js';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// Not under /tmp: codex's sandbox helper breaks when CODEX_HOME is there.
const liveRoot = path.join(repo, '.data/live-tests');
afterAll(() => process.env.KEEP_LIVE || rmSync(liveRoot, { recursive: true, force: true }));

const secret = 'sk-live-test-not-a-real-key';
const systemMarker = 'DURABLE-HARNESS-CONTRACT-7f3a';
const firstPrompt = 'Read notes.txt, then ask to echo the secret word.';
const secondPrompt = 'Action results: the echo action returned PELICAN. Finish.';
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';

function freshWorkspace(name: string): string {
  const workspace = path.join(liveRoot, `${name}-${process.pid}-${Date.now()}`);
  mkdirSync(workspace, { recursive: true });
  writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
  return workspace;
}

function sessionConfig(cli: TableCli, workspace: string, executor: SandboxExecutor, vendor: FakeVendor, wrap: string[] = []): HarnessSessionConfig {
  return {
    runId: `live-${cli.name}`,
    harnessName: cli.name,
    executable: wrap.length > 0 ? wrap[0]! : cli.executable,
    baseArgs: wrap.length > 0 ? [...wrap.slice(1), cli.executable] : [],
    model: cli.model,
    workspacePath: workspace,
    hostWorkspacePath: workspace,
    env: { [cli.keyEnv]: secret },
    executor,
    baseUrl: cli.baseUrl(vendor),
    turnTimeoutMs: 30_000,
    settings: cli.settings,
  };
}

async function run(adapter: DriverSession, prompt: string, turn: number, signal?: AbortSignal): Promise<{ events: HarnessEvent[]; result: TurnResult }> {
  const events: HarnessEvent[] = [];
  for await (const event of adapter.runTurn({ prompt, turn, signal })) events.push(event);
  return { events, result: foldTurn(events) };
}

describe.each(clis)('$name live (real binary through its adapter, fake vendor)', (cli) => {
  it('has the pinned binary and strace (a missing one fails, never skips)', () => {
    expectInstalled(cli.executable);
    expectStrace();
  });

  it('two turns: reads a file with its own tool, asks for an action, then succeeds on the resumed session; talks only to loopback', async () => {
    const vendor = await cli.startVendor();
    const workspace = freshWorkspace(cli.name);
    const straceLog = path.join(workspace, 'connect.strace');
    const executor = new RecordingExecutor(new LocalExecutor({ workspacePath: workspace }));
    const adapter = cli.create();
    const cacheWrites = cli.cacheWrite !== undefined ? [{ cacheWrite: 300 }, { cacheWrite: 50 }, { cacheWrite: 0 }] : [{}, {}, {}];
    try {
      adapter.applyPermissionPolicy('auto');
      adapter.setSystemPrompt(`End every turn with one JSON next-step envelope. ${systemMarker}`);
      await adapter.start(sessionConfig(cli, workspace, executor, vendor, [straceBin, ...straceConnectArgs(straceLog)]));
      const turn1Replies: ScriptedReply[] = [
        { match: cli.match, toolCalls: [{ id: 'call_live_1', ...cli.readCall(workspace) }], usage: { input: 1000, output: 20, cacheRead: 0, ...cacheWrites[0] } },
        { match: cli.match, text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000, ...cacheWrites[1] } },
      ];
      vendor.script(...turn1Replies);
      const { result: t1 } = await run(adapter, firstPrompt, 1);
      expect(t1.error).toBeUndefined();
      expect(t1.text).toBe(actionsEnvelope);
      expect(t1.usage).toMatchObject({ input: 1100, output: 50, cacheRead: 1000, ...(cli.cacheWrite !== undefined ? { cacheWrite: cli.cacheWrite } : {}) });
      if (cli.reportsCost) expect(t1.costUsd).toBeGreaterThan(0);
      expect(t1.resumed).toBe(false);
      expect(t1.sessionId).toBeTruthy();
      const session1 = adapter.externalSessionId;
      expect(session1).toBe(t1.sessionId);
      expect(adapter.reportedModel).toBe(cli.reportedModel);
      // The tool really ran: the second model call carried the file content back.
      expect(vendor.requests.filter(cli.match)[1]!.rawBody).toContain('PELICAN');

      vendor.script({ match: cli.match, text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200, ...cacheWrites[2] } });
      const { result: t2 } = await run(adapter, secondPrompt, 2);
      expect(t2.error).toBeUndefined();
      expect(t2.text).toBe(successEnvelope);
      expect(t2.usage).toMatchObject({ input: 40, output: 12, cacheRead: 1200, ...(cli.cacheWrite !== undefined ? { cacheWrite: 0 } : {}) });
      expect(t2.resumed).toBe(true);
      expect(adapter.resumed).toBe(true);
      // A forking CLI continues turn 1's session in a branch of it: a new id (the history carried over, see below).
      expect(adapter.externalSessionId).toBeTruthy();
      expect(t2.sessionId).toBe(adapter.externalSessionId);
      if (cli.forks) expect(t2.sessionId).not.toBe(session1);
      else expect(t2.sessionId).toBe(session1);
      // The model where the CLI says it, never a guess.
      expect(t2.model).toBe(cli.reportedModel);
      expect(adapter.reportedModel).toBe(cli.reportedModel);

      // The resumed turn's request carried turn 1's history: the first prompt, the file content and the envelope.
      const turns = vendor.requests.filter(cli.match);
      expect(turns).toHaveLength(3);
      const third = turns[2]!;
      expect(third.rawBody).toContain(firstPrompt);
      expect(third.rawBody).toContain('The secret word is PELICAN.');
      expect(third.rawBody).toContain(JSON.stringify(actionsEnvelope).slice(1, -1));
      expect(third.rawBody).toContain('the echo action returned');
      if (cli.modelInBody) expect((third.body as { model?: string }).model).toBe(cli.model);
      else expect(third.url).toContain(cli.model);
      for (const request of turns) expect(request.rawBody).toContain(systemMarker);
      expect(vendor.unexpected).toEqual([]);
      expect(vendor.remaining()).toBe(0);
      for (const request of executor.requests) expect(request.argv.join(' ')).not.toContain(secret);

      const connects = inetConnects(readStraceLogs(straceLog));
      expect(connects.length, 'strace saw no inet connect at all: the proof would be empty').toBeGreaterThan(0);
      expect(connects.filter((address) => !loopback.has(address))).toEqual([]);
    } finally {
      await adapter.end();
      await vendor.close();
    }
  }, 40_000);

  it('cancelling a turn whose vendor reply takes 30 s kills the whole process tree within 2 s, with one cancelled error', async () => {
    const vendor = await cli.startVendor();
    const workspace = freshWorkspace(`${cli.name}-cancel`);
    const executor = new RecordingExecutor(new LocalExecutor({ workspacePath: workspace, killGraceMs: 1000 }));
    const adapter = cli.create();
    try {
      adapter.applyPermissionPolicy('auto');
      await adapter.start({ ...sessionConfig(cli, workspace, executor, vendor), turnTimeoutMs: 35_000 });
      vendor.script({ match: cli.match, text: successEnvelope, delayMs: 30_000 });
      const controller = new AbortController();
      const done = run(adapter, 'Say hello.', 1, controller.signal);
      // Wait until the CLI is really waiting on the vendor.
      const waitStart = Date.now();
      while (vendor.requests.filter(cli.match).length === 0 && Date.now() - waitStart < 25_000) await new Promise((r) => setTimeout(r, 50));
      expect(vendor.requests.filter(cli.match)).toHaveLength(1);
      const pid = executor.pids[0];
      expect(pid).toBeDefined();
      const tree = processTree(pid!);
      expect(tree.length).toBeGreaterThan(0);

      const abortedAt = Date.now();
      controller.abort();
      const { events, result } = await done;
      expect(result.error?.code).toBe('cancelled');
      expect(events.filter((e) => e.type === 'turn-complete' || e.type === 'session-error')).toEqual([expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
      await waitUntilGone(tree, 2000);
      expect(Date.now() - abortedAt).toBeLessThan(2000);
    } finally {
      await adapter.end();
      await vendor.close();
    }
  }, 40_000);
});
