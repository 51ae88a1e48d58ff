/**
 * `durable-harness worker` and the client commands beyond localhost: through TLS, mTLS and an API key, with the
 * settings from flags, from TEMPORAL_* variables and from a profile of a TOML config file. The dev server serves plain
 * gRPC only, so proxies of test/support/tls-proxy.ts stand in front of it: one that terminates TLS, one that also
 * requires a client certificate signed by the test CA, and one that lets through only calls with the API key.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { connectAgentClient, startAgentRun } from '../../src/client/index.js';
import { runCli, spawnCli, type CliOutcome, type CliProcess } from '../support/cli.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { makeCertificates, startApiKeyProxy, startTlsProxy, type ApiKeyProxy, type TestCertificates, type TlsProxy } from '../support/tls-proxy.js';
import { waitUntil } from '../support/processes.js';
import { testWorkflowId } from '../support/worker.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-tls-'));
const book = scriptBook();
const catalog = path.join(dir, 'catalog.json');
const apiKey = `test-api-key-${Math.random().toString(36).slice(2, 12)}`;
let certs: TestCertificates;
let tlsOnly: TlsProxy;
let mtls: TlsProxy;
let keyProxy: ApiKeyProxy;
const workers: CliProcess[] = [];

/** The environment of a spawned command: no Temporal settings of this machine (its variables, its default config file). */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TEMPORAL_') || name === 'TEMPORAL_CLI_PATH'));
  return { ...env, XDG_CONFIG_HOME: mkdtempSync(path.join(os.tmpdir(), 'dh-xdg-')), ...extra };
}

/** Starts `durable-harness worker` and waits until it polls; its start line says how it connected. */
async function startWorker(args: string[], env: Record<string, string> = {}): Promise<CliProcess> {
  const worker = spawnCli(['worker', '--catalog', catalog, ...args], { env: cleanEnv(env) });
  workers.push(worker);
  await waitUntil(() => /worker polling task queue|durable-harness:/.test(`${worker.stdoutSoFar()}${worker.stderrSoFar()}`) || worker.exitCode !== null, 90_000);
  if (!worker.stdoutSoFar().includes('worker polling task queue')) throw new Error(`the worker did not start:\n${worker.stdoutSoFar()}${worker.stderrSoFar()}`);
  return worker;
}

async function stop(worker: CliProcess): Promise<CliOutcome> {
  worker.kill('SIGTERM');
  const end = await worker.outcome;
  expect(end.code).toBe(0);
  return end;
}

const json = (outcome: CliOutcome) => JSON.parse(outcome.stdout) as Record<string, unknown>;

beforeAll(async () => {
  certs = makeCertificates(dir);
  const upstream = inject('temporalAddress');
  [tlsOnly, mtls, keyProxy] = await Promise.all([
    startTlsProxy(upstream, certs, { requireClientCert: false }),
    startTlsProxy(upstream, certs, { requireClientCert: true }),
    startApiKeyProxy(upstream, certs, apiKey),
  ]);
  // A worker with signed decisions (the default of `worker`) keeps a local harness off the host's network.
  writeFileSync(catalog, JSON.stringify(scriptedCatalog(book, { agent: { sandbox: { provider: 'local', workspaceScope: 'run', networkPolicy: 'none' } } })));
});
afterAll(async () => {
  for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGKILL');
  await Promise.all([tlsOnly?.close(), mtls?.close(), keyProxy?.close()]);
});

