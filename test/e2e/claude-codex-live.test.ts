/**
 * Live adapter tests: the REAL pinned claude and codex binaries, driven through their adapters and the local
 * executor, against the fake vendor on 127.0.0.1. Only the model vendor is faked.
 *
 * Network proof: each binary runs under `strace -f -e trace=connect`; every AF_INET/AF_INET6 connect of the whole
 * process tree must go to 127.0.0.1 or ::1. CI must install strace (`apt-get install -y strace` in .ci/run).
 * A missing binary or strace is a FAILURE here, never a skip.
 */
import { driverSession, type DriverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { claudeCode } from '../../src/adapters/claude-code-adapter.js';
import { codex } from '../../src/adapters/codex-adapter.js';
import { collectTurn } from '../../src/adapters/fold.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import type { SandboxExecutor } from '../../src/sandbox/types.js';
import { processAlive, processTree } from '../support/processes.js';
import type { FakeVendor, RecordedRequest, ScriptedReply } from './fake-vendor/server.js';
import { cliBinary, expectInstalled, RecordingExecutor, startVendorFor } from './support/clis.js';
import { expectStrace, inetConnects, readStraceLogs, straceBin, straceConnectArgs } from './support/network.js';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// Not under /tmp: codex's sandbox helper breaks when CODEX_HOME is there.
const liveRoot = path.join(repo, '.data/live-tests');
afterAll(() => process.env.KEEP_LIVE || rmSync(liveRoot, { recursive: true, force: true }));

interface LiveCli {
  readonly name: 'claude' | 'codex';
  readonly create: () => DriverSession;
  readonly model: string;
  readonly keyEnv: string;
  /** The CLI's own file-read tool call for notes.txt. */
  readonly readCall: (workspace: string) => { name: string; input: Record<string, unknown> };
  /** The model the adapter must report (codex does not report one). */
  readonly reportedModel: string | undefined;
  readonly settings?: Record<string, unknown>;
}

const clis: LiveCli[] = [
  {
    name: 'claude',
    create: () => driverSession(claudeCode),
    model: 'claude-sonnet-4-5',
    keyEnv: 'ANTHROPIC_API_KEY',
    readCall: (workspace) => ({ name: 'Read', input: { file_path: path.join(workspace, 'notes.txt') } }),
    reportedModel: 'claude-sonnet-4-5',
    settings: { maxRetries: 0 },
  },
  {
    name: 'codex',
    create: () => driverSession(codex),
    model: 'gpt-5.5',
    keyEnv: 'OPENAI_API_KEY',
    readCall: () => ({ name: 'exec_command', input: { cmd: 'cat notes.txt' } }),
    reportedModel: undefined,
  },
];

const secret = 'sk-live-test-not-a-real-key';
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';

function freshWorkspace(name: string): string {
  const workspace = path.join(liveRoot, `${name}-${process.pid}-${Date.now()}`);
  mkdirSync(workspace, { recursive: true });
  writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
  return workspace;
}

function sessionConfig(cli: LiveCli, workspace: string, executor: SandboxExecutor, vendor: FakeVendor, wrap: string[] = []): HarnessSessionConfig {
  const bin = cliBinary(cli.name);
  return {
    runId: `live-${cli.name}`,
    harnessName: cli.name,
    executable: wrap.length > 0 ? wrap[0]! : bin,
    baseArgs: wrap.length > 0 ? [...wrap.slice(1), bin] : [],
    model: cli.model,
    workspacePath: workspace,
    hostWorkspacePath: workspace,
    env: { [cli.keyEnv]: secret },
    executor,
    baseUrl: vendor.url,
    turnTimeoutMs: 25_000,
    settings: cli.settings,
  };
}

const posts = (vendor: FakeVendor): RecordedRequest[] => vendor.requests.filter((r) => r.method === 'POST');

describe.each(clis)('$name live (real binary, fake vendor)', (cli) => {
  it('has the pinned binary and strace (a missing one fails, never skips)', () => {
    expectInstalled(cliBinary(cli.name));
    expectStrace();
  });

  it('two turns: reads a file with its own tool, asks for an action, then succeeds on the resumed session; talks only to 127.0.0.1', async () => {
    const vendor = await startVendorFor('claude', 'codex');
    const workspace = freshWorkspace(cli.name);
    const straceLog = path.join(workspace, 'connect.strace');
    const executor = new RecordingExecutor(new LocalExecutor({ workspacePath: workspace }));
    const adapter = cli.create();
    try {
      adapter.applyPermissionPolicy('auto');
      adapter.setSystemPrompt('End every turn with one JSON next-step envelope.');
      await adapter.start(sessionConfig(cli, workspace, executor, vendor, [straceBin, ...straceConnectArgs(straceLog)]));
      const turn1Replies: ScriptedReply[] = [
        { toolCalls: [{ id: 'call_live_1', ...cli.readCall(workspace) }], usage: { input: 1000, output: 20, cacheRead: 0, cacheWrite: 300 } },
        { text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000, cacheWrite: 50 } },
      ];
      vendor.script(...turn1Replies);
      const t1 = await collectTurn(adapter.runTurn({ prompt: 'Read notes.txt, then ask to echo the secret word.', turn: 1 }));
      expect(t1.error).toBeUndefined();
      expect(t1.text).toBe(actionsEnvelope);
      const cacheWrite = cli.name === 'claude' ? 350 : 0; // the Responses API has no cache-write count
      expect(t1.usage).toMatchObject({ input: 1100, output: 50, cacheRead: 1000, cacheWrite });
      if (cli.name === 'claude') expect(t1.costUsd).toBeGreaterThan(0);
      expect(t1.resumed).toBe(false);
      const session1 = adapter.externalSessionId;
      expect(session1).toBeTruthy();
      expect(adapter.reportedModel).toBe(cli.reportedModel);
      // The tool really ran: the second model call carried the file content back.
      expect(posts(vendor)[1]!.rawBody).toContain('PELICAN');

      vendor.script({ text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200, cacheWrite: 0 } });
      const t2 = await collectTurn(adapter.runTurn({ prompt: 'Action results: echo → PELICAN. Finish.', turn: 2 }));
      expect(t2.error).toBeUndefined();
      expect(t2.text).toBe(successEnvelope);
      expect(t2.usage).toMatchObject({ input: 40, output: 12, cacheRead: 1200, cacheWrite: 0 });
      expect(t2.resumed).toBe(true);
      expect(adapter.resumed).toBe(true);
      // Resumed turns continue turn 1's session in a fork of it: a new id (the history carried over, see below).
      expect(adapter.externalSessionId).toBeTruthy();
      expect(adapter.externalSessionId).not.toBe(session1);
      expect(adapter.reportedModel).toBe(cli.reportedModel);

      // The resumed turn's request carried turn 1's history: the first prompt, the file content and the envelope.
      const third = posts(vendor)[2]!;
      expect(third.rawBody).toContain('Read notes.txt, then ask to echo the secret word.');
      expect(third.rawBody).toContain('The secret word is PELICAN.');
      expect(third.rawBody).toContain(JSON.stringify(actionsEnvelope).slice(1, -1));
      expect(third.rawBody).toContain('Action results: echo');
      expect((third.body as { model?: string }).model).toBe(cli.model);
      expect(posts(vendor)).toHaveLength(3);
      expect(vendor.unexpected).toEqual([]);
      expect(vendor.remaining()).toBe(0);
      for (const request of executor.requests) expect(request.argv.join(' ')).not.toContain(secret);

      const connects = inetConnects(readStraceLogs(straceLog));
      expect(connects.length, 'strace saw no inet connect at all: the proof would be empty').toBeGreaterThan(0);
      expect(connects.filter((address) => address !== '127.0.0.1' && address !== '::1')).toEqual([]);
    } finally {
      await adapter.end();
      await vendor.close();
    }
  }, 30_000);

  it('cancelling a turn whose vendor reply takes 30 s kills the whole process tree within 2 s', async () => {
    const vendor = await startVendorFor('claude', 'codex');
    const workspace = freshWorkspace(`${cli.name}-cancel`);
    const executor = new RecordingExecutor(new LocalExecutor({ workspacePath: workspace, killGraceMs: 1000 }));
    const adapter = cli.create();
    try {
      await adapter.start(sessionConfig(cli, workspace, executor, vendor));
      vendor.script({ text: successEnvelope, delayMs: 30_000 });
      const controller = new AbortController();
      const done = collectTurn(adapter.runTurn({ prompt: 'Say hello.', turn: 1, signal: controller.signal }));
      // Wait until the CLI is really waiting on the vendor.
      const waitStart = Date.now();
      while (posts(vendor).length === 0 && Date.now() - waitStart < 15_000) await new Promise((r) => setTimeout(r, 50));
      expect(posts(vendor)).toHaveLength(1);
      const pid = executor.processes[0]!.pid!;
      const tree = processTree(pid);
      expect(tree.length).toBeGreaterThan(0);

      const abortedAt = Date.now();
      controller.abort();
      const result = await done;
      expect(result.error?.code).toBe('cancelled');
      while (tree.some(processAlive) && Date.now() - abortedAt < 2000) await new Promise((r) => setTimeout(r, 20));
      expect(tree.filter(processAlive), `still alive ${Date.now() - abortedAt} ms after abort`).toEqual([]);
      expect(Date.now() - abortedAt).toBeLessThan(2000);
    } finally {
      await adapter.end();
      await vendor.close();
    }
  }, 30_000);
});
