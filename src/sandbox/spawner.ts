/**
 * How the local executor starts a process. `child_process.spawn` is synchronous: the calling thread forks and
 * then waits until the child has exec'd. On a loaded machine the child waits for a CPU before it can exec, and
 * the caller's event loop stands still meanwhile — 20-25 ms per turn measured on the workflow worker's main
 * thread at 50-100 concurrent runs, where workflow tasks queue behind it. `thread` spawns on a small pool of
 * worker threads instead and relays the pipes, so the waiting happens off the event loop and several spawns
 * overlap. `direct` is the plain call.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';

export type SpawnMode = 'direct' | 'thread';
export const spawnModes: readonly SpawnMode[] = ['direct', 'thread'];
/** Chosen by measurement (docs/BENCHMARKS.md). */
export const defaultSpawnMode: SpawnMode = 'direct';

/** `DURABLE_HARNESS_SPAWN` (`direct` or `thread`), else `fallback`. */
export function spawnModeFromEnv(env: Readonly<Record<string, string | undefined>>, fallback: SpawnMode): SpawnMode {
  const value = env.DURABLE_HARNESS_SPAWN?.trim();
  if (!value) return fallback;
  if (!(spawnModes as readonly string[]).includes(value)) throw new Error(`DURABLE_HARNESS_SPAWN must be one of ${spawnModes.join(', ')}; got "${value}".`);
  return value as SpawnMode;
}

/** What a started process offers the executor; `spawn` fires once the pid is known (at once for `direct`). */
export interface SpawnedProcess extends EventEmitter {
  readonly pid: number | undefined;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  onStdout(listener: (chunk: Buffer) => void): void;
  /** Called once when stdout is closed (the process closed it, or exited), which may be before the process exits. */
  onStdoutEnd(listener: () => void): void;
  onStderr(listener: (text: string) => void): void;
  /** Stops reading stdout until `resumeStdout` (backpressure: the process blocks on a full pipe). */
  pauseStdout(): void;
  resumeStdout(): void;
  /** Writes to stdin; a no-op when stdin is not open. */
  writeStdin(text: string): void;
  /** Ends stdin after the writes before it; a no-op when stdin is not open or already ended. */
  endStdin(): void;
  /** Stops reading stdout/stderr (a background grandchild may hold them open for ever). */
  stopOutput(): void;
}

/** The options the executor uses; stdin is `ignore` or `pipe`, stdout and stderr always `pipe`. */
export interface SpawnRequest {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Record<string, string>;
  readonly detached: boolean;
  readonly stdin: 'ignore' | 'pipe';
}

/** Starts a process; throws synchronously for invalid arguments, like `child_process.spawn`. */
export type Spawner = (request: SpawnRequest) => SpawnedProcess;

/** `child_process.spawn` on the calling thread. */
export const directSpawner: Spawner = (request) => new DirectProcess(spawn(request.file, [...request.args], spawnOptions(request)));

function spawnOptions(request: SpawnRequest): SpawnOptions {
  return { cwd: request.cwd, env: request.env, detached: request.detached, stdio: [request.stdin, 'pipe', 'pipe'] };
}

class DirectProcess extends EventEmitter implements SpawnedProcess {
  constructor(private readonly child: ChildProcess) {
    super();
    child.stdin?.on('error', () => undefined); // EPIPE from a harness that exited early: its exit is what counts
    child.stderr?.setEncoding('utf8');
    child.once('spawn', () => this.emit('spawn'));
    child.once('error', (error) => this.emit('error', error));
    child.once('exit', (code, signal) => this.emit('exit', code, signal));
    child.once('close', (code, signal) => this.emit('close', code, signal));
  }
  get pid() {
    return this.child.pid;
  }
  get exitCode() {
    return this.child.exitCode;
  }
  get signalCode() {
    return this.child.signalCode;
  }
  onStdout(listener: (chunk: Buffer) => void) {
    this.child.stdout?.on('data', listener);
  }
  onStdoutEnd(listener: () => void) {
    const stdout = this.child.stdout;
    if (!stdout) return;
    let called = false;
    const once = (): void => {
      if (called) return;
      called = true;
      listener();
    };
    stdout.once('end', once);
    stdout.once('close', once);
  }
  onStderr(listener: (text: string) => void) {
    this.child.stderr?.on('data', listener);
  }
  pauseStdout() {
    this.child.stdout?.pause();
  }
  resumeStdout() {
    this.child.stdout?.resume();
  }
  writeStdin(text: string) {
    const stdin = this.child.stdin;
    if (stdin && !stdin.destroyed && stdin.writable) stdin.write(text);
  }
  endStdin() {
    const stdin = this.child.stdin;
    if (stdin && !stdin.destroyed && !stdin.writableEnded) stdin.end();
  }
  stopOutput() {
    this.child.stdout?.destroy();
    this.child.stderr?.destroy();
  }
}

