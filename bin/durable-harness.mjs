#!/usr/bin/env node
// Runs the TypeScript command line directly (no build step): tsx compiles on load.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
