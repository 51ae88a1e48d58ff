/** Encrypted payloads from the command line: `run` with the workers' keys, bad keys refused, `codec-server`. */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { generateCodecToken, generatePayloadKey, payloadCodecFromEnvironment, payloadToJson, type JsonPayload } from '../../src/codec/index.js';
import { freePort } from '../../src/temporal/dev-server.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const bin = path.join(repoRoot, 'bin', 'durable-harness.mjs');
const book = scriptBook();
const keys = { DURABLE_HARNESS_PAYLOAD_KEYS: `new:${generatePayloadKey()},old:${generatePayloadKey()}` };
let w: TestWorker;

interface Cli {
  code: number | null;
  stdout: string;
  stderr: string;
  /** SIGTERM, then wait for the exit; resolves to the exit code. */
  stop(): Promise<number | null>;
}

function cli(args: string[], env: Record<string, string>, until?: RegExp): Promise<Cli> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const out: Cli = {
      code: null,
      stdout: '',
      stderr: '',
      stop: () => {
        if (child.exitCode === null) child.kill('SIGTERM');
        return exited;
      },
    };
    child.stdout.on('data', (d: Buffer) => {
      out.stdout += d.toString();
      if (until?.test(out.stdout)) resolve(out);
    });
    child.stderr.on('data', (d: Buffer) => (out.stderr += d.toString()));
    child.on('exit', (code) => resolve({ ...out, code }));
  });
}

beforeAll(async () => {
  w = await startTestWorker({ catalog: scriptedCatalog(book), dataConverter: { payloadCodecs: [payloadCodecFromEnvironment(keys)!] } });
});
afterAll(() => w?.close());

it('`run` with the keys in its environment starts and follows an encrypted run; bad keys exit 2 with the reason', async () => {
  const common = ['--address', inject('temporalAddress'), '--task-queue', w.taskQueue, '--data', w.dataDir];
  const task = book.write('cli-enc', [ok('encrypted and done')]);
  const run = await cli(['run', 'scripted', task, '--id', testWorkflowId('cli-enc'), ...common], keys);
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  expect(run.stdout).toMatch(/^encrypted and done$/m);

  const bad = await cli(['run', 'scripted', task, ...common], { DURABLE_HARNESS_PAYLOAD_KEYS: 'k1:tooshort' });
  expect(bad.code).toBe(2);
  expect(bad.stderr).toMatch(/key "k1" is not 32 bytes/);
});