/** Messages between the pool and its threads. */
type ToThread =
  | { type: 'spawn'; id: number; request: SpawnRequest }
  | { type: 'stdin'; id: number; text: string }
  | { type: 'end-stdin'; id: number }
  | { type: 'stop-output'; id: number }
  | { type: 'pause-stdout' | 'resume-stdout'; id: number }
  | { type: 'ack'; id: number; bytes: number };
type FromThread =
  | { type: 'spawn'; id: number; pid: number }
  | { type: 'stdout'; id: number; chunk: Uint8Array }
  | { type: 'stdout-end'; id: number }
  | { type: 'stderr'; id: number; text: string }
  | { type: 'error'; id: number; message: string; code?: string; errno?: number; syscall?: string; path?: string; final: boolean }
  | { type: 'exit' | 'close'; id: number; code: number | null; signal: NodeJS.Signals | null };

// A self-contained ES module for the thread: no loader, no project imports, nothing to compile.
const threadSource = `
import { parentPort } from 'node:worker_threads';
import { spawn } from 'node:child_process';
const children = new Map();
const post = (m) => parentPort.postMessage(m);
// Stdout posted but not yet acknowledged by the main thread: past this the pipe is not read (a busy main thread
// must not collect a flooding process's output in its message queue).
const maxUnacked = 1024 * 1024;
const flow = (child) => (child.held || child.unacked > maxUnacked ? child.stdout.pause() : child.stdout.resume());
parentPort.on('message', (m) => {
  if (m.type === 'spawn') {
    const { id, request } = m;
    let child;
    try {
      child = spawn(request.file, request.args, { cwd: request.cwd, env: request.env, detached: request.detached, stdio: [request.stdin, 'pipe', 'pipe'] });
    } catch (e) {
      post({ type: 'error', id, message: e.message, code: e.code, final: true });
      return;
    }
    children.set(id, child);
    child.unacked = 0;
    child.held = false;
    if (child.pid !== undefined) post({ type: 'spawn', id, pid: child.pid });
    child.stdin?.on('error', () => undefined);
    child.stdout.on('data', (chunk) => {
      child.unacked += chunk.length;
      post({ type: 'stdout', id, chunk });
      flow(child);
    });
    let stdoutEnded = false;
    const stdoutEnd = () => { if (!stdoutEnded) { stdoutEnded = true; post({ type: 'stdout-end', id }); } };
    child.stdout.once('end', stdoutEnd);
    child.stdout.once('close', stdoutEnd);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (text) => post({ type: 'stderr', id, text }));
    // A process that never started (ENOENT) is finished with at its error; later events are dropped.
    child.once('error', (e) => post({ type: 'error', id, message: e.message, code: e.code, errno: e.errno, syscall: e.syscall, path: e.path, final: child.pid === undefined }));
    child.once('exit', (code, signal) => post({ type: 'exit', id, code, signal }));
    child.once('close', (code, signal) => { children.delete(id); post({ type: 'close', id, code, signal }); });
    return;
  }
  const child = children.get(m.id);
  if (!child) return;
  if (m.type === 'stdin' && child.stdin && !child.stdin.destroyed && child.stdin.writable) child.stdin.write(m.text);
  if (m.type === 'end-stdin' && child.stdin && !child.stdin.destroyed && !child.stdin.writableEnded) child.stdin.end();
  if (m.type === 'stop-output') { child.stdout.destroy(); child.stderr.destroy(); }
  if (m.type === 'pause-stdout' || m.type === 'resume-stdout') { child.held = m.type === 'pause-stdout'; flow(child); }
  if (m.type === 'ack') { child.unacked -= m.bytes; flow(child); }
});
`;

class PooledProcess extends EventEmitter implements SpawnedProcess {
  pid: number | undefined;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  private readonly stdout: ((chunk: Buffer) => void)[] = [];
  private readonly stdoutEnd: (() => void)[] = [];
  private readonly stderr: ((text: string) => void)[] = [];

