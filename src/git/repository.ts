/**
 * A run's repository, worked with as hostile input (issue 24; first slice, not yet wired into a run): the worker's
 * git never reads anything the work tree holds as configuration. Its git directory lives outside the sandbox (the
 * work tree's own `.git`, if the harness makes one, is the harness's and is never read); every command runs with no
 * system or global config, an empty HOME, `core.hooksPath=/dev/null`, no fsmonitor, no pager, no external diff, no
 * credential helper and no prompt — so no hook, filter, fsmonitor, sshCommand, pager or diff driver named by a
 * repository can run on the worker. Git stores a symbolic link as its target's path, never what it points to, so
 * nothing outside the tree enters a commit.
 *
 * - `mirrorOf(source)`: a per-host bare mirror of the source (cloned once, fetched after), so the tenth run on a
 *   repository does not fetch it all again.
 * - `checkout(...)`: the run's git directory (objects borrowed from the mirror by `alternates`, nothing copied), the
 *   work tree at the ref, on a new branch.
 * - `commitWork(...)`: commits the work tree on the run's branch — once: a retried call finds its commit by the
 *   run's trailer and makes no second one — and returns base, head, diff stat and patch. Files over a size cap are
 *   refused, by name.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** A git command failed; `message` names the command and git's own words. */
export class GitError extends Error {
  override readonly name: string = 'GitError';
  constructor(
    message: string,
    /** The remote could not be reached or answered with a server error (a retry may succeed), not "no such thing". */
    readonly transient = false,
  ) {
    super(message);
  }
}

/**
 * What git prints when the remote was unreachable or failed on its side — a network or server fault worth a retry.
 * Anything else (no such repository, no such ref, refused credentials) stays a failure of the request itself.
 */
const TRANSIENT_GIT = /Could not resolve host|Connection refused|Connection timed out|Operation timed out|Connection reset|Failed to connect|early EOF|remote end hung up unexpectedly|RPC failed|returned error: (?:5\d\d|408|429)\b|SSL_ERROR_SYSCALL|gnutls_handshake|Temporary failure in name resolution|Network is unreachable/;

/** A command printed more than it may (`GitOptions.maxBuffer`): what it was reading is over its cap. */
export class GitOutputTooLarge extends GitError {
  override readonly name = 'GitOutputTooLarge';
}

/** A file the deliverable cannot carry (over the size cap). */
export class DeliverableRefused extends Error {
  override readonly name = 'DeliverableRefused';
  constructor(
    message: string,
    readonly paths: readonly string[],
  ) {
    super(message);
  }
}

/** Configuration every command of the worker's git runs with, whatever a repository says. */
const fixedConfig = [
  'core.hooksPath=/dev/null',
  'core.fsmonitor=false',
  'core.pager=cat',
  'core.sshCommand=ssh -o BatchMode=yes',
  'core.askPass=',
  'credential.helper=',
  'diff.external=',
  'core.attributesFile=/dev/null',
  'core.excludesFile=/dev/null',
  'core.symlinks=true',
  'protocol.ext.allow=never',
  'protocol.file.allow=always',
  'submodule.recurse=false',
  'gc.auto=0',
  'init.defaultBranch=main',
  'advice.detachedHead=false',
  'commit.gpgSign=false',
  'tag.gpgSign=false',
].flatMap((c) => ['-c', c]);

/** An empty home for git: no ~/.gitconfig, no credential store. */
let emptyHome: string | undefined;
function gitHome(): string {
  emptyHome ??= mkdtempSync(path.join(os.tmpdir(), 'dh-git-home-'));
  return emptyHome;
}

/** The environment of every git command: nothing inherited that git would read as configuration. */
function gitEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: gitHome(),
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    GIT_ASKPASS: '/bin/false',
    SSH_ASKPASS: '/bin/false',
    GIT_OPTIONAL_LOCKS: '0',
    LC_ALL: 'C',
    ...extra,
  };
}

export interface GitRun {
  /** The git directory (outside the sandbox). */
  readonly gitDir: string;
  /** The work tree (the sandbox's workspace), when the command needs one. */
  readonly workTree?: string;
}

/** Options of one git command: `env` adds to the fixed environment; `signal` and `timeoutMs` end a command that hangs (a remote). */
export interface GitOptions {
  readonly env?: Record<string, string>;
  readonly maxBuffer?: number;
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
  /** Written to the command's stdin (then closed). */
  readonly input?: string;
}

