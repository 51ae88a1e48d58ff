/**
 * The Docker sandbox at the Temporal level: real `agentRun` workflows on the test Temporal dev server, a real
 * worker whose runs use the Docker provider, and the real engine (`.ci/docker-engine.sh`). A missing engine,
 * image or CLI FAILS; nothing is skipped.
 *
 * Harness paths in the catalog are CONTAINER paths. The test image (scripts/build-sandbox-image.sh) has node
 * at /usr/local/bin/node and the pinned CLIs on PATH (/opt/clis/bin). The repo's `harnesses/` is mounted
 * read-only at /opt/durable-harness/harnesses (where docker/sandbox.Dockerfile puts it in the real image);
 * the scripted test harness and this file's scripts are mounted read-only under /opt/dh-test.
 *
 * The provider uses `openNetworkMode: 'host'`: this engine runs with --bridge=none, so host networking is the
 * only way for an `open` container to reach the fake vendor on the host's 127.0.0.1 (tests only; see
 * docs/docker-sandbox.md). Agents with policy `none` still get `NetworkMode: 'none'`.
 *
 * Process checks use host pids from `docker top` (the engine runs on this machine), mapped to the pids the
 * harness wrote inside the container through /proc/<pid>/status NSpid.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type Dockerode from 'dockerode';
import { DockerClient } from '../../src/sandbox/docker-client.js';
import { DockerSandboxProvider, dockerLabels } from '../../src/sandbox/docker-provider.js';
import type { SandboxProvider } from '../../src/sandbox/types.js';
import { anthropicMessages } from '../e2e/fake-vendor/anthropic-messages.js';
import { startFakeVendor, type FakeVendor } from '../e2e/fake-vendor/server.js';
import { processAlive, waitUntilGone } from '../support/processes.js';
import { act, ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import { requireEngineAndImage, testDocker, testImage } from './docker-env.js';

const docker = testDocker();
const client = new DockerClient(docker);
const book = scriptBook();
// The scripts directory is mkdtemp'd 0700 and owned by root: the container user (1000) must read it.
chmodSync(book.dir, 0o755);

const inContainer = {
  node: '/usr/local/bin/node',
  demo: '/opt/durable-harness/harnesses/demo/demo-harness.mjs',
  scripted: '/opt/dh-test/harnesses/scripted-harness.mjs',
  scripts: '/opt/dh-test/scripts',
  workspace: '/workspace',
};
const readOnlyMounts = [
  { host: path.join(repoRoot, 'harnesses'), container: '/opt/durable-harness/harnesses' },
  { host: path.join(repoRoot, 'test', 'harnesses'), container: '/opt/dh-test/harnesses' },
  { host: book.dir, container: inContainer.scripts },
];
const sandboxes = (dataDir: string): Record<string, SandboxProvider> => ({
  docker: new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: path.join(dataDir, 'workspaces'), openNetworkMode: 'host', readOnlyMounts }),
});

/** A repository for runs on one: a local bare remote with two files on main (made in beforeAll). */
const gitScratch = mkdtempSync(path.join(os.tmpdir(), 'dh-docker-repo-'));
const remote = path.join(gitScratch, 'remote.git');
const hookMarker = path.join(gitScratch, 'hook-ran');
const plainGit = (...args: string[]) =>
  execFileSync('git', args, { cwd: gitScratch, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: gitScratch, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' } });
function seedRemote(): void {
  const seed = path.join(gitScratch, 'seed');
  mkdirSync(path.join(seed, 'src'), { recursive: true });
  writeFileSync(path.join(seed, 'README.md'), '# boxed\n');
  writeFileSync(path.join(seed, 'src', 'app.js'), 'console.log("v1");\n');
  writeFileSync(path.join(seed, '.gitignore'), '.scripted/\n');
  plainGit('init', '--quiet', '-b', 'main', seed);
  plainGit('-C', seed, 'add', '.');
  plainGit('-C', seed, '-c', 'user.name=seed', '-c', 'user.email=seed@example.com', 'commit', '--quiet', '-m', 'seed');
  plainGit('clone', '--quiet', '--bare', seed, remote);
}

const secret = `sk-docker-wf-${Math.random().toString(36).slice(2)}-secret`;
const vendorKey = `sk-docker-wf-vendor-${Math.random().toString(36).slice(2)}`;
const none = { provider: 'docker', networkPolicy: 'none' };

function catalogFor(vendorUrl: string): Record<string, unknown> {
  return scriptedCatalog(book, {
    harnesses: [
      {
        name: 'scripted-docker',
        driverClass: 'StdioJson',
        executable: inContainer.node,
        args: [inContainer.scripted, '--scripts', inContainer.scripts],
        active: true,
        vendor: 'testvendor',
        model: 'scripted-1',
        prices: { input: 1, output: 2 },
        turnTimeoutMs: 60_000,
      },
      {
        name: 'demo-docker',
        driverClass: 'StdioJson',
        executable: inContainer.node,
        args: [inContainer.demo],
        active: true,
        vendor: 'demo',
        model: 'demo-1',
        prices: { input: 1.0, output: 4.0, cacheRead: 0.1, cacheWrite: 1.25 },
        turnTimeoutMs: 20_000,
      },
      {
        name: 'claude-docker',
        driverClass: 'ClaudeCode',
        executable: 'claude', // on PATH inside the image: /opt/clis/bin/claude
        active: true,
        vendor: 'anthropic',
        model: 'claude-sonnet-4-5',
        apiKeyEnv: 'ANTHROPIC_API_KEY',
        baseUrl: vendorUrl,
        settings: { maxRetries: 0 },
        turnTimeoutMs: 30_000,
        prices: { input: 3.0, output: 15.0, cacheRead: 0.3, cacheWrite: 3.75 },
      },
    ],
    agents: [
      { name: 'demo-boxed', harness: 'demo-docker', systemPrompt: 'End every turn with a JSON envelope.', actions: ['write_file', 'read_file', 'list_files'], sandbox: none },
      { name: 'scripted-boxed', harness: 'scripted-docker', actions: ['echo'], sandbox: none, turnAttempts: 2 },
      { name: 'repo-boxed', harness: 'scripted-docker', actions: ['echo'], sandbox: none, repository: { source: remote, ref: 'main', deliver: 'commit' } },
      { name: 'doomed-boxed', harness: 'scripted-docker', sandbox: none, turnAttempts: 1, operatorTimeoutMs: 1000 },
      {
        name: 'granted-boxed',
        harness: 'scripted-docker',
        sandbox: none,
        credentials: [{ env: 'SCRIPTED_API_KEY', from: 'SERVER_SECRET_FOR_TESTS' }],
      },
      {
        name: 'claude-boxed',
        harness: 'claude-docker',
        systemPrompt: 'Read the workspace with your own tools; use actions for everything else.',
        permissions: 'auto',
        credentials: [{ env: 'ANTHROPIC_API_KEY', from: 'FAKE_VENDOR_KEY' }],
        actions: ['echo'],
        sandbox: { provider: 'docker', networkPolicy: 'open' },
        guardrails: { maxIterations: 4, maxTokens: 100_000, maxCostUsd: 1, maxWallTimeMs: 120_000 },
      },
    ],
  });
}

let vendor: FakeVendor;
let catalog: Record<string, unknown>;
let w: TestWorker;
const env = { SERVER_SECRET_FOR_TESTS: secret, FAKE_VENDOR_KEY: vendorKey };
const ourWorkflows: string[] = [];

beforeAll(async () => {
  await requireEngineAndImage(docker);
  const probe = await docker.run(testImage, ['test', '-x', '/opt/clis/bin/claude'], process.stdout).catch(() => undefined);
  const probeContainer = (probe as unknown[] | undefined)?.[1] as { remove(): Promise<unknown> } | undefined;
  await probeContainer?.remove();
  const probeCode = (probe as { StatusCode: number }[] | undefined)?.[0]?.StatusCode;
  expect(probeCode, `${testImage} has no /opt/clis/bin/claude: run npm ci in test/e2e/clis and rebuild the image`).toBe(0);
  vendor = await startFakeVendor({ handlers: { '/v1/messages': anthropicMessages } });
  seedRemote();
  catalog = catalogFor(vendor.url);
  w = await startTestWorker({ catalog, env, sandboxes });
});

afterAll(async () => {
  await w?.close();
  await vendor?.close();
  if (w) rmSync(w.dataDir, { recursive: true, force: true });
  // Whatever happened above, leave no container behind; then say if one had been left.
  const leftovers = (await Promise.all(ourWorkflows.map(containersOf))).flat();
  await Promise.all(leftovers.map((c) => client.remove(c.Id)));
  rmSync(book.dir, { recursive: true, force: true });
  rmSync(gitScratch, { recursive: true, force: true });
  expect(leftovers.map((c) => c.Names[0])).toEqual([]);
});

/** Every container (running or not) the engine has for a workflow, by its label. */
function containersOf(workflowId: string): Promise<Dockerode.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { label: [`${dockerLabels.workflowId}=${workflowId}`] } });
}

