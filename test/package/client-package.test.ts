/**
 * The client package as a service installs it: `npm pack` of packages/client (its build runs first, in a scratch
 * copy of the sources: test/support/client-package.ts), installed into an empty directory from the registry with only
 * its declared dependencies — once with an empty npm cache (every tarball fetched), once with that cache warm — then a
 * service script with plain `node` starts, follows, answers and reads a run against a real worker. Prints the
 * install's time and size.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { spawnNode } from '../support/cli.js';
import { packClientPackage } from '../support/client-package.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const run = promisify(execFile);
const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-client-package-'));
const cache = path.join(dir, 'npm-cache');
/** Packages only a worker needs: none may be in a client-only install. */
const workerOnly = ['@temporalio/worker', '@temporalio/core-bridge', '@temporalio/testing', 'better-sqlite3', 'pg', 'dockerode', '@swc/core'];
const book = scriptBook();
let worker: TestWorker;
let tarball: string;
const installs: Record<'cold' | 'warm', { seconds: number; megabytes: number; app: string }> = {} as never;

/** A service's directory: the packed client, nothing else (connectAgentClient connects it). */
function serviceDir(name: string): string {
  const app = path.join(dir, name);
  mkdirSync(app);
  const manifest = { name: `service-${name}`, private: true, type: 'module', dependencies: { '@durable-harness/client': `file:${tarball}` } };
  writeFileSync(path.join(app, 'package.json'), JSON.stringify(manifest, null, 2));
  return app;
}

async function install(name: 'cold' | 'warm'): Promise<void> {
  const app = serviceDir(name);
  const started = performance.now();
  await run('npm', ['install', '--no-audit', '--no-fund', '--cache', cache, ...(name === 'warm' ? ['--prefer-offline'] : [])], { cwd: app, maxBuffer: 64 * 1024 * 1024 });
  const seconds = (performance.now() - started) / 1000;
  const { stdout } = await run('du', ['-sk', path.join(app, 'node_modules')]);
  installs[name] = { seconds, megabytes: Number(stdout.split('\t')[0]) / 1024, app };
}

/** Every package name installed under `app`, nested ones too. */
function installedPackages(app: string): Set<string> {
  const names = new Set<string>();
  const walk = (modules: string) => {
    if (!existsSync(modules)) return;
    for (const entry of readdirSync(modules)) {
      if (entry.startsWith('.')) continue;
      const dirs = entry.startsWith('@') ? readdirSync(path.join(modules, entry)).map((scoped) => `${entry}/${scoped}`) : [entry];
      for (const name of dirs) {
        names.add(name);
        walk(path.join(modules, name, 'node_modules'));
      }
    }
  };
  walk(path.join(app, 'node_modules'));
  return names;
}

beforeAll(async () => {
  tarball = await packClientPackage(dir);
  // The cold install first (its cache empty), then the warm one from the same cache.
  await install('cold');
  await install('warm');
  const figure = (k: 'cold' | 'warm') => `${installs[k].seconds.toFixed(1)} s, ${installs[k].megabytes.toFixed(1)} MB`;
  console.log(`@durable-harness/client install: cold (empty npm cache) ${figure('cold')}; warm ${figure('warm')}`);
  worker = await startTestWorker({ catalog: scriptedCatalog(book) });
}, 10 * 60_000);

afterAll(async () => {
  await worker?.close();
});

it('installs with no worker package in the tree, in a fraction of the full package', () => {
  for (const { app, megabytes } of Object.values(installs)) {
    const names = installedPackages(app);
    expect(names).toContain('@durable-harness/client');
    expect(names).toContain('@temporalio/client');
    expect(workerOnly.filter((name) => names.has(name))).toEqual([]);
    expect([...names].filter((name) => name.startsWith('@swc/'))).toEqual([]);
    // The full package's install is 341-354 MB; the client's is @temporalio/client's own tree (gRPC, protobufs) and zod.
    expect(megabytes).toBeLessThan(60);
  }
  const installed = path.join(installs.cold.app, 'node_modules', '@durable-harness', 'client');
  const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')) as { exports: { '.': { types: string; default: string } } };
  expect(existsSync(path.join(installed, manifest.exports['.'].default))).toBe(true);
  expect(existsSync(path.join(installed, manifest.exports['.'].types))).toBe(true);
  expect(existsSync(path.join(installed, 'src'))).toBe(false);
});

