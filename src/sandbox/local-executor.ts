/**
 * Runs processes on the worker's host, in the workspace, with a minimal environment — each in its own PID
 * namespace (by default), optionally as an unprivileged user. See local-containment.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { LineQueue, type OutputLine } from './line-queue.js';
import {
  childrenOf,
  defaultTools,
  procStat,
  processGroupAlive,
  removeTurnRecord,
  sameProcessAlive,
  signal,
  wrapArgv,
  writeTurnRecord,
  type ContainmentTools,
  type LocalIsolation,
} from './local-containment.js';
import type { ExecProcess, ExecRequest, KillOptions, SandboxExecutor } from './types.js';
import { mkdirWorkspaceSync } from './workspace-fs.js';

const stderrTailBytes = 8 * 1024;
const defaultKillGraceMs = 1000;
const defaultDrainGraceMs = 500;

/** Options of the local executor. */
export interface LocalExecutorOptions {
  /** Absolute workspace path: the default cwd, and where `.home` lives. */
  readonly workspacePath: string;
  /**
   * Where to record the running process (pid and start time) so a later attempt can kill it. It must be
   * outside anything the harness can write (the provider uses its runtime directory); none when absent.
   */
  readonly stateFile?: string;
  /** Containment and user (default: a PID namespace per process, the worker's user). */
  readonly isolation?: LocalIsolation;
  /** How the containment helper is built (tests point the compiler elsewhere). */
  readonly tools?: ContainmentTools;
  /** Grace between SIGTERM and SIGKILL when a request does not set one. */
  readonly killGraceMs?: number;
  /** How long stdout may stay open after the process exited (a background grandchild may hold it). */
  readonly drainGraceMs?: number;
}

/** Exit status of a local process. */
export interface LocalExit {
  code: number | null;
  signal: string | null;
}

/** PATH for harness processes: system directories plus the running node's, so `node` resolves. */
export function minimalPath(): string {
  const dirs = ['/usr/local/bin', '/usr/bin', '/bin'];
  const nodeDir = path.dirname(process.execPath);
  return dirs.includes(nodeDir) ? dirs.join(':') : [nodeDir, ...dirs].join(':');
}

/**
 * Keeps the last `limit` characters of a stream; enough for an error message, bounded for chatty processes.
 */
class TailBuffer {
  private text = '';
  constructor(private readonly limit: number) {}
  append(chunk: string): void {
    this.text = (this.text + chunk).slice(-this.limit);
  }
  toString(): string {
    return this.text;
  }
}

/**
 * A process started by the local executor.
 *
 * Spawn failures never throw: `exit` resolves with `{ code: null, signal: null }`, `stderrTail()` contains
 * Node's message (for a missing binary `spawn NAME ENOENT`) and `spawnError()` returns the error.
 */
export class LocalProcess implements ExecProcess {
  readonly lines: AsyncIterable<string>;
  readonly output: AsyncIterable<OutputLine>;
  readonly exit: Promise<LocalExit>;
  private readonly queue: LineQueue;
  private readonly stderr = new TailBuffer(stderrTailBytes);
  private child: ChildProcess | undefined;
  private failure: Error | undefined;
  private exited = false;
  private killing: Promise<void> | undefined;
  private killNow = false;
  private drainTimer: NodeJS.Timeout | undefined;
  private resolveExit!: (exit: LocalExit) => void;

  private record: { pid: number; start: number; init?: { pid: number; start: number } } | undefined;

  constructor(
    request: ExecRequest,
    private readonly options: ResolvedOptions,
  ) {
    // Backpressure: a backlog the turn has not read yet stops the pipe, and the harness blocks on its writes.
    this.queue = new LineQueue({ limits: request.lineLimits, onPause: () => this.child?.stdout?.pause(), onResume: () => this.child?.stdout?.resume() });
    this.lines = this.queue.text();
    this.output = this.queue;
    this.exit = new Promise((resolve) => {
      this.resolveExit = resolve;
    });
    this.start(request);
    if (request.signal) this.watchSignal(request.signal);
  }

  /** The process's pid (= its process group), once started. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The error that kept the process from starting, if any. */
  spawnError(): Error | undefined {
    return this.failure;
  }

  stderrTail(): string {
    return this.stderr.toString();
  }

  /** Writes to stdin; a no-op when stdin was not opened or is already closed. */
  write(text: string): void {
    const stdin = this.child?.stdin;
    if (stdin && !stdin.destroyed && stdin.writable) stdin.write(text);
  }

  /** Ends stdin: the process sees end of input. A no-op when stdin was not opened or is already closed. */
  closeStdin(): void {
    const stdin = this.child?.stdin;
    if (stdin && !stdin.destroyed && !stdin.writableEnded) stdin.end(); // after the writes queued before it
  }

