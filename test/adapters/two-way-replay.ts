/**
 * Replays a recorded two-way conversation (test/fixtures/<cli>/two-way/<case>.*) through a fake process that
 * behaves like the real CLI did: it prints its recorded lines, but before each line it waits until the adapter
 * has written what the real CLI had received by then. So an adapter that never answers a permission request
 * stalls here exactly as it would against the binary.
 *
 * Request ids are the client library's business (the ACP SDK numbers from 0, the recording's client from 1): a
 * recorded response is given the id of the adapter's request it answers, matched by method and order, and
 * `byMethodOrder` names our requests the same way on both sides before they are compared.
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
      this.queue.push(`${this.answering(lines[i]!)}\n`);
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

  /** A recorded response with the id of the adapter's request it answers (the same method, the same occurrence). */
  private answering(line: string): string {
    const message = jsonObject(line);
    if (!message || 'method' in message || message.id === undefined || message.id === null) return line;
    const recorded = requests(this.fixture.writes.map((w) => w.line));
    const asked = recorded.find((r) => r.id === message.id);
    if (!asked) return line;
    const ours = requests(this.written).find((r) => r.method === asked.method && r.occurrence === asked.occurrence);
    if (!ours || ours.id === message.id) return line;
    return JSON.stringify({ ...message, id: ours.id });
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

interface SentRequest {
  readonly id: unknown;
  readonly method: string;
  /** 0 for the first request of its method, 1 for the second… */
  readonly occurrence: number;
}

/** The JSON-RPC requests among stdin lines, in order. */
function requests(lines: readonly string[]): SentRequest[] {
  const seen = new Map<string, number>();
  const out: SentRequest[] = [];
  for (const line of lines) {
    const message = jsonObject(line);
    if (!message || typeof message.method !== 'string' || message.id === undefined || message.id === null) continue;
    const occurrence = seen.get(message.method) ?? 0;
    seen.set(message.method, occurrence + 1);
    out.push({ id: message.id, method: message.method, occurrence });
  }
  return out;
}

/** Stdin lines with our JSON-RPC request ids named by method and order (`"session/new#0"`), for comparing. */
export function byMethodOrder(lines: readonly string[]): string[] {
  const seen = new Map<string, number>();
  return lines.map((line) => {
    const message = jsonObject(line);
    if (!message || typeof message.method !== 'string' || message.id === undefined || message.id === null) return line;
    const occurrence = seen.get(message.method) ?? 0;
    seen.set(message.method, occurrence + 1);
    return JSON.stringify({ ...message, id: `${message.method}#${occurrence}` });
  });
}

function jsonObject(line: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(line);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