/** A workflow id this file owns: the afterAll sweep removes (and reports) any container it left. */
function newWorkflowId(label: string): string {
  const id = testWorkflowId(`docker-${label}`);
  ourWorkflows.push(id);
  return id;
}

const workspaceOf = (dataDir: string, workflowId: string) => path.join(dataDir, 'workspaces', 'runs', workflowId);

/** One engine event of a run's container, in the engine's order. */
interface ContainerEvent {
  /** `create`, `start`, `exec_start`, `exec_die`, `kill`, `die`, `destroy`, ... */
  readonly action: string;
  /** The container id. */
  readonly id: string;
  /** For exec events: the exec and (exec_start) its command line, (exec_die) its exit code. */
  readonly execId?: string;
  readonly command?: string;
  readonly exitCode?: string;
  readonly timeMs: number;
}

/** Engine events for the workflow's containers since `sinceMs`, oldest first. */
async function containerEvents(workflowId: string, sinceMs: number): Promise<ContainerEvent[]> {
  // The engine parses `until` as "<seconds>.<nanoseconds>": now, to the millisecond, so the stream ends at once.
  const now = Date.now();
  const until = `${Math.floor(now / 1000)}.${String((now % 1000) * 1e6).padStart(9, '0')}`;
  const stream = (await docker.getEvents({
    since: Math.floor(sinceMs / 1000) - 1,
    until: until as unknown as number,
    filters: { type: ['container'], label: [`${dockerLabels.workflowId}=${workflowId}`] },
  })) as NodeJS.ReadableStream;
  let text = '';
  for await (const chunk of stream) text += chunk.toString();
  type Raw = { Action: string; id: string; timeNano: number; Actor: { Attributes: Record<string, string> } };
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as Raw)
    .map((e) => {
      // Exec events read "exec_start: <command line>".
      const [action, ...command] = e.Action.split(': ');
      return {
        action: action!,
        id: e.id,
        execId: e.Actor.Attributes.execID,
        command: command.length > 0 ? command.join(': ') : undefined,
        exitCode: e.Actor.Attributes.exitCode,
        timeMs: e.timeNano / 1e6,
      };
    });
}

