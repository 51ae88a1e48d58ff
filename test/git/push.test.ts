/**
 * Pushing a run's branch (src/git/push.ts) with the real `git`: to a local bare repository (once; a retry pushes
 * nothing; a branch at another commit is refused, never forced) and over smart HTTP — `git http-backend` as a CGI
 * behind node:http on 127.0.0.1, which asks for the token as Basic auth — where the token travels only in git's
 * environment: in no argv, no config file, no message.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { PushRefused, pushBranch, remoteAuth } from '../../src/git/push.js';
import { checkout, commitWork, git, GitError, mirrorOf, mirrorPath } from '../../src/git/repository.js';
import { startGitHttp, type GitHttp } from '../support/git-http.js';

/** Every argv the code under test hands to `execFile` (the worker's git): the token must be in none. */
const spied = vi.hoisted(() => ({ argv: [] as string[][] }));
vi.mock('node:child_process', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:child_process')>();
  const execFile = (...args: unknown[]) => {
    spied.argv.push([String(args[0]), ...((Array.isArray(args[1]) ? args[1] : []) as string[])]);
    return (actual.execFile as (...a: unknown[]) => unknown)(...args);
  };
  return { ...actual, execFile };
});

let root: string;
/** The bare remote every push goes to (served by path, and over HTTP as `/remote.git`). */
let remote: string;
let hookLog: string;
/** The run: its git directory and the commit it delivers. */
let run: { gitDir: string; head: string; base: string };
const author = { name: 'durable-harness', email: 'runs@durable-harness.invalid' };

/** The test's own git, for setting up the remote (plain, outside the code under test). */
const plain = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args], { cwd, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: cwd, GIT_CONFIG_NOSYSTEM: '1' } });
const remoteRef = (ref: string) => {
  try {
    return plain(remote, 'rev-parse', '--verify', '--quiet', ref).trim();
  } catch {
    return undefined;
  }
};
const pushesLogged = () => (existsSync(hookLog) ? readFileSync(hookLog, 'utf8').split('\n').filter(Boolean) : []);

