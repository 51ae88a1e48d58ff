/**
 * The local sandbox boundary against a hostile harness, through the workflow on a real Temporal server: a
 * symlink race during thousands of actions, a planted pidfile, children that leave the turn's process group,
 * a missing containment mechanism, an unprivileged sandbox user, and a key in every field a harness reports.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DefaultLogger, Runtime, type LogEntry } from '@temporalio/worker';
import { inject } from 'vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { decidePendingApproval } from '../../src/permissions/index.js';
import { LocalSandboxProvider } from '../../src/sandbox/index.js';
import { tenantAttribute } from '../../src/workflows/search-attributes.js';
import { workflowVersion } from '../../src/workflows/types.js';
import { hostPidsOf, processAlive, waitUntilGone } from '../support/processes.js';
import { act, ok, scriptBook, scriptedCatalog, type ScriptStep } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import { actionOutcomes, flipperPath, historyText, ledgerBytes, makeCanary, publicDir, recordFigures, watchDir } from './support.js';

// Capture everything the worker logs (installed before the test worker's own quiet logger, which then yields).
const logs: LogEntry[] = [];
Runtime.install({ logger: new DefaultLogger('DEBUG', (entry) => logs.push(entry)) });

const book = scriptBook();
chmodSync(book.dir, 0o755);
const secret = `sk-live-${Math.random().toString(36).slice(2)}-${Date.now().toString(36)}`;
const otherAgentsKey = `sk-other-${Math.random().toString(36).slice(2)}`;
const sandboxUid = 64123;

const probeDir = publicDir('probe');
const probePath = path.join(probeDir, 'probe-harness.mjs');
writeFileSync(
  probePath,
  `// A stdio-JSON harness that tries to read what a confined harness must not, and writes what it got.
import fs from 'node:fs';
import net from 'node:net';
import { createInterface } from 'node:readline';
const emit = (line) => process.stdout.write(JSON.stringify(line) + '\\n');
const tryRead = (file) => { try { return 'read:' + fs.readFileSync(file, 'utf8').slice(0, 40); } catch (e) { return 'denied:' + e.code; } };
const tryList = (dir) => { try { return 'listed:' + fs.readdirSync(dir).join(','); } catch (e) { return 'denied:' + e.code; } };
const tryConnect = (sock) => new Promise((resolve) => {
  const c = net.connect(sock); c.on('connect', () => { c.destroy(); resolve('connected'); }); c.on('error', (e) => resolve('denied:' + e.code));
});
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  const request = JSON.parse(line); rl.close();
  emit({ type: 'session', id: 'probe-session', resumed: Boolean(request.sessionId) });
  if (request.turn === 1) {
    const t = JSON.parse(/probe:(\{.*\})/s.exec(request.prompt)[1]);
    const results = {
      uid: process.getuid(), gid: process.getgid(), groups: process.getgroups(),
      workerEnviron: tryRead('/proc/' + t.workerPid + '/environ'),
      credentials: tryRead(t.credentials), ledger: tryRead(t.ledger), docker: await tryConnect(t.docker),
      temporalDb: tryRead(t.temporalDb), oldRun: tryRead(t.oldRun), otherRun: tryRead(t.otherRun),
      dataDir: tryList(t.dataDir), runs: tryList(t.runs), otherRunDir: tryList(t.otherRunDir),
      visibleProcesses: fs.readdirSync('/proc').filter((d) => /^\\d+$/.test(d)).length,
    };
    fs.writeFileSync('probe.json', JSON.stringify(results));
    emit({ type: 'complete', text: JSON.stringify({ step: 'actions', actions: [{ name: 'write_file', params: { path: 'out/by-action.txt', content: 'x' } }] }) });
  } else {
    emit({ type: 'complete', text: JSON.stringify({ step: 'success', result: 'probed' }) });
  }
  break;
}
`,
);

const catalog = scriptedCatalog(book, {
  harnesses: [
    { name: 'probe', driverClass: 'StdioJson', executable: process.execPath, args: [probePath], active: true, vendor: 'testvendor', model: 'probe-1' },
  ],
  agents: [
    { name: 'racer', harness: 'scripted', actions: ['write_file', 'read_file', 'list_files'], guardrails: { maxIterations: 40, maxWallTimeMs: 600_000 } },
    { name: 'planter', harness: 'scripted', actions: ['write_file'], turnAttempts: 2 },
    { name: 'fragile', harness: 'scripted', turnAttempts: 1, operatorTimeoutMs: 60_000 },
    { name: 'loose', harness: 'scripted', sandbox: { provider: 'local', options: { containment: 'process-group' } } },
    {
      name: 'leaky-fail',
      harness: 'scripted',
      credentials: [{ env: 'VENDOR_KEY', from: 'TEAM_KEY' }],
      turnAttempts: 2,
      operatorTimeoutMs: 1500,
    },
    { name: 'leaky', harness: 'scripted', credentials: [{ env: 'VENDOR_KEY', from: 'TEAM_KEY' }], actions: ['read_file', 'write_file'] },
    {
      name: 'leaky-gated',
      harness: 'scripted',
      credentials: [{ env: 'VENDOR_KEY', from: 'TEAM_KEY' }],
      permissions: { posture: 'strict', allow: ['tool:bash'], approvalTimeoutMs: 1500 },
    },
    // Two-way turns (stdin open while the harness waits for answers): what the policy allows runs at once ...
    { name: 'gated', harness: 'scripted', permissions: { posture: 'strict', allow: ['tool:bash'] } },
    // ... and what it leaves open waits for an operator who never comes.
    { name: 'waiting', harness: 'scripted', permissions: { posture: 'strict', approvalTimeoutMs: 600_000 } },
    { name: 'confined', harness: 'probe', actions: ['write_file'], sandbox: { provider: 'local', options: { user: `${sandboxUid}:${sandboxUid}` } } },
  ],
});

let w: TestWorker;

/**
 * A data dir as older versions left it: Temporal's database and a run's workspace readable by all (0644 files,
 * 0755 directories). The worker tightens it at start.
 */
