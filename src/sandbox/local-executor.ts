/** Runs processes directly on the worker's host, in the workspace, with a minimal environment. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { LineQueue } from './line-queue.js';
import { defaultPidFile, processGroupAlive, removePidFile, signalProcessGroup, writePidFile } from './pidfile.js';
import type { ExecProcess, ExecRequest, SandboxExecutor } from './types.js';

const stderrTailBytes = 8 * 1024;
const defaultKillGraceMs = 1000;
const defaultDrainGraceMs = 500;

/** Options of the local executor. */
export interface LocalExecutorOptions {
  /** Absolute workspace path: the default cwd, and where `.home` lives. */
  readonly workspacePath: string;
  /** Where to record the running process group; default `<workspace>/.durable-harness/turn.pid`; `false` for none. */
  readonly pidFile?: string | false;
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
  readonly exit: Promise<LocalExit>;
  readonly pid: number | undefined;
  private readonly queue = new LineQueue();
  private readonly stderr = new TailBuffer(stderrTailBytes);
  private child: ChildProcess | undefined;
  private failure: Error | undefined;
  private exited = false;
  private killing: Promise<void> | undefined;
  private drainTimer: NodeJS.Timeout | undefined;
  private resolveExit!: (exit: LocalExit) => void;

  constructor(
    request: ExecRequest,
    private readonly options: Required<Omit<LocalExecutorOptions, 'pidFile'>> & { pidFile: string | false },
  ) {
    this.lines = this.queue;
    this.exit = new Promise((resolve) => {
      this.resolveExit = resolve;
    });
    this.pid = this.start(request);
    if (request.signal) this.watchSignal(request.signal);
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
    if (!stdin || stdin.destroyed || !stdin.writable) return;
    stdin.write(text);
  }

  /** Ends stdin: the process sees end of input. A no-op when stdin was not opened or is already closed. */
  closeStdin(): void {
    const stdin = this.child?.stdin;
    if (stdin && !stdin.destroyed && !stdin.writableEnded) stdin.end();
  }

  /** SIGTERM to the process group, SIGKILL after the grace period if any of it lives; resolves after exit. */
  kill(): Promise<void> {
    this.killing ??= this.killGroup();
    return this.killing;
  }

  private start(request: ExecRequest): number | undefined {
    const [file, ...args] = request.argv;
    const cwd = request.cwd ?? this.options.workspacePath;
    if (file === undefined || file.length === 0) return this.fail(new Error('Cannot start a process: argv is empty.'));
    if (!existsSync(cwd)) return this.fail(new Error(`Cannot start ${file}: working directory ${cwd} does not exist.`));
    let child: ChildProcess;
    try {
      child = spawn(file, args, {
        cwd,
        env: this.environment(request),
        // Own process group, so kill() reaches grandchildren; never a shell, so argv is never re-parsed.
        detached: true,
        stdio: [request.stdin === undefined && !request.keepStdinOpen ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
    } catch (error) {
      // Invalid arguments (a NUL byte, for instance) throw synchronously; report them like any spawn failure.
      return this.fail(error as Error);
    }
    this.child = child;
    this.wire(child, request);
    if (child.pid !== undefined && this.options.pidFile) writePidFile(this.options.pidFile, child.pid);
    return child.pid;
  }

  private environment(request: ExecRequest): Record<string, string> {
    const home = path.join(this.options.workspacePath, '.home');
    mkdirSync(home, { recursive: true });
    // Nothing from the worker's own environment leaks in: only what the request grants.
    return { PATH: minimalPath(), HOME: home, LANG: 'C.UTF-8', ...request.env };
  }

  private wire(child: ChildProcess, request: ExecRequest): void {
    child.stdout?.on('data', (chunk: Buffer) => this.queue.push(chunk));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => this.stderr.append(chunk));
    // A harness that exits early makes writes fail with EPIPE; that is its exit to report, not our crash.
    child.stdin?.on('error', () => undefined);
    if (child.stdin && request.stdin !== undefined) child.stdin.write(request.stdin);
    if (child.stdin && !request.keepStdinOpen) child.stdin.end();
    child.once('error', (error) => {
      if (child.pid === undefined) this.fail(error);
    });
    child.once('exit', () => this.onExited(child));
    child.once('close', (code, signal) => this.finish({ code, signal }));
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

  private fail(error: Error): undefined {
    this.failure = error;
    this.stderr.append(`${error.message}\n`);
    this.finish({ code: null, signal: null });
    return undefined;
  }

  private finish(exit: LocalExit): void {
    clearTimeout(this.drainTimer);
    if (this.exited && this.child?.pid !== undefined && this.options.pidFile && !processGroupAlive(this.child.pid)) {
      removePidFile(this.options.pidFile, this.child.pid);
    }
    this.exited = true;
    this.queue.end();
    this.resolveExit(exit);
  }

  private async killGroup(): Promise<void> {
    const pgid = this.child?.pid;
    if (pgid === undefined) return this.exit.then(() => undefined);
    signalProcessGroup(pgid, 'SIGTERM');
    const deadline = Date.now() + this.options.killGraceMs;
    while (processGroupAlive(pgid) && Date.now() < deadline) await sleep(20);
    if (processGroupAlive(pgid)) {
      signalProcessGroup(pgid, 'SIGKILL');
      // SIGKILL is not instant for every member; callers rely on "kill resolved" meaning "all gone".
      const killDeadline = Date.now() + 1000;
      while (processGroupAlive(pgid) && Date.now() < killDeadline) await sleep(10);
    }
    await this.exit;
    if (this.options.pidFile && !processGroupAlive(pgid)) removePidFile(this.options.pidFile, pgid);
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

/** Starts processes on the host in a workspace directory. Keeps track of them so `killAll` can end leftovers. */
export class LocalExecutor implements SandboxExecutor {
  private readonly running = new Set<LocalProcess>();
  private readonly options: Required<Omit<LocalExecutorOptions, 'pidFile'>> & { pidFile: string | false };

  constructor(options: LocalExecutorOptions) {
    const workspacePath = path.resolve(options.workspacePath);
    this.options = {
      workspacePath,
      pidFile: options.pidFile ?? defaultPidFile(workspacePath),
      killGraceMs: options.killGraceMs ?? defaultKillGraceMs,
      drainGraceMs: options.drainGraceMs ?? defaultDrainGraceMs,
    };
  }

  /** Where this executor records process groups, or `false`. */
  get pidFile(): string | false {
    return this.options.pidFile;
  }

  exec(request: ExecRequest): LocalProcess {
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
