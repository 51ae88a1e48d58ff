/**
 * The workflow code a worker runs, and bundles of it built ahead of time: the worker image bundles at build time
 * (docker/bundle-workflows.mjs), so a worker starts without webpack's second and 200 MB. A bundle fixes two things
 * the worker's options must match — the failure converter (encrypted payloads) and the workflow interceptor modules
 * (tracing) — so there is one file per combination, and a worker whose options match none bundles at start.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DataConverter } from '@temporalio/common';
import { bundleWorkflowCode, type WorkerOptions } from '@temporalio/worker';
import { encryptingFailureConverterPath } from './codec/keys.js';
import { tracingBundlerPlugins } from './observability/tracing.js';

/**
 * The workflow entry the worker bundles: the compiled `workflows/index.js` beside this file in the built package
 * (dist/), the TypeScript source when running from a checkout (tsx, vitest).
 */
export const workflowsPath = [
  fileURLToPath(new URL('./workflows/index.js', import.meta.url)),
  fileURLToPath(new URL('./workflows/index.ts', import.meta.url)),
].find((file) => existsSync(file))!;

/** What a bundle was built for. */
export interface BundleVariant {
  /** With the encrypting failure converter (DURABLE_HARNESS_PAYLOAD_KEYS set). */
  readonly encrypted: boolean;
  /** With the tracing workflow interceptors (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set). */
  readonly traced: boolean;
}

export const bundleVariants: readonly BundleVariant[] = [false, true].flatMap((encrypted) => [false, true].map((traced) => ({ encrypted, traced })));

/** `workflow-bundles/` beside this file: dist/workflow-bundles in the built package. */
export function prebuiltBundleFile(variant: BundleVariant, dir = fileURLToPath(new URL('./workflow-bundles/', import.meta.url))): string {
  return path.join(dir, `${variant.encrypted ? 'encrypted' : 'plain'}${variant.traced ? '-traced' : ''}.js`);
}

const quiet = { info() {}, warn() {}, error: console.error, debug() {}, trace() {}, log() {} };

/** Bundles the workflow code for one variant (about a second and 200 MB). */
export async function bundleWorkflows(variant: BundleVariant): Promise<string> {
  const { code } = await bundleWorkflowCode({
    workflowsPath,
    ...(variant.encrypted ? { failureConverterPath: encryptingFailureConverterPath } : {}),
    plugins: variant.traced ? tracingBundlerPlugins() : [],
    logger: quiet as never,
  });
  return code;
}

/** The prebuilt bundle for a worker with this data converter and tracing, when there is one; else undefined. */
export function prebuiltWorkflowBundle(dataConverter: DataConverter, traced: boolean): WorkerOptions['workflowBundle'] | undefined {
  const failureConverter = dataConverter.failureConverterPath;
  if (failureConverter && failureConverter !== encryptingFailureConverterPath) return undefined;
  if (dataConverter.payloadConverterPath) return undefined;
  const file = prebuiltBundleFile({ encrypted: failureConverter !== undefined, traced });
  return existsSync(file) ? { codePath: file } : undefined;
}
