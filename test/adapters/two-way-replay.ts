/**
 * Replays a recorded two-way conversation (test/fixtures/<cli>/two-way/<case>.*) through a fake process that
 * behaves like the real CLI did: it prints its recorded lines, but before each line it waits until the adapter
 * has written what the real CLI had received by then. So an adapter that never answers a permission request
 * stalls here exactly as it would against the binary.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LineQueue } from '../../src/sandbox/line-queue.js';
import type { ExecProcess, ExecRequest, SandboxExecutor } from '../../src/sandbox/types.js';

const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures');

export interface TwoWayFixture {
  readonly lines: string[];
  readonly writes: { after: number; line: string }[];
  readonly meta: {
    workspace: string;
    argv: string[];
    exitCode: number | null;
    stderrTail: string;
    gate: { asked: Record<string, unknown>[]; answers: Record<string, unknown>[] };
    events: Record<string, unknown>[];
    files: Record<string, boolean>;
    vendor: { posts: number; unexpected: number; remaining: number };
  };
}

export function twoWayFixture(cli: string, name: string): TwoWayFixture {
  const dir = path.join(fixtures, cli, 'two-way');
  const read = (file: string) => readFileSync(path.join(dir, file), 'utf8');
  return {
    lines: read(`${name}.jsonl`).split('\n').filter((l) => l !== ''),
    writes: read(`${name}.stdin.jsonl`).split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as { after: number; line: string }),
    meta: JSON.parse(read(`${name}.meta.json`)) as TwoWayFixture['meta'],
  };
}

export class ReplayProcess implements ExecProcess {
  /** stdout: what the test pushes; `lines` and `output` read it (like a real process's). */
  readonly queue = new LineQueue();
  readonly lines = this.queue.text();
  readonly output = this.queue;
  readonly exit: Promise<{ code: number | null; signal: string | null }>;
  /** Every line the adapter wrote (the initial stdin included), split into lines. */
  readonly written: string[] = [];
  private resolveExit!: (exit: { code: number | null; signal: string | null }) => void;
  private wake: (() => void) | undefined;
  private stdinClosed = false;
  private done = false;

  constructor(
    private readonly fixture: TwoWayFixture,
    request: ExecRequest,
  ) {
    this.exit = new Promise((resolve) => {
      this.resolveExit = resolve;
    });
    if (request.stdin !== undefined) this.record(request.stdin);
    void this.play();
  }

  stderrTail(): string {
    return this.fixture.meta.stderrTail;
  }

  write(text: string): void {
    this.record(text);
  }

  closeStdin(): void {
    this.stdinClosed = true;
    this.wake?.();
  }

  async kill(): Promise<void> {
    this.finish({ code: null, signal: 'SIGTERM' });
    await this.exit;
  }

  private record(text: string): void {
    for (const line of text.split('\n')) if (line !== '') this.written.push(line);
    this.wake?.();
  }

  private async play(): Promise<void> {
    const { lines, writes } = this.fixture;
    for (let i = 0; i < lines.length && !this.done; i++) {
      const needed = writes.filter((w) => w.after <= i).length;
      while (this.written.length < needed && !this.done) await new Promise<void>((resolve) => (this.wake = resolve));
      if (this.done) return;
      this.queue.push(`${lines[i]}\n`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    // Like the real servers: they exit once their stdin is closed; a process that ended by itself (no terminal
    // line for the adapter to close stdin on) exits shortly after its last line.
    const idle = setTimeout(() => this.closeStdin(), 200);
    while (!this.stdinClosed && !this.done) await new Promise<void>((resolve) => (this.wake = resolve));
    clearTimeout(idle);
    const code = this.fixture.meta.exitCode;
    this.finish(code === null ? { code: null, signal: 'SIGTERM' } : { code, signal: null });
  }

  private finish(exit: { code: number | null; signal: string | null }): void {
    if (this.done) return;
    this.done = true;
    this.wake?.();
    this.queue.end();
    this.resolveExit(exit);
  }
}

export class ReplayExecutor implements SandboxExecutor {
  readonly requests: ExecRequest[] = [];
  readonly processes: ReplayProcess[] = [];
  constructor(private readonly fixtures: TwoWayFixture[]) {}

  exec(request: ExecRequest): ReplayProcess {
    this.requests.push(request);
    const fixture = this.fixtures.shift();
    if (!fixture) throw new Error('ReplayExecutor: no recorded conversation left for this exec');
    const proc = new ReplayProcess(fixture, request);
    this.processes.push(proc);
    return proc;
  }
}
