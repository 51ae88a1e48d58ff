/** A SandboxExecutor that replays canned stdout lines instead of running anything. */
import { LineQueue } from '../../src/sandbox/line-queue.js';
import type { ExecProcess, ExecRequest, SandboxExecutor } from '../../src/sandbox/types.js';

export interface FakeRun {
  readonly lines?: readonly string[];
  readonly exitCode?: number | null;
  readonly stderr?: string;
  /** Keep running after the lines until killed (for timeout/abort tests). */
  readonly hang?: boolean;
  /** Lines it writes as it is killed (a harness that reports its last usage on SIGTERM). */
  readonly onKill?: readonly string[];
}

export class FakeProcess implements ExecProcess {
  /** stdout: what the test pushes; `lines` and `output` read it (like a real process's). */
  readonly queue = new LineQueue();
  readonly lines = this.queue.text();
  readonly output = this.queue;
  readonly exit: Promise<{ code: number | null; signal: string | null }>;
  readonly written: string[] = [];
  killCount = 0;
  private resolveExit!: (exit: { code: number | null; signal: string | null }) => void;

  constructor(private readonly run: FakeRun) {
    this.exit = new Promise((resolve) => {
      this.resolveExit = resolve;
    });
    for (const line of run.lines ?? []) this.queue.push(`${line}\n`);
    if (!run.hang) this.finish({ code: run.exitCode ?? 0, signal: null });
  }

  stderrTail(): string {
    return this.run.stderr ?? '';
  }

  write(text: string): void {
    this.written.push(text);
  }

  async kill(): Promise<void> {
    this.killCount += 1;
    if (this.killCount === 1) for (const line of this.run.onKill ?? []) this.queue.push(`${line}\n`);
    this.finish({ code: null, signal: 'SIGTERM' });
    await this.exit;
  }

  private finish(exit: { code: number | null; signal: string | null }): void {
    this.queue.end();
    this.resolveExit(exit);
  }
}

export class FakeExecutor implements SandboxExecutor {
  readonly requests: ExecRequest[] = [];
  readonly processes: FakeProcess[] = [];
  constructor(private readonly runs: FakeRun[]) {}

  exec(request: ExecRequest): FakeProcess {
    this.requests.push(request);
    const run = this.runs.shift();
    if (!run) throw new Error('FakeExecutor: no canned run left for this exec');
    const proc = new FakeProcess(run);
    this.processes.push(proc);
    return proc;
  }
}

export const line = (value: unknown): string => JSON.stringify(value);