/** Asserts the run had exactly one container, and that it is gone: created once, destroyed once. */
async function expectOneContainerCreatedAndRemoved(workflowId: string, sinceMs: number): Promise<string> {
  expect(await containersOf(workflowId)).toEqual([]);
  const events = await containerEvents(workflowId, sinceMs);
  const created = events.filter((e) => e.action === 'create');
  const destroyed = events.filter((e) => e.action === 'destroy');
  expect(created, JSON.stringify(events)).toHaveLength(1);
  expect(destroyed.map((e) => e.id)).toEqual([created[0]!.id]);
  return created[0]!.id;
}

/**
 * Watches a run's containers while it runs (the engine's list, every 25 ms): which container ids and network
 * modes were seen. Stop it with the returned function.
 */
function watchContainers(workflowId: string): () => Promise<{ ids: Set<string>; networkModes: Set<string> }> {
  const ids = new Set<string>();
  const networkModes = new Set<string>();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      for (const c of await containersOf(workflowId)) {
        ids.add(c.Id);
        networkModes.add(c.HostConfig.NetworkMode);
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  })();
  return async () => {
    stopped = true;
    await loop;
    return { ids, networkModes };
  };
}

async function waitForFile(file: string, timeoutMs = 15_000): Promise<void> {
  await expect.poll(() => existsSync(file) && readFileSync(file, 'utf8').trim() !== '', { timeout: timeoutMs, interval: 20 }).toBe(true);
}