describe('mTLS', () => {
  const queue = `mtls-${Date.now().toString(36)}`;
  const data = path.join(dir, 'mtls-data');
  let worker: CliProcess;

  beforeAll(async () => {
    const flags = ['--address', mtls.address, '--tls-ca-path', certs.caCert, '--tls-cert-path', certs.clientCert, '--tls-key-path', certs.clientKey];
    worker = await startWorker([...flags, '--task-queue', queue, '--data', data]);
  }, 120_000);
  afterAll(() => worker && stop(worker));

  it('the worker and run, status and list work through an mTLS proxy with the files from flags', async () => {
    expect(worker.stdoutSoFar()).toContain(`worker polling task queue "${queue}" at ${mtls.address} (TLS (CA ${certs.caCert}), client certificate ${certs.clientCert})`);
    const flags = ['--address', mtls.address, '--tls-ca-path', certs.caCert, '--tls-cert-path', certs.clientCert, '--tls-key-path', certs.clientKey, '--task-queue', queue, '--data', data];
    const id = testWorkflowId('mtls-flags');
    const run = await runCli(['run', 'scripted', book.write('mtls', [ok('through mTLS')]), '--id', id, ...flags]);
    expect(run.stderr).toBe('');
    expect(run.code, run.stdout).toBe(0);
    expect(run.stdout).toMatch(/^through mTLS$/m);
    const status = await runCli(['status', id, '--json', ...flags]);
    expect(status.code).toBe(0);
    expect(json(status)).toMatchObject({ state: 'succeeded', detail: 'through mTLS' });
    const list = await runCli(['list', '--json', ...flags]);
    expect(list.code).toBe(0);
    expect(list.stdout).toContain(`"${id}"`);
    // Every session through the proxy presented the test client certificate.
    expect(mtls.sessions.length).toBeGreaterThanOrEqual(4);
    expect(new Set(mtls.sessions.map((s) => s.clientCn))).toEqual(new Set(['durable-harness-test']));
  }, 90_000);

  it('status and list work with the files from TEMPORAL_* variables and from a profile of a TOML config file', async () => {
    const id = testWorkflowId('mtls-env');
    const flags = ['--task-queue', queue, '--data', data];
    const run = await runCli(['run', 'scripted', book.write('mtls-env', [ok('from the environment')]), '--id', id, '--address', mtls.address, '--tls-ca-path', certs.caCert, '--tls-cert-path', certs.clientCert, '--tls-key-path', certs.clientKey, ...flags]);
    expect(run.code, run.stdout).toBe(0);

    const env = { TEMPORAL_ADDRESS: mtls.address, TEMPORAL_TLS_SERVER_CA_CERT_PATH: certs.caCert, TEMPORAL_TLS_CLIENT_CERT_PATH: certs.clientCert, TEMPORAL_TLS_CLIENT_KEY_PATH: certs.clientKey, TEMPORAL_TLS_SERVER_NAME: 'localhost' };
    const config = path.join(dir, 'temporal.toml');
    writeFileSync(
      config,
      `[profile.default]\naddress = "127.0.0.1:1"\n\n[profile.mtls]\naddress = "${mtls.address}"\n[profile.mtls.tls]\nserver_ca_cert_path = "${certs.caCert}"\nclient_cert_path = "${certs.clientCert}"\nclient_key_path = "${certs.clientKey}"\n`,
    );
    for (const [how, args, extraEnv] of [
      ['TEMPORAL_* variables', [], env],
      ['--profile and --config-file', ['--profile', 'mtls', '--config-file', config], {}],
      ['TEMPORAL_PROFILE and TEMPORAL_CONFIG_FILE', [], { TEMPORAL_PROFILE: 'mtls', TEMPORAL_CONFIG_FILE: config }],
    ] as const) {
      const status = await spawnCli(['status', id, '--json', ...args, ...flags], { env: cleanEnv(extraEnv) }).outcome;
      expect(status.stderr, how).toBe('');
      expect(status.code, how).toBe(0);
      expect(json(status), how).toMatchObject({ state: 'succeeded', detail: 'from the environment' });
      const list = await spawnCli(['list', '--json', ...args, ...flags], { env: cleanEnv(extraEnv) }).outcome;
      expect(list.code, how).toBe(0);
      expect(list.stdout, how).toContain(`"${id}"`);
    }
  }, 120_000);

  it('connectAgentClient connects with a profile and TEMPORAL_* variables, and startAgentRun runs through it', async () => {
    const config = path.join(dir, 'service.toml');
    writeFileSync(config, `[profile.service]\naddress = "${mtls.address}"\n[profile.service.tls]\nserver_ca_cert_path = "${certs.caCert}"\n`);
    // The profile names the server and its CA; the variables add the client certificate.
    const env = { TEMPORAL_CONFIG_FILE: config, TEMPORAL_TLS_CLIENT_CERT_PATH: certs.clientCert, TEMPORAL_TLS_CLIENT_KEY_PATH: certs.clientKey };
    const client = await connectAgentClient({ profile: 'service', env });
    try {
      const run = await startAgentRun(client, { agent: 'scripted', task: book.write('service', [ok('from a service')]), identity: { tenantId: 't', userId: 'u' }, taskQueue: queue });
      expect(await run.result()).toMatchObject({ status: 'succeeded', result: 'from a service' });
    } finally {
      await client.connection.close();
    }
    // Without the variables the profile alone has no client certificate: the mTLS proxy refuses it.
    await expect(connectAgentClient({ profile: 'service', env: { TEMPORAL_CONFIG_FILE: config } })).rejects.toThrow();
  }, 60_000);

  it('without a client certificate the mTLS proxy refuses the handshake, and the command says so (exit 2)', async () => {
    const refusedBefore = mtls.refused.length;
    const { code, stderr } = await runCli(['list', '--address', mtls.address, '--tls-ca-path', certs.caCert]);
    expect(code).toBe(2);
    expect(stderr).toMatch(new RegExp(`^durable-harness: cannot reach Temporal at ${mtls.address} \\(TLS \\(CA ${certs.caCert}\\)\\): (TLS handshake failed: tlsv13 alert certificate required \\(ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED\\)|the server closed the connection after the TLS handshake \\(.*\\)).* Check the CA .*for mTLS, the client certificate and key \\(--tls-cert-path, --tls-key-path\\)\\.\\n$`));
    expect(mtls.refused.length).toBeGreaterThan(refusedBefore);
    expect(mtls.refused.at(-1)).toMatch(/peer did not return a certificate/);
  });
});

