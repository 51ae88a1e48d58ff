/**
 * Operator inputs and ids at their limits, through the command's own functions (in-process, against the real dev
 * server and a real worker): oversized replies, replies that travel by reference, over-long and malformed ids.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { LedgerBlobStore } from '../../src/blobs/index.js';
import { InvalidRunInputError, startAgentRun } from '../../src/client/index.js';
import { replyUpdate } from '../../src/workflows/messages.js';
import { historyText } from '../security/support.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { runCli, spawnNode, type CliOutcome } from '../support/cli.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book) });
});
afterAll(() => w?.close());

/** Runs `durable-harness ARGS` in this process, with this file's worker settings, and collects what it prints. */
function cli(args: string[], options: { data?: string; taskQueue?: string } = {}): Promise<CliOutcome> {
  return runCli([...args, '--address', inject('temporalAddress'), '--task-queue', options.taskQueue ?? w.taskQueue, '--data', options.data ?? w.dataDir]);
}

/** Starts a run that asks a question, and waits until it waits for the reply. */
async function askingRun(label: string) {
  const workflowId = testWorkflowId(label);
  const run = await w.start({ agent: 'scripted', task: book.write(label, [{ envelope: { step: 'chat', message: 'Paste the log?' } }, ok('read it')]), workflowId });
  await expect.poll(async () => (await run.status()).state, { timeout: 15_000 }).toBe('waiting_for_reply');
  return run;
}

const MB = 1024 * 1024;
const history = async (workflowId: string) => historyText(await w.client.workflow.getHandle(workflowId).fetchHistory());

describe('replies', () => {
  it('a 10 MB reply is refused at once, with the cap, by the client and by the CLI (exit 2): nothing is sent', async () => {
    const run = await askingRun('reply-huge');
    const huge = `HUGE-${'x'.repeat(10 * MB)}`;
    const t0 = Date.now();
    const refused = await run.reply(huge).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidRunInputError);
    expect((refused as Error).message).toMatch(/^the reply is 10485765 bytes, over the limit of 4194304 bytes \(4 MiB\); nothing was sent/);
    expect(Date.now() - t0).toBeLessThan(1000);

    const byArgument = await cli(['reply', run.workflowId, huge]);
    expect(byArgument).toMatchObject({ code: 2, stdout: '' });
    expect(byArgument.stderr).toMatch(/the reply is 10485765 bytes, over the limit of 4194304 bytes \(4 MiB\); nothing was sent/);
    expect(byArgument.ms).toBeLessThan(2000);
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'dh-reply-')), 'huge.txt');
    writeFileSync(file, huge);
    const byFile = await cli(['reply', run.workflowId, '--file', file]);
    expect(byFile.code).toBe(2);
    expect(byFile.stderr).toMatch(/is 10485765 bytes, over the limit of 4194304 bytes \(4 MiB\); nothing was sent/);

    // The run still waits, and nothing of the refused replies reached its history.
    expect((await run.status()).state).toBe('waiting_for_reply');
    expect(await history(run.workflowId)).not.toContain('HUGE-');
    expect(await cli(['reply', run.workflowId, 'the', 'short', 'answer'])).toMatchObject({ code: 0, stdout: 'reply accepted\n' });
    expect((await run.result()).status).toBe('succeeded');
  });

  it('a reply above the inline limit goes by reference through the ledger (CLI --file, client with blobs): accepted, its bytes not in history', async () => {
    const marker = `LOG-${Date.now().toString(36)}`;
    const log = `${marker}\n${'log line\n'.repeat(200_000)}`; // 1.8 MB
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'dh-reply-')), 'log.txt');
    writeFileSync(file, log);

    // Without the workers' ledger on this machine the CLI cannot send it by reference: refused, saying how.
    const viaCli = await askingRun('reply-by-ref-cli');
    const elsewhere = await cli(['reply', viaCli.workflowId, '--file', file], { data: mkdtempSync(path.join(os.tmpdir(), 'dh-noledger-')) });
    expect(elsewhere.code).toBe(2);
    expect(elsewhere.stderr).toMatch(/the reply is 18000\d\d characters, over the inline limit of 16384: it travels by reference through the workers' ledger, and this machine has none .* nothing was sent/);
    // A client without the blob store is refused too, before anything is sent.
    await expect(viaCli.reply(log)).rejects.toThrow(/over the inline limit of 16384; nothing was sent\. A longer reply travels by reference: pass \{ blobs \}/);

    expect(await cli(['reply', viaCli.workflowId, '--file', file])).toMatchObject({ code: 0, stdout: 'reply accepted\n' });
    const viaClient = await askingRun('reply-by-ref-client');
    await viaClient.reply(log, { blobs: new LedgerBlobStore(w.ledger) });

    for (const run of [viaCli, viaClient]) {
      expect((await run.result()).status).toBe('succeeded');
      // The harness got the whole reply in its next turn ...
      const rows = await w.ledger.listPromptRuns(run.workflowId);
      expect(rows[1]!.input).toContain(log);
      // ... and the history holds only its reference: not the text, not even its opening beyond the preview.
      const text = await history(run.workflowId);
      expect(text).not.toContain('log line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line\nlog line');
      expect(text.length, run.workflowId).toBeLessThan(64 * 1024);
    }
  });

  it('the run itself refuses an inline reply over the inline limit (the last line): rejected with the limit, nothing in history', async () => {
    const run = await askingRun('reply-validator');
    const rejected = await w.client.workflow
      .getHandle(run.workflowId)
      .executeUpdate(replyUpdate, { args: [`RAW-${'y'.repeat(20_000)}`] })
      .catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(WorkflowUpdateFailedError);
    expect((rejected as WorkflowUpdateFailedError).cause?.message).toMatch(/^the reply is 20004 characters, over the inline limit of 16384: a longer reply travels by reference/);
    const forged = await w.client.workflow
      .getHandle(run.workflowId)
      .executeUpdate(replyUpdate, { args: [{ blob: 'f'.repeat(64), bytes: 10 * MB, preview: 'x' }] })
      .catch((e: unknown) => e);
    expect((forged as WorkflowUpdateFailedError).cause?.message).toMatch(/^the reply is 10485760 bytes, over the limit of 4194304 bytes/);
    expect(await history(run.workflowId)).not.toContain('RAW-');
    await run.reply('fine');
    expect((await run.result()).status).toBe('succeeded');
  });
});

