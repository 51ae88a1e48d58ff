/**
 * How a connection is resolved, as Temporal's own tools resolve it: flags over TEMPORAL_* variables over a profile of
 * the TOML config file over the defaults; certificate files read when connecting, each failure naming the file and
 * the flag, variable or profile key that named it; the API key from the environment or a profile only, never shown.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { TemporalConfigError, refuseApiKeyArgument, resolveTemporalConnection, tlsHandshakeProblem } from '../../src/client/connect.js';
import { freePort } from '../../src/temporal/dev-server.js';
import { resolveSettings } from '../../src/cli/settings.js';
import { runCli } from '../support/cli.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-connect-'));
const file = (name: string, text: string) => {
  const p = path.join(dir, name);
  writeFileSync(p, text);
  return p;
};
const [ca, cert, key] = [file('ca.pem', 'CA PEM'), file('cert.pem', 'CERT PEM'), file('key.pem', 'KEY PEM')];
const profileCa = file('profile-ca.pem', 'PROFILE CA PEM');
const config = file(
  'temporal.toml',
  `[profile.default]
address = "default.example:7233"
namespace = "from-default"

[profile.cloud]
address = "cloud.example:7233"
namespace = "from-profile"
api_key = "profile-secret-key"
[profile.cloud.tls]
server_ca_cert_path = "${profileCa}"
server_name = "profile.example"
`,
);
/** An environment with no Temporal variables and no default config file (HOME points at an empty directory). */
const bare = { HOME: mkdtempSync(path.join(os.tmpdir(), 'dh-home-')) };
const text = (bytes: Uint8Array | undefined) => (bytes ? Buffer.from(bytes).toString() : undefined);

