// Bundles the built package's workflow code (dist/) once per variant into dist/workflow-bundles/, where the worker
// finds the one matching its options (src/workflow-bundle.ts): the image's workers start without bundling.
// Run after `npm run build`: node docker/bundle-workflows.mjs
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { bundleVariants, bundleWorkflows, prebuiltBundleFile } from '../dist/workflow-bundle.js';

for (const variant of bundleVariants) {
  const file = prebuiltBundleFile(variant);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, await bundleWorkflows(variant));
  console.log(`bundled ${path.relative(process.cwd(), file)}`);
}
