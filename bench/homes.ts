/**
 * What a fresh per-run CLI home costs (issue 22), and what the prepared home (src/adapters/home-template.ts) gives
 * back: codex's first turn in an empty `CODEX_HOME`, in a used one, and in a new home seeded from this worker's
 * template — the seeding through the sandbox's files counted in the turn, as a run pays it. The same `codex exec`
 * turn against the fake vendor (answering at once), interleaved, medians; and the priming's own time, once per
 * worker and codex version.
 * Run alone: `npx tsx bench/homes.ts [runs]`; in `npm run bench -- homes`.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { codex, codexConfigToml } from '../src/adapters/codex-adapter.js';
import { HomeTemplates } from '../src/adapters/home-template.js';
import { LocalWorkspaceFs } from '../src/sandbox/workspace-fs.js';
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
  /** Of `templateMs`: copying the template into the home. */
  readonly seedMs: number;
  /** Building the template (once per worker process and codex version). */
  readonly primeMs: number;
  readonly templateEntries: number;
  readonly templateBytes: number;
}

export async function benchHomes(runs = 6): Promise<HomesResult> {
  if (!existsSync(codexBin)) throw new Error(`bench homes needs the pinned codex: cd test/e2e/clis && npm install (${codexBin} is missing)`);
  const root = mkdtempSync(path.join(repo, '.data', 'bench-homes-'));
  const vendor = await startFakeVendor({ handlers: { '/v1/responses': openaiResponses }, fallback: () => ({ text: '{"step":"success","result":"ok"}' }) });
  const config = codexConfigToml({ baseUrl: `${vendor.url}/v1`, envKey: 'OPENAI_API_KEY', model: 'gpt-5.5' });
  const spec = codex.homeTemplate!;
  const templates = new HomeTemplates({ warn: (line) => console.error(line) });
  /** A workspace whose codex home is fresh, or seeded from the template (the seeding timed). */
  const workspace = async (name: string, seeded: number[] | undefined): Promise<string> => {
    const ws = path.join(root, name);
    mkdirSync(ws);
    if (seeded) {
      const started = performance.now();
      if (!(await templates.seed(spec, { executable: codexBin, baseArgs: [], env: {}, workspacePath: ws }, new LocalWorkspaceFs(ws)))) throw new Error('bench homes: the template was not seeded');
      seeded.push(performance.now() - started);
    }
    const h = path.join(ws, '.home', 'codex');
    mkdirSync(h, { recursive: true });
    writeFileSync(path.join(h, 'config.toml'), config);
    return ws;
  };
  const turn = async (ws: string): Promise<number> => {
    const started = performance.now();
    const child = spawn(codexBin, ['exec', '--json', '--skip-git-repo-check', '-c', 'sandbox_mode="read-only"', '-c', 'approval_policy="never"', '--', 'hi'], {
      cwd: ws,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: path.join(ws, '.home'), CODEX_HOME: path.join(ws, '.home', 'codex'), OPENAI_API_KEY: 'sk-bench' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.resume();
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-2000)));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    if (code !== 0) throw new Error(`codex exec exited ${code}: ${stderr}`);
    return performance.now() - started;
  };
  try {
    const used = await workspace('used', undefined);
    await turn(used);
    const primeStarted = performance.now();
    const entries = await templates.ready(spec, { executable: codexBin, baseArgs: [], env: {} });
    const primeMs = performance.now() - primeStarted;
    if (!entries) throw new Error('bench homes: no template (see the message above)');
    const fresh: number[] = [];
    const again: number[] = [];
    const seededTurn: number[] = [];
    const seeding: number[] = [];
    for (let i = 0; i < runs; i++) {
      const order = [
        async () => fresh.push(await turn(await workspace(`fresh-${i}`, undefined))),
        async () => again.push(await turn(used)),
        async () => {
          const before = seeding.length;
          const ws = await workspace(`template-${i}`, seeding);
          seededTurn.push((seeding[before] ?? 0) + (await turn(ws)));
        },
      ];
      for (let k = 0; k < order.length; k++) await order[(i + k) % order.length]!();
    }
    const bytes = entries.reduce((sum, e) => sum + (e.type === 'file' ? e.data.length : 0), 0);
    return { runs, freshMs: median(fresh), usedMs: median(again), templateMs: median(seededTurn), seedMs: median(seeding), primeMs, templateEntries: entries.length, templateBytes: bytes };
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
    `  new home seeded from the prepared template, the copy included:       ${ms(r.templateMs)}  (recovers ${ms(r.freshMs - r.templateMs)}; the copy ${r.seedMs.toFixed(1)} ms)`,
    `  the template: ${r.templateEntries} entries, ${(r.templateBytes / 1024).toFixed(0)} KiB, primed once per worker and codex version in ${ms(r.primeMs)}`,
  ];
}

export function printHomes(r: HomesResult): void {
  for (const line of homesLines(r)) console.log(line);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  printHomes(await benchHomes(Number(process.argv[2] ?? 6)));
}
