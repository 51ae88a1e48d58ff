/** Shared pieces of the attack tests: canaries outside the workspace, what runs leave behind, results. */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Ledger } from '../../src/ledger/types.js';
import { repoRoot } from '../support/worker.js';

export const flipperPath = path.join(repoRoot, 'test', 'security', 'flipper.mjs');

/** A directory outside every workspace with one file; `check()` throws if anything in it changed. */
export interface Canary {
  readonly dir: string;
  readonly secret: string;
  check(): void;
}

interface Snapshot {
  readonly entries: string[];
  readonly uid: number;
  readonly gid: number;
  readonly mode: number;
  readonly files: Record<string, { content: string; uid: number; mode: number; mtimeMs: number }>;
}

function snapshot(dir: string): Snapshot {
  const st = statSync(dir);
  const entries = readdirSync(dir).sort();
  const files: Snapshot['files'] = {};
  for (const name of entries) {
    const file = path.join(dir, name);
    const info = lstatSync(file);
    files[name] = { content: info.isFile() ? readFileSync(file, 'utf8') : '', uid: info.uid, mode: info.mode, mtimeMs: info.mtimeMs };
  }
  return { entries, uid: st.uid, gid: st.gid, mode: st.mode, files };
}

/** Watches an existing directory: `check()` throws if its entries, owner, mode or files changed. */
export function watchDir(dir: string): () => void {
  const before = JSON.stringify(snapshot(dir));
  return () => {
    const after = JSON.stringify(snapshot(dir));
    if (after !== before) throw new Error(`${dir} changed:\nbefore ${before}\nafter  ${after}`);
  };
}

export function makeCanary(label: string): Canary {
  const dir = mkdtempSync(path.join(os.tmpdir(), `dh-canary-${label}-`));
  const secret = `CANARY-${label}-${Math.random().toString(36).slice(2)}`;
  writeFileSync(path.join(dir, 'secret.txt'), secret);
  writeFileSync(path.join(dir, 'f'), secret);
  return { dir, secret, check: watchDir(dir) };
}

/** Every string and every byte field (decoded as UTF-8) in a Temporal history, so payloads are searchable. */
export function historyText(history: unknown): string {
  const parts: string[] = [];
  const seen = new Set<unknown>();
  const walk = (value: unknown): void => {
    if (value instanceof Uint8Array) parts.push(Buffer.from(value).toString('utf8'));
    else if (typeof value === 'string') parts.push(value);
    else if (value && typeof value === 'object' && !seen.has(value)) {
      seen.add(value);
      for (const v of Object.values(value)) walk(v);
    }
  };
  walk(history);
  return parts.join('\n');
}

/** The ledger's database file and its write-ahead log, as text. */
export function ledgerBytes(dataDir: string): string {
  const file = path.join(dataDir, 'ledger.sqlite');
  return [file, `${file}-wal`].filter(existsSync).map((f) => readFileSync(f).toString('latin1')).join('\n');
}

/** The outcome of every action step of a run, from the ledger. */
export async function actionOutcomes(ledger: Ledger, workflowId: string): Promise<{ name: string; ok: boolean; output?: unknown; error?: string }[]> {
  const steps = await ledger.listSteps(workflowId);
  return steps
    .filter((s) => s.type.startsWith('action:'))
    .map((s) => {
      const outcome = (s.payload as { outcome: { ok: boolean; output?: unknown; error?: string } }).outcome;
      return { name: s.type.slice('action:'.length), ...outcome };
    });
}

/** A directory others can read and enter (a sandbox user reads scripts and harnesses from it). */
export function publicDir(label: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), `dh-${label}-`));
  execFileSync('chmod', ['0755', dir]);
  return dir;
}

/** Writes a small JSON results file for the report (measured figures of each attack). */
export function recordFigures(name: string, figures: Record<string, unknown>): void {
  const dir = path.join(os.tmpdir(), 'dh-security-figures');
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, `${name}.json`), `${JSON.stringify(figures, null, 2)}\n`);
  console.log(`[security figures] ${name}: ${JSON.stringify(figures)}`);
}
