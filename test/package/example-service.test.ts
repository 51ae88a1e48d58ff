/**
 * The packages as a service installs them: `npm pack` (which builds dist/) and `npm pack ./packages/client`, then
 * examples/service/worker installs the full tarball and examples/service the client's alone, and both run with plain
 * node — the worker (workflow bundle from the compiled package), the service (start, follow, cancel) and the
 * package's command line. Only the npm registry is needed.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { spawnNode, type NodeProcess } from '../support/cli.js';
import { packClientPackage } from '../support/client-package.js';
import { repoRoot } from '../support/worker.js';

const run = promisify(execFile);
const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-package-'));
const service = path.join(dir, 'service');
const workerDir = path.join(service, 'worker');
const taskQueue = `example-${path.basename(dir)}`;
const env = { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: taskQueue, PONDER_SECONDS: '60' };
let worker: NodeProcess | undefined;

/** `npm pack` of the main package (its `prepack` builds, so the tarball always carries a fresh dist/); the tarball's path. */
async function pack(): Promise<string> {
  const packed = await run('npm', ['pack', '--pack-destination', dir, '--json'], { cwd: repoRoot, maxBuffer: 64 * 1024 * 1024 });
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  return path.join(dir, filename);
}

/** Points `name` in `folder`'s package.json at `tarball` and installs. */
async function install(folder: string, name: string, tarball: string): Promise<void> {
  const manifest = JSON.parse(readFileSync(path.join(folder, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  manifest.dependencies[name] = `file:${tarball}`;
  writeFileSync(path.join(folder, 'package.json'), JSON.stringify(manifest, null, 2));
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: folder, maxBuffer: 64 * 1024 * 1024 });
}

beforeAll(async () => {
  const full = await pack();
  const client = await packClientPackage(dir);
  cpSync(path.join(repoRoot, 'examples', 'service'), service, { recursive: true, filter: (src) => !/node_modules|\.data/.test(src) });
  await install(workerDir, 'durable-harness', full);
  await install(service, '@durable-harness/client', client);
}, 15 * 60_000);

afterAll(async () => {
  if (worker && worker.exitCode === null) {
    worker.kill('SIGKILL');
    await worker.outcome;
  }
});

it('installs compiled JavaScript with types and exports, without TypeScript sources or tsx', () => {
  const installed = path.join(workerDir, 'node_modules', 'durable-harness');
  const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')) as { exports: Record<string, { types: string; default: string }> };
  for (const entry of ['.', './client', './worker', './adapters', './catalog', './workflows']) {
    expect(existsSync(path.join(installed, manifest.exports[entry]!.default)), entry).toBe(true);
    expect(existsSync(path.join(installed, manifest.exports[entry]!.types)), entry).toBe(true);
  }
  expect(existsSync(path.join(installed, 'src'))).toBe(false);
  expect(readdirSync(path.join(installed, 'dist', 'workflows')).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
  expect(existsSync(path.join(workerDir, 'node_modules', 'tsx'))).toBe(false);
});

it('the service side installs the client package alone: no worker, no full package', () => {
  const modules = path.join(service, 'node_modules');
  expect(existsSync(path.join(modules, '@durable-harness', 'client', 'dist', 'client', 'index.js'))).toBe(true);
  for (const name of ['durable-harness', '@temporalio/worker', '@temporalio/core-bridge', 'better-sqlite3', 'dockerode']) expect(existsSync(path.join(modules, name)), name).toBe(false);
});

it('its command line runs with plain node', async () => {
  const help = await spawnNode([path.join(workerDir, 'node_modules', '.bin', 'durable-harness'), '--help'], { cwd: workerDir, env }).outcome;
  expect(help.code).toBe(0);
  expect(help.stdout).toMatch(/^Exit codes:$/m);
  const list = await spawnNode([path.join(workerDir, 'node_modules', '.bin', 'durable-harness'), 'list', '--address', inject('temporalAddress')], { cwd: workerDir, env }).outcome;
  expect(list.code).toBe(0);
  expect(list.stdout).toMatch(/^RUN ID +STATUS/);
});

it('a service starts, follows and cancels runs with plain node against its own worker, its cancel signed with its own key', async () => {
  const cli = path.join(workerDir, 'node_modules', '.bin', 'durable-harness');
  const keygen = await spawnNode([cli, 'operator', 'keygen', '--name', 'example-service', '--out', '../service.key'], { cwd: workerDir, env }).outcome;
  expect(keygen.code).toBe(0);
  const { publicKey } = JSON.parse(readFileSync(path.join(service, 'service.key'), 'utf8')) as { publicKey: string };
  writeFileSync(path.join(workerDir, 'operators.yaml'), `operators:\n  - name: example-service\n    roles: [operate]\n    keys: ["${publicKey}"]\n`);
  worker = spawnNode(['worker.mjs'], { cwd: workerDir, env: { ...env, DURABLE_HARNESS_OPERATORS_FILE: 'operators.yaml' } });
  await expect.poll(() => worker!.stdoutSoFar() + worker!.stderrSoFar(), { timeout: 60_000 }).toMatch(/worker ready on task queue/);
  const { code, stdout, stderr } = await spawnNode(['service.mjs'], { cwd: service, env: { ...env, DURABLE_HARNESS_OPERATOR_KEY_FILE: 'service.key' } }).outcome;
  expect(stderr).toBe('');
  expect(stdout).toMatch(/^run-demo-\S+: (running|succeeded) · turn \d · /m);
  expect(stdout).toMatch(/^demo run succeeded after 2 turn\(s\), \$0\.\d+: /m);
  expect(stdout).toMatch(/^run-ponderer-\S+: running · turn 1 · /m);
  expect(stdout).toMatch(/^ponder run cancelled: the service no longer needs it \(by operator:example-service\)$/m);
  expect(code).toBe(0);
  worker.kill('SIGTERM');
  const stopped = await worker.outcome;
  expect(stopped.code).toBe(0);
  expect(stopped.stdout).toMatch(/worker stopped\n$/);
});
