/**
 * The chaos suite's short form, part of `npm test`: worker SIGKILLs during turns, a Temporal server restart, a
 * read-only ledger window, a cancel storm and a host SIGKILLed mid-turn (two worker processes as hosts) against real
 * runs (see driver.ts for what is checked per run).
 * `npm run chaos` runs the full form and writes docs/RELIABILITY.md.
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { repoRoot } from '../support/worker.js';
import { runChaos, shortPlan } from './driver.js';

it('every token counted under every fault (short form): ledger = served, nothing lost, nothing counted twice, ended once, no orphans', { timeout: 300_000 }, async () => {
  mkdirSync(path.join(repoRoot, '.data'), { recursive: true });
  const report = await runChaos(shortPlan, { dataDir: mkdtempSync(path.join(repoRoot, '.data', 'chaos-test-')) });
  expect(report.injected).toMatchObject({ workerKills: shortPlan.workerKills, serverRestarts: shortPlan.serverRestarts, cancels: shortPlan.cancelStorm });
  expect(report.injected.readOnlyMs).toBeGreaterThanOrEqual(shortPlan.readOnlyMs);
  expect(report.injected.hostKills).toBe(shortPlan.hostLoss.kills);
  expect(report.runs).toHaveLength(shortPlan.runs + shortPlan.cancelStorm + shortPlan.hostLoss.runs);
  expect(report.problems).toEqual([]);
  expect(report.lost).toEqual([]);
  expect(report.orphans).toEqual([]);
  // Faults really cost attempts: the books show the unused ones, and still add up.
  expect(report.runs.reduce((n, c) => n + c.unusedAttempts, 0)).toBeGreaterThan(0);
  for (const run of report.runs) expect(run.ledger).toEqual(run.served);
});
