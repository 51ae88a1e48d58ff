/**
 * How the local provider contains a turn's processes, and the runtime state it keeps about them.
 *
 * Containment `pid-namespace` (the default): every process starts in its own PID namespace
 * (`unshare --pid --fork --kill-child --mount-proc`) under a one-line `sh` as the namespace's PID 1. When the
 * process exits or is killed, that init exits and the kernel kills everything else in the namespace — children
 * that called setsid, `detached: true` spawns, double-forked daemons — so every descendant dies with its turn.
 * The process itself is not PID 1: the kernel drops signals to a PID 1 that set no handler, so a CLI running as
 * PID 1 would never see the SIGTERM of a cancel and always wait out the kill grace. `setpriv --pdeathsig KILL`
 * before it makes the namespace die with the worker too (a SIGKILLed worker leaves no turn running).
 * `process-group` is the weaker, explicit opt-out: only the process group is signalled, and a descendant that
 * leaves it can outlive the turn.
 *
 * With `user`, the harness runs as that unprivileged uid:gid (`setpriv`, no supplementary groups, no new
 * privileges, empty capability sets), so it cannot read the worker's environment, the credentials file or
 * the Docker socket.
 *
 * With `network: 'loopback'` (network policy `none`), every process also gets its own network namespace
 * (`unshare --net`) holding only a loopback interface, brought up before the harness starts: the harness
 * reaches its own 127.0.0.1 and nothing else — not the worker's Temporal server, ledger or codec server on the
 * host's loopback, not the host's interfaces, not a DNS server.
 *
 * Pid bookkeeping lives in a state file under the runtime directory — never in the workspace — and records
 * each pid with its start time, so a recycled pid is never signalled.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { forwarderScript, gatewayPort, listeningPattern } from './forwarder.js';

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

/** Binaries from util-linux. */
export interface ContainmentTools {
  readonly unshare: string;
  readonly setpriv: string;
}

export const defaultTools: ContainmentTools = { unshare: 'unshare', setpriv: 'setpriv' };

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

/**
 * Options for `unshare` that give a process its own PID namespace (with `pid`), its own network namespace (with
 * `net`) and, not as root, the user namespace either needs.
 */
function unshareFlags(pid: boolean, net: boolean): string[] {
  const base = [...(net ? ['--net'] : []), ...(pid ? ['--pid', '--fork', '--kill-child', '--mount-proc'] : [])];
  // Without root a new namespace needs a user namespace; --map-current-user keeps the uid the same inside.
  return isRoot() ? base : ['--user', '--map-current-user', ...base];
}

/** `ip` from iproute2, looked up once: brings a new network namespace's loopback up. */
let ipTool: string | undefined | null = null;
function ipPath(): string | undefined {
  if (ipTool === null) ipTool = ['/usr/sbin/ip', '/sbin/ip', '/usr/bin/ip', '/bin/ip'].find((p) => existsSync(p));
  return ipTool;
}

/**
 * Before the user drop, inside the new network namespace: `lo` up (the namespace starts with it down), then the
 * rest. Needs CAP_NET_ADMIN in the namespace (a root worker); without it the loopback stays down — even less.
 */
function loopbackUp(): string[] {
  const ip = ipPath();
  return ip ? ['/bin/sh', '-c', '"$0" link set lo up 2>/dev/null; exec "$@"', ip] : [];
}

/**
 * The namespace's init: runs the process in the foreground (so it keeps every default signal disposition and its
 * stdin, and is not PID 1), reaps orphans while it waits, exits with the process's status (128+n when a signal
 * killed it). Its own stderr goes to /dev/null so sh's "Terminated" never lands in the harness's stderr; the
 * process gets the original stderr back. `exit` after the command keeps sh from exec'ing it as PID 1; `unset PWD`
 * keeps sh's own variable out of the process's environment.
 */
const namespaceInit = ['/bin/sh', '-c', 'unset PWD; exec 3>&2 2>/dev/null; "$@" 2>&3 3>&-; exit $?', 'durable-harness-init'];

/**
 * Before the user drop, inside the new network namespace: `lo` up, the forwarder to the run's gateway started in the
 * background (as the worker's user: a sandbox user cannot signal it; it dies with the turn's PID namespace), and the
 * process only once the forwarder listens (polled in /proc/net/tcp, which shows this namespace's sockets; bounded).
 */
