/** Replays recorded CLI fixtures (test/fixtures/<cli>/<case>.jsonl + .meta.json) through a fake executor. */
import type { DriverSession, HarnessSessionConfig } from '../support/driver-session.js';
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HarnessEvent, PermissionPosture } from '../../src/adapters/types.js';
import { FakeExecutor, type FakeRun } from './fake-executor.js';

const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures');

/** The fake key the tests give the adapters: it must never show up in argv or config files. */
export const testKey = 'sk-test-secret-do-not-leak-0123';

/** One recorded process: its stdout lines, exit code and stderr tail. */
export function fixtureRun(cli: string, name: string): FakeRun {
  const text = readFileSync(path.join(fixtures, cli, `${name}.jsonl`), 'utf8');
  const meta = JSON.parse(readFileSync(path.join(fixtures, cli, `${name}.meta.json`), 'utf8')) as { exitCode: number | null; stderrTail: string };
  return { lines: text.split('\n').filter((l) => l !== ''), exitCode: meta.exitCode, stderr: meta.stderrTail };
}

/** The parsed lines of a fixture, for reading expected numbers out of it. */
export function fixtureLines(cli: string, name: string): Record<string, unknown>[] {
  return (fixtureRun(cli, name).lines ?? []).map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Starts an adapter on a fresh temp workspace with a fake executor replaying `runs`. */
export async function startWith(
  adapter: DriverSession,
  runs: FakeRun[],
  options: { keyEnv: string; model?: string; baseUrl?: string; posture?: PermissionPosture; systemPrompt?: string; extra?: Partial<HarnessSessionConfig> },
): Promise<{ executor: FakeExecutor; workspace: string }> {
  const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-adapter-'));
  const executor = new FakeExecutor(runs);
  adapter.applyPermissionPolicy(options.posture ?? 'auto');
  if (options.systemPrompt !== undefined) adapter.setSystemPrompt(options.systemPrompt);
  await adapter.start({
    runId: 'run-1',
    harnessName: 'test',
    executable: '/opt/cli/bin/harness',
    baseArgs: [],
    model: options.model,
    workspacePath: workspace,
    hostWorkspacePath: workspace,
    env: { [options.keyEnv]: testKey },
    executor,
    baseUrl: options.baseUrl,
    turnTimeoutMs: 5000,
    ...options.extra,
  });
  return { executor, workspace };
}

/** Runs one turn and collects its events. */
export async function collect(adapter: DriverSession, prompt = 'go', turn = 1): Promise<HarnessEvent[]> {
  const events: HarnessEvent[] = [];
  for await (const event of adapter.runTurn({ prompt, turn })) events.push(event);
  return events;
}

/** The terminal events of a turn (there must be exactly one, last). */
export function terminals(events: HarnessEvent[]): HarnessEvent[] {
  return events.filter((e) => e.type === 'turn-complete' || e.type === 'session-error');
}

/** A fixture cut in the middle of a line, as when a process dies while writing. */
export function truncated(run: FakeRun, exitCode: number | null = null): FakeRun {
  const lines = [...(run.lines ?? [])];
  const last = lines.pop() ?? '{"type":';
  return { lines: [...lines, last.slice(0, Math.floor(last.length / 2))], exitCode, stderr: 'killed' };
}
