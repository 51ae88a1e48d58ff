/** The durable-harness command against the real dev server: run with progress, exit codes, operations, bad input. */
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { findTemporalCli } from '../../src/temporal/cli-path.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const bin = path.join(repoRoot, 'bin', 'durable-harness.mjs');
const book = scriptBook();
let w: TestWorker;

function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args, '--address', inject('temporalAddress'), '--task-queue', w.taskQueue, '--data', w.dataDir], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book, { agents: [{ name: 'stingy', harness: 'scripted', actions: ['echo'], guardrails: { maxIterations: 1 } }] }) });
});
afterAll(() => w?.close());

describe('durable-harness run', () => {
  it('follows a run with a progress line per turn and exits 0 when it succeeds', async () => {
    // Turn 1 takes a second, so the sampled progress shows what the harness is doing meanwhile.
    const task = book.write('cli-ok', [{ usage: { input: 1200, output: 30 }, sleepMs: 1500, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'hi' } }] } }, ok('all done')]);
    const { code, stdout } = await cli(['run', 'scripted', task, '--id', testWorkflowId('cli')]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^turn 1 · 0 tok · \$0\.0000 · running: turn 1 · scripted · sleeping$/m);
    expect(stdout).toMatch(/^turn 2 · 1,230 tok · \$0\.00\d+ · /m);
    expect(stdout).toMatch(/^succeeded after 2 turn\(s\)/m);
    expect(stdout).toMatch(/^all done$/m);
  });

  it('says how the run ended in its exit code and --json result', async () => {
    const task = book.write('cli-stop', [{ envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'x' } }] } }]);
    const { code, stdout } = await cli(['run', 'stingy', task, '--json']);
    expect(code).toBe(11);
    expect(JSON.parse(stdout)).toMatchObject({ status: 'stopped', guardrail: 'iterations' });
  });

  it('--detach prints the id; status, cancel and the cancelled exit code work on it', async () => {
    const task = book.write('cli-slow', [{ sleepMs: 30_000, ...ok() }]);
    const id = testWorkflowId('cli-detach');
    const started = await cli(['run', 'scripted', task, '--detach', '--id', id]);
    expect(started).toMatchObject({ code: 0, stdout: `${id}\n` });
    await expect.poll(async () => JSON.parse((await cli(['status', id, '--json'])).stdout).state, { timeout: 15_000 }).toBe('running');
    expect((await cli(['cancel', id, '--reason', 'from the cli'])).code).toBe(0);
    const result = await w.client.workflow.getHandle(id).result();
    expect(result).toMatchObject({ status: 'cancelled', reason: 'from the cli' });
    expect((await cli(['status', id])).code).toBe(12);
  });

  it('status shows the books: attempts, tokens, the price-table cost and the harness figure beside it, a mismatch', async () => {
    const id = testWorkflowId('cli-books');
    // $1/M in, $2/M out: 1M in = $1.00; the harness claims $3.
    await cli(['run', 'scripted', book.write('cli-books', [{ usage: { input: 1_000_000, output: 0, costUsd: 3 }, ...ok() }]), '--id', id]);
    const { stdout } = await cli(['status', id]);
    expect(stdout).toMatch(/^ledger: 1 attempt\(s\) · 1,000,000 tok · \$1\.0000 price table · harness says \$3\.0000 — MISMATCH$/m);
    const json = JSON.parse((await cli(['status', id, '--json'])).stdout) as { ledger: { totals: Record<string, unknown> } };
    expect(json.ledger.totals).toMatchObject({ costUsd: 1, harnessCostUsd: 3, costMismatch: true, attempts: 1 });
  });

  it('status says when the ledger cannot be written: the turn waits (its heartbeat says why), then finishes', async () => {
    const id = testWorkflowId('cli-readonly');
    await cli(['run', 'scripted', book.write('cli-readonly', [{ usage: { input: 7, output: 1 }, sleepMs: 1500, ...ok() }]), '--detach', '--id', id]);
    await expect.poll(async () => (await w.ledger.runTotals(id)).calls, { timeout: 15_000, interval: 50 }).toBe(1);
    // The ledger goes read-only mid-turn: the turn's closing rows cannot land, so it waits.
    w.ledger.setReadOnly(true);
    try {
      await expect.poll(async () => (await cli(['status', id])).stdout, { timeout: 20_000, interval: 300 }).toMatch(/^ledger NOT WRITABLE: waiting for the ledger: .*read-only/m);
      expect(JSON.parse((await cli(['status', id, '--json'])).stdout)).toMatchObject({ state: 'running' });
    } finally {
      w.ledger.setReadOnly(false);
    }
    expect(await w.client.workflow.getHandle(id).result()).toMatchObject({ status: 'succeeded' });
    expect((await w.ledger.runTotals(id)).usage).toEqual({ input: 7, output: 1 });
  });

  it('rejects a reply to a run that is not waiting for one, or has ended, with the reason', async () => {
    const id = testWorkflowId('cli-reply');
    await cli(['run', 'scripted', book.write('cli-busy', [{ sleepMs: 20_000, ...ok() }]), '--detach', '--id', id]);
    await expect.poll(async () => JSON.parse((await cli(['status', id, '--json'])).stdout).state, { timeout: 15_000 }).toBe('running');
    const busy = await cli(['reply', id, 'hello']);
    expect(busy.code).toBe(1);
    expect(busy.stderr).toMatch(/run is running, not waiting for a reply/);
    await cli(['cancel', id]);
    await w.client.workflow.getHandle(id).result();
    const ended = await cli(['reply', id, 'hello']);
    expect(ended.code).toBe(1);
    expect(ended.stderr).toMatch(/has already ended \(COMPLETED\)/);
    expect((await cli(['status', 'no-such-run'])).stderr).toMatch(/no run with id no-such-run/);
  });
});

