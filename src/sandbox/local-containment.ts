/**
 * How the local provider contains a turn's processes, and the runtime state it keeps about them.
 *
 * Every contained process is started by one small native helper, native/dh-contain.c, compiled on first use with
 * `cc` ($CC) into a private cache (see `helperPath`): one exec and two forks instead of a chain of util-linux and
 * shell wrappers.
 *
 * Containment `pid-namespace` (the default): every process starts in its own PID namespace under the helper as the
 * namespace's PID 1. When the process exits or is killed, that init exits and the kernel kills everything else in
 * the namespace — children that called setsid, `detached: true` spawns, double-forked daemons — so every descendant
 * dies with its turn. The process itself is not PID 1: the kernel drops signals to a PID 1 that set no handler, so a
 * CLI running as PID 1 would never see the SIGTERM of a cancel and always wait out the kill grace. The helper's outer
 * process, the one the worker spawns, dies with the worker (parent-death signal) and PID 1 with it, so a SIGKILLed
 * worker leaves no turn running; it forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the process's group through
 * PID 1. `process-group` is the weaker, explicit opt-out: only the process group is signalled, and a descendant that
 * leaves it can outlive the turn.
 *
 * With `user`, the harness runs as that unprivileged uid:gid (no supplementary groups, no new privileges, empty
 * capability sets), so it cannot read the worker's environment, the credentials file or the Docker socket.
 *
 * With `network: 'loopback'` (network policy `none`), every process also gets its own network namespace holding
 * only a loopback interface, brought up before the harness starts: the harness reaches its own 127.0.0.1 and
 * nothing else — not the worker's Temporal server, ledger or codec server on the host's loopback, not the host's
 * interfaces, not a DNS server.
 *
 * Pid bookkeeping lives in a state file under the runtime directory — never in the workspace — and records
 * each pid with its start time, so a recycled pid is never signalled.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gatewayPort } from './forwarder.js';

/** How descendants of a turn are contained. */
export type LocalContainment = 'pid-namespace' | 'process-group';

/** The local provider's isolation settings for one sandbox, frozen into its ref at start. */
export interface LocalIsolation {
  readonly containment: LocalContainment;
  /** Run processes as this unprivileged uid:gid (the worker must be root). */
  readonly user?: { readonly uid: number; readonly gid: number };
  /**
   * `loopback`: a network namespace of its own with only `lo` (policy `none`). `gateway`: the same, with the
   * forwarder to the run's egress gateway on `lo` (policies `vendor`, `allowlist`). Absent: the host's network.
   */
  readonly network?: 'loopback' | 'gateway';
  /** With `gateway`: the run's gateway socket on the host. */
  readonly gatewaySocket?: string;
}

/** Stable code of `SandboxIsolationUnavailable`. */
export const sandboxIsolationUnavailable = 'SandboxIsolationUnavailable' as const;

/** The requested isolation cannot be provided here; the provider refuses rather than pretends. */
export class SandboxIsolationUnavailable extends Error {
  override readonly name = sandboxIsolationUnavailable;
  readonly code = sandboxIsolationUnavailable;
}

/** How the containment helper is built (tests point the compiler elsewhere to see a missing mechanism refused). */
export interface ContainmentTools {
  /** The C compiler command (words split on spaces); default `$CC`, else `cc`. */
  readonly cc?: string;
}

export const defaultTools: ContainmentTools = {};

const isRoot = (): boolean => typeof process.geteuid === 'function' && process.geteuid() === 0;

/**
 * Parses `sandbox.options.containment` and `sandbox.options.user` (`"uid:gid"`, numeric, not root), and, from a
 * ref's settings, the `network` the provider froze there.
 */
export function parseLocalIsolation(options: Readonly<Record<string, unknown>> | undefined): LocalIsolation {
  const containment = options?.containment ?? 'pid-namespace';
  if (containment !== 'pid-namespace' && containment !== 'process-group') {
    throw new SandboxIsolationUnavailable(`Invalid sandbox option containment=${JSON.stringify(containment)}: use "pid-namespace" (default) or "process-group".`);
  }
  const network = options?.network;
  if (network !== undefined && network !== 'loopback' && network !== 'gateway') {
    throw new SandboxIsolationUnavailable(`Invalid sandbox setting network=${JSON.stringify(network)}: the network comes from sandbox.networkPolicy ("none" is a loopback-only namespace).`);
  }
  const gatewaySocket = options?.gatewaySocket;
  if (network === 'gateway' && (typeof gatewaySocket !== 'string' || !path.isAbsolute(gatewaySocket))) {
    throw new SandboxIsolationUnavailable(`Invalid sandbox setting gatewaySocket=${JSON.stringify(gatewaySocket)}: network "gateway" needs the absolute path of the run's gateway socket.`);
  }
  const withNetwork = (isolation: LocalIsolation): LocalIsolation =>
    network === 'gateway' ? { ...isolation, network, gatewaySocket: gatewaySocket as string } : network ? { ...isolation, network } : isolation;
  const user = options?.user;
  if (user === undefined) return withNetwork({ containment });
  const match = typeof user === 'string' ? /^(\d+):(\d+)$/.exec(user) : null;
  if (!match) throw new SandboxIsolationUnavailable(`Invalid sandbox option user=${JSON.stringify(user)}: use a numeric "uid:gid" such as "64055:64055".`);
  const uid = Number(match[1]);
  const gid = Number(match[2]);
  if (uid === 0 || gid === 0) throw new SandboxIsolationUnavailable(`Sandbox option user=${JSON.stringify(user)} is root; use an unprivileged uid:gid.`);
  return withNetwork({ containment, user: { uid, gid } });
}

