import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createRedactor,
  CredentialMissingError,
  JsonFileCredentialStore,
  MemoryCredentialStore,
  resolveCredentials,
  vendorFallbackVariable,
} from '../../src/credentials/index.js';

const harness = { name: 'claude', driverClass: 'ClaudeCode', apiKeyEnv: 'ANTHROPIC_API_KEY' };

function recorder() {
  const warnings: string[] = [];
  return { warnings, log: { warn: (m: string) => warnings.push(m) } };
}

describe('resolveCredentials', () => {
  it('grants come from the store first, then the server env', () => {
    const store = new MemoryCredentialStore({ ANTHROPIC_API_KEY: 'sk-store-value', GH: 'gh-store' });
    const { log, warnings } = recorder();
    const result = resolveCredentials({
      agent: { name: 'a', credentials: [{ env: 'ANTHROPIC_API_KEY' }, { env: 'GITHUB_TOKEN', from: 'GH' }, { env: 'NPM_TOKEN' }] },
      harness,
      store,
      env: { ANTHROPIC_API_KEY: 'sk-env-value', NPM_TOKEN: 'npm-env-value', AI_VENDOR_API_KEY__CLAUDECODE: 'fallback' },
      log,
    });
    expect(result.env).toEqual({ ANTHROPIC_API_KEY: 'sk-store-value', GITHUB_TOKEN: 'gh-store', NPM_TOKEN: 'npm-env-value' });
    expect(result.sources).toEqual([
      { env: 'ANTHROPIC_API_KEY', source: 'store' },
      { env: 'GITHUB_TOKEN', source: 'store' },
      { env: 'NPM_TOKEN', source: 'env' },
    ]);
    expect(result.secrets.sort()).toEqual(['gh-store', 'npm-env-value', 'sk-store-value']);
    expect(warnings).toEqual([]); // grants present: no fallback
  });

  it('a grant with `from` reads that name from the server env', () => {
    const result = resolveCredentials({
      agent: { name: 'a', credentials: [{ env: 'OPENAI_API_KEY', from: 'TEAM_OPENAI_KEY' }] },
      harness: { name: 'codex', driverClass: 'Codex', apiKeyEnv: 'OPENAI_API_KEY' },
      env: { TEAM_OPENAI_KEY: 'sk-team', OPENAI_API_KEY: 'not-this' },
    });
    expect(result.env).toEqual({ OPENAI_API_KEY: 'sk-team' });
  });

  it('falls back to AI_VENDOR_API_KEY__<DRIVERCLASS> without grants, logged by name only', () => {
    const { log, warnings } = recorder();
    const secret = 'sk-ant-very-secret';
    const result = resolveCredentials({ agent: { name: 'a', credentials: [] }, harness, env: { AI_VENDOR_API_KEY__CLAUDECODE: secret }, log });
    expect(vendorFallbackVariable('ClaudeCode')).toBe('AI_VENDOR_API_KEY__CLAUDECODE');
    expect(result.env).toEqual({ ANTHROPIC_API_KEY: secret });
    expect(result.sources).toEqual([{ env: 'ANTHROPIC_API_KEY', source: 'vendor-fallback' }]);
    expect(result.secrets).toEqual([secret]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('AI_VENDOR_API_KEY__CLAUDECODE');
    expect(warnings[0]).not.toContain(secret);
  });

  it('no grants and no apiKeyEnv: nothing', () => {
    const { log, warnings } = recorder();
    expect(
      resolveCredentials({
        agent: { name: 'a', credentials: [] },
        harness: { name: 'demo', driverClass: 'StdioJson' },
        env: { AI_VENDOR_API_KEY__STDIOJSON: 'value' },
        log,
      }).env,
    ).toEqual({});
    expect(warnings).toEqual([]);
  });

  it('a harness whose apiKeyEnv cannot be resolved fails at once, naming the grant to add', () => {
    const keyless = () => resolveCredentials({ agent: { name: 'coder', credentials: [] }, harness, env: {} });
    expect(keyless).toThrow(CredentialMissingError);
    expect(keyless).toThrow(
      'harness "claude" takes its key from ANTHROPIC_API_KEY (apiKeyEnv), but agent "coder" has no credential grants and the vendor-key fallback ' +
        'AI_VENDOR_API_KEY__CLAUDECODE is not set on the worker; add credentials: [{ env: ANTHROPIC_API_KEY, from: <NAME> }] to agent "coder" in the catalog ' +
        '(where <NAME> is a key in the credential store or a server environment variable), or set AI_VENDOR_API_KEY__CLAUDECODE',
    );
    // Grants for other variables do not cover the key.
    const otherGrant = () =>
      resolveCredentials({ agent: { name: 'coder', credentials: [{ env: 'GITHUB_TOKEN', from: 'GH' }] }, harness, env: { GH: 'gh-value' } });
    expect(otherGrant).toThrow(/agent "coder" has no grant for ANTHROPIC_API_KEY; add credentials: \[\{ env: ANTHROPIC_API_KEY, from: <NAME> \}\] to agent "coder"/);
    // A key set as non-secret harness env (e.g. a local proxy's dummy key) counts as resolved.
    expect(resolveCredentials({ agent: { name: 'coder', credentials: [] }, harness: { ...harness, env: { ANTHROPIC_API_KEY: 'dummy' } }, env: {} }).env).toEqual({});
  });

  it('a missing grant throws a clear error', () => {
    const attempt = () =>
      resolveCredentials({
        agent: { name: 'coder', credentials: [{ env: 'GITHUB_TOKEN', from: 'GH_BOT' }] },
        harness,
        store: new MemoryCredentialStore(),
        env: { GITHUB_TOKEN: 'not-used', GH_BOT: '' },
      });
    expect(attempt).toThrow(CredentialMissingError);
    try {
      attempt();
    } catch (e) {
      expect((e as CredentialMissingError).code).toBe('CredentialMissing');
      expect((e as Error).message).toBe(
        'agent "coder" is granted GITHUB_TOKEN (from "GH_BOT"), but "GH_BOT" is neither in the credential store nor set in the server environment; set the server environment variable GH_BOT or add "GH_BOT" to the credential store',
      );
    }
  });
});

describe('JsonFileCredentialStore', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'dh-cred-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads values and warns when the file is group/world readable', async () => {
    const file = path.join(dir, 'creds.json');
    await writeFile(file, JSON.stringify({ TOKEN: 'tok-123456' }));
    await chmod(file, 0o644);
    const { log, warnings } = recorder();
    const store = new JsonFileCredentialStore(file, log);
    expect(store.get('TOKEN')).toBe('tok-123456');
    expect(store.get('toString')).toBeUndefined();
    expect(warnings[0]).toMatch(/readable by group or others \(mode 644\); run: chmod 600/);
    await chmod(file, 0o600);
    const quiet = recorder();
    new JsonFileCredentialStore(file, quiet.log);
    expect(quiet.warnings).toEqual([]);
  });

  it('rejects malformed files without echoing content', async () => {
    const file = path.join(dir, 'bad.json');
    await writeFile(file, '{"TOKEN": "secret-value",');
    await chmod(file, 0o600);
    expect(() => new JsonFileCredentialStore(file)).toThrow(/not valid JSON/);
    try {
      new JsonFileCredentialStore(file);
    } catch (e) {
      expect((e as Error).message).not.toContain('secret-value');
    }
  });
});