it('its types check in a TypeScript service, declarations included', async () => {
  const app = installs.warm.app;
  writeFileSync(
    path.join(app, 'service.ts'),
    [
      "import { connectAgentClient, startAgentRun, type AgentRunResult, type RunStatusView } from '@durable-harness/client';",
      'const client = await connectAgentClient();',
      "const run = await startAgentRun(client, { agent: 'demo', task: 't', identity: { tenantId: 't', userId: 'u' } });",
      'const status: RunStatusView = await run.status();',
      'const result: AgentRunResult = await run.result();',
      "const turns: number = result.iterations + status.iteration;",
      'export { turns };',
      // A wrong field must fail: the types are the package's, not `any`.
      '// @ts-expect-error not a field of the start input',
      "await startAgentRun(client, { agent: 'demo', task: 't', identity: { tenantId: 't', userId: 'u' }, notAField: 1 });",
    ].join('\n'),
  );
  const tsc = path.join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc');
  // skipLibCheck as services use it (@temporalio/common's own .d.ts name 'ms' without its types); the @ts-expect-error
  // above still fails the check if the package's types resolve to `any`.
  const args = ['--noEmit', '--strict', '--skipLibCheck', '--target', 'ES2022', '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--types', 'node', '--typeRoots', path.join(repoRoot, 'node_modules', '@types'), 'service.ts'];
  const checked = await run(process.execPath, [tsc, ...args], { cwd: app }).then(
    () => '',
    (err: { stdout: string }) => err.stdout,
  );
  expect(checked).toBe('');
});

it('a service with plain node starts, follows, answers and reads a run against a real worker', async () => {
  const app = installs.cold.app;
  writeFileSync(
    path.join(app, 'service.mjs'),
    `import { InvalidRunInputError, RunIdTakenError, connectAgentClient, getAgentRun, startAgentRun } from '@durable-harness/client';

const client = await connectAgentClient(); // TEMPORAL_ADDRESS, as Temporal's own tools read it
const identity = { tenantId: 'acme', userId: 'alice' };
const input = { agent: 'scripted', task: process.env.TASK, identity, taskQueue: process.env.TASK_QUEUE, workflowId: process.env.RUN_ID };
await startAgentRun(client, { ...input, agent: '' }).catch((err) => console.log(\`refused: \${err instanceof InvalidRunInputError} \${err.message}\`));
const run = await startAgentRun(client, input);
console.log(\`started \${run.workflowId}\`);
for (let last = ''; ; await new Promise((resolve) => setTimeout(resolve, 100))) {
  const status = await run.status().catch(() => undefined); // not answerable before the first workflow task
  if (!status) continue;
  if (status.state !== last) console.log(\`state \${(last = status.state)}\`);
  if (status.state === 'waiting_for_reply') await getAgentRun(client, run.workflowId).reply('main, please');
  if (!['starting', 'running', 'waiting_for_reply'].includes(status.state)) break;
}
const result = await run.result();
console.log(\`result \${result.status} after \${result.iterations} turns: \${result.result}\`);
await startAgentRun(client, input).catch((err) => console.log(\`again: \${err instanceof RunIdTakenError}\`));
await client.connection.close();
`,
  );
  const task = book.write('client-package', [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok('deployed main')]);
  const workflowId = testWorkflowId('client-package');
  const env = { PATH: process.env.PATH, HOME: app, TEMPORAL_ADDRESS: inject('temporalAddress'), TASK_QUEUE: worker.taskQueue, TASK: task, RUN_ID: workflowId };
  const { code, stdout, stderr } = await spawnNode(['service.mjs'], { cwd: app, env }).outcome;
  expect(stderr).toBe('');
  expect(stdout).toMatch(/^refused: true cannot start the agent run: agent: name the agent to run/m);
  expect(stdout).toContain(`started ${workflowId}\n`);
  expect(stdout).toMatch(/^state waiting_for_reply$/m);
  expect(stdout).toMatch(/^result succeeded after 2 turns: deployed main$/m);
  expect(stdout).toMatch(/^again: true$/m);
  expect(code).toBe(0);
});
