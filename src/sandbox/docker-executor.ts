/**
 * Runs processes inside a run's container, one `docker exec` each. Killing a `docker exec` client does not
 * kill the process inside, so each process reports its pid (its own process group: the engine makes each
 * exec a session leader) on a side channel the harness cannot write before it — the first line of stderr,
 * printed by the wrapper before it becomes the program — and `kill()` signals that group from a second exec.
 * Nothing is read back from the workspace. Descendants that leave the group (setsid, double fork) are ended by
 * `killLeftovers()`: every process of the sandbox user in the container's PID namespace is killed (an exec that
 * sweeps), unless the engine's process list shows none left but the worker's own file helper.
 */
import { constants } from 'node:os';
import type { Duplex } from 'node:stream';
import type { DockerClient, StartedExec } from './docker-client.js';
import { exitCodeOf } from './docker-client.js';
import { isDockerSandboxError, SandboxContainerGone } from './docker-errors.js';
import { LineQueue, type OutputLine } from './line-queue.js';
import type { ExecProcess, ExecRequest, KillOptions, SandboxExecutor } from './types.js';

const stderrTailChars = 8 * 1024;
const defaultKillGraceMs = 1000;
/** How long a signal-like exit waits to see whether the whole container is going down. */
const containerGoneWaitMs = 500;

/**
 * The wrapper each process runs under: prints `$$` (which `exec` keeps) as the first line of stderr, then
 * becomes the requested program. argv stays positional, so nothing the caller passes is parsed by a shell.
 */
const wrapperScript = 'printf "%s\\n" "$$" >&2 && exec "$@"';

/**
 * Kills process group `$1`: SIGTERM, up to `$2` polls of 50 ms, then SIGKILL. A non-numeric or tiny pid is
 * ignored (never signal group 0 or 1).
 */
const killScript = [
  'p=$1; n=$2; i=0',
  "case \"$p\" in ''|*[!0-9]*) exit 0;; esac",
  '[ "$p" -gt 1 ] || exit 0',
  'kill -TERM "-$p" 2>/dev/null || exit 0',
  'while kill -0 "-$p" 2>/dev/null && [ $i -lt "$n" ]; do sleep 0.05; i=$((i+1)); done',
  'kill -KILL "-$p" 2>/dev/null',
  'exit 0',
].join('\n');

/**
 * Kills every process of the calling (sandbox) user in the container except itself — kill(-1) never reaches
 * PID 1 or other users' processes, such as the keep-alive process — and waits until none is left.
 * Only shell builtins run in the loop, so the script itself forks nothing that would count.
 */
const sweepScript = [
  'i=0',
  'while [ $i -lt 60 ]; do',
  '  kill -KILL -1 2>/dev/null',
  '  left=0',
  '  for d in /proc/[0-9]*; do [ "${d#/proc/}" = "$$" ] && continue; [ -O "$d" ] && left=1; done',
  '  [ $left = 0 ] && exit 0',
  '  sleep 0.05; i=$((i+1))',
  'done',
  'exit 1',
].join('\n');

/** Options of the Docker executor (made by `DockerSandboxProvider.attach`). */
export interface DockerExecutorOptions {
  readonly client: DockerClient;
  /** Container name or id. */
  readonly container: string;
  /** Workspace inside the container (default cwd). */
  readonly workspacePath: string;
  /** `uid:gid` every process runs as. */
  readonly user: string;
  /** HOME inside the container (in the workspace, so CLI session stores survive containers). */
  readonly home: string;
  /** PATH inside the container. */
  readonly path: string;
  /** Grace between SIGTERM and SIGKILL when a request does not set one. */
  readonly killGraceMs?: number;
  /**
   * Host pids of the worker's own processes in the container that run as the sandbox user (its file helper): not
   * leftovers of a turn. Anything else of the sandbox user found at a turn's end is, and the sweep runs.
   */
  readonly ownPids?: () => Promise<readonly number[]>;
}

/** Exit status of a process in a container. */
export interface DockerExit {
  code: number | null;
  signal: string | null;
}

class TailBuffer {
  private text = '';
  append(chunk: string): void {
    this.text = (this.text + chunk).slice(-stderrTailChars);
  }
  toString(): string {
    return this.text;
  }
}

