/** The `durable-harness` command line: every command runs in-process through `runCommand` (main.ts only exits with its code). */
export { runCommand } from './commands.js';
export { ExitCodes, exitCodeTable, type ExitCode } from './exit-codes.js';
