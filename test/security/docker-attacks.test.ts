/**
 * The Docker sandbox boundary against a hostile harness, through the workflow on a real Temporal server and
 * the real engine: a symlink race inside the container during thousands of actions, links planted where a
 * reused workspace is prepared, planted pidfiles, children that leave the turn's process group, the reaper
 * next to another deployment, and a key in every field a harness reports.
 *
 * The race's flipper runs in the container as the sandbox user. Each turn-end sweep kills it (which is the
 * point of the sweep); the test starts it again at once, so it flips all through the actions — the attacker
 * that survived anyway.
 */
import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { DefaultLogger, Runtime, type LogEntry } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ActivityDeps } from '../../src/activities/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { decidePendingApproval } from '../../src/permissions/index.js';
import { DockerClient } from '../../src/sandbox/docker-client.js';
import { DockerSandboxProvider, dockerLabels } from '../../src/sandbox/docker-provider.js';
import type { SandboxProvider, SandboxStartRequest } from '../../src/sandbox/types.js';
import { reapClosedRunContainers } from '../../src/worker.js';
import { requireEngineAndImage, testDocker, testImage } from '../docker/docker-env.js';
import { processAlive, waitUntilGone } from '../support/processes.js';
import { act, ok, scriptBook, scriptedCatalog, type ScriptStep } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import { actionOutcomes, historyText, ledgerBytes, makeCanary, recordFigures } from './support.js';

const logs: LogEntry[] = [];
Runtime.install({ logger: new DefaultLogger('DEBUG', (entry) => logs.push(entry)) });

const docker = testDocker();
const client = new DockerClient(docker);
const book = scriptBook();
chmodSync(book.dir, 0o755);
const secret = `sk-docker-${Math.random().toString(36).slice(2)}-${Date.now().toString(36)}`;

const inContainer = {
  node: '/usr/local/bin/node',
  scripted: '/opt/dh-test/harnesses/scripted-harness.mjs',
  scripts: '/opt/dh-test/scripts',
  flipper: '/opt/dh-security/flipper.mjs',
};
const readOnlyMounts = [
  { host: path.join(repoRoot, 'test', 'harnesses'), container: '/opt/dh-test/harnesses' },
  { host: path.join(repoRoot, 'test', 'security'), container: '/opt/dh-security' },
  { host: book.dir, container: inContainer.scripts },
];
// Its own deployment: other workers sharing this engine (other test files, other checkouts) never reap these.
const sandboxes = (dataDir: string): Record<string, SandboxProvider> => ({
  docker: new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: path.join(dataDir, 'workspaces'), readOnlyMounts, deployment: 'security-tests' }),
});
const boxed = { provider: 'docker', networkPolicy: 'none' };

const catalog = scriptedCatalog(book, {
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
  ],
  agents: [
    { name: 'racer-boxed', harness: 'scripted-docker', actions: ['write_file', 'read_file', 'list_files'], sandbox: boxed, guardrails: { maxIterations: 40, maxWallTimeMs: 900_000 } },
    { name: 'reused-boxed', harness: 'scripted-docker', sandbox: { ...boxed, workspaceScope: 'agent' } },
    { name: 'planter-boxed', harness: 'scripted-docker', actions: ['write_file'], sandbox: boxed, turnAttempts: 2 },
    { name: 'escaper-boxed', harness: 'scripted-docker', actions: ['echo'], sandbox: boxed },
    { name: 'gated-boxed', harness: 'scripted-docker', actions: ['echo'], sandbox: boxed, permissions: { posture: 'strict', allow: ['tool:bash'] } },
    { name: 'leaky-boxed', harness: 'scripted-docker', actions: ['read_file'], sandbox: boxed, credentials: [{ env: 'VENDOR_KEY', from: 'TEAM_KEY' }] },
  ],
});

let w: TestWorker;
const ourWorkflows: string[] = [];

beforeAll(async () => {
  await requireEngineAndImage(docker);
  w = await startTestWorker({ catalog, env: {}, sandboxes, credentials: new MemoryCredentialStore({ TEAM_KEY: secret }) });
});

afterAll(async () => {
  await w?.close();
  const leftovers = (await Promise.all(ourWorkflows.map(containersOf))).flat();
  await Promise.all(leftovers.map((c) => client.remove(c.Id)));
});

function containersOf(workflowId: string): Promise<Dockerode.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { label: [`${dockerLabels.workflowId}=${workflowId}`] } });
}

