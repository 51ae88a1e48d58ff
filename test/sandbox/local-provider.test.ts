import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  LocalExecutor,
  LocalSandboxProvider,
  killRecordedTurn,
  safeSegment,
  type SandboxStartRequest,
  type WorkspaceScope,
} from '../../src/sandbox/index.js';
import { commandLine, processAlive, processTree, waitUntil } from '../support/processes.js';

const root = mkdtempSync(path.join(tmpdir(), 'local-sandbox-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function request(scope: WorkspaceScope, ids: Partial<{ workflowId: string; agent: string; tenantId: string; userId: string }> = {}): SandboxStartRequest {
  return {
    workflowId: ids.workflowId ?? 'wf-1',
    runId: 'r-1',
    agent: ids.agent ?? 'coder',
    identity: { tenantId: ids.tenantId ?? 'acme', userId: ids.userId ?? 'u-7' },
    spec: { provider: 'local', workspaceScope: scope, networkPolicy: 'open' },
  };
}

async function collect(lines: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const l of lines) out.push(l);
  return out;
}

/** A node script that starts a long `sleep` grandchild, prints both pids and waits. */
const treeScript = `
const { spawn } = require('node:child_process');
process.on('SIGTERM', () => {}); // ignore SIGTERM so only the group SIGKILL can end it
const child = spawn('sleep', ['30'], { stdio: 'ignore' });
console.log(JSON.stringify({ parent: process.pid, child: child.pid }));
setInterval(() => {}, 1000);
`;