describe('createRedactor', () => {
  it('redacts raw and JSON-escaped values, skips short ones', () => {
    const redact = createRedactor(['sk-abc"def\\', 'abc', 'plain-secret']);
    const json = JSON.stringify({ key: 'sk-abc"def\\', other: 'plain-secret' });
    expect(redact(json)).toBe('{"key":"[REDACTED]","other":"[REDACTED]"}');
    expect(redact('raw sk-abc"def\\ and plain-secret twice plain-secret; abc stays')).toBe(
      'raw [REDACTED] and [REDACTED] twice [REDACTED]; abc stays',
    );
  });

  it('redacts a key spelled with JSON \\u escapes (as the runtime would decode it), and one with format characters inside', () => {
    const key = 'sk-live/Key+42';
    const redact = createRedactor([key]);
    const escaped = [...key].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    const mixed = `sk-\\u006civ\\u0065\\/Key+42`;
    for (const spelled of [escaped, escaped.toUpperCase().replace(/\\U/g, '\\u'), mixed, 'sk-li\u200bve/Key\u2060+42', `sk-live/K\u{e0041}ey+42`, 'sk-\ufefflive/Key+4\u200d2']) {
      const line = JSON.stringify({ step: 'success', result: 'x' }).replace('x', `key: ${spelled}!`);
      const out = redact(line);
      expect(out, spelled).toBe('{"step":"success","result":"key: [REDACTED]!"}');
      // What the runtime does next: parse it. Nothing of the key survives the decoding.
      expect(JSON.parse(out).result).toBe('key: [REDACTED]!');
    }
    // An escaped backslash is not an escape: `\\\\u0073` is the text "\\u0073", not "s"; decoded once more, it is caught.
    const double = [...key].map((c) => `\\\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
    expect(redact(double)).toBe(double);
    expect(redact(JSON.parse(`"${double}"`) as string)).toBe('[REDACTED]');
    // Text around it, other escapes and unrelated format characters stay as they were.
    expect(redact('a\\n\\u0041\u200bb')).toBe('a\\n\\u0041\u200bb');
  });

  it('replaces a longer secret whole when it contains a shorter one', () => {
    const redact = createRedactor(['abcd', 'abcdefgh']);
    expect(redact('x abcdefgh y abcd')).toBe('x [REDACTED] y [REDACTED]');
  });
});