describe('TLS', () => {
  it('a CA that did not sign the server certificate fails with a clear message (exit 2), for the client and the worker', async () => {
    const flags = ['--address', tlsOnly.address, '--tls-ca-path', certs.otherCaCert];
    const list = await runCli(['list', ...flags]);
    expect(list.code).toBe(2);
    expect(list.stderr).toMatch(new RegExp(`^durable-harness: cannot reach Temporal at ${tlsOnly.address} \\(TLS \\(CA ${certs.otherCaCert}\\)\\): TLS handshake failed: .*(self-signed certificate|unable to (get|verify)).* Check the CA \\(--tls-ca-path, TEMPORAL_TLS_SERVER_CA_CERT_PATH\\)`));
    const worker = await spawnCli(['worker', '--catalog', catalog, ...flags, '--task-queue', 'tls-wrong-ca', '--data', path.join(dir, 'wrong-ca')], { env: cleanEnv({}) }).outcome;
    expect(worker.code).toBe(2);
    expect(worker.stderr).toMatch(/cannot reach Temporal at .*: TLS handshake failed: .* Check the CA/);
    // With the right CA the same server answers.
    const right = await runCli(['list', '--address', tlsOnly.address, '--tls-ca-path', certs.caCert, '--limit', '1']);
    expect(right.stderr).toBe('');
    expect(right.code).toBe(0);
  }, 90_000);

  it('a missing client key file is a configuration error naming it and its variable (exit 2)', async () => {
    const missing = path.join(dir, 'no-such-key.pem');
    const env = cleanEnv({ TEMPORAL_ADDRESS: mtls.address, TEMPORAL_TLS_CLIENT_CERT_PATH: certs.clientCert, TEMPORAL_TLS_CLIENT_KEY_PATH: missing });
    const { code, stderr } = await spawnCli(['status', 'any-run'], { env }).outcome;
    expect(code).toBe(2);
    expect(stderr).toBe(`durable-harness: the TLS client key ${missing} (TEMPORAL_TLS_CLIENT_KEY_PATH) does not exist: fix the path, or leave it out\n`);
  });
});