/** The isolation as ref settings (small, serializable). */
export function isolationSettings(isolation: LocalIsolation): Record<string, string> {
  return {
    containment: isolation.containment,
    ...(isolation.user ? { user: `${isolation.user.uid}:${isolation.user.gid}` } : {}),
    ...(isolation.network ? { network: isolation.network } : {}),
    ...(isolation.gatewaySocket ? { gatewaySocket: isolation.gatewaySocket } : {}),
  };
}

/** native/dh-contain.c, beside src/ and dist/ alike. */
const helperSource = fileURLToPath(new URL('../../native/dh-contain.c', import.meta.url));

/** The helper's binary per compiler command, built (or found in the cache) once per process. */
const helpers = new Map<string, { path: string } | { problem: string }>();

/**
 * The containment helper, compiled on first use: into `<tmpdir>/durable-harness-<uid>/<key>/`, directories only the
 * worker's user may use (one that is not — planted by another user — is passed over for a private one), keyed by the
 * source and the compiler, written to a temporary name and renamed into place.
 */
function helper(tools: ContainmentTools): { path: string } | { problem: string } {
  const cc = (tools.cc ?? process.env.CC ?? '').trim() || 'cc';
  let built = helpers.get(cc);
  if (!built) {
    built = buildHelper(cc);
    helpers.set(cc, built);
  }
  return built;
}

/** The containment helper's path; throws `SandboxIsolationUnavailable` when it does not compile. */
export function helperPath(tools: ContainmentTools = defaultTools): string {
  const built = helper(tools);
  if ('problem' in built) throw new SandboxIsolationUnavailable(`The local sandbox cannot contain a process on this machine: ${built.problem}.`);
  return built.path;
}

/** Whether `isolation` needs the helper at all (process-group alone runs the process as it is). */
const needsHelper = (isolation: LocalIsolation): boolean => isolation.containment === 'pid-namespace' || isolation.user !== undefined || isolation.network !== undefined;

function buildHelper(cc: string): { path: string } | { problem: string } {
  const source = readFileText(helperSource);
  if (source === undefined) return { problem: `its containment helper's source ${helperSource} is missing (reinstall the package)` };
  const key = createHash('sha256').update(source).update('\0').update(cc).digest('hex').slice(0, 16);
  const uid = process.geteuid?.() ?? -1;
  // One directory per key, so the binary keeps its name (the namespace's PID 1 shows as `dh-contain`).
  const dir = privateDir(path.join(privateDir(path.join(os.tmpdir(), `durable-harness-${uid}`), uid), key), uid);
  const binary = path.join(dir, 'dh-contain');
  if (ownExecutable(binary, uid)) return { path: binary };
  const temp = `${binary}.${process.pid}.tmp`;
  const [command, ...flags] = cc.split(/\s+/);
  const result = spawnSync(command!, [...flags, '-O2', '-o', temp, helperSource], { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'pipe'] });
  if (result.error || result.status !== 0) {
    rmSync(temp, { force: true });
    const why = result.error ? result.error.message : (result.stderr.trim().split('\n').slice(-3).join(' ') || `exit ${result.status ?? result.signal}`);
    return {
      problem: `its containment helper native/dh-contain.c does not compile with "${cc}" (${why}): install a C compiler (gcc), or point CC at one`,
    };
  }
  chmodSync(temp, 0o755);
  renameSync(temp, binary);
  return { path: binary };
}

/** `dir` if it is a directory of `uid` that nobody else may use (made so if new); otherwise a new private one. */
function privateDir(dir: string, uid: number): string {
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const stat = lstatSync(dir);
  if (stat.isDirectory() && stat.uid === uid && (stat.mode & 0o077) === 0) return dir;
  return mkdtempSync(path.join(os.tmpdir(), 'durable-harness-'));
}

function ownExecutable(file: string, uid: number): boolean {
  try {
    const stat = lstatSync(file);
    return stat.isFile() && stat.uid === uid && (stat.mode & 0o022) === 0 && (stat.mode & 0o100) !== 0;
  } catch {
    return false;
  }
}