function oldDataDir(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-run-'));
  chmodSync(dir, 0o755);
  writeFileSync(path.join(dir, 'temporal.db'), 'TEMPORAL-DB-CANARY every run\'s task and result', { mode: 0o644 });
  const oldRun = path.join(dir, 'workspaces', 'runs', 'old-run');
  mkdirSync(oldRun, { recursive: true, mode: 0o755 });
  writeFileSync(path.join(oldRun, 'notes.txt'), 'OLD-RUN-CANARY', { mode: 0o644 });
  return dir;
}

beforeAll(async () => {
  w = await startTestWorker({ catalog, env: {}, dataDir: oldDataDir(), credentials: new MemoryCredentialStore({ TEAM_KEY: secret, OTHER_TEAM_KEY: otherAgentsKey }) });
});
afterAll(() => w?.close());

const workspaceOf = (workflowId: string) => path.join(w.dataDir, 'workspaces', 'runs', workflowId);

async function waitForFile(file: string, timeoutMs = 15_000): Promise<void> {
  await expect.poll(() => existsSync(file) && readFileSync(file, 'utf8').length > 0, { timeout: timeoutMs, interval: 20 }).toBe(true);
}

describe('symlink race', () => {
  it('thousands of actions while a process flips a directory and a link: nothing outside the workspace is read or written', { timeout: 300_000 }, async () => {
    const workflowId = testWorkflowId('race');
    const workspace = workspaceOf(workflowId);
    mkdirSync(workspace, { recursive: true });
    const canary = makeCanary('race');
    // The credential store of another deployment: the attack read it through a swapped link.
    const store = publicDir('store');
    writeFileSync(path.join(store, 'credentials.json'), JSON.stringify({ OTHER_TEAM_KEY: otherAgentsKey }), { mode: 0o600 });
    const storeUnchanged = watchDir(store);

    const turns = 20;
    const perTurn = 25;
    const script: ScriptStep[] = [];
    for (let t = 0; t < turns; t += 1) {
      const calls = [];
      for (let j = 0; j < perTurn; j += 1) {
        calls.push({ name: 'write_file', params: { path: 'd/f', content: `written-${t}-${j}` } });
        calls.push({ name: 'read_file', params: { path: 'd/f' } });
        calls.push({ name: 'read_file', params: { path: j % 2 ? 'd/secret.txt' : 'd/credentials.json' } });
        calls.push({ name: 'list_files', params: { path: 'd' } });
      }
      script.push(act(...calls));
    }
    script.push(ok('raced'));
    const task = book.write(`race-${workflowId}`, script);

    const flipper = spawn(process.execPath, [flipperPath, workspace, `${canary.dir},${store}`, '280000'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let flipperOut = '';
    flipper.stdout.on('data', (chunk: Buffer) => (flipperOut += chunk.toString()));
    const started = Date.now();
    const result = await (await w.start({ agent: 'racer', task, workflowId })).result();
    const elapsedMs = Date.now() - started;
    writeFileSync(path.join(workspace, '.stop-flipping'), '');
    await new Promise((resolve) => flipper.once('exit', resolve));
    const { flips } = JSON.parse(flipperOut.trim().split('\n').at(-1)!) as { flips: number };

    expect(result).toMatchObject({ status: 'succeeded', result: 'raced' });
    const outcomes = await actionOutcomes(w.ledger, workflowId);
    expect(outcomes).toHaveLength(turns * perTurn * 4);
    const everything = JSON.stringify(outcomes);
    expect(everything).not.toContain(canary.secret);
    expect(everything).not.toContain(otherAgentsKey);
    // A listing shows the real directory (just `f`, or empty while an action recreates it), never the canary's.
    for (const o of outcomes.filter((x) => x.name === 'list_files' && x.ok)) expect((o.output as string[]).filter((n) => n !== 'f')).toEqual([]);
    for (const o of outcomes.filter((x) => x.name === 'read_file' && x.ok)) expect(String(o.output)).toMatch(/^(inside|written-\d+-\d+)$/);
    canary.check();
    storeUnchanged();
    // The race was really run: some operations met the real directory, some met the link and were refused.
    const okCount = outcomes.filter((o) => o.ok).length;
    const refused = outcomes.filter((o) => !o.ok && /symbolic link/.test(o.error ?? '')).length;
    expect(okCount).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    expect(flips).toBeGreaterThan(1000);
    recordFigures('local-symlink-race', { actions: outcomes.length, succeeded: okCount, refusedAsLink: refused, otherErrors: outcomes.length - okCount - refused, flips, elapsedMs, outside: 'nothing read, written or listed' });
  });
});

describe('runtime state', () => {
  it('a pidfile planted in the workspace names no process the worker kills, on retry or at run end', { timeout: 60_000 }, async () => {
    const victim = spawn('sleep', ['120'], { detached: true, stdio: 'ignore' });
    const workflowId = testWorkflowId('plant');
    const plant = (file: string) => ({ name: 'write_file', params: { path: file, content: `${victim.pid}\n` } });
    const task = book.write(`plant-${workflowId}`, [
      act(plant('.durable-harness/turn.pid'), plant(`.durable-harness/turn-${workflowId}.pid`), plant('.durable-harness/exec-x.pid'), plant('turn.pid')),
      { failTimes: 1, ...ok('planted') }, // the retried attempt kills "what the earlier attempt left"
    ]);
    try {
      const result = await (await w.start({ agent: 'planter', task, workflowId })).result();
      expect(result).toMatchObject({ status: 'succeeded', result: 'planted' });
      expect((await w.ledger.readEvents(workflowId, 0, 1000)).some((e) => e.type === 'retry')).toBe(true);
      expect(readFileSync(path.join(workspaceOf(workflowId), '.durable-harness', 'turn.pid'), 'utf8')).toBe(`${victim.pid}\n`);
      expect(processAlive(victim.pid!)).toBe(true);
      recordFigures('local-planted-pidfile', { victimAliveAfterRetryAndRunEnd: processAlive(victim.pid!) });
    } finally {
      victim.kill('SIGKILL');
    }
  });
});

describe('descendants die with their turn', () => {
  async function escapees(workflowId: string): Promise<number[]> {
    const workspace = workspaceOf(workflowId);
    const file = path.join(workspace, '.scripted', 'escapees.json');
    await waitForFile(file);
    const pids = hostPidsOf(workspace, JSON.parse(readFileSync(file, 'utf8')) as number[]);
    expect(pids).toHaveLength(3);
    expect(pids.every(processAlive)).toBe(true);
    return pids;
  }

  it('setsid, detached and double-forked children die when the turn ends normally', async () => {
    const workflowId = testWorkflowId('escape-ok');
    const run = await w.start({ agent: 'scripted', task: book.write(`escape-ok-${workflowId}`, [{ escape: true, sleepMs: 1500, ...ok('escaped?') }]), workflowId });
    const pids = await escapees(workflowId);
    expect(await run.result()).toMatchObject({ status: 'succeeded' });
    const goneMs = await waitUntilGone(pids, 2000);
    recordFigures('local-escapees-turn-end', { children: pids.length, goneWithinMsOfRunEnd: goneMs });
  });

  it('... and when the run is cancelled mid-turn, within 2 s', async () => {
    const workflowId = testWorkflowId('escape-cancel');
    const run = await w.start({ agent: 'scripted', task: book.write(`escape-cancel-${workflowId}`, [{ escape: true, sleepMs: 60_000, ...ok() }]), workflowId });
    const pids = await escapees(workflowId);
    await run.cancel('stop');
    expect(await waitUntilGone(pids, 2000)).toBeLessThan(2000);
    expect(await run.result()).toMatchObject({ status: 'cancelled' });
  });

  it('... and when the turn fails: gone before the operator decides, and the run is abandoned', async () => {
    const workflowId = testWorkflowId('escape-fail');
    const run = await w.start({ agent: 'fragile', task: book.write(`escape-fail-${workflowId}`, [{ escape: true, sleepMs: 800, crash: { exitCode: 9 } }]), workflowId });
    const pids = await escapees(workflowId);
    await expect.poll(async () => (await run.status()).state, { timeout: 15_000, interval: 50 }).toBe('awaiting_operator');
    await waitUntilGone(pids, 2000);
    await run.abandon('giving up');
    expect(await run.result()).toMatchObject({ status: 'failed' });
  });

  // The two-way mode keeps the harness running with stdin open while it asks; an allowed command starts a daemon.
  const daemon = { tool: 'bash', input: { command: 'setsid sleep 304 >/dev/null 2>&1 & echo $! > .scripted/daemon.pid' } };
  async function daemonPid(workflowId: string): Promise<number> {
    const file = path.join(workspaceOf(workflowId), '.scripted', 'daemon.pid');
    await waitForFile(file);
    const [pid] = hostPidsOf(workspaceOf(workflowId), [Number(readFileSync(file, 'utf8').trim())]);
    expect(processAlive(pid!)).toBe(true);
    return pid!;
  }

  it('two-way turns too: children and a daemon an allowed command started die when the turn ends', async () => {
    const workflowId = testWorkflowId('escape-two-way');
    // The second request waits for an operator, so the daemon is seen alive while the harness waits with stdin open.
    const write = { tool: 'write', input: { path: 'after.txt', content: 'x' } };
    const task = book.write(`escape-two-way-${workflowId}`, [{ escape: true, permissions: [daemon, write], ...ok('asked and escaped?') }]);
    const run = await w.start({ agent: 'gated', task, workflowId });
    const pids = [...(await escapees(workflowId)), await daemonPid(workflowId)];
    await expect.poll(async () => (await w.ledger.listApprovals({ workflowId, status: 'pending' })).length, { timeout: 15_000, interval: 50 }).toBe(1);
    const [pending] = await w.ledger.listApprovals({ workflowId, status: 'pending' });
    await decidePendingApproval(w.ledger, workflowId, pending!.requestId, { allow: true, by: 'operator:test' });
    expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'asked and escaped?' });
    expect(readFileSync(path.join(workspaceOf(workflowId), 'after.txt'), 'utf8')).toBe('x');
    const rows = await w.ledger.listApprovals({ workflowId });
    expect(rows.map((r) => [r.tool, r.status, r.decidedBy])).toEqual([
      ['bash', 'allowed', 'policy:allow[0] tool:bash'],
      ['write', 'allowed', 'operator:test'],
    ]);
    const goneMs = await waitUntilGone(pids, 2000);
    recordFigures('local-escapees-two-way-turn-end', { children: pids.length, goneWithinMsOfRunEnd: goneMs });
  });

  it('... and when the run is cancelled while the harness waits for an approval, within 2 s', async () => {
    const workflowId = testWorkflowId('escape-waiting');
    const ask = { tool: 'bash', input: { command: 'touch never.txt' } };
    const run = await w.start({ agent: 'waiting', task: book.write(`escape-waiting-${workflowId}`, [{ escape: true, permissions: [ask], ...ok() }]), workflowId });
    const pids = await escapees(workflowId);
    await expect.poll(async () => (await w.ledger.listApprovals({ workflowId, status: 'pending' })).length, { timeout: 15_000, interval: 50 }).toBe(1);
    const [harness] = hostPidsOf(workspaceOf(workflowId), [Number(readFileSync(path.join(workspaceOf(workflowId), '.scripted', 'harness.pid'), 'utf8'))]);
    await run.cancel('stop');
    expect(await waitUntilGone([...pids, harness!], 2000)).toBeLessThan(2000);
    expect(await run.result()).toMatchObject({ status: 'cancelled' });
    expect(existsSync(path.join(workspaceOf(workflowId), 'never.txt'))).toBe(false);
  });

  it('with containment: process-group (the explicit opt-out) they survive, as documented', async () => {
    const workflowId = testWorkflowId('escape-loose');
    const run = await w.start({ agent: 'loose', task: book.write(`escape-loose-${workflowId}`, [{ escape: true, sleepMs: 800, ...ok() }]), workflowId });
    const pids = await escapees(workflowId);
    try {
      expect(await run.result()).toMatchObject({ status: 'succeeded' });
      await new Promise((resolve) => setTimeout(resolve, 500));
      // The setsid and detached children left the process group and outlive the turn; the double-forked
      // one stayed in the group and was killed with it.
      expect(pids.map(processAlive)).toEqual([true, true, false]);
    } finally {
      for (const pid of pids.filter(processAlive)) process.kill(pid, 'SIGKILL');
    }
  });

  it('a machine without the mechanism refuses the run with SandboxIsolationUnavailable instead of pretending', async () => {
    const broken = await startTestWorker({
      catalog,
      env: {},
      sandboxes: (dataDir) => ({ local: new LocalSandboxProvider({ root: path.join(dataDir, 'workspaces'), tools: { cc: '/nonexistent/cc' } }) }),
    });
    try {
      const result = await (await broken.start({ agent: 'scripted', task: book.write('never-runs', [ok()]), workflowId: testWorkflowId('nomech') })).result();
      expect(result).toMatchObject({ status: 'failed', failureType: 'SandboxIsolationUnavailable' });
      expect(result.reason).toMatch(/PID namespace.*containment: process-group/s);
    } finally {
      await broken.close();
    }
  });
});

