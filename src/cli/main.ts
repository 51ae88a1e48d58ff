#!/usr/bin/env node
/** `durable-harness`: run the embedded dev stack, a worker, and start, follow and operate agent runs. */
import { runCommand } from './commands.js';

process.exit(await runCommand(process.argv.slice(2)));
