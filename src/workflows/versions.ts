/**
 * Which command sequence a run follows (docs/VERSIONING.md). Runs started before `workflowVersion` existed (version 1)
 * replay their first sequence, each later change behind its own patch; a run of version 2 takes every one of those
 * changes without asking, so its history carries no patch markers. A patch made after version 2 is asked as usual.
 */
import { patched } from '@temporalio/workflow';
import { affinityPatch, endHerePatch, turnHerePatch } from './affinity.js';
import { PENDING_APPROVALS_PATCH } from './approval-handlers.js';
import { OUTCOMES_PATCH } from './outcomes.js';
import { workflowVersion } from './types.js';

/** Whether the change behind a patch id applies to this run. */
export type Since = (patchId: string) => boolean;

/** Every patch made before version 2: a run of version 2 takes them all, with no marker. */
export const patchesBeforeVersion2: ReadonlySet<string> = new Set([
  'acct8-failed-spend',
  'acct8-turn-budget',
  'acct8-interrupted-turn-spend',
  'acct8-end-session-retry',
  affinityPatch,
  turnHerePatch,
  endHerePatch,
  PENDING_APPROVALS_PATCH,
  OUTCOMES_PATCH,
]);

export function changesSince(version: number | undefined): Since {
  if (!opensInOneStep(version)) return patched;
  return (patchId) => patchesBeforeVersion2.has(patchId) || patched(patchId);
}

/** Whether the run starts in one local activity (`openRun`) instead of `resolveAgent` then `startSession`: version 2 on. */
export function opensInOneStep(version: number | undefined): boolean {
  return (version ?? 1) >= 2;
}

/**
 * A run started by newer code than this worker's (a rolling deploy) must not run here: this worker would make the
 * commands of an older sequence, which the newer workers could not replay. A plain error fails the workflow task,
 * not the run; Temporal retries the task until a worker that knows the version takes it.
 */
export function assertKnownVersion(version: number | undefined): void {
  if (version !== undefined && (!Number.isInteger(version) || version < 1 || version > workflowVersion)) {
    throw new Error(`this worker runs workflow versions 1 to ${workflowVersion}, the run asks for version ${String(version)}: deploy the newer worker (the run waits for it)`);
  }
}