/** The one container of a running run (it must exist and be the only one). */
async function theContainer(workflowId: string): Promise<Dockerode.ContainerInfo> {
  const list = await containersOf(workflowId);
  expect(list.map((c) => c.Names[0])).toHaveLength(1);
  return list[0]!;
}

/** Host pid → pid inside its pid namespace (last NSpid field). */
function namespacePid(hostPid: number): number | undefined {
  try {
    const line = readFileSync(`/proc/${hostPid}/status`, 'utf8').split('\n').find((l) => l.startsWith('NSpid:'));
    return line ? Number(line.trim().split(/\s+/).at(-1)) : undefined;
  } catch {
    return undefined;
  }
}

/** Host pids (from `docker top`) of the container's processes whose in-container pids are `inside`. */
async function hostPidsOf(containerId: string, inside: readonly number[]): Promise<number[]> {
  const top = (await docker.getContainer(containerId).top()) as { Titles: string[]; Processes: string[][] };
  const column = top.Titles.indexOf('PID');
  const hostPids = top.Processes.map((row) => Number(row[column]));
  const found = hostPids.filter((pid) => inside.includes(namespacePid(pid) ?? -1));
  expect(found, `container pids ${inside.join(', ')} among host pids ${hostPids.join(', ')} (docker top)`).toHaveLength(inside.length);
  return found;
}

/** The pids the scripted harness wrote while sleeping: itself and its `sleep` grandchild (container pids). */
async function sleepingPidsInside(workspace: string): Promise<number[]> {
  const file = (f: string) => path.join(workspace, '.scripted', f);
  await waitForFile(file('child.pid'));
  return ['sleeping.pid', 'child.pid'].map((f) => Number(readFileSync(file(f), 'utf8')));
}

