/** A catalog around the scripted test harness: each test writes a script and names it in the task. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from './worker.js';

export const scriptedHarnessPath = path.join(repoRoot, 'test', 'harnesses', 'scripted-harness.mjs');

/** One scripted turn; see test/harnesses/scripted-harness.mjs for the fields. */
export type ScriptStep = Record<string, unknown>;

export interface ScriptBook {
  readonly dir: string;
  /** Writes a script and returns the task text that selects it. */
  write(name: string, turns: ScriptStep[], task?: string): string;
}

export function scriptBook(): ScriptBook {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-scripts-'));
  return {
    dir,
    write(name, turns, task = 'do the scripted thing') {
      writeFileSync(path.join(dir, `${name}.json`), JSON.stringify({ turns }));
      return `${task} script:${name}`;
    },
  };
}

type Obj = Record<string, unknown>;

/** The scripted harness without native resume (`stateless`): every turn replays the conversation. */
export function statelessHarness(book: ScriptBook): Obj {
  return {
    name: 'stateless',
    driverClass: 'StdioJson',
    executable: process.execPath,
    args: [scriptedHarnessPath, '--scripts', book.dir, '--stateless'],
    active: true,
    vendor: 'testvendor',
    model: 'scripted-1',
    capabilities: { sessionResume: false },
    prices: { input: 1, output: 2 },
  };
}

/** A catalog with the scripted harness, a default `scripted` agent, and any extra agents/harnesses. */
export function scriptedCatalog(book: ScriptBook, extra: { agents?: Obj[]; harnesses?: Obj[]; actions?: Obj[]; agent?: Obj } = {}): Obj {
  return {
    harnesses: [
      {
        name: 'scripted',
        driverClass: 'StdioJson',
        executable: process.execPath,
        args: [scriptedHarnessPath, '--scripts', book.dir],
        active: true,
        vendor: 'testvendor',
        model: 'scripted-1',
        prices: { input: 1, output: 2, cacheRead: 0.5, cacheWrite: 1 },
        turnTimeoutMs: 60_000,
      },
      ...(extra.harnesses ?? []),
    ],
    agents: [
      {
        name: 'scripted',
        description: 'follows its script',
        harness: 'scripted',
        systemPrompt: 'You follow scripts.',
        actions: ['write_file', 'read_file', 'echo'],
        guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 120_000 },
        turnAttempts: 2,
        ...(extra.agent ?? {}),
      },
      ...(extra.agents ?? []),
    ],
    actions: [{ name: 'write_file' }, { name: 'read_file' }, { name: 'list_files' }, { name: 'echo' }, ...(extra.actions ?? [])],
  };
}

export const ok = (result = 'done') => ({ envelope: { step: 'success', result } });
export const act = (...actions: { name: string; params: Obj }[]) => ({ envelope: { step: 'actions', actions } });
