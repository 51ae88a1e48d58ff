/** Pidfiles for turn processes, so a retried attempt can kill what an earlier attempt left running. */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Where the local executor records the running turn's process group by default. */
export function defaultPidFile(workspacePath: string): string {
  return path.join(workspacePath, '.durable-harness', 'turn.pid');
}

/** Whether any process in group `pgid` is still alive (signal 0 checks without sending anything). */
export function processGroupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    // EPERM means it exists but belongs to someone else: alive, and not ours to kill.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  // Signal 0 also succeeds for zombies (dead, waiting to be reaped); on Linux look closer so a killed
  // group does not look alive until init gets round to reaping it.
  return liveMembersOnLinux(pgid) ?? true;
}

/** Whether group `pgid` has a member that is not a zombie, from /proc; `undefined` where there is no /proc. */
function liveMembersOnLinux(pgid: number): boolean | undefined {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(entry);
    if (stat && stat.pgrp === pgid && stat.state !== 'Z' && stat.state !== 'X') return true;
  }
  return false;
}

/** State and process group of one process from /proc/<pid>/stat (the name may hold spaces and parentheses). */
export function procStat(pid: number | string): { state: string; pgrp: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0] ?? '', pgrp: Number(fields[2]) };
}

/** Sends `signal` to a process group, ignoring a group that is already gone. */
export function signalProcessGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}

/** Records a process group id in `pidFile` (creating its directory). */
export function writePidFile(pidFile: string, pgid: number): void {
  mkdirSync(path.dirname(pidFile), { recursive: true });
  writeFileSync(pidFile, `${pgid}\n`);
}

/** Removes `pidFile` if it still names `pgid` (a newer turn may have replaced it). */
export function removePidFile(pidFile: string, pgid: number): void {
  if (readPidFile(pidFile) === pgid) rmSync(pidFile, { force: true });
}

function readPidFile(pidFile: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(pidFile, 'utf8');
  } catch {
    return undefined;
  }
  const pgid = Number.parseInt(text.trim(), 10);
  // 0 and 1 would signal our own group or everything: never accept them from a file.
  return Number.isInteger(pgid) && pgid > 1 ? pgid : undefined;
}

/**
 * Kills (SIGKILL) the process group named in `pidFile` if it is still alive, waits up to `waitMs` for it
 * to go, and removes the file. Returns whether a live group was killed. Call it before a retried turn.
 * A pid can be reused after a reboot or a very long time; the file lives in the run's own workspace and is
 * removed on every normal exit, which keeps that window small.
 */
export async function killStaleProcessGroup(pidFile: string, waitMs = 2000): Promise<boolean> {
  const pgid = readPidFile(pidFile);
  if (pgid === undefined) {
    rmSync(pidFile, { force: true });
    return false;
  }
  let killed = false;
  if (processGroupAlive(pgid)) {
    try {
      signalProcessGroup(pgid, 'SIGKILL');
    } catch {
      // EPERM: the id now belongs to another user's processes, so it is not a leftover of ours.
      rmSync(pidFile, { force: true });
      return false;
    }
    killed = true;
    const deadline = Date.now() + waitMs;
    while (processGroupAlive(pgid) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  rmSync(pidFile, { force: true });
  return killed;
}
