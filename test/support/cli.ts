/** Runs the `durable-harness` command (bin/, as users do) as a child process and collects what it prints. */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { runCommand } from '../../src/cli/commands.js';
import { withIo } from '../../src/cli/io.js';
import { repoRoot } from './worker.js';

export const cliBin = path.join(repoRoot, 'bin', 'durable-harness.mjs');

export interface CliOutcome {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  /** From spawn to exit. */
  readonly ms: number;
}

export type NodeProcess = ChildProcess & {
  readonly outcome: Promise<CliOutcome>;
  stdoutSoFar(): string;
  stderrSoFar(): string;
};
export type CliProcess = NodeProcess;

/** Starts `node ARGS` and collects its output. */
export function spawnNode(args: readonly string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): NodeProcess {
  const started = Date.now();
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: options.env ?? process.env, cwd: options.cwd ?? repoRoot });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const outcome = new Promise<CliOutcome>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal, stdout, stderr, ms: Date.now() - started })),
  );
  return Object.assign(child, { outcome, stdoutSoFar: () => stdout, stderrSoFar: () => stderr });
}

/** Starts `durable-harness ARGS` with `node` (no tsx on the command line: the bin must work with plain node). */
export function spawnCli(args: readonly string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): CliProcess {
  return spawnNode([cliBin, ...args], options);
}

/**
 * Runs `durable-harness ARGS` in this process (src/cli/commands.ts `runCommand`, its output captured per call) —
 * what a spawned command would print and exit with, without a process start each time. Commands that install a
 * runtime or handle signals (`dev`, `worker`, Ctrl-C) and those that need another environment still go through
 * `spawnCli`.
 */
export async function runCli(args: readonly string[]): Promise<CliOutcome> {
  const started = Date.now();
  let stdout = '';
  let stderr = '';
  const code = await withIo({ out: (text) => (stdout += text), err: (text) => (stderr += text) }, () => runCommand([...args]));
  return { code, signal: null, stdout, stderr, ms: Date.now() - started };
}
