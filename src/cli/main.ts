#!/usr/bin/env node
/** `durable-harness`: run the embedded dev stack, a worker, and start, follow and operate agent runs. */
import { exitFor, main } from './commands.js';

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    const { code, message } = exitFor(e);
    process.stderr.write(`durable-harness: ${message}\n`);
    process.exit(code);
  },
);