describe('LocalSandboxProvider workspaces', () => {
  const provider = new LocalSandboxProvider({ root });

  it('maps each scope to its directory and creates it idempotently', async () => {
    const run = await provider.start(request('run'));
    expect(run).toMatchObject({ provider: 'local', workspacePath: path.join(root, 'runs', 'wf-1'), hostWorkspacePath: path.join(root, 'runs', 'wf-1') });
    const agent = await provider.start(request('agent'));
    expect(agent.workspacePath).toBe(path.join(root, 'agents', 'coder'));
    const user = await provider.start(request('agent-user'));
    // Not inside the agent's own workspace, where that agent's harness could plant links in its place.
    expect(user.workspacePath).toBe(path.join(root, 'agent-users', 'coder', 'acme', 'u-7'));
    for (const ref of [run, agent, user]) expect(existsSync(ref.workspacePath)).toBe(true);
    writeFileSync(path.join(run.workspacePath, 'keep.txt'), 'x');
    await expect(provider.start(request('run'))).resolves.toEqual(run);
    await provider.end(run);
    await provider.end(run);
    expect(readFileSync(path.join(run.workspacePath, 'keep.txt'), 'utf8')).toBe('x');
  });

  it.each([
    ['..', { workflowId: '..' }],
    ['.', { agent: '.' }],
    ['a/b', { agent: 'a/b' }],
    ['a\\b', { tenantId: 'a\\b' }],
    ['/etc', { userId: '/etc' }],
    ['', { workflowId: '' }],
    ['nul\0byte', { agent: 'nul\0byte' }],
    ['x'.repeat(201), { userId: 'x'.repeat(201) }],
  ])('rejects the id %j and names it', async (bad, ids) => {
    await expect(provider.start(request('agent-user', ids))).rejects.toThrow(JSON.stringify(bad));
    await expect(provider.start(request('agent-user', ids))).rejects.toThrow(/Allowed: letters, digits/);
  });

  it('accepts ordinary ids', () => {
    expect(safeSegment('agent-run_42.v2@acme')).toBe('agent-run_42.v2@acme');
    expect(safeSegment('x'.repeat(200))).toHaveLength(200);
  });

  it('says which network policies it really enforces, and refuses the host network under signed decisions', () => {
    expect(provider.enforces('open')).toBe('enforced');
    expect(provider.enforces('none')).toBe('enforced');
    // This machine's worker runs as root: the gateway policies' namespace and forwarder are available.
    expect([provider.enforces('vendor'), provider.enforces('allowlist')]).toEqual(['enforced', 'enforced']);
    const signed = new LocalSandboxProvider({ root, hostNetwork: 'refused' });
    expect([signed.enforces('none'), signed.enforces('open'), signed.enforces('vendor')]).toEqual(['enforced', 'refused', 'enforced']);
    expect(provider.refusalOf('vendor')).toMatch(/only on a worker running as root.*Run the worker as root, use the docker provider, or set networkPolicy "none" \(no network\) or "open"/);
    expect(signed.refusalOf('open')).toMatch(/network policy "open" where operator decisions are signed/);
  });

  it('policy none freezes a loopback-only network into the ref, and a process in it has only lo', async () => {
    const ref = await provider.start({ ...request('run', { workflowId: 'wf-none' }), spec: { provider: 'local', workspaceScope: 'run', networkPolicy: 'none' } });
    expect(ref.settings).toMatchObject({ network: 'loopback' });
    const handle = await provider.attach(ref);
    // /proc/net/dev lists the interfaces of the reader's own network namespace.
    const proc = handle.executor.exec({ argv: ['/bin/sh', '-c', 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "'] });
    const lines: string[] = [];
    for await (const line of proc.lines) lines.push(line);
    await proc.exit;
    expect(lines).toEqual(['lo']);
    await handle.release();
  });

  it('refuses to attach a ref outside its root or from another provider', async () => {
    await expect(provider.attach({ provider: 'local', workspacePath: '/tmp', hostWorkspacePath: '/tmp' })).rejects.toThrow(/not inside the local root/);
    await expect(provider.attach({ provider: 'docker', workspacePath: '/w', hostWorkspacePath: root })).rejects.toThrow(/provider "docker"/);
  });
});

describe('LocalExecutor', () => {
  const workspace = path.join(root, 'exec');
  mkdirSync(workspace, { recursive: true });
  const executor = new LocalExecutor({ workspacePath: workspace, killGraceMs: 300 });

  it('gives the process only PATH, HOME, LANG and the granted variables', async () => {
    process.env.WORKER_ONLY_SECRET = 'must-not-leak';
    try {
      const proc = executor.exec({ argv: ['node', '-e', 'console.log(JSON.stringify(process.env))'], env: { GRANTED_KEY: 'sk-123' } });
      const [out] = await collect(proc.lines);
      expect((await proc.exit).code).toBe(0);
      const env = JSON.parse(out!) as Record<string, string>;
      expect(Object.keys(env).sort()).toEqual(['GRANTED_KEY', 'HOME', 'LANG', 'PATH']);
      expect(env).toMatchObject({ GRANTED_KEY: 'sk-123', HOME: path.join(workspace, '.home'), LANG: 'C.UTF-8' });
      expect(env.PATH!.split(':')).toEqual(expect.arrayContaining(['/usr/bin', '/bin', path.dirname(process.execPath)]));
      expect(existsSync(path.join(workspace, '.home'))).toBe(true);
    } finally {
      delete process.env.WORKER_ONLY_SECRET;
    }
  });

  it('runs in the workspace and passes argv without a shell', async () => {
    const proc = executor.exec({ argv: ['node', '-e', 'console.log(process.cwd()); console.log(process.argv[1])', '$(echo injected); ls'] });
    expect(await collect(proc.lines)).toEqual([workspace, '$(echo injected); ls']);
  });

  it('delivers very long lines whole and a final line without a newline', async () => {
    const proc = executor.exec({ argv: ['node', '-e', 'process.stdout.write("a".repeat(3_000_000) + "\\nb\\r\\nlast")'] });
    const lines = await collect(proc.lines);
    expect(lines.map((l) => l.length)).toEqual([3_000_000, 1, 4]);
    expect(lines.slice(1)).toEqual(['b', 'last']);
  });

  it('keeps a bounded stderr tail', async () => {
    const proc = executor.exec({ argv: ['node', '-e', 'process.stderr.write("x".repeat(20000) + "END"); process.exit(4)'] });
    expect(await proc.exit).toEqual({ code: 4, signal: null });
    expect(proc.stderrTail().length).toBeLessThanOrEqual(8 * 1024);
    expect(proc.stderrTail().endsWith('END')).toBe(true);
  });

  it('writes stdin and keeps it open for a two-way protocol', async () => {
    const script = 'const rl=require("node:readline").createInterface({input:process.stdin}); rl.on("line", l => { console.log("got " + l); if (l === "bye") process.exit(0); });';
    const proc = executor.exec({ argv: ['node', '-e', script], stdin: 'hello\n', keepStdinOpen: true });
    const iterator = proc.lines[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toBe('got hello');
    proc.write('bye\n');
    expect((await iterator.next()).value).toBe('got bye');
    expect((await proc.exit).code).toBe(0);
  });

  it('closes stdin on request: a server that reads until end of input then exits', async () => {
    const proc = executor.exec({ argv: ['sh', '-c', 'cat; echo "stdin ended"'], stdin: 'one\n', keepStdinOpen: true });
    const iterator = proc.lines[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toBe('one');
    proc.closeStdin?.();
    expect((await iterator.next()).value).toBe('stdin ended');
    expect(await proc.exit).toEqual({ code: 0, signal: null });
  });

  it('reports a missing binary without throwing', async () => {
    const proc = executor.exec({ argv: ['definitely-not-installed-xyz', '--version'] });
    expect(await proc.exit).toEqual({ code: null, signal: null });
    expect(proc.stderrTail()).toContain('spawn definitely-not-installed-xyz ENOENT');
    expect(proc.spawnError()).toBeInstanceOf(Error);
    expect(await collect(proc.lines)).toEqual([]);
    await proc.kill();
  });

  it('kill() ends the whole process group, grandchild included, within 2 s', async () => {
    const proc = executor.exec({ argv: ['node', '-e', treeScript] });
    await proc.lines[Symbol.asyncIterator]().next();
    // The pids the script prints are its namespace's; find the tree from outside.
    const tree = processTree(proc.pid!);
    expect(tree.length).toBeGreaterThanOrEqual(3); // unshare, node (PID 1 inside), sleep
    const started = Date.now();
    await Promise.all([proc.kill(), proc.kill()]);
    expect(await waitUntil(() => !tree.some(processAlive), 2000 - (Date.now() - started))).toBe(true);
    // It ignores SIGTERM, so SIGKILL ended it, and the exit says so: the wrapper is killed before the namespace's
    // init (had unshare seen the init die first, it would exit 1 — 2 of 60 kills under load before that order).
    expect(await proc.exit).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it("a harness cannot kill its namespace's init to orphan its children: they still die with it", async () => {
    // PID 1 of the namespace is the init; signals to it from inside are dropped (it sets no handler), SIGKILL too.
    const script = 'kill -KILL 1; kill -TERM 1; setsid sleep 33 & echo "init: $(cat /proc/1/comm)"; sleep 30';
    const proc = executor.exec({ argv: ['sh', '-c', script] });
    const first = await proc.lines[Symbol.asyncIterator]().next();
    expect(first.value).toBe('init: dh-contain');
    // The background `setsid sleep` may not have exec'd yet when the line arrives: wait for it to show up.
    const sleepers = () => processTree(proc.pid!).filter((pid) => /^sleep 33$/.test(commandLine(pid)));
    expect(await waitUntil(() => sleepers().length === 1, 2000)).toBe(true);
    const sleeper = sleepers();
    await proc.kill();
    expect(await waitUntil(() => !sleeper.some(processAlive), 2000)).toBe(true);
  });

  it('a child that leaves the process group (setsid, detached) still dies with the process: the PID namespace holds it', async () => {
    const script = `
      const { spawn } = require('node:child_process');
      const a = spawn('setsid', ['sleep', '30'], { stdio: 'ignore' });
      const b = spawn('sleep', ['31'], { stdio: 'ignore', detached: true });
      setTimeout(() => console.log('up'), 200);
      setInterval(() => {}, 1000);
    `;
    const proc = executor.exec({ argv: ['node', '-e', script] });
    await proc.lines[Symbol.asyncIterator]().next();
    const tree = processTree(proc.pid!);
    const escapees = tree.filter((pid) => /^sleep 3[01]$/.test(commandLine(pid)));
    expect(escapees).toHaveLength(2);
    await proc.kill();
    expect(await waitUntil(() => !escapees.some(processAlive), 2000)).toBe(true);
  });

  it('kills the process when the request signal aborts: SIGTERM first, SIGKILL only for one that ignores it', async () => {
    const controller = new AbortController();
    const started = (proc: ReturnType<typeof executor.exec>) => proc.lines[Symbol.asyncIterator]().next();
    const graceful = executor.exec({ argv: ['node', '-e', 'process.on("SIGTERM", () => process.exit(7)); console.log("up"); setInterval(() => {}, 1000)'], signal: controller.signal });
    // No handler at all: SIGTERM's default action ends it at once (it is not its namespace's PID 1, which would drop it).
    const plain = executor.exec({ argv: ['node', '-e', 'console.log("up"); setInterval(() => {}, 1000)'], signal: controller.signal });
    const stubborn = executor.exec({ argv: ['node', '-e', 'process.on("SIGTERM", () => {}); console.log("up"); setInterval(() => {}, 1000)'], signal: controller.signal });
    await Promise.all([started(graceful), started(plain), started(stubborn)]);
    const abortedAt = Date.now();
    controller.abort();
    expect(await graceful.exit).toEqual({ code: 7, signal: null });
    // SIGTERM ended it (128 + 15 from the namespace's init); SIGKILL would have ended the wrapper by signal.
    expect(await plain.exit).toEqual({ code: 128 + 15, signal: null });
    // It survives SIGTERM, so it gets SIGKILL after the grace (300 ms here).
    expect((await stubborn.exit).signal).toBe('SIGKILL');
    expect(Date.now() - abortedAt).toBeGreaterThanOrEqual(300);
    expect([graceful, plain, stubborn].some((proc) => processAlive(proc.pid!))).toBe(false);
  });

  it('kill({ graceMs: 0 }) ends a process that ignores SIGTERM at once, also one whose graceful kill already waits', async () => {
    const stubborn = () => executor.exec({ argv: ['node', '-e', 'process.on("SIGTERM", () => {}); console.log("up"); setInterval(() => {}, 1000)'], killGraceMs: 5000 });
    const first = stubborn();
    const second = stubborn();
    await Promise.all([first.lines[Symbol.asyncIterator]().next(), second.lines[Symbol.asyncIterator]().next()]);
    const t0 = Date.now();
    await first.kill({ graceMs: 0 });
    expect((await first.exit).signal).toBe('SIGKILL');
    const graceful = second.kill(); // would wait 5 s
    await new Promise((r) => setTimeout(r, 100));
    await second.kill({ graceMs: 0 });
    await graceful;
    expect((await second.exit).signal).toBe('SIGKILL');
    expect(Date.now() - t0).toBeLessThan(2500);
    expect([first, second].some((proc) => processAlive(proc.pid!))).toBe(false);
  });
});

describe('runtime state', () => {
  it('records the running turn outside the workspace and lets a retried attempt kill what an earlier attempt left', async () => {
    const provider = new LocalSandboxProvider({ root });
    const ref = await provider.start(request('run', { workflowId: 'wf-pid' }));
    const handle = await provider.attach(ref);
    expect(path.relative(ref.hostWorkspacePath, handle.stateFile).startsWith('..')).toBe(true);
    const proc = handle.executor.exec({ argv: ['node', '-e', treeScript] });
    await proc.lines[Symbol.asyncIterator]().next();
    const tree = processTree(proc.pid!);
    expect(tree.length).toBeGreaterThanOrEqual(3);
    expect(JSON.parse(readFileSync(handle.stateFile, 'utf8'))).toMatchObject({ containment: 'pid-namespace', pid: proc.pid, init: { pid: tree[1] } });

    // A new attempt (a fresh worker would have no handle, only the runtime state).
    const retry = await provider.attach(ref);
    await retry.killLeftovers();
    expect(await waitUntil(() => !tree.some(processAlive), 2000)).toBe(true);
    expect(existsSync(handle.stateFile)).toBe(false);
    expect(await killRecordedTurn(handle.stateFile)).toBe(false);
  });

  it('removes the record when a turn process exits normally', async () => {
    const workspace = path.join(root, 'pid-normal');
    mkdirSync(workspace, { recursive: true });
    const stateFile = path.join(root, 'runtime-normal', 'turn.json');
    const executor = new LocalExecutor({ workspacePath: workspace, stateFile });
    const proc = executor.exec({ argv: ['node', '-e', 'setTimeout(() => {}, 200)'] });
    expect(existsSync(stateFile)).toBe(true);
    await proc.exit;
    expect(existsSync(stateFile)).toBe(false);
  });

  it('ignores a record naming a dead or recycled process', async () => {
    const file = path.join(root, 'dead.json');
    writeFileSync(file, JSON.stringify({ containment: 'pid-namespace', pid: process.pid, start: 1 }));
    expect(await killRecordedTurn(file)).toBe(false);
    expect(existsSync(file)).toBe(false);
  });
});

describe('workspaces of per-workspace users (userRange)', () => {
  const ranged = (workflowId: string): SandboxStartRequest => {
    const r = request('run', { workflowId });
    return { ...r, spec: { ...r.spec, options: { userRange: '70100-70199' } } };
  };

  it('a data directory the sandbox users cannot traverse is refused, naming the fix; once fixed, runs beside it start', async () => {
    const closed = mkdtempSync(path.join(tmpdir(), 'local-closed-'));
    chmodSync(closed, 0o700);
    const provider = new LocalSandboxProvider({ root: path.join(closed, 'workspaces') });
    await expect(provider.start(ranged('wf-closed'))).rejects.toThrow(/not reachable by the sandbox user 701\d\d:701\d\d.*chmod o\+x/);
    chmodSync(closed, 0o711);
    // The failed probe was not remembered; the next workspace is probed again and passes, and the one beside it too.
    for (const id of ['wf-open-1', 'wf-open-2']) {
      const ref = await provider.start(ranged(id));
      const handle = await provider.attach(ref);
      const proc = handle.executor.exec({ argv: ['/bin/sh', '-c', 'echo hi > mine.txt && id -u'] });
      const out = await collect(proc.lines);
      expect((await proc.exit).code).toBe(0);
      expect(out.join('')).toMatch(/^701\d\d$/);
      expect(readFileSync(path.join(ref.hostWorkspacePath, 'mine.txt'), 'utf8')).toBe('hi\n');
    }
    rmSync(closed, { recursive: true, force: true });
  });
});
