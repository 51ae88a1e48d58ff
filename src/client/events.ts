/**
 * A run's live events for services and operators (`AgentRunHandle.events`): what the harness does, its tool use,
 * usage, approvals, steps and the run's end, as they happen, resumable by cursor.
 *
 * The events come from the run ledger's `events` rows through a `RunEventSource` the caller gives (the client never
 * opens a database itself: `postgresEventSource` in ./postgres-events.ts loads `pg` only when called, and the
 * SQLite tail lives beside the ledger, src/ledger/events.ts). Rows are read in cursor order; a follower keeps the
 * last cursor it yielded, so resuming after it sees nothing twice and misses nothing (the PostgreSQL ledger
 * serialises a run's inserts, so a later cursor never commits before an earlier one).
 */
import type { PermissionKind } from '../contracts/permissions.js';
import type { RunEventSource, StoredEvent } from '../contracts/run-events.js';
import type { Usage } from '../contracts/usage.js';

export { EVENTS_CHANNEL, type RunEventSource, type StoredEvent } from '../contracts/run-events.js';

/** What a tool use does, in the permission vocabulary's words. */
export type ToolKind = PermissionKind;

/** A tool use: its name as the harness calls it, what it does, and what it acts on (a command, a path, a URL). */
export interface ToolUse {
  readonly name: string;
  readonly kind: ToolKind;
  readonly target?: string;
}

interface EventBase {
  /** Resume after this event: `events({ since: cursor })`. Opaque: compare only for equality. */
  readonly cursor: string;
  readonly at: string;
  readonly turn: number;
}

/** One event of a run (a discriminated union on `type`). Harness text in it is clipped to `maxEventTextChars`. */
export type RunEvent = EventBase &
  (
    | /** What the harness is doing; `tool` when the line names a tool use (claude, gemini, pi, codex). */
    { readonly type: 'activity'; readonly description: string; readonly tool?: ToolUse }
    /** Usage of one model call (or of the calls since the last report); a field the harness did not give is absent. */
    | { readonly type: 'usage'; readonly usage: Usage; readonly costUsd?: number }
    /** The run's tokens and cost so far: what a follower without a ledger gets instead of `usage` (./temporal-events.ts). */
    | { readonly type: 'totals'; readonly tokens: number; readonly costUsd: number }
    /** The harness asks permission for a tool use (decided by the policy or a person: see `approval-decided`). */
    | { readonly type: 'approval-requested'; readonly tool: ToolUse; readonly title: string }
    /** What became of a permission request, and who decided; `requestId` when a rule or a person decided it in the ledger. */
    | { readonly type: 'approval-decided'; readonly tool: string; readonly decision: string; readonly decidedBy: string; readonly requestId?: string; readonly message?: string }
    /** The harness session the turn runs in. */
    | { readonly type: 'session'; readonly sessionId: string; readonly resumed?: boolean; readonly model?: string }
    /** A turn attempt ended: `ok` with its reply (the next-step envelope, clipped), or its error. */
    | { readonly type: 'turn-end'; readonly ok: boolean; readonly text?: string; readonly code?: string; readonly message?: string }
    /** The workflow recorded a step: the turn's next-step envelope (`step:success`, `step:actions`, …) or an action. */
    | { readonly type: 'step'; readonly seq: number; readonly step: string }
    /** An action the workflow ran, and whether it worked. */
    | { readonly type: 'action'; readonly seq: number; readonly action: string; readonly ok: boolean; readonly error?: string }
    /** A turn attempt after a failed one (Temporal's retry). */
    | { readonly type: 'retry'; readonly attempt: number }
    /** The run ended (`source: "temporal"`: closed without writing its end, e.g. terminated; seen from Temporal). */
    | { readonly type: 'end'; readonly status: string; readonly reason?: string; readonly failureType?: string; readonly source?: 'temporal' }
    /** Any other row (permissions posture, network totals, dropped events, …): its ledger type and data as short JSON. */
    | { readonly type: 'note'; readonly name: string; readonly text: string }
  );

/** Harness text in an event is cut here: a follower's memory and a terminal stay bounded whatever a line held. */
export const maxEventTextChars = 4096;

