/**
 * Prepared homes (src/adapters/home-template.ts) over a scripted CLI that stands in for a real one's first run:
 * what a template keeps and drops (links, journals, a run's own files, rows), that the priming is stopped at its first
 * model call with everything it started, that it gets no worker secret, and what happens when a priming fails, hangs
 * or leaves too much. The real codex is in test/e2e/home-template-live.test.ts.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import type { HomeTemplateSpec } from '../../src/adapters/driver.js';
import { HomeTemplates } from '../../src/adapters/home-template.js';
import { LocalWorkspaceFs } from '../../src/sandbox/workspace-fs.js';
import { waitUntilGone } from '../support/processes.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'home-template-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const sqlite = createRequire(import.meta.url).resolve('better-sqlite3');

/** A CLI whose "first run" is `body` (Node, with `home`, `url`, `out` and `Database` in scope). */
function fakeCli(name: string, body: string): string {
  const file = path.join(root, name);
  writeFileSync(
    file,
    [
      '#!/usr/bin/env node',
      "const fs = require('node:fs'); const path = require('node:path'); const net = require('node:net');",
      `const Database = require(${JSON.stringify(sqlite)});`,
      'const home = process.env.FAKE_HOME; const url = new URL(process.env.FAKE_URL); const out = process.env.FAKE_OUT;',
      body,
    ].join('\n'),
  );
  chmodSync(file, 0o755);
  return file;
}

const callModel = "net.connect(Number(url.port), url.hostname).on('error', () => {}); setInterval(() => {}, 1000);";

function spec(out: string): HomeTemplateSpec {
  return {
    dir: 'fake',
    prime: ({ home, baseUrl }) => ({ args: ['first-run'], env: { FAKE_HOME: home, FAKE_URL: baseUrl, FAKE_OUT: out }, files: { 'config.json': '{"vendor":"none"}' } }),
    leave: ['config.json', 'identity'],
    empty: ['tmp'],
    keepTables: ['migrations'],
  };
}

function workspace(): { dir: string; fs: LocalWorkspaceFs } {
  const dir = mkdtempSync(path.join(root, 'ws-'));
  return { dir, fs: new LocalWorkspaceFs(dir) };
}

