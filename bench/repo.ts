/**
 * A run on a repository (issue 24): what preparing the workspace costs with a fresh clone of the remote against the
 * per-host mirror cache (src/git/repository.ts: `mirrorOf` fetches into the mirror, `checkout` borrows its objects).
 * A generated repository of `files` files in a local bare remote reached as `file://` (git then builds and sends a
 * pack, as from a server; a plain path would hard-link the objects); each iteration, interleaved: a plain `git clone`
 * into a new workspace, and a cached checkout (mirror update + run git directory + work tree). Medians.
 * Run alone: `npx tsx bench/repo.ts [iterations] [files]`; in `npm run bench -- repo`.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { checkout, git, mirrorOf } from '../src/git/repository.js';
import { median } from './stats.js';

export interface RepoResult {
  readonly files: number;
  readonly iterations: number;
  readonly firstMirrorMs: number;
  readonly cloneMs: number;
  readonly cachedMs: number;
  /** The longest the process's event loop was held while cached checkouts ran (a shared worker's neighbours wait that long). */
  readonly maxLoopDelayMs: number;
}

export async function benchRepo(iterations = 5, files = 3000): Promise<RepoResult> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-repo-'));
  const run = (cwd: string, ...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=b', '-c', 'user.email=b@b', '-c', 'init.defaultBranch=main', ...args], { cwd, env: { PATH: process.env.PATH, HOME: root, GIT_CONFIG_NOSYSTEM: '1' }, stdio: 'ignore' });
  try {
    const seed = path.join(root, 'seed');
    mkdirSync(seed);
    run(seed, 'init', '-q');
    for (let i = 0; i < files; i++) {
      const dir = path.join(seed, `pkg${i % 50}`, `mod${i % 7}`);
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, `file${i}.ts`), `export const value${i} = ${i};\n${'// filler line\n'.repeat(40)}`);
    }
    run(seed, 'add', '-A');
    run(seed, 'commit', '-q', '-m', 'generated');
    const bare = path.join(root, 'remote.git');
    run(root, 'clone', '-q', '--bare', seed, bare);
    // file:// makes git transfer packs as it would from a server (a plain path would hard-link the objects).
    const remote = `file://${bare}`;
    const mirrors = path.join(root, 'mirrors');
    let started = performance.now();
    await mirrorOf(mirrors, remote);
    const firstMirrorMs = performance.now() - started;
    const clone: number[] = [];
    const cached: number[] = [];
    let maxLoopDelayMs = 0;
    for (let i = 0; i < iterations; i++) {
      const steps = [
        async () => {
          started = performance.now();
          await git(['clone', '--quiet', '--', remote, path.join(root, `clone-${i}`)]);
          clone.push(performance.now() - started);
        },
        async () => {
          started = performance.now();
          const loop = monitorEventLoopDelay({ resolution: 5 });
          loop.enable();
          const mirror = await mirrorOf(mirrors, remote);
          await checkout({ mirror: mirror.path, ref: 'main', branch: `dh/run-${i}`, gitDir: path.join(root, 'runtime', `run-${i}.git`), workTree: path.join(root, `cached-${i}`) });
          loop.disable();
          maxLoopDelayMs = Math.max(maxLoopDelayMs, loop.max / 1e6);
          cached.push(performance.now() - started);
        },
      ];
      for (let k = 0; k < steps.length; k++) await steps[(i + k) % steps.length]!();
    }
    return { files, iterations, firstMirrorMs, cloneMs: median(clone), cachedMs: median(cached), maxLoopDelayMs };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

export function repoLines(r: RepoResult): string[] {
  const ms = (v: number) => `${v.toFixed(0)} ms`;
  return [
    `a generated repository of ${r.files} files in a local bare remote (file://), median of ${r.iterations} (interleaved):`,
    `  plain git clone into a new workspace:                        ${ms(r.cloneMs)}`,
    `  from the per-host mirror (update + run git dir + work tree): ${ms(r.cachedMs)}  (×${(r.cloneMs / r.cachedMs).toFixed(2)} faster)`,
    `  the mirror's first clone (once per host and repository):     ${ms(r.firstMirrorMs)}`,
    `  worker event loop held at most, during cached checkouts:      ${ms(r.maxLoopDelayMs)}  (git runs in child processes)`,
  ];
}

export function printRepo(r: RepoResult): void {
  for (const line of repoLines(r)) console.log(line);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  printRepo(await benchRepo(Number(process.argv[2] ?? 5), Number(process.argv[3] ?? 3000)));
}
