/**
 * Starts ONE real Temporal dev server for the whole test run and bundles the workflow code once.
 * A missing Temporal CLI fails the run: a skipped workflow test tests nothing.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { findTemporalCli, temporalCliInstallHint } from '../../src/temporal/cli-path.js';
import { startDevServer, type DevServer } from '../../src/temporal/dev-server.js';
import { bundleWorkflows } from '../../src/workflow-bundle.js';

declare module 'vitest' {
  export interface ProvidedContext {
    temporalAddress: string;
    /** The dev server's Web UI (test/ui drives a real browser through it). */
    temporalUiUrl: string;
    workflowBundlePath: string;
  }
}

let server: DevServer | undefined;

export async function setup(project: TestProject): Promise<void> {
  const cli = findTemporalCli();
  if (!cli) throw new Error(`The tests need a real Temporal dev server and found no Temporal CLI. ${temporalCliInstallHint}`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-test-'));
  const [started, bundle] = await Promise.all([
    startDevServer({ cliPath: cli.path, logFile: path.join(dir, 'temporal.log'), ui: true }),
    bundleWorkflows({ encrypted: false, traced: false }),
  ]);
  server = started;
  const bundlePath = path.join(dir, 'workflow-bundle.js');
  writeFileSync(bundlePath, bundle);
  project.provide('temporalAddress', server.address);
  project.provide('temporalUiUrl', server.uiUrl!);
  project.provide('workflowBundlePath', bundlePath);
}

export async function teardown(): Promise<void> {
  await server?.stop();
}
