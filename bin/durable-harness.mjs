#!/usr/bin/env node
// The durable-harness command. An installed package runs the compiled JavaScript in dist/ with plain node; a
// checkout (src/ present) runs the TypeScript sources through tsx, so development needs no build step.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  await import('../dist/cli/main.js');
}
