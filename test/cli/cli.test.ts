/** The durable-harness command against the real dev server: what a script or an operator sees, and its exit codes. */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { exitCodeTable } from '../../src/cli/exit-codes.js';
import { findTemporalCli } from '../../src/temporal/cli-path.js';
import { runCli, spawnCli, spawnNode, type CliOutcome, type CliProcess } from '../support/cli.js';
import { getAgentRun } from '../../src/client/index.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

/** Starts the command with this file's worker settings; `connection: false` leaves them out. */
function spawnWith(args: string[], options: { taskQueue?: string; connection?: boolean } = {}): CliProcess {
  const connection = options.connection === false ? [] : ['--address', inject('temporalAddress'), '--task-queue', options.taskQueue ?? w.taskQueue, '--data', w.dataDir];
  return spawnCli([...args, ...connection]);
}

/** The command run in-process with this file's worker settings (spawned only where a process is the point). */
function cli(args: string[], options: { taskQueue?: string; connection?: boolean } = {}): Promise<CliOutcome> {
  const connection = options.connection === false ? [] : ['--address', inject('temporalAddress'), '--task-queue', options.taskQueue ?? w.taskQueue, '--data', w.dataDir];
  return runCli([...args, ...connection]);
}

/** Runs a command exactly as the CLI printed it (`durable-harness …`), through this checkout's bin. */
function runPrinted(line: string): Promise<CliOutcome> {
  const words = [...line.matchAll(/'((?:[^']|'\\'')*)'|(\S+)/g)].map((m) => (m[1] !== undefined ? m[1].replace(/'\\''/g, "'") : m[2]!));
  expect(words[0]).toBe('durable-harness');
  return cli(words.slice(1), { connection: false });
}

const jsonLines = (stdout: string) => stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);

beforeAll(async () => {
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agents: [
        { name: 'stingy', harness: 'scripted', actions: ['echo'], guardrails: { maxIterations: 1 } },
        { name: 'fragile', harness: 'scripted', turnAttempts: 1, operatorTimeoutMs: 120_000 },
      ],
    }),
  });
});
afterAll(() => w?.close());

