/** The Docker sandbox provider against a REAL engine (`.ci/docker-engine.sh`) and the offline test image. */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerClient } from '../../src/sandbox/docker-client.js';
import {
  DockerSandboxErrorCode,
  DockerUnavailable,
  SandboxContainerGone,
  SandboxImageMissing,
  SandboxPolicyRefused,
} from '../../src/sandbox/docker-errors.js';
import type { DockerProcess } from '../../src/sandbox/docker-executor.js';
import { containerNameFor, dockerLabels, DockerSandboxProvider, reapContainers } from '../../src/sandbox/docker-provider.js';
import type { NetworkPolicy, SandboxRef, SandboxStartRequest } from '../../src/sandbox/types.js';
import { requireEngineAndImage, testDocker, testImage } from './docker-env.js';

const prefix = `test-docker-${randomBytes(3).toString('hex')}`;
let docker: Dockerode;
let client: DockerClient;
let root: string;
let provider: DockerSandboxProvider;
let counter = 0;

function request(networkPolicy: NetworkPolicy = 'none', options?: Record<string, unknown>): SandboxStartRequest {
  counter += 1;
  return {
    workflowId: `${prefix}-${counter}`,
    runId: `run-${counter}`,
    agent: 'tester',
    identity: { tenantId: 't', userId: 'u' },
    spec: { provider: 'docker', workspaceScope: 'run', networkPolicy, options },
  };
}

async function collect(proc: DockerProcess): Promise<{ lines: string[]; exit: Awaited<DockerProcess['exit']> }> {
  const lines: string[] = [];
  for await (const line of proc.lines) lines.push(line);
  return { lines, exit: await proc.exit };
}

async function firstLine(proc: DockerProcess): Promise<string | undefined> {
  for await (const line of proc.lines) return line;
  return undefined;
}

beforeAll(async () => {
  docker = testDocker();
  await requireEngineAndImage(docker);
  client = new DockerClient(docker);
  root = await mkdtemp(path.join(tmpdir(), 'dh-docker-'));
  provider = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: root });
});

afterAll(async () => {
  if (!client) return;
  const leftovers = await client.list([`${dockerLabels.managed}=true`]);
  for (const info of leftovers) {
    if (info.Labels[dockerLabels.workflowId]?.startsWith(prefix)) await client.remove(info.Id);
  }
  if (root) await rm(root, { recursive: true, force: true });
});

describe('DockerSandboxProvider lifecycle', () => {
  it('creates one container per run and reattaches on a second start, also under a create race', async () => {
    const req = request();
    const [a, b, c] = await Promise.all([provider.start(req), provider.start(req), provider.start(req)]);
    const d = await provider.start(req);
    expect(new Set([a.id, b.id, c.id, d.id]).size).toBe(1);
    expect(a.id).toBe(containerNameFor(req.workflowId));
    expect(a.workspacePath).toBe('/workspace');
    expect(a.hostWorkspacePath).toBe(path.join(root, 'runs', req.workflowId));
    const found = await client.list([`${dockerLabels.workflowId}=${req.workflowId}`]);
    expect(found).toHaveLength(1);
    expect(found[0]!.Labels).toMatchObject({
      [dockerLabels.managed]: 'true',
      [dockerLabels.runId]: req.runId,
      [dockerLabels.agent]: 'tester',
    });
    // A second provider (another worker) reattaches too.
    const other = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: root });
    expect((await other.start(req)).id).toBe(a.id);
    await provider.end(a);
  });

  it('is locked down: caps dropped, no-new-privileges, non-root, init, limits, read-only root, no network', async () => {
    const ref = await provider.start(request('none', { memory: '256m', cpus: 0.5, pids: 64 }));
    const info = await docker.getContainer(ref.id!).inspect();
    expect(info.HostConfig.CapDrop).toEqual(['ALL']);
    expect(info.HostConfig.SecurityOpt).toContain('no-new-privileges');
    // The keep-alive process runs as another user than every exec, so the turn-end sweep cannot stop it.
    expect(info.Config.User).toBe('65534:65534');
    expect(info.HostConfig.Init).toBe(true);
    expect(info.HostConfig.Memory).toBe(256 * 1024 ** 2);
    expect(info.HostConfig.NanoCpus).toBe(0.5e9);
    expect(info.HostConfig.PidsLimit).toBe(64);
    expect(info.HostConfig.ReadonlyRootfs).toBe(true);
    expect(info.HostConfig.NetworkMode).toBe('none');
    expect(info.Mounts.find((m) => m.Destination === '/workspace')?.Source).toBe(ref.hostWorkspacePath);
    // And enforced inside: uid 1000, no effective capabilities, root filesystem read-only, /tmp writable.
    const { executor } = await provider.attach(ref);
    const { lines, exit } = await collect(
      executor.exec({ argv: ['sh', '-c', 'id -u; grep CapEff /proc/self/status; touch /etc/x 2>/dev/null || echo ro; touch /tmp/x && echo tmp-ok; pwd; echo $HOME'] }),
    );
    expect(exit).toEqual({ code: 0, signal: null });
    expect(lines).toEqual(['1000', 'CapEff:\t0000000000000000', 'ro', 'tmp-ok', '/workspace', '/workspace/.home']);
    await provider.end(ref);
  });

  it('end() twice is safe, leaves no container and keeps the workspace', async () => {
    const ref = await provider.start(request());
    await writeFile(path.join(ref.hostWorkspacePath, 'keep.txt'), 'kept');
    await provider.end(ref);
    await provider.end(ref);
    expect(await client.inspect(ref.id!)).toBeUndefined();
    expect(await readFile(path.join(ref.hostWorkspacePath, 'keep.txt'), 'utf8')).toBe('kept');
    await expect(provider.attach(ref)).rejects.toBeInstanceOf(SandboxContainerGone);
  });

  it('reaper removes managed containers of closed runs and keeps the others', async () => {
    const closed = await provider.start(request());
    const open = await provider.start(request());
    const closedId = (await client.inspect(closed.id!))!.Config.Labels[dockerLabels.workflowId]!;
    const result = await reapContainers({ docker, deployment: provider.deployment, isRunClosed: async (workflowId) => workflowId === closedId });
    expect(result.removed).toEqual([closed.id]);
    expect(result.kept).toContain(open.id);
    expect(await client.inspect(closed.id!)).toBeUndefined();
    expect(await client.inspect(open.id!)).toBeDefined();
    await provider.end(open);
  });
});