beforeAll(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'dh-push-'));
  const seed = path.join(root, 'seed');
  mkdirSync(seed);
  plain(seed, 'init', '-q');
  writeFileSync(path.join(seed, 'README.md'), '# Project\n');
  plain(seed, 'add', '-A');
  plain(seed, 'commit', '-q', '-m', 'initial');
  mkdirSync(path.join(root, 'srv'));
  remote = path.join(root, 'srv', 'remote.git');
  plain(root, 'clone', '-q', '--bare', seed, remote);
  plain(remote, 'config', 'http.receivepack', 'true');
  // The remote's own hook (its owner's): one line per ref a push updates.
  hookLog = path.join(root, 'post-receive.log');
  writeFileSync(path.join(remote, 'hooks', 'post-receive'), `#!/bin/sh\ncat >> ${JSON.stringify(hookLog)}\n`);
  chmodSync(path.join(remote, 'hooks', 'post-receive'), 0o755);

  const mirror = await mirrorOf(path.join(root, 'mirrors'), remote);
  const gitDir = path.join(root, 'runtime', 'run-1.git');
  const workTree = path.join(root, 'workspaces', 'run-1');
  const { base } = await checkout({ mirror: mirror.path, ref: 'main', branch: 'dh/run-1', gitDir, workTree });
  writeFileSync(path.join(workTree, 'NOTES.md'), 'the run\'s work\n');
  const d = await commitWork({ gitDir, workTree, base, runId: 'run-1', message: 'Add notes', author, maxFileBytes: 1024 * 1024 });
  run = { gitDir, head: d.head, base };
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('pushBranch to a local bare remote', () => {
  it('pushes the branch at the run\'s head once; the same push again sends nothing', async () => {
    const request = { gitDir: run.gitDir, remote, branch: 'dh/run-1', head: run.head };
    await expect(pushBranch(request)).resolves.toEqual({ pushed: true, ref: 'refs/heads/dh/run-1' });
    expect(remoteRef('refs/heads/dh/run-1')).toBe(run.head);
    expect(pushesLogged()).toEqual([`0000000000000000000000000000000000000000 ${run.head} refs/heads/dh/run-1`]);

    await expect(pushBranch(request)).resolves.toEqual({ pushed: false, ref: 'refs/heads/dh/run-1' });
    expect(pushesLogged()).toHaveLength(1); // the remote saw one push
  });

  it('refuses a branch that is at another commit on the remote, and leaves it there (never forced)', async () => {
    const seed = path.join(root, 'seed');
    writeFileSync(path.join(seed, 'OTHER.md'), 'someone else\n');
    plain(seed, 'add', '-A');
    plain(seed, 'commit', '-q', '-m', 'someone else\'s work');
    const theirs = plain(seed, 'rev-parse', 'HEAD').trim();
    plain(seed, 'push', '-q', remote, 'HEAD:refs/heads/dh/taken');
    const logged = pushesLogged().length;

    const refused = await pushBranch({ gitDir: run.gitDir, remote, branch: 'dh/taken', head: run.head }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PushRefused);
    expect((refused as PushRefused).remoteHead).toBe(theirs);
    expect((refused as PushRefused).message).toMatch(/not overwritten/);
    expect(remoteRef('refs/heads/dh/taken')).toBe(theirs);
    expect(pushesLogged()).toHaveLength(logged);
  });

  it('refuses a branch name git does not accept and a commit id that is not a full one, before reaching the remote', async () => {
    const logged = pushesLogged().length;
    for (const branch of ['-delete', 'a..b', 'x.lock', 'with space', 'bad~name', 'end/']) {
      await expect(pushBranch({ gitDir: run.gitDir, remote, branch, head: run.head }), branch).rejects.toThrow(PushRefused);
    }
    for (const head of [run.head.slice(0, 12), 'HEAD', 'main', run.head.toUpperCase(), `${run.head}\n`, '0'.repeat(40)]) {
      await expect(pushBranch({ gitDir: run.gitDir, remote, branch: 'dh/bad-head', head }), head).rejects.toThrow(PushRefused);
    }
    await expect(pushBranch({ gitDir: run.gitDir, remote: '--upload-pack=touch /tmp/x', branch: 'dh/x', head: run.head })).rejects.toThrow(PushRefused);
    expect(remoteRef('refs/heads/dh/bad-head')).toBeUndefined();
    expect(pushesLogged()).toHaveLength(logged);
  });

  it('refuses a URL that carries a password, without saying it', async () => {
    const password = 'hunter2-very-secret';
    const refused = await pushBranch({ gitDir: run.gitDir, remote: `https://someone:${password}@git.example.invalid/o/r.git`, branch: 'dh/run-1', head: run.head }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PushRefused);
    expect((refused as Error).message).toMatch(/password/);
    expect((refused as Error).message).not.toContain(password);
    expect((refused as Error).message).not.toContain('someone');
    expect(() => remoteAuth(`http://u:${password}@127.0.0.1/r.git`, 'tok-123456')).toThrow(PushRefused);
  });

  it('refuses a token over plain http to any host but the loopback', () => {
    expect(() => remoteAuth('http://git.example.invalid/o/r.git', 'tok-123456')).toThrow(/plain http/);
    expect(() => remoteAuth('http://127.0.0.1:9/r.git', 'tok-123456')).not.toThrow();
    expect(() => remoteAuth('https://git.example.invalid/o/r.git', 'tok\r\nX-Evil: 1')).toThrow(PushRefused);
  });
});