function newWorkflowId(label: string): string {
  const id = testWorkflowId(`sec-docker-${label}`);
  ourWorkflows.push(id);
  return id;
}

/**
 * The run's container, named rather than by id: should a start under load fail and be retried, the provider
 * removes the half-started container and creates another under the same name.
 */
async function theContainer(workflowId: string): Promise<{ Id: string; Names: string[] }> {
  await expect.poll(async () => (await containersOf(workflowId)).filter((c) => c.State === 'running').length, { timeout: 30_000, interval: 50 }).toBe(1);
  const name = (await containersOf(workflowId)).find((c) => c.State === 'running')!.Names[0]!;
  return { Id: name.slice(1), Names: [name] };
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
async function hostPidsIn(containerId: string, inside: readonly number[]): Promise<number[]> {
  const top = (await docker.getContainer(containerId).top()) as { Titles: string[]; Processes: string[][] };
  const column = top.Titles.indexOf('PID');
  const found = top.Processes.map((row) => Number(row[column])).filter((pid) => inside.includes(namespacePid(pid) ?? -1));
  expect(found).toHaveLength(inside.length);
  return found;
}

async function waitForFile(file: string, timeoutMs = 30_000): Promise<void> {
  await expect.poll(() => existsSync(file) && readFileSync(file, 'utf8').trim() !== '', { timeout: timeoutMs, interval: 20 }).toBe(true);
}

describe('symlink race inside the container', () => {
  it('thousands of actions while a process in the container flips a directory and a link: nothing outside the workspace, no owner changed', { timeout: 900_000 }, async () => {
    const workflowId = newWorkflowId('race');
    const workspace = path.join(w.dataDir, 'workspaces', 'runs', workflowId);
    // The arena is writable for the flipper's uid; the worker only prepares the workspace directory itself.
    mkdirSync(path.join(workspace, 'arena'), { recursive: true });
    chmodSync(path.join(workspace, 'arena'), 0o777);
    const hostCanary = makeCanary('docker-race');
    const turns = Number(process.env.SEC_DOCKER_RACE_TURNS ?? 20);
    const perTurn = 25;
    const script: ScriptStep[] = [{ sleepMs: 1500, ...act({ name: 'list_files', params: { path: '.' } }) }];
    for (let t = 0; t < turns; t += 1) {
      const calls = [];
      for (let j = 0; j < perTurn; j += 1) {
        calls.push({ name: 'write_file', params: { path: 'arena/d/f', content: `written-${t}-${j}` } });
        calls.push({ name: 'read_file', params: { path: 'arena/d/f' } });
        calls.push({ name: 'read_file', params: { path: 'arena/d/secret.txt' } });
        calls.push({ name: 'list_files', params: { path: 'arena/d' } });
      }
      script.push(act(...calls));
    }
    script.push({ sleepMs: 4000, ...ok('raced') });
    const started = Date.now();
    const run = await w.start({ agent: 'racer-boxed', task: book.write(`race-${workflowId}`, script), workflowId });
    const container = await theContainer(workflowId);
    // Should the run end early, say how (the container would be gone under the steps below).
    void run.result().then((r) => r.status !== 'succeeded' && console.log('race run ended early:', JSON.stringify(r).slice(0, 2000)));

    // In the container: a canary outside the workspace, and the flipper — the sandbox user's own process,
    // killed by every turn-end sweep and started again at once — pointing links at it, at the host canary's
    // path (which a worker resolving on the host would follow) and at the container's root.
    const canaryInside = '/tmp/canary';
    const setup = await client.run(container.Id, ['/bin/sh', '-c', `mkdir -p ${canaryInside} && echo CONTAINER-CANARY > ${canaryInside}/secret.txt && echo CONTAINER-CANARY > ${canaryInside}/f`], { user: '1000:1000' });
    expect(setup.code).toBe(0);
    let stopped = false;
    let flips = 0;
    let restarts = 0;
    const flipping = (async () => {
      while (!stopped) {
        const segment = await client.exec(container.Id, {
          argv: [inContainer.node, inContainer.flipper, '/workspace/arena', `${canaryInside},${hostCanary.dir},/`, '880000'],
          user: '1000:1000',
        });
        let out = '';
        const streams = client.demux(segment.stream);
        streams.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        await new Promise((resolve) => streams.stdout.once('end', resolve));
        const last = out.trim().split('\n').filter(Boolean).at(-1);
        flips += last ? (JSON.parse(last) as { flips: number }).flips : 0;
        restarts += 1;
      }
    })();

    // All actions done, the last turn sleeping: stop the flipper and look inside before the container goes.
    const total = turns * perTurn * 4 + 1;
    await expect.poll(async () => (await actionOutcomes(w.ledger, workflowId)).length, { timeout: 880_000, interval: 500 }).toBe(total);
    const actionsDoneMs = Date.now() - started;
    stopped = true;
    await client.run(container.Id, ['/bin/sh', '-c', 'touch /workspace/arena/.stop-flipping'], { user: '1000:1000' });
    await flipping;
    const inside = await client.run(container.Id, ['/bin/sh', '-c', `ls -A ${canaryInside}; cat ${canaryInside}/f ${canaryInside}/secret.txt; test -e /f && echo ROOT-F; exit 0`], { user: '1000:1000' });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'raced' });
    const outcomes = (await actionOutcomes(w.ledger, workflowId)).slice(1);
    const everything = JSON.stringify(outcomes);
    expect(everything).not.toContain('CONTAINER-CANARY');
    expect(everything).not.toContain(hostCanary.secret);
    for (const o of outcomes.filter((x) => x.name === 'read_file' && x.ok)) expect(String(o.output)).toMatch(/^(inside|written-\d+-\d+)$/);
    for (const o of outcomes.filter((x) => x.name === 'list_files' && x.ok)) expect((o.output as string[]).filter((n) => n !== 'f')).toEqual([]);
    // Inside the container nothing outside the workspace was written: the canary holds its two files as they
    // were, and nothing appeared at the root.
    expect(inside.stdout.trim().split('\n')).toEqual(['f', 'secret.txt', 'CONTAINER-CANARY', 'CONTAINER-CANARY']);
    // On the host: the canary is untouched (nothing read into results, written or chowned), and the workspace
    // still belongs to the sandbox user.
    hostCanary.check();
    expect(statSync(workspace).uid).toBe(1000);
    const okCount = outcomes.filter((o) => o.ok).length;
    const refused = outcomes.filter((o) => !o.ok && /symbolic link/.test(o.error ?? '')).length;
    expect(okCount).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    expect(flips).toBeGreaterThan(1000);
    // Files the actions wrote belong to the sandbox user.
    const f = path.join(workspace, 'arena', 'd.real', 'f');
    if (existsSync(f)) expect(statSync(f).uid).toBe(1000);
    recordFigures('docker-symlink-race', { actions: outcomes.length, succeeded: okCount, refusedAsLink: refused, otherErrors: outcomes.length - okCount - refused, flips, flipperStarts: restarts, actionsDoneMs, outside: 'nothing read, written or listed; no host owner changed' });
  });
});

