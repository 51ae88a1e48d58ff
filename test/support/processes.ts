/** Process checks for tests that prove a process tree is gone. */
import { readFileSync } from 'node:fs';

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
