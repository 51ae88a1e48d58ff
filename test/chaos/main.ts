/**
 * `npm run chaos`: the full chaos suite (bounded: a fixed number of faults and runs, and a deadline), then its
 * figures into docs/RELIABILITY.md. Exits 1 when a check fails. `npm run chaos -- --short` runs the CI form.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fullPlan, reportMarkdown, runChaos, shortPlan } from './driver.js';

const repoRoot = path.resolve(import.meta.dirname, '..', '..');
const short = process.argv.includes('--short');
const plan = short ? shortPlan : fullPlan;
// Not under /tmp: nothing here needs it, and a CLI harness would (codex's sandbox helper breaks there).
const dataDir = mkdtempSync(path.join(repoRoot, '.data', 'chaos-'));
const report = await runChaos(plan, { dataDir, log: (line) => process.stdout.write(`${line}\n`) });
const markdown = reportMarkdown(report, short ? 'npm run chaos -- --short' : 'npm run chaos');
writeFileSync(path.join(repoRoot, 'docs', 'RELIABILITY.md'), markdown);
process.stdout.write(`\n${markdown}\n(data in ${dataDir})\n`);
process.exit(report.problems.length ? 1 : 0);
