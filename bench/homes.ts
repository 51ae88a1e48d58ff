/**
 * What a fresh per-run CLI home costs (issue 22): codex's first run in an empty `CODEX_HOME` against a used one, and
 * against a home seeded from a template — the state databases codex's own migrations create (every row deleted, the
 * schema and migration records kept) and the skills it unpacks — which is what a per-host, per-version prepared home
 * could give. The same `codex exec` turn against the fake vendor (answering at once), interleaved, medians.
 * Run alone: `npx tsx bench/homes.ts [runs]`; in `npm run bench -- homes`.
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { codexConfigToml } from '../src/adapters/codex-adapter.js';
import { openaiResponses } from '../test/e2e/fake-vendor/openai-responses.js';
import { startFakeVendor } from '../test/e2e/fake-vendor/server.js';
import { median } from './stats.js';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const codexBin = path.join(repo, 'test/e2e/clis/node_modules/.bin/codex');

export interface HomesResult {
  readonly runs: number;
  readonly freshMs: number;
  readonly usedMs: number;
  readonly templateMs: number;
  /** What the template holds. */
  readonly templateFiles: readonly string[];
}

/** Files a first run leaves that are the run's own, never a template's: its session, logs, locks, scratch. */
const ownFiles = new Set(['config.toml', 'sessions', 'shell_snapshots', 'tmp', 'thread-writer-locks', 'installation_id', '.sandbox_migration']);

export async function benchHomes(runs = 6): Promise<HomesResult> {
  if (!existsSync(codexBin)) throw new Error(`bench homes needs the pinned codex: cd test/e2e/clis && npm install (${codexBin} is missing)`);
  const root = mkdtempSync(path.join(repo, '.data', 'bench-homes-'));
  const vendor = await startFakeVendor({ handlers: { '/v1/responses': openaiResponses }, fallback: () => ({ text: '{"step":"success","result":"ok"}' }) });
  const config = codexConfigToml({ baseUrl: `${vendor.url}/v1`, envKey: 'OPENAI_API_KEY', model: 'gpt-5.5' });
  const home = (name: string): string => {
    const h = path.join(root, name, '.home', 'codex');
    mkdirSync(h, { recursive: true });
    writeFileSync(path.join(h, 'config.toml'), config);
    return h;
  };
  const turn = async (h: string): Promise<number> => {
    const workspace = path.dirname(path.dirname(h));
    const started = performance.now();
    const child = spawn(codexBin, ['exec', '--json', '--skip-git-repo-check', '-c', 'sandbox_mode="read-only"', '-c', 'approval_policy="never"', '--', 'hi'], {
      cwd: workspace,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: workspace, CODEX_HOME: h, OPENAI_API_KEY: 'sk-bench' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.resume();
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-2000)));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    if (code !== 0) throw new Error(`codex exec exited ${code}: ${stderr}`);
    return performance.now() - started;
  };
  try {
    const used = home('used');
    await turn(used);
    // The template: what the first run made that is not the run's own, its databases emptied of rows.
    const template = path.join(root, 'template');
    mkdirSync(template);
    const templateFiles: string[] = [];
    for (const f of readdirSync(used)) {
      if (ownFiles.has(f) || f.startsWith('logs_') || /-(wal|shm)$/.test(f) || f.endsWith('.lock')) continue;
      if (f.endsWith('.sqlite')) {
        const db = new Database(path.join(used, f), { readonly: true });
        await db.backup(path.join(template, f));
        db.close();
        const copy = new Database(path.join(template, f));
        const tables = copy.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('_sqlx_migrations', 'sqlite_sequence') AND name NOT LIKE 'sqlite_%'").all() as { name: string }[];
        for (const { name } of tables) copy.prepare(`DELETE FROM "${name.replaceAll('"', '""')}"`).run();
        copy.pragma('journal_mode = DELETE');
        copy.exec('VACUUM');
        copy.close();
      } else cpSync(path.join(used, f), path.join(template, f), { recursive: true });
      templateFiles.push(f);
    }
    const fresh: number[] = [];
    const again: number[] = [];
    const seeded: number[] = [];
    for (let i = 0; i < runs; i++) {
      const order = [
        async () => fresh.push(await turn(home(`fresh-${i}`))),
        async () => again.push(await turn(used)),
        async () => {
          const h = home(`template-${i}`);
          cpSync(template, h, { recursive: true });
          seeded.push(await turn(h));
        },
      ];
      for (let k = 0; k < order.length; k++) await order[(i + k) % order.length]!();
    }
    return { runs, freshMs: median(fresh), usedMs: median(again), templateMs: median(seeded), templateFiles: templateFiles.sort() };
  } finally {
    await vendor.close();
    rmSync(root, { recursive: true, force: true });
  }
}

export function homesLines(r: HomesResult): string[] {
  const ms = (v: number) => `${v.toFixed(0)} ms`;
  return [
    `codex exec, one turn against the fake vendor, median of ${r.runs} (interleaved):`,
    `  fresh CODEX_HOME (what every run of scope run pays on its first turn): ${ms(r.freshMs)}`,
    `  used home (a second turn of a run):                                  ${ms(r.usedMs)}  (fresh − used ${ms(r.freshMs - r.usedMs)})`,
    `  home seeded from a template (${r.templateFiles.join(', ')}): ${ms(r.templateMs)}  (recovers ${ms(r.freshMs - r.templateMs)} of it)`,
  ];
}

export function printHomes(r: HomesResult): void {
  for (const line of homesLines(r)) console.log(line);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  printHomes(await benchHomes(Number(process.argv[2] ?? 6)));
}