describe('prepared homes', () => {
  it('keeps files, directories and databases emptied of rows; drops links, journals and what a run keeps; stops the first run at its model call', async () => {
    const out = path.join(root, 'good-out');
    mkdirSync(out);
    process.env.DH_HOME_TEMPLATE_TEST_SECRET = 'sk-must-not-reach';
    const cli = fakeCli(
      'good',
      `
      fs.writeFileSync(path.join(out, 'env.json'), JSON.stringify(process.env));
      fs.writeFileSync(path.join(out, 'config-seen'), fs.readFileSync(path.join(home, 'config.json')));
      fs.mkdirSync(path.join(home, 'skills/a'), { recursive: true });
      fs.writeFileSync(path.join(home, 'skills/a/SKILL.md'), 'a skill', { mode: 0o640 });
      fs.writeFileSync(path.join(home, 'identity'), 'installation-1');
      fs.symlinkSync('/etc/passwd', path.join(home, 'link'));
      fs.symlinkSync('/etc', path.join(home, 'skills/dirlink'));
      fs.mkdirSync(path.join(home, 'tmp'));
      fs.writeFileSync(path.join(home, 'tmp/scratch'), 'junk');
      const db = new Database(path.join(home, 'state.sqlite'));
      db.pragma('journal_mode = WAL');
      db.exec("CREATE TABLE migrations (version INTEGER); INSERT INTO migrations VALUES (1), (2); CREATE TABLE threads (body TEXT); INSERT INTO threads VALUES ('secret-row-text')");
      // The database stays open: its rows are in the journal (-wal) when the CLI is killed.
      const child = require('node:child_process').spawn('sleep', ['60'], { stdio: 'ignore' });
      fs.writeFileSync(path.join(out, 'child.pid'), String(child.pid));
      ${callModel}`,
    );
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    const started = Date.now();
    const entries = await templates.ready(spec(out), { executable: cli, baseArgs: [], env: {} });
    delete process.env.DH_HOME_TEMPLATE_TEST_SECRET;
    expect(Date.now() - started).toBeLessThan(5000);
    expect(entries?.map((e) => `${e.type} ${e.rel}`)).toEqual(['dir skills', 'dir skills/a', 'file skills/a/SKILL.md', 'file state.sqlite', 'dir tmp']);
    expect(readFileSync(path.join(out, 'config-seen'), 'utf8')).toBe('{"vendor":"none"}');
    const env = JSON.parse(readFileSync(path.join(out, 'env.json'), 'utf8')) as Record<string, string>;
    expect(env.DH_HOME_TEMPLATE_TEST_SECRET).toBeUndefined();
    expect(Object.keys(env).sort()).toEqual(expect.arrayContaining(['FAKE_HOME', 'FAKE_OUT', 'FAKE_URL', 'HOME', 'PATH']));
    // Killed with its process group at the model call: what it started is gone too.
    await waitUntilGone([Number(readFileSync(path.join(out, 'child.pid'), 'utf8'))], 3000);

    const skill = entries!.find((e) => e.rel === 'skills/a/SKILL.md');
    expect(skill?.type === 'file' && skill.mode).toBe(0o640);
    const db = entries!.find((e) => e.rel === 'state.sqlite');
    if (db?.type !== 'file') throw new Error('no database in the template');
    expect(db.data.includes('secret-row-text')).toBe(false);

    // Seeded into a new home: the files as the template has them, the database readable without its journal.
    const { dir, fs } = workspace();
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: dir }, fs)).toBe(true);
    const home = path.join(dir, '.home', 'fake');
    expect(readFileSync(path.join(home, 'skills/a/SKILL.md'), 'utf8')).toBe('a skill');
    expect(existsSync(path.join(home, 'identity'))).toBe(false);
    expect(existsSync(path.join(home, 'link'))).toBe(false);
    expect(existsSync(path.join(home, 'tmp/scratch'))).toBe(false);
    expect(existsSync(path.join(home, 'tmp'))).toBe(true);
    const copy = new Database(path.join(home, 'state.sqlite'));
    expect(copy.prepare('SELECT count(*) FROM migrations').pluck().get()).toBe(2);
    expect(copy.prepare('SELECT count(*) FROM threads').pluck().get()).toBe(0);
    expect(copy.pragma('journal_mode', { simple: true })).toBe('wal');
    copy.close();

    // A home that exists is never seeded again, nor written.
    writeFileSync(path.join(home, 'skills/a/SKILL.md'), 'the harness changed it');
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: dir }, fs)).toBe(false);
    expect(readFileSync(path.join(home, 'skills/a/SKILL.md'), 'utf8')).toBe('the harness changed it');
  });

  it('a link planted where the home or its parent would be is never written through', async () => {
    const out = path.join(root, 'link-out');
    mkdirSync(out);
    const cli = fakeCli('linked', `fs.writeFileSync(path.join(home, 'v'), 'template'); ${callModel}`);
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    await templates.ready(spec(out), { executable: cli, baseArgs: [], env: {} });
    const outside = mkdtempSync(path.join(root, 'outside-'));
    // `.home/fake` a link to a directory outside the workspace: it exists, so it is not a new home.
    const a = workspace();
    mkdirSync(path.join(a.dir, '.home'));
    symlinkSync(outside, path.join(a.dir, '.home', 'fake'));
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: a.dir }, a.fs)).toBe(false);
    // `.home` itself a link outside: the no-follow walk refuses it (the turn fails to start, as prepare's write would).
    const b = workspace();
    symlinkSync(outside, path.join(b.dir, '.home'));
    await expect(templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: b.dir }, b.fs)).rejects.toMatchObject({ code: 'SymlinkRefused' });
    expect(readdirSync(outside)).toEqual([]);
  });

  it('a new home goes without while its template is built, and a changed executable is a new version', async () => {
    const out = path.join(root, 'version-out');
    mkdirSync(out);
    const cli = fakeCli('versioned', `fs.writeFileSync(path.join(home, 'v'), 'one'); ${callModel}`);
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    const first = workspace();
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: first.dir }, first.fs)).toBe(false);
    expect(existsSync(path.join(first.dir, '.home'))).toBe(false);
    await templates.ready(spec(out), { executable: cli, baseArgs: [], env: {} });
    const second = workspace();
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: second.dir }, second.fs)).toBe(true);
    expect(readFileSync(path.join(second.dir, '.home/fake/v'), 'utf8')).toBe('one');

    // Reinstalled: the next new home goes without again, and then gets the new version's template.
    fakeCli('versioned', `fs.writeFileSync(path.join(home, 'v'), 'two, longer'); ${callModel}`);
    const third = workspace();
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: third.dir }, third.fs)).toBe(false);
    await templates.ready(spec(out), { executable: cli, baseArgs: [], env: {} });
    const fourth = workspace();
    expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: fourth.dir }, fourth.fs)).toBe(true);
    expect(readFileSync(path.join(fourth.dir, '.home/fake/v'), 'utf8')).toBe('two, longer');
  });

  it.each([
    ['ends before its first model call', 'exits', "fs.writeFileSync(path.join(home, 'x'), 'x'); console.error('no vendor configured'); process.exit(3);", /ended \(exit 3\) before its first model call: no vendor configured/, 500],
    ['never calls and never ends', 'hangs', 'setInterval(() => {}, 1000);', /ended \(exit null\) before its first model call/, 500],
    ['leaves more files than a template holds', 'floods', `for (let i = 0; i < 2100; i++) fs.writeFileSync(path.join(home, 'f' + i), ''); ${callModel}`, /more than 2000 files/, 30_000],
    // Its own priming deadline: 2,100 file creations took 0.8 s of a loaded disk here, past the hang case's 500 ms.
  ])('a first run that %s gives no template: told once, homes go without, not tried again within retryMs', async (_what, name, body, message, primeTimeoutMs) => {
    const out = path.join(root, `${name}-out`);
    mkdirSync(out);
    const cli = fakeCli(name, body);
    const warnings: string[] = [];
    const templates = new HomeTemplates({ warn: (line) => warnings.push(line), primeTimeoutMs });
    expect(await templates.ready(spec(out), { executable: cli, baseArgs: [], env: {} })).toBeUndefined();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(cli);
    expect(warnings[0]).toMatch(message);
    expect(warnings[0]).toContain('every fresh home does its own first run');
    for (let i = 0; i < 2; i++) {
      const { dir, fs } = workspace();
      expect(await templates.seed(spec(out), { executable: cli, baseArgs: [], env: {}, workspacePath: dir }, fs)).toBe(false);
    }
    await templates.ready(spec(out), { executable: cli, baseArgs: [], env: {} });
    expect(warnings).toHaveLength(1);
  });

  it('a failed priming is tried again by the first new home after retryMs, and then seeds', async () => {
    const out = path.join(root, 'retry-out');
    mkdirSync(out);
    writeFileSync(path.join(out, 'mode'), 'fail');
    const cli = fakeCli('retry', `if (fs.readFileSync(path.join(out, 'mode'), 'utf8') === 'fail') process.exit(4); fs.writeFileSync(path.join(home, 'v'), 'ok'); ${callModel}`);
    const warnings: string[] = [];
    const templates = new HomeTemplates({ warn: (line) => warnings.push(line), retryMs: 300 });
    const cliOf = { executable: cli, baseArgs: [], env: {} };
    expect(await templates.ready(spec(out), cliOf)).toBeUndefined();
    writeFileSync(path.join(out, 'mode'), 'works now');
    // Within retryMs: still the failure, nothing primed.
    expect(await templates.ready(spec(out), cliOf)).toBeUndefined();
    expect(warnings).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 350));
    const first = workspace();
    expect(await templates.seed(spec(out), { ...cliOf, workspacePath: first.dir }, first.fs)).toBe(false);
    expect(await templates.ready(spec(out), cliOf)).toBeDefined();
    const second = workspace();
    expect(await templates.seed(spec(out), { ...cliOf, workspacePath: second.dir }, second.fs)).toBe(true);
    expect(readFileSync(path.join(second.dir, '.home/fake/v'), 'utf8')).toBe('ok');
    expect(warnings).toHaveLength(1);
  });

  it('an executable that is not there gives no template and no priming', async () => {
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    const { dir, fs } = workspace();
    const missing = path.join(root, 'not-installed');
    expect(await templates.seed(spec(root), { executable: missing, baseArgs: [], env: {}, workspacePath: dir }, fs)).toBe(false);
    expect(await templates.ready(spec(root), { executable: missing, baseArgs: [], env: {} })).toBeUndefined();
    expect(await templates.ready(spec(root), { executable: 'no-such-cli-on-path', baseArgs: [], env: {} })).toBeUndefined();
  });

  it("a bare name is the CLI on the turn's own PATH, not the worker's: each its own template", async () => {
    const out = path.join(root, 'path-out');
    mkdirSync(out);
    const dirs = ['path-a', 'path-b'].map((d) => path.join(root, d));
    for (const [i, dir] of dirs.entries()) {
      mkdirSync(dir);
      writeFileSync(path.join(dir, 'fakecli'), readFileSync(fakeCli(`fakecli-${i}`, `fs.writeFileSync(path.join(home, 'v'), 'from ${i}'); ${callModel}`)));
      chmodSync(path.join(dir, 'fakecli'), 0o755);
    }
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    const cliOn = (dir: string) => ({ executable: 'fakecli', baseArgs: [], env: { PATH: `${dir}:/usr/bin:/bin:${path.dirname(process.execPath)}` } });
    // Without a PATH of its own the turn gets the minimal one, which has no fakecli: nothing to prime.
    expect(await templates.ready(spec(out), { executable: 'fakecli', baseArgs: [], env: {} })).toBeUndefined();
    for (const [i, dir] of dirs.entries()) {
      await templates.ready(spec(out), cliOn(dir));
      const { dir: ws, fs } = workspace();
      expect(await templates.seed(spec(out), { ...cliOn(dir), workspacePath: ws }, fs)).toBe(true);
      expect(readFileSync(path.join(ws, '.home/fake/v'), 'utf8')).toBe(`from ${i}`);
    }
  });
});
