import { driverSession } from '../support/driver-session.js';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { collectTurn } from '../../src/adapters/fold.js';
import { stdioJson } from '../../src/adapters/stdio-json-adapter.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import { processAlive, scriptedSleepPids } from '../support/processes.js';

const harness = fileURLToPath(new URL('./scripted-harness.mjs', import.meta.url));
const root = mkdtempSync(path.join(tmpdir(), 'scripted-harness-'));
const scripts = path.join(root, 'scripts');
mkdirSync(scripts);
afterAll(() => rmSync(root, { recursive: true, force: true }));

function script(name: string, turns: unknown[]): void {
  writeFileSync(path.join(scripts, `${name}.json`), JSON.stringify({ turns }));
}

let counter = 0;
async function adapterFor(extra: { env?: Record<string, string>; turnTimeoutMs?: number } = {}) {
  const workspace = path.join(root, `ws-${++counter}`);
  mkdirSync(workspace);
  const executor = new LocalExecutor({ workspacePath: workspace, killGraceMs: 300 });
  const adapter = driverSession(stdioJson);
  await adapter.start({
    runId: 'r', harnessName: 'scripted', executable: 'node', baseArgs: [harness, '--scripts', scripts], workspacePath: workspace,
    hostWorkspacePath: workspace, env: extra.env ?? {}, executor, turnTimeoutMs: extra.turnTimeoutMs ?? 20_000,
  });
  return { adapter, workspace };
}

describe('scripted harness', () => {
  it('replays steps across resumed turns and says when the script is exhausted', async () => {
    script('two-steps', [
      { model: 'm1', activity: 'thinking', usage: { input: 10, output: 2 }, envelope: { step: 'actions', actions: [] } },
      { raw: 'not json' },
    ]);
    const { adapter } = await adapterFor();
    const one = await collectTurn(adapter.runTurn({ prompt: 'go script:two-steps', turn: 1 }));
    expect(one).toMatchObject({ text: '{"step":"actions","actions":[]}', model: 'm1', resumed: false, activities: ['thinking'] });
    expect(one.usage.input).toBe(10);
    const two = await collectTurn(adapter.runTurn({ prompt: 'results', turn: 2 }));
    expect(two).toMatchObject({ text: 'not json', resumed: true, sessionId: one.sessionId });
    const three = await collectTurn(adapter.runTurn({ prompt: 'more', turn: 3 }));
    expect(three.error?.message).toContain('script exhausted');
  });

  it('fails a turn without script or session', async () => {
    const { adapter } = await adapterFor();
    const result = await collectTurn(adapter.runTurn({ prompt: 'no script here', turn: 1 }));
    expect(result.error?.message).toContain('no script:NAME');
  });

  it('echoes an env var, crashes, and fails transiently until the given attempt', async () => {
    script('env', [{ echoEnv: 'SECRET_TOKEN', envelope: { step: 'success', result: 'ok' } }]);
    const { adapter } = await adapterFor({ env: { SECRET_TOKEN: 's3cr3t' } });
    const events = [];
    for await (const e of adapter.runTurn({ prompt: 'script:env', turn: 1 })) events.push(e);
    expect(events).toContainEqual({ type: 'text', text: 'SECRET_TOKEN=s3cr3t' });

    script('crash', [{ crash: { exitCode: 7, stderr: 'segfault-ish' } }]);
    const crashed = await collectTurn((await adapterFor()).adapter.runTurn({ prompt: 'script:crash', turn: 1 }));
    expect(crashed.error).toMatchObject({ code: 'process-exit', exitCode: 7, stderrTail: 'segfault-ish' });

    script('flaky', [{ failUntilAttempt: 3, envelope: { step: 'success', result: 'third time' } }]);
    const { workspace } = await adapterFor();
    const attempt = async () => {
      const executor = new LocalExecutor({ workspacePath: workspace });
      const a = driverSession(stdioJson);
      await a.start({ runId: 'r', harnessName: 's', executable: 'node', baseArgs: [harness, '--scripts', scripts], workspacePath: workspace, hostWorkspacePath: workspace, env: {}, executor, turnTimeoutMs: 20_000 });
      return collectTurn(a.runTurn({ prompt: 'script:flaky', turn: 1 }));
    };
    expect((await attempt()).error?.stderrTail).toContain('transient failure');
    expect((await attempt()).error?.stderrTail).toContain('transient failure');
    expect((await attempt()).text).toContain('third time');
  });

  it('a cancelled sleeping turn takes its whole process tree down', async () => {
    script('sleepy', [{ sleepMs: 20_000, envelope: { step: 'success', result: 'late' } }]);
    const { adapter, workspace } = await adapterFor();
    const controller = new AbortController();
    const events = [];
    let pids: number[] = [];
    for await (const event of adapter.runTurn({ prompt: 'script:sleepy', turn: 1, signal: controller.signal })) {
      events.push(event);
      if (event.type === 'activity' && event.description === 'sleeping') {
        pids = await scriptedSleepPids(workspace);
        controller.abort();
      }
    }
    expect(events.at(-1)).toMatchObject({ type: 'session-error', code: 'cancelled' });
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(processAlive(pid)).toBe(false);
  });
});
