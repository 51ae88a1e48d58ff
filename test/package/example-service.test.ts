/**
 * The package as a service installs it: `npm pack` (which builds dist/), then examples/service installs the tarball
 * and runs with plain node — its worker (workflow bundle from the compiled package), its service (start, follow,
 * cancel) and the package's command line. Only the npm registry is needed.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { spawnNode, type NodeProcess } from '../support/cli.js';
import { repoRoot } from '../support/worker.js';

const run = promisify(execFile);
const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-package-'));
const service = path.join(dir, 'service');
const taskQueue = `example-${path.basename(dir)}`;
const env = { ...process.env, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: taskQueue, PONDER_SECONDS: '60' };
let worker: NodeProcess | undefined;

beforeAll(async () => {
  // `npm pack` runs `prepack` (the build), so the tarball always carries a fresh dist/.
  const packed = await run('npm', ['pack', '--pack-destination', dir, '--json'], { cwd: repoRoot, maxBuffer: 64 * 1024 * 1024 });
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  const tarball = path.join(dir, filename);
  cpSync(path.join(repoRoot, 'examples', 'service'), service, { recursive: true, filter: (src) => !/node_modules|\.data/.test(src) });
  const manifest = JSON.parse(readFileSync(path.join(service, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  manifest.dependencies['durable-harness'] = `file:${tarball}`;
  writeFileSync(path.join(service, 'package.json'), JSON.stringify(manifest, null, 2));
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: service, maxBuffer: 64 * 1024 * 1024 });
}, 15 * 60_000);

afterAll(async () => {
  if (worker && worker.exitCode === null) {
    worker.kill('SIGKILL');
    await worker.outcome;
  }
});

it('installs compiled JavaScript with types and exports, without TypeScript sources or tsx', () => {
  const installed = path.join(service, 'node_modules', 'durable-harness');
  const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')) as { exports: Record<string, { types: string; default: string }> };
  for (const entry of ['.', './client', './worker', './adapters', './catalog', './workflows']) {
    expect(existsSync(path.join(installed, manifest.exports[entry]!.default)), entry).toBe(true);
    expect(existsSync(path.join(installed, manifest.exports[entry]!.types)), entry).toBe(true);
  }
  expect(existsSync(path.join(installed, 'src'))).toBe(false);
  expect(readdirSync(path.join(installed, 'dist', 'workflows')).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
  expect(existsSync(path.join(service, 'node_modules', 'tsx'))).toBe(false);
});

it('its command line runs with plain node', async () => {
  const help = await spawnNode([path.join(service, 'node_modules', '.bin', 'durable-harness'), '--help'], { cwd: service, env }).outcome;
  expect(help.code).toBe(0);
  expect(help.stdout).toMatch(/^Exit codes:$/m);
  const list = await spawnNode([path.join(service, 'node_modules', '.bin', 'durable-harness'), 'list', '--address', inject('temporalAddress')], { cwd: service, env }).outcome;
  expect(list.code).toBe(0);
  expect(list.stdout).toMatch(/^RUN ID +STATUS/);
});

it('a service starts, follows and cancels runs with plain node against its own worker, its cancel signed with its own key', async () => {
  const cli = path.join(service, 'node_modules', '.bin', 'durable-harness');
  const keygen = await spawnNode([cli, 'operator', 'keygen', '--name', 'example-service', '--out', 'service.key'], { cwd: service, env }).outcome;
  expect(keygen.code).toBe(0);
  const { publicKey } = JSON.parse(readFileSync(path.join(service, 'service.key'), 'utf8')) as { publicKey: string };
  writeFileSync(path.join(service, 'operators.yaml'), `operators:\n  - name: example-service\n    roles: [operate]\n    keys: ["${publicKey}"]\n`);
  const signedEnv = { ...env, DURABLE_HARNESS_OPERATORS_FILE: 'operators.yaml', DURABLE_HARNESS_OPERATOR_KEY_FILE: 'service.key' };
  worker = spawnNode(['worker.mjs'], { cwd: service, env: signedEnv });
  await expect.poll(() => worker!.stdoutSoFar() + worker!.stderrSoFar(), { timeout: 60_000 }).toMatch(/worker ready on task queue/);
  const { code, stdout, stderr } = await spawnNode(['service.mjs'], { cwd: service, env: signedEnv }).outcome;
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
