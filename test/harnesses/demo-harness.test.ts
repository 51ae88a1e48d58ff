import { driverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { collectTurn } from '../../src/adapters/fold.js';
import { stdioJson } from '../../src/adapters/stdio-json-adapter.js';
import { LocalSandboxProvider, type LocalSandboxHandle } from '../../src/sandbox/index.js';

const demo = fileURLToPath(new URL('../../harnesses/demo/demo-harness.mjs', import.meta.url));
const root = mkdtempSync(path.join(tmpdir(), 'demo-harness-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The envelope inside the first ```json fence (the demo wraps it in prose, like real models do). */
function envelopeOf(text: string | undefined): Record<string, unknown> {
  const fenced = /```json\s*([\s\S]*?)```/.exec(text ?? '');
  expect(fenced, `no json fence in: ${text}`).not.toBeNull();
  return JSON.parse(fenced![1]!) as Record<string, unknown>;
}

async function session(workflowId: string, resumeSessionId?: string) {
  const provider = new LocalSandboxProvider({ root });
  const ref = await provider.start({
    workflowId, runId: 'r1', agent: 'demo', identity: { tenantId: 't', userId: 'u' },
    spec: { provider: 'local', workspaceScope: 'run', networkPolicy: 'open' },
  });
  const handle: LocalSandboxHandle = await provider.attach(ref);
  const config: HarnessSessionConfig = {
    runId: 'r1', harnessName: 'demo', executable: 'node', baseArgs: [demo], workspacePath: ref.workspacePath,
    hostWorkspacePath: ref.hostWorkspacePath, env: {}, executor: handle.executor, turnTimeoutMs: 20_000, resumeSessionId,
  };
  const adapter = driverSession(stdioJson);
  adapter.setSystemPrompt('End every turn with a JSON envelope.');
  adapter.applyPermissionPolicy('auto');
  await adapter.start(config);
  return { adapter, workspace: ref.workspacePath, handle };
}

describe('demo harness through StdioJson and the local executor', () => {
  it('asks to write NOTES.md, then reports success after resuming the session', async () => {
    const { adapter, workspace, handle } = await session('demo-two-turns');
    writeFileSync(path.join(workspace, 'README.md'), '# Widget service\nServes widgets.\n');

    const first = await collectTurn(adapter.runTurn({ prompt: 'Summarise this repository for a new engineer.', turn: 1 }));
    expect(first.error).toBeUndefined();
    expect(first.resumed).toBe(false);
    expect(first.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(first.activities).toContain('read README.md');
    expect(first.usage.input).toBeGreaterThan(0);
    expect(first.usage.output).toBeGreaterThan(0);
    const ask = envelopeOf(first.text);
    expect(ask).toMatchObject({ step: 'actions', actions: [{ name: 'write_file', params: { path: 'NOTES.md' } }] });
    const content = (ask.actions as { params: { content: string } }[])[0]!.params.content;
    expect(content).toContain('Summarise this repository');
    expect(content).toContain('README.md');
    expect(existsSync(path.join(workspace, '.demo-harness', 'sessions', `${first.sessionId}.json`))).toBe(true);

    // The workflow carries out the action and sends the results back.
    writeFileSync(path.join(workspace, 'NOTES.md'), content);
    const second = await collectTurn(adapter.runTurn({ prompt: 'Action results:\n- write_file NOTES.md: ok (wrote file)', turn: 2 }));
    expect(second.error).toBeUndefined();
    expect(second.resumed).toBe(true);
    expect(adapter.resumed).toBe(true);
    expect(second.sessionId).toBe(first.sessionId);
    expect(second.usage.cacheRead).toBeGreaterThan(0);
    const done = envelopeOf(second.text);
    expect(done.step).toBe('success');
    expect(String(done.result)).toContain('NOTES.md');
    expect(readFileSync(path.join(workspace, 'NOTES.md'), 'utf8')).toContain('# Notes');

    await adapter.end();
    await handle.release();
  });

  it('answers a feedback turn with a valid envelope', async () => {
    const { adapter } = await session('demo-feedback');
    await collectTurn(adapter.runTurn({ prompt: 'Tidy up.', turn: 1 }));
    const retry = await collectTurn(adapter.runTurn({ prompt: 'Your last reply was not a valid envelope: missing "step".', turn: 2 }));
    expect(envelopeOf(retry.text)).toMatchObject({ step: 'actions', actions: [{ name: 'write_file' }] });
    await adapter.end();
  });

  it('fails with resume-failed for a session it does not know', async () => {
    const { adapter } = await session('demo-unknown', 'no-such-session');
    const result = await collectTurn(adapter.runTurn({ prompt: 'Continue.', turn: 1 }));
    expect(result.text).toBeUndefined();
    expect(result.error).toMatchObject({ code: 'resume-failed' });
    expect(result.error?.message).toContain('no-such-session');
  });
});
