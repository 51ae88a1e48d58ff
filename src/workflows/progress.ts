/**
 * The turn in flight as the Temporal UI's current details show it. The UI reads current details through the
 * workflow's metadata query, and workflow code sees nothing of the turn's heartbeats: so the turn activity signals
 * its own run (`turnProgress`) at most once per the agent's `progressIntervalMs` (default 10 s), and only when what it
 * reports changed — one signal event and one workflow task per note, never one per harness line.
 *
 * Like the approval notifications it is not a control: anyone who reaches Temporal can send a signal by name, so a
 * note is only displayed, never decided on, and is bounded here whatever it carries.
 */
import { escapeControl } from '../contracts/visible-text.js';

/** What the turn activity reports about its turn. */
export interface TurnProgressNote {
  readonly turn: number;
  readonly attempt: number;
  /** What the harness is doing: its last event, redacted by the activity (e.g. `reading files`). */
  readonly activity: string;
  /** Tokens and cost of the attempt so far (the run's counters move when the turn ends). */
  readonly tokens: number;
  readonly costUsd: number;
}

/** What a note's activity may weigh (it is shown in one line). */
export const PROGRESS_ACTIVITY_CHARS = 200;

/** How often the turn activity may signal its run when the agent does not say (ms). */
export const DEFAULT_PROGRESS_INTERVAL_MS = 10_000;

const count = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/**
 * The note to show, from a signal's argument: the turn in flight's (`turn`), of its latest attempt (a late note of an
 * earlier attempt does not replace a newer one), bounded; undefined when there is nothing to show from it.
 */
export function progressNoteOf(arg: unknown, turn: number | undefined, shown: TurnProgressNote | undefined): TurnProgressNote | undefined {
  if (turn === undefined || arg === null || typeof arg !== 'object') return undefined;
  const n = arg as Record<string, unknown>;
  if (n.turn !== turn || !Number.isInteger(n.attempt) || !count(n.attempt) || !count(n.tokens) || !count(n.costUsd) || typeof n.activity !== 'string') return undefined;
  if (shown && shown.turn === turn && (n.attempt as number) < shown.attempt) return undefined;
  return { turn, attempt: n.attempt as number, activity: n.activity.slice(0, PROGRESS_ACTIVITY_CHARS), tokens: Math.round(n.tokens as number), costUsd: n.costUsd as number };
}

/** The details line of the turn in flight; `at`: workflow time (ms) when the note came. */
export function progressLine(note: TurnProgressNote, at: number): string {
  const cost = note.costUsd > 0 ? ` · $${note.costUsd.toFixed(4)}` : '';
  return `turn ${note.turn} in flight · attempt ${note.attempt} · ${note.tokens} tokens${cost} so far · ${inlineCode(escapeControl(note.activity))} (as of ${new Date(at).toISOString().slice(11, 19)} UTC)`;
}

/** `text` as Markdown inline code: nothing in it renders as markup, whatever backticks it holds; on one line. */
export function inlineCode(text: string): string {
  const flat = text.replace(/[\r\n]+/g, ' ');
  const fence = '`'.repeat(longestRun(flat, '`') + 1);
  return `${fence} ${flat} ${fence}`;
}

/** `text` as a Markdown fenced code block, the fence longer than any backtick run in it. */
export function codeBlock(text: string): string {
  const fence = '`'.repeat(Math.max(3, longestRun(text, '`') + 1));
  return `${fence}\n${text}\n${fence}`;
}

function longestRun(text: string, c: string): number {
  let longest = 0;
  let run = 0;
  for (const ch of text) {
    run = ch === c ? run + 1 : 0;
    longest = Math.max(longest, run);
  }
  return longest;
}
