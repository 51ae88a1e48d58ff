/**
 * The gateway originates TLS to an https vendor itself: the sandbox speaks plain http to its loopback, the vendor
 * sees TLS with the real key, and the vendor's certificate is checked against the worker's trust store (no CA is
 * injected anywhere; an untrusted certificate is refused). The gateway runs in a child that trusts a test CA.
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';

// The test CA is made with openssl (.ci/run installs it): missing, the test FAILS, never skips.
const hasOpenssl = spawnSync('openssl', ['version']).status === 0;
const child = path.join(import.meta.dirname, 'fixtures', 'tls-child.ts');
let dir: string;
let server: https.Server;
let port: number;
const seen: { key: string | undefined; encrypted: boolean }[] = [];

beforeAll(async () => {
  if (!hasOpenssl) throw new Error('openssl is not installed: install it (apt-get install openssl) to make the test CA');
  dir = mkdtempSync(path.join(os.tmpdir(), 'dh-gw-tls-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem')], { stdio: 'ignore' });
  server = https.createServer({ key: readFileSync(path.join(dir, 'key.pem')), cert: readFileSync(path.join(dir, 'cert.pem')) }, (req, res) => {
    seen.push({ key: req.headers['x-api-key'] as string | undefined, encrypted: (req.socket as TLSSocket).encrypted === true });
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ type: 'message', model: 'claude-tls', usage: { input_tokens: 5, output_tokens: 6, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  rmSync(dir, { recursive: true, force: true });
});

interface ChildSaw {
  status: number;
  text: string;
  records: { status: number; rule: string }[];
  calls: { model?: string; usage: unknown }[];
}

/** Runs the child (asynchronously: the vendor answers from this process). */
async function runChild(env: NodeJS.ProcessEnv): Promise<ChildSaw> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', child, `https://127.0.0.1:${port}`], { env: { ...process.env, ...env }, timeout: 30_000 });
  return JSON.parse(stdout) as ChildSaw;
}

it('forwards a plain-http model call to an https vendor over TLS with the real key', async () => {
  const got = await runChild({ NODE_EXTRA_CA_CERTS: path.join(dir, 'cert.pem') });
  expect(got.status).toBe(200);
  expect(seen.at(-1)).toEqual({ key: 'sk-real-tls', encrypted: true });
  expect(got.calls).toEqual([expect.objectContaining({ model: 'claude-tls', usage: { input: 5, output: 6, cacheRead: 0, cacheWrite: 0 } })]);
  expect(got.records).toEqual([expect.objectContaining({ status: 200, rule: 'vendor', destination: `127.0.0.1:${port}` })]);
}, 40_000);

it('refuses a vendor whose certificate the worker does not trust (502), sending it nothing', async () => {
  const before = seen.length;
  const got = await runChild({ NODE_EXTRA_CA_CERTS: '' });
  expect(got.status).toBe(502);
  expect(JSON.parse(got.text).error.message).toContain('could not be reached');
  expect(seen.length).toBe(before);
}, 40_000);