const clip = (text: string, max = maxEventTextChars) => (text.length > max ? `${text.slice(0, max)}… (${text.length} characters in all)` : text);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const shortJson = (v: unknown) => clip(JSON.stringify(v) ?? '', 1024);

const commandTools = /^(bash|shell|sh|exec|run|command|terminal|local_shell)/i;
const editTools = /^(write|edit|multiedit|patch|create|delete|move|apply|notebookedit|file change)/i;
const readTools = /^(read|cat|view|ls|list|glob|grep|find|search|web|fetch)/i;

function kindOf(name: string): ToolKind {
  return commandTools.test(name) ? 'command' : editTools.test(name) ? 'edit' : readTools.test(name) ? 'read' : 'other';
}

/** What a tool input acts on: its command, path, URL or pattern. */
function targetOf(input: unknown): string | undefined {
  if (input === null || typeof input !== 'object') return undefined;
  const fields = input as Record<string, unknown>;
  for (const key of ['command', 'cmd', 'file_path', 'filePath', 'path', 'absolute_path', 'url', 'pattern', 'query']) {
    const value = fields[key];
    if (typeof value === 'string' && value.length > 0) return clip(value, 1024);
    if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return clip(value.join(' '), 1024);
  }
  return undefined;
}

/**
 * The tool use an adapter's activity line names: `Name {json input}` (claude, gemini, pi), `command: …` and
 * `file change: …` (codex). Anything else is no tool use.
 */
export function toolUseOf(description: string): ToolUse | undefined {
  const prefixed = /^(command|file change|mcp|web search): (.*)$/s.exec(description);
  if (prefixed) {
    const [, name, rest] = prefixed as unknown as [string, string, string];
    const target = name === 'command' ? rest.replace(/ → [^→]*$/, '') : rest;
    return { name, kind: name === 'command' ? 'command' : name === 'file change' ? 'edit' : name === 'web search' ? 'read' : 'other', target: clip(target, 1024) };
  }
  const named = /^([A-Za-z_][\w.:-]{0,63}) (\{.*\})$/s.exec(description);
  if (!named) return undefined;
  let input: unknown;
  try {
    input = JSON.parse(named[2]!);
  } catch {
    return undefined;
  }
  const target = targetOf(input);
  return { name: named[1]!, kind: kindOf(named[1]!), ...(target !== undefined ? { target } : {}) };
}

/** A ledger row as the run event a follower gets. */
export function runEventOf(row: StoredEvent): RunEvent {
  const base = { cursor: String(row.cursor), at: row.at, turn: row.turn };
  const d = (row.data ?? {}) as Record<string, unknown>;
  switch (row.type) {
    case 'activity': {
      const description = str(d.description) ?? '';
      const tool = toolUseOf(description);
      return { ...base, type: 'activity', description: clip(description), ...(tool ? { tool } : {}) };
    }
    case 'usage': {
      const costUsd = num(d.costUsd);
      return { ...base, type: 'usage', usage: (d.usage ?? {}) as Usage, ...(costUsd !== undefined ? { costUsd } : {}) };
    }
    case 'permission-request': {
      const name = str(d.tool) ?? '';
      const kind = (['command', 'edit', 'read', 'other'] as const).find((k) => k === d.kind) ?? kindOf(name);
      const paths = Array.isArray(d.paths) ? d.paths.filter((p): p is string => typeof p === 'string') : [];
      const target = str(d.command) ?? (paths.length ? paths.join(' ') : targetOf(d.input));
      return { ...base, type: 'approval-requested', tool: { name: clip(name, 256), kind, ...(target !== undefined ? { target: clip(target, 1024) } : {}) }, title: clip(str(d.title) ?? name) };
    }
    case 'permission-decision':
      return {
        ...base,
        type: 'approval-decided',
        tool: clip(str(d.tool) ?? '', 256),
        decision: str(d.decision) ?? '',
        decidedBy: clip(str(d.decidedBy) ?? '', 256),
        ...(str(d.approvalId) !== undefined ? { requestId: clip(str(d.approvalId)!, 256) } : {}),
        ...(str(d.message) !== undefined ? { message: clip(str(d.message)!) } : {}),
      };
    case 'session':
      return {
        ...base,
        type: 'session',
        sessionId: clip(str(d.sessionId) ?? '', 256),
        ...(typeof d.resumed === 'boolean' ? { resumed: d.resumed } : {}),
        ...(str(d.model) !== undefined ? { model: clip(str(d.model)!, 256) } : {}),
      };
    case 'turn-complete':
      return { ...base, type: 'turn-end', ok: true, text: clip(str(d.text) ?? '') };
    case 'session-error':
      return { ...base, type: 'turn-end', ok: false, code: str(d.code) ?? 'error', message: clip(str(d.message) ?? '') };
    case 'step':
      return { ...base, type: 'step', seq: num(d.seq) ?? 0, step: clip(str(d.step) ?? '', 256) };
    case 'action':
      return { ...base, type: 'action', seq: num(d.seq) ?? 0, action: clip(str(d.action) ?? '', 256), ok: d.ok === true, ...(str(d.error) !== undefined ? { error: clip(str(d.error)!) } : {}) };
    case 'retry':
      return { ...base, type: 'retry', attempt: num(d.attempt) ?? 0 };
    case 'end':
      return {
        ...base,
        type: 'end',
        status: str(d.status) ?? 'unknown',
        ...(str(d.reason) !== undefined ? { reason: clip(str(d.reason)!) } : {}),
        ...(str(d.failureType) !== undefined ? { failureType: str(d.failureType)! } : {}),
      };
    default:
      return { ...base, type: 'note', name: clip(row.type, 256), text: shortJson(row.data) };
  }
}