function gatewayUp(socket: string): string[] {
  const ip = ipPath();
  if (!ip) return [];
  const script =
    '"$0" link set lo up 2>/dev/null; "$1" -e "$2" "$3" "$4" </dev/null >/dev/null 2>&1 & n=0; ' +
    'while ! grep -q "$5" /proc/net/tcp 2>/dev/null; do n=$((n+1)); ' +
    'if [ "$n" -gt 1000 ]; then echo "durable-harness: the gateway forwarder did not start" >&2; exit 125; fi; sleep 0.005; done; ' +
    'shift 5; exec "$@"';
  return ['/bin/sh', '-c', script, ip, process.execPath, forwarderScript, socket, String(gatewayPort), listeningPattern()];
}

/** `argv` wrapped so that it runs with `isolation` (the executable must already be an absolute path). */
export function wrapArgv(isolation: LocalIsolation, argv: readonly string[], tools: ContainmentTools = defaultTools): string[] {
  const drop = isolation.user
    ? [tools.setpriv, '--reuid', String(isolation.user.uid), '--regid', String(isolation.user.gid), '--clear-groups', '--no-new-privs',
       '--inh-caps=-all', '--bounding-set=-all', '--pdeathsig', 'keep', '--']
    : [];
  const net = isolation.network !== undefined;
  const lo = isolation.network === 'gateway' ? gatewayUp(isolation.gatewaySocket!) : net ? loopbackUp() : [];
  // Without a PID namespace unshare execs in place (no fork), so the process keeps its pid and process group.
  if (isolation.containment === 'process-group') return net ? [tools.unshare, ...unshareFlags(false, true), '--', ...lo, ...drop, ...argv] : [...drop, ...argv];
  // The parent-death signal: when the worker itself dies (SIGKILL, a lost host), unshare dies with it and takes the
  // namespace — every process of the turn — along; nothing of a killed worker's turns outlives it.
  return [tools.setpriv, '--pdeathsig', 'KILL', '--', tools.unshare, ...unshareFlags(true, net), '--', ...lo, ...drop, ...namespaceInit, ...argv];
}

const probes = new Map<string, string | undefined>();

/**
 * Throws `SandboxIsolationUnavailable` unless this machine can give `isolation`: a working PID namespace,
 * and for `user` a root worker and the kernel's hard-link protection. Probed once per setting and process.
 */
export function checkIsolation(isolation: LocalIsolation, tools: ContainmentTools = defaultTools): void {
  const key = JSON.stringify([isolation, tools]);
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
  // Inside a PID namespace the process's parent is the namespace's init, PID 1.
  const probe = wrapArgv(isolation, ['/bin/sh', '-c', 'test "$PPID" = 1 || [ -z "$EXPECT_NAMESPACE" ]'], tools);
  const env = { PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin', ...(isolation.containment === 'pid-namespace' ? { EXPECT_NAMESPACE: '1' } : {}) };
  const result = spawnSync(probe[0]!, probe.slice(1), { env, encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.error || result.status !== 0) {
    const why = result.error ? result.error.message : (result.stderr || `exit ${result.status ?? result.signal}`).trim();
    const what = [
      ...(isolation.containment === 'pid-namespace' ? [`a PID namespace per turn (${tools.unshare} --pid)`] : []),
      ...(isolation.network === 'loopback' ? [`a loopback-only network namespace for network policy "none" (${tools.unshare} --net)`] : []),
      ...(isolation.network === 'gateway' ? [`a network namespace whose only way out is the run's egress gateway (${tools.unshare} --net, ip, node)`] : []),
      ...(isolation.user ? [`running as ${isolation.user.uid}:${isolation.user.gid} (${tools.setpriv})`] : []),
    ].join(' and ');
    return (
      `The local sandbox cannot give ${what} on this machine: ${why}. ` +
      (isolation.containment === 'pid-namespace'
        ? 'Install util-linux, run the worker as root or enable unprivileged user namespaces; or set sandbox.options.containment: ' +
          'process-group to accept that a harness\'s setsid/daemon children can outlive its turn.'
        : 'Install util-linux and run the worker as root.')
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
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  chmodSync(path.dirname(file), 0o700);
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(record)}\n`, { mode: 0o600 });
  renameSync(temp, file);
}

/** Removes `file` if it still records `pid` (a newer turn may have replaced it). */
export function removeTurnRecord(file: string, pid: number): void {
  if (readTurnRecord(file)?.pid === pid) rmSync(file, { force: true });
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