describe('API key', () => {
  it('reaches the proxy as a bearer header from TEMPORAL_API_KEY only, and never shows in output or the run history', async () => {
    const queue = `apikey-${Date.now().toString(36)}`;
    const data = path.join(dir, 'apikey-data');
    const env = { TEMPORAL_ADDRESS: keyProxy.address, TEMPORAL_API_KEY: apiKey, TEMPORAL_TLS_SERVER_CA_CERT_PATH: certs.caCert };
    const worker = await startWorker(['--task-queue', queue, '--data', data], env);
    expect(worker.stdoutSoFar()).toContain(`at ${keyProxy.address} (TLS (CA ${certs.caCert}), API key from TEMPORAL_API_KEY)`);

    const id = testWorkflowId('apikey');
    const task = book.write('apikey', [ok('behind an API key')]);
    const run = await spawnCli(['run', 'scripted', task, '--id', id, '--task-queue', queue, '--data', data], { env: cleanEnv(env) }).outcome;
    expect(run.stderr).toBe('');
    expect(run.code, run.stdout).toBe(0);
    const status = await spawnCli(['status', id, '--data', data], { env: cleanEnv(env) }).outcome;
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/succeeded/);
    const list = await spawnCli(['list', '--json'], { env: cleanEnv(env) }).outcome;
    expect(list.stdout).toContain(`"${id}"`);

    // Without the key (or with another) the proxy refuses, and the message names where the key comes from, not the key.
    const wrong = await spawnCli(['list'], { env: cleanEnv({ ...env, TEMPORAL_API_KEY: `${apiKey}-not` }) }).outcome;
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/missing or wrong API key.*The server refused the credentials: check TEMPORAL_API_KEY/);
    expect(wrong.stderr).not.toContain(apiKey);

    const end = await stop(worker);
    // Every call carried the key as a bearer header: the worker's and the commands'.
    const good = keyProxy.authorizations.filter((a) => a === `Bearer ${apiKey}`).length;
    expect(good).toBeGreaterThanOrEqual(5);
    expect(keyProxy.authorizations.filter((a) => a !== `Bearer ${apiKey}`)).toEqual(keyProxy.authorizations.filter((a) => a === `Bearer ${apiKey}-not`));
    for (const out of [run, status, list, end]) expect(`${out.stdout}${out.stderr}`).not.toContain(apiKey);

    // The run's history, fetched past the proxy, decoded: it holds the task, never the key.
    const connection = await Connection.connect({ address: inject('temporalAddress') });
    try {
      const history = await new Client({ connection }).workflow.getHandle(id).fetchHistory();
      // Payloads come base64-encoded: every string is searched as it is and decoded.
      const strings: string[] = [];
      JSON.stringify(history, (_key, value: unknown) => (typeof value === 'string' && strings.push(value, Buffer.from(value, 'base64').toString('utf8')), value));
      const text = strings.join('\n');
      expect(text).toContain('script:apikey');
      expect(text).not.toContain(apiKey);
    } finally {
      await connection.close();
    }
  }, 180_000);

  it('a server that refuses the worker its search attributes (as Temporal Cloud does) gets the command that adds them (exit 2)', async () => {
    const refusing = await startApiKeyProxy(inject('temporalAddress'), certs, apiKey, { refuse: /OperatorService\/(List|Add)SearchAttributes$/ });
    try {
      const env = { TEMPORAL_ADDRESS: refusing.address, TEMPORAL_API_KEY: apiKey, TEMPORAL_TLS_SERVER_CA_CERT_PATH: certs.caCert };
      const worker = await spawnCli(['worker', '--catalog', catalog, '--task-queue', 'refused-attributes', '--data', path.join(dir, 'refused')], { env: cleanEnv(env) }).outcome;
      expect(worker.code).toBe(2);
      expect(worker.stderr).toMatch(/^durable-harness: this worker may not register the run search attributes on namespace default \(Request unauthorized \(test proxy\)\)\. Add them once as a namespace admin/);
      expect(worker.stderr).toContain('tcld namespace search-attributes add --namespace default --search-attribute "DurableHarnessAgent=Keyword"');
      expect(worker.stderr).toContain('--search-attribute "DurableHarnessCostUsd=Double" --search-attribute "DurableHarnessPendingApprovals=Int"');
      expect(worker.stderr).not.toMatch(/^\s+at /m);
      expect(worker.stderr).not.toContain(apiKey);
    } finally {
      await refusing.close();
    }
  }, 60_000);
});
