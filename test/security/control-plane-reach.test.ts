/**
 * Self-approval is impossible: in a deployment with signed decisions a local harness has no route to the worker's
 * loopback services. Through the workflow on a real Temporal server, a probe harness tries to connect to the
 * Temporal frontend, the PostgreSQL ledger, a running codec server and a port on a host interface; it gets its own
 * loopback only. The same probe on the host's network (a trusted-network worker, policy `open`) does connect,
 * so the probe can tell; and a signed deployment refuses a local agent on the host's network before it starts.
 */
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { AesGcmPayloadCodec, generateCodecToken, generatePayloadKey, startCodecServer, type CodecServer } from '../../src/codec/index.js';
import { parseOperators } from '../../src/operators/index.js';
import { scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';
import { publicDir } from './support.js';

const probePath = path.join(publicDir('reach'), 'reach-harness.mjs');
writeFileSync(
  probePath,
  `// A stdio-JSON harness that tries every address it is given, and its own loopback, and reports what answered.
import net from 'node:net';
import { createInterface } from 'node:readline';
const emit = (line) => process.stdout.write(JSON.stringify(line) + '\\n');
const reach = (host, port) => new Promise((resolve) => {
  const c = net.connect({ host, port, timeout: 3000 });
  c.on('connect', () => { c.destroy(); resolve('connected'); });
  c.on('timeout', () => { c.destroy(); resolve('timeout'); });
  c.on('error', (e) => resolve(e.code));
});
const ownLoopback = () => new Promise((resolve) => {
  const server = net.createServer((s) => s.end()).listen(0, '127.0.0.1', async () => {
    const answer = await reach('127.0.0.1', server.address().port);
    server.close();
    resolve(answer);
  }).on('error', (e) => resolve(e.code));
});
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  const request = JSON.parse(line); rl.close();
  emit({ type: 'session', id: 'reach-session' });
  const targets = JSON.parse(/reach:(\\{.*\\})/s.exec(request.prompt)[1]);
  const results = { ownLoopback: await ownLoopback() };
  for (const [name, [host, port]] of Object.entries(targets)) results[name] = await reach(host, port);
  emit({ type: 'complete', text: JSON.stringify({ step: 'success', result: JSON.stringify(results) }) });
  break;
}
`,
);

const book = scriptBook();
const probe = { name: 'reach', driverClass: 'StdioJson', executable: process.execPath, args: [probePath], active: true, vendor: 'testvendor', model: 'reach-1' };
const catalog = scriptedCatalog(book, {
  harnesses: [probe],
  agents: [
    { name: 'boxed', harness: 'reach', sandbox: { provider: 'local', networkPolicy: 'none' } },
    { name: 'hosted', harness: 'reach', sandbox: { provider: 'local', networkPolicy: 'open' } },
    { name: 'gated', harness: 'reach', sandbox: { provider: 'local', networkPolicy: 'vendor' } },
  ],
});

let signed: TestWorker;
let trusted: TestWorker;
let codecServer: CodecServer;
let hostPort: net.Server;
let targets: Record<string, [string, number]>;

/** A non-loopback address of this host, where a service listening on every interface answers. */
function hostAddress(): string {
  const address = Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal);
  if (!address) throw new Error('this machine has no non-loopback IPv4 address to probe');
  return address.address;
}

beforeAll(async () => {
  const codec = new AesGcmPayloadCodec({ keys: new Map([['k1', Buffer.from(generatePayloadKey(), 'base64')]]), currentKeyId: 'k1' });
  codecServer = await startCodecServer({ codec, tokens: [{ name: 'ops', token: generateCodecToken(), namespaces: ['*'] }], host: '127.0.0.1' });
  hostPort = net.createServer((s) => s.end());
  await new Promise<void>((resolve) => hostPort.listen(0, '0.0.0.0', resolve));
  const [temporalHost, temporalPort] = inject('temporalAddress').split(':');
  const databaseUrl = process.env.DURABLE_HARNESS_TEST_DATABASE_URL;
  if (!databaseUrl) throw new Error('DURABLE_HARNESS_TEST_DATABASE_URL is not set: this test proves the ledger database is out of reach');
  const pg = new URL(databaseUrl);
  targets = {
    temporal: [temporalHost!, Number(temporalPort)],
    postgres: [pg.hostname, Number(pg.port || 5432)],
    codecServer: ['127.0.0.1', Number(new URL(codecServer.url).port)],
    hostInterface: [hostAddress(), (hostPort.address() as net.AddressInfo).port],
  };
  [signed, trusted] = await Promise.all([
    startTestWorker({ catalog, decisions: 'signed', operators: parseOperators('operators: []', 'none') }),
    startTestWorker({ catalog, decisions: 'trusted-network' }),
  ]);
}, 120_000);

afterAll(async () => {
  await Promise.all([signed?.close(), trusted?.close(), codecServer?.close()]);
  hostPort?.close();
});

async function probeFrom(w: TestWorker, agent: string, label: string): Promise<Record<string, string>> {
  const run = await w.start({ agent, task: `reach:${JSON.stringify(targets)}`, workflowId: testWorkflowId(label) });
  const result = await run.result();
  expect(result.status, result.reason).toBe('succeeded');
  return JSON.parse(result.result!) as Record<string, string>;
}

describe('a local harness and the control plane', () => {
  it('signed, policy none: it reaches its own loopback and nothing of the worker’s — not Temporal, the ledger, the codec server or a host port', { timeout: 120_000 }, async () => {
    const reached = await probeFrom(signed, 'boxed', 'reach-signed');
    expect(reached.ownLoopback).toBe('connected');
    for (const target of Object.keys(targets)) expect(reached[target], target).not.toBe('connected');
    // Nothing routes out of the namespace: refused on its own loopback, no route to a host interface.
    expect(reached.temporal).toBe('ECONNREFUSED');
    expect(reached.hostInterface).toMatch(/^(ENETUNREACH|EHOSTUNREACH)$/);
  });

  it('signed, policy vendor: its one door is the run’s egress gateway — Temporal, the ledger, the codec server and a host port stay unreachable', { timeout: 120_000 }, async () => {
    const reached = await probeFrom(signed, 'gated', 'reach-gated');
    expect(reached.ownLoopback).toBe('connected');
    for (const target of Object.keys(targets)) expect(reached[target], target).not.toBe('connected');
    expect(reached.temporal).toBe('ECONNREFUSED');
    expect(reached.hostInterface).toMatch(/^(ENETUNREACH|EHOSTUNREACH)$/);
  });

  it('on the host’s network (trusted-network, policy open) the same probe connects to all of them', { timeout: 120_000 }, async () => {
    const reached = await probeFrom(trusted, 'hosted', 'reach-open');
    expect(reached).toEqual({ ownLoopback: 'connected', temporal: 'connected', postgres: 'connected', codecServer: 'connected', hostInterface: 'connected' });
  });

  it('a signed deployment refuses a local agent on the host’s network before it starts, saying what to use instead', { timeout: 60_000 }, async () => {
    for (const agent of ['hosted']) {
      const result = await (await signed.start({ agent, task: 'reach:{}', workflowId: testWorkflowId(`reach-refused-${agent}`) })).result();
      expect(result).toMatchObject({ status: 'failed', failureType: 'SandboxPolicyRefused', iterations: 0 });
      expect(result.reason).toMatch(/where operator decisions are signed.*Temporal server, ledger and codec server.*networkPolicy "none".*"vendor".*egress gateway.*trusted-network/);
    }
  });
});