/**
 * `argv` wrapped so that it runs with `isolation`, for this process to spawn (the helper dies with it); the executable
 * must already be an absolute path. Throws `SandboxIsolationUnavailable` when the helper does not compile.
 */
export function wrapArgv(isolation: LocalIsolation, argv: readonly string[], tools: ContainmentTools = defaultTools): string[] {
  // Nothing to contain beyond the process group: the process as it is.
  if (!needsHelper(isolation)) return [...argv];
  const helper = [helperPath(tools)];
  if (isolation.containment === 'pid-namespace') helper.push('--pid', String(process.pid));
  if (isolation.network) helper.push('--net');
  if (isolation.user) helper.push('--drop', `${isolation.user.uid}:${isolation.user.gid}`);
  // The forwarder to the run's gateway listens inside the network namespace before the process starts, as the worker's
  // user (a sandbox user cannot signal it); it dies with the turn's PID namespace.
  if (isolation.network === 'gateway') helper.push('--forward', isolation.gatewaySocket!, String(gatewayPort));
  return [...helper, '--', ...argv];
}

const probes = new Map<string, string | undefined>();

/**
 * Throws `SandboxIsolationUnavailable` unless this machine can give `isolation`: a working PID namespace,
 * and for `user` a root worker and the kernel's hard-link protection. Probed once per setting and process.
 */
export function checkIsolation(isolation: LocalIsolation, tools: ContainmentTools = defaultTools): void {
  // Not by the run's gateway socket: the machine's answer is the same for every run, and the probe is a spawn.
  const key = JSON.stringify([{ ...isolation, gatewaySocket: undefined }, tools]);
  if (!probes.has(key)) probes.set(key, isolationProblem(isolation, tools));
  const problem = probes.get(key);
  if (problem) throw new SandboxIsolationUnavailable(problem);
}

