#!/usr/bin/env node
// The durable-harness command. An installed package runs the compiled JavaScript in dist/ with plain node. A
// checkout (src/ present) runs dist/ too when `npm run build` finished after the last change under src/ (its stamp,
// dist/.built, is newer than every source file: ~10 ms to check, against ~1.7 s of CPU to transpile per command);
// otherwise the TypeScript sources through tsx, so development needs no build step.
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Whether the checkout's dist/ was built from the sources as they are now. */
function builtIsCurrent() {
  let built;
  try {
    built = statSync(path.join(root, 'dist', '.built')).mtimeMs;
  } catch {
    return false;
  }
  const src = path.join(root, 'src');
  for (const entry of readdirSync(src, { recursive: true, withFileTypes: true })) {
    const at = path.join(entry.parentPath ?? entry.path, entry.name);
    if (statSync(at).mtimeMs > built) return false;
  }
  return statSync(src).mtimeMs <= built;
}

let checkout = false;
try {
  checkout = statSync(path.join(root, 'src', 'cli', 'main.ts')).isFile();
} catch {
  checkout = false;
}
if (checkout && !builtIsCurrent()) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(new URL('../src/cli/main.ts', import.meta.url).href);
} else {
  await import('../dist/cli/main.js');
}
