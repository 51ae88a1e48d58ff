import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  LocalExecutor,
  LocalSandboxProvider,
  killStaleProcessGroup,
  resolveInside,
  safeSegment,
  type SandboxStartRequest,
  type WorkspaceScope,
} from '../../src/sandbox/index.js';
import { processAlive } from '../support/processes.js';

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

async function waitUntil(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
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
    expect(user.workspacePath).toBe(path.join(root, 'agents', 'coder', 'users', 'acme', 'u-7'));
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

  it('says which network policies it really enforces', () => {
    expect(provider.enforces('open')).toBe('enforced');
    expect(provider.enforces('mcp-only')).toBe('advisory');
    expect(provider.enforces('none')).toBe('refused');
  });

  it('refuses to attach a ref outside its root or from another provider', async () => {
    await expect(provider.attach({ provider: 'local', workspacePath: '/tmp', hostWorkspacePath: '/tmp' })).rejects.toThrow(/not inside the local root/);
    await expect(provider.attach({ provider: 'docker', workspacePath: '/w', hostWorkspacePath: root })).rejects.toThrow(/provider "docker"/);
  });
});

describe('resolveInside', () => {
  const dir = path.join(root, 'resolve');
  const outside = path.join(root, 'outside');
  mkdirSync(path.join(dir, 'sub'), { recursive: true });
  mkdirSync(outside, { recursive: true });
  symlinkSync(outside, path.join(dir, 'escape'));
  symlinkSync(path.join(dir, 'sub'), path.join(dir, 'inner'));
  symlinkSync(path.join(outside, 'missing'), path.join(dir, 'dangling'));

  it('resolves paths inside, existing or not', () => {
    expect(resolveInside(dir, 'sub/new/file.txt')).toBe(path.join(dir, 'sub', 'new', 'file.txt'));
    expect(resolveInside(dir, './sub/../README.md')).toBe(path.join(dir, 'README.md'));
    expect(resolveInside(dir, 'inner/file.txt')).toBe(path.join(dir, 'inner', 'file.txt'));
  });

  it('rejects lexical escapes and absolute paths outside', () => {
    expect(() => resolveInside(dir, '../outside/x')).toThrow(/escapes/);
    expect(() => resolveInside(dir, '/etc/passwd')).toThrow(/escapes/);
  });

  it('rejects escapes through symlinks, including not-yet-existing files below them and dangling links', () => {
    expect(() => resolveInside(dir, 'escape')).toThrow(/symlink/);
    expect(() => resolveInside(dir, 'escape/new/file.txt')).toThrow(/symlink/);
    expect(() => resolveInside(dir, 'dangling')).toThrow(/symlink/);
  });
});

describe('LocalExecutor', () => {
  const workspace = path.join(root, 'exec');
  mkdirSync(workspace, { recursive: true });
  const executor = new LocalExecutor({ workspacePath: workspace, pidFile: false, killGraceMs: 300 });

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
    const first = await proc.lines[Symbol.asyncIterator]().next();
    const pids = JSON.parse(first.value as string) as { parent: number; child: number };
    expect(processAlive(pids.child)).toBe(true);
    const started = Date.now();
    await Promise.all([proc.kill(), proc.kill()]);
    expect(await waitUntil(() => !processAlive(pids.child) && !processAlive(pids.parent), 2000 - (Date.now() - started))).toBe(true);
    expect((await proc.exit).signal).toBe('SIGKILL');
  });

  it('kills the process when the request signal aborts', async () => {
    const controller = new AbortController();
    const proc = executor.exec({ argv: ['node', '-e', 'setInterval(() => {}, 1000)'], signal: controller.signal });
    controller.abort();
    expect((await proc.exit).signal).toBe('SIGTERM');
  });
});

describe('pidfiles', () => {
  it('records the running group and lets a retried attempt kill what an earlier attempt left', async () => {
    const provider = new LocalSandboxProvider({ root });
    const ref = await provider.start(request('run', { workflowId: 'wf-pid' }));
    const handle = await provider.attach(ref);
    const proc = handle.executor.exec({ argv: ['node', '-e', treeScript] });
    const first = await proc.lines[Symbol.asyncIterator]().next();
    const pids = JSON.parse(first.value as string) as { parent: number; child: number };
    expect(readFileSync(handle.pidFile, 'utf8').trim()).toBe(String(proc.pid));

    // A new attempt (a fresh worker would have no handle, only the file).
    expect(await killStaleProcessGroup(handle.pidFile)).toBe(true);
    expect(await waitUntil(() => !processAlive(pids.child) && !processAlive(pids.parent), 2000)).toBe(true);
    expect(existsSync(handle.pidFile)).toBe(false);
    expect(await killStaleProcessGroup(handle.pidFile)).toBe(false);
  });

  it('removes the pidfile when a turn process exits normally', async () => {
    const workspace = path.join(root, 'pid-normal');
    mkdirSync(workspace, { recursive: true });
    const executor = new LocalExecutor({ workspacePath: workspace });
    const pidFile = path.join(workspace, '.durable-harness', 'turn.pid');
    expect(executor.pidFile).toBe(pidFile);
    const proc = executor.exec({ argv: ['node', '-e', 'setTimeout(() => {}, 200)'] });
    expect(existsSync(pidFile)).toBe(true);
    await proc.exit;
    expect(existsSync(pidFile)).toBe(false);
  });

  it('ignores a pidfile naming a dead group', async () => {
    const file = path.join(root, 'dead.pid');
    writeFileSync(file, '999999\n');
    expect(await killStaleProcessGroup(file)).toBe(false);
    expect(existsSync(file)).toBe(false);
  });
});
