/**
 * Starts ONE real Temporal dev server for the whole test run, shared by the projects that need one (integration,
 * live). A missing Temporal CLI fails the run: a skipped workflow test tests nothing. The workflow bundle comes
 * from bundle-setup.ts.
 */
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { findTemporalCli, temporalCliInstallHint } from '../../src/temporal/cli-path.js';
import { startDevServer, type DevServer } from '../../src/temporal/dev-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    /** The dev server's Web UI (test/ui drives a real browser through it). */
    temporalUiUrl: string;
  }
}

/** Global setups of all projects run in vitest's main process: the first project starts the server, the last stops it. */
const shared = globalThis as { durableHarnessServer?: Promise<DevServer>; durableHarnessServerUsers?: number };

async function startOnce(): Promise<DevServer> {
  const cli = findTemporalCli();
  if (!cli) throw new Error(`The tests need a real Temporal dev server and found no Temporal CLI. ${temporalCliInstallHint}`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-test-'));
  return startDevServer({ cliPath: cli.path, logFile: path.join(dir, 'temporal.log'), ui: true });
}

export async function setup(project: TestProject): Promise<void> {
  const server = await (shared.durableHarnessServer ??= startOnce());
  shared.durableHarnessServerUsers = (shared.durableHarnessServerUsers ?? 0) + 1;
  project.provide('temporalAddress', server.address);
  project.provide('temporalUiUrl', server.uiUrl!);
}

export async function teardown(): Promise<void> {
  shared.durableHarnessServerUsers = (shared.durableHarnessServerUsers ?? 1) - 1;
  if (shared.durableHarnessServerUsers > 0 || !shared.durableHarnessServer) return;
  const server = await shared.durableHarnessServer;
  delete shared.durableHarnessServer;
  await server.stop();
}