describe('ids', () => {
  it('a 10 KB tenant id, an over-long workflow id and malformed ids are refused before start with exit 2, naming the limit; nothing starts', async () => {
    const task = book.write('ids', [ok()]);
    const cases: [string[], RegExp][] = [
      [['--tenant', 't'.repeat(10 * 1024)], /identity\.tenantId: 10240 characters, over the limit of 200: use a shorter id/],
      [['--user', 'bob\n\x1b[2Kroot'], /identity\.userId: "bob\\n\\u001b\[2Kroot" has characters an id may not have: use letters, digits and .* \(at most 200\)/],
      [['--id', 'r'.repeat(201)], /workflowId: 201 characters, over the limit of 200/],
    ];
    for (const [flags, message] of cases) {
      const id = flags.includes('--id') ? flags[flags.indexOf('--id') + 1]! : testWorkflowId('bad-id');
      const outcome = await cli(['run', 'scripted', task, ...(flags.includes('--id') ? [] : ['--id', id]), ...flags]);
      expect(outcome.code, flags.join(' ').slice(0, 40)).toBe(2);
      expect(outcome.stderr).toMatch(/^durable-harness: cannot start the agent run: /);
      expect(outcome.stderr).toMatch(message);
      expect(outcome.ms).toBeLessThan(2000);
      await expect(w.client.workflow.getHandle(id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    }
    const agent = await cli(['run', 'a'.repeat(10 * 1024), task]);
    expect(agent.code).toBe(2);
    expect(agent.stderr).toMatch(/agent: 10240 characters, over the limit of 200/);
    // The client says the same to a service.
    await expect(startAgentRun(w.client, { agent: 'scripted', task, identity: { tenantId: 'x'.repeat(10 * 1024), userId: 'u' } })).rejects.toThrow(/identity\.tenantId: 10240 characters, over the limit of 200/);
  });
});

describe('a silent worker', () => {
  it('status of a run whose worker is frozen (SIGSTOP) says the worker is busy (exit 6), not that no worker polls; once the worker is gone, it says so (exit 4)', { timeout: 180_000 }, async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-frozen-'));
    const taskQueue = `test-${path.basename(dataDir)}`;
    const catalog = scriptedCatalog(book);
    const worker = spawnNode(['--import', 'tsx', path.join(repoRoot, 'test/support/worker-process.ts')], {
      env: { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: taskQueue, DATA_DIR: dataDir, CATALOG_JSON: JSON.stringify(catalog), WORKFLOW_BUNDLE: inject('workflowBundlePath') },
    });
    try {
      await expect.poll(() => worker.stdoutSoFar(), { timeout: 60_000, interval: 100 }).toContain('ready');
      const workflowId = testWorkflowId('frozen');
      const run = await startAgentRun(w.client, { agent: 'scripted', task: book.write('frozen', [{ sleepMs: 8000, ...ok('thawed') }]), identity: { tenantId: 'acme', userId: 'alice' }, workflowId, taskQueue });
      await expect.poll(async () => (await run.status()).state, { timeout: 30_000 }).toBe('running');
      expect((await cli(['status', workflowId], { data: dataDir, taskQueue })).code).toBe(0);

      worker.kill('SIGSTOP');
      let frozen: Awaited<ReturnType<typeof cli>>;
      try {
        frozen = await cli(['status', workflowId], { data: dataDir, taskQueue });
      } finally {
        worker.kill('SIGCONT');
      }
      expect(frozen.code, frozen.stderr).toBe(6);
      expect(frozen.stderr).toMatch(new RegExp(`^durable-harness: run ${workflowId} is open \\(DurableHarnessStatus running\\) but its status query got no answer: the worker did not answer within 3 s \\(busy\\): 1 worker polls task queue "${taskQueue}" \\(last poll \\d+ s ago\\)\\. The run goes on`));
      expect(frozen.stderr).not.toMatch(/no worker polls/);
      // Thawed, the worker answers again and the run ends as if nothing happened.
      expect((await run.result()).status).toBe('succeeded');

      const waiting = await startAgentRun(w.client, { agent: 'scripted', task: book.write('orphaned', [{ sleepMs: 60_000, ...ok() }]), identity: { tenantId: 'acme', userId: 'alice' }, workflowId: testWorkflowId('orphaned'), taskQueue });
      await expect.poll(async () => (await waiting.status()).state, { timeout: 30_000 }).toBe('running');
      worker.kill('SIGKILL');
      await worker.outcome;
      // The server still lists the killed worker's poller; it is a process of this host that is gone.
      const gone = await cli(['status', waiting.workflowId], { data: dataDir, taskQueue });
      expect(gone.code).toBe(4);
      expect(gone.stderr).toMatch(/but its status query got no answer: no worker polls task queue/);
      await waiting.handle.terminate('test over');
    } finally {
      if (worker.exitCode === null) worker.kill('SIGKILL');
    }
  });
});
