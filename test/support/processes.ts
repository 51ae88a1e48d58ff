/** Process checks for tests that prove a process tree is gone, and /proc walks that find such a tree. */
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** True while the process exists and is not a zombie. */
export function processAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 3 (after the parenthesised command) is the state; Z = zombie, X = dead.
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** Polls `check` every 20 ms until it holds or `ms` pass; its last answer. */
export async function waitUntil(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}

/** Polls until every pid is gone; returns the milliseconds it took, or throws after `timeoutMs`. */
export async function waitUntilGone(pids: readonly number[], timeoutMs: number): Promise<number> {
  const started = Date.now();
  while (pids.some(processAlive)) {
    if (Date.now() - started > timeoutMs) throw new Error(`processes still alive after ${timeoutMs} ms: ${pids.filter(processAlive).join(', ')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return Date.now() - started;
}

/** Parent pid of every process in /proc, as parent → children. Processes that exit meanwhile are skipped. */
function childrenByParent(): { children: Map<number, number[]>; pids: number[] } {
  const children = new Map<number, number[]>();
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
      pids.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return { children, pids };
}

/** `roots` and all their descendants, each once. */
function withDescendants(roots: readonly number[], children: ReadonlyMap<number, number[]>): number[] {
  const tree = new Set<number>();
  const queue = [...roots];
  while (queue.length) {
    const pid = queue.shift()!;
    if (tree.has(pid)) continue;
    tree.add(pid);
    queue.push(...(children.get(pid) ?? []));
  }
  return [...tree];
}

/** A process's command line, arguments joined by spaces; '' once it is gone (it may exit while a test looks). */
export function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

/** `pid` and all its descendants, from /proc; empty when `pid` is already gone. */
export function processTree(pid: number): number[] {
  if (!existsSync(`/proc/${pid}`)) return [];
  return withDescendants([pid], childrenByParent().children);
}

/** Every process whose cwd is `dir` or below it, plus all their descendants, from /proc (never this process). */
export function processesIn(dir: string): number[] {
  const { children, pids } = childrenByParent();
  const roots = pids.filter((pid) => {
    try {
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      return cwd === dir || cwd.startsWith(`${dir}/`);
    } catch {
      return false; // gone meanwhile, or not ours to read
    }
  });
  return withDescendants(roots, children).filter((pid) => pid !== process.pid);
}

/** The pid of `pid` in its own (innermost) PID namespace, from the host's /proc; `undefined` once it is gone. */
function innermostPid(pid: number): number | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('NSpid:'));
    const fields = line?.split(/\s+/).slice(1).filter(Boolean);
    return fields?.length ? Number(fields[fields.length - 1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Host pids of the processes working in `dir` whose pid inside their own PID namespace is one of `inner` —
 * what a harness in a per-turn PID namespace writes down as `process.pid` is its namespace's pid.
 * Processes must still be alive to be found.
 */
export function hostPidsOf(dir: string, inner: readonly number[]): number[] {
  const candidates = processesIn(dir);
  return inner.map((pid) => {
    const found = candidates.find((candidate) => innermostPid(candidate) === pid && candidate !== process.pid);
    if (found === undefined) throw new Error(`no live process with pid ${pid} in its namespace works in ${dir}`);
    return found;
  });
}

/**
 * Host pids of the scripted harness's sleeping turn (`.scripted/sleeping.pid` and `child.pid` in `workspace`),
 * waiting up to `timeoutMs` for both files to be written and both processes to be found.
 */
export async function scriptedSleepPids(workspace: string, timeoutMs = 15_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const inner = ['sleeping.pid', 'child.pid'].map((f) => Number(readFileSync(`${workspace}/.scripted/${f}`, 'utf8')));
      if (inner.every((pid) => pid > 0)) return hostPidsOf(workspace, inner);
    } catch (error) {
      if (Date.now() > deadline) throw error;
    }
    if (Date.now() > deadline) throw new Error(`the scripted harness in ${workspace} never wrote its pids`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
