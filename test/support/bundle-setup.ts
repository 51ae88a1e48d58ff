/**
 * Bundles the workflow code ONCE for the whole test run (every project that runs workflow code shares the bundle:
 * the replay suite, the time-skipping tier and every worker of the server tiers).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { bundleWorkflows } from '../../src/workflow-bundle.js';

declare module 'vitest' {
  export interface ProvidedContext {
    workflowBundlePath: string;
  }
}

/** Global setups of all projects run in vitest's main process: the first project bundles, the others reuse it. */
const shared = globalThis as { durableHarnessBundle?: Promise<string> };

async function bundleOnce(): Promise<string> {
  const bundle = await bundleWorkflows({ encrypted: false, traced: false });
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'dh-bundle-')), 'workflow-bundle.js');
  writeFileSync(file, bundle);
  return file;
}

export async function setup(project: TestProject): Promise<void> {
  project.provide('workflowBundlePath', await (shared.durableHarnessBundle ??= bundleOnce()));
}
