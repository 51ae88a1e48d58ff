/**
 * A REAL harness CLI (the pinned claude) inside a Docker sandbox, through its adapter and the Docker executor,
 * against the fake vendor on the host. The container uses `openNetworkMode: 'host'` because this engine runs
 * with --bridge=none: host networking is the only way to reach the fake vendor on the host's 127.0.0.1.
 * The CLIs come from the test image (scripts/build-sandbox-image.sh puts test/e2e/clis under /opt/clis).
 */
import { driverSession } from '../support/driver-session.js';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claudeCode } from '../../src/adapters/claude-code-adapter.js';
import { collectTurn } from '../../src/adapters/fold.js';
import { DockerClient } from '../../src/sandbox/docker-client.js';
import { DockerSandboxProvider } from '../../src/sandbox/docker-provider.js';
import type { SandboxRef } from '../../src/sandbox/types.js';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { startFakeVendor, type FakeVendor } from '../e2e/fake-vendor/server.js';
import { requireEngineAndImage, testDocker, testImage } from './docker-env.js';

const root = mkdtempSync(path.join(tmpdir(), 'dh-docker-cli-'));
const docker = testDocker();
const provider = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: root, openNetworkMode: 'host' });
const secret = `sk-docker-live-${randomBytes(6).toString('hex')}`;
const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';
let ref: SandboxRef | undefined;
let vendor: FakeVendor | undefined;

beforeAll(async () => {
  await requireEngineAndImage(docker);
  const probe = await docker.run(testImage, ['test', '-x', '/opt/clis/bin/claude'], process.stdout).catch(() => undefined);
  const container = (probe as unknown[] | undefined)?.[1] as { remove(): Promise<unknown> } | undefined;
  await container?.remove();
  expect((probe as { StatusCode: number }[] | undefined)?.[0]?.StatusCode, `${testImage} has no /opt/clis/bin/claude: install test/e2e/clis and rebuild it`).toBe(0);
  vendor = await startFakeVendor({ handlers: { '/v1/messages': anthropicMessages } });
});

afterAll(async () => {
  if (ref) await provider.end(ref);
  await vendor?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('claude inside a Docker sandbox', () => {
  it('two turns: reads a workspace file with its own tool, then succeeds on the resumed session', async () => {
    ref = await provider.start({
      workflowId: `test-docker-claude-${randomBytes(3).toString('hex')}`,
      runId: 'r1',
      agent: 'claude-agent',
      identity: { tenantId: 't', userId: 'u' },
      spec: { provider: 'docker', workspaceScope: 'run', networkPolicy: 'open' },
    });
    writeFileSync(path.join(ref.hostWorkspacePath, 'notes.txt'), 'The secret word is PELICAN.\n');
    const handle = await provider.attach(ref);
    const adapter = driverSession(claudeCode);
    adapter.applyPermissionPolicy('auto');
    adapter.setSystemPrompt('End every turn with one JSON next-step envelope.');
    await adapter.start({
      runId: 'r1',
      harnessName: 'claude',
      executable: 'claude',
      baseArgs: [],
      model: 'claude-sonnet-4-5',
      workspacePath: ref.workspacePath,
      hostWorkspacePath: ref.hostWorkspacePath,
      env: { ANTHROPIC_API_KEY: secret },
      executor: handle.executor,
      baseUrl: vendor!.url,
      turnTimeoutMs: 30_000,
      settings: { maxRetries: 0 },
    });

    vendor!.script(
      { toolCalls: [{ id: 'call_docker_1', name: 'Read', input: { file_path: '/workspace/notes.txt' } }], usage: { input: 1000, output: 20 } },
      { text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000 } },
    );
    const t1 = await collectTurn(adapter.runTurn({ prompt: 'Read notes.txt, then ask to echo the secret word.', turn: 1 }));
    expect(t1.error, JSON.stringify(t1.error)).toBeUndefined();
    expect(t1.text).toBe(actionsEnvelope);
    const posts = vendor!.requests.filter((r) => r.method === 'POST');
    expect(posts[1]!.rawBody).toContain('PELICAN'); // the Read tool really ran in the container

    vendor!.script({ text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200 } });
    const t2 = await collectTurn(adapter.runTurn({ prompt: 'Action results: echo → PELICAN. Finish.', turn: 2 }));
    expect(t2.error, JSON.stringify(t2.error)).toBeUndefined();
    expect(t2.text).toBe(successEnvelope);
    expect(t2.resumed).toBe(true);
    expect(vendor!.unexpected).toEqual([]);

    // The key reached the process environment only.
    const inspected = await docker.getContainer(ref.id!).inspect();
    expect(JSON.stringify(inspected)).not.toContain(secret);
    const ps = await new DockerClient(docker).run(ref.id!, ['ps', '-o', 'args']);
    expect(ps.stdout).not.toContain(secret);
    await adapter.end();
    await handle.release();
  });
});
