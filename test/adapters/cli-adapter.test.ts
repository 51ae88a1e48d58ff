import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CliHarnessAdapter, type TurnCommand } from '../../src/adapters/cli-adapter.js';
import { StdioJsonAdapter } from '../../src/adapters/stdio-json-adapter.js';
import type { Capabilities, HarnessEvent, HarnessSessionConfig } from '../../src/adapters/index.js';
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

/** A minimal subclass: argv from the config, every line is text, `END` completes. */
class EchoAdapter extends CliHarnessAdapter {
  readonly driverClass = 'Echo';
  readonly capabilities: Capabilities = {
    sessionResume: false, structuredOutput: false, usageReporting: false, permissionHooks: false, modelSelection: false, systemPrompt: false,
  };
  protected override buildTurn(): TurnCommand {
    return { argv: [this.config!.executable, ...this.config!.baseArgs] };
  }
  protected override mapLine(text: string): HarnessEvent {
    if (text === 'THROW') throw new Error('mapper bug');
    return text === 'END' ? { type: 'turn-complete', text: 'ok' } : { type: 'text', text };
  }
}

describe('CliHarnessAdapter', () => {
  it('ends a hanging turn at the timeout with exactly one timeout error and kills the process', async () => {
    const executor = new FakeExecutor([{ lines: [line({ type: 'text', text: 'working' })], hang: true }]);
    const adapter = new StdioJsonAdapter();
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
    const adapter = new StdioJsonAdapter();
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
    const adapter = new StdioJsonAdapter();
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
    const adapter = new StdioJsonAdapter();
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
    const adapter = new StdioJsonAdapter();
    await adapter.start(config(executor, { executable: process.execPath, baseArgs: ['-e', script] }));
    const controller = new AbortController();
    const cancelWhenArmed = setInterval(() => existsSync(armed) && (clearInterval(cancelWhenArmed), controller.abort()), 10);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal }));
    expect(list).toEqual([expect.objectContaining({ type: 'usage', usage: expect.objectContaining({ input: 1000, output: 50 }) }), expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
  });

  it('does not start a process for a turn aborted before it began', async () => {
    const executor = new FakeExecutor([]);
    const adapter = new StdioJsonAdapter();
    await adapter.start(config(executor));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, signal: AbortSignal.abort() }));
    expect(list).toEqual([expect.objectContaining({ type: 'session-error', code: 'cancelled' })]);
    expect(executor.requests).toHaveLength(0);
  });

  it('kills a real process tree on timeout', async () => {
    const executor = new LocalExecutor({ workspacePath: workspace, killGraceMs: 300 });
    const adapter = new EchoAdapter();
    await adapter.start(config(executor, { executable: process.execPath, baseArgs: ['-e', 'console.log("hi"); setInterval(() => {}, 1000)'], turnTimeoutMs: 300 }));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toEqual([{ type: 'text', text: 'hi' }, expect.objectContaining({ type: 'session-error', code: 'timeout' })]);
  });

  it('turns a missing binary into a clear error that says how to fix it', async () => {
    const executor = new LocalExecutor({ workspacePath: workspace });
    const adapter = new StdioJsonAdapter();
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
    const adapter = new EchoAdapter();
    await adapter.start(config(executor));
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toEqual([{ type: 'unknown', raw: 'THROW' }, { type: 'text', text: 'a' }, { type: 'turn-complete', text: 'ok' }]);
  });

  it('refuses turns before start and after end, and end is idempotent', async () => {
    const executor = new FakeExecutor([]);
    const adapter = new EchoAdapter();
    expect(await events(adapter.runTurn({ prompt: 'x', turn: 1 }))).toEqual([expect.objectContaining({ type: 'session-error', code: 'protocol-error' })]);
    await adapter.start(config(executor));
    await adapter.end();
    await adapter.end();
    expect(await events(adapter.runTurn({ prompt: 'x', turn: 1 }))).toEqual([expect.objectContaining({ type: 'session-error', code: 'protocol-error' })]);
    expect(executor.requests).toHaveLength(0);
  });

  it('reports permission postures honestly when the subclass translates nothing', () => {
    expect(new EchoAdapter().applyPermissionPolicy('strict')).toMatchObject({ posture: 'strict', enforced: false });
  });
});