describe('resolveTemporalConnection', () => {
  it('defaults to the local dev server without TLS', () => {
    const c = resolveTemporalConnection({}, bare);
    expect([c.address, c.namespace, c.security]).toEqual(['127.0.0.1:7233', 'default', 'no TLS']);
    expect(c.connectOptions()).toEqual({ address: '127.0.0.1:7233' });
  });

  it('takes the profile, then TEMPORAL_* over it, then flags over both', () => {
    const profile = resolveTemporalConnection({ profile: 'cloud' }, { ...bare, TEMPORAL_CONFIG_FILE: config });
    expect([profile.address, profile.namespace]).toEqual(['cloud.example:7233', 'from-profile']);
    expect(profile.connectOptions()).toMatchObject({ address: 'cloud.example:7233', apiKey: 'profile-secret-key', tls: { serverNameOverride: 'profile.example' } });
    expect(text((profile.connectOptions().tls as { serverRootCACertificate?: Uint8Array }).serverRootCACertificate)).toBe('PROFILE CA PEM');

    const env = { ...bare, TEMPORAL_CONFIG_FILE: config, TEMPORAL_PROFILE: 'cloud', TEMPORAL_ADDRESS: 'env.example:7233', TEMPORAL_NAMESPACE: 'from-env', TEMPORAL_API_KEY: 'env-secret-key', TEMPORAL_TLS_SERVER_CA_CERT_PATH: ca };
    const fromEnv = resolveTemporalConnection({}, env);
    expect([fromEnv.address, fromEnv.namespace]).toEqual(['env.example:7233', 'from-env']);
    const envOptions = fromEnv.connectOptions();
    expect(envOptions.apiKey).toBe('env-secret-key');
    expect(text((envOptions.tls as { serverRootCACertificate?: Uint8Array }).serverRootCACertificate)).toBe('CA PEM');
    expect(fromEnv.security).toBe(`TLS (CA ${ca}), server name profile.example, API key from TEMPORAL_API_KEY`);

    const flags = resolveTemporalConnection({ address: 'flag.example:7233', namespace: 'from-flag', 'tls-ca-path': profileCa, 'tls-cert-path': cert, 'tls-key-path': key, 'tls-server-name': 'flag.example' }, env);
    expect([flags.address, flags.namespace]).toEqual(['flag.example:7233', 'from-flag']);
    const tls = flags.connectOptions().tls as { serverNameOverride?: string; serverRootCACertificate?: Uint8Array; clientCertPair?: { crt: Uint8Array; key: Uint8Array } };
    expect([tls.serverNameOverride, text(tls.serverRootCACertificate), text(tls.clientCertPair?.crt), text(tls.clientCertPair?.key)]).toEqual(['flag.example', 'PROFILE CA PEM', 'CERT PEM', 'KEY PEM']);
    // The API key has no flag: the environment's stays.
    expect(flags.connectOptions().apiKey).toBe('env-secret-key');
  });

  it('reads the default profile of the config file when none is named, and --config-file over TEMPORAL_CONFIG_FILE', () => {
    const other = file('other.toml', '[profile.default]\naddress = "other.example:7233"\n');
    expect(resolveTemporalConnection({}, { ...bare, TEMPORAL_CONFIG_FILE: config }).address).toBe('default.example:7233');
    expect(resolveTemporalConnection({ 'config-file': other }, { ...bare, TEMPORAL_CONFIG_FILE: config }).address).toBe('other.example:7233');
    // Temporal's default file: $XDG_CONFIG_HOME/temporalio/temporal.toml (or ~/.config/…).
    const xdg = mkdtempSync(path.join(os.tmpdir(), 'dh-xdg-'));
    mkdirSync(path.join(xdg, 'temporalio'));
    writeFileSync(path.join(xdg, 'temporalio', 'temporal.toml'), '[profile.default]\nnamespace = "from-xdg"\n');
    expect(resolveTemporalConnection({}, { ...bare, XDG_CONFIG_HOME: xdg }).namespace).toBe('from-xdg');
  });

  it('turns TLS on with --tls or TEMPORAL_TLS, and with an API key; TEMPORAL_TLS=false turns it off', () => {
    expect(resolveTemporalConnection({ tls: true }, bare).connectOptions().tls).toEqual({});
    expect(resolveTemporalConnection({}, { ...bare, TEMPORAL_TLS: 'true' }).security).toBe('TLS');
    expect(resolveTemporalConnection({}, { ...bare, TEMPORAL_API_KEY: 'k' }).connectOptions()).toMatchObject({ tls: true, apiKey: 'k' });
    expect(resolveTemporalConnection({}, { ...bare, TEMPORAL_API_KEY: 'k', TEMPORAL_TLS: 'false' }).connectOptions().tls).toBe(false);
    expect([{}, { TEMPORAL_TLS: 'true' }, { TEMPORAL_API_KEY: 'k' }, { TEMPORAL_API_KEY: 'k', TEMPORAL_TLS: 'false' }].map((env) => resolveTemporalConnection({}, { ...bare, ...env }).tls)).toEqual([false, true, true, false]);
  });

  it('names the missing file and the flag, variable or profile key that named it', () => {
    const missing = path.join(dir, 'nope.pem');
    const problem = (flags: Parameters<typeof resolveTemporalConnection>[0], env: Record<string, string> = {}) => {
      try {
        resolveTemporalConnection(flags, { ...bare, ...env }).connectOptions();
      } catch (e) {
        expect(e).toBeInstanceOf(TemporalConfigError);
        return (e as Error).message;
      }
      throw new Error('no error');
    };
    expect(problem({ 'tls-ca-path': missing })).toBe(`the TLS CA certificate ${missing} (--tls-ca-path) does not exist: fix the path, or leave it out`);
    expect(problem({}, { TEMPORAL_TLS_CLIENT_CERT_PATH: missing, TEMPORAL_TLS_CLIENT_KEY_PATH: key })).toBe(`the TLS client certificate ${missing} (TEMPORAL_TLS_CLIENT_CERT_PATH) does not exist: fix the path, or leave it out`);
    const broken = file('broken-profile.toml', `[profile.default.tls]\nclient_cert_path = "${cert}"\nclient_key_path = "${missing}"\n`);
    expect(problem({ 'config-file': broken })).toBe(`the TLS client key ${missing} (client_key_path of profile "default" in ${broken}) does not exist: fix the path, or leave it out`);
    expect(problem({ 'tls-cert-path': cert })).toMatch(/^a client certificate without its client key: give both \(--tls-cert-path and --tls-key-path/);
    expect(problem({ 'config-file': path.join(dir, 'absent.toml') })).toMatch(/absent\.toml \(--config-file\) does not exist/);
    expect(problem({ profile: 'nosuch', 'config-file': config })).toBe(`profile "nosuch" (--profile) is not in ${config}: check the name (its [profile.NAME] tables)`);
    expect(problem({}, { TEMPORAL_PROFILE: 'cloud' })).toMatch(/^profile "cloud" \(TEMPORAL_PROFILE\) needs a Temporal config file, and there is none at /);
    expect(problem({ 'config-file': file('bad.toml', '[profile.default\naddress = 1') })).toMatch(/^cannot use the Temporal config file .*bad\.toml: /);
  });

  it('never shows the API key: not in its description, not in an error, and redacts it from a server message', () => {
    const c = resolveTemporalConnection({ 'tls-ca-path': path.join(dir, 'nope.pem') }, { ...bare, TEMPORAL_API_KEY: 'very-secret-key' });
    expect(c.security).toBe(`TLS (CA ${path.join(dir, 'nope.pem')}), API key from TEMPORAL_API_KEY`);
    expect(JSON.stringify(c)).not.toContain('very-secret-key');
    expect(() => c.connectOptions()).toThrow(expect.objectContaining({ message: expect.not.stringContaining('very-secret-key') }));
    expect(c.redact('server said: bad key very-secret-key')).toBe('server said: bad key ***');
  });
});

describe('tlsHandshakeProblem', () => {
  it('finds none where nothing listens (an unreachable server, exit 3, not a TLS setting) or without TLS', async () => {
    const address = `127.0.0.1:${await freePort()}`;
    expect(await tlsHandshakeProblem({ address, tls: true })).toBeUndefined();
    expect(await tlsHandshakeProblem({ address })).toBeUndefined();
  });
});

describe('the command line', () => {
  it('refuses --api-key, pointing at TEMPORAL_API_KEY, and never echoes it', async () => {
    expect(() => refuseApiKeyArgument(['status', 'x', '--api-key', 'k'])).toThrow(/set TEMPORAL_API_KEY/);
    expect(() => refuseApiKeyArgument(['run', 'a', '--', '--api-key'])).not.toThrow();
    const { code, stderr, stdout } = await runCli(['list', '--api-key=sekrit-on-argv']);
    expect(code).toBe(2);
    expect(stderr).toMatch(/--api-key is not taken on the command line .*set TEMPORAL_API_KEY, or api_key in a profile/);
    expect(`${stdout}${stderr}`).not.toContain('sekrit-on-argv');
  });

  it('dev refuses the flags of a remote server, and ignores the profile file', () => {
    expect(() => resolveSettings({ 'tls-ca-path': 'ca.pem' }, bare, { embedded: true })).toThrow(/--tls-ca-path is for a Temporal server elsewhere/);
    const s = resolveSettings({}, { ...bare, TEMPORAL_CONFIG_FILE: config, TEMPORAL_PROFILE: 'cloud' }, { embedded: true });
    expect([s.namespace, s.temporal.security]).toEqual(['default', 'no TLS']);
  });

  it('a missing certificate file is a configuration error (exit 2) naming it', async () => {
    const { code, stderr } = await runCli(['list', '--tls-ca-path', path.join(dir, 'missing-ca.pem')]);
    expect(code).toBe(2);
    expect(stderr).toBe(`durable-harness: the TLS CA certificate ${path.join(dir, 'missing-ca.pem')} (--tls-ca-path) does not exist: fix the path, or leave it out\n`);
  });
});
