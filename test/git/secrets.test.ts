/**
 * The secret scan before a push (src/git/secrets.ts), on patches the real `git diff --binary` makes: a held value in
 * what the patch adds — as written, base64 at every alignment in both alphabets, URL-encoded, inside a binary file —
 * is found and named; what the patch removes or only shows as context is not; short values are not scanned; a large
 * patch is scanned in bounded time; and the answer holds names only.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIN_SCANNED_SECRET_CHARS, SecretScanIncomplete, encodedForms, findSecrets, findSecretsInText, type NamedSecret } from '../../src/git/secrets.js';

let root: string;
let repoNo = 0;

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'dh-secrets-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The patch git makes (`diff --binary`, as the delivery records it) from `before` to `after`; null removes a file. */
function diffOf(before: Record<string, string | Buffer>, after: Record<string, string | Buffer | null>): string {
  repoNo += 1;
  const dir = path.join(root, `repo-${repoNo}`);
  mkdirSync(dir);
  const run = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', '-c', 'core.autocrlf=false', ...args], { cwd: dir, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, env: { PATH: process.env.PATH, HOME: dir, GIT_CONFIG_NOSYSTEM: '1' } });
  run('init', '-q');
  const write = (files: Record<string, string | Buffer | null>) => {
    for (const [name, content] of Object.entries(files)) {
      if (content === null) rmSync(path.join(dir, name));
      else writeFileSync(path.join(dir, name), content);
    }
  };
  write(before);
  run('add', '-A');
  run('commit', '-q', '--allow-empty', '-m', 'before');
  write(after);
  run('add', '-A');
  return run('diff', '--cached', '--binary', '--no-color', 'HEAD');
}