const signalNames = new Map<number, string>(Object.entries(constants.signals).map(([name, value]) => [value, name]));

/**
 * A process in a container.
 *
 * `exit` resolves with the exit code; it REJECTS with `SandboxContainerGone` when the container stopped or
 * vanished under the process, and with `DockerUnavailable` when the engine went away: those are not the
 * harness's exit, and the activity maps them to failures by `code`. `pid` is undefined (the host pid means
 * nothing inside the container); `containerPid()` gives the pid inside.
 */
export class DockerProcess implements ExecProcess {
  readonly lines: AsyncIterable<string>;
  readonly output: AsyncIterable<OutputLine>;
  readonly exit: Promise<DockerExit>;
  readonly pid: number | undefined = undefined;
  private readonly queue: LineQueue;
  private readonly stderr = new TailBuffer();
  private readonly started: Promise<StartedExec | undefined>;
  private stream: Duplex | undefined;
  private pendingWrites: string[] = [];
  private closeAfterStart = false;
  private exited = false;
  private killRequested = false;
  private killing: Promise<void> | undefined;
  private resolveExit!: (exit: DockerExit) => void;
  private rejectExit!: (error: Error) => void;
  /** The wrapper's first stderr line (our pid inside the container) until it is complete. */
  private pidLine: string | undefined = '';
  private groupId: number | undefined;
  private readonly pidKnown: Promise<void>;
  private resolvePid!: () => void;

  constructor(
    request: ExecRequest,
    private readonly options: DockerExecutorOptions & { readonly killGraceMs: number },
  ) {
    // Backpressure: a backlog the turn has not read yet stops reading the attach stream (stdout and stderr share it),
    // so the engine stops reading the process's pipe and the harness blocks on its writes.
    this.queue = new LineQueue({ limits: request.lineLimits, onPause: () => this.stream?.pause(), onResume: () => this.stream?.resume() });
    this.lines = this.queue.text();
    this.output = this.queue;
    this.exit = new Promise<DockerExit>((resolve, reject) => {
      this.resolveExit = resolve;
      this.rejectExit = reject;
    });
    // Callers that only iterate lines must not crash the worker with an unhandled rejection.
    this.exit.catch(() => undefined);
    this.pidKnown = new Promise((resolve) => {
      this.resolvePid = resolve;
    });
    const settled = (): void => this.resolvePid();
    void this.exit.then(settled, settled);
    this.started = this.start(request);
    if (request.signal) this.watchSignal(request.signal);
  }

  stderrTail(): string {
    return this.stderr.toString();
  }

  /** Writes to stdin (queued until the exec has started); a no-op when stdin was not opened or is closed. */
  write(text: string): void {
    if (this.exited) return;
    const stream = this.stream;
    if (!stream) {
      this.pendingWrites.push(text);
      return;
    }
    if (stream.destroyed || !stream.writable || stream.writableEnded) return;
    stream.write(text);
  }

  /** Ends stdin (after anything queued); the process sees end of input, its output still flows. */
  closeStdin(): void {
    if (this.exited) return;
    const stream = this.stream;
    if (!stream) {
      this.closeAfterStart = true;
      return;
    }
    if (!stream.destroyed && !stream.writableEnded) stream.end();
  }

  /** Kills the process group inside the container: SIGTERM, SIGKILL after the grace. Resolves after exit. */
  kill(options: KillOptions = {}): Promise<void> {
    const graceMs = options.graceMs ?? this.options.killGraceMs;
    if (!this.killing) this.killing = this.killGroup(graceMs);
    // A graceful kill already under way: a second, immediate one ends its grace.
    else if (graceMs === 0) return Promise.all([this.killing, this.killGroup(0)]).then(() => undefined);
    return this.killing;
  }

  /** The process's pid inside the container (its process group id), once the wrapper has reported it. */
  async containerPid(): Promise<number | undefined> {
    await this.pidKnown;
    return this.groupId;
  }