  constructor(
    private readonly id: number,
    private readonly send: (message: ToThread) => void,
  ) {
    super();
  }
  onStdout(listener: (chunk: Buffer) => void) {
    this.stdout.push(listener);
  }
  onStdoutEnd(listener: () => void) {
    this.stdoutEnd.push(listener);
  }
  onStderr(listener: (text: string) => void) {
    this.stderr.push(listener);
  }
  pauseStdout() {
    this.send({ type: 'pause-stdout', id: this.id });
  }
  resumeStdout() {
    this.send({ type: 'resume-stdout', id: this.id });
  }
  writeStdin(text: string) {
    this.send({ type: 'stdin', id: this.id, text });
  }
  endStdin() {
    this.send({ type: 'end-stdin', id: this.id });
  }
  stopOutput() {
    this.send({ type: 'stop-output', id: this.id });
  }
  /** Applies one message from the thread; true when the process is finished with. */
  receive(m: FromThread): boolean {
    switch (m.type) {
      case 'spawn':
        this.pid = m.pid;
        this.emit('spawn');
        return false;
      case 'stdout': {
        const chunk = Buffer.from(m.chunk.buffer, m.chunk.byteOffset, m.chunk.byteLength);
        for (const l of this.stdout) l(chunk);
        this.send({ type: 'ack', id: this.id, bytes: chunk.length });
        return false;
      }
      case 'stdout-end':
        for (const l of this.stdoutEnd.splice(0)) l();
        return false;
      case 'stderr':
        for (const l of this.stderr) l(m.text);
        return false;
      case 'error':
        this.emit('error', Object.assign(new Error(m.message), { code: m.code, errno: m.errno, syscall: m.syscall, path: m.path }));
        return m.final;
      case 'exit':
        this.exitCode = m.code;
        this.signalCode = m.signal;
        this.emit('exit', m.code, m.signal);
        return false;
      case 'close':
        this.emit('close', m.code, m.signal);
        return true;
    }
  }
}

/**
 * A few worker threads that spawn processes and relay their pipes. Threads start on first use and keep the
 * process alive only while they have processes running; a process goes to the thread with the fewest running.
 */
export class SpawnPool {
  private readonly threads: { worker: Worker; running: Map<number, PooledProcess> }[] = [];
  private nextId = 1;

  constructor(private readonly size = 4) {}

  readonly spawner: Spawner = (request) => {
    const thread = this.pick();
    const id = this.nextId++;
    const proc = new PooledProcess(id, (m) => thread.worker.postMessage(m));
    thread.running.set(id, proc);
    thread.worker.ref(); // a running process keeps the pool (and so the process) alive, like a direct spawn
    thread.worker.postMessage({ type: 'spawn', id, request: { ...request, args: [...request.args] } } satisfies ToThread);
    return proc;
  };

  private pick() {
    if (this.threads.length < this.size) {
      // A data: URL is always loaded as an ES module, whatever --input-type the process runs with; the thread
      // needs none of the parent's Node flags (a TypeScript loader, for one).
      const worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(threadSource)}`), { execArgv: [] });
      const thread = { worker, running: new Map<number, PooledProcess>() };
      thread.worker.on('message', (m: FromThread) => {
        const proc = thread.running.get(m.id);
        if (proc?.receive(m)) {
          thread.running.delete(m.id);
          if (thread.running.size === 0) thread.worker.unref();
        }
      });
      thread.worker.on('error', (error) => {
        // A thread that dies takes its pipes with it: end its processes' turns with the reason.
        for (const proc of thread.running.values()) proc.receive({ type: 'error', id: 0, message: `spawn thread failed: ${error.message}`, final: false });
        for (const proc of thread.running.values()) proc.receive({ type: 'stdout-end', id: 0 });
        for (const proc of thread.running.values()) proc.receive({ type: 'close', id: 0, code: null, signal: null });
        thread.running.clear();
        this.threads.splice(this.threads.indexOf(thread), 1);
      });
      thread.worker.unref();
      this.threads.push(thread);
      return thread;
    }
    return this.threads.reduce((a, b) => (b.running.size < a.running.size ? b : a));
  }

  /** Stops the threads (their running processes lose their pipes; kill them first). */
  async close(): Promise<void> {
    await Promise.all(this.threads.splice(0).map((t) => t.worker.terminate()));
  }
}

let shared: SpawnPool | undefined;
/** The process-wide pool used by `thread` mode. */
export function sharedSpawnPool(): SpawnPool {
  shared ??= new SpawnPool();
  return shared;
}

/** The spawner for a mode. */
export function spawnerFor(mode: SpawnMode): Spawner {
  return mode === 'thread' ? sharedSpawnPool().spawner : directSpawner;
}
