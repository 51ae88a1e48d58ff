/**
 * Runs on a git repository, whole (docs/repositories.md): a real worker and Temporal, the scripted harness editing
 * the checked-out work tree, a local bare repository as the remote and real `git`. A run delivers a branch, one
 * commit, its patch in the ledger and the branch pushed; a hostile harness plants hooks, an fsmonitor and a link
 * to /etc/shadow and none of it runs or leaves the tree; a granted key written into a file stops the delivery; a
 * source the agent does not allow never reaches git.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCommand } from '../../src/cli/commands.js';
import { withIo } from '../../src/cli/io.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.js';
import { startGitHttp, type GitHttp } from '../support/git-http.js';
import { scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const scratch = mkdtempSync(path.join(os.tmpdir(), 'dh-repo-run-'));
const remote = path.join(scratch, 'remote.git');
const markers = path.join(scratch, 'markers');
const deployKey = 'dk-4f1c9a7e2b3d5f6a8c0e1d2b3a4c5e6f';
const githubToken = 'ghp_fake0123456789abcdefghijklmnopqrstuv';
const pushLog = path.join(scratch, 'pushes.log');
let w: TestWorker;
let github: FakeGitHub;
/** The same remote over smart HTTP (`${gitHttp.base}/remote.git`), for a host that is down for a while. */
let gitHttp: GitHttp;

/** Git for the test's own look at the remote: no config of the machine's. */
function git(args: string[], cwd = scratch): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: scratch, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' } });
}

beforeAll(async () => {
  mkdirSync(markers);
  const seed = path.join(scratch, 'seed');
  mkdirSync(path.join(seed, 'src'), { recursive: true });
  writeFileSync(path.join(seed, 'README.md'), '# demo\n');
  writeFileSync(path.join(seed, 'src', 'app.js'), 'console.log("v1");\n');
  // The scripted harness keeps its session files in the workspace: the repository ignores them, as a project would.
  writeFileSync(path.join(seed, '.gitignore'), '.scripted/\n');
  // A repository may hold a link out of its tree: handing the checkout to the sandbox user must not follow it.
  symlinkSync('/etc/shadow', path.join(seed, 'seed-shadow'));
  git(['init', '--quiet', '-b', 'main', seed]);
  git(['-C', seed, 'add', '.']);
  git(['-C', seed, '-c', 'user.name=seed', '-c', 'user.email=seed@example.com', 'commit', '--quiet', '-m', 'seed']);
  git(['clone', '--quiet', '--bare', seed, remote]);
  // The remote counts the pushes it receives (its own hook: the remote owner's, as on any server).
  writeFileSync(path.join(remote, 'hooks', 'post-receive'), `#!/bin/sh\ncat >> ${pushLog}\n`, { mode: 0o755 });
  github = await startFakeGitHub({ token: githubToken });
  gitHttp = await startGitHttp(scratch);
  // The confined harness (another uid) reads its scripts.
  chmodSync(book.dir, 0o755);
  const agent = (name: string, repository: Record<string, unknown>, more: Record<string, unknown> = {}) => ({
    name,
    harness: 'scripted',
    actions: ['echo'],
    guardrails: { maxIterations: 4, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 120_000 },
    repository: { source: remote, ref: 'main', ...repository },
    ...more,
  });
  w = await startTestWorker({
    catalog: scriptedCatalog(book, {
      agents: [
        agent('pusher', { deliver: 'push', author: { name: 'Agent Smith', email: 'agent@example.com' } }),
        agent('granted', { deliver: 'push' }, { credentials: [{ env: 'DEPLOY_KEY', from: 'deploy_key' }] }),
        agent('committer', { deliver: 'commit', deliverOn: ['succeeded', 'failed'] }),
        // The harness as an unprivileged user (the worker runs as root in CI): the checkout must be its to edit.
        agent('confined', { deliver: 'commit' }, { sandbox: { provider: 'local', options: { user: '70123:70123' } } }),
        agent('proposer', { deliver: 'pull-request', pullRequest: { repository: 'acme/app', apiUrl: github.url, credential: 'gh_token' } }),
        agent('over-http', { source: `${gitHttp.base}/remote.git`, deliver: 'commit' }),
        agent('down-http', { source: `${gitHttp.base}/elsewhere.git`, deliver: 'commit' }),
        // A lead on the repository and a helper in its workspace (on its branch): the lead delivers, once.
        agent('lead', { deliver: 'push' }, { subAgents: ['pair'] }),
        { name: 'pair', harness: 'scripted', actions: ['echo'], sandbox: { workspaceScope: 'parent' } },
      ],
    }),
    credentials: new MemoryCredentialStore({ deploy_key: deployKey, gh_token: githubToken }),
  });
});
afterAll(async () => {
  await w?.close();
  await github?.close();
  await gitHttp?.close();
});