describe('agentRun with a Docker sandbox (real Temporal dev server, real engine)', () => {
  it('demo harness: actions then success on the resumed session, NOTES.md lands in the host workspace, network none', async () => {
    const workflowId = newWorkflowId('demo');
    const since = Date.now();
    const stopWatching = watchContainers(workflowId);
    const run = await w.start({ agent: 'demo-boxed', task: 'Summarise this workspace into NOTES.md', workflowId });
    const result = await run.result();
    const seen = await stopWatching();
    expect(result).toMatchObject({ status: 'succeeded', iterations: 2 });
    expect(result.externalSessionId).toBeTruthy();

    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.map((r) => r.turn)).toEqual([1, 2]);
    expect(rows.map((r) => r.resumed)).toEqual([false, true]);
    expect(rows[1]!.externalSessionId).toBe(rows[0]!.externalSessionId);
    const workspace = workspaceOf(w.dataDir, workflowId);
    // The harness ran in the container: its session store was written there by uid 1000 into the bind mount.
    expect(existsSync(path.join(workspace, '.demo-harness', 'sessions', `${result.externalSessionId}.json`))).toBe(true);
    // The write_file action ran on the worker, into the same workspace the container sees.
    expect(readFileSync(path.join(workspace, 'NOTES.md'), 'utf8')).toMatch(/^# Notes[\s\S]*Summarise this workspace/);

    expect([...seen.ids]).toHaveLength(1);
    expect([...seen.networkModes]).toEqual(['none']);
    expect(await expectOneContainerCreatedAndRemoved(workflowId, since)).toBe([...seen.ids][0]);
  });

  it('real claude CLI: reads a workspace file with its own tool in the container, asks for an action, resumes and succeeds', async () => {
    const workflowId = newWorkflowId('claude');
    const since = Date.now();
    const workspace = workspaceOf(w.dataDir, workflowId);
    mkdirSync(workspace, { recursive: true });
    writeFileSync(path.join(workspace, 'notes.txt'), 'The secret word is PELICAN.\n');
    const actionsEnvelope = '{"step":"actions","actions":[{"name":"echo","params":{"text":"PELICAN"}}]}';
    const successEnvelope = '{"step":"success","result":"the secret word is PELICAN"}';
    const before = vendor.requests.length;
    vendor.script(
      // The path is the container's: the CLI's Read tool runs inside.
      { toolCalls: [{ id: 'call_dwf_1', name: 'Read', input: { file_path: `${inContainer.workspace}/notes.txt` } }], usage: { input: 1000, output: 20 } },
      { text: actionsEnvelope, usage: { input: 100, output: 30, cacheRead: 1000 } },
      { text: successEnvelope, usage: { input: 40, output: 12, cacheRead: 1200 } },
    );
    const stopWatching = watchContainers(workflowId);
    const run = await w.start({ agent: 'claude-boxed', task: 'Find the secret word in notes.txt and echo it.', workflowId });
    const result = await run.result();
    const seen = await stopWatching();
    expect(result, JSON.stringify(result)).toMatchObject({ status: 'succeeded', result: 'the secret word is PELICAN', iterations: 2 });

    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.map((r) => r.resumed)).toEqual([false, true]);
    // Turn 2 continued turn 1's session in a fork of it (a new id; the history carried over, see below).
    expect(rows[1]!.externalSessionId).not.toBe(rows[0]!.externalSessionId);
    // The price table is the cost authority; claude's own figure is recorded beside it.
    expect(rows.every((r) => r.costSource === 'price-table' && r.costUsd > 0 && (r.harnessCostUsd ?? 0) > 0)).toBe(true);
    // claude's session store is in the workspace, under the project key of its cwd INSIDE the container
    // (/workspace → -workspace): it ran there, and the store it resumed from survives the container.
    expect(existsSync(path.join(workspace, '.home', 'claude', 'projects', '-workspace', `${result.externalSessionId}.jsonl`))).toBe(true);
    const posts = vendor.requests.slice(before).filter((r) => r.method === 'POST');
    expect(posts).toHaveLength(3);
    expect(posts[1]!.rawBody).toContain('The secret word is PELICAN.'); // the Read tool really read the bind mount
    expect(posts[2]!.rawBody).toContain('The secret word is PELICAN.'); // the resumed turn carried turn 1's history
    expect(vendor.unexpected).toEqual([]);

    expect([...seen.ids]).toHaveLength(1);
    expect([...seen.networkModes]).toEqual(['host']);
    await expectOneContainerCreatedAndRemoved(workflowId, since);
  });

  it('a run on a repository: the container user edits the checkout, the worker commits it outside the container; a hook planted in the workspace never runs', async () => {
    const workflowId = newWorkflowId('repo');
    const since = Date.now();
    const task = book.write(workflowId, [
      {
        writeFiles: {
          'README.md': '# boxed\nedited in the container\n',
          'src/new.js': 'export const boxed = true;\n',
          '.git/hooks/pre-commit': `#!/bin/sh\ntouch ${hookMarker}\n`,
        },
        executables: ['.git/hooks/pre-commit'],
        ...ok('Edit the README in a container'),
      },
    ]);
    const result = await (await w.start({ agent: 'repo-boxed', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    const d = result.deliverable!;
    expect(d).toMatchObject({ state: 'delivered', mode: 'commit', branch: `durable-harness/${workflowId}`, files: 2, base: plainGit('--git-dir', remote, 'rev-parse', 'main').trim() });
    const patch = (await w.ledger.getBlob(d.patch!.blob))!;
    expect(patch).toContain('+edited in the container');
    expect(patch).toContain('+export const boxed = true;');
    expect(patch).not.toMatch(/^diff --git a\/\.git\//m);
    expect(existsSync(hookMarker)).toBe(false);
    // The run's git directory went with the session.
    expect(readdirSync(path.join(w.dataDir, 'git', 'runs'))).toEqual([]);
    await expectOneContainerCreatedAndRemoved(workflowId, since);
  });

  it('a cancelled run kills the harness inside the container within 2 s and leaves no container behind', async () => {
    const workflowId = newWorkflowId('cancel');
    const since = Date.now();
    const task = book.write('docker-cancel', [{ sleepMs: 60_000, ...ok() }]);
    const run = await w.start({ agent: 'scripted-boxed', task, workflowId });
    const inside = await sleepingPidsInside(workspaceOf(w.dataDir, workflowId));
    const container = await theContainer(workflowId);
    const hostPids = await hostPidsOf(container.Id, inside);
    expect(hostPids.every(processAlive)).toBe(true);

    const cancelledAt = Date.now();
    await run.cancel('operator changed their mind');
    expect(await waitUntilGone(hostPids, 2000)).toBeLessThan(2000);
    expect(await run.result()).toMatchObject({ status: 'cancelled', reason: 'operator changed their mind' });
    await expectOneContainerCreatedAndRemoved(workflowId, since);

    // The engine's own record: the harness exec died of the executor's SIGTERM (143) within 2 s of the cancel,
    // BEFORE endSession killed and removed the container (137 would be the container's SIGKILL).
    const events = await containerEvents(workflowId, since);
    const harnessExec = events.find((e) => e.action === 'exec_start' && e.command?.includes('scripted-harness.mjs'));
    expect(harnessExec, JSON.stringify(events)).toBeDefined();
    const harnessDied = events.findIndex((e) => e.action === 'exec_die' && e.execId === harnessExec!.execId);
    expect(events[harnessDied]?.exitCode).toBe('143');
    expect(events[harnessDied]!.timeMs - cancelledAt).toBeLessThan(2000);
    expect(harnessDied).toBeLessThan(events.findIndex((e) => e.action === 'kill'));
  });

  it('a failed run (turn keeps failing, no operator) also removes its container', async () => {
    const workflowId = newWorkflowId('fail');
    const since = Date.now();
    const task = book.write('docker-fail', [{ error: { message: 'vendor exploded', code: 'vendor-error' } }]);
    const result = await (await w.start({ agent: 'doomed-boxed', task, workflowId })).result();
    expect(result).toMatchObject({ status: 'failed', failureType: 'OperatorTimeout' });
    expect(result.reason).toMatch(/vendor exploded/);
    await expectOneContainerCreatedAndRemoved(workflowId, since);
  });

  it('no secret in the container config or in any argv, while the harness process has it in its environment', async () => {
    const workflowId = newWorkflowId('secret');
    const since = Date.now();
    const task = book.write('docker-secret', [{ echoEnv: 'SCRIPTED_API_KEY', sleepMs: 1500, raw: '{"step":"success","result":"key is ${env:SCRIPTED_API_KEY}"}' }]);
    const run = await w.start({ agent: 'granted-boxed', task, workflowId });
    const [harnessPid] = await sleepingPidsInside(workspaceOf(w.dataDir, workflowId));
    const container = await theContainer(workflowId);

    // Read /proc inside the container, as the sandbox user, while the turn is running.
    const environ = await client.run(container.Id, ['cat', `/proc/${harnessPid}/environ`], { user: '1000:1000' });
    const cmdline = await client.run(container.Id, ['cat', `/proc/${harnessPid}/cmdline`], { user: '1000:1000' });
    const allArgs = await client.run(container.Id, ['ps', '-o', 'pid,args']);
    expect(environ.code).toBe(0);
    expect(environ.stdout.split('\0')).toContain(`SCRIPTED_API_KEY=${secret}`);
    expect(cmdline.code).toBe(0);
    expect(cmdline.stdout.split('\0')).toContain(inContainer.scripted); // it is the harness's argv we read
    expect(cmdline.stdout).not.toContain(secret);
    expect(allArgs.stdout).toContain('scripted-harness.mjs');
    expect(allArgs.stdout).not.toContain(secret);

    const inspected = await docker.getContainer(container.Id).inspect();
    expect(inspected.Config.Env.join('\n')).not.toContain('SCRIPTED_API_KEY');
    expect(JSON.stringify(inspected)).not.toContain(secret);
    // The execs the engine keeps for the container (the harness's among them) do not show the secret either.
    expect(inspected.ExecIDs?.length).toBeGreaterThan(0);
    for (const execId of inspected.ExecIDs ?? []) {
      const exec = await docker.getExec(execId).inspect().catch(() => undefined);
      expect(JSON.stringify(exec ?? {})).not.toContain(secret);
    }

    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'key is [REDACTED]' });
    await expectOneContainerCreatedAndRemoved(workflowId, since);
    // The engine's event log (which records every exec's command line) never saw it.
    const events = await containerEvents(workflowId, since);
    expect(events.some((e) => e.command?.includes('scripted-harness.mjs'))).toBe(true);
    expect(JSON.stringify(events)).not.toContain(secret);
  });
});

it('a worker stopped mid-turn and restarted (same data dir and task queue) finishes the run in the SAME container', async () => {
  const workflowId = newWorkflowId('restart');
  const since = Date.now();
  // The worker drains in-flight activities for its shutdownGraceTime (5 s) before cancelling them: turn 2
  // sleeps longer than that, so the stop really interrupts it and the new worker has to retry it.
  const sleepMs = 7000;
  const task = book.write('docker-restart', [
    act({ name: 'echo', params: { text: 'one' } }),
    { sleepMs, ...act({ name: 'echo', params: { text: 'two' } }) },
    ok('finished elsewhere'),
  ]);
  const first = await startTestWorker({ catalog, env, sandboxes, taskQueue: `docker-restart-${workflowId}` });
  let second: TestWorker | undefined;
  try {
    const run = await first.start({ agent: 'scripted-boxed', task, workflowId });
    const workspace = workspaceOf(first.dataDir, workflowId);
    const inside = await sleepingPidsInside(workspace);
    const before = await theContainer(workflowId);
    const hostPids = await hostPidsOf(before.Id, inside);
    const sleepingSince = Date.now();

    await first.stopWorker();
    // The stopped worker killed its turn inside the container before the sleep was over (interrupted, not
    // finished); the container itself stays for the next worker.
    await waitUntilGone(hostPids, 1000);
    expect(Date.now() - sleepingSince).toBeLessThan(sleepMs);
    expect((await first.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.turn === 2 && e.type === 'turn-complete')).toEqual([]);
    const during = await theContainer(workflowId);
    expect(during.Id).toBe(before.Id);
    expect(during.State).toBe('running');
    rmSync(path.join(workspace, '.scripted', 'sleeping.pid'));
    rmSync(path.join(workspace, '.scripted', 'child.pid'));

    second = await startTestWorker({ catalog, env, sandboxes, taskQueue: first.taskQueue, dataDir: first.dataDir });
    // The retried turn 2 sleeps again: catch it running, and see where.
    const insideAgain = await sleepingPidsInside(workspace);
    const after = await theContainer(workflowId);
    expect(after.Id).toBe(before.Id);
    await hostPidsOf(after.Id, insideAgain); // the retried harness runs in that same container

    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'finished elsewhere', iterations: 3 });
    // The interrupted attempt keeps its own row (unused); the turn's result came from the retry.
    expect((await second.ledger.listPromptRuns(workflowId)).map((r) => [r.turn, r.status, r.outputUsed])).toEqual([
      [1, 'succeeded', true],
      [2, 'cancelled', false],
      [2, 'succeeded', true],
      [3, 'succeeded', true],
    ]);
    // Turn 2 ran twice: the interrupted attempt and the new worker's retry (which first killed leftovers).
    expect((await second.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.turn === 2 && e.type === 'retry')).toHaveLength(1);
    // Across both workers the engine created exactly one container for the run, and removed it at the end.
    expect(await expectOneContainerCreatedAndRemoved(workflowId, since)).toBe(before.Id);
  } finally {
    await first.close();
    await second?.close();
    rmSync(first.dataDir, { recursive: true, force: true });
  }
});