describe('DockerExecutor', () => {
  let ref: SandboxRef;
  let handle: Awaited<ReturnType<DockerSandboxProvider['attach']>>;

  beforeAll(async () => {
    ref = await provider.start(request());
    handle = await provider.attach(ref);
  });

  afterAll(async () => {
    await handle?.release();
    if (ref) await provider.end(ref);
  });

  it('passes argv literally: shell metacharacters are never interpreted', async () => {
    const tricky = ['$(id)', '`id`', '; echo pwned', "a'b\"c", '*', '$HOME', '&& exit 7', 'line\nbreak', ''];
    const { lines, exit } = await collect(
      handle.executor.exec({ argv: ['node', '-e', 'console.log(JSON.stringify(process.argv.slice(1)))', ...tricky] }),
    );
    expect(exit.code).toBe(0);
    expect(JSON.parse(lines[0]!)).toEqual(tricky);
  });

  it('demultiplexes stdout and stderr and reports exit codes', async () => {
    const proc = handle.executor.exec({ argv: ['sh', '-c', 'echo out1; echo err1 >&2; echo out2; exit 3'] });
    const { lines, exit } = await collect(proc);
    expect(lines).toEqual(['out1', 'out2']);
    expect(proc.stderrTail()).toBe('err1\n');
    expect(exit).toEqual({ code: 3, signal: null });
    const missing = await collect(handle.executor.exec({ argv: ['no-such-binary-xyz'] }));
    expect(missing.exit.code).toBe(127);
  });

  it('streams past an over-cap line and pauses the attach stream while the reader is behind', { timeout: 120_000 }, async () => {
    const proc = handle.executor.exec({ argv: ['sh', '-c', 'head -c 209715200 /dev/zero | tr "\\0" x; echo; seq 1 200000'], lineLimits: { maxLineBytes: 1024 * 1024, maxLongLineBytes: 1024 * 1024 } });
    const it = proc.output[Symbol.asyncIterator]();
    const first = (await it.next()).value;
    expect(first).toMatchObject({ bytes: 200 * 1024 * 1024, limit: 1024 * 1024 });
    // The reader takes nothing for a while: the queue pauses the stream instead of holding 200,000 lines. (Their
    // 1.3 MB are more than the pipe, dockerd and the socket buffer between them: 20,000 lines, 108 KB, could all
    // arrive in one read before the pause took effect.)
    await new Promise((r) => setTimeout(r, 1500));
    const queue = (proc as unknown as { queue: { backlog: number } }).queue;
    expect(queue.backlog).toBeLessThan(200_000);
    const rest: unknown[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    expect(rest).toEqual(Array.from({ length: 200_000 }, (_, i) => String(i + 1)));
    expect((await proc.exit).code).toBe(0);
  });

  it('writes stdin and closes it, or keeps it open for two-way protocols', async () => {
    const once = await collect(handle.executor.exec({ argv: ['cat'], stdin: 'hello\nworld\n' }));
    expect(once.lines).toEqual(['hello', 'world']);
    const proc = handle.executor.exec({ argv: ['sh', '-c', 'read a; echo "got $a"; read b; echo "got $b"'], keepStdinOpen: true });
    const it = proc.lines[Symbol.asyncIterator]();
    proc.write('one\n');
    expect((await it.next()).value).toBe('got one');
    proc.write('two\n');
    expect((await it.next()).value).toBe('got two');
    expect(await proc.exit).toEqual({ code: 0, signal: null });
    // closeStdin ends the input of a two-way server (queued writes first), so it can save and exit.
    const server = handle.executor.exec({ argv: ['sh', '-c', 'cat; echo "stdin ended"'], keepStdinOpen: true });
    server.write('early\n');
    server.closeStdin?.();
    expect((await collect(server)).lines).toEqual(['early', 'stdin ended']);
  });

  it('puts secrets in the process environment only: not in Config.Env, not in argv', async () => {
    const secret = `sk-secret-${randomBytes(8).toString('hex')}`;
    const proc = handle.executor.exec({
      argv: ['node', '-e', 'console.log(process.env.VENDOR_KEY === undefined ? "missing" : "present"); setInterval(() => {}, 1000)'],
      env: { VENDOR_KEY: secret },
    });
    expect(await firstLine(proc)).toBe('present');
    const pid = await proc.containerPid();
    expect(pid).toBeGreaterThan(1);
    const cmdline = await client.run(ref.id!, ['cat', `/proc/${pid}/cmdline`], { user: '1000:1000' });
    expect(cmdline.stdout).toContain('setInterval');
    expect(cmdline.stdout).not.toContain(secret);
    const environ = await client.run(ref.id!, ['cat', `/proc/${pid}/environ`], { user: '1000:1000' });
    expect(environ.stdout).toContain(`VENDOR_KEY=${secret}`);
    const inspected = await docker.getContainer(ref.id!).inspect();
    expect(inspected.Config.Env.join('\n')).not.toContain(secret);
    expect(JSON.stringify(inspected)).not.toContain(secret);
    await proc.kill();
  });

  it('kill() kills the whole process tree inside the container within 2 s', async () => {
    const proc = handle.executor.exec({ argv: ['sh', '-c', 'sleep 1001 & sleep 1002 & echo started; wait'] });
    expect(await firstLine(proc)).toBe('started');
    const before = await client.run(ref.id!, ['ps', '-o', 'pid,args']);
    expect(before.stdout).toContain('sleep 1001');
    const t0 = Date.now();
    await proc.kill();
    const elapsed = Date.now() - t0;
    expect(elapsed).toBeLessThan(2000);
    expect(await proc.exit).toEqual({ code: null, signal: 'SIGTERM' });
    const after = await client.run(ref.id!, ['ps', '-o', 'pid,args']);
    expect(after.stdout).not.toMatch(/sleep 100[12]/);
    await proc.kill(); // idempotent
  });

  it('escalates to SIGKILL for a process that ignores SIGTERM, and aborts via the signal', async () => {
    const controller = new AbortController();
    const proc = handle.executor.exec({
      argv: ['sh', '-c', 'trap "" TERM; echo ready; while :; do sleep 1; done'],
      signal: controller.signal,
      killGraceMs: 300,
    });
    expect(await firstLine(proc)).toBe('ready');
    const t0 = Date.now();
    controller.abort();
    const exit = await proc.exit;
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(exit.signal).toBe('SIGKILL');
    const after = await client.run(ref.id!, ['ps', '-o', 'pid,args']);
    expect(after.stdout).not.toContain('trap');
  });

  it('kill({ graceMs: 0 }) sends SIGKILL at once, also while a graceful kill waits out its grace', async () => {
    const proc = handle.executor.exec({ argv: ['sh', '-c', 'trap "" TERM; echo ready; while :; do sleep 1; done'], killGraceMs: 5000 });
    expect(await firstLine(proc)).toBe('ready');
    const t0 = Date.now();
    const graceful = proc.kill(); // would wait 5 s
    await new Promise((r) => setTimeout(r, 200));
    await proc.kill({ graceMs: 0 });
    await graceful;
    expect((await proc.exit).signal).toBe('SIGKILL');
    expect(Date.now() - t0).toBeLessThan(3000);
    const after = await client.run(ref.id!, ['ps', '-o', 'pid,args']);
    expect(after.stdout).not.toContain('trap');
  });

  it('killLeftovers() kills a turn an earlier attempt left running, and what escaped its process group', async () => {
    const orphan = handle.executor.exec({ argv: ['sh', '-c', 'setsid sleep 1004 & (sleep 1005 &) ; echo up; exec sleep 1003'] });
    expect(await firstLine(orphan)).toBe('up');
    // A new attempt (a fresh handle, as after a worker restart) cleans up before its turn.
    const retry = await provider.attach(ref);
    await retry.killLeftovers();
    await orphan.exit;
    const after = await client.run(ref.id!, ['ps', '-o', 'pid,user,args']);
    expect(after.stdout).not.toMatch(/sleep 100[345]/);
    // The container (its keep-alive process) is still up.
    expect((await client.inspect(ref.id!))?.State.Running).toBe(true);
    expect((await collect(handle.executor.exec({ argv: ['echo', 'still here'] }))).lines).toEqual(['still here']);
  });

  it('killLeftovers() after a turn that left nothing runs no exec and keeps the file helper; a leftover beside the helper is still swept', async () => {
    const execs = async () => new Set((await client.inspect(ref.id!))?.ExecIDs ?? []);
    await handle.fs.writeFile('helper-up.txt', 'x'); // the file helper runs, as the sandbox user
    const before = await execs();
    await handle.killLeftovers();
    expect([...(await execs())].filter((id) => !before.has(id))).toEqual([]);
    // The helper survived: the next file operation needs no new exec either.
    await handle.fs.writeFile('helper-still-up.txt', 'x');
    expect([...(await execs())].filter((id) => !before.has(id))).toEqual([]);

    const escaped = handle.executor.exec({ argv: ['sh', '-c', 'setsid sleep 1006 & echo up'] });
    expect(await firstLine(escaped)).toBe('up');
    await escaped.exit;
    await handle.killLeftovers();
    const after = await client.run(ref.id!, ['ps', '-o', 'pid,user,args']);
    expect(after.stdout).not.toMatch(/sleep 1006/);
  });

  it('a turn that kills the file helper and leaves a process behind is swept; the helper comes back for the next file operation', async () => {
    await handle.fs.writeFile('helper-up.txt', 'x');
    const turn = handle.executor.exec({ argv: ['sh', '-c', 'pkill -KILL -x node; setsid sleep 1007 & echo up'] });
    expect(await firstLine(turn)).toBe('up');
    await turn.exit;
    await handle.killLeftovers();
    expect((await client.run(ref.id!, ['ps', '-o', 'pid,user,args'])).stdout).not.toMatch(/sleep 1007/);
    await handle.fs.writeFile('helper-back.txt', 'y');
    expect(await readFile(path.join(ref.hostWorkspacePath, 'helper-back.txt'), 'utf8')).toBe('y');
  });

  it('processes() on the engine\'s own host reads the kernel (cgroup and /proc): the same pids and uids as the engine\'s top, an escapee included, without a call to the engine', async () => {
    const escaped = handle.executor.exec({ argv: ['sh', '-c', 'setsid sleep 1008 & echo up; exec sleep 1009'] });
    expect(await firstLine(escaped)).toBe('up');
    let calls = 0;
    const counting = new Proxy(docker, { get: (target, key, receiver) => (key === 'getContainer' ? (...args: unknown[]) => (calls++, (target.getContainer as (...a: unknown[]) => unknown)(...args)) : Reflect.get(target, key, receiver)) });
    const counted = new DockerClient(counting as Dockerode);
    await counted.processes(ref.id!); // the first call finds the container's cgroup (one inspect)
    expect(calls).toBe(1);
    calls = 0;
    const top = (await docker.getContainer(ref.id!).top({ ps_args: '-eo pid,ruid,euid,suid' })) as { Processes: string[][] };
    const engine = top.Processes.map((row) => ({ pid: Number(row[0]), uids: row.slice(1, 4).map(Number) })).sort((a, b) => a.pid - b.pid);
    const kernel = (await counted.processes(ref.id!))?.slice().sort((a, b) => a.pid - b.pid);
    expect(calls).toBe(0);
    expect(kernel).toEqual(engine);
    expect(kernel!.filter((p) => p.uids.every((u) => u === 1000)).length).toBeGreaterThanOrEqual(2);
    await handle.killLeftovers();
    await escaped.exit;
    expect((await client.run(ref.id!, ['ps', '-o', 'pid,user,args'])).stdout).not.toMatch(/sleep 100[89]/);
  });

  it('files the container writes land in the host workspace, owned by the sandbox user', async () => {
    const { exit } = await collect(handle.executor.exec({ argv: ['sh', '-c', 'echo hi > out.txt'] }));
    expect(exit.code).toBe(0);
    const file = path.join(ref.hostWorkspacePath, 'out.txt');
    expect(await readFile(file, 'utf8')).toBe('hi\n');
    expect((await stat(file)).uid).toBe(1000);
  });
});

describe('network policy', () => {
  let server: Server;
  let port: number;

  beforeAll(async () => {
    server = createServer((_req, res) => res.end('host-secret-service'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
  });

  const probe = (p: number): string[] => [
    'node',
    '-e',
    `fetch("http://127.0.0.1:${p}/").then(r => r.text()).then(t => console.log("reached:" + t), e => console.log("blocked:" + (e.cause?.code ?? e.message)))`,
  ];

  it('none: a process cannot reach a server on the host 127.0.0.1', async () => {
    const ref = await provider.start(request('none'));
    const { executor } = await provider.attach(ref);
    const { lines } = await collect(executor.exec({ argv: probe(port) }));
    expect(lines).toEqual(['blocked:ECONNREFUSED']);
    const ifaces = await collect(executor.exec({ argv: ['sh', '-c', 'ls /sys/class/net'] }));
    expect(ifaces.lines).toEqual(['lo']);
    await provider.end(ref);
  });

  it('open: refused when the engine has no bridge network (dockerd --bridge=none), rather than silently offline', async () => {
    const hasBridge = await client.hasNetwork('bridge');
    if (hasBridge) {
      const ref = await provider.start(request('open'));
      const info = await docker.getContainer(ref.id!).inspect();
      expect(info.HostConfig.NetworkMode).toBe('bridge');
      await provider.end(ref);
    } else {
      await expect(provider.start(request('open'))).rejects.toBeInstanceOf(SandboxPolicyRefused);
    }
  });

  it('open with openNetworkMode host: the process shares the host network and reaches its 127.0.0.1', async () => {
    const hostProvider = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: root, openNetworkMode: 'host' });
    const ref = await hostProvider.start(request('open'));
    const { executor } = await hostProvider.attach(ref);
    const { lines } = await collect(executor.exec({ argv: probe(port) }));
    expect(lines).toEqual(['reached:host-secret-service']);
    await hostProvider.end(ref);
  });

  it('enforces every policy: none, vendor and allowlist with loopback only, open on the engine’s network', () => {
    expect(['none', 'vendor', 'allowlist', 'open'].map((p) => provider.enforces(p as 'none'))).toEqual(['enforced', 'enforced', 'enforced', 'enforced']);
  });
});

describe('typed errors', () => {
  it('DockerUnavailable when the engine is unreachable, saying how to start it', async () => {
    const Dockerode = (await import('dockerode')).default;
    const nowhere = new DockerSandboxProvider({
      docker: new Dockerode({ socketPath: '/tmp/no-such-dir/docker.sock' }),
      image: testImage,
      workspaceRoot: root,
    });
    const error = await nowhere.start(request()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DockerUnavailable);
    expect((error as DockerUnavailable).code).toBe('DockerUnavailable');
    expect((error as Error).message).toMatch(/docker-engine\.sh/);
    expect((error as Error).message).toMatch(/DOCKER_HOST/);
  });

  it('SandboxImageMissing when the image is not there, saying how to build it', async () => {
    const error = await provider.start(request('none', { image: 'durable-harness-sandbox:does-not-exist' })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SandboxImageMissing);
    expect((error as Error).message).toMatch(/build-sandbox-image\.sh/);
  });

  it('SandboxContainerGone when the container dies mid-run; start() again recreates it on the same workspace', async () => {
    const req = request();
    const ref = await provider.start(req);
    const { executor } = await provider.attach(ref);
    const { exit } = await collect(executor.exec({ argv: ['sh', '-c', 'echo state > state.txt'] }));
    expect(exit.code).toBe(0);
    const proc = executor.exec({ argv: ['sh', '-c', 'echo running; sleep 1000'] });
    expect(await firstLine(proc)).toBe('running');
    await docker.getContainer(ref.id!).remove({ force: true });
    await expect(proc.exit).rejects.toMatchObject({ code: DockerSandboxErrorCode.SandboxContainerGone });
    const next = executor.exec({ argv: ['true'] });
    await expect(next.exit).rejects.toBeInstanceOf(SandboxContainerGone);
    // Recovery: the run's state survives in the workspace.
    const again = await provider.start(req);
    const { executor: fresh } = await provider.attach(again);
    const { lines } = await collect(fresh.exec({ argv: ['cat', 'state.txt'] }));
    expect(lines).toEqual(['state']);
    await provider.end(again);
  });
});
