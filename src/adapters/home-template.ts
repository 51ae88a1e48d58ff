/**
 * Prepared homes (issue 22): what a CLI computes on its first run in an empty home — codex migrates six SQLite
 * databases, ~85-110 ms of every fresh home's first turn — done once per worker process and CLI version, and copied
 * into each new per-run home, through the sandbox's files, before the driver's `prepare`.
 *
 * The template is the worker's own work, never a run's: the worker runs the CLI in a private empty directory, with
 * no credential and no run's files, its model pointed at a port on 127.0.0.1 that the worker holds and that drops
 * every connection. The first connection there is the CLI's first model call: its first-run work is done, and it is
 * killed. A run's home is never a source: its harness can write it. What the CLI keeps per run (config, sessions,
 * identity, locks, journals) is left out; its SQLite databases keep their schema and the tables named to keep
 * (migration records), every other row deleted.
 *
 * Only where the CLI the worker can run is the one the harness runs: the local sandbox (drive.ts). The first fresh
 * home of a version goes without, its template being built beside it; a priming that fails is logged once and the
 * CLI then does its own first run, as without a template, until a new home after `retryMs` (10 min) primes again.
 */
import { spawn } from 'node:child_process';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { findExecutable, minimalPath } from '../sandbox/local-executor.js';
import type { SandboxFs } from '../sandbox/types.js';
import type { DriverTurn, HomeTemplateSpec } from './driver.js';
import { driverHome } from './kit.js';

/** One entry of a template, relative to the home. */
export type TemplateEntry = { readonly rel: string; readonly type: 'dir' } | { readonly rel: string; readonly type: 'file'; readonly data: Buffer; readonly mode: number };

/** A template's bounds: a CLI whose first run leaves more is not templated. */
const maxEntries = 2000;
const maxBytes = 64 * 1024 * 1024;
/** At most this many CLI versions are remembered per process. */
const maxTemplates = 16;

type State =
  | { readonly status: 'building'; readonly done: Promise<void> }
  | { readonly status: 'ready'; readonly entries: readonly TemplateEntry[] }
  | { readonly status: 'failed'; readonly at: number };

export interface HomeTemplatesOptions {
  /** Told once per version when its priming fails (the homes then go without). */
  readonly warn?: (message: string) => void;
  /** How long a priming may take before it is killed (default 60 s). */
  readonly primeTimeoutMs?: number;
  /** How long after a failed priming the next new home tries again (default 10 min): a loaded host may time out once. */
  readonly retryMs?: number;
}

/** The prepared homes of this worker process, per CLI version. */
export class HomeTemplates {
  private readonly states = new Map<string, State>();

  constructor(private readonly options: HomeTemplatesOptions = {}) {}

  /**
   * Copies the template into the turn's home when the home does not exist yet, and returns whether it did. Without a
   * ready template it starts building one (for the next fresh home) and returns false at once.
   */
  async seed(spec: HomeTemplateSpec, turn: TemplateCli & Pick<DriverTurn, 'workspacePath'>, fs: SandboxFs): Promise<boolean> {
    const home = driverHome(turn, spec.dir);
    if ((await fs.stat(home.rel)) !== undefined) return false;
    const version = templateKey(spec, turn);
    if (version === undefined) return false;
    const state = this.current(version.key);
    if (state?.status !== 'ready') {
      if (state === undefined) this.build(version.key, spec, { ...turn, executable: version.file });
      return false;
    }
    await fs.mkdir(home.rel, { recursive: true });
    for (const entry of state.entries) {
      const rel = path.posix.join(home.rel, entry.rel);
      if (entry.type === 'dir') await fs.mkdir(rel, { recursive: true });
      else await fs.writeFile(rel, entry.data, { createParents: true, mode: entry.mode });
    }
    return true;
  }

  /** Builds (or waits for) the template of this CLI version; resolves when it is ready or has failed. */
  async ready(spec: HomeTemplateSpec, cli: TemplateCli): Promise<readonly TemplateEntry[] | undefined> {
    const version = templateKey(spec, cli);
    if (version === undefined) return undefined;
    const before = this.current(version.key) ?? this.build(version.key, spec, { ...cli, executable: version.file });
    if (before.status === 'building') await before.done;
    const state = this.states.get(version.key);
    return state?.status === 'ready' ? state.entries : undefined;
  }

  /** The version's state; a failure older than `retryMs` is forgotten, so the next new home primes again. */
  private current(key: string): State | undefined {
    const state = this.states.get(key);
    if (state?.status === 'failed' && Date.now() - state.at >= (this.options.retryMs ?? 600_000)) this.states.delete(key);
    return this.states.get(key);
  }

  private build(key: string, spec: HomeTemplateSpec, cli: TemplateCli): State {
    if (this.states.size >= maxTemplates) this.states.delete(this.states.keys().next().value!);
    const done = primeTemplate(spec, cli, this.options.primeTimeoutMs ?? 60_000).then(
      (entries) => void this.states.set(key, { status: 'ready', entries }),
      (error: unknown) => {
        this.states.set(key, { status: 'failed', at: Date.now() });
        this.options.warn?.(`No prepared home for ${cli.executable} (every fresh home does its own first run): ${(error as Error).message}`);
      },
    );
    const state: State = { status: 'building', done };
    this.states.set(key, state);
    return state;
  }
}

/** The CLI a turn starts: its executable, base arguments and the PATH its process gets (as the local executor has it). */
export type TemplateCli = Pick<DriverTurn, 'executable' | 'baseArgs' | 'env'>;