  /** Splits the wrapper's pid line off the front of stderr; everything after it is the program's. */
  private onStderr(chunk: string): void {
    if (this.pidLine === undefined) {
      this.stderr.append(chunk);
      return;
    }
    const text = this.pidLine + chunk;
    const newline = text.indexOf('\n');
    if (newline < 0) {
      this.pidLine = text.slice(0, 32);
      return;
    }
    const pid = Number.parseInt(text.slice(0, newline), 10);
    if (Number.isInteger(pid) && pid > 1) this.groupId = pid;
    this.pidLine = undefined;
    this.resolvePid();
    if (newline + 1 < text.length) this.stderr.append(text.slice(newline + 1));
  }

  private async start(request: ExecRequest): Promise<StartedExec | undefined> {
    const { argv } = request;
    if (argv.length === 0 || argv[0] === '') {
      this.failWith(new Error('Cannot start a process: argv is empty.'));
      return undefined;
    }
    let env: string[];
    try {
      env = this.environment(request);
    } catch (error) {
      this.failWith(error as Error);
      return undefined;
    }
    const wantsStdin = request.stdin !== undefined || request.keepStdinOpen === true;
    let started: StartedExec;
    try {
      started = await this.options.client.exec(this.options.container, {
        argv: ['/bin/sh', '-c', wrapperScript, 'sh', ...argv],
        env,
        user: this.options.user,
        workdir: request.cwd ?? this.options.workspacePath,
        stdin: wantsStdin,
      });
    } catch (error) {
      this.stderr.append(`${(error as Error).message}\n`);
      this.finishWithError(error as Error);
      return undefined;
    }
    this.stream = started.stream;
    if (!wantsStdin) this.pendingWrites = [];
    const { stdout, stderr } = this.options.client.demux(started.stream);
    stdout.on('data', (chunk: Buffer) => this.queue.push(chunk));
    stderr.setEncoding('utf8');
    stderr.on('data', (chunk: string) => this.onStderr(chunk));
    // A process that exits early makes stdin writes fail with EPIPE: its exit is what to report.
    started.stream.on('error', () => undefined);
    if (wantsStdin) {
      if (request.stdin !== undefined) started.stream.write(request.stdin);
      for (const text of this.pendingWrites) started.stream.write(text);
      // end() half-closes the hijacked connection: the engine closes the process's stdin, output still flows.
      if (!request.keepStdinOpen || this.closeAfterStart) started.stream.end();
    }
    const ended = Promise.all([ended$(stdout), ended$(stderr)]);
    void ended.then(() => this.onStreamEnd(started));
    return started;
  }

  /** PATH and HOME of the sandbox, then the request's own variables (secrets arrive only here). */
  private environment(request: ExecRequest): string[] {
    const base: Record<string, string> = { PATH: this.options.path, HOME: this.options.home, LANG: 'C.UTF-8' };
    return Object.entries({ ...base, ...request.env }).map(([key, value]) => {
      if (key.length === 0 || key.includes('=') || key.includes('\0') || value.includes('\0')) {
        throw new Error(`Invalid environment variable name or value for ${JSON.stringify(key)}.`);
      }
      return `${key}=${value}`;
    });
  }

  private async onStreamEnd(started: StartedExec): Promise<void> {
    try {
      const code = await exitCodeOf(started);
      // A null code or a signal-like one may mean the container itself stopped under the process.
      if (code === null || (code >= 128 && !this.killRequested)) await this.checkContainerAlive();
      const signal = code !== null && code > 128 && this.killRequested ? signalNames.get(code - 128) : undefined;
      this.finish(signal ? { code: null, signal } : { code, signal: null });
    } catch (error) {
      this.finishWithError(error as Error);
    }
  }

