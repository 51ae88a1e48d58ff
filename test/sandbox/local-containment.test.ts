/**
 * The containment helper's own edges (native/dh-contain.c through wrapArgv and the local executor): signals reach the
 * process, exit statuses, the user drop, nothing left after the process exits, the loopback under a network
 * namespace, and a compiler that does not work.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalExecutor, SandboxIsolationUnavailable, checkIsolation } from '../../src/sandbox/index.js';
import { helperPath, wrapArgv, type LocalIsolation } from '../../src/sandbox/local-containment.js';
import { commandLine, processAlive, processTree, waitUntil } from '../support/processes.js';

const root = mkdtempSync(path.join(tmpdir(), 'local-containment-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const isRoot = process.geteuid?.() === 0;

async function collect(lines: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const line of lines) out.push(line);
  return out;
}

const executorWith = (isolation: LocalIsolation) => new LocalExecutor({ workspacePath: root, isolation, killGraceMs: 2000 });

describe('the containment helper', () => {
  const executor = executorWith({ containment: 'pid-namespace' });

  it('is one exec: the worker spawns the helper, whose PID 1 runs the process', async () => {
    const proc = executor.exec({ argv: ['sh', '-c', 'echo "$PPID $(cat /proc/1/comm)"; sleep 5'] });
    const first = await proc.lines[Symbol.asyncIterator]().next();
    expect(first.value).toBe('1 dh-contain');
    const tree = processTree(proc.pid!);
    expect(commandLine(tree[0]!).split(' ')[0]).toBe(helperPath());
    await proc.kill({ graceMs: 0 });
  });

  it("a cancel's SIGTERM reaches the process's handler, and a signal to the helper alone is forwarded too", async () => {
    const script = 'process.on("SIGTERM", () => { console.log("term"); process.exit(7); }); console.log("up"); setInterval(() => {}, 1000)';
    const byGroup = executor.exec({ argv: ['node', '-e', script] });
    const byPid = executor.exec({ argv: ['node', '-e', script] });
    const lines = await Promise.all([byGroup, byPid].map((proc) => proc.lines[Symbol.asyncIterator]()));
    await Promise.all(lines.map((it) => it.next()));
    const killed = byGroup.kill();
    process.kill(byPid.pid!, 'SIGTERM'); // the helper's outer process only, not its group
    expect((await Promise.all(lines.map((it) => it.next()))).map((line) => line.value)).toEqual(['term', 'term']);
    expect(await byGroup.exit).toEqual({ code: 7, signal: null });
    expect(await byPid.exit).toEqual({ code: 7, signal: null });
    await killed;
  });

  it('SIGINT and SIGHUP reach the process once each', async () => {
    const script =
      'let n = 0; for (const s of ["SIGINT", "SIGHUP"]) process.on(s, () => { console.log(s); if (++n === 2) process.exit(0); }); console.log("up"); setInterval(() => {}, 1000)';
    const proc = executor.exec({ argv: ['node', '-e', script] });
    const lines = proc.lines[Symbol.asyncIterator]();
    await lines.next();
    process.kill(-proc.pid!, 'SIGINT');
    await new Promise((r) => setTimeout(r, 100));
    process.kill(proc.pid!, 'SIGHUP');
    expect(await collect({ [Symbol.asyncIterator]: () => lines })).toEqual(['SIGINT', 'SIGHUP']);
    expect(await proc.exit).toEqual({ code: 0, signal: null });
  });

  it('exits with the status of the process, 128+n when signal n ended it, and no "Terminated" on stderr', async () => {
    expect(await executor.exec({ argv: ['sh', '-c', 'exit 5'] }).exit).toEqual({ code: 5, signal: null });
    expect(await executor.exec({ argv: ['sh', '-c', 'kill -USR1 $$'] }).exit).toEqual({ code: 128 + 10, signal: null });
    const plain = executor.exec({ argv: ['sleep', '30'] });
    await waitUntil(() => processTree(plain.pid!).length >= 3, 2000);
    await plain.kill();
    expect(await plain.exit).toEqual({ code: 128 + 15, signal: null });
    expect(plain.stderrTail()).toBe('');
  });

  it('passes stdin through and ends the output when the process ends it', async () => {
    const proc = executor.exec({ argv: ['sh', '-c', 'read line; echo "got $line"'], stdin: 'hello\n' });
    expect(await collect(proc.lines)).toEqual(['got hello']);
    expect(await proc.exit).toEqual({ code: 0, signal: null });
  });

  it('leaves nothing once the process exits, also a setsid grandchild that sleeps on', async () => {
    const proc = executor.exec({ argv: ['sh', '-c', 'setsid sleep 41 </dev/null >/dev/null 2>&1 & sleep 0.2; echo started; sleep 0.3'] });
    const lines = proc.lines[Symbol.asyncIterator]();
    await lines.next();
    const tree = processTree(proc.pid!);
    const sleeper = tree.filter((pid) => commandLine(pid) === 'sleep 41');
    expect(sleeper).toHaveLength(1);
    expect(await proc.exit).toEqual({ code: 0, signal: null });
    expect(await waitUntil(() => !tree.some(processAlive), 2000)).toBe(true);
  });

  it('dies with the worker: a SIGKILLed parent takes the namespace along', async () => {
    // A stand-in worker: node spawning the helper (the parent it dies with), then waiting to be killed.
    const stand = `
      const { spawn } = require('node:child_process');
      spawn(${JSON.stringify(helperPath())}, ['--pid', String(process.pid), '--', '/bin/sh', '-c', 'setsid sleep 42 & sleep 43'], { stdio: 'ignore', detached: true });
      setInterval(() => {}, 1000);
    `;
    const worker = spawn(process.execPath, ['-e', stand], { stdio: 'ignore' });
    const workerPid = worker.pid!;
    const sleepers = () => processTree(workerPid).filter((pid) => /^sleep 4[23]$/.test(commandLine(pid)));
    expect(await waitUntil(() => sleepers().length === 2, 3000)).toBe(true);
    const tree = processTree(workerPid);
    process.kill(workerPid!, 'SIGKILL');
    expect(await waitUntil(() => !tree.some(processAlive), 2000)).toBe(true);
  });

  it.runIf(isRoot)('as a sandbox user: that uid and gid, no groups, no capabilities in any set, no new privileges', async () => {
    for (const containment of ['pid-namespace', 'process-group'] as const) {
      const proc = executorWith({ containment, user: { uid: 64123, gid: 64124 } }).exec({ argv: ['cat', '/proc/self/status'], cwd: '/' });
      const status = Object.fromEntries((await collect(proc.lines)).map((line) => line.split(/:\s*/, 2) as [string, string]));
      expect(status).toMatchObject({
        Uid: '64123\t64123\t64123\t64123',
        Gid: '64124\t64124\t64124\t64124',
        Groups: '',
        CapInh: '0000000000000000',
        CapPrm: '0000000000000000',
        CapEff: '0000000000000000',
        CapBnd: '0000000000000000',
        CapAmb: '0000000000000000',
        NoNewPrivs: '1',
      });
    }
  });

  it('under a network namespace the loopback is up and the only interface', async () => {
    const script = `
      const net = require('node:net');
      const ifaces = require('node:fs').readFileSync('/proc/net/dev', 'utf8').split('\\n').slice(2).filter(Boolean).map((l) => l.split(':')[0].trim());
      const server = net.createServer((s) => s.end('pong')).listen(0, '127.0.0.1', () => {
        net.connect(server.address().port, '127.0.0.1').on('data', (d) => { console.log(ifaces.join(',') + ' ' + d); process.exit(0); });
      });
    `;
    for (const containment of ['pid-namespace', 'process-group'] as const) {
      const proc = executorWith({ containment, network: 'loopback' }).exec({ argv: ['node', '-e', script] });
      expect(await collect(proc.lines)).toEqual(['lo pong']);
    }
  });

  it('a compiler that does not work is a clear SandboxIsolationUnavailable naming the fix', () => {
    const check = () => checkIsolation({ containment: 'pid-namespace' }, { cc: '/bin/false' });
    expect(check).toThrow(SandboxIsolationUnavailable);
    expect(check).toThrow(/PID namespace per turn.*native\/dh-contain\.c does not compile with "\/bin\/false".*install a C compiler \(gcc\).*containment: process-group/s);
    const previous = process.env.CC;
    process.env.CC = '/nonexistent/cc-from-env';
    try {
      expect(() => wrapArgv({ containment: 'pid-namespace' }, ['/bin/true'])).toThrow(/does not compile with "\/nonexistent\/cc-from-env" \(spawnSync \/nonexistent\/cc-from-env ENOENT\)/);
      const proc = new LocalExecutor({ workspacePath: root }).exec({ argv: ['true'] });
      expect(proc.spawnError()).toBeInstanceOf(SandboxIsolationUnavailable);
    } finally {
      if (previous === undefined) delete process.env.CC;
      else process.env.CC = previous;
    }
    // process-group without a user or a network needs no helper at all.
    expect(wrapArgv({ containment: 'process-group' }, ['/bin/true'], { cc: '/bin/false' })).toEqual(['/bin/true']);
  });
});