describe('sandbox user', () => {
  it('the harness runs as the unprivileged user: no worker environment, credentials, ledger, Temporal database, other runs or Docker socket; action files are its own', { timeout: 120_000 }, async () => {
    // Another tenant's run, as the worker's own user: its files are 0644 inside its workspace.
    const other = await w.start({
      agent: 'scripted',
      task: book.write('other-tenant', [act({ name: 'write_file', params: { path: 'plans.txt', content: 'OTHER-RUN-CANARY' } }), ok()]),
      workflowId: testWorkflowId('other-tenant'),
      identity: { tenantId: 'globex', userId: 'bob' },
    });
    expect((await other.result()).status).toBe('succeeded');
    const credentials = path.join(w.dataDir, 'credentials.json');
    writeFileSync(credentials, JSON.stringify({ OTHER_TEAM_KEY: otherAgentsKey }), { mode: 0o600 });
    const dockerSocket = (process.env.DOCKER_HOST ?? 'unix:///tmp/dockerd/docker.sock').replace(/^unix:\/\//, '');
    expect(existsSync(dockerSocket)).toBe(true);
    const runs = path.join(w.dataDir, 'workspaces', 'runs');
    const targets = {
      workerPid: process.pid,
      credentials,
      ledger: path.join(w.dataDir, 'ledger.sqlite'),
      docker: dockerSocket,
      temporalDb: path.join(w.dataDir, 'temporal.db'),
      oldRun: path.join(runs, 'old-run', 'notes.txt'),
      otherRun: path.join(runs, other.workflowId, 'plans.txt'),
      otherRunDir: path.join(runs, other.workflowId),
      dataDir: w.dataDir,
      runs,
    };
    const workflowId = testWorkflowId('confined');
    const result = await (await w.start({ agent: 'confined', task: `probe:${JSON.stringify(targets)}`, workflowId })).result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'probed' });
    const workspace = workspaceOf(workflowId);
    const probe = JSON.parse(readFileSync(path.join(workspace, 'probe.json'), 'utf8')) as Record<string, unknown>;
    // No supplementary groups (Node lists the effective gid among them): not docker's, not the worker's.
    expect(probe).toMatchObject({ uid: sandboxUid, gid: sandboxUid, groups: [sandboxUid] });
    expect(probe.workerEnviron).toMatch(/^denied:/);
    expect(probe.credentials).toBe('denied:EACCES');
    expect(probe.ledger).toBe('denied:EACCES');
    expect(probe.docker).toMatch(/^denied:(EACCES|ENOENT)/);
    // The data dir as the worker left it at start and after a run of its own (src/sandbox/data-dir.ts).
    expect(probe).toMatchObject({ temporalDb: 'denied:EACCES', oldRun: 'denied:EACCES', otherRun: 'denied:EACCES' });
    expect(probe).toMatchObject({ dataDir: 'denied:EACCES', runs: 'denied:EACCES', otherRunDir: 'denied:EACCES' });
    expect(readFileSync(path.join(runs, other.workflowId, 'plans.txt'), 'utf8')).toBe('OTHER-RUN-CANARY'); // it was there to read
    for (const file of ['temporal.db', 'ledger.sqlite']) expect(statSync(path.join(w.dataDir, file)).mode & 0o777, file).toBe(0o600);
    expect(statSync(w.dataDir).mode & 0o777).toBe(0o711);
    expect(probe.visibleProcesses).toBeLessThan(5); // its own PID namespace
    expect(statSync(path.join(workspace, 'out', 'by-action.txt')).uid).toBe(sandboxUid);
    expect(statSync(path.join(workspace, 'out')).uid).toBe(sandboxUid);
    expect(statSync(workspace).uid).toBe(sandboxUid);
    expect(statSync(workspace).mode & 0o777).toBe(0o700);
    recordFigures('local-sandbox-user', probe);
  });
});

