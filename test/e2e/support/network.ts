/**
 * The network proof of the live tests: a CLI runs under `strace -ff -e trace=connect`, and every AF_INET/AF_INET6
 * connect of its whole process tree, read back from the per-process logs, must go to loopback.
 * CI must install strace (`apt-get install -y strace`); a missing one is a failure, never a skip.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';

export const straceBin = '/usr/bin/strace';

/** The addresses a loopback-only CLI may connect to. */
export const loopback: ReadonlySet<string> = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

/** Fails (never skips) when strace is missing. */
export function expectStrace(): void {
  expect(existsSync(straceBin), 'strace is needed to prove loopback-only traffic: apt-get install -y strace').toBe(true);
}

/** strace's arguments before the traced command: follow every process, one log per pid at `<prefix>.<pid>`. */
export function straceConnectArgs(prefix: string): string[] {
  return ['-ff', '-qq', '-e', 'trace=connect', '-o', prefix];
}

/** The per-process logs (`<prefix>.<pid>`) of an `strace -ff -o <prefix>` run. */
export function straceLogs(prefix: string): string[] {
  const dir = path.dirname(prefix);
  const base = path.basename(prefix);
  return readdirSync(dir)
    .filter((f) => f.startsWith(`${base}.`))
    .map((f) => path.join(dir, f));
}

/** Every log of an `strace -ff -o <prefix>` run (one file per process, every turn kept), joined. */
export function readStraceLogs(prefix: string): string {
  return straceLogs(prefix)
    .map((file) => readFileSync(file, 'utf8'))
    .join('\n');
}

/**
 * Destination addresses of every AF_INET/AF_INET6 connect in an `strace -e trace=connect` log. A line that names
 * AF_INET but parses as neither comes back as `unparsed: <line>`, so it can never pass for loopback.
 */
export function inetConnects(log: string): string[] {
  const out: string[] = [];
  for (const line of log.split('\n')) {
    if (!line.includes('connect(')) continue;
    const v4 = /sa_family=AF_INET,.*?sin_addr=inet_addr\("([^"]+)"\)/.exec(line);
    const v6 = /sa_family=AF_INET6,.*?inet_pton\(AF_INET6, "([^"]+)"/.exec(line);
    if (v4) out.push(v4[1]!);
    else if (v6) out.push(v6[1]!);
    else if (/AF_INET/.test(line)) out.push(`unparsed: ${line}`);
  }
  return out;
}
