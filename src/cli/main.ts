#!/usr/bin/env node
/** `durable-harness`: run the embedded dev stack, a worker, and start, follow and operate agent runs. */
import { quickAnswer } from './help.js';

const argv = process.argv.slice(2);
// Help, version and completion from the usage text alone: the SDK and the rest load only for a real command.
const quick = quickAnswer(argv);
if (quick) {
  if (quick.out !== undefined) process.stdout.write(`${quick.out}\n`);
  if (quick.err !== undefined) process.stderr.write(`${quick.err}\n`);
  process.exit(quick.code);
}
const { runCommand } = await import('./commands.js');
process.exit(await runCommand(argv));