function cli(args: string[]): string {
  const bin = path.join(repoRoot, 'bin', 'durable-harness.mjs');
  const out = spawnSync(process.execPath, [bin, ...args, '--address', inject('temporalAddress'), '--task-queue', w.taskQueue], { encoding: 'utf8', timeout: 90_000 });
  return `${out.stdout}\n${out.stderr}`;
}

describe('CLI output', () => {
  it('a tenant id with control characters cannot forge a row in `durable-harness list`', { timeout: 120_000 }, async () => {
    const forgedRow = `forged-${Date.now().toString(36)}\tsucceeded\tdemo\tdemo\tacme`;
    const tenantId = `evil\n${forgedRow}\x1b[2K\r`;
    const workflowId = testWorkflowId('forge');
    const identity = { tenantId, userId: 'mallory' };
    const task = book.write('forge', [ok()]);
    // startAgentRun refuses such an id before start; a run started with a plain Temporal client can still carry one.
    await expect(w.start({ agent: 'scripted', task, workflowId, identity })).rejects.toThrow(/identity\.tenantId: .* has characters an id may not have/);
    await w.client.workflow.execute('agentRun', {
      taskQueue: w.taskQueue,
      workflowId,
      args: [{ agent: 'scripted', task, identity, workflowVersion }],
      typedSearchAttributes: [{ key: tenantAttribute, value: tenantId }],
    });
    let out = '';
    await expect.poll(() => (out = cli(['list', '--limit', '500'])).includes(workflowId), { timeout: 60_000, interval: 1000 }).toBe(true);
    const row = out.split('\n').find((line) => line.startsWith(workflowId))!;
    expect(row).toContain('evil\\nforged-');
    // Its own forged id (other files' runs on this server may be named forged-…, e.g. operator-view's forged-note).
    expect(out.split('\n').some((line) => line.startsWith(forgedRow.split('\t')[0]!))).toBe(false);
    expect(out).not.toContain('\x1b');
  });
});