describe('reused workspace preparation', () => {
  it('links a harness planted in an agent-scoped workspace are never chowned or followed when the next run prepares it', { timeout: 120_000 }, async () => {
    const canaryHome = makeCanary('home');
    const canaryState = makeCanary('state');
    const first = newWorkflowId('plant-links');
    const r1 = await (await w.start({ agent: 'reused-boxed', task: book.write(`links-${first}`, [{ symlinks: { '.home': canaryHome.dir, '.durable-harness': canaryState.dir, arena: '/' }, ...ok('planted') }]), workflowId: first })).result();
    expect(r1).toMatchObject({ status: 'succeeded' });
    const workspace = path.join(w.dataDir, 'workspaces', 'agents', 'reused-boxed');
    expect(lstatSync(path.join(workspace, '.home')).isSymbolicLink()).toBe(true);

    const second = newWorkflowId('after-links');
    const r2 = await (await w.start({ agent: 'reused-boxed', task: book.write(`after-${second}`, [ok('prepared again')]), workflowId: second })).result();
    expect(r2).toMatchObject({ status: 'succeeded', result: 'prepared again' });
    canaryHome.check(); // owner, mode and contents as before: nothing chowned through the link
    canaryState.check();
    expect(statSync(canaryHome.dir).uid).toBe(0);
    expect(lstatSync(path.join(workspace, '.home')).isSymbolicLink()).toBe(true); // left as planted, never followed
    recordFigures('docker-planted-links', { hostDirsOwnerChanged: 0 });
  });
});