describe('durable-harness run', () => {
  it('follows a run with a progress line per turn and exits 0 when it succeeds', async () => {
    // Each turn takes a second, so the sampled progress shows every turn and what the harness is doing meanwhile.
    const task = book.write('cli-ok', [{ usage: { input: 1200, output: 30 }, sleepMs: 1500, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'hi' } }] } }, { sleepMs: 1000, ...ok('all done') }]);
    const { code, stdout } = await cli(['run', 'scripted', task, '--id', testWorkflowId('cli')]);
    expect(code).toBe(0);
    // The turn's heartbeats show its tokens and their price before it ends (the run's own counters move when it does).
    expect(stdout).toMatch(/^turn 1 · 0 tok · \$0\.0000 · running: turn 1 · scripted · sleeping · in flight: 1,230 tok, \$0\.00\d+$/m);
    expect(stdout).not.toMatch(/in flight: \$0\.0000/);
    expect(stdout).toMatch(/^turn 2 · 1,230 tok · \$0\.00\d+ · /m);
    expect(stdout).toMatch(/^succeeded after 2 turn\(s\)/m);
    expect(stdout).toMatch(/^all done$/m);
  });

  it('--json streams JSON lines: started, progress, and the result with cost in micro-dollars; the exit code says how it ended', async () => {
    // 0.3 of a token price per turn makes float noise (0.1 + 0.2) likely without rounding.
    // The turn lasts a second, so the follower's sampling sees it running however fast the rest is.
    const task = book.write('cli-stop', [{ usage: { input: 100, output: 100, cacheRead: 100 }, sleepMs: 1000, envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'x' } }] } }]);
    const { code, stdout } = await cli(['run', 'stingy', task, '--json']);
    expect(code).toBe(11);
    const lines = jsonLines(stdout);
    expect(lines[0]).toMatchObject({ type: 'started', workflowId: expect.stringMatching(/^run-stingy-/) });
    expect(lines.some((l) => l.type === 'progress' && l.state === 'running')).toBe(true);
    const result = lines.at(-1)!;
    expect(result).toMatchObject({ type: 'result', status: 'stopped', guardrail: 'iterations' });
    expect(result.costUsd).toBe(0.00035); // 100×1 + 100×2 + 100×0.5 per million, rounded to micro-dollars
    for (const l of lines) if (typeof l.costUsd === 'number') expect(String(l.costUsd)).toMatch(/^\d+(\.\d{1,6})?$/);
  });

  it('--detach prints the id; status, cancel and the cancelled exit code work on it', async () => {
    const task = book.write('cli-slow', [{ sleepMs: 30_000, ...ok() }]);
    const id = testWorkflowId('cli-detach');
    const started = await cli(['run', 'scripted', task, '--detach', '--id', id]);
    expect(started).toMatchObject({ code: 0, stdout: `${id}\n` });
    await expect.poll(async () => JSON.parse((await cli(['status', id, '--json'])).stdout).state, { timeout: 15_000 }).toBe('running');
    expect((await cli(['cancel', id, '--reason', 'from the cli'])).code).toBe(0);
    const result = await getAgentRun(w.client, id).result();
    expect(result).toMatchObject({ status: 'cancelled', reason: 'from the cli' });
    expect((await w.client.workflow.getHandle(id).describe()).status.name).toBe('CANCELLED');
    expect((await cli(['status', id])).code).toBe(12);
    const late = await cli(['cancel', id]);
    expect(late.code).toBe(5);
    expect(late.stderr).toMatch(/has already ended \(CANCELLED\)/);
  }, 120_000); // five command-line starts: slow on a loaded machine

  it('status of a terminated run says so from Temporal (not the state it was in), and exits 10', async () => {
    const id = testWorkflowId('cli-terminated');
    await cli(['run', 'scripted', book.write('cli-term', [{ sleepMs: 30_000, ...ok() }]), '--detach', '--id', id]);
    await expect.poll(async () => JSON.parse((await cli(['status', id, '--json'])).stdout).state, { timeout: 15_000 }).toBe('running');
    await w.client.workflow.getHandle(id).terminate('pulled the plug');
    const status = await cli(['status', id, '--json']);
    expect(status.code).toBe(10);
    expect(JSON.parse(status.stdout)).toMatchObject({ workflowId: id, status: 'terminated', temporalStatus: 'TERMINATED', message: expect.stringMatching(/pulled the plug/) });
    // Visibility lags a little behind the close.
    const listed = async (status: string) => (JSON.parse((await cli(['list', '--json', '--status', status, '--limit', '100'])).stdout) as { workflowId: string; status: string }[]).find((r) => r.workflowId === id);
    await expect.poll(() => listed('terminated'), { timeout: 15_000, interval: 500 }).toMatchObject({ status: 'terminated' });
    // Its DurableHarnessStatus still says running (a closed workflow's attributes cannot change): not listed as running.
    expect(await listed('running')).toBeUndefined();
  }, 120_000);

  it('status shows the books: attempts, tokens, the price-table cost and the harness figure beside it, a mismatch', async () => {
    const id = testWorkflowId('cli-books');
    // $1/M in, $2/M out: 0.5M in = $0.50 (under the catalog's 1M-token budget); the harness claims $3.
    await cli(['run', 'scripted', book.write('cli-books', [{ usage: { input: 500_000, output: 0, costUsd: 3 }, ...ok() }]), '--id', id]);
    const { stdout } = await cli(['status', id]);
    expect(stdout).toMatch(/^ledger: 1 attempt\(s\) · 500,000 tok · \$0\.5000 price table · harness says \$3\.0000 — MISMATCH$/m);
    const json = JSON.parse((await cli(['status', id, '--json'])).stdout) as { ledger: { totals: Record<string, unknown> } };
    expect(json.ledger.totals).toMatchObject({ costUsd: 0.5, harnessCostUsd: 3, costMismatch: true, attempts: 1 });
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

  it('a run that needs an operator exits 13 and prints the exact retry and abandon commands; the printed commands work', async () => {
    const task = book.write('cli-fragile', [{ failTimes: 1, ...ok('fixed on retry') }]);
    const id = testWorkflowId('cli-op');
    const first = await cli(['run', 'fragile', task, '--id', id]);
    expect(first.code).toBe(13);
    expect(first.stdout).toMatch(new RegExp(`^run ${id} awaits an operator: .*transient failure`, 'm'));
    const retry = /^ {2}retry the turn: {2}(durable-harness retry .*)$/m.exec(first.stdout)?.[1];
    const abandon = /^ {2}or give up: {6}(durable-harness abandon .*)$/m.exec(first.stdout)?.[1];
    expect(retry).toBe(`durable-harness retry ${id} --address ${inject('temporalAddress')}`);
    expect(abandon).toBe(`durable-harness abandon ${id} --reason why --address ${inject('temporalAddress')}`);
    const status = await cli(['status', id]);
    expect(status.code).toBe(13);
    expect(status.stdout).toContain(retry);
    const retried = await runPrinted(retry!);
    expect(retried).toMatchObject({ code: 0, stdout: 'retrying the failed turn\n' });
    expect(await w.client.workflow.getHandle(id).result()).toMatchObject({ status: 'succeeded', result: 'fixed on retry' });

    const doomed = testWorkflowId('cli-abandon');
    const second = await cli(['run', 'fragile', book.write('cli-doomed', [{ failTimes: 5, ...ok() }]), '--id', doomed]);
    expect(second.code).toBe(13);
    const giveUp = /^ {2}or give up: {6}(durable-harness abandon .*)$/m.exec(second.stdout)![1]!;
    expect(await runPrinted(giveUp)).toMatchObject({ code: 0, stdout: `abandoned ${doomed}: it ends as failed\n` });
    expect(await getAgentRun(w.client, doomed).result()).toMatchObject({ status: 'failed', failureType: 'Abandoned', reason: expect.stringMatching(/^why \(after: /) });
  });

  it('--json needs-human carries the answering commands as argv too: run without a shell, they work', async () => {
    const task = book.write('cli-argv', [{ failTimes: 1, ...ok('fixed through argv') }]);
    const id = testWorkflowId('cli-argv');
    const first = await cli(['run', 'fragile', task, '--id', id, '--output', 'json']);
    expect(first.code).toBe(13);
    const needs = jsonLines(first.stdout).find((l) => l.type === 'needs-human') as { commands: string[]; argv: string[][] };
    expect(needs.argv).toEqual([
      ['durable-harness', 'retry', id, '--address', inject('temporalAddress')],
      ['durable-harness', 'abandon', id, '--reason', 'why', '--address', inject('temporalAddress')],
    ]);
    expect(needs.commands[0]).toBe(needs.argv[0]!.join(' '));
    expect(await runCli(needs.argv[0]!.slice(1))).toMatchObject({ code: 0, stdout: 'retrying the failed turn\n' });
    expect(await w.client.workflow.getHandle(id).result()).toMatchObject({ status: 'succeeded', result: 'fixed through argv' });
  });

  it('a run waiting for a reply exits 14 with the reply command; --wait keeps following until it ends', async () => {
    const task = book.write('cli-chat', [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok('used main')]);
    const id = testWorkflowId('cli-chat');
    const asked = await cli(['run', 'scripted', task, '--id', id]);
    expect(asked.code).toBe(14);
    expect(asked.stdout).toMatch(new RegExp(`^run ${id} waits for a reply to: Which branch\\?$`, 'm'));
    expect(asked.stdout).toContain(`  answer it:  durable-harness reply ${id} 'your answer' --address ${inject('temporalAddress')}`);

    const id2 = testWorkflowId('cli-chat-wait');
    const waiting = spawnWith(['run', 'scripted', book.write('cli-chat2', [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok('used main')]), '--id', id2, '--wait', '--json']);
    await expect.poll(() => waiting.stdoutSoFar(), { timeout: 15_000 }).toMatch(/"type":"needs-human"/);
    const needs = jsonLines(waiting.stdoutSoFar()).find((l) => l.type === 'needs-human')!;
    expect(needs).toMatchObject({ state: 'waiting_for_reply', commands: [`durable-harness reply ${id2} 'your answer' --address ${inject('temporalAddress')}`] });
    expect(await cli(['reply', id2, 'main'])).toMatchObject({ code: 0, stdout: 'reply accepted\n' });
    const done = await waiting.outcome;
    expect(done.code).toBe(0);
    expect(jsonLines(done.stdout).at(-1)).toMatchObject({ type: 'result', status: 'succeeded', result: 'used main' });
    await cli(['reply', id, 'main']);
  });

  it('operator commands the run state rejects exit 5 with the reason; nothing is claimed', async () => {
    const id = testWorkflowId('cli-reject');
    await cli(['run', 'scripted', book.write('cli-busy', [{ sleepMs: 120_000, ...ok() }]), '--detach', '--id', id]);
    await expect.poll(async () => JSON.parse((await cli(['status', id, '--json'])).stdout).state, { timeout: 15_000 }).toBe('running');
    const reply = await cli(['reply', id, 'hello']);
    expect(reply).toMatchObject({ code: 5, stdout: '' });
    expect(reply.stderr).toMatch(/run is running, not waiting for a reply/);
    const abandon = await cli(['abandon', id]);
    expect(abandon).toMatchObject({ code: 5, stdout: '' });
    expect(abandon.stderr).toMatch(/run is running, not awaiting_operator: nothing to abandon \(to stop it, cancel it\)/);
    const retry = await cli(['retry', id]);
    expect(retry.code).toBe(5);
    expect(retry.stderr).toMatch(/not awaiting_operator: nothing to retry/);
    await cli(['cancel', id]);
    await getAgentRun(w.client, id).result();
    const ended = await cli(['reply', id, 'hello']);
    expect(ended.code).toBe(5);
    expect(ended.stderr).toMatch(/has already ended \(CANCELLED\)/);
    const missing = await cli(['status', 'no-such-run']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/no run with id no-such-run/);
  }, 120_000); // seven command-line starts; the run sleeps long enough that only the cancel ends it

  it('an unknown agent exits 2 (configuration), naming it', async () => {
    const { code, stdout } = await cli(['run', 'nobody', 'do things']);
    expect(code).toBe(2);
    expect(stdout).toMatch(/^failed after 0 turn\(s\)/m);
    expect(stdout).toMatch(/\(UnknownAgent\) .*nobody/);
  });

  it('Ctrl-C while following stops quickly and quietly; the run goes on', async () => {
    const id = testWorkflowId('cli-sigint');
    const following = spawnWith(['run', 'scripted', book.write('cli-sigint', [{ sleepMs: 5000, ...ok('went on') }]), '--id', id]);
    await expect.poll(() => following.stdoutSoFar(), { timeout: 15_000 }).toMatch(/sleeping/);
    const sent = Date.now();
    following.kill('SIGINT');
    const { code, stderr } = await following.outcome;
    expect(Date.now() - sent).toBeLessThan(1500);
    expect(code).toBe(130);
    expect(stderr.trim()).toBe(`stopped following ${id}; the run goes on: durable-harness status ${id}`);
    expect(await w.client.workflow.getHandle(id).result()).toMatchObject({ status: 'succeeded', result: 'went on' });
  });

  it('escapes control characters the run supplies', async () => {
    const { code, stdout } = await cli(['run', 'scripted', book.write('cli-esc', [ok('done \u001b[2J\u202eevil')])]);
    expect(code).toBe(0);
    expect(stdout).toContain('done \\x1b[2J\\u202eevil');
    expect(stdout).not.toContain('\u001b');
  });
});

describe('durable-harness list', () => {
  it('prints a header and aligned rows, filtered by tenant, agent and status, with a cost column', async () => {
    const tenant = `t-${Date.now().toString(36)}`;
    const okId = testWorkflowId('list-ok');
    const stopId = testWorkflowId('list-stop');
    await cli(['run', 'scripted', book.write('list-ok', [{ usage: { input: 1000, output: 100 }, ...ok() }]), '--tenant', tenant, '--id', okId]);
    await cli(['run', 'stingy', book.write('list-stop', [{ envelope: { step: 'actions', actions: [{ name: 'echo', params: { text: 'x' } }] } }]), '--tenant', tenant, '--id', stopId]);
    const table = async (...args: string[]) => (await cli(['list', '--tenant', tenant, ...args])).stdout.trimEnd().split('\n');
    await expect.poll(async () => (await table()).length, { timeout: 15_000 }).toBe(3);
    const lines = await table();
    expect(lines[0]).toMatch(/^RUN ID +STATUS +AGENT +HARNESS +TENANT +COST +STARTED$/);
    const okLine = lines.find((l) => l.startsWith(okId))!;
    expect(okLine).toMatch(new RegExp(`^${okId} +succeeded +scripted +scripted +${tenant} +\\$0\\.0012 +\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$`));
    expect(lines.find((l) => l.startsWith(stopId))).toMatch(/ stopped +stingy /);
    // Columns line up: STATUS starts at the same place on every line.
    expect(new Set(lines.map((l) => l.indexOf(l.split(/ {2,}/)[1]!))).size).toBe(1);

    const stoppedOnly = await table('--status', 'stopped');
    expect(stoppedOnly.slice(1).map((l) => l.split(/ +/)[0])).toEqual([stopId]);
    const byAgent = await table('--agent', 'scripted');
    expect(byAgent.slice(1).map((l) => l.split(/ +/)[0])).toEqual([okId]);
    const json = JSON.parse((await cli(['list', '--tenant', tenant, '--status', 'succeeded', '--json'])).stdout);
    expect(json).toEqual([expect.objectContaining({ workflowId: okId, status: 'succeeded', agent: 'scripted', tenant, costUsd: 0.0012 })]);
    // --output json is --json; --output table is the default table.
    expect(JSON.parse((await cli(['list', '--tenant', tenant, '--status', 'succeeded', '--output', 'json'])).stdout)).toEqual(json);
    expect(await table('--output', 'table')).toEqual(lines);
  });

  it('rejects bad filters with exit 2', async () => {
    const bad = await cli(['list', '--status', 'happy']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--status must be one of starting, running, .*cancelled, terminated, timed_out; got "happy"/);
    expect((await cli(['list', '--limit', '0'])).code).toBe(2);
    expect((await cli(['list', '--tenant', "x' OR '1'='1"])).code).toBe(2);
  });
});

describe('no worker', () => {
  it('run refuses within seconds when no worker polls the task queue, and starts nothing', async () => {
    const queue = `nobody-${Date.now().toString(36)}`;
    const { code, stderr, ms } = await cli(['run', 'scripted', 'anything', '--id', testWorkflowId('nobody')], { taskQueue: queue });
    expect(code).toBe(4);
    expect(ms).toBeLessThan(10_000);
    expect(stderr).toMatch(new RegExp(`nothing started: no worker polls task queue "${queue}" in namespace "default"`));
    expect(stderr).toMatch(/durable-harness worker/);
  });

  it('run exits 4 within seconds when the worker that polled the queue is gone', { timeout: 120_000 }, async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-gone-'));
    const taskQueue = `test-${path.basename(dataDir)}`;
    const gone = spawnNode(['--import', 'tsx', path.join(repoRoot, 'test/support/worker-process.ts')], {
      env: { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: taskQueue, DATA_DIR: dataDir, CATALOG_JSON: JSON.stringify(scriptedCatalog(book)), WORKFLOW_BUNDLE: inject('workflowBundlePath') },
    });
    await expect.poll(() => gone.stdoutSoFar(), { timeout: 60_000, interval: 100 }).toContain('ready');
    gone.kill('SIGKILL');
    await gone.outcome;
    const { code, stderr, ms } = await cli(['run', 'scripted', book.write('gone', [ok()]), '--id', testWorkflowId('gone')], { taskQueue });
    expect(code).toBe(4);
    expect(ms).toBeLessThan(20_000);
    // The server still lists the killed worker's poller for minutes: a process of this host that is gone does not count.
    expect(stderr).toMatch(/nothing started: no worker polls task queue/);
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

  it('an unknown command, option or missing argument exits 2 with usage', async () => {
    expect((await cli(['frobnicate'])).code).toBe(2);
    expect((await cli(['run', 'scripted', 'x', '--frobnicate'])).code).toBe(2);
    const missing = await cli(['run', 'scripted']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/missing AGENT and TASK/);
  });

  it('an unreachable Temporal exits 3 within a second and says how to start one', async () => {
    const child = await cli(['status', 'x', '--address', '127.0.0.1:1'], { connection: false });
    expect(child.code).toBe(3);
    expect(child.stderr).toMatch(/cannot reach Temporal at 127\.0\.0\.1:1.*ECONNREFUSED.*durable-harness dev/);
    // Refused is known at once: not the 5 s connect deadline.
    expect(child.ms).toBeLessThan(1000);
  });

  it('a worker whose PostgreSQL ledger or Docker engine is not there exits 2 with the fix, no stack', async () => {
    const base = ['worker', '--address', inject('temporalAddress'), '--task-queue', `cfg-${Date.now()}`];
    const pg = await spawnCli([...base, '--data', mkdtempSync(path.join(os.tmpdir(), 'dh-cfg-pg-'))], { env: { ...process.env, DATABASE_URL: 'postgres://dh@127.0.0.1:1/ledger' } }).outcome;
    expect(pg.code).toBe(2);
    expect(pg.stderr.trim()).toBe('durable-harness: cannot open the PostgreSQL ledger at postgres://dh@127.0.0.1:1/ledger: connect ECONNREFUSED 127.0.0.1:1. Start PostgreSQL there, or fix DATABASE_URL (unset it for the embedded SQLite ledger)');
    const docker = await spawnCli([...base, '--data', mkdtempSync(path.join(os.tmpdir(), 'dh-cfg-docker-'))], {
      env: { ...process.env, DATABASE_URL: '', DOCKER_HOST: 'unix:///nonexistent/docker.sock', DURABLE_HARNESS_SANDBOX_IMAGE: 'durable-harness-sandbox:test' },
    }).outcome;
    expect(docker.code).toBe(2);
    expect(docker.stderr).toMatch(/^durable-harness: Docker engine unavailable \(ENOENT reaching \/nonexistent\/docker\.sock\)\. Start one/);
    expect(docker.stderr).not.toMatch(/\n\s+at /);
  });

  it('a broken catalog exits 2 naming the file and the path inside it', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-bad-'));
    const file = path.join(dir, 'catalog.yaml');
    writeFileSync(file, 'agents:\n  - name: a\n    harness: nope\n    guardrails: { maxCostUsd: lots }\n');
    const p = await cli(['worker', '--catalog', file, '--address', inject('temporalAddress'), '--task-queue', `bad-${path.basename(dir)}`], { connection: false });
    expect(p.code).toBe(2);
    expect(p.stderr).toContain(file);
    expect(p.stderr).toMatch(/agents\[0\]\.guardrails\.maxCostUsd/);
  });
});

describe('exit codes', () => {
  it('--help and README.md carry the same table of exit codes', async () => {
    const help = await cli(['--help'], { connection: false });
    expect(help.code).toBe(0);
    const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
    for (const [code, what] of exitCodeTable) {
      expect(help.stdout).toContain(`${String(code).padStart(3)}  ${what}`);
      expect(readme).toContain(`| ${code} | ${what} |`);
    }
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