describe('pushBranch over smart HTTP with a token', () => {
  const token = 'ghp_T0ken/with+odd=chars~0123456789';
  let server: GitHttp;
  let url: string;
  beforeAll(async () => {
    server = await startGitHttp(path.join(root, 'srv'), token);
    url = `${server.base}/remote.git`;
  });
  afterAll(() => server.close());

  it('pushes with the token; the token is in no argv, no config file and no message', async () => {
    spied.argv.length = 0;
    await expect(pushBranch({ gitDir: run.gitDir, remote: url, branch: 'dh/http-1', head: run.head, token })).resolves.toEqual({ pushed: true, ref: 'refs/heads/dh/http-1' });
    expect(remoteRef('refs/heads/dh/http-1')).toBe(run.head);
    expect(server.seen.some((r) => r.method === 'POST' && r.url.endsWith('/git-receive-pack') && r.authorized)).toBe(true);
    // Again: the branch is there, so nothing is sent (one ls-remote, no receive-pack).
    const before = server.seen.length;
    await expect(pushBranch({ gitDir: run.gitDir, remote: url, branch: 'dh/http-1', head: run.head, token })).resolves.toEqual({ pushed: false, ref: 'refs/heads/dh/http-1' });
    expect(server.seen.slice(before).some((r) => r.url.includes('receive-pack'))).toBe(false);

    const forms = [token, Buffer.from(`x-access-token:${token}`).toString('base64'), Buffer.from(token).toString('base64'), encodeURIComponent(token)];
    expect(spied.argv.length).toBeGreaterThan(0);
    expect(spied.argv.some((argv) => argv.includes('push'))).toBe(true);
    for (const argv of spied.argv) for (const form of forms) expect(argv.join(' ')).not.toContain(form);
    for (const file of [path.join(remote, 'config'), path.join(run.gitDir, 'config')]) {
      const text = readFileSync(file, 'utf8');
      for (const form of forms) expect(text, file).not.toContain(form);
    }
  });

  it('a remote that is down or unreachable fails as transient (the start retries it); a missing repository or a refused token does not', async () => {
    const { env } = remoteAuth(url, token);
    const fetchInto = (dir: string, source: string, withEnv = env) => mirrorOf(path.join(root, dir), source, { env: withEnv }).catch((e: unknown) => e);
    server.state.failNext = 1;
    const down = await fetchInto('m-down', url);
    expect(down).toBeInstanceOf(GitError);
    expect([(down as GitError).transient, (down as GitError).message]).toEqual([true, expect.stringContaining('returned error: 503')]);
    // The host is back: the same fetch succeeds.
    await expect(fetchInto('m-down', url)).resolves.toMatchObject({ cloned: true });
    const refusedPort = await fetchInto('m-port', 'http://127.0.0.1:9/remote.git');
    expect([(refusedPort as GitError).transient, (refusedPort as GitError).message]).toEqual([true, expect.stringMatching(/Failed to connect|Connection refused|Could not connect/)]);
    for (const [dir, source, withEnv] of [
      ['m-missing', `${server.base}/no-such.git`, env],
      ['m-unauthorized', url, {}],
      ['m-path', path.join(root, 'no-such-dir.git'), env],
    ] as const) {
      const failed = await fetchInto(dir, source, withEnv);
      expect(failed, source).toBeInstanceOf(GitError);
      expect((failed as GitError).transient, (failed as GitError).message).toBe(false);
    }
  });

  it('fails without the token, or with a wrong one, in a message free of it; nothing is pushed', async () => {
    const none = await pushBranch({ gitDir: run.gitDir, remote: url, branch: 'dh/http-none', head: run.head }).catch((e: unknown) => e);
    expect(none).toBeInstanceOf(Error);
    expect((none as Error).message).toMatch(/git ls-remote/);
    const wrong = 'ghp_wrongWrongWrong/0123456789';
    const failed = await pushBranch({ gitDir: run.gitDir, remote: url, branch: 'dh/http-wrong', head: run.head, token: wrong }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(Error);
    const message = (failed as Error).message;
    for (const form of [wrong, token, Buffer.from(`x-access-token:${wrong}`).toString('base64'), encodeURIComponent(wrong)]) expect(message).not.toContain(form);
    expect(remoteRef('refs/heads/dh/http-none')).toBeUndefined();
    expect(remoteRef('refs/heads/dh/http-wrong')).toBeUndefined();
  });

  it('follows no redirect: a remote that points elsewhere fails, and the other host never sees a request', async () => {
    const elsewhere: (string | undefined)[] = [];
    const other = http.createServer((req, res) => {
      elsewhere.push(req.headers.authorization);
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="other"' }).end();
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const mover = http.createServer((req, res) => {
      res.writeHead(302, { Location: `http://127.0.0.1:${(other.address() as AddressInfo).port}${req.url ?? '/'}` }).end();
    });
    await new Promise<void>((resolve) => mover.listen(0, '127.0.0.1', resolve));
    try {
      const moved = `http://127.0.0.1:${(mover.address() as AddressInfo).port}/remote.git`;
      const failed = await pushBranch({ gitDir: run.gitDir, remote: moved, branch: 'dh/http-moved', head: run.head, token }).catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(Error);
      expect((failed as Error).message).not.toContain(token);
      expect(elsewhere).toEqual([]);
    } finally {
      for (const s of [mover, other]) {
        s.closeAllConnections();
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
    }
  });

  it('a push whose answer is lost after the remote took it settles as pushed by the lookup after it', async () => {
    server.state.loseNextPushAnswer = true;
    const logged = pushesLogged().length;
    await expect(pushBranch({ gitDir: run.gitDir, remote: url, branch: 'dh/http-lost', head: run.head, token })).resolves.toEqual({ pushed: false, ref: 'refs/heads/dh/http-lost' });
    expect(server.state.loseNextPushAnswer).toBe(false); // the answer was lost indeed
    expect(remoteRef('refs/heads/dh/http-lost')).toBe(run.head);
    expect(pushesLogged()).toHaveLength(logged + 1);
  });

  it('remoteAuth\'s redact cuts the token, its base64 (with and without the user) and its URL-encoded form', () => {
    const { redact, env } = remoteAuth(url, token);
    const basic = Buffer.from(`x-access-token:${token}`).toString('base64');
    const text = `a ${token} b ${basic} c ${Buffer.from(token).toString('base64')} d ${encodeURIComponent(token)} e`;
    expect(encodeURIComponent(token)).not.toBe(token); // the test's token has characters URL encoding changes
    const cut = redact(text);
    expect(cut).toBe('a [redacted] b [redacted] c [redacted] d [redacted] e');
    // The header is scoped to the remote's URL and redirects are not followed.
    expect(env).toMatchObject({ GIT_CONFIG_KEY_0: 'http.followRedirects', GIT_CONFIG_VALUE_0: 'false', GIT_CONFIG_KEY_1: `http.${url}.extraHeader`, GIT_CONFIG_VALUE_1: `Authorization: Basic ${basic}` });
    // Remotes that take no token: the environment carries none, redact changes nothing.
    const local = remoteAuth(remote, token);
    expect(JSON.stringify(local.env)).not.toContain(basic);
    expect(local.redact(token)).toBe(token);
  });

  it('fetches through the same server with mirrorOf and remoteAuth\'s environment: clone, then update', async () => {
    const mirrors = path.join(root, 'http-mirrors');
    const { env } = remoteAuth(url, token);
    const first = await mirrorOf(mirrors, url, { env });
    expect(first.cloned).toBe(true);
    expect((await git(['rev-parse', 'refs/heads/dh/http-1'], { gitDir: first.path })).trim()).toBe(run.head);
    plain(path.join(root, 'seed'), 'push', '-q', remote, 'HEAD:refs/heads/later');
    const second = await mirrorOf(mirrors, url, { env });
    expect(second).toEqual({ path: first.path, cloned: false });
    expect((await git(['rev-parse', 'refs/heads/later'], { gitDir: first.path })).trim()).toBe(remoteRef('refs/heads/later'));
    expect(readFileSync(path.join(first.path, 'config'), 'utf8')).not.toContain(token);
    // Without the token the server refuses the clone, and no mirror is left behind.
    const none = path.join(root, 'http-mirrors-none');
    await expect(mirrorOf(none, url)).rejects.toThrow(/git clone/);
    expect(existsSync(mirrorPath(none, url))).toBe(false);
  });
});
