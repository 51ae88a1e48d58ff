/**
 * The command as the package and the worker image run it: compiled JavaScript, plain `node dist/cli/main.js`, the
 * workflow code bundled ahead of time (docker/bundle-workflows.mjs). The package (what package.json `files` ships) is copied to a scratch directory and
 * built there with `npm run build`, so nothing is built into the checkout. Argument handling is tested in-process
 * (cli.test.ts); this is only whether the built JavaScript runs.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { findTemporalCli } from '../../src/temporal/cli-path.js';
import { freePort } from '../../src/temporal/dev-server.js';
import { spawnNode } from '../support/cli.js';
import { repoRoot } from '../support/worker.js';

const pkg = mkdtempSync(path.join(os.tmpdir(), 'dh-built-'));
const main = path.join(pkg, 'dist', 'cli', 'main.js');
/** What the package's bin printed for --version in the checkout-like copy: with the build current, then stale. */
const binRan = { fresh: '', stale: '' };
const built = (args: string[], env: NodeJS.ProcessEnv = {}) => spawnNode([main, ...args], { cwd: pkg, env: { PATH: process.env.PATH, HOME: process.env.HOME, CI: 'true', ...env } }).outcome;

beforeAll(() => {
  for (const entry of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'bin', 'config', 'harnesses', 'native', 'docker']) cpSync(path.join(repoRoot, entry), path.join(pkg, entry), { recursive: true });
  symlinkSync(path.join(repoRoot, 'node_modules'), path.join(pkg, 'node_modules'));
  execFileSync('npm', ['run', 'build'], { cwd: pkg, stdio: 'pipe' });
  execFileSync(process.execPath, ['docker/bundle-workflows.mjs'], { cwd: pkg, stdio: 'pipe' });
  // A checkout's bin runs the build while it is newer than every source, the sources once one changed: a build
  // that says so tells them apart.
  const helpJs = path.join(pkg, 'dist', 'cli', 'help.js');
  const original = readFileSync(helpJs, 'utf8');
  appendFileSync(helpJs, "\nprocess.stderr.write('from dist\\n');\n");
  const viaBin = (): string => {
    const r = spawnSync(process.execPath, [path.join(pkg, 'bin', 'durable-harness.mjs'), '--version'], { cwd: pkg, encoding: 'utf8' });
    return `${r.status} ${r.stdout.trim()} ${r.stderr.trim()}`.trim();
  };
  binRan.fresh = viaBin();
  const later = new Date(Date.now() + 5_000);
  utimesSync(path.join(pkg, 'src', 'cli', 'usage.ts'), later, later);
  binRan.stale = viaBin();
  writeFileSync(helpJs, original);
  // What runs must be the build, not the sources beside it.
  rmSync(path.join(pkg, 'src'), { recursive: true });
}, 300_000);

afterAll(() => rmSync(pkg, { recursive: true, force: true }));

it("in a checkout, bin runs the build while it is newer than every source, the sources (tsx) once one changed", () => {
  const { version } = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string };
  expect(binRan.fresh).toBe(`0 durable-harness ${version} from dist`);
  expect(binRan.stale).toBe(`0 durable-harness ${version}`);
});

it('--help prints the usage and exits 0', async () => {
  const result = await built(['--help']);
  expect(result.stderr).toBe('');
  expect(result.stdout).toMatch(/^durable-harness — run coding-agent CLIs as durable Temporal workflows/);
  expect(result.code).toBe(0);
});

it('an unknown command exits 2 (usage) and says which', async () => {
  const result = await built(['frobnicate']);
  expect(result.code).toBe(2);
  expect(result.stderr).toMatch(/unknown command "frobnicate"/);
});

it('dev --demo runs the demo agent to success on the workflow code bundled ahead of time', async () => {
  const [port, uiPort] = [await freePort(), await freePort()];
  const data = path.join(pkg, 'data');
  const result = await built(['dev', '--demo', '--port', String(port), '--ui-port', String(uiPort), '--data', data], { TEMPORAL_CLI_PATH: findTemporalCli()!.path });
  expect(result.stderr).toBe('');
  expect(result.stdout).toContain(`workflow code: bundled ahead of time (${path.join(pkg, 'dist', 'workflow-bundles', 'plain.js')})`);
  expect(result.stdout).toMatch(/^succeeded after 2 turn\(s\)/m);
  expect(result.code).toBe(0);
  expect(existsSync(path.join(data, 'temporal.db'))).toBe(true);
}, 120_000);