/** How a run that closed without an end row ended, from Temporal (undefined while it is open). */
export type ClosedCheck = () => Promise<{ status: string; reason: string } | undefined>;

export interface FollowEventsOptions {
  /** Resume after this cursor (an event's `cursor`); absent = from the run's first event. */
  readonly since?: string;
  /** Stops the iteration (it then ends without an error). */
  readonly signal?: AbortSignal;
  /** Stop at the end of what is stored instead of waiting for more (`logs` without `--follow`). */
  readonly follow?: boolean;
  /** Asked after `closedCheckMs` without a row: a run Temporal closed without its end row still ends the follow. */
  readonly closed?: ClosedCheck;
  readonly closedCheckMs?: number;
}

/** The cursor as a ledger position, or a clear error naming what a cursor looks like. */
export function ledgerCursor(since: string | undefined): number {
  if (since === undefined) return 0;
  if (!/^\d{1,15}$/.test(since)) throw new RangeError(`the cursor "${since.slice(0, 40)}" is not one an event gave: a ledger cursor is a whole number (an event's "cursor" field)`);
  return Number(since);
}

const page = 100;

/**
 * The run's events from `source` in cursor order, from after `since`; with `follow` (the default) it waits for new
 * ones and ends after the run's `end` event (or when `signal` aborts).
 */
export async function* followRunEvents(source: RunEventSource, workflowId: string, options: FollowEventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
  let cursor = ledgerCursor(options.since);
  const signal = options.signal ?? new AbortController().signal;
  const closedCheckMs = options.closedCheckMs ?? 5000;
  let quietSince = Date.now();
  while (!signal.aborted) {
    const rows = await source.read(workflowId, cursor, page);
    for (const row of rows) {
      cursor = row.cursor;
      const event = runEventOf(row);
      yield event;
      if (event.type === 'end' || signal.aborted) return;
    }
    if (rows.length === page) continue;
    if (options.follow === false) return;
    if (rows.length > 0) quietSince = Date.now();
    else if (options.closed && Date.now() - quietSince >= closedCheckMs) {
      quietSince = Date.now();
      const closed = await options.closed().catch(() => undefined);
      // Read once more: the end row may have landed just before the run closed.
      if (closed && (await source.read(workflowId, cursor, 1)).length === 0) {
        yield { cursor: String(cursor), at: new Date().toISOString(), turn: 0, type: 'end', status: closed.status, reason: closed.reason, source: 'temporal' };
        return;
      }
    }
    await source.wait(workflowId, cursor, { signal, maxWaitMs: closedCheckMs });
  }
}
