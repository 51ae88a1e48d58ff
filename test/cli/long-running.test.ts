/**
 * `durable-harness worker` and `dev` as an operator runs them: a second catalog on a served task queue is refused,
 * the terminal shows one line per run start/end and per failed attempt, and SIGTERM/SIGINT stop everything —
 * the embedded Temporal server included — quietly and within seconds.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/temporal/dev-server.js';
import { spawnCli, type CliProcess } from '../support/cli.js';
import { processTree, waitUntilGone } from '../support/processes.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { testWorkflowId } from '../support/worker.js';

const book = scriptBook();
const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-long-'));
const started: CliProcess[] = [];

function catalogFile(name: string, extra: Parameters<typeof scriptedCatalog>[1] = {}): string {
  const file = path.join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(scriptedCatalog(book, extra)));
  return file;
}

function start(args: string[], options: Parameters<typeof spawnCli>[1] = {}): CliProcess {
  const p = spawnCli(args, options);
  started.push(p);
  return p;
}

afterEach(() => {
  for (const p of started.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

/** Lines that betray a stack dump or SDK metadata: an operator's terminal should show none. */
const noise = /^\s+at |taskToken|\{\s*$|sdkComponent/m;

describe('durable-harness worker', () => {
  it('refuses a task queue already served with another catalog, and starts beside one with the same catalog', async () => {
    const address = inject('temporalAddress');
    const queue = `catalogs-${Date.now().toString(36)}`;
    const common = ['--address', address, '--task-queue', queue, '--data', path.join(dir, 'worker-data')];
    const a = catalogFile('a');
    const b = catalogFile('b', { agents: [{ name: 'extra', harness: 'scripted' }] });
    const first = start(['worker', '--catalog', a, ...common]);
    await expect.poll(() => first.stdoutSoFar(), { timeout: 30_000 }).toMatch(/worker polling task queue/);

    const other = await start(['worker', '--catalog', b, ...common]).outcome;
    expect(other.code).toBe(2);
    expect(other.stderr).toMatch(new RegExp(`task queue "${queue}" is already served by a worker with another catalog \\(durable-harness/${first.pid}@\\S+ catalog:[0-9a-f]{12}`));
    expect(other.stderr).toMatch(/give this one its own queue \(--task-queue or DURABLE_HARNESS_TASK_QUEUE\)/);

    const same = start(['worker', '--catalog', a, ...common]);
    await expect.poll(() => same.stdoutSoFar(), { timeout: 30_000 }).toMatch(/worker polling task queue/);
    for (const p of [same, first]) {
      p.kill('SIGTERM');
      const end = await p.outcome;
      expect(end.code).toBe(0);
      expect(end.ms).toBeGreaterThan(0);
      expect(`${end.stdout}${end.stderr}`).not.toMatch(noise);
    }
  });
});

describe('durable-harness dev', () => {
  it('logs one line per run start and end and a short line per failed attempt; SIGTERM then SIGINT stop it and its Temporal server', async () => {
    const [port, uiPort] = [await freePort(), await freePort()];
    const data = path.join(dir, 'dev-data');
    const catalog = catalogFile('dev', { agents: [{ name: 'flaky', harness: 'scripted', turnAttempts: 2 }] });
    const args = ['dev', '--port', String(port), '--ui-port', String(uiPort), '--data', data, '--catalog', catalog];

    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      const dev = start(args);
      await expect.poll(() => dev.stdoutSoFar(), { timeout: 60_000 }).toMatch(/^ready; press Ctrl-C to stop$/m);
      const tree = processTree(dev.pid!);
      expect(tree.length).toBeGreaterThan(1); // the Temporal server runs as its child

      if (signal === 'SIGTERM') {
        const id = testWorkflowId('dev-log');
        const task = book.write('dev-flaky', [{ failTimes: 1, ...ok('second time lucky') }]);
        const run = await spawnCli(['run', 'flaky', task, '--id', id, '--address', `127.0.0.1:${port}`, '--data', data]).outcome;
        expect(run.code).toBe(0);
        await expect.poll(() => dev.stdoutSoFar(), { timeout: 10_000 }).toMatch(new RegExp(`run ${id} succeeded`));
        const lines = dev.stdoutSoFar().split('\n').filter((l) => l.includes(id));
        expect(lines).toEqual([
          expect.stringMatching(new RegExp(`^\\d\\d:\\d\\d:\\d\\d run ${id} started$`)),
          expect.stringMatching(new RegExp(`^\\d\\d:\\d\\d:\\d\\d run ${id}: runTurn attempt 1 failed \\(TurnFailed\\): turn failed \\(process-exit\\): .{0,240}$`)),
          expect.stringMatching(new RegExp(`^\\d\\d:\\d\\d:\\d\\d run ${id} succeeded after 1 turn\\(s\\) · 0 tokens · \\$0\\.0000$`)),
        ]);
      }

      const sent = Date.now();
      dev.kill(signal);
      const end = await dev.outcome;
      expect(end.code).toBe(0);
      expect(Date.now() - sent).toBeLessThan(8000);
      await waitUntilGone(tree, 2000); // nothing orphaned: the Temporal server went with it
      expect(await portFree(port)).toBe(true);
      expect(await portFree(uiPort)).toBe(true);
      expect(end.stdout).toMatch(/stopping: worker, then the Temporal server\n$/);
      expect(`${end.stdout}${end.stderr}`).not.toMatch(noise);
      expect(end.stderr).toBe('');
    }
  });

  it('a SIGKILLed dev takes its Temporal server with it: the port stops answering within seconds', async () => {
    const [port, uiPort] = [await freePort(), await freePort()];
    const dev = start(['dev', '--port', String(port), '--ui-port', String(uiPort), '--data', path.join(dir, 'dev-killed'), '--catalog', catalogFile('dev-killed')]);
    await expect.poll(() => dev.stdoutSoFar(), { timeout: 60_000 }).toMatch(/^ready; press Ctrl-C to stop$/m);
    const tree = processTree(dev.pid!);
    expect(await portFree(port)).toBe(false);
    dev.kill('SIGKILL'); // no handler of dev's runs: only the kernel can stop the server now
    await dev.outcome;
    const killed = Date.now();
    await expect.poll(() => portFree(port), { timeout: 5000, interval: 50 }).toBe(true);
    await expect.poll(() => portFree(uiPort), { timeout: 5000, interval: 50 }).toBe(true);
    console.log(`SIGKILLed dev: its Temporal server's port stopped answering after ${Date.now() - killed} ms`);
    await waitUntilGone(tree, 5000);
  });
});