describe('runtime state', () => {
  it('pidfiles planted in the workspace are not read: a retried turn kills the earlier attempt, never the keep-alive', { timeout: 120_000 }, async () => {
    const workflowId = newWorkflowId('plant-pid');
    const workspace = path.join(w.dataDir, 'workspaces', 'runs', workflowId);
    const run = await w.start({
      agent: 'planter-boxed',
      task: book.write(`pid-${workflowId}`, [{ sleepMs: 1500, ...act({ name: 'write_file', params: { path: 'note.txt', content: 'x' } }) }, { failTimes: 1, ...ok('planted') }]),
      workflowId,
    });
    const container = await theContainer(workflowId);
    await waitForFile(path.join(workspace, '.scripted', 'child.pid'));
    // Plant pidfiles naming the keep-alive process (and PID 1) where the old executor looked for them.
    const top = (await docker.getContainer(container.Id).top()) as { Titles: string[]; Processes: string[][] };
    const keepAlive = top.Processes.find((row) => row.join(' ').includes('sleep infinity'))!;
    const keepAliveInside = namespacePid(Number(keepAlive[top.Titles.indexOf('PID')]))!;
    await client.run(container.Id, ['/bin/sh', '-c', `mkdir -p .durable-harness && for f in exec-${container.Names[0]!.slice(1)}-aaaa.pid turn.pid; do echo ${keepAliveInside} > .durable-harness/$f; done`], { user: '1000:1000', workdir: '/workspace' });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'planted' });
    expect((await w.ledger.readEvents(workflowId, 0, 1000)).some((e) => e.type === 'retry')).toBe(true);
    recordFigures('docker-planted-pidfile', { keepAliveSurvivedRetry: true });
  });
});

describe('descendants die with their turn', () => {
  it('setsid, detached and double-forked children in the container die when their turn ends, while the container lives on', { timeout: 120_000 }, async () => {
    const workflowId = newWorkflowId('escape');
    const workspace = path.join(w.dataDir, 'workspaces', 'runs', workflowId);
    const run = await w.start({
      agent: 'escaper-boxed',
      task: book.write(`escape-${workflowId}`, [{ escape: true, sleepMs: 1000, ...act({ name: 'echo', params: { text: 'next' } }) }, { sleepMs: 4000, ...ok('done') }]),
      workflowId,
    });
    const container = await theContainer(workflowId);
    const file = path.join(workspace, '.scripted', 'escapees.json');
    await waitForFile(file);
    const pids = await hostPidsIn(container.Id, JSON.parse(readFileSync(file, 'utf8')) as number[]);
    expect(pids.every(processAlive)).toBe(true);
    // Turn 1 ends (its envelope asks for an action); turn 2 sleeps in the same container meanwhile.
    const goneMs = await waitUntilGone(pids, 6000);
    expect((await docker.getContainer(container.Id).inspect()).State.Running).toBe(true);
    expect(await run.result()).toMatchObject({ status: 'succeeded' });
    recordFigures('docker-escapees-turn-end', { children: pids.length, goneWhileContainerRunning: true, goneWithinMs: goneMs });
  });

  it('two-way turns too: the harness waiting with stdin open, its children and a daemon an allowed command started', { timeout: 120_000 }, async () => {
    const workflowId = newWorkflowId('escape-two-way');
    const workspace = path.join(w.dataDir, 'workspaces', 'runs', workflowId);
    const daemon = { tool: 'bash', input: { command: 'setsid sleep 304 >/dev/null 2>&1 & echo $! > .scripted/daemon.pid' } };
    // Left open by the policy: the harness waits for an operator, so everything is seen alive meanwhile.
    const write = { tool: 'write', input: { path: 'after.txt', content: 'x' } };
    const run = await w.start({
      agent: 'gated-boxed',
      task: book.write(`escape-two-way-${workflowId}`, [{ escape: true, permissions: [daemon, write], ...act({ name: 'echo', params: { text: 'next' } }) }, { sleepMs: 4000, ...ok('done') }]),
      workflowId,
    });
    const container = await theContainer(workflowId);
    await waitForFile(path.join(workspace, '.scripted', 'daemon.pid'));
    await expect.poll(async () => (await w.ledger.listApprovals({ workflowId, status: 'pending' })).length, { timeout: 30_000, interval: 50 }).toBe(1);
    const inside = [
      Number(readFileSync(path.join(workspace, '.scripted', 'harness.pid'), 'utf8')),
      ...(JSON.parse(readFileSync(path.join(workspace, '.scripted', 'escapees.json'), 'utf8')) as number[]),
      Number(readFileSync(path.join(workspace, '.scripted', 'daemon.pid'), 'utf8')),
    ];
    const pids = await hostPidsIn(container.Id, inside);
    expect(pids.every(processAlive)).toBe(true);
    const [pending] = await w.ledger.listApprovals({ workflowId, status: 'pending' });
    await decidePendingApproval(w.ledger, workflowId, pending!.requestId, { allow: true, by: 'operator:test' });
    // Turn 1 ends; turn 2 sleeps in the same container meanwhile.
    const goneMs = await waitUntilGone(pids, 6000);
    expect((await docker.getContainer(container.Id).inspect()).State.Running).toBe(true);
    expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'done' });
    expect((await w.ledger.listApprovals({ workflowId })).map((r) => [r.tool, r.status, r.decidedBy])).toEqual([
      ['bash', 'allowed', 'policy:allow[0] tool:bash'],
      ['write', 'allowed', 'operator:test'],
    ]);
    recordFigures('docker-escapees-two-way-turn-end', { processes: pids.length, goneWhileContainerRunning: true, goneWithinMs: goneMs });
  });
});

