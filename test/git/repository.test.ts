/**
 * The worker's git against a hostile work tree (src/git/repository.ts), with the real `git` and a local bare
 * repository as the remote: a per-host mirror, a checkout on the run's branch, one commit per run however often the
 * delivery is retried, base/head/stat/patch — and nothing the harness plants (hooks, fsmonitor, hooksPath, filter
 * drivers, includes, a `.git` that is a link, a link to /etc/shadow) runs on the worker or brings outside bytes in.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeliverableRefused, checkout, commitWork, git, mirrorOf, mirrorPath } from '../../src/git/repository.js';

let root: string;
let remote: string;
const author = { name: 'durable-harness', email: 'runs@durable-harness.invalid' };

/** The test's own git, for setting up the remote (plain, outside the code under test). */
const plain = (cwd: string, ...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args], { cwd, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: cwd, GIT_CONFIG_NOSYSTEM: '1' } });

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'dh-git-'));
  const seed = path.join(root, 'seed');
  mkdirSync(seed);
  plain(seed, 'init', '-q');
  writeFileSync(path.join(seed, 'README.md'), '# Project\n');
  mkdirSync(path.join(seed, 'src'));
  writeFileSync(path.join(seed, 'src', 'app.js'), 'console.log("v1");\n');
  plain(seed, 'add', '-A');
  plain(seed, 'commit', '-q', '-m', 'initial');
  remote = path.join(root, 'remote.git');
  plain(root, 'clone', '-q', '--bare', seed, remote);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function prepared(name: string) {
  const mirrors = path.join(root, 'mirrors');
  const mirror = await mirrorOf(mirrors, remote);
  const gitDir = path.join(root, 'runtime', `${name}.git`);
  const workTree = path.join(root, 'workspaces', name);
  const { base } = await checkout({ mirror: mirror.path, ref: 'main', branch: `dh/${name}`, gitDir, workTree });
  return { mirror, gitDir, workTree, base };
}

describe('a run on a repository', () => {
  it('mirrors once, checks out on the run\'s branch with no git directory in the work tree, and delivers one commit however often it is retried', async () => {
    const first = await prepared('run-1');
    expect(first.mirror.cloned).toBe(true);
    expect((await prepared('run-2')).mirror.cloned).toBe(false); // the second run fetches into the same mirror
    expect(first.mirror.path).toBe(mirrorPath(path.join(root, 'mirrors'), remote));
    expect(readFileSync(path.join(first.workTree, 'src', 'app.js'), 'utf8')).toBe('console.log("v1");\n');
    expect(existsSync(path.join(first.workTree, '.git'))).toBe(false);
    expect((await git(['symbolic-ref', 'HEAD'], { gitDir: first.gitDir })).trim()).toBe('refs/heads/dh/run-1');
    // The run's git directory borrows the mirror's objects instead of copying them.
    expect(readFileSync(path.join(first.gitDir, 'objects', 'info', 'alternates'), 'utf8').trim()).toBe(path.join(first.mirror.path, 'objects'));

    writeFileSync(path.join(first.workTree, 'src', 'app.js'), 'console.log("v2");\n');
    writeFileSync(path.join(first.workTree, 'NOTES.md'), 'notes\n');
    const deliver = () => commitWork({ gitDir: first.gitDir, workTree: first.workTree, base: first.base, runId: 'run-1', message: 'Update app', author, maxFileBytes: 1024 * 1024 });
    const d = await deliver();
    expect(d).toMatchObject({ base: first.base, committed: true, files: 2 });
    expect(d.head).not.toBe(first.base);
    expect(d.diffStat).toMatch(/2 files changed, 2 insertions\(\+\), 1 deletion\(-\)/);
    expect(d.patch).toContain('+console.log("v2");');
    const again = await deliver();
    expect(again.head).toBe(d.head);
    expect((await git(['rev-list', '--count', `${first.base}..HEAD`], { gitDir: first.gitDir })).trim()).toBe('1');
    const message = await git(['log', '-1', '--format=%an <%ae>%n%B'], { gitDir: first.gitDir });
    expect(message).toContain('durable-harness <runs@durable-harness.invalid>');
    expect(message).toContain('Durable-Harness-Run: run-1');
  });

  it('a work tree with nothing changed delivers no commit', async () => {
    const p = await prepared('run-idle');
    const d = await commitWork({ gitDir: p.gitDir, workTree: p.workTree, base: p.base, runId: 'run-idle', message: 'nothing', author, maxFileBytes: 1024 });
    expect(d).toMatchObject({ committed: false, head: p.base, files: 0, patch: '' });
  });

  it('refuses files over the size cap, by name, and commits nothing', async () => {
    const p = await prepared('run-big');
    writeFileSync(path.join(p.workTree, 'huge.bin'), Buffer.alloc(4096, 1));
    await expect(commitWork({ gitDir: p.gitDir, workTree: p.workTree, base: p.base, runId: 'run-big', message: 'big', author, maxFileBytes: 1024 })).rejects.toThrow(DeliverableRefused);
    await expect(commitWork({ gitDir: p.gitDir, workTree: p.workTree, base: p.base, runId: 'run-big', message: 'big', author, maxFileBytes: 1024 })).rejects.toThrow(/huge\.bin/);
    expect((await git(['rev-parse', 'HEAD'], { gitDir: p.gitDir })).trim()).toBe(p.base);
  });

  it('a patch over maxPatchBytes is committed but never read whole: no patch, the rest of the deliverable', async () => {
    const p = await prepared('run-wide');
    // Many small files, each under the per-file cap, together over the patch cap.
    for (let i = 0; i < 64; i++) writeFileSync(path.join(p.workTree, `f${i}.txt`), `${'line\n'.repeat(200)}`);
    const d = await commitWork({ gitDir: p.gitDir, workTree: p.workTree, base: p.base, runId: 'run-wide', message: 'wide', author, maxFileBytes: 4096, maxPatchBytes: 16 * 1024 });
    expect(d).toMatchObject({ committed: true, files: 64, patch: undefined });
    expect(d.diffStat).toContain('64 files changed');
    // Under a cap that fits it, the same commit's patch is read (a retried delivery finds the commit).
    const again = await commitWork({ gitDir: p.gitDir, workTree: p.workTree, base: p.base, runId: 'run-wide', message: 'wide', author, maxFileBytes: 4096, maxPatchBytes: 1024 * 1024 });
    expect([again.head, Buffer.byteLength(again.patch!) > 16 * 1024]).toEqual([d.head, true]);
  });
});

