/**
 * One sandbox uid per workspace for the local provider (`sandbox.options.userRange: "70000-79999"`): each run,
 * agent or agent-user workspace gets its own uid from the range, so tenant B's harness cannot read, list or
 * hard-link tenant A's files (`protected_hardlinks` refuses links to files the linker cannot write). The
 * allocation is durable: a table in the worker's runtime directory (never in a workspace), written under a lock
 * that every process of the data dir honours, so a workspace keeps its uid across restarts and worker processes.
 *
 * A fixed `sandbox.options.user` is one uid for everyone: with `workspaceScope: agent-user` that would put every
 * tenant's user under the same uid, so it is refused (`WorkspaceScopeInvalid`).
 */
import { mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { SandboxIsolationUnavailable } from './local-containment.js';
import type { WorkspaceScope } from './types.js';

/** A uid range, inclusive. */
export interface UidRange {
  readonly first: number;
  readonly last: number;
}

/** `agent-user` with one fixed uid for every tenant: a configuration the runtime refuses (code `WorkspaceScopeInvalid`). */
export class SharedUidRefused extends Error {
  override readonly name = 'SharedUidRefused';
  readonly code = 'WorkspaceScopeInvalid' as const;
}

/** Lowest uid a range may start at: below it live system accounts and the first human users. */
const minimumUid = 10_000;
/** A uid the kernel and setpriv treat specially (`(uid_t)-1`, the overflow uid 65534 'nobody'). */
const reserved = new Set([65_534, 4_294_967_295]);

/** Parses `sandbox.options.userRange` (`"first-last"`, numeric); undefined when not set. */
export function parseUidRange(options: Readonly<Record<string, unknown>> | undefined): UidRange | undefined {
  const value = options?.userRange;
  if (value === undefined) return undefined;
  const match = typeof value === 'string' ? /^(\d+)-(\d+)$/.exec(value) : null;
  const first = Number(match?.[1]);
  const last = Number(match?.[2]);
  if (!match || first < minimumUid || last < first || last >= 2 ** 31) {
    throw new SandboxIsolationUnavailable(
      `Invalid sandbox option userRange=${JSON.stringify(value)}: use "first-last" with ${minimumUid} <= first <= last < 2^31, e.g. "70000-79999" (uids no account on this machine uses).`,
    );
  }
  if (options?.user !== undefined) {
    throw new SandboxIsolationUnavailable('Sandbox options user and userRange are both set: use userRange (a uid per workspace) or user (one uid for all), not both.');
  }
  return { first, last };
}

/** Refuses a fixed `user` for a scope whose workspaces belong to different tenants' users. */
export function checkSharedUid(scope: WorkspaceScope, options: Readonly<Record<string, unknown>> | undefined): void {
  if (scope !== 'agent-user' || options?.user === undefined) return;
  throw new SharedUidRefused(
    `workspaceScope "agent-user" keeps each tenant's user in a workspace of its own, but sandbox.options.user=${JSON.stringify(options.user)} ` +
      'runs every one of them as the same uid, so each could read, list and hard-link the others\' files. ' +
      'Use sandbox.options.userRange (e.g. "70000-79999": one uid per tenant and user), or the Docker provider.',
  );
}

/** Uids of this machine's accounts (/etc/passwd): never handed to a sandbox. */
function accountUids(): Set<number> {
  try {
    return new Set(
      readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .map((line) => Number(line.split(':')[2]))
        .filter((n) => Number.isInteger(n)),
    );
  } catch {
    return new Set();
  }
}

const lockStaleMs = 30_000;
const lockWaitMs = 10_000;

/** The workspaces' uids, kept in `<runtimeDir>/uids.json` (private to the worker, like the runtime state). */
export class ScopeUids {
  private readonly file: string;
  private readonly lock: string;
  /** Allocations of this process, one after the other (the file lock orders processes). */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly runtimeDir: string) {
    this.file = path.join(runtimeDir, 'uids.json');
    this.lock = path.join(runtimeDir, 'uids.lock');
  }

  /** The uid of the workspace `key` (its path below the root), allocated from `range` the first time. */
  uidFor(key: string, range: UidRange): Promise<number> {
    const next = this.queue.then(() => this.locked(() => this.allocate(key, range)));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private allocate(key: string, range: UidRange): number {
    const table = this.read();
    const known = table[key];
    if (known !== undefined && known >= range.first && known <= range.last) return known;
    const taken = new Set(Object.values(table));
    const accounts = accountUids();
    for (let uid = range.first; uid <= range.last; uid += 1) {
      if (taken.has(uid) || accounts.has(uid) || reserved.has(uid)) continue;
      this.write({ ...table, [key]: uid });
      return uid;
    }
    throw new SandboxIsolationUnavailable(
      `Sandbox option userRange=${range.first}-${range.last} is used up: ${taken.size} workspaces hold a uid in ${this.file}. Give the agent a larger range.`,
    );
  }

  private read(): Record<string, number> {
    try {
      const parsed = JSON.parse(readFileSync(this.file, 'utf8')) as unknown;
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      return Object.fromEntries(Object.entries(parsed).filter((e): e is [string, number] => Number.isInteger(e[1])));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
      // A broken table must not hand out uids that may be in use: stop and say where it is.
      throw new SandboxIsolationUnavailable(`The sandbox uid table ${this.file} cannot be read (${(error as Error).message}); repair or remove it (workspaces then get new uids).`);
    }
  }

  private write(table: Record<string, number>): void {
    const temp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(temp, `${JSON.stringify(table, null, 1)}\n`, { mode: 0o600 });
    renameSync(temp, this.file);
  }

  /** Runs `fn` holding the table's lock directory (a crashed holder's lock is taken over after 30 s). */
  private async locked<T>(fn: () => T): Promise<T> {
    mkdirSync(this.runtimeDir, { recursive: true, mode: 0o700 });
    const deadline = Date.now() + lockWaitMs;
    for (;;) {
      try {
        mkdirSync(this.lock, { mode: 0o700 });
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        if (this.lockAgeMs() > lockStaleMs) rmSync(this.lock, { recursive: true, force: true });
        else if (Date.now() > deadline) throw new Error(`The sandbox uid table lock ${this.lock} is held for more than ${lockWaitMs} ms; is another worker stuck?`);
        else await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    try {
      return fn();
    } finally {
      rmSync(this.lock, { recursive: true, force: true });
    }
  }

  private lockAgeMs(): number {
    try {
      return Date.now() - statSync(this.lock).mtimeMs;
    } catch {
      return 0;
    }
  }
}
