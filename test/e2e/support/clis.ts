/** The pinned CLIs of the live tests (installed by `npm ci` in test/e2e/clis) and the fake vendor claude and codex talk to. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import type { ExecProcess, ExecRequest, SandboxExecutor } from '../../../src/sandbox/types.js';
import { anthropicMessages } from '../fake-vendor/anthropic-messages.js';
import { openaiResponses } from '../fake-vendor/openai-responses.js';
import { startFakeVendor, type FakeVendor, type ProtocolHandler } from '../fake-vendor/server.js';

const repoRoot = path.resolve(import.meta.dirname, '../../..');

/** The pinned binary `name` (claude, codex, gemini, opencode, pi). */
export function cliBinary(name: string): string {
  return path.join(repoRoot, 'test/e2e/clis/node_modules/.bin', name);
}

/** Fails (never skips) when a pinned binary is missing. */
export function expectInstalled(executable: string): void {
  expect(existsSync(executable), `${executable} missing: run npm ci in test/e2e/clis`).toBe(true);
}

const vendorHandlers = {
  claude: { '/v1/messages': anthropicMessages },
  codex: { '/v1/responses': openaiResponses },
} satisfies Record<string, Record<string, ProtocolHandler>>;

/** A fake vendor on 127.0.0.1 answering the API of each named CLI (Anthropic Messages, OpenAI Responses). */
export function startVendorFor(...clis: (keyof typeof vendorHandlers)[]): Promise<FakeVendor> {
  return startFakeVendor({ handlers: Object.fromEntries(clis.flatMap((cli) => Object.entries(vendorHandlers[cli]))) });
}

/** An executor that remembers the requests it got and the processes it started (for the process-tree checks). */
export class RecordingExecutor implements SandboxExecutor {
  readonly processes: ExecProcess[] = [];
  readonly requests: ExecRequest[] = [];
  constructor(private readonly inner: SandboxExecutor) {}
  exec(request: ExecRequest): ExecProcess {
    this.requests.push(request);
    const proc = this.inner.exec(request);
    this.processes.push(proc);
    return proc;
  }
  /** The pids of the started processes that have one. */
  get pids(): number[] {
    return this.processes.flatMap((proc) => (proc.pid === undefined ? [] : [proc.pid]));
  }
}