/** Lines of filler text around the line that matters, so hunks have context. */
const filler = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag} line ${i}`).join('\n');

// Its base64 has `+` and `/` at every alignment (checked below), so the URL-safe alphabet differs.
const apiKey: NamedSecret = { name: 'vendor-api-key', value: 'sk-live~~??>>??~~0123456789' };
const password: NamedSecret = { name: 'db-password', value: 'pass word/with+plus=eq&more' };
const secrets = [apiKey, password];

describe('findSecrets: what the patch adds', () => {
  it('finds a value as written in an added line, by name, and only names come back', () => {
    const patch = diffOf({ 'app.js': `${filler(5, 'a')}\n` }, { 'app.js': `${filler(5, 'a')}\nconst key = "${apiKey.value}";\n` });
    expect(patch).toContain(`+const key = "${apiKey.value}";`);
    const found = findSecrets(patch, secrets);
    expect(found).toEqual(['vendor-api-key']);
    expect(JSON.stringify(found)).not.toContain(apiKey.value);
  });

  it('finds its base64 at each alignment inside a longer base64 string, in both alphabets', () => {
    for (let offset = 0; offset < 6; offset += 1) {
      const bytes = Buffer.concat([Buffer.from('prefix'.slice(0, offset)), Buffer.from(apiKey.value), Buffer.from('!tail')]);
      for (const alphabet of ['base64', 'base64url'] as const) {
        const encoded = bytes.toString(alphabet);
        if (alphabet === 'base64') expect(encoded, `offset ${offset}`).toMatch(/[+/]/);
        expect(encoded).not.toContain(apiKey.value);
        const patch = diffOf({ 'config.yaml': 'a: 1\n' }, { 'config.yaml': `a: 1\nblob: ${encoded}\n` });
        expect(findSecrets(patch, [apiKey]), `${alphabet} at offset ${offset}`).toEqual(['vendor-api-key']);
      }
    }
  });

  it('finds its URL-encoded forms (upper and lower case %XX, + for a space)', () => {
    const upper = encodeURIComponent(password.value);
    expect(upper).toMatch(/%2F/);
    const variants = [upper, upper.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()), upper.replace(/%20/g, '+'), new URLSearchParams({ p: password.value }).toString().slice(2)];
    for (const encoded of variants) {
      const patch = diffOf({ '.env': 'X=1\n' }, { '.env': `X=1\nDATABASE_URL=postgres://app:${encoded}@db/app\n` });
      expect(findSecrets(patch, secrets), encoded).toEqual(['db-password']);
    }
  });

  it('finds the forms other encoders make: RFC 3986 (`!\'()*` escaped too: Python\'s quote, Go) and form encoding (URLSearchParams: `~` too)', () => {
    const odd: NamedSecret = { name: 'odd-password', value: "it's~(really)*secret!" };
    const strict = encodeURIComponent(odd.value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
    const form = new URLSearchParams([['p', odd.value]]).toString().slice(2);
    for (const encoded of [strict, strict.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()), form, form.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase())]) {
      expect(encoded).not.toBe(encodeURIComponent(odd.value));
      const patch = diffOf({ 'a.txt': 'a\n' }, { 'a.txt': `a\ncurl -d "password=${encoded}"\n` });
      expect(findSecrets(patch, [odd]), encoded).toEqual(['odd-password']);
    }
  });

  it('finds a value in a new file\'s path', () => {
    const patch = diffOf({ 'README.md': 'hi\n' }, { [`leak-${apiKey.value.replace(/[?>~]/g, 'x')}.txt`]: 'x\n' });
    const inPath: NamedSecret = { name: 'path-key', value: apiKey.value.replace(/[?>~]/g, 'x') };
    expect(findSecrets(patch, [inPath])).toEqual(['path-key']);
  });

  it('does not find a value that is only in removed or context lines', () => {
    const before = `${filler(3, 'x')}\nconst key = "${apiKey.value}";\n${filler(3, 'y')}\n`;
    const removed = diffOf({ 'app.js': before }, { 'app.js': `${filler(3, 'x')}\n${filler(3, 'y')}\n` });
    expect(removed).toContain(`-const key = "${apiKey.value}";`);
    expect(findSecrets(removed, secrets)).toEqual([]);

    const context = diffOf({ 'app.js': before }, { 'app.js': `${filler(3, 'x')}\nconst key = "${apiKey.value}";\nconst added = 1;\n${filler(3, 'y')}\n` });
    expect(context).toContain(` const key = "${apiKey.value}";`);
    expect(context).toContain('+const added = 1;');
    expect(findSecrets(context, secrets)).toEqual([]);

    const deleted = diffOf({ 'app.js': before, 'keep.txt': 'k\n' }, { 'app.js': null });
    expect(findSecrets(deleted, secrets)).toEqual([]);
  });

  it(`does not scan values under ${MIN_SCANNED_SECRET_CHARS} characters`, () => {
    const short: NamedSecret = { name: 'short', value: 'x'.repeat(MIN_SCANNED_SECRET_CHARS - 1) };
    const exact: NamedSecret = { name: 'exact', value: 'Q'.repeat(MIN_SCANNED_SECRET_CHARS) };
    const patch = diffOf({ 'a.txt': 'a\n' }, { 'a.txt': `a\n${short.value} ${exact.value}\n` });
    expect(findSecrets(patch, [short])).toEqual([]);
    expect(findSecrets(patch, [short, exact])).toEqual(['exact']);
    expect(findSecretsInText(short.value, [short])).toEqual([]);
    expect(findSecrets(patch, [])).toEqual([]);
  });

  it('names each secret once, in the order given', () => {
    const patch = diffOf({ 'a.txt': 'a\n' }, { 'a.txt': `a\n${password.value}\n${apiKey.value}\n${apiKey.value}\n` });
    const second: NamedSecret = { name: 'vendor-api-key', value: 'another-value-of-the-same-grant' };
    expect(findSecrets(patch, [apiKey, second, password])).toEqual(['vendor-api-key', 'db-password']);
    expect(findSecrets(patch, [password, apiKey])).toEqual(['db-password', 'vendor-api-key']);
  });
});

