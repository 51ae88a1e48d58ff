/**
 * `durable-harness approvals | approve | deny` and the permission lines of `status`, against the real dev server
 * and a worker whose scripted stdio-JSON harness asks before it runs shell commands: what an operator sees, that
 * the printed commands work, and the exit codes.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { getAgentRun, type AgentRunHandle } from '../../src/client/index.js';
import { runCli, spawnCli, type CliOutcome } from '../support/cli.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;
const strict = (name: string, harness: string, permissions: unknown) => ({
  name,
  harness,
  systemPrompt: 'You follow scripts.',
  actions: ['echo'],
  guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 300_000 },
  permissions,
});

beforeAll(async () => {
  const base = scriptedCatalog(book);
  const noHooks = { ...(base.harnesses as Record<string, unknown>[])[0], name: 'no-hooks', capabilities: { permissionHooks: false } };
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      harnesses: [noHooks],
      agents: [strict('guarded', 'scripted', { posture: 'strict', approvalTimeoutMs: 120_000 }), strict('advisory', 'no-hooks', { posture: 'strict', advisory: true })],
    }),
  });
});
afterAll(() => w?.close());

const connection = () => ['--address', inject('temporalAddress'), '--task-queue', w.taskQueue, '--data', w.dataDir];
const cli = (args: string[]): Promise<CliOutcome> => runCli([...args, ...connection()]);

/** Runs a command exactly as the CLI printed it (`durable-harness …`). */
function runPrinted(line: string): Promise<CliOutcome> {
  const words = [...line.matchAll(/'((?:[^']|'\\'')*)'|(\S+)/g)].map((m) => (m[1] !== undefined ? m[1].replace(/'\\''/g, "'") : m[2]!));
  expect(words[0]).toBe('durable-harness');
  return runCli(words.slice(1));
}

const touch = (file: string) => ({ tool: 'Bash', kind: 'command', input: { command: `touch ${file}` }, title: `touch ${file}` });

async function waitingRun(name: string, files: string[]): Promise<{ run: AgentRunHandle; workspace: string }> {
  const task = book.write(name, [{ permissions: files.map(touch), ...ok(`${name} done`) }]);
  const run = await w.start({ agent: 'guarded', task, workflowId: testWorkflowId(name) });
  await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: 20_000, interval: 100 }).toBe(1);
  return { run, workspace: (await run.status()).sandbox!.hostWorkspacePath };
}

