/**
 * `npm pack` of the client package (packages/client) from a scratch copy of what its build reads, so its dist/ is
 * written there and not into the checkout: two test files can pack it at once without one deleting the other's build.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from './worker.js';

const run = promisify(execFile);

/** Packs @durable-harness/client (its `prepack` builds it) into `destination`; the tarball's path. */
export async function packClientPackage(destination: string): Promise<string> {
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'dh-client-src-'));
  try {
    for (const entry of ['package.json', 'tsconfig.json', 'src']) cpSync(path.join(repoRoot, entry), path.join(scratch, entry), { recursive: true });
    cpSync(path.join(repoRoot, 'packages', 'client'), path.join(scratch, 'packages', 'client'), { recursive: true, filter: (src) => !/[/\\](dist|node_modules)$/.test(src) });
    symlinkSync(path.join(repoRoot, 'node_modules'), path.join(scratch, 'node_modules'));
    const packed = await run('npm', ['pack', path.join(scratch, 'packages', 'client'), '--pack-destination', destination, '--json'], { cwd: scratch, maxBuffer: 64 * 1024 * 1024 });
    const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
    return path.join(destination, filename);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