/** One encrypted payload of "hello" as the codec server takes it. */
async function encryptedHello(): Promise<string> {
  const [encrypted] = await payloadCodecFromEnvironment(keys)!.encode([{ metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"hello"') }]);
  return JSON.stringify({ payloads: [payloadToJson(encrypted!)] });
}
const helloOf = async (res: Response) => Buffer.from(((await res.json()) as { payloads: JsonPayload[] }).payloads[0]!.data!, 'base64').toString();

it('`codec-server` decodes with the keys from the environment for a configured token and the given UI origin only', async () => {
  const port = await freePort();
  const token = generateCodecToken();
  const server = await cli(['codec-server', '--codec-port', String(port), '--cors-origin', 'http://ui.internal:8080'], { ...keys, DURABLE_HARNESS_CODEC_TOKENS: `ops=${token}` }, /codec server at/);
  try {
    expect(server.stdout).toContain(`codec server at http://127.0.0.1:${port} (keys new, old; new payloads use new; tokens ops)`);
    expect(server.stdout + server.stderr).not.toContain(token);
    const body = await encryptedHello();
    const res = await fetch(`http://127.0.0.1:${port}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: 'http://ui.internal:8080', Authorization: `Bearer ${token}` }, body });
    expect(res.headers.get('access-control-allow-origin')).toBe('http://ui.internal:8080');
    expect(await helloOf(res)).toBe('"hello"');
    // A plain curl without the token, or the right token from another origin, gets nothing.
    expect((await fetch(`http://127.0.0.1:${port}/decode`, { method: 'POST', body })).status).toBe(401);
    expect((await fetch(`http://127.0.0.1:${port}/decode`, { method: 'POST', headers: { Origin: 'http://evil.example', Authorization: `Bearer ${token}` }, body })).status).toBe(403);
    expect((await fetch(`http://127.0.0.1:${port}/encode`, { method: 'POST', headers: { Authorization: `Bearer ${token}` }, body })).status).toBe(403);
  } finally {
    expect(await server.stop()).toBe(0);
  }
  const none = await cli(['codec-server'], {});
  expect(none.code).toBe(2);
  expect(none.stderr).toMatch(/no payload keys: set DURABLE_HARNESS_PAYLOAD_KEYS/);
  const open = await cli(['codec-server'], keys);
  expect(open.code).toBe(2);
  expect(open.stderr).toMatch(/the codec server needs at least one access token: set DURABLE_HARNESS_CODEC_TOKENS/);
  const weak = await cli(['codec-server'], { ...keys, DURABLE_HARNESS_CODEC_TOKENS: 'ops=hunter2' });
  expect(weak.code).toBe(2);
  expect(weak.stderr).toMatch(/shorter than 24 characters/);
  const star = await cli(['codec-server', '--cors-origin', '*'], { ...keys, DURABLE_HARNESS_CODEC_TOKENS: `ops=${token}` });
  expect(star.code).toBe(2);
  expect(star.stderr).toMatch(/CORS origin "\*" is not accepted/);
  const made = await cli(['codec-token'], {});
  expect(made.code).toBe(0);
  expect(made.stdout.trim()).toMatch(/^[\w-]{43}$/);
});

it('`dev` with keys starts the codec server and wires the Web UI to it', async () => {
  const [port, uiPort, codecPort] = [await freePort(), await freePort(), await freePort()];
  const data = mkdtempSync(path.join(os.tmpdir(), 'dh-dev-codec-'));
  const dev = await cli(['dev', '--port', String(port), '--ui-port', String(uiPort), '--codec-port', String(codecPort), '--data', data], { ...keys, CI: 'true' }, /ready; press Ctrl-C/);
  try {
    expect(dev.stdout).toContain(`payloads encrypted (key new); codec server for the Web UI at http://127.0.0.1:${codecPort} (the UI holds its token)`);
    // The UI's endpoint carries dev's own token: what the UI posts to decodes, the bare server refuses.
    const settings = (await (await fetch(`http://127.0.0.1:${uiPort}/api/v1/settings`)).json()) as { Codec: { Endpoint: string } };
    expect(settings.Codec.Endpoint).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${codecPort}/t/[\\w-]{43}$`));
    expect(dev.stdout).not.toContain(settings.Codec.Endpoint.split('/t/')[1]);
    const body = await encryptedHello();
    const origin = `http://localhost:${uiPort}`;
    const preflight = await fetch(`${settings.Codec.Endpoint}/decode`, { method: 'OPTIONS', headers: { Origin: origin } });
    expect(preflight.headers.get('access-control-allow-origin')).toBe(origin);
    const decoded = await fetch(`${settings.Codec.Endpoint}/decode`, { method: 'POST', headers: { Origin: origin, 'X-Namespace': 'default' }, body });
    expect(await helloOf(decoded)).toBe('"hello"');
    expect((await fetch(`http://127.0.0.1:${codecPort}/decode`, { method: 'POST', headers: { Origin: origin }, body })).status).toBe(401);
  } finally {
    await dev.stop();
    // The one refusal above is logged (who was refused, never a token); nothing else went wrong.
    expect(dev.stderr.trim().split('\n')).toEqual(['codec server: refused POST decode (401): a valid access token is required: send "Authorization: Bearer <token>"']);
  }
  // Stopping dev stops its Temporal server and its codec server too (none is left behind).
  await expect(fetch(`http://127.0.0.1:${uiPort}/api/v1/settings`)).rejects.toThrow();
  await expect(fetch(`http://127.0.0.1:${codecPort}/decode`, { method: 'OPTIONS' })).rejects.toThrow();
});
