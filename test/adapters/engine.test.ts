import { driverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { HarnessDriver, TwoWaySession } from '../../src/adapters/driver.js';
import type { PermissionGate, PermissionRequest } from '../../src/permissions/types.js';
import { stdioJson } from '../../src/adapters/stdio-json-adapter.js';
import type { HarnessEvent } from '../../src/adapters/index.js';
import type { SandboxExecutor } from '../../src/sandbox/index.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import { FakeExecutor, line } from './fake-executor.js';

const workspace = mkdtempSync(path.join(tmpdir(), 'cli-adapter-'));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

function config(executor: SandboxExecutor, extra: Partial<HarnessSessionConfig> = {}): HarnessSessionConfig {
  return {
    runId: 'run-1', harnessName: 'fake', executable: 'fake-harness', baseArgs: [], workspacePath: workspace,
    hostWorkspacePath: workspace, env: {}, executor, turnTimeoutMs: 5000, ...extra,
  };
}

async function events(stream: AsyncIterable<HarnessEvent>): Promise<HarnessEvent[]> {
  const out: HarnessEvent[] = [];
  for await (const event of stream) out.push(event);
  return out;
}

const terminals = (list: HarnessEvent[]) => list.filter((e) => e.type === 'turn-complete' || e.type === 'session-error');

/** A minimal driver: argv from the turn, every line is text, `END` completes. */
const echo: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: 'Echo',
  capabilities: { sessionResume: false, permissionHooks: false, systemPrompt: false },
  vendor: { api: 'any', baseUrl: { env: 'ECHO_BASE_URL' }, apiKey: { env: 'ECHO_KEY' } },
  mcp: undefined,
  permissions: (posture) => ({ posture, enforced: false, note: 'Echo translates nothing.' }),
  command: (turn) => ({ argv: [turn.executable, ...turn.baseArgs] }),
  session: () => ({
    kind: 'one-way',
    start: () => ({
      line: (text) => {
        if (text === 'THROW') throw new Error('mapper bug');
        return text === 'END' ? { type: 'turn-complete', text: 'ok' } : { type: 'text', text };
      },
    }),
  }),
};

/** A two-way driver whose conversation the test writes. */
function twoWayDriver(run: TwoWaySession['run']): HarnessDriver {
  return { ...echo, driverClass: 'TwoWay', capabilities: { ...echo.capabilities, permissionHooks: true }, command: (turn) => ({ argv: [turn.executable], keepStdinOpen: true }), session: () => ({ kind: 'two-way', run }) };
}

/** An interactive gate that never decides: the turn waits until it is stopped. */
const silentGate: PermissionGate = { interactive: true, decide: () => new Promise<never>(() => undefined) };

const request: PermissionRequest = { id: 'r1', tool: 'bash', kind: 'command', input: { command: 'touch x' }, title: 'touch x', command: 'touch x', options: { edit: 'emulated', denyMessage: false } };

/** Runs one turn with the silent gate and cancels it after 100 ms. */
async function cancelledAfter100ms(adapter: ReturnType<typeof driverSession>, executor: FakeExecutor): Promise<HarnessEvent[]> {
  await adapter.start(config(executor));
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 100);
  return events(adapter.runTurn({ prompt: 'x', turn: 1, gate: silentGate, signal: controller.signal }));
}