describe('findSecrets: binary hunks', () => {
  const binaryWith = (value: string) => Buffer.concat([Buffer.from([0, 0, 0, 1, 2, 3, 0, 255, 0]), Buffer.from(value), Buffer.from([0, 0, 7, 0, 0])]);
  /** Deterministic bytes git cannot take for text. */
  const noise = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 2654435761) >>> 24));

  it('finds a value inside a new binary file (a GIT binary patch literal hunk)', () => {
    const patch = diffOf({ 'README.md': 'hi\n' }, { 'data.bin': binaryWith(apiKey.value) });
    expect(patch).toContain('GIT binary patch');
    expect(patch).toMatch(/^literal \d+$/m);
    expect(patch).not.toContain(apiKey.value); // only the decoded content holds it
    expect(findSecrets(patch, secrets)).toEqual(['vendor-api-key']);
    // The same content with no secret in it: nothing.
    expect(findSecrets(diffOf({ 'README.md': 'hi\n' }, { 'data.bin': binaryWith('nothing-held-here-at-all') }), secrets)).toEqual([]);
  });

  it('finds a value a delta hunk inserts into a binary file; a value only in the old content (the reverse hunk) is not found', () => {
    const old = noise(8192);
    const inserted = Buffer.concat([old.subarray(0, 4000), Buffer.from(apiKey.value), old.subarray(4000)]);
    const added = diffOf({ 'data.bin': old }, { 'data.bin': inserted });
    expect(added).toMatch(/^delta \d+$/m);
    expect(findSecrets(added, secrets)).toEqual(['vendor-api-key']);

    const removed = diffOf({ 'data.bin': inserted }, { 'data.bin': old });
    expect(removed).toContain('GIT binary patch');
    expect(findSecrets(removed, secrets)).toEqual([]);
    const gone = diffOf({ 'data.bin': binaryWith(apiKey.value), 'keep.txt': 'k\n' }, { 'data.bin': null });
    expect(gone).toContain('GIT binary patch');
    expect(findSecrets(gone, secrets)).toEqual([]);
  });

  it('throws SecretScanIncomplete for a binary hunk it cannot decode or one over maxBinaryBytes, rather than answer "none"', () => {
    const patch = diffOf({ 'README.md': 'hi\n' }, { 'data.bin': binaryWith(apiKey.value) });
    expect(() => findSecrets(patch, secrets, { maxBinaryBytes: 8 })).toThrow(SecretScanIncomplete);
    const lines = patch.split('\n');
    const at = lines.findIndex((l) => /^literal \d+$/.test(l)) + 1;
    lines[at] = `${lines[at]!.slice(0, 3)}"${lines[at]!.slice(4)}`; // `"` is no base85 digit
    expect(() => findSecrets(lines.join('\n'), secrets)).toThrow(SecretScanIncomplete);
  });
});

describe('findSecrets: a large patch', () => {
  it('scans a 50 MB patch of added lines in under 5 s', () => {
    const lineChars = 100;
    const lines = Math.ceil((50 * 1024 * 1024) / lineChars);
    const parts: string[] = ['diff --git a/big.txt b/big.txt\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/big.txt\n', `@@ -0,0 +1,${lines} @@\n`];
    // Near misses of the value (its first 20 characters) and of its base64, on every 7th line; the value itself last.
    const near = `+${apiKey.value.slice(0, 20)}`.padEnd(lineChars - 1, 'a');
    const nearB64 = `+${Buffer.from(apiKey.value).toString('base64').slice(0, 30)}`.padEnd(lineChars - 1, 'A');
    for (let i = 0; i < lines - 1; i += 1) parts.push(i % 7 === 0 ? near : i % 7 === 3 ? nearB64 : `+${String(i).padStart(12, '0')}`.padEnd(lineChars - 1, 'x'), '\n');
    parts.push(`+${apiKey.value}\n`);
    const patch = parts.join('');
    expect(patch.length).toBeGreaterThan(50 * 1024 * 1024);
    const absent: NamedSecret = { name: 'absent', value: 'never-written-anywhere-0123' };
    const started = performance.now();
    const found = findSecrets(patch, [absent, apiKey, password]);
    const elapsed = performance.now() - started;
    expect(found).toEqual(['vendor-api-key']);
    expect(elapsed).toBeLessThan(5_000);
  });
});

describe('findSecretsInText and encodedForms', () => {
  it('finds a value in a commit message, as written or encoded; names only', () => {
    const message = `Add the client\n\nUses ${Buffer.from(`x:${apiKey.value}`).toString('base64')} for auth.\n`;
    expect(findSecretsInText(message, secrets)).toEqual(['vendor-api-key']);
    expect(findSecretsInText(`token=${encodeURIComponent(password.value)}`, secrets)).toEqual(['db-password']);
    expect(findSecretsInText('Add the client\n\nNo secrets here.\n', secrets)).toEqual([]);
  });

  it('encodedForms holds the value, six base64 forms at most and the URL-encoded ones, none empty', () => {
    const forms = encodedForms(apiKey.value);
    expect(forms[0]).toBe(apiKey.value);
    expect(forms).toContain(Buffer.from(apiKey.value).toString('base64').replace(/=+$/, '').slice(0, Math.floor((8 * apiKey.value.length) / 6)));
    expect(forms).toContain(encodeURIComponent(apiKey.value));
    expect(forms.every((f) => f.length > 0)).toBe(true);
    expect(new Set(forms).size).toBe(forms.length);
  });
});
