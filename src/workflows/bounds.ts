/**
 * Bounds on the harness-written text that reaches workflow history: a turn's result, the next turn's request, the
 * run's state (status query, continue-as-new). Temporal refuses a payload over 2 MiB, and a run whose turn result or
 * next request cannot be recorded wedges, so every such list and text is bounded where it is made. Pure: shared by
 * the workflow and the turn activity (test/workflows/payload-bounds.test.ts builds the worst case they allow).
 */

/** An action or sub-agent name the agent does not have (a catalog name is never clipped). */
export const MAX_UNKNOWN_NAME_CHARS = 64;
/** Why one action call was refused (its parameter problems). */
export const MAX_CALL_PROBLEM_CHARS = 300;
/** What was wrong with a reply, as fed back to the harness. */
export const MAX_TURN_PROBLEM_CHARS = 4000;
/** A harness's own error message, in a turn's failure or result. */
export const MAX_HARNESS_MESSAGE_CHARS = 2000;
/** The message of an `actions` step. */
export const MAX_ACTIONS_MESSAGE_CHARS = 500;
/** A harness session id longer than this is not kept (the next turn replays the conversation instead). */
export const MAX_SESSION_ID_CHARS = 512;
/** The allowed names listed in a refusal: the harness's system prompt has the whole list. */
export const MAX_ALLOWED_LIST_CHARS = 200;

import type { StepView } from './types.js';

/** `text`, or its opening and how long it was. */
export function clipText(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}… (${text.length} characters in all)` : text;
}

/** A name as history keeps it: one the agent knows stays whole; any other is clipped (and then never matches one). */
export function boundedName(name: string, known: (name: string) => boolean): string {
  return known(name) ? name : clipText(name, MAX_UNKNOWN_NAME_CHARS);
}

/**
 * An `actions` step as history keeps it: each call's name (bounded) and, when validation found its parameters
 * invalid, why (bounded); parameters stay in the ledger. The number of calls is the envelope's cap already.
 */
export function actionsStepView(
  step: { readonly actions: readonly { readonly name: string }[]; readonly message?: string },
  problems: readonly (string | undefined)[],
  known: (name: string) => boolean,
): Extract<StepView, { step: 'actions' }> {
  return {
    step: 'actions',
    calls: step.actions.map((c, i) => ({ name: boundedName(c.name, known), ...(problems[i] ? { problem: clipText(problems[i], MAX_CALL_PROBLEM_CHARS) } : {}) })),
    ...(step.message !== undefined ? { message: clipText(step.message, MAX_ACTIONS_MESSAGE_CHARS) } : {}),
  };
}