describe('the work tree is hostile: nothing it names runs on the worker', () => {
  it('planted hooks, fsmonitor, hooksPath, a filter driver, an include and a .git link run nothing; a link to /etc/shadow enters as a link', async () => {
    const p = await prepared('run-hostile');
    const marker = (name: string) => path.join(root, `PWNED-${name}`);
    const cmd = (name: string) => `touch ${marker(name)}`;
    // A .git directory of the harness's own, configured to run commands on anyone who uses it.
    const planted = path.join(p.workTree, '.git');
    mkdirSync(path.join(planted, 'hooks'), { recursive: true });
    for (const hook of ['pre-commit', 'commit-msg', 'post-commit', 'prepare-commit-msg', 'post-checkout', 'reference-transaction']) {
      writeFileSync(path.join(planted, 'hooks', hook), `#!/bin/sh\n${cmd(hook)}\n`, { mode: 0o755 });
    }
    writeFileSync(path.join(root, 'evil-include'), `[core]\n\tfsmonitor = ${cmd('include')}\n`);
    writeFileSync(
      path.join(planted, 'config'),
      `[core]\n\tfsmonitor = ${cmd('fsmonitor')}\n\thooksPath = ${path.join(planted, 'hooks')}\n\tpager = ${cmd('pager')}\n\tsshCommand = ${cmd('ssh')}\n` +
        `[filter "evil"]\n\tclean = ${cmd('clean')}\n\tsmudge = ${cmd('smudge')}\n[diff "evil"]\n\ttextconv = ${cmd('textconv')}\n\tcommand = ${cmd('diffcmd')}\n` +
        `[include]\n\tpath = ${path.join(root, 'evil-include')}\n`,
    );
    writeFileSync(path.join(planted, 'HEAD'), 'ref: refs/heads/main\n');
    writeFileSync(path.join(p.workTree, '.gitattributes'), '* filter=evil diff=evil\n');
    writeFileSync(path.join(p.workTree, 'src', 'app.js'), 'console.log("changed");\n');
    symlinkSync('/etc/shadow', path.join(p.workTree, 'shadow'));
    mkdirSync(path.join(p.workTree, 'nested'));
    symlinkSync(planted, path.join(p.workTree, 'nested', '.git')); // a .git that is a link

    const d = await commitWork({ gitDir: p.gitDir, workTree: p.workTree, base: p.base, runId: 'run-hostile', message: 'hostile', author, maxFileBytes: 1024 * 1024 });
    expect(d.committed).toBe(true);
    for (const name of ['pre-commit', 'commit-msg', 'post-commit', 'prepare-commit-msg', 'post-checkout', 'reference-transaction', 'include', 'fsmonitor', 'pager', 'ssh', 'clean', 'smudge', 'textconv', 'diffcmd']) {
      expect(existsSync(marker(name)), `${name} ran on the worker`).toBe(false);
    }
    // The link is stored as a link: its blob is the path it names, never the file's bytes.
    const tree = await git(['ls-tree', '-r', 'HEAD'], { gitDir: p.gitDir });
    expect(tree).toMatch(/^120000 blob [0-9a-f]+\tshadow$/m);
    expect((await git(['cat-file', '-p', 'HEAD:shadow'], { gitDir: p.gitDir }))).toBe('/etc/shadow');
    // The harness's .git is never committed (git leaves every .git entry out).
    expect(tree).not.toMatch(/\t\.git\//);
    expect(tree).not.toMatch(/nested\/\.git/);
    expect(tree).toMatch(/\tsrc\/app\.js$/m);
  });
});