  /**
   * Throws `SandboxContainerGone` if the container stopped or vanished. The engine kills an exec's process a
   * moment before the container's own state changes, so a signal-like exit is checked for a short while.
   */
  private async checkContainerAlive(): Promise<void> {
    const deadline = Date.now() + containerGoneWaitMs;
    for (;;) {
      const state = await this.options.client.inspect(this.options.container);
      if (!state) throw new SandboxContainerGone(this.options.container, 'removed while a process was running');
      if (!state.State.Running || state.State.Status === 'removing') {
        const oom = state.State.OOMKilled ? ', killed for exceeding its memory limit' : '';
        throw new SandboxContainerGone(this.options.container, `stopped while a process was running (state ${state.State.Status}${oom})`);
      }
      if (Date.now() >= deadline) return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  private failWith(error: Error): void {
    // Like a failed spawn: the "process" exits without a code and stderr says why.
    this.stderr.append(`${error.message}\n`);
    this.finish({ code: null, signal: null });
  }

  private finish(exit: DockerExit): void {
    if (this.exited) return;
    this.exited = true;
    this.queue.end();
    this.resolveExit(exit);
  }

  private finishWithError(error: Error): void {
    if (this.exited) return;
    this.exited = true;
    this.queue.end();
    if (isDockerSandboxError(error)) this.stderr.append(`${error.message}\n`);
    this.rejectExit(error);
  }

  private async killGroup(graceMs: number): Promise<void> {
    this.killRequested = true;
    const started = await this.started;
    if (!started || this.exited) return this.exit.then(() => undefined, () => undefined);
    // The pid arrives before the program starts; wait for it (or for the exit) before signalling.
    await Promise.race([this.pidKnown, new Promise((resolve) => setTimeout(resolve, 1000))]);
    const polls = Math.ceil(graceMs / 50);
    if (this.groupId !== undefined) {
      try {
        await this.options.client.run(this.options.container, ['/bin/sh', '-c', killScript, 'sh', String(this.groupId), String(polls)], {
          user: this.options.user,
        });
      } catch {
        // The container is gone or the engine unreachable: exit reports that; nothing inside is left to kill.
      }
    }
    await this.exit.then(() => undefined, () => undefined);
  }

  private watchSignal(signal: AbortSignal): void {
    const onAbort = (): void => void this.kill();
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const off = (): void => signal.removeEventListener('abort', onAbort);
    void this.exit.then(off, off);
  }
}

function ended$(stream: NodeJS.ReadableStream & { readableEnded?: boolean }): Promise<void> {
  return new Promise((resolve) => {
    if (stream.readableEnded) resolve();
    stream.once('end', resolve);
    stream.once('close', resolve);
  });
}

/** Starts processes in one container; tracks them so `killAll` can end leftovers of this activity. */
export class DockerExecutor implements SandboxExecutor {
  private readonly running = new Set<DockerProcess>();
  private readonly options: DockerExecutorOptions & { readonly killGraceMs: number };

  constructor(options: DockerExecutorOptions) {
    this.options = { ...options, killGraceMs: options.killGraceMs ?? defaultKillGraceMs };
  }

  exec(request: ExecRequest): DockerProcess {
    const proc = new DockerProcess(request, { ...this.options, killGraceMs: request.killGraceMs ?? this.options.killGraceMs });
    this.running.add(proc);
    const forget = (): void => void this.running.delete(proc);
    void proc.exit.then(forget, forget);
    return proc;
  }

  /** Kills every process this executor started that is still running. */
  async killAll(): Promise<void> {
    await Promise.all([...this.running].map((proc) => proc.kill()));
  }

  /**
   * Kills every process of the sandbox user in the container — what an earlier attempt left running, and
   * descendants of a turn that escaped its process group (setsid, double fork) — and waits until none is
   * left. Uses nothing the harness can write: kill(-1) as the sandbox user, in the container's PID namespace.
   */
  async killLeftovers(): Promise<void> {
    try {
      // One engine call instead of an exec when nothing of the turn is left (the common case): ~14 ms against ~54 ms.
      if (await this.nothingLeft()) return;
      await this.options.client.run(this.options.container, ['/bin/sh', '-c', sweepScript], { user: this.options.user });
    } catch (error) {
      // A container that is gone has nothing left running.
      if (!(error instanceof SandboxContainerGone)) throw error;
    }
  }

  /**
   * Whether no process of the sandbox user is left in the container but the worker's own: by real, effective or
   * saved uid (what kill(-1) as that user reaches). An engine that cannot list them leaves the answer no.
   */
  private async nothingLeft(): Promise<boolean> {
    const uid = Number(this.options.user.split(':')[0]);
    const processes = await this.options.client.processes(this.options.container);
    if (!processes || !Number.isInteger(uid)) return false;
    const own = new Set(await (this.options.ownPids?.() ?? Promise.resolve([])));
    return !processes.some((p) => p.uids.includes(uid) && !own.has(p.pid));
  }
}