describe('the turn engine, two-way', () => {
  it('a stopped conversation writes nothing more to its process: the answer to a permission request never arrives', async () => {
    const executor = new FakeExecutor([{ hang: true }]);
    const adapter = driverSession(
      twoWayDriver(async (_turn, io) => {
        io.send('HELLO');
        const answer = await io.gate(request);
        io.send(answer.allow ? 'ALLOW' : 'DENY');
        for await (const _line of io.lines) void _line;
        return undefined;
      }),
    );
    const list = await cancelledAfter100ms(adapter, executor);
    expect(executor.processes[0]!.written).toEqual(['HELLO\n']);
    expect(list.map((e) => e.type)).toEqual(['permission-request', 'session-error']);
    expect(list.at(-1)).toMatchObject({ code: 'cancelled' });
  });

  it('usage a conversation reports while its stopped process is being killed still counts', async () => {
    const executor = new FakeExecutor([{ hang: true }]);
    const adapter = driverSession(
      twoWayDriver(async (_turn, io) => {
        // What a session books when it learns of the stop: the call it was making, of unknown usage.
        io.signal.addEventListener('abort', () => io.emit({ type: 'usage', usage: { input: 5, output: 6 } }));
        for await (const _line of io.lines) void _line;
        return undefined;
      }),
    );
    const list = await cancelledAfter100ms(adapter, executor);
    expect(list).toEqual([expect.objectContaining({ type: 'usage', usage: expect.objectContaining({ input: 5, output: 6 }) }), expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
  });
});

describe('the turn engine', () => {
  it('ends a hanging turn at the timeout with exactly one timeout error and kills the process', async () => {
    const executor = new FakeExecutor([{ lines: [line({ type: 'text', text: 'working' })], hang: true }]);
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor, { turnTimeoutMs: 150 }));
    const started = Date.now();
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(Date.now() - started).toBeLessThan(2000);
    expect(terminals(list)).toHaveLength(1);
    expect(list.at(-1)).toMatchObject({ type: 'session-error', code: 'timeout' });
    expect(executor.processes[0]!.killCount).toBeGreaterThan(0);
  });

  it('ends an aborted turn with exactly one cancelled error', async () => {
    const executor = new FakeExecutor([{ hang: true }]);
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor));
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal }));
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({ type: 'session-error', code: 'cancelled' });
    expect(executor.processes[0]!.killCount).toBeGreaterThan(0);
  });

  it('a cancelled turn still reports the usage its harness wrote as it was stopped: those tokens were spent', async () => {
    const usage = line({ type: 'usage', input: 700, output: 30 });
    const executor = new FakeExecutor([{ lines: [line({ type: 'activity', description: 'calling the model' })], hang: true, onKill: [usage, line({ type: 'text', text: 'never acted on' })] }]);
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor));
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal }));
    expect(list.map((e) => e.type)).toEqual(['activity', 'usage', 'session-error']);
    expect(list[1]).toMatchObject({ type: 'usage', usage: { input: 700, output: 30 } });
    expect(list.at(-1)).toMatchObject({ type: 'session-error', code: 'cancelled' });
  });

  it('a usage line read in the same moment as the stop is not dropped', async () => {
    const executor = new FakeExecutor([{ hang: true }]);
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor));
    const controller = new AbortController();
    setTimeout(() => {
      // The line reaches the reader and the cancel lands before the reader runs again.
      executor.processes[0]!.queue.push(`${line({ type: 'usage', input: 5, output: 6 })}\n`);
      controller.abort();
    }, 100);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal }));
    expect(list).toEqual([expect.objectContaining({ type: 'usage', usage: expect.objectContaining({ input: 5, output: 6 }) }), expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
  });

  it('a harness that ignores SIGTERM and spends tokens during its kill grace: the usage it reports then still counts', async () => {
    // What a CLI does when the cancel lands before it installed its handler (as PID 1 of a sandbox, SIGTERM is then ignored).
    // It says when its handler is in (a file), so the cancel lands after it however slow the machine is.
    const armed = path.join(workspace, 'sigterm-armed');
    rmSync(armed, { force: true });
    const script = `process.on('SIGTERM', () => {}); require('fs').writeFileSync('sigterm-armed', ''); setTimeout(() => console.log(JSON.stringify({ type: 'usage', input: 1000, output: 50 })), 150); setInterval(() => {}, 1000);`;
    const executor = new LocalExecutor({ workspacePath: workspace, killGraceMs: 600 });
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor, { executable: process.execPath, baseArgs: ['-e', script] }));
    const controller = new AbortController();
    const cancelWhenArmed = setInterval(() => existsSync(armed) && (clearInterval(cancelWhenArmed), controller.abort()), 10);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal }));
    expect(list).toEqual([expect.objectContaining({ type: 'usage', usage: expect.objectContaining({ input: 1000, output: 50 }) }), expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
  });

  it('does not start a process for a turn aborted before it began', async () => {
    const executor = new FakeExecutor([]);
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: AbortSignal.abort() }));
    expect(list).toEqual([expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
    expect(executor.requests).toHaveLength(0);
  });

  it('kills a real process tree on timeout', async () => {
    const executor = new LocalExecutor({ workspacePath: workspace, killGraceMs: 300 });
    const adapter = driverSession(echo);
    await adapter.start(config(executor, { executable: process.execPath, baseArgs: ['-e', 'console.log("hi"); setInterval(() => {}, 1000)'], turnTimeoutMs: 300 }));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toEqual([{ type: 'text', text: 'hi' }, expect.objectContaining({ type: 'session-error', code: 'timeout' })]);
  });

  it('turns a missing binary into a clear error that says how to fix it', async () => {
    const executor = new LocalExecutor({ workspacePath: workspace });
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor, { executable: 'no-such-harness-binary', harnessName: 'my-harness' }));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toHaveLength(1);
    const event = list[0]!;
    expect(event).toMatchObject({ type: 'session-error', code: 'process-exit' });
    const message = event.type === 'session-error' ? event.message : '';
    expect(message).toContain('"no-such-harness-binary" was not found');
    expect(message).toContain('spawn no-such-harness-binary ENOENT');
    expect(message).toMatch(/set "executable" for harness "my-harness" in the catalog/);
  });

  it('survives a mapper that throws, and still completes', async () => {
    const executor = new FakeExecutor([{ lines: ['THROW', 'a', 'END'] }]);
    const adapter = driverSession(echo);
    await adapter.start(config(executor));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toEqual([{ type: 'unknown', raw: 'THROW' }, { type: 'text', text: 'a' }, { type: 'turn-complete', text: 'ok' }]);
  });

  it('ends with the session the harness reported in the terminal event', async () => {
    const executor = new FakeExecutor([{ lines: [line({ type: 'session', id: 's-1', model: 'm-1' }), line({ type: 'complete', text: 'done' })] }]);
    const adapter = driverSession(stdioJson);
    await adapter.start(config(executor, { resumeSessionId: 's-1' }));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete', text: 'done', session: { sessionId: 's-1', resumed: true, model: 'm-1' } });
  });
});
