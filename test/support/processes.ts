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
