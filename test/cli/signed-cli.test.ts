/**
 * An operator's day in a signed deployment, from the command line as users run it: `operator keygen` makes a key
 * only its owner can read, the workers are told its public key, and `approve --key` decides — while the same command
 * without a key, or with a key the workers do not know, is refused with how to sign and changes nothing.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { parseOperators } from '../../src/operators/index.js';
import { spawnCli, type CliOutcome } from '../support/cli.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-operator-'));
let w: TestWorker;
let keygen: CliOutcome;

beforeAll(async () => {
  keygen = await spawnCli(['operator', 'keygen', '--name', 'alice', '--out', path.join(dir, 'alice.json')]).outcome;
  await spawnCli(['operator', 'keygen', '--name', 'alice', '--out', path.join(dir, 'impostor.json')]).outcome;
  // The entry keygen printed, as an operator would paste it into the workers' operators file.
  const entry = keygen.stdout.slice(keygen.stdout.indexOf('  - name: alice'));
  writeFileSync(path.join(dir, 'operators.yaml'), `operators:\n${entry}`);
  const operators = parseOperators(readFileSync(path.join(dir, 'operators.yaml'), 'utf8'), 'operators.yaml');
  w = await startTestWorker({
    catalog: scriptedCatalog(book, { agents: [{ name: 'guarded', harness: 'scripted', actions: ['echo'], permissions: { posture: 'strict', approvalTimeoutMs: 120_000 }, sandbox: { provider: 'local', networkPolicy: 'none' } }] }),
    decisions: 'signed',
    operators,
  });
}, 120_000);
afterAll(() => w?.close());

const cli = (args: string[], env: NodeJS.ProcessEnv = process.env): Promise<CliOutcome> =>
  spawnCli([...args, '--address', inject('temporalAddress'), '--task-queue', w.taskQueue, '--data', w.dataDir], { env }).outcome;

it('keygen writes a private key file (0600) and prints the public entry; approve signs with --key, and only that counts', async () => {
  expect(keygen.code).toBe(0);
  const file = path.join(dir, 'alice.json');
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(keygen.stdout).toMatch(/keys: \["ed25519:[A-Za-z0-9+/]{43}="\]/);
  expect(keygen.stdout).not.toContain((JSON.parse(readFileSync(file, 'utf8')) as { privateKey: string }).privateKey.split('\n')[1]!);
  const again = await spawnCli(['operator', 'keygen', '--name', 'alice', '--out', file]).outcome;
  expect(again.code).toBe(2);
  expect(again.stderr).toMatch(/exists already/);

  const task = book.write('signed-cli', [{ permissions: [{ tool: 'Bash', kind: 'command', input: { command: 'touch s.txt' }, title: 'touch s.txt' }], ...ok('signed from the CLI') }]);
  const run = await w.start({ agent: 'guarded', task, workflowId: testWorkflowId('signed-cli') });
  await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: 20_000, interval: 100 }).toBe(1);
  const [pending] = (await run.status()).pendingApprovals!;

  const unsigned = await cli(['approve', run.workflowId, pending!.requestId, '--by', 'security-officer']);
  expect(unsigned.code).toBe(5);
  expect(unsigned.stderr).toMatch(/accepts only signed operator decisions.*--key FILE/);
  const impostor = await cli(['approve', run.workflowId, pending!.requestId, '--key', path.join(dir, 'impostor.json')]);
  expect(impostor.code).toBe(5);
  expect(impostor.stderr).toMatch(/is not one of operator "alice"'s configured keys/);
  expect(await w.ledger.getApproval(run.workflowId, pending!.requestId)).toMatchObject({ status: 'pending' });

  const env = { ...process.env, DURABLE_HARNESS_OPERATOR_KEY_FILE: file };
  const signed = await cli(['approve', run.workflowId, pending!.requestId], env);
  expect(signed).toMatchObject({ code: 0, stdout: `allowed ${pending!.requestId} of ${run.workflowId} (operator:alice)\n` });
  await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'signed from the CLI' });
});