/** The command line in this process, reading the worker's ledger. */
async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await withIo({ out: (t) => (stdout += t), err: (t) => (stderr += t) }, () => runCommand([...args, '--data', w.dataDir]));
  return { code, stdout, stderr };
}

function readPushes(): string[] {
  return existsSync(pushLog) ? readFileSync(pushLog, 'utf8').trim().split('\n').filter(Boolean) : [];
}

const succeed = (summary: string) => ({ envelope: { step: 'success', result: summary } });

describe('a run on a repository', () => {
  it('works on a checkout of the ref and delivers one commit on its branch, pushed, with its patch in the ledger', async () => {
    const workflowId = testWorkflowId('repo-push');
    const task = book.write(workflowId, [
      { writeFiles: { 'src/app.js': 'console.log("v2");\n', 'src/new.js': 'export const n = 1;\n' }, ...succeed('Bump the app to v2\n\nAnd add new.js.') },
    ]);
    const run = await w.start({ agent: 'pusher', task, workflowId });
    const status = await run.status();
    expect(status.repository).toMatchObject({ source: remote, ref: 'main', branch: `durable-harness/${workflowId}`, deliver: 'push' });
    const result = await run.result();
    expect(result.status).toBe('succeeded');
    const d = result.deliverable!;
    expect(d).toMatchObject({ state: 'delivered', mode: 'push', branch: `durable-harness/${workflowId}`, files: 2, pushed: { remote, branch: `durable-harness/${workflowId}` } });
    const base = git(['--git-dir', remote, 'rev-parse', 'main']).trim();
    expect(d.base).toBe(base);
    // The remote has the branch at the delivered head: one commit on the base, by the configured author.
    expect(git(['--git-dir', remote, 'rev-parse', `refs/heads/${d.branch}`]).trim()).toBe(d.head);
    expect(git(['--git-dir', remote, 'rev-list', '--count', `${base}..${d.head}`]).trim()).toBe('1');
    const message = git(['--git-dir', remote, 'log', '-1', '--format=%an <%ae>%n%B', d.head!]);
    expect(message).toMatch(/^Agent Smith <agent@example\.com>\nBump the app to v2\n/);
    expect(message).toContain(`Durable-Harness-Run: ${workflowId}`);
    expect(git(['--git-dir', remote, 'show', `${d.head}:src/app.js`])).toBe('console.log("v2");\n');
    // Nothing but the edits: the harness's ignored session files stayed out.
    expect(git(['--git-dir', remote, 'diff', '--name-only', base, d.head!]).trim().split('\n')).toEqual(['src/app.js', 'src/new.js']);
    // The ledger keeps the patch (what `durable-harness diff` prints) and the run's row the deliverable.
    const patch = await w.ledger.getBlob(d.patch!.blob);
    expect(patch).toBe(git(['--git-dir', remote, 'diff', '--binary', base, d.head!]));
    expect(d.diffStat).toMatch(/2 files changed, 2 insertions\(\+\), 1 deletion\(-\)/);
    expect(((await w.ledger.getRun(workflowId))?.result as { deliverable?: unknown }).deliverable).toEqual(d);
    expect((await w.ledger.readEvents(workflowId, 0, 1000)).filter((e) => e.type === 'deliverable').map((e) => e.data)).toEqual([d]);
    // `durable-harness diff RUN` prints the patch as git wrote it (for `git apply`), --stat the summary, --json the record.
    const diff = await cli(['diff', workflowId]);
    expect(diff.code).toBe(0);
    expect(diff.stdout).toBe(patch);
    const stat = await cli(['diff', workflowId, '--stat']);
    expect(stat.stdout).toContain(`2 file(s) on ${d.branch} @ ${d.head!.slice(0, 12)} · pushed to ${remote}`);
    expect(stat.stdout).toContain('2 files changed');
    expect(JSON.parse((await cli(['diff', workflowId, '--json'])).stdout)).toEqual({ workflowId, ...d });
    const unknown = await cli(['diff', 'no-such-run']);
    expect([unknown.code, unknown.stderr]).toEqual([2, expect.stringContaining('holds no run no-such-run')]);
    // The run's git directory went with its workspace; the per-host mirror stays for the next run.
    expect(readdirSync(path.join(w.dataDir, 'git', 'runs'))).toEqual([]);
    expect(readdirSync(path.join(w.dataDir, 'git', 'mirrors'))).toHaveLength(1);
  });

  it('opens the pull request; a delivery retried after its answer was lost makes one commit, one push and one pull request', async () => {
    const workflowId = testWorkflowId('repo-pr');
    const branch = `durable-harness/${workflowId}`;
    const task = book.write(workflowId, [{ writeFiles: { 'CHANGELOG.md': '- fixed it\n' }, dumpEnv: '.scripted/given.json', ...succeed('Fix the date parser') }]);
    // The listing answers as it would; the pull request is opened but its answer is lost: the activity fails and is retried.
    github.interceptNext(1, { afterHandling: true, status: 200, body: '[]' });
    github.interceptNext(1, { afterHandling: true, status: 502, body: '{"message":"bad gateway"}' });
    const pushesBefore = readPushes();
    const run = await w.start({ agent: 'proposer', task, workflowId });
    const result = await run.result();
    const d = result.deliverable!;
    expect(d).toMatchObject({ state: 'delivered', mode: 'pull-request', branch, pushed: { remote, branch } });
    const opened = github.pulls.filter((p) => p.head === branch);
    expect(opened).toHaveLength(1);
    expect(d.pullRequest).toEqual({ url: opened[0]!.html_url, number: opened[0]!.number });
    expect(opened[0]).toMatchObject({ repository: 'acme/app', base: 'main', title: 'Fix the date parser' });
    expect(opened[0]!.body).toContain(workflowId);
    const posts = github.requests.filter((r) => r.method === 'POST' && r.path === '/repos/acme/app/pulls');
    expect(posts.filter((r) => (r.body as { head?: string }).head === branch)).toHaveLength(1);
    // The activity ran twice: the second attempt found its commit and the pushed branch, and pushed nothing again.
    const history = await run.handle.fetchHistory();
    const attempts = history.events!.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes!.attempt ?? 0);
    expect(Math.max(...attempts)).toBe(2);
    expect(readPushes().slice(pushesBefore.length).filter((line) => line.endsWith(`refs/heads/${branch}`))).toHaveLength(1);
    expect(git(['--git-dir', remote, 'rev-list', '--count', `${d.base}..refs/heads/${branch}`]).trim()).toBe('1');
    // The API token went as a header only: in no request body, no history — and never into the sandbox: not in the
    // harness's environment or argv (the workspace's copy of them), not in any file of its workspace.
    expect(JSON.stringify(history)).not.toContain(githubToken);
    const workspace = (await run.status()).sandbox!.hostWorkspacePath;
    const given = readFileSync(path.join(workspace, '.scripted', 'given.json'), 'utf8');
    expect(JSON.parse(given).argv.length).toBeGreaterThan(0);
    const tokenForms = [githubToken, Buffer.from(githubToken).toString('base64'), Buffer.from(`x-access-token:${githubToken}`).toString('base64')];
    const everyFile = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? everyFile(path.join(dir, e.name)) : e.isFile() ? [path.join(dir, e.name)] : []));
    for (const file of everyFile(workspace)) for (const form of tokenForms) expect(readFileSync(file, 'latin1'), file).not.toContain(form);
  });

  it('a harness running as the sandbox user edits the checked-out files: the checkout is given to it', async () => {
    expect(process.geteuid?.()).toBe(0); // CI runs the worker as root; the sandbox user needs it
    const workflowId = testWorkflowId('repo-confined');
    const task = book.write(workflowId, [{ writeFiles: { 'src/app.js': 'console.log("confined");\n', 'src/deep/new.txt': 'x\n' }, ...succeed('edited as 70123') }]);
    chmodSync(path.join(book.dir, `${workflowId}.json`), 0o644);
    const result = await (await w.start({ agent: 'confined', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    expect(result.deliverable).toMatchObject({ state: 'delivered', files: 2 });
    expect(await w.ledger.getBlob(result.deliverable!.patch!.blob)).toContain('+console.log("confined");');
    // The repository's link to /etc/shadow was given to the sandbox user as a link; the file it names was not.
    expect(statSync('/etc/shadow').uid).toBe(0);
    const link = path.join(w.dataDir, 'workspaces', 'runs', workflowId, 'seed-shadow');
    expect([lstatSync(link).isSymbolicLink(), lstatSync(link).uid]).toEqual([true, 70123]);
  });

  it('a hostile harness plants hooks, an fsmonitor, a filter and a link to /etc/shadow: nothing runs on the worker, nothing outside the tree is committed', async () => {
    const workflowId = testWorkflowId('repo-hostile');
    const mark = (name: string) => `#!/bin/sh\ntouch ${path.join(markers, name)}\n`;
    const task = book.write(workflowId, [
      {
        writeFiles: {
          '.git/hooks/pre-commit': mark('pre-commit'),
          '.git/hooks/post-commit': mark('post-commit'),
          '.git/hooks/pre-push': mark('pre-push'),
          '.git/config': `[core]\n\tfsmonitor = ${path.join(scratch, 'fsmon.sh')}\n\thooksPath = .git/hooks\n[filter "x"]\n\tclean = sh -c 'touch ${path.join(markers, 'filter')}; cat'\n[include]\n\tpath = ${path.join(scratch, 'evil.cfg')}\n`,
          '.gitattributes': '* filter=x\n',
          'src/app.js': 'console.log("hostile");\n',
        },
        symlinks: { shadow: '/etc/shadow', up: '../../..' },
        executables: ['.git/hooks/pre-commit', '.git/hooks/post-commit', '.git/hooks/pre-push'],
        ...succeed('done'),
      },
    ]);
    writeFileSync(path.join(scratch, 'fsmon.sh'), mark('fsmonitor'), { mode: 0o755 });
    writeFileSync(path.join(scratch, 'evil.cfg'), `[core]\n\tpager = touch ${path.join(markers, 'include')}\n`);
    const run = await w.start({ agent: 'pusher', task, workflowId });
    const result = await run.result();
    expect(result.deliverable).toMatchObject({ state: 'delivered' });
    const head = result.deliverable!.head!;
    expect(readdirSync(markers)).toEqual([]);
    // Links are committed as links (their target path), never what they point to; the harness's .git never.
    expect(git(['--git-dir', remote, 'ls-tree', '-r', head]).split('\n').filter((l) => /\t(shadow|up)$/.test(l)).map((l) => l.split(/\s+/)[0])).toEqual(['120000', '120000']);
    expect(git(['--git-dir', remote, 'cat-file', 'blob', `${head}:shadow`])).toBe('/etc/shadow');
    expect(git(['--git-dir', remote, 'ls-tree', '-r', '--name-only', head])).not.toMatch(/^\.git\//m);
    // The filter the harness declared did not clean the file: its content is what the harness wrote.
    expect(git(['--git-dir', remote, 'show', `${head}:src/app.js`])).toBe('console.log("hostile");\n');
  });

  it('a granted key written into a file stops the delivery: nothing pushed, the grant named, the value nowhere', async () => {
    const workflowId = testWorkflowId('repo-secret');
    const task = book.write(workflowId, [{ leak: 'DEPLOY_KEY', ...succeed('leaked it') }]);
    const run = await w.start({ agent: 'granted', task, workflowId });
    const result = await run.result();
    expect(result.deliverable).toMatchObject({ state: 'refused', mode: 'push' });
    expect(result.deliverable!.problem).toContain('credential grant DEPLOY_KEY');
    expect(result.deliverable!.patch).toBeUndefined();
    const stat = await cli(['diff', workflowId, '--stat']);
    expect([stat.code, stat.stdout]).toEqual([10, expect.stringContaining('refused: the diff holds the value of credential grant DEPLOY_KEY')]);
    expect(git(['--git-dir', remote, 'branch', '--list', `durable-harness/${workflowId}`]).trim()).toBe('');
    const history = JSON.stringify(await run.handle.fetchHistory());
    expect(history).not.toContain(deployKey);
    expect(JSON.stringify(await w.ledger.readEvents(workflowId, 0, 1000))).not.toContain(deployKey);
  });

  it('a run that changed nothing delivers "unchanged"; a failed run delivers when its agent says so', async () => {
    const idle = testWorkflowId('repo-idle');
    const r1 = await (await w.start({ agent: 'committer', task: book.write(idle, [succeed('nothing to do')]), workflowId: idle })).result();
    expect(r1.deliverable).toMatchObject({ state: 'unchanged', mode: 'commit' });
    expect(r1.deliverable!.head).toBe(r1.deliverable!.base);

    const failing = testWorkflowId('repo-failed');
    const task = book.write(failing, [{ writeFiles: { 'notes.md': 'half done\n' }, envelope: { step: 'failed', reason: 'gave up' } }]);
    const run = await w.start({ agent: 'committer', task, workflowId: failing });
    const failed = await run.result();
    expect(failed.status).toBe('failed');
    const row = (await w.ledger.getRun(failing))!;
    expect(row.status).toBe('failed');
    const d = (row.result as { deliverable?: { state: string; files?: number; patch?: { blob: string } } }).deliverable!;
    expect(d).toMatchObject({ state: 'delivered', files: 1 });
    expect(failed.deliverable).toEqual(d);
    expect(await w.ledger.getBlob(d.patch!.blob)).toContain('+half done');
  });

  it('a remote that is down when the run starts is fetched again (RepositoryUnreachable is retried); one that stays down fails the run with that type', async () => {
    const workflowId = testWorkflowId('repo-flaky');
    gitHttp.state.failNext = 2;
    const task = book.write(workflowId, [{ writeFiles: { 'flaky.txt': 'fetched on the third try\n' }, ...succeed('done over http') }]);
    const result = await (await w.start({ agent: 'over-http', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    expect(result.deliverable).toMatchObject({ state: 'delivered', files: 1 });
    expect(gitHttp.state.failNext).toBe(0);

    const down = testWorkflowId('repo-down');
    gitHttp.state.failNext = 1000;
    const failed = await (await w.start({ agent: 'down-http', task: book.write(down, [succeed('never')]), workflowId: down })).result();
    gitHttp.state.failNext = 0;
    expect(failed).toMatchObject({ status: 'failed', failureType: 'RepositoryUnreachable' });
    expect(failed.reason).toMatch(/could not be fetched: [^]*returned error: 503/);
  });

  it("a sub-agent in the parent's workspace edits the parent's branch: the parent delivers once, with both edits; the sub-agent delivers nothing", async () => {
    const workflowId = testWorkflowId('repo-lead');
    const branch = `durable-harness/${workflowId}`;
    book.write(`${workflowId}-pair`, [{ writeFiles: { 'src/helper.js': 'export const help = true;\n' }, ...succeed('helped') }]);
    const task = book.write(workflowId, [
      { writeFiles: { 'src/app.js': 'console.log("lead");\n' }, envelope: { step: 'sub-agent', agent: 'pair', message: `write the helper script:${workflowId}-pair`, terminateAfter: false } },
      succeed('Lead and pair'),
    ]);
    const pushesBefore = readPushes();
    const result = await (await w.start({ agent: 'lead', task, workflowId })).result();
    expect(result.status).toBe('succeeded');
    const d = result.deliverable!;
    expect(d).toMatchObject({ state: 'delivered', mode: 'push', branch, files: 2 });
    expect(git(['--git-dir', remote, 'diff', '--name-only', d.base, `refs/heads/${branch}`]).trim().split('\n')).toEqual(['src/app.js', 'src/helper.js']);
    expect(git(['--git-dir', remote, 'rev-list', '--count', `${d.base}..refs/heads/${branch}`]).trim()).toBe('1');
    expect(readPushes().slice(pushesBefore.length)).toHaveLength(1);
    const child = (await w.ledger.getRun(`${workflowId}.sub-1`))!;
    expect(child.status).toBe('succeeded');
    expect((child.result as { deliverable?: unknown }).deliverable).toBeUndefined();
    expect((await w.ledger.readEvents(`${workflowId}.sub-1`, 0, 1000)).filter((e) => e.type === 'deliverable')).toEqual([]);
  });

  it('refuses a source the agent does not allow, and a start naming a repository for an agent without one', async () => {
    const mirrors = () => readdirSync(path.join(w.dataDir, 'git', 'mirrors'));
    const mirrorsBefore = mirrors();
    const other = path.join(scratch, 'other.git');
    git(['init', '--quiet', '--bare', other]);
    const workflowId = testWorkflowId('repo-refused');
    const run = await w.start({ agent: 'pusher', task: book.write(workflowId, [succeed('x')]), workflowId, repository: { source: other } });
    const refused = await run.result();
    expect(refused.status).toBe('failed');
    expect(refused.failureType).toBe('RepositoryInvalid');
    expect(refused.reason).toContain(`is not one agent "pusher" allows: add it (or a prefix ending in "/") to the agent's repository.sources`);
    // It never reached git: no mirror of it.
    expect(mirrors()).toEqual(mirrorsBefore);

    const plain = testWorkflowId('repo-plain');
    const run2 = await w.start({ agent: 'scripted', task: book.write(plain, [succeed('x')]), workflowId: plain, repository: { ref: 'main' } });
    const plainRow = await run2.result();
    expect(plainRow.failureType).toBe('RepositoryInvalid');
    expect(plainRow.reason).toContain('Agent "scripted" has no repository in the catalog, and this run asks for one');
  });
});