describe('redaction', () => {
  it('a key the harness puts in every field it reports appears nowhere: history, ledger, status, logs', { timeout: 240_000 }, async () => {
    const t0 = Date.now();
    const lap = (what: string) => console.log(`[leak test] ${what} at ${Date.now() - t0} ms`);
    const leak = { leak: 'VENDOR_KEY' };
    // Failure paths: a crash with the key in stderr, then an error line with the key; then the operator times out.
    const failing = await w.start({
      agent: 'leaky-fail',
      task: book.write('leak-fail', [{ ...leak, failTimes: 1, error: { message: 'vendor said ${env:VENDOR_KEY}', code: 'vendor-error' } }]),
      workflowId: testWorkflowId('leak-fail'),
    });
    await expect.poll(async () => (await failing.status()).state, { timeout: 30_000, interval: 50 }).toBe('awaiting_operator');
    lap('awaiting operator');
    const statusWhileWaiting = JSON.stringify(await failing.status());
    const cliWhileWaiting = cli(['status', failing.workflowId]);
    lap('cli');
    const failed = await failing.result();
    lap('failed');
    expect(failed.status).toBe('failed');

    // Success path: actions read what the harness wrote, the session id itself is the key.
    const succeeding = await w.start({
      agent: 'leaky',
      task: book.write('leak-ok', [
        { ...leak, envelope: { step: 'actions', message: 'reading ${env:VENDOR_KEY}', actions: [{ name: 'read_file', params: { path: '.leak/value.txt' } }, { name: 'write_file', params: { path: 'copy.txt', content: '${env:VENDOR_KEY}' } }] } },
        { ...leak, leakSession: true, envelope: { step: 'success', result: 'done with ${env:VENDOR_KEY}' } },
      ]),
      workflowId: testWorkflowId('leak-ok'),
    });
    const done = await succeeding.result();
    expect(done.status).toBe('succeeded');
    expect(done.result).toBe('done with [REDACTED]');
    expect(done.externalSessionId).toBe('sess-[REDACTED]');

    // The harness really had it and really printed it everywhere.
    expect(readFileSync(path.join(workspaceOf(succeeding.workflowId), '.leak', 'value.txt'), 'utf8')).toBe(secret);

    const places: Record<string, string> = {
      'history (failed run)': historyText(await failing.handle.fetchHistory()),
      'history (succeeded run)': historyText(await succeeding.handle.fetchHistory()),
      ledger: ledgerBytes(w.dataDir),
      'status while awaiting an operator': statusWhileWaiting,
      'status after': JSON.stringify(await failing.status()) + JSON.stringify(await succeeding.status()),
      'CLI status': cliWhileWaiting + cli(['status', succeeding.workflowId, '--json']),
      results: JSON.stringify([failed, done]),
      logs: JSON.stringify(logs, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)),
    };
    for (const [where, text] of Object.entries(places)) {
      expect(text.length, where).toBeGreaterThan(0);
      expect(text, `the key leaked into ${where}`).not.toContain(secret);
    }
    // ...and the redaction is visible where the key was.
    // The reported model is accounting: it lives in the ledger's prompt-run rows (the lean turn keeps it out of history).
    expect(places.ledger).toContain('model-[REDACTED]');
    expect(places['history (succeeded run)']).toContain('sess-[REDACTED]');
    expect(places.ledger).toContain('sess-[REDACTED]');
    expect(places.ledger).toContain('stderr says [REDACTED]');
    expect(`${places['status while awaiting an operator']}${places['history (failed run)']}`).toContain('vendor said [REDACTED]');
    recordFigures('local-every-field-key', { placesChecked: Object.keys(places), keyFound: 0 });
  });

  it('a key spelled as JSON \\u escapes or with a zero-width space inside, in the result, a message and action params, appears nowhere', { timeout: 120_000 }, async () => {
    const escaped = '${env:VENDOR_KEY:json-u}';
    const zw = '${env:VENDOR_KEY:zwsp}';
    const run = await w.start({
      agent: 'leaky',
      task: book.write('leak-spelled', [
        {
          envelope: {
            step: 'actions',
            message: `writing ${escaped} and ${zw}`,
            actions: [
              { name: 'write_file', params: { path: `esc-${escaped}.txt`, content: `c ${escaped}` } },
              { name: 'write_file', params: { path: 'zw.txt', content: `z ${zw}` } },
            ],
          },
        },
        ok(`done ${escaped} and ${zw}`),
      ]),
      workflowId: testWorkflowId('leak-spelled'),
    });
    const result = await run.result();
    // The harness really spelled the key: where the runtime decoded it, the marker is what is left.
    expect(result).toMatchObject({ status: 'succeeded', result: 'done [REDACTED] and [REDACTED]' });
    expect(readFileSync(path.join(workspaceOf(run.workflowId), 'esc-[REDACTED].txt'), 'utf8')).toBe('c [REDACTED]');
    expect(readFileSync(path.join(workspaceOf(run.workflowId), 'zw.txt'), 'utf8')).toBe('z [REDACTED]');

    const jsonU = [...secret].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    const forms = { verbatim: secret, 'with U+200B': `${secret.slice(0, secret.length >> 1)}\u200b${secret.slice(secret.length >> 1)}`, 'as \\u escapes': jsonU, 'as escaped \\u escapes': jsonU.replaceAll('\\', '\\\\') };
    const ledgerFile = path.join(w.dataDir, 'ledger.sqlite');
    const places: Record<string, string> = {
      history: historyText(await run.handle.fetchHistory()),
      ledger: [ledgerFile, `${ledgerFile}-wal`].filter(existsSync).map((f) => readFileSync(f, 'utf8')).join('\n'),
      events: JSON.stringify(await w.ledger.readEvents(run.workflowId, 0, 1000)),
      steps: JSON.stringify(await w.ledger.listSteps(run.workflowId)),
      'prompt runs': JSON.stringify(await w.ledger.listPromptRuns(run.workflowId)),
      status: JSON.stringify(await run.status()),
      logs: JSON.stringify(logs, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)),
    };
    expect(places.steps).toContain('writing [REDACTED] and [REDACTED]');
    for (const [where, text] of Object.entries(places)) {
      for (const [form, needle] of Object.entries(forms)) expect(text.includes(needle), `the key ${form} leaked into ${where}`).toBe(false);
    }
  });

  it('a key in permission requests (tool, input, title, command, paths) is redacted in approvals, events, history and logs', { timeout: 120_000 }, async () => {
    const key = '${env:VENDOR_KEY}';
    const run = await w.start({
      agent: 'leaky-gated',
      task: book.write('leak-permissions', [
        {
          permissions: [
            // Allowed by the policy's rule, decided on the real command (it runs), stored redacted.
            { tool: 'bash', input: { command: `echo ${key} > allowed.txt` } },
            // Left open by the policy: pending for an operator (the row and the heartbeat carry it), then the timeout denies.
            { tool: `write-${key}`, title: `writes ${key}`, input: { path: `p-${key}.txt`, content: key, [key]: key } },
          ],
          ...ok(`asked with ${key}`),
        },
      ]),
      workflowId: testWorkflowId('leak-permissions'),
    });
    const result = await run.result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'asked with [REDACTED]' });
    // The harness really asked with the key: the allowed command ran with it.
    expect(readFileSync(path.join(workspaceOf(run.workflowId), 'allowed.txt'), 'utf8').trim()).toBe(secret);

    const rows = await w.ledger.listApprovals({ workflowId: run.workflowId });
    expect(rows.map((r) => [r.tool, r.status, r.decidedBy])).toEqual([
      ['bash', 'allowed', 'policy:allow[0] tool:bash'],
      ['write-[REDACTED]', 'denied', 'timeout'],
    ]);
    expect(rows[0]!.command).toBe('echo [REDACTED] > allowed.txt');
    expect(rows[1]).toMatchObject({ title: 'writes [REDACTED]', paths: ['p-[REDACTED].txt'], input: { path: 'p-[REDACTED].txt', content: '[REDACTED]', '[REDACTED]': '[REDACTED]' } });
    const events = await w.ledger.readEvents(run.workflowId, 0, 1000);
    const requests = events.filter((e) => e.type === 'permission-request').map((e) => e.data as { tool: string; title: string });
    expect(requests.map((r) => [r.tool, r.title])).toEqual([
      ['bash', 'echo [REDACTED] > allowed.txt'],
      ['write-[REDACTED]', 'writes [REDACTED]'],
    ]);

    const places: Record<string, string> = {
      history: historyText(await run.handle.fetchHistory()),
      ledger: ledgerBytes(w.dataDir),
      status: JSON.stringify(await run.status()),
      result: JSON.stringify(result),
      logs: JSON.stringify(logs, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)),
    };
    for (const [where, text] of Object.entries(places)) expect(text, `the key leaked into ${where}`).not.toContain(secret);
  });
});