describe('durable-harness approvals, approve, deny', () => {
  it('lists what waits across runs and for one run; status prints the request and the approve command, which works', async () => {
    const a = await waitingRun('cli-list-a', ['a.txt']);
    const b = await waitingRun('cli-list-b', ['b.txt', 'b2.txt']);
    const [pendingA] = (await a.run.status()).pendingApprovals!;

    // Across runs: found by the search attribute (visibility lags a little).
    await expect
      .poll(async () => {
        const { stdout } = await cli(['approvals']);
        return stdout.includes(a.run.workflowId) && stdout.includes(b.run.workflowId);
      }, { timeout: 15_000, interval: 300 })
      .toBe(true);
    const all = await cli(['approvals', '--json']);
    expect(all.code).toBe(0);
    const rows = JSON.parse(all.stdout) as { workflowId: string; title: string }[];
    expect(rows.filter((r) => [a.run.workflowId, b.run.workflowId].includes(r.workflowId)).map((r) => r.title).sort()).toEqual(['touch a.txt', 'touch b.txt']);

    const one = await cli(['approvals', a.run.workflowId]);
    expect(one.code).toBe(0);
    const [header, line, ...more] = one.stdout.trimEnd().split('\n');
    expect(header).toMatch(/^RUN ID +REQUEST +TURN +KIND +TOOL +WAITING +TITLE$/);
    expect(line).toMatch(new RegExp(`^${a.run.workflowId} +${pendingA!.requestId} +1 +command +Bash +\\d+ s \\(denied in \\d+ (s|min)\\) +touch a\\.txt$`));
    // Under the table, what the request would do.
    expect(more).toEqual(['', `${pendingA!.requestId} (${a.run.workflowId}) would do:`, '    command: touch a.txt', '    argv: not given (a shell string: the harness runs it with its own shell)', "    cwd: not given (the harness's current directory)"]);

    const status = await cli(['status', a.run.workflowId]);
    expect(status.code).toBe(15); // a permission request waits for an operator
    expect(status.stdout).toContain('1 permission request waiting for an operator:');
    expect(status.stdout).toContain(`  ${pendingA!.requestId}  command · Bash: touch a.txt`);
    const printed = /approve: {2}(durable-harness approve .*)$/m.exec(status.stdout)?.[1];
    expect(printed).toBe(`durable-harness approve ${a.run.workflowId} ${pendingA!.requestId} --address ${inject('temporalAddress')}`);
    const approved = await runPrinted(printed!);
    expect(approved).toMatchObject({ code: 0 });
    expect(approved.stdout).toMatch(new RegExp(`^allowed ${pendingA!.requestId} of ${a.run.workflowId} \\(unauthenticated:\\S+\\)\\n$`));
    await expect(a.run.result()).resolves.toMatchObject({ status: 'succeeded' });
    expect(existsSync(path.join(a.workspace, 'a.txt'))).toBe(true);

    // The same decision again, and one nobody asked: exit 5 with the reason; nothing is claimed.
    const again = await cli(['deny', b.run.workflowId, 't1-0000000000']);
    expect(again).toMatchObject({ code: 5, stdout: '' });
    expect(again.stderr).toMatch(/no pending permission request "t1-0000000000"/);
    const [pendingB] = (await b.run.status()).pendingApprovals!;
    const denied = await cli(['deny', b.run.workflowId, pendingB!.requestId, '--reason', 'not today', '--by', 'carol']);
    expect(denied).toMatchObject({ code: 0, stdout: `denied ${pendingB!.requestId} of ${b.run.workflowId} (unauthenticated:carol)\n` });
    // The run goes on to its second request; the first one cannot be decided again.
    await expect.poll(async () => (await b.run.status()).pendingApprovals?.[0]?.title, { timeout: 20_000, interval: 100 }).toBe('touch b2.txt');
    const twice = await cli(['approve', b.run.workflowId, pendingB!.requestId]);
    expect(twice).toMatchObject({ code: 5, stdout: '' });
    expect(twice.stderr).toMatch(/already denied \(by unauthenticated:carol\)/);
    const [second] = (await b.run.status()).pendingApprovals!;
    expect((await cli(['deny', b.run.workflowId, second!.requestId])).code).toBe(0);
    await expect(b.run.result()).resolves.toMatchObject({ status: 'succeeded' });
    expect(existsSync(path.join(b.workspace, 'b.txt'))).toBe(false);
    expect(await w.ledger.getApproval(b.run.workflowId, pendingB!.requestId)).toMatchObject({ status: 'denied', decidedBy: 'unauthenticated:carol', message: 'not today' });
  });

  it('run exits 15 with the approve and deny commands when a permission request waits; the printed approve works', async () => {
    const id = testWorkflowId('cli-run-asks');
    const task = book.write('cli-run-asks', [{ permissions: [touch('run-asks.txt')], ...ok('asked and done') }]);
    const asked = await cli(['run', 'guarded', task, '--id', id]);
    expect(asked.code).toBe(15);
    expect(asked.stdout).toMatch(new RegExp(`^run ${id} waits for an operator to decide a permission request: command · Bash: touch run-asks\\.txt$`, 'm'));
    const [pending] = (await getAgentRun(w.client, id).status()).pendingApprovals!;
    const allow = /allow it: {2}(durable-harness approve .*)$/m.exec(asked.stdout)?.[1];
    expect(allow).toBe(`durable-harness approve ${id} ${pending!.requestId} --address ${inject('temporalAddress')}`);
    expect(asked.stdout).toMatch(new RegExp(`^  or deny: {3}durable-harness deny ${id} ${pending!.requestId} --reason why `, 'm'));
    expect(await runPrinted(allow!)).toMatchObject({ code: 0 });
    const result = await getAgentRun(w.client, id).result();
    expect(result).toMatchObject({ status: 'succeeded', result: 'asked and done' });

    // With --wait it prints the commands once per request and keeps following to the end.
    const waitId = testWorkflowId('cli-run-asks-wait');
    const following = spawnCli(['run', 'guarded', book.write('cli-run-asks-wait', [{ permissions: [touch('w.txt')], ...ok('waited') }]), '--id', waitId, '--wait', ...connection()]);
    await expect.poll(() => following.stdoutSoFar(), { timeout: 20_000, interval: 100 }).toMatch(/allow it: {2}durable-harness approve /);
    const [waiting] = (await getAgentRun(w.client, waitId).status()).pendingApprovals!;
    await getAgentRun(w.client, waitId).approve(waiting!.requestId, { by: 'dana' });
    const done = await following.outcome;
    expect(done.code).toBe(0);
    expect(done.stdout.match(/allow it:/g)).toHaveLength(1);
    expect(done.stdout).toMatch(/^succeeded after 1 turn\(s\)/m);
  });

  it('approve --edit runs the edited command instead; a broken --edit or --scope exits 2 before anything is sent', async () => {
    const { run, workspace } = await waitingRun('cli-edit', ['asked.txt']);
    const [pending] = (await run.status()).pendingApprovals!;
    for (const bad of [['--edit', '{nope'], ['--edit', '["ls"]'], ['--scope', 'forever']]) {
      const refused = await cli(['approve', run.workflowId, pending!.requestId, ...bad]);
      expect(refused.code).toBe(2);
    }
    expect((await cli(['deny', run.workflowId, pending!.requestId, '--edit', '{}'])).code).toBe(2);
    expect((await run.status()).pendingApprovals).toHaveLength(1);
    const edited = await cli(['approve', run.workflowId, pending!.requestId, '--edit', '{"command": "touch edited.txt"}', '--json']);
    expect(edited.code).toBe(0);
    expect(JSON.parse(edited.stdout)).toMatchObject({ workflowId: run.workflowId, status: 'allowed', editedInput: { command: 'touch edited.txt' } });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded' });
    // The scripted harness's permission line is not `editable`: the edit is emulated (the asked command is refused,
    // the edited one pre-approved), so neither file exists unless the model asks for the edit — the asked one never runs.
    expect(existsSync(path.join(workspace, 'asked.txt'))).toBe(false);
  });

  it('status says when a strict posture is only advisory (a harness without permission hooks)', async () => {
    const task = book.write('cli-advisory', [{ envelope: { step: 'chat', message: 'Which branch?' } }]);
    const run = await w.start({ agent: 'advisory', task, workflowId: testWorkflowId('cli-advisory') });
    await expect.poll(async () => (await run.status()).state, { timeout: 20_000, interval: 100 }).toBe('waiting_for_reply');
    const status = await cli(['status', run.workflowId]);
    expect(status.code).toBe(14);
    expect(status.stdout).toMatch(/^permissions: strict is ADVISORY, not enforced \(advisory: harness "no-hooks" cannot ask before a tool runs\)$/m);
    expect((await run.status()).policy?.permissions).toEqual({ posture: 'strict', gated: true, enforced: false, note: 'advisory: harness "no-hooks" cannot ask before a tool runs' });
    await run.cancel('done');
  });
});