describe('reaper', () => {
  it("touches only its own deployment's containers of closed runs: another deployment's running container survives", { timeout: 120_000 }, async () => {
    const root = path.join(w.dataDir, 'reaper-workspaces');
    const mine = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: root, deployment: `sec7-mine-${Date.now()}` });
    const theirs = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: root, deployment: `sec7-theirs-${Date.now()}` });
    const request = (workflowId: string): SandboxStartRequest => ({
      workflowId,
      runId: 'r',
      agent: 'a',
      identity: { tenantId: 't', userId: 'u' },
      spec: { provider: 'docker', workspaceScope: 'run', networkPolicy: 'none' },
    });
    // Temporal knows neither workflow: both look closed to a reaper.
    const closedMine = newWorkflowId('reap-mine');
    const closedTheirs = newWorkflowId('reap-theirs');
    // A run of this deployment that is really running in Temporal keeps its container too.
    const runningId = newWorkflowId('reap-running');
    const running = await w.start({ agent: 'escaper-boxed', task: book.write(`reap-${runningId}`, [{ sleepMs: 20_000, ...ok() }]), workflowId: runningId });
    const [a, b, c] = await Promise.all([mine.start(request(closedMine)), theirs.start(request(closedTheirs)), mine.start(request(runningId))]);
    try {
      const removed = await reapClosedRunContainers({ sandboxes: { docker: mine } } as unknown as ActivityDeps, w.client);
      expect(removed).toEqual([a.id]);
      expect(await client.inspect(a.id!)).toBeUndefined();
      expect((await client.inspect(b.id!))?.State.Running).toBe(true);
      expect((await client.inspect(c.id!))?.State.Running).toBe(true);
      recordFigures('docker-reaper', { removed: removed.length, otherDeploymentRunningSurvived: true, runningRunKept: true });
    } finally {
      await running.cancel('done');
      await Promise.all([theirs.end(b), mine.end(c)]);
    }
  });
});

describe('redaction', () => {
  it('a key the harness in the container puts in every field it reports appears nowhere: history, ledger, status, logs', { timeout: 120_000 }, async () => {
    const leak = { leak: 'VENDOR_KEY' };
    const workflowId = newWorkflowId('leak');
    const run = await w.start({
      agent: 'leaky-boxed',
      task: book.write(`leak-${workflowId}`, [
        { ...leak, envelope: { step: 'actions', message: 'reading ${env:VENDOR_KEY}', actions: [{ name: 'read_file', params: { path: '.leak/value.txt' } }] } },
        { ...leak, leakSession: true, envelope: { step: 'success', result: 'done with ${env:VENDOR_KEY}' } },
      ]),
      workflowId,
    });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'done with [REDACTED]', externalSessionId: 'sess-[REDACTED]' });
    expect(readFileSync(path.join(w.dataDir, 'workspaces', 'runs', workflowId, '.leak', 'value.txt'), 'utf8')).toBe(secret);
    const places: Record<string, string> = {
      history: historyText(await run.handle.fetchHistory()),
      ledger: ledgerBytes(w.dataDir),
      status: JSON.stringify(await run.status()),
      logs: JSON.stringify(logs, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)),
    };
    for (const [where, text] of Object.entries(places)) expect(text, `the key leaked into ${where}`).not.toContain(secret);
    // The reported model is accounting: it lives in the ledger's prompt-run rows (the lean turn keeps it out of history).
    expect(places.ledger).toContain('model-[REDACTED]');
    expect(places.history).toContain('sess-[REDACTED]');
    recordFigures('docker-every-field-key', { placesChecked: Object.keys(places), keyFound: 0 });
  });
});