describe('bad input', () => {
  it('a run id that exists (running or ended) is refused with exit 2, and the first run keeps its one ledger row', async () => {
    const id = testWorkflowId('cli-reuse');
    expect((await cli(['run', 'scripted', book.write('cli-once', [{ usage: { input: 5, output: 1 }, ...ok('first') }]), '--id', id])).code).toBe(0);
    const again = await cli(['run', 'scripted', book.write('cli-twice', [ok('second')]), '--id', id]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(new RegExp(`run id "${id}" is already taken by a completed run; run ids are never reused`));
    const running = testWorkflowId('cli-reuse-open');
    await cli(['run', 'scripted', book.write('cli-open', [{ sleepMs: 20_000, ...ok() }]), '--detach', '--id', running]);
    const clash = await cli(['run', 'scripted', book.write('cli-clash', [ok()]), '--id', running]);
    expect(clash.code).toBe(2);
    expect(clash.stderr).toMatch(/already taken by a running run/);
    await cli(['cancel', running]);
    expect(await w.ledger.listRuns(id)).toHaveLength(1);
    expect((await w.ledger.listPromptRuns(id)).map((r) => r.output)).toEqual([expect.stringContaining('first')]);
  });

  it('an unknown command or missing argument exits 2 with usage', async () => {
    expect((await cli(['frobnicate'])).code).toBe(2);
    const missing = await cli(['run', 'scripted']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/missing AGENT and TASK/);
  });

  it('an unreachable Temporal exits 3 and says how to start one', async () => {
    const child = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, [bin, 'status', 'x', '--address', '127.0.0.1:1'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      p.on('exit', (code) => resolve({ code, stderr }));
    });
    expect(child.code).toBe(3);
    expect(child.stderr).toMatch(/cannot reach Temporal at 127\.0\.0\.1:1.*durable-harness dev/);
  });

  it('a broken catalog exits 2 naming the file and the path inside it', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-bad-'));
    const file = path.join(dir, 'catalog.yaml');
    writeFileSync(file, 'agents:\n  - name: a\n    harness: nope\n    guardrails: { maxCostUsd: lots }\n');
    const p = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const c = spawn(process.execPath, [bin, 'worker', '--catalog', file, '--address', inject('temporalAddress'), '--task-queue', `bad-${path.basename(dir)}`], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      c.on('exit', (code) => resolve({ code, stderr }));
    });
    expect(p.code).toBe(2);
    expect(p.stderr).toContain(file);
    expect(p.stderr).toMatch(/agents\[0\]\.guardrails\.maxCostUsd/);
  });
});

describe('finding the Temporal CLI', () => {
  it('prefers TEMPORAL_CLI_PATH, then PATH, then .tools/', () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'dh-find-'));
    const exe = (dir: string) => {
      mkdirSync(dir, { recursive: true });
      const file = path.join(dir, 'temporal');
      writeFileSync(file, '#!/bin/sh\n');
      chmodSync(file, 0o755);
      return file;
    };
    const explicit = exe(path.join(root, 'explicit'));
    const onPath = exe(path.join(root, 'bin'));
    const tools = exe(path.join(root, '.tools'));
    expect(findTemporalCli({ TEMPORAL_CLI_PATH: explicit, PATH: path.dirname(onPath) }, root)).toEqual({ path: explicit, source: 'TEMPORAL_CLI_PATH' });
    expect(findTemporalCli({ PATH: path.dirname(onPath) }, root)).toEqual({ path: onPath, source: 'PATH' });
    expect(findTemporalCli({ PATH: '/nonexistent' }, root)).toEqual({ path: tools, source: '.tools' });
    expect(findTemporalCli({ PATH: '/nonexistent' }, path.join(root, 'empty'))).toBeUndefined();
    expect(() => findTemporalCli({ TEMPORAL_CLI_PATH: path.join(root, 'missing') }, root)).toThrow(/not an executable file.*npm run setup:temporal/);
  });
});
