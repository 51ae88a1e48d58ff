/**
 * Which command sequence a run follows (docs/VERSIONING.md). Runs started before `workflowVersion` existed (version 1)
 * replay their first sequence, each later change behind its own patch; a run of version 2 takes every one of those
 * changes without asking, so its history carries no patch markers. A patch made after version 2 is asked as usual.
 */
import { patched } from '@temporalio/workflow';
import { affinityPatch, endHerePatch, turnHerePatch } from './affinity.js';
import { PENDING_APPROVALS_PATCH } from './approval-handlers.js';
import { OUTCOMES_PATCH } from './outcomes.js';

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
  if ((version ?? 1) < 2) return patched;
  return (patchId) => patchesBeforeVersion2.has(patchId) || patched(patchId);
}

/** Whether the run starts in one local activity (`openRun`) instead of `resolveAgent` then `startSession`. */
export function opensInOneStep(version: number | undefined): boolean {
  return (version ?? 1) >= 2;
}
