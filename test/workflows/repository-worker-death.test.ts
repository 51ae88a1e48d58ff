/**
 * A worker killed (SIGKILL, in its own process) in the middle of a run's delivery — after the commit and the push,
 * while the code host is opening the pull request: another worker on the same data directory retries the delivery
 * after its heartbeat timeout (not the activity's 10-minute deadline) and the run ends with one commit, one push and
 * one pull request.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, expect, inject, it } from 'vitest';
import { getAgentRun, startAgentRun } from '../../src/client/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { spawnNode, type NodeProcess } from '../support/cli.js';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const scratch = mkdtempSync(path.join(os.tmpdir(), 'dh-deliver-death-'));
const remote = path.join(scratch, 'remote.git');
const pushLog = path.join(scratch, 'pushes.log');
const dataDir = path.join(scratch, 'data');
const taskQueue = `test-${path.basename(scratch)}`;
const token = 'ghp_fakeDeath0123456789abcdefghijklmnop';
const book = scriptBook();
let github: FakeGitHub | undefined;
let child: NodeProcess | undefined;
let w: TestWorker | undefined;
let connection: Connection | undefined;

const git = (...args: string[]) => execFileSync('git', args, { cwd: scratch, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: scratch, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' } });

afterAll(async () => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  await w?.close();
  await connection?.close();
  await github?.close();
});

it('a worker killed while the pull request is being opened: the delivery is retried on another worker, one commit, one push, one pull request', { timeout: 180_000 }, async () => {
  const seed = path.join(scratch, 'seed');
  mkdirSync(seed);
  mkdirSync(dataDir);
  writeFileSync(path.join(seed, 'README.md'), '# demo\n');
  writeFileSync(path.join(seed, '.gitignore'), '.scripted/\n');
  git('init', '--quiet', '-b', 'main', seed);
  git('-C', seed, 'add', '.');
  git('-C', seed, '-c', 'user.name=seed', '-c', 'user.email=seed@example.com', 'commit', '--quiet', '-m', 'seed');
  git('clone', '--quiet', '--bare', seed, remote);
  writeFileSync(path.join(remote, 'hooks', 'post-receive'), `#!/bin/sh\ncat >> ${pushLog}\n`, { mode: 0o755 });
  github = await startFakeGitHub({ token });
  const catalog = scriptedCatalog(book, {
    agents: [
      {
        name: 'proposer',
        harness: 'scripted',
        actions: ['echo'],
        guardrails: { maxIterations: 3, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 300_000 },
        repository: { source: remote, ref: 'main', deliver: 'pull-request', pullRequest: { repository: 'acme/app', apiUrl: github.url, credential: 'gh_token' } },
      },
    ],
  });
  // The listing answers as it would (nothing open); the pull request is opened, and its answer never comes back.
  github.interceptNext(1, { afterHandling: true, status: 200, body: '[]' });
  github.interceptNext(1, { afterHandling: true, status: 201, delayMs: 600_000 });

  child = spawnNode(['--import', 'tsx', path.join(repoRoot, 'test/support/worker-process.ts')], {
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      TASK_QUEUE: taskQueue,
      DATA_DIR: dataDir,
      CATALOG_JSON: JSON.stringify(catalog),
      WORKFLOW_BUNDLE: inject('workflowBundlePath'),
      CREDENTIALS_JSON: JSON.stringify({ gh_token: token }),
    },
  });
  await expect.poll(() => child!.stdoutSoFar(), { timeout: 60_000, interval: 100 }).toContain('ready');
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const client = new Client({ connection });
  const workflowId = testWorkflowId('deliver-death');
  const branch = `durable-harness/${workflowId}`;
  const task = book.write('deliver-death', [{ writeFiles: { 'CHANGELOG.md': '- survived a lost worker\n' }, ...ok('Survive a lost worker') }]);
  await startAgentRun(client, { agent: 'proposer', task, workflowId, taskQueue, identity: { tenantId: 'acme', userId: 'alice' } });
  const run = getAgentRun(client, workflowId);

  // The pull request exists on the host; the worker dies waiting for the answer.
  await expect.poll(() => github!.pulls.filter((p) => p.head === branch).length, { timeout: 60_000, interval: 100 }).toBe(1);
  child.kill('SIGKILL');
  await child.outcome;
  const killedAt = Date.now();
  expect(readFileSync(pushLog, 'utf8').trim().split('\n').filter((l) => l.endsWith(`refs/heads/${branch}`))).toHaveLength(1);

  w = await startTestWorker({ catalog, dataDir, taskQueue, credentials: new MemoryCredentialStore({ gh_token: token }) });
  const result = await run.result();
  // Noticed through the heartbeat timeout (20 s), not the activity's 10-minute deadline.
  expect(Date.now() - killedAt).toBeLessThan(90_000);
  expect(result.status).toBe('succeeded');
  const opened = github.pulls.filter((p) => p.head === branch);
  expect(opened).toHaveLength(1);
  expect(result.deliverable).toMatchObject({ state: 'delivered', mode: 'pull-request', branch, pullRequest: { url: opened[0]!.html_url, number: opened[0]!.number } });
  expect(github.requests.filter((r) => r.method === 'POST' && (r.body as { head?: string }).head === branch)).toHaveLength(1);
  expect(readFileSync(pushLog, 'utf8').trim().split('\n').filter((l) => l.endsWith(`refs/heads/${branch}`))).toHaveLength(1);
  expect(git('--git-dir', remote, 'rev-list', '--count', `${result.deliverable!.base}..refs/heads/${branch}`).trim()).toBe('1');
  const history = await run.handle.fetchHistory();
  const attempts = history.events!.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes!.attempt ?? 0);
  expect(Math.max(...attempts)).toBe(2);
  expect(JSON.stringify(history)).not.toContain(token);
  // The run's git directory went at the session's end, on the worker that took over.
  expect(readdirSync(path.join(dataDir, 'git', 'runs'))).toEqual([]);
});