const DEFAULT_MAX_BUFFER = 64 * 1024 * 1024;

/** Runs git with the fixed configuration; resolves with stdout. */
export function git(args: readonly string[], where?: GitRun, options: GitOptions = {}): Promise<string> {
  const location = where ? ['--git-dir', where.gitDir, ...(where.workTree ? ['--work-tree', where.workTree] : [])] : [];
  return new Promise((resolve, reject) => {
    const child = execFile(
      'git',
      [...fixedConfig, ...location, ...args],
      {
        env: gitEnv(options.env),
        maxBuffer: options.maxBuffer ?? DEFAULT_MAX_BUFFER,
        cwd: where?.workTree ?? where?.gitDir ?? gitHome(),
        ...(options.signal ? { signal: options.signal } : {}),
        ...(options.timeoutMs ? { timeout: options.timeoutMs, killSignal: 'SIGKILL' as const } : {}),
      },
      (error, stdout, stderr) => {
        if (!error) return resolve(stdout);
        if ((error as { code?: string }).code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') return reject(new GitOutputTooLarge(`git ${args.slice(0, 2).join(' ')} printed more than ${options.maxBuffer ?? DEFAULT_MAX_BUFFER} bytes`));
        const said = (stderr || error.message).trim();
        // Killed by its own deadline: a remote that hung.
        const transient = TRANSIENT_GIT.test(said) || (error as { killed?: boolean }).killed === true;
        reject(new GitError(`git ${args.slice(0, 2).join(' ')} failed: ${said.slice(0, 2000)}`, transient));
      },
    );
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}

/** A per-host mirror directory for `source` (a URL or a local path) under `root`. */
export function mirrorPath(root: string, source: string): string {
  return path.join(root, `${createHash('sha256').update(source).digest('hex').slice(0, 24)}.git`);
}

/**
 * Brings the mirror of `source` up to date (cloned the first time, fetched after) and returns its path. `options`
 * carries what reaching the remote needs (the credential's header in `env`). A first clone goes to a temporary name
 * and is renamed into place, so a clone cut short never passes for a mirror.
 */
export async function mirrorOf(root: string, source: string, options: GitOptions = {}): Promise<{ path: string; cloned: boolean }> {
  mkdirSync(root, { recursive: true, mode: 0o700 });
  const mirror = mirrorPath(root, source);
  let exists = false;
  try {
    exists = lstatSync(path.join(mirror, 'HEAD')).isFile();
  } catch {
    exists = false;
  }
  if (!exists) {
    const partial = `${mirror}.partial-${process.pid}-${Date.now().toString(36)}`;
    try {
      await git(['clone', '--mirror', '--quiet', '--', source, partial], undefined, options);
      renameSync(partial, mirror);
    } catch (err) {
      rmSync(partial, { recursive: true, force: true });
      // Another worker process renamed its clone into place first: that mirror serves.
      if (existsSync(path.join(mirror, 'HEAD'))) return { path: mirror, cloned: false };
      throw err;
    }
    return { path: mirror, cloned: true };
  }
  await git(['remote', 'update', '--prune'], { gitDir: mirror }, options);
  return { path: mirror, cloned: false };
}

/** The run's git directory and work tree at `ref`, on the new branch `branch`; returns the base commit. */
export async function checkout(options: { mirror: string; ref: string; branch: string; gitDir: string; workTree: string }): Promise<{ base: string }> {
  const { mirror, ref, branch, gitDir, workTree } = options;
  mkdirSync(path.dirname(gitDir), { recursive: true, mode: 0o700 });
  mkdirSync(workTree, { recursive: true });
  await git(['init', '--quiet', '--bare', gitDir]);
  // The mirror's objects are borrowed, not copied; the sandbox never sees either directory.
  writeFileSync(path.join(gitDir, 'objects', 'info', 'alternates'), `${path.join(mirror, 'objects')}\n`);
  const base = (await git(['rev-parse', '--verify', '--end-of-options', `${ref}^{commit}`], { gitDir: mirror })).trim();
  await git(['update-ref', `refs/heads/${branch}`, base], { gitDir });
  await git(['symbolic-ref', 'HEAD', `refs/heads/${branch}`], { gitDir });
  await git(['config', 'core.bare', 'false'], { gitDir });
  await git(['read-tree', '-u', '--reset', 'HEAD'], { gitDir, workTree });
  return { base };
}

/**
 * The added or changed paths whose staged blob is over `maxBytes`: the sizes of what the commit would hold (from the
 * index), not of the work-tree files now — a file the harness swaps after `git add` changes nothing.
 */
async function stagedOver(where: GitRun, maxBytes: number): Promise<string[]> {
  // `:<mode> <mode> <old> <new> <status>\0<path>\0` per entry.
  const raw = (await git(['diff', '--cached', '--raw', '-z', '--no-renames', '--no-abbrev', '--diff-filter=AM', 'HEAD'], where)).split('\0');
  const entries: { path: string; blob: string }[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const fields = raw[i]!.split(' ');
    // A gitlink (160000) names a commit of another repository: no blob here to measure.
    if (fields[0]?.startsWith(':') && fields[3] && fields[1] !== '160000') entries.push({ path: raw[i + 1]!, blob: fields[3] });
  }
  if (entries.length === 0) return [];
  const sizes = (await git(['cat-file', '--batch-check=%(objectsize)'], where, { input: `${entries.map((e) => e.blob).join('\n')}\n` })).split('\n');
  return entries.filter((e, i) => Number(sizes[i]) > maxBytes).map((e) => e.path);
}

export interface Deliverable {
  readonly base: string;
  readonly head: string;
  /** `git diff --stat` of base..head. */
  readonly diffStat: string;
  /** `git diff --binary` of base..head; undefined when it is over `maxPatchBytes` (never read whole). */
  readonly patch: string | undefined;
  readonly files: number;
  /** False when the work tree had nothing to commit (head = base). */
  readonly committed: boolean;
}

/**
 * Commits the work tree on the checked-out branch, once per `runId` (a retried call returns the commit it made),
 * and returns what was delivered. Refuses (naming them) files over `maxFileBytes`; a patch over `maxPatchBytes` is
 * committed but not returned.
 */
export async function commitWork(options: {
  readonly gitDir: string;
  readonly workTree: string;
  readonly base: string;
  readonly runId: string;
  readonly message: string;
  readonly author: { readonly name: string; readonly email: string };
  readonly maxFileBytes: number;
  /** A patch over this many bytes is not read (`patch` undefined); default 64 MiB. */
  readonly maxPatchBytes?: number;
}): Promise<Deliverable> {
  const where = { gitDir: options.gitDir, workTree: options.workTree };
  const trailer = `Durable-Harness-Run: ${options.runId}`;
  const head = (await git(['rev-parse', 'HEAD'], where)).trim();
  const already = head !== options.base && (await git(['log', '-1', '--format=%B', head], where)).includes(trailer);
  if (!already) {
    await git(['add', '--all', '--', '.'], where);
    const tooLarge = await stagedOver(where, options.maxFileBytes);
    if (tooLarge.length > 0) {
      await git(['reset', '--quiet'], where);
      throw new DeliverableRefused(`${tooLarge.length} file(s) over the deliverable's ${options.maxFileBytes} bytes per file: ${tooLarge.slice(0, 10).join(', ')}`, tooLarge);
    }
    const changed = (await git(['diff', '--cached', '--quiet', 'HEAD'], where).then(() => false, () => true));
    if (changed) {
      const identity = { GIT_AUTHOR_NAME: options.author.name, GIT_AUTHOR_EMAIL: options.author.email, GIT_COMMITTER_NAME: options.author.name, GIT_COMMITTER_EMAIL: options.author.email };
      await git(['commit', '--quiet', '--no-verify', '--allow-empty-message', '-m', `${options.message}\n\n${trailer}`], where, { env: identity });
    }
  }
  const newHead = (await git(['rev-parse', 'HEAD'], where)).trim();
  const range = [options.base, newHead];
  const diffStat = (await git(['diff', '--stat', '--no-color', '--no-ext-diff', '--no-textconv', ...range], where)).trimEnd();
  const patch = await git(['diff', '--binary', '--no-color', '--no-ext-diff', '--no-textconv', ...range], where, { maxBuffer: options.maxPatchBytes ?? DEFAULT_MAX_BUFFER }).catch((err: unknown) => {
    if (err instanceof GitOutputTooLarge) return undefined;
    throw err;
  });
  const files = (await git(['diff', '--name-only', '-z', ...range], where)).split('\0').filter(Boolean).length;
  return { base: options.base, head: newHead, diffStat, patch, files, committed: newHead !== options.base };
}