function isolationProblem(isolation: LocalIsolation, tools: ContainmentTools): string | undefined {
  if (isolation.user) {
    if (!isRoot()) {
      return `Sandbox option user=${isolation.user.uid}:${isolation.user.gid} needs a worker running as root (to switch users); this worker runs as uid ${process.geteuid?.()}. Run it as root, or drop the option (the harness then runs as the worker's user: development only).`;
    }
    // Without it, a harness could hard-link a root-only file into its workspace and have a root worker read it.
    const protectedLinks = readFileText('/proc/sys/fs/protected_hardlinks')?.trim();
    if (protectedLinks !== '1') {
      return `Sandbox option user needs the kernel's hard-link protection (fs.protected_hardlinks=1, found ${protectedLinks ?? 'nothing'}); enable it with: sysctl -w fs.protected_hardlinks=1.`;
    }
  }
  const what = [
    ...(isolation.containment === 'pid-namespace' ? ['a PID namespace per turn'] : []),
    ...(isolation.network === 'loopback' ? ['a loopback-only network namespace for network policy "none"'] : []),
    ...(isolation.network === 'gateway' ? ["a network namespace whose only way out is the run's egress gateway"] : []),
    ...(isolation.user ? [`running as ${isolation.user.uid}:${isolation.user.gid}`] : []),
  ].join(' and ');
  const fix =
    isolation.containment === 'pid-namespace'
      ? "; or set sandbox.options.containment: process-group to accept that a harness's setsid/daemon children can outlive its turn."
      : '.';
  const built = needsHelper(isolation) ? helper(tools) : undefined;
  if (built && 'problem' in built) return `The local sandbox cannot give ${what} on this machine: ${built.problem}${fix}`;
  // Inside a PID namespace the process's parent is the namespace's init, PID 1. The namespaces are probed, not the
  // gateway's forwarder: that is a Node process of the worker's own, and the socket it serves is the run's.
  const namespaces: LocalIsolation = { ...isolation, ...(isolation.network ? { network: 'loopback' as const } : {}), gatewaySocket: undefined };
  const probe = wrapArgv(namespaces, ['/bin/sh', '-c', 'test "$PPID" = 1 || [ -z "$EXPECT_NAMESPACE" ]'], tools);
  const env = { PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin', ...(isolation.containment === 'pid-namespace' ? { EXPECT_NAMESPACE: '1' } : {}) };
  const result = spawnSync(probe[0]!, probe.slice(1), { env, encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.error || result.status !== 0) {
    const why = result.error ? result.error.message : (result.stderr || `exit ${result.status ?? result.signal}`).trim();
    return (
      `The local sandbox cannot give ${what} on this machine: ${why}. ` +
      (isolation.containment === 'pid-namespace' || isolation.network
        ? 'Run the worker as root or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)'
        : 'Run the worker as root') +
      fix
    );
  }
  return undefined;
}

function readFileText(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** State, parent pid, process group and start time (clock ticks since boot) of one process, from /proc. */
export function procStat(pid: number | string): { state: string; ppid: number; pgrp: number; start: number } | undefined {
  const text = readFileText(`/proc/${pid}/stat`);
  if (text === undefined) return undefined;
  // The command name may hold spaces and parentheses: fields start after the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0] ?? '', ppid: Number(fields[1]), pgrp: Number(fields[2]), start: Number(fields[19]) };
}

/** Whether `pid` is alive (not a zombie) and still the process that started at `start`. */
export function sameProcessAlive(pid: number, start: number): boolean {
  const stat = procStat(pid);
  return stat !== undefined && stat.start === start && stat.state !== 'Z' && stat.state !== 'X';
}

/** Whether any process in group `pgid` is alive and not a zombie. */
export function processGroupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    // EPERM: it exists but belongs to someone else (alive, and not ours to kill).
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  // Signal 0 also succeeds for zombies; on Linux look closer so a killed group does not look alive.
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return true;
  }
  return entries.some((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    const stat = procStat(entry);
    return stat !== undefined && stat.pgrp === pgid && stat.state !== 'Z' && stat.state !== 'X';
  });
}

/** Sends `signal` to a process group or process, ignoring one that is already gone. */
export function signal(target: number, name: NodeJS.Signals): void {
  try {
    process.kill(target, name);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ESRCH' && code !== 'EPERM') throw error;
  }
}

/** The direct children of `pid` (from /proc/<pid>/task/<pid>/children). */
export function childrenOf(pid: number): number[] {
  const text = readFileText(`/proc/${pid}/task/${pid}/children`);
  return text ? text.trim().split(/\s+/).filter(Boolean).map(Number) : [];
}

/** What the runtime records about a running turn process (outside the workspace). */
export interface TurnRecord {
  readonly containment: LocalContainment;
  /** The spawned process (unshare, or the harness itself) and its process group. */
  readonly pid: number;
  readonly start: number;
  /** PID 1 of the turn's namespace, as seen from the worker. */
  readonly init?: { readonly pid: number; readonly start: number };
}

/** Records a turn process in `file` (atomically; the directory is private to the worker). */
export function writeTurnRecord(file: string, record: TurnRecord): void {
  const dir = path.dirname(file);
  // The directory is made private once per process, not on every turn (two writes per turn, on the event loop).
  if (!preparedDirs.has(dir)) prepareRecordDir(dir);
  const temp = `${file}.${process.pid}.tmp`;
  const text = `${JSON.stringify(record)}\n`;
  try {
    writeFileSync(temp, text, { mode: 0o600 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    prepareRecordDir(dir); // removed since
    writeFileSync(temp, text, { mode: 0o600 });
  }
  renameSync(temp, file);
}

const preparedDirs = new Set<string>();

function prepareRecordDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  preparedDirs.add(dir);
}

/** Removes `file` if it still records `pid` (a newer turn may have replaced it). */
export function removeTurnRecord(file: string, pid: number): void {
  if (readTurnRecord(file)?.pid !== pid) return;
  try {
    unlinkSync(file);
  } catch {
    // gone already
  }
}

function readTurnRecord(file: string): TurnRecord | undefined {
  const text = readFileText(file);
  if (text === undefined) return undefined;
  try {
    const record = JSON.parse(text) as TurnRecord;
    const valid = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n > 1;
    if (!valid(record.pid) || typeof record.start !== 'number') return undefined;
    if (record.init && (!valid(record.init.pid) || typeof record.init.start !== 'number')) return undefined;
    return record;
  } catch {
    return undefined;
  }
}

/**
 * Kills (SIGKILL) the turn recorded in `file` if it is still running — for a PID namespace, its PID 1, which
 * takes every process in the namespace with it — waits up to `waitMs` for it to go, and removes the file.
 * Returns whether something was killed. Pids whose start time differs (recycled) are left alone.
 */
export async function killRecordedTurn(file: string, waitMs = 2000): Promise<boolean> {
  const record = readTurnRecord(file);
  if (!record) {
    rmSync(file, { force: true });
    return false;
  }
  const targets = [record.init, { pid: record.pid, start: record.start }].filter(
    (p): p is { pid: number; start: number } => p !== undefined && sameProcessAlive(p.pid, p.start),
  );
  const group = record.containment === 'process-group' && processGroupAlive(record.pid) ? record.pid : undefined;
  for (const target of targets) signal(target.pid, 'SIGKILL');
  if (group !== undefined) signal(-group, 'SIGKILL');
  const alive = () => targets.some((t) => sameProcessAlive(t.pid, t.start)) || (group !== undefined && processGroupAlive(group));
  const deadline = Date.now() + waitMs;
  while (alive() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  rmSync(file, { force: true });
  return targets.length > 0 || group !== undefined;
}
