/** The bundled demo harness (stdio-JSON) run inside a container through the Docker executor, two turns. */
import { driverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectTurn } from '../../src/adapters/fold.js';
import { stdioJson } from '../../src/adapters/stdio-json-adapter.js';
import { DockerSandboxProvider } from '../../src/sandbox/docker-provider.js';
import type { SandboxRef } from '../../src/sandbox/types.js';
import { requireEngineAndImage, testDocker, testImage } from './docker-env.js';

const harnesses = fileURLToPath(new URL('../../harnesses', import.meta.url));
const root = mkdtempSync(path.join(tmpdir(), 'dh-docker-demo-'));
const docker = testDocker();
const provider = new DockerSandboxProvider({
  docker,
  image: testImage,
  workspaceRoot: root,
  readOnlyMounts: [{ host: harnesses, container: '/opt/durable-harness/harnesses' }],
});
let ref: SandboxRef | undefined;

beforeAll(() => requireEngineAndImage(docker));
afterAll(async () => {
  if (ref) await provider.end(ref);
  rmSync(root, { recursive: true, force: true });
});

function envelopeOf(text: string | undefined): Record<string, unknown> {
  const fenced = /```json\s*([\s\S]*?)```/.exec(text ?? '');
  expect(fenced, `no json fence in: ${text}`).not.toBeNull();
  return JSON.parse(fenced![1]!) as Record<string, unknown>;
}

describe('demo harness inside a Docker sandbox', () => {
  it('runs two turns in the container (network none), resuming its session from the workspace', async () => {
    ref = await provider.start({
      workflowId: `test-docker-demo-${randomBytes(3).toString('hex')}`,
      runId: 'r1',
      agent: 'demo',
      identity: { tenantId: 't', userId: 'u' },
      spec: { provider: 'docker', workspaceScope: 'run', networkPolicy: 'none' },
    });
    const handle = await provider.attach(ref);
    writeFileSync(path.join(ref.hostWorkspacePath, 'README.md'), '# Widget service\nServes widgets.\n');
    const config: HarnessSessionConfig = {
      runId: 'r1',
      harnessName: 'demo',
      executable: 'node',
      baseArgs: ['/opt/durable-harness/harnesses/demo/demo-harness.mjs'],
      workspacePath: ref.workspacePath,
      hostWorkspacePath: ref.hostWorkspacePath,
      env: {},
      executor: handle.executor,
      turnTimeoutMs: 20_000,
    };
    const adapter = driverSession(stdioJson);
    adapter.setSystemPrompt('End every turn with a JSON envelope.');
    adapter.applyPermissionPolicy('auto');
    await adapter.start(config);

    const first = await collectTurn(adapter.runTurn({ prompt: 'Summarise this repository.', turn: 1 }));
    expect(first.error).toBeUndefined();
    expect(first.activities).toContain('read README.md');
    const ask = envelopeOf(first.text);
    expect(ask).toMatchObject({ step: 'actions', actions: [{ name: 'write_file', params: { path: 'NOTES.md' } }] });
    // The session store lives in the workspace, written by the container user and visible on the host.
    expect(existsSync(path.join(ref.hostWorkspacePath, '.demo-harness', 'sessions', `${first.sessionId}.json`))).toBe(true);

    const content = (ask.actions as { params: { content: string } }[])[0]!.params.content;
    writeFileSync(path.join(ref.hostWorkspacePath, 'NOTES.md'), content);
    const second = await collectTurn(adapter.runTurn({ prompt: 'Action results:\n- write_file NOTES.md: ok', turn: 2 }));
    expect(second.error).toBeUndefined();
    expect(second.resumed).toBe(true);
    expect(second.sessionId).toBe(first.sessionId);
    expect(envelopeOf(second.text).step).toBe('success');
    expect(readFileSync(path.join(ref.hostWorkspacePath, 'NOTES.md'), 'utf8')).toContain('# Notes');
    await adapter.end();
    await handle.release();
  });
});