  /** SIGTERM to the process group, SIGKILL after the grace period if any of it lives; resolves after exit. */
  kill(options: KillOptions = {}): Promise<void> {
    if (options.graceMs === 0) this.killNow = true; // also ends the grace of a kill already waiting
    this.killing ??= this.killGroup(options.graceMs ?? this.options.killGraceMs);
    return this.killing;
  }

  private start(request: ExecRequest): void {
    const [file, ...args] = request.argv;
    const cwd = request.cwd ?? this.options.workspacePath;
    if (file === undefined || file.length === 0) return this.fail(new Error('Cannot start a process: argv is empty.'));
    if (!existsSync(cwd)) return this.fail(new Error(`Cannot start ${file}: its working directory does not exist.`));
    const env = this.environment(request);
    // The containment helper would report a missing program its own way: find it first, like spawn does.
    const executable = findExecutable(file, env.PATH ?? minimalPath());
    if (!executable) return this.fail(Object.assign(new Error(`spawn ${file} ENOENT`), { code: 'ENOENT' }));
    let child: ChildProcess;
    try {
      // Throws SandboxIsolationUnavailable when the helper does not compile (a provider checks that at start).
      const [wrapped, ...wrappedArgs] = wrapArgv(this.options.isolation, [executable, ...args], this.options.tools);
      child = spawn(wrapped!, wrappedArgs, {
        cwd,
        env,
        // Own process group, so kill() reaches the group; never a shell, so argv is never re-parsed.
        detached: true,
        stdio: [request.stdin === undefined && !request.keepStdinOpen ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
    } catch (error) {
      // Invalid arguments (a NUL byte, for instance) throw synchronously; report them like any spawn failure.
      return this.fail(error as Error);
    }
    this.child = child;
    this.wire(child, request);
    if (child.pid !== undefined) this.remember(child.pid);
  }

  /** Records the process (and, in a PID namespace, its PID 1 once it exists) in the runtime state file. */
  private remember(pid: number): void {
    const start = procStat(pid)?.start;
    if (start === undefined) return;
    this.record = { pid, start };
    const file = this.options.stateFile;
    if (file) writeTurnRecord(file, { containment: this.options.isolation.containment, pid, start });
    if (this.options.isolation.containment !== 'pid-namespace') return;
    const findInit = (triesLeft: number): void => {
      if (this.exited) return;
      const init = childrenOf(pid)[0];
      const initStart = init === undefined ? undefined : procStat(init)?.start;
      if (init !== undefined && initStart !== undefined) {
        this.record = { pid, start, init: { pid: init, start: initStart } };
        if (file) writeTurnRecord(file, { containment: 'pid-namespace', pid, start, init: { pid: init, start: initStart } });
        return;
      }
      if (triesLeft > 0) setTimeout(() => findInit(triesLeft - 1), 5).unref();
    };
    findInit(200);
  }

  private environment(request: ExecRequest): Record<string, string> {
    const home = path.join(this.options.workspacePath, '.home');
    try {
      mkdirWorkspaceSync(this.options.workspacePath, '.home');
    } catch {
      // A link the harness planted in place of .home stays as it is: never followed, HOME is then its problem.
    }
    // Nothing from the worker's own environment leaks in: only what the request grants.
    return { PATH: minimalPath(), HOME: home, LANG: 'C.UTF-8', ...request.env };
  }

  private wire(child: ChildProcess, request: ExecRequest): void {
    child.stdin?.on('error', () => undefined); // EPIPE from a harness that exited early: its exit is what counts
    child.stdout?.on('data', (chunk: Buffer) => this.queue.push(chunk));
    // The output ends when stdout closes, even if the process lives on: the reader decides how long to wait for it.
    child.stdout?.once('end', () => this.queue.end());
    child.stdout?.once('close', () => this.queue.end());
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (text: string) => this.stderr.append(text));
    if (request.stdin !== undefined) this.write(request.stdin);
    if (!request.keepStdinOpen) this.closeStdin();
    child.on('error', (error: Error) => {
      if (child.pid === undefined) this.fail(error);
    });
    child.once('exit', () => this.onExited(child));
    child.once('close', (code: number | null, signal: string | null) => this.finish({ code, signal }));
  }

  private onExited(child: ChildProcess): void {
    this.exited = true;
    // A background grandchild can hold stdout open for ever; stop waiting for it after a short drain.
    this.drainTimer = setTimeout(() => {
      child.stdout?.destroy();
      child.stderr?.destroy();
      this.finish({ code: child.exitCode, signal: child.signalCode });
    }, this.options.drainGraceMs);
  }

  private fail(error: Error): void {
    this.failure = error;
    this.stderr.append(`${error.message}\n`);
    this.finish({ code: null, signal: null });
  }

  private finish(exit: LocalExit): void {
    clearTimeout(this.drainTimer);
    if (this.record && this.options.stateFile && !this.running()) removeTurnRecord(this.options.stateFile, this.record.pid);
    this.exited = true;
    this.queue.end();
    this.resolveExit(exit);
  }

  /** Whether anything of this process is left: its namespace's PID 1, itself, or (process-group) its group. */
  private running(): boolean {
    const record = this.record;
    if (!record) return false;
    if (record.init && sameProcessAlive(record.init.pid, record.init.start)) return true;
    if (sameProcessAlive(record.pid, record.start)) return true;
    return this.options.isolation.containment === 'process-group' && processGroupAlive(record.pid);
  }

  /**
   * SIGTERM to the process group (in a PID namespace the helper's outer process, which forwards it through the
   * namespace's PID 1 to the process's own group), then after the grace SIGKILL to the helper, the namespace's
   * PID 1 — the kernel then kills every process in the namespace — and the group.
   */
  private async killGroup(graceMs: number): Promise<void> {
    const pgid = this.child?.pid;
    if (pgid === undefined) return this.exit.then(() => undefined);
    signal(-pgid, 'SIGTERM');
    const deadline = Date.now() + graceMs;
    while (this.running() && Date.now() < deadline && !this.killNow) await sleep(20);
    if (this.running()) {
      const init = this.record?.init ?? this.initNow(pgid);
      // The helper first, so the exit says SIGKILL directly (it re-raises a signal that killed its PID 1, too).
      signal(pgid, 'SIGKILL');
      // Then the namespace's init, whose death takes every process of the namespace with it (also those that left
      // the process group), and the group.
      if (init && sameProcessAlive(init.pid, init.start)) signal(init.pid, 'SIGKILL');
      signal(-pgid, 'SIGKILL');
      // SIGKILL is not instant for every member; callers rely on "kill resolved" meaning "all gone".
      const killDeadline = Date.now() + 1000;
      while (this.running() && Date.now() < killDeadline) await sleep(10);
    }
    await this.exit;
    if (this.options.stateFile && this.record && !this.running()) removeTurnRecord(this.options.stateFile, this.record.pid);
  }

  /** The namespace's PID 1 if it was not recorded yet. */
  private initNow(pid: number): { pid: number; start: number } | undefined {
    if (this.options.isolation.containment !== 'pid-namespace') return undefined;
    const init = childrenOf(pid)[0];
    const start = init === undefined ? undefined : procStat(init)?.start;
    return init !== undefined && start !== undefined ? { pid: init, start } : undefined;
  }

  private watchSignal(signal: AbortSignal): void {
    const onAbort = (): void => void this.kill();
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    void this.exit.then(() => signal.removeEventListener('abort', onAbort));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

type ResolvedOptions = Required<Omit<LocalExecutorOptions, 'stateFile'>> & { readonly stateFile: string | undefined };

/** The absolute path of `file` on `searchPath` (or `file` itself when it has a slash), if it is executable. */
export function findExecutable(file: string, searchPath: string): string | undefined {
  const candidates = file.includes('/') ? [path.resolve(file)] : searchPath.split(':').filter(Boolean).map((dir) => path.join(dir, file));
  for (const candidate of candidates) {
    try {
      if (!statSync(candidate).isFile()) continue;
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Starts processes on the host in a workspace directory. Keeps track of them so `killAll` can end leftovers. */
export class LocalExecutor implements SandboxExecutor {
  private readonly running = new Set<LocalProcess>();
  private started = 0;
  private readonly options: ResolvedOptions;

  constructor(options: LocalExecutorOptions) {
    this.options = {
      workspacePath: path.resolve(options.workspacePath),
      stateFile: options.stateFile,
      isolation: options.isolation ?? { containment: 'pid-namespace' },
      tools: options.tools ?? defaultTools,
      killGraceMs: options.killGraceMs ?? defaultKillGraceMs,
      drainGraceMs: options.drainGraceMs ?? defaultDrainGraceMs,
    };
  }

  /** Where this executor records running processes, if anywhere. */
  get stateFile(): string | undefined {
    return this.options.stateFile;
  }

  /** Whether this executor has started any process (its handle was used for a turn). */
  get startedAny(): boolean {
    return this.started > 0;
  }

  exec(request: ExecRequest): LocalProcess {
    this.started += 1;
    const killGraceMs = request.killGraceMs ?? this.options.killGraceMs;
    const proc = new LocalProcess(request, { ...this.options, killGraceMs });
    this.running.add(proc);
    void proc.exit.then(() => this.running.delete(proc));
    return proc;
  }

  /** Kills every process this executor started that is still running. */
  async killAll(): Promise<void> {
    await Promise.all([...this.running].map((proc) => proc.kill()));
  }
}
