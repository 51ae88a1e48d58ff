/**
 * Where the command's lines go: the process's stdout and stderr, or, for a command run in-process (tests, an
 * embedding program), the caller's own writers — per call, so two commands running at once never mix their output.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

const current = new AsyncLocalStorage<CliIo>();

/** Writes a line to the command's stdout. */
export function out(line: string): void {
  const io = current.getStore();
  if (io) io.out(`${line}\n`);
  else process.stdout.write(`${line}\n`);
}

/** Writes `text` to the command's stdout as it is (no newline added: a patch, bytes a pipe takes). */
export function outRaw(text: string): void {
  const io = current.getStore();
  if (io) io.out(text);
  else process.stdout.write(text);
}

/** Writes a line to the command's stderr. */
export function err(line: string): void {
  const io = current.getStore();
  if (io) io.err(`${line}\n`);
  else process.stderr.write(`${line}\n`);
}

/** Runs `fn` with its `out`/`err` lines going to `io`. */
export function withIo<T>(io: CliIo, fn: () => Promise<T>): Promise<T> {
  return current.run(io, fn);
}
