/**
 * The prepared codex home (src/adapters/home-template.ts) with the REAL pinned codex against the fake vendor: the
 * template holds codex's migrated databases with no row but their migration records and nothing a run keeps for
 * itself; a new home seeded from it runs turns as a fresh one does (resumed by fork, its usage counted), codex writes
 * into the seeded databases, and two seeded homes share no identity. A missing binary is a failure, never a skip.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { codex } from '../../src/adapters/codex-adapter.js';
import { runDriverTurn } from '../../src/adapters/engine.js';
import { collectTurn } from '../../src/adapters/fold.js';
import { HomeTemplates } from '../../src/adapters/home-template.js';
import type { HarnessStateStore } from '../../src/adapters/types.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';
import { LocalWorkspaceFs } from '../../src/sandbox/workspace-fs.js';
import { cliBinary, expectInstalled, startVendorFor } from './support/clis.js';
import { expectStrace, inetConnects, loopback, readStraceLogs, straceBin, straceConnectArgs } from './support/network.js';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// Not under /tmp: codex's sandbox helper breaks when CODEX_HOME is there.
const root = path.join(repo, '.data/live-tests', `home-template-${process.pid}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const executable = cliBinary('codex');
const spec = codex.homeTemplate!;

function workspace(name: string): string {
  const dir = path.join(root, name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

function memoryState(): HarnessStateStore {
  const values = new Map<string, unknown>();
  return { get: async (key) => values.get(key), set: async (key, value) => void values.set(key, value) };
}

describe('prepared codex home (real codex)', () => {
  it('holds the migrated databases, emptied, and nothing a run keeps for itself', async () => {
    expectInstalled(executable);
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    const entries = await templates.ready(spec, { executable, baseArgs: [], env: {} });
    expect(entries).toBeDefined();
    const names = entries!.map((e) => e.rel);
    const databases = names.filter((n) => n.endsWith('.sqlite'));
    expect(databases).toEqual(expect.arrayContaining(['state_5.sqlite', 'logs_2.sqlite', 'thread_history_1.sqlite']));
    for (const left of spec.leave) expect(names.some((n) => n === left || n.startsWith(`${left}/`)), left).toBe(false);
    expect(names.filter((n) => /-(wal|shm)$|\.lock$/.test(n))).toEqual([]);
    const scratch = workspace('inspect');
    for (const entry of entries!) {
      if (entry.type !== 'file' || !entry.rel.endsWith('.sqlite')) continue;
      const file = path.join(scratch, entry.rel);
      writeFileSync(file, entry.data);
      const db = new Database(file, { readonly: true });
      const tables = db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).pluck().all() as string[];
      for (const table of tables) {
        const rows = db.prepare(`SELECT count(*) FROM "${table}"`).pluck().get() as number;
        if (table === '_sqlx_migrations') expect(rows, `${entry.rel} keeps its migration records`).toBeGreaterThan(0);
        else expect(rows, `${entry.rel}: ${table}`).toBe(0);
      }
      db.close();
    }
  });

  it('the priming, run outside any sandbox, connects to nothing but loopback (strace over its whole process tree)', async () => {
    expectInstalled(executable);
    expectStrace();
    const traces = workspace('prime-trace');
    const prefix = path.join(traces, 'connect');
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    // The catalog's executable is strace, the CLI its argument: as the live workflow tests run it.
    expect(await templates.ready(spec, { executable: straceBin, baseArgs: [...straceConnectArgs(prefix), executable], env: {} })).toBeDefined();
    const connects = inetConnects(readStraceLogs(prefix));
    // Its one model call, to the worker's dropping port, at least; nothing off the machine.
    expect(connects.length).toBeGreaterThan(0);
    expect(connects.filter((address) => !loopback.has(address))).toEqual([]);
  });

  it('seeds a new home whose turns run as a fresh one: codex writes into its databases, resumes by fork, counts usage', async () => {
    expectInstalled(executable);
    const vendor = await startVendorFor('codex');
    const templates = new HomeTemplates({ warn: (line) => expect.fail(line) });
    try {
      // The first new home goes without (its template is built beside it); later ones are seeded.
      const first = workspace('first');
      expect(await templates.seed(spec, { executable, baseArgs: [], env: {}, workspacePath: first }, new LocalWorkspaceFs(first))).toBe(false);
      expect(existsSync(path.join(first, '.home'))).toBe(false);
      expect(await templates.ready(spec, { executable, baseArgs: [], env: {} })).toBeDefined();
      // What the engine's seeding did, turn by turn: a new home is seeded, an existing one never again.
      const seeded: boolean[] = [];
      const seed = templates.seed.bind(templates);
      templates.seed = async (...args) => {
        const done = await seed(...args);
        seeded.push(done);
        return done;
      };

      const installations: string[] = [];
      for (const name of ['a', 'b']) {
        const dir = workspace(name);
        const fs = new LocalWorkspaceFs(dir);
        const executor = new LocalExecutor({ workspacePath: dir });
        const state = memoryState();
        let session: string | undefined;
        for (const [turnNo, text] of [
          [1, '{"step":"actions","actions":[{"name":"echo","params":{"text":"one"}}]}'],
          [2, '{"step":"success","result":"two"}'],
        ] as const) {
          vendor.script({ text, usage: { input: 100 * turnNo, output: 10 } });
          const run = runDriverTurn(
            codex,
            {
              runId: `template-${name}`,
              harnessName: 'codex',
              executable,
              baseArgs: [],
              model: 'gpt-5.5',
              workspacePath: dir,
              hostWorkspacePath: dir,
              env: { OPENAI_API_KEY: 'sk-template-test' },
              baseUrl: vendor.url,
              timeoutMs: 60_000,
              prompt: `turn ${turnNo}`,
              turn: turnNo,
              state,
              ...(session ? { resumeSessionId: session } : {}),
            },
            { executor, fs, homeTemplates: templates },
          );
          const result = await collectTurn(run);
          expect(result.error, JSON.stringify(result.error)).toBeUndefined();
          expect(result.text).toBe(text);
          expect(result.usage.input).toBe(100 * turnNo);
          if (turnNo === 2) expect(result.sessionId).not.toBe(session);
          session = result.sessionId;
          await executor.killAll();
        }
        const home = path.join(dir, '.home', 'codex');
        // codex used the seeded database: its threads are there (the fork and its parent).
        const db = new Database(path.join(home, 'state_5.sqlite'), { readonly: true });
        expect(db.prepare('SELECT count(*) FROM threads').pluck().get()).toBeGreaterThanOrEqual(2);
        db.close();
        expect(readdirSync(path.join(home, 'skills')).length).toBeGreaterThan(0);
        installations.push(readFileSync(path.join(home, 'installation_id'), 'utf8'));
      }
      expect(seeded).toEqual([true, false, true, false]);
      expect(installations[0]).not.toBe(installations[1]);
      expect(vendor.unexpected).toEqual([]);
    } finally {
      await vendor.close();
    }
  });
});