const searchPath = (cli: TemplateCli): string => cli.env.PATH ?? minimalPath();

/**
 * One CLI version: the file the turn would start (found on the turn's own PATH) as it is now — a reinstall
 * changes its inode, size or mtime — its arguments, and the spec's home.
 */
function templateKey(spec: HomeTemplateSpec, cli: TemplateCli): { key: string; file: string } | undefined {
  const found = findExecutable(cli.executable, searchPath(cli));
  if (found === undefined) return undefined;
  try {
    const file = realpathSync(found);
    const st = statSync(file);
    return { key: JSON.stringify([spec.dir, found, file, st.ino, st.size, st.mtimeMs, cli.baseArgs]), file: found };
  } catch {
    return undefined;
  }
}

/** Runs the CLI's first run in a private directory and returns what it made that a template keeps. */
async function primeTemplate(spec: HomeTemplateSpec, cli: TemplateCli, timeoutMs: number): Promise<TemplateEntry[]> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'dh-home-template-'));
  try {
    const home = path.join(root, '.home', spec.dir);
    mkdirSync(home, { recursive: true });
    await primeIn(spec, cli, root, home, timeoutMs);
    return await templateEntries(spec, home, path.join(root, 'scrub.sqlite'));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** The CLI's first run, stopped at its first model call (a connection to a port that drops it). */
async function primeIn(spec: HomeTemplateSpec, cli: TemplateCli, root: string, home: string, timeoutMs: number): Promise<void> {
  let called = false;
  let kill = (): void => undefined;
  const model = createServer((socket) => {
    called = true;
    socket.destroy();
    kill();
  });
  await new Promise<void>((resolve, reject) => {
    model.once('error', reject);
    model.listen(0, '127.0.0.1', resolve);
  });
  try {
    const port = (model.address() as { port: number }).port;
    const prime = spec.prime({ home, baseUrl: `http://127.0.0.1:${port}/v1` });
    for (const [name, text] of Object.entries(prime.files)) writeFileSync(path.join(home, name), text, { mode: 0o600 });
    const child = spawn(cli.executable, [...cli.baseArgs, ...prime.args], {
      cwd: root,
      // The turn's PATH (its CLI may start others by name), none of its other variables: they may hold credentials.
      env: { PATH: searchPath(cli), HOME: path.dirname(home), LANG: 'C.UTF-8', ...prime.env },
      stdio: ['ignore', 'ignore', 'pipe'],
      // Its own process group: the CLI and whatever it started are killed together.
      detached: true,
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString('utf8')).slice(-2000);
    });
    kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(kill, timeoutMs);
    const exit = await new Promise<{ code: number | null; error?: Error }>((resolve) => {
      child.once('error', (error) => resolve({ code: null, error }));
      // Its exit, not its pipes' close: a helper the CLI started may hold them.
      child.once('exit', (code) => resolve({ code }));
    });
    clearTimeout(timer);
    kill();
    child.stderr.destroy();
    if (exit.error) throw new Error(`the CLI could not be started: ${exit.error.message}`);
    if (!called) throw new Error(`the CLI ended (exit ${exit.code}) before its first model call${stderr.trim() ? `: ${stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`);
  } finally {
    await new Promise<void>((resolve) => model.close(() => resolve()));
  }
}

const journal = /-(wal|shm|journal)$|\.lock$/;

/** What the primed home holds that a template keeps, parents before children; SQLite files emptied of rows. */
async function templateEntries(spec: HomeTemplateSpec, home: string, scratch: string): Promise<TemplateEntry[]> {
  const entries: TemplateEntry[] = [];
  let bytes = 0;
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const name of readdirSync(dir).sort()) {
      const top = rel === '';
      if (top && spec.leave.includes(name)) continue;
      if (journal.test(name)) continue;
      const file = path.join(dir, name);
      const entryRel = rel === '' ? name : `${rel}/${name}`;
      const st = lstatSync(file);
      if (entries.length >= maxEntries) throw new Error(`its first run left more than ${maxEntries} files`);
      if (st.isDirectory()) {
        entries.push({ rel: entryRel, type: 'dir' });
        if (!(top && spec.empty.includes(name))) await walk(file, entryRel);
      } else if (st.isFile()) {
        const data = name.endsWith('.sqlite') ? await scrubbed(file, scratch, spec.keepTables) : readFileSync(file);
        bytes += data.length;
        if (bytes > maxBytes) throw new Error(`its first run left more than ${maxBytes} bytes`);
        entries.push({ rel: entryRel, type: 'file', data, mode: st.mode & 0o777 });
      }
      // Links and anything else are not copied: a home template holds directories and files only.
    }
  };
  await walk(home, '');
  return entries;
}

/** A consistent copy of a SQLite database (its journal included) with every row deleted but the kept tables'. */
async function scrubbed(file: string, scratch: string, keepTables: readonly string[]): Promise<Buffer> {
  const source = new Database(file, { readonly: true, fileMustExist: true });
  try {
    await source.backup(scratch);
  } finally {
    source.close();
  }
  const copy = new Database(scratch);
  try {
    const tables = copy.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).pluck().all() as string[];
    for (const name of tables) if (!keepTables.includes(name)) copy.prepare(`DELETE FROM "${name.replaceAll('"', '""')}"`).run();
    copy.exec('VACUUM');
    // One self-contained file, still in the CLI's journal mode (a WAL database stays one: no conversion on first open).
    copy.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    copy.close();
  }
  const data = readFileSync(scratch);
  rmSync(scratch, { force: true });
  return data;
}
